//! Stream-ordered allocation (`cudaMallocAsync`, `cudaFreeAsync`) and the devices'
//! default memory pools.
//!
//! Stream-ordered allocations enter the guest's registry of device ranges like
//! `cudaMalloc`'s (the host charges them to the guest's quota the same way). A pool
//! handle is the device's default pool, named in the guest by its device number (a
//! tagged value, never a host pointer); the guest sees no other pools.

use std::ffi::c_void;

use vmcuda_wire::graph::{
    pool_attr, MemAccess, MemAllocAsync, MemFreeAsync, MemPoolGetAttribute, MemPoolSetAccess,
    MemPoolSetAttribute, MemPoolTrimTo,
};
use vmcuda_wire::CudaStatus;

use super::device::device_count;
use super::{call, guard, stream_handle, RawHandle, Result};
use crate::capture;
use crate::gate;
use crate::state::{self, registry};
use crate::{caller, cudaError_t};

/// `cudaMemPool_t` of device d's default pool: this tag plus d.
const POOL_TAG: u64 = 0x00de_fa17_0000_0000;

/// The device whose default pool `pool` names.
fn pool_device(pool: RawHandle) -> Result<i32> {
    let device = (pool as u64).wrapping_sub(POOL_TAG);
    if device >= device_count()? as u64 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(device as i32)
}

/// Run a call about device `device`'s default pool on that device's host, `make`
/// given the host's own number for the device.
fn on_pool_host<R: vmcuda_wire::op::Request>(
    device: i32,
    make: impl FnOnce(i32) -> R,
) -> Result<R::Reply> {
    let req = make(super::local_device(device)?);
    super::on_host_of(Some(device), || call(&req))
}

/// # Safety
/// `ptr` is NULL or writable.
unsafe fn malloc_async(ptr: *mut *mut c_void, size: usize, stream: RawHandle) -> Result<()> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let stream = stream_handle(stream, false);
    capture::check_stream_use(stream)?;
    // From the pool of the stream's device, on that device's host.
    let device = super::device_of_stream(stream).unwrap_or_else(state::current_device);
    let req = MemAllocAsync {
        size: size as u64,
        stream,
    };
    let p = super::on_host_of(Some(device), || call(&req))?.ptr;
    registry().add_device_range(p, size as u64, device);
    // SAFETY: as `malloc_async`'s caller promised.
    unsafe { caller::write(ptr, p as *mut c_void) }
}

#[no_mangle]
pub extern "C" fn cudaMallocAsync(
    ptr: *mut *mut c_void,
    size: usize,
    stream: RawHandle,
) -> cudaError_t {
    // SAFETY: by cudaMallocAsync's contract its pointer arguments are as `malloc_async`
    // requires.
    guard("cudaMallocAsync", || unsafe {
        malloc_async(ptr, size, stream)
    })
}

#[no_mangle]
pub extern "C" fn cudaFreeAsync(ptr: *mut c_void, stream: RawHandle) -> cudaError_t {
    guard("cudaFreeAsync", || {
        let stream = stream_handle(stream, false);
        capture::check_stream_use(stream)?;
        let req = MemFreeAsync {
            ptr: ptr as u64,
            stream,
        };
        // Memory this process allocated, freed on a stream it knows: nothing for the
        // host to refuse at once, so the free is posted in stream order.
        let start = registry().device_range(ptr as u64).map(|r| r.0);
        if start == Some(ptr as u64) && super::known_stream(stream) {
            registry().remove_device_range(ptr as u64);
            let device = super::device_of_stream(stream);
            return super::on_host_of(device, || {
                gate::submit(stream, move || super::post(&req, &[]))
            });
        }
        super::memory::free_device(ptr as u64, |_| call(&req))
    })
}

#[no_mangle]
pub extern "C" fn cudaDeviceGetDefaultMemPool(pool: *mut RawHandle, device: i32) -> cudaError_t {
    guard("cudaDeviceGetDefaultMemPool", || {
        if device < 0 || device >= device_count()? {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // SAFETY: by cudaDeviceGetDefaultMemPool's contract `pool` is NULL or writable.
        unsafe { caller::write(pool, (POOL_TAG + device as u64) as RawHandle) }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemPoolGetAttribute(
    pool: RawHandle,
    attr: u32,
    value: *mut c_void,
) -> cudaError_t {
    guard("cudaMemPoolGetAttribute", || {
        let device = pool_device(pool)?;
        if !pool_attr::is_known(attr) || value.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let v = on_pool_host(device, |device| MemPoolGetAttribute { device, attr })?.value;
        if pool_attr::is_int(attr) {
            // SAFETY: by cudaMemPoolGetAttribute's contract `value.cast::<i32>()` is NULL
            // or writable.
            unsafe { caller::write(value.cast::<i32>(), v as i32) }
        } else {
            // SAFETY: by cudaMemPoolGetAttribute's contract `value.cast::<u64>()` is NULL
            // or writable.
            unsafe { caller::write(value.cast::<u64>(), v) }
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemPoolSetAttribute(
    pool: RawHandle,
    attr: u32,
    value: *mut c_void,
) -> cudaError_t {
    guard("cudaMemPoolSetAttribute", || {
        let device = pool_device(pool)?;
        if !pool_attr::is_known(attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let value = if pool_attr::is_int(attr) {
            // SAFETY: by cudaMemPoolSetAttribute's contract `value.cast::<i32>()` is NULL
            // or readable.
            unsafe { caller::read(value.cast::<i32>()) }? as u64
        } else {
            // SAFETY: by cudaMemPoolSetAttribute's contract `value.cast::<u64>()` is NULL
            // or readable.
            unsafe { caller::read(value.cast::<u64>()) }?
        };
        on_pool_host(device, |device| MemPoolSetAttribute {
            device,
            attr,
            value,
        })
    })
}

#[no_mangle]
pub extern "C" fn cudaMemPoolTrimTo(pool: RawHandle, min_bytes_to_keep: usize) -> cudaError_t {
    guard("cudaMemPoolTrimTo", || {
        on_pool_host(pool_device(pool)?, |device| MemPoolTrimTo {
            device,
            min_bytes_to_keep: min_bytes_to_keep as u64,
        })
    })
}

/// `cudaMemLocationTypeDevice`.
const LOCATION_DEVICE: i32 = 1;

/// `cudaMemAccessDesc`: a `cudaMemLocation` (type, id) and the access flags.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawAccessDesc {
    location_type: i32,
    location_id: i32,
    flags: u32,
}

#[no_mangle]
pub extern "C" fn cudaMemPoolSetAccess(
    pool: RawHandle,
    descs: *const c_void,
    count: usize,
) -> cudaError_t {
    guard("cudaMemPoolSetAccess", || {
        let device = pool_device(pool)?;
        // There are at most as many descriptors as devices that could be named.
        if count > 64 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let descs = descs.cast::<RawAccessDesc>();
        let access = (0..count)
            .map(|i| {
                // SAFETY: by cudaMemPoolSetAccess's contract `descs.wrapping_add(i)` is
                // NULL or readable.
                let d = unsafe { caller::read(descs.wrapping_add(i)) }?;
                // A device location is named by its host's own number; another host's
                // device can never reach this pool.
                let location_id = if d.location_type == LOCATION_DEVICE {
                    if super::on_different_hosts(device, d.location_id)? {
                        return Err(CudaStatus::ErrorInvalidDevice);
                    }
                    super::local_device(d.location_id)?
                } else {
                    d.location_id
                };
                Ok(MemAccess {
                    location_type: d.location_type,
                    location_id,
                    flags: d.flags,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        on_pool_host(device, |device| MemPoolSetAccess { device, access })
    })
}
