//! Stream-ordered allocation (`cudaMallocAsync`, `cudaMallocFromPoolAsync`,
//! `cudaFreeAsync`) and memory pools: each device's default pool and the pools the
//! program makes (`cudaMemPoolCreate`).
//!
//! Stream-ordered allocations enter the guest's registry of device ranges like
//! `cudaMalloc`'s (the host charges them to the guest's quota the same way). A pool
//! handle is a tagged value, never a host pointer: the default pool of device d is
//! [`POOL_TAG`] + d; a pool the program made is [`MADE_TAG`] + a number of this
//! process's, which names the pool's device and the host's handle for it. Each device's
//! current pool (`cudaDeviceSetMemPool`) is kept here; `cudaMallocAsync` allocates from
//! it. A pool made with POSIX descriptor handles may be exported, and its allocations
//! too, for the same program or another process of the VM to import: the host does
//! both with the driver. The descriptor and the pointer export data carry the token of
//! the daemon's registry (docs/ipc.md), never the host's or the driver's data; an
//! export of this process's is imported by the host's number for it, in its own
//! worker, another process's through the registry by the importer's worker.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use std::os::fd::AsFd;

use vmcuda_wire::graph::{
    pool_attr, MemAccess, MemAllocAsync, MemAllocFromPoolAsync, MemFreeAsync, MemPoolCreate,
    MemPoolDestroy, MemPoolGetAccess, MemPoolGetAttribute, MemPoolHandle, MemPoolSetAccess,
    MemPoolSetAttribute, MemPoolTrimTo, PoolRef,
};
use vmcuda_wire::op::{
    MemPoolExportPointer, MemPoolExportShareable, MemPoolImportPointer, MemPoolImportShareable,
    MemPoolImportShared, MemPoolImportSharedPointer, MemPoolShareExport,
};
use vmcuda_wire::CudaStatus;

use super::device::device_count;
use super::ipc::{descriptor, descriptor_token, KIND_POOL, KIND_POOL_POINTER};
use super::{call, guard, stream_handle, RawHandle, Result};
use crate::abi::driver::IpcHandle;
use crate::abi::runtime::{RawAccessDesc, RawPoolProps};
use crate::capture;
use crate::gate;
use crate::state::{self, registry};
use crate::{caller, cudaError_t};

/// `cudaMemPool_t` of device d's default pool: this tag plus d.
const POOL_TAG: u64 = 0x00de_fa17_0000_0000;
/// `cudaMemPool_t` of the n-th pool the program made: this tag plus n.
const MADE_TAG: u64 = 0x00de_fa18_0000_0000;

/// A pool the program made: its device (the program's number) and the host's handle.
#[derive(Clone, Copy)]
struct Made {
    device: i32,
    host: MemPoolHandle,
}

#[derive(Default)]
struct Pools {
    /// The pools the program made and has not destroyed, by their number.
    made: HashMap<u64, Made>,
    /// Each device's current pool (its handle's value), where the program set one
    /// other than the default.
    current: HashMap<i32, u64>,
}

static POOLS: LazyLock<Mutex<Pools>> = LazyLock::new(Default::default);
static NEXT_MADE: AtomicU64 = AtomicU64::new(1);

fn pools() -> MutexGuard<'static, Pools> {
    POOLS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pool a handle names: its device (the program's number) and the pool as the
/// device's host knows it (with the program's device number for a default pool; see
/// [`on_pool_host`]).
fn resolve(pool: RawHandle) -> Result<(i32, Option<MemPoolHandle>)> {
    let value = pool as u64;
    if let Some(n) = value.checked_sub(MADE_TAG).filter(|&n| n < 1 << 32) {
        let made = pools().made.get(&n).copied();
        return match made {
            Some(m) => Ok((m.device, Some(m.host))),
            None => Err(CudaStatus::ErrorInvalidValue),
        };
    }
    let device = value.wrapping_sub(POOL_TAG);
    if device >= device_count()? as u64 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok((device as i32, None))
}

/// Run a call about `pool` on its device's host, `make` given the pool as that host
/// names it.
fn on_pool_host<R: vmcuda_wire::op::Request>(
    pool: RawHandle,
    make: impl FnOnce(PoolRef) -> R,
) -> Result<R::Reply> {
    let (device, made) = resolve(pool)?;
    let on_host = match made {
        Some(h) => PoolRef::Created(h),
        None => PoolRef::Default(super::local_device(device)?),
    };
    let req = make(on_host);
    super::on_host_of(Some(device), || call(&req))
}

/// The device a pool handle belongs to, for `cudaMemPoolSetAccess`'s peer check.
fn pool_device(pool: RawHandle) -> Result<i32> {
    Ok(resolve(pool)?.0)
}

/// The device was reset: the pools made on it are gone, and its current pool is its
/// default pool again.
pub fn forget_device_state(device: i32) {
    pool_exports().retain(|_, e| e.device != device);
    let mut p = pools();
    p.made.retain(|_, m| m.device != device);
    p.current.remove(&device);
}

/// # Safety
/// `ptr` is NULL or writable.
unsafe fn malloc_async(ptr: *mut *mut c_void, size: usize, stream: RawHandle) -> Result<()> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let stream = stream_handle(stream, false);
    capture::check_stream_use(stream)?;
    // From the current pool of the stream's device, on that device's host.
    let device = super::device_of_stream(stream).unwrap_or_else(state::current_device);
    let current = pools().current.get(&device).copied();
    if let Some(pool) = current {
        // SAFETY: as `malloc_async`'s caller promised.
        return unsafe { malloc_from_pool(ptr, size, pool as RawHandle, stream) };
    }
    let req = MemAllocAsync {
        size: size as u64,
        stream,
    };
    let p = super::on_host_of(Some(device), || call(&req))?.ptr;
    registry().add_device_range(p, size as u64, device);
    // SAFETY: as `malloc_async`'s caller promised.
    unsafe { caller::write(ptr, p as *mut c_void) }
}

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

/// # Safety
/// `ptr` is NULL or writable.
unsafe fn malloc_from_pool(
    ptr: *mut *mut c_void,
    size: usize,
    pool: RawHandle,
    stream: vmcuda_wire::op::StreamHandle,
) -> Result<()> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    capture::check_stream_use(stream)?;
    let device = pool_device(pool)?;
    let p = on_pool_host(pool, |pool| MemAllocFromPoolAsync {
        size: size as u64,
        pool,
        stream,
    })?
    .ptr;
    registry().add_device_range(p, size as u64, device);
    // SAFETY: as `malloc_from_pool`'s caller promised.
    unsafe { caller::write(ptr, p as *mut c_void) }
}

pub extern "C" fn cudaMallocFromPoolAsync(
    ptr: *mut *mut c_void,
    size: usize,
    pool: RawHandle,
    stream: RawHandle,
) -> cudaError_t {
    // SAFETY: by cudaMallocFromPoolAsync's contract `ptr` is NULL or writable.
    guard("cudaMallocFromPoolAsync", || unsafe {
        malloc_from_pool(ptr, size, pool, stream_handle(stream, false))
    })
}

/// `cudaMemAllocationTypePinned`, `cudaMemHandleTypeNone`.
const ALLOCATION_PINNED: i32 = 1;
const HANDLE_TYPE_NONE: i32 = 0;

pub extern "C" fn cudaMemPoolCreate(pool: *mut RawHandle, props: *const c_void) -> cudaError_t {
    guard("cudaMemPoolCreate", || {
        if pool.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaMemPoolCreate's contract `props` is NULL or readable.
        let p = unsafe { caller::read(props.cast::<RawPoolProps>()) }?;
        // A POSIX descriptor handle may be exported for this program to import (see
        // cudaMemPoolExportToShareableHandle); other handle types cannot be passed on.
        if p.handle_types & !HANDLE_TYPE_POSIX_FD != HANDLE_TYPE_NONE {
            eprintln!(
                "vmcuda: cudaMemPoolCreate: shareable handle types other than POSIX file \
                 descriptors ({:#x}) are not supported",
                p.handle_types
            );
            return Err(CudaStatus::ErrorNotSupported);
        }
        if p.alloc_type != ALLOCATION_PINNED || p.location_type != LOCATION_DEVICE {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let device = p.location_id;
        if device < 0 || device >= device_count()? {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let req = MemPoolCreate {
            device: super::local_device(device)?,
            max_size: p.max_size as u64,
            shareable: p.handle_types == HANDLE_TYPE_POSIX_FD,
        };
        let host = super::on_host_of(Some(device), || call(&req))?.pool;
        let n = NEXT_MADE.fetch_add(1, Ordering::Relaxed);
        pools().made.insert(n, Made { device, host });
        // SAFETY: checked non-NULL above; by cudaMemPoolCreate's contract writable.
        unsafe { caller::write(pool, (MADE_TAG + n) as RawHandle) }
    })
}

pub extern "C" fn cudaMemPoolDestroy(pool: RawHandle) -> cudaError_t {
    guard("cudaMemPoolDestroy", || {
        let n = (pool as u64).wrapping_sub(MADE_TAG);
        let Some(made) = pools().made.get(&n).copied() else {
            // A default pool cannot be destroyed; anything else is no pool.
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let req = MemPoolDestroy { pool: made.host };
        super::on_host_of(Some(made.device), || call(&req))?;
        // Its export goes with it (an import made before stays a pool of its own).
        pool_exports().retain(|_, e| e.pool != pool as u64);
        let mut p = pools();
        p.made.remove(&n);
        // A device whose current pool it was goes back to its default pool.
        p.current.retain(|_, current| *current != pool as u64);
        Ok(())
    })
}

pub extern "C" fn cudaDeviceSetMemPool(device: i32, pool: RawHandle) -> cudaError_t {
    guard("cudaDeviceSetMemPool", || {
        if device < 0 || device >= device_count()? {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // Only a pool of that device can be its current pool.
        if pool_device(pool)? != device {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut p = pools();
        if pool as u64 == POOL_TAG + device as u64 {
            p.current.remove(&device);
        } else {
            p.current.insert(device, pool as u64);
        }
        Ok(())
    })
}

pub extern "C" fn cudaDeviceGetMemPool(pool: *mut RawHandle, device: i32) -> cudaError_t {
    guard("cudaDeviceGetMemPool", || {
        if device < 0 || device >= device_count()? {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        let current = pools().current.get(&device).copied();
        let current = current.unwrap_or(POOL_TAG + device as u64);
        // SAFETY: by cudaDeviceGetMemPool's contract `pool` is NULL or writable.
        unsafe { caller::write(pool, current as RawHandle) }
    })
}

pub extern "C" fn cudaMemPoolGetAccess(
    flags: *mut u32,
    pool: RawHandle,
    location: *const c_void,
) -> cudaError_t {
    guard("cudaMemPoolGetAccess", || {
        let device = pool_device(pool)?;
        // SAFETY: by cudaMemPoolGetAccess's contract `location` is NULL or readable
        // (a `cudaMemLocation`: type, id).
        let [location_type, location_id] = unsafe { caller::read(location.cast::<[i32; 2]>()) }?;
        if location_type != LOCATION_DEVICE {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // Another host's device can never reach this pool.
        if super::on_different_hosts(device, location_id)? {
            // SAFETY: by cudaMemPoolGetAccess's contract `flags` is NULL or writable.
            return unsafe { caller::write(flags, 0) };
        }
        let location_id = super::local_device(location_id)?;
        let reply = on_pool_host(pool, |pool| MemPoolGetAccess {
            pool,
            location_type,
            location_id,
        })?;
        // SAFETY: by cudaMemPoolGetAccess's contract `flags` is NULL or writable.
        unsafe { caller::write(flags, reply.flags) }
    })
}

/// `cudaMemHandleTypePosixFileDescriptor`: the one shareable handle type passed on.
const HANDLE_TYPE_POSIX_FD: i32 = 1;

/// A handle type other than a POSIX descriptor: Win32 handles are not Linux's, and a
/// fabric handle would reach other machines.
fn handle_type_checked(name: &str, handle_type: i32) -> Result<()> {
    match handle_type {
        HANDLE_TYPE_POSIX_FD => Ok(()),
        2 | 4 | 8 => {
            eprintln!("vmcuda: {name}: only POSIX file descriptor handles are supported");
            Err(CudaStatus::ErrorNotSupported)
        }
        _ => Err(CudaStatus::ErrorInvalidValue),
    }
}

/// A pool exported to a descriptor: the pool (its handle's value), its device and the
/// host's name for the export. The descriptor handed out is a copy of one sealed memfd
/// of this process's per pool, holding the registry's token (see
/// [`crate::driver::ipc`]), known here by its identity; that memfd is kept while the
/// pool lives, so the identity is not reused while known, and a pool exported again
/// hands out another copy of it (one host export, one kept descriptor per pool however
/// often it is exported).
struct PoolExport {
    pool: u64,
    device: i32,
    export: u64,
    kept: std::os::fd::OwnedFd,
}

/// Exported pools, by the (device, inode) identity of their descriptor.
static POOL_EXPORTS: LazyLock<Mutex<HashMap<(u64, u64), PoolExport>>> =
    LazyLock::new(Default::default);

fn pool_exports() -> MutexGuard<'static, HashMap<(u64, u64), PoolExport>> {
    POOL_EXPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool allocation this process exported: its device, the host's name for the
/// export, and its address (to forget it once freed).
#[derive(Clone, Copy)]
struct PointerExport {
    device: i32,
    export: u64,
    ptr: u64,
}

/// This process's pointer exports, by the token their export data carries.
static POINTER_EXPORTS: LazyLock<Mutex<HashMap<[u8; 16], PointerExport>>> =
    LazyLock::new(Default::default);

fn pointer_exports() -> MutexGuard<'static, HashMap<[u8; 16], PointerExport>> {
    POINTER_EXPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pointer exports kept before those of freed allocations are let go.
const POINTER_EXPORTS_KEPT: usize = 4096;

fn fd_identity(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u64, u64)> {
    let st = nix::sys::stat::fstat(fd).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// Offer the host's export `export` (on `device`) to the VM's other processes: the
/// token of the daemon's registry. Where the host shares nothing between processes
/// (no registry, `[ipc] max_exports = 0`) a token drawn here, which only this process
/// knows, so that its own imports still work.
fn offer_to_vm(device: i32, export: u64) -> Result<[u8; 16]> {
    let req = MemPoolShareExport { export };
    match super::on_host_of(Some(device), || call(&req)) {
        Ok(r) => Ok(r.token),
        Err(CudaStatus::ErrorNotSupported) => Ok(local_token()),
        Err(e) => Err(e),
    }
}

/// 128 bits of this process's (keyed hashes of a count: another process cannot guess
/// them, and two exports here share them with no measurable chance).
fn local_token() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut token = [0u8; 16];
    for half in token.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    token
}

/// The program's device of the current device's host that its host numbers `local`.
fn program_device(local: i32) -> Result<i32> {
    let current = state::current_device();
    if super::local_device(current)? == local {
        return Ok(current);
    }
    for d in 0..device_count()? {
        if !super::on_different_hosts(current, d)? && super::local_device(d)? == local {
            return Ok(d);
        }
    }
    Err(CudaStatus::ErrorInvalidDevice)
}

pub extern "C" fn cudaMemPoolExportToShareableHandle(
    handle: *mut c_void,
    pool: RawHandle,
    handle_type: i32,
    flags: u32,
) -> cudaError_t {
    const NAME: &str = "cudaMemPoolExportToShareableHandle";
    guard(NAME, || {
        if handle.is_null() || flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        handle_type_checked(NAME, handle_type)?;
        // A default pool has no shareable handle type: the driver's answer.
        let (device, Some(host)) = resolve(pool)? else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let copy = |kept: &std::os::fd::OwnedFd| {
            kept.try_clone()
                .map_err(|_| CudaStatus::ErrorOperatingSystem)
        };
        let again = pool_exports()
            .values()
            .find(|e| e.pool == pool as u64)
            .map(|e| copy(&e.kept));
        let fd = match again {
            Some(fd) => fd?,
            None => {
                let req = MemPoolExportShareable { pool: host };
                let export = super::on_host_of(Some(device), || call(&req))?.export;
                let token = offer_to_vm(device, export)?;
                let kept = descriptor(KIND_POOL, token)?;
                let fd = copy(&kept)?;
                let identity = fd_identity(kept.as_fd()).ok_or(CudaStatus::ErrorOperatingSystem)?;
                let export = PoolExport {
                    pool: pool as u64,
                    device,
                    export,
                    kept,
                };
                pool_exports().insert(identity, export);
                fd
            }
        };
        // The program owns its copy from here.
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: by the call's contract `handle` points at an int for a POSIX handle.
        unsafe { caller::write(handle.cast::<i32>(), raw) }
    })
}

pub extern "C" fn cudaMemPoolImportFromShareableHandle(
    pool: *mut RawHandle,
    handle: *mut c_void,
    handle_type: i32,
    flags: u32,
) -> cudaError_t {
    const NAME: &str = "cudaMemPoolImportFromShareableHandle";
    guard(NAME, || {
        if pool.is_null() || flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        handle_type_checked(NAME, handle_type)?;
        // A POSIX handle is passed as the descriptor's number.
        let raw = i32::try_from(handle as isize).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        if raw < 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: only read through fstat, which fails cleanly on a closed number.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
        let identity = fd_identity(fd).ok_or(CudaStatus::ErrorInvalidValue)?;
        let known = pool_exports().get(&identity).map(|e| (e.device, e.export));
        let (device, host) = match known {
            // This process's own export: imported on the host by its number.
            Some((device, export)) => {
                let req = MemPoolImportShareable { export };
                (device, super::on_host_of(Some(device), || call(&req))?.pool)
            }
            // Another process's: its token, through the daemon's registry, on the
            // current device's host (any other descriptor is an invalid value).
            None => {
                let token = descriptor_token(raw, KIND_POOL)?;
                let imported = call(&MemPoolImportShared { token })?;
                (program_device(imported.device)?, imported.pool)
            }
        };
        let n = NEXT_MADE.fetch_add(1, Ordering::Relaxed);
        pools().made.insert(n, Made { device, host });
        // SAFETY: checked non-NULL above; by the call's contract writable.
        unsafe { caller::write(pool, (MADE_TAG + n) as RawHandle) }
    })
}

pub extern "C" fn cudaMemPoolExportPointer(data: *mut c_void, ptr: *mut c_void) -> cudaError_t {
    guard("cudaMemPoolExportPointer", || {
        if data.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let device = registry()
            .device_range(ptr as u64)
            .map(|r| r.2)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let req = MemPoolExportPointer { ptr: ptr as u64 };
        let export = super::on_host_of(Some(device), || call(&req))?.export;
        let token = offer_to_vm(device, export)?;
        let mut exports = pointer_exports();
        if exports.len() >= POINTER_EXPORTS_KEPT {
            exports.retain(|_, e| registry().device_range(e.ptr).is_some_and(|r| r.0 == e.ptr));
        }
        let ptr = ptr as u64;
        exports.insert(
            token,
            PointerExport {
                device,
                export,
                ptr,
            },
        );
        drop(exports);
        // The export data is the registry's token and nothing of the host's.
        let out = IpcHandle::of(KIND_POOL_POINTER, token);
        // SAFETY: by the call's contract `data` points at a 64-byte
        // cudaMemPoolPtrExportData.
        unsafe { caller::write(data.cast::<IpcHandle>(), out) }
    })
}

pub extern "C" fn cudaMemPoolImportPointer(
    ptr: *mut *mut c_void,
    pool: RawHandle,
    data: *mut c_void,
) -> cudaError_t {
    const NAME: &str = "cudaMemPoolImportPointer";
    guard(NAME, || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by the call's contract `data` is NULL or a readable 64-byte
        // cudaMemPoolPtrExportData.
        let d = unsafe { caller::read(data.cast::<IpcHandle>()) }?;
        // Bytes no export of vmcuda's wrote are refused before anything is sent.
        let token = d.token(KIND_POOL_POINTER)?;
        let (device, Some(host)) = resolve(pool)? else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let own = pointer_exports().get(&token).copied();
        let imported = match own {
            // This process's own export: mapped again by its number on the host.
            Some(e) => {
                if e.device != device {
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                let req = MemPoolImportPointer {
                    pool: host,
                    export: e.export,
                };
                super::on_host_of(Some(device), || call(&req))?
            }
            // Another process's: through the daemon's registry.
            None => {
                let req = MemPoolImportSharedPointer { pool: host, token };
                super::on_host_of(Some(device), || call(&req))?
            }
        };
        registry().add_device_range(imported.ptr, imported.size, device);
        // SAFETY: checked non-NULL above; by the call's contract writable.
        unsafe { caller::write(ptr, imported.ptr as *mut c_void) }
    })
}

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

pub extern "C" fn cudaDeviceGetDefaultMemPool(pool: *mut RawHandle, device: i32) -> cudaError_t {
    guard("cudaDeviceGetDefaultMemPool", || {
        if device < 0 || device >= device_count()? {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // SAFETY: by cudaDeviceGetDefaultMemPool's contract `pool` is NULL or writable.
        unsafe { caller::write(pool, (POOL_TAG + device as u64) as RawHandle) }
    })
}

pub extern "C" fn cudaMemPoolGetAttribute(
    pool: RawHandle,
    attr: u32,
    value: *mut c_void,
) -> cudaError_t {
    guard("cudaMemPoolGetAttribute", || {
        if !pool_attr::is_known(attr) || value.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let v = on_pool_host(pool, |pool| MemPoolGetAttribute { pool, attr })?.value;
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

pub extern "C" fn cudaMemPoolSetAttribute(
    pool: RawHandle,
    attr: u32,
    value: *mut c_void,
) -> cudaError_t {
    guard("cudaMemPoolSetAttribute", || {
        resolve(pool)?;
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
        on_pool_host(pool, |pool| MemPoolSetAttribute { pool, attr, value })
    })
}

pub extern "C" fn cudaMemPoolTrimTo(pool: RawHandle, min_bytes_to_keep: usize) -> cudaError_t {
    guard("cudaMemPoolTrimTo", || {
        on_pool_host(pool, |pool| MemPoolTrimTo {
            pool,
            min_bytes_to_keep: min_bytes_to_keep as u64,
        })
    })
}

/// `cudaMemLocationTypeDevice`.
const LOCATION_DEVICE: i32 = 1;

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
        on_pool_host(pool, |pool| MemPoolSetAccess { pool, access })
    })
}

/// The device a `cudaMemLocation` names for a pool call: a device location of pinned
/// memory. Host and managed pools live in the host's memory, which a guest does not
/// share: refused with one line.
///
/// # Safety
/// `location` is NULL or a readable `cudaMemLocation`.
unsafe fn location_device(
    location: *const crate::abi::runtime::MemLocation,
    kind: u32,
    call: &str,
) -> Result<i32> {
    // SAFETY: as the caller promised.
    let l = unsafe { caller::read(location) }?;
    match (l.kind, kind) {
        (d, k) if d as i32 == LOCATION_DEVICE && k as i32 == ALLOCATION_PINNED => Ok(l.id),
        (1..=4, _) => {
            eprintln!("vmcuda: {call}: only device pools of pinned memory cross the VM boundary; cudaErrorNotSupported");
            Err(CudaStatus::ErrorNotSupported)
        }
        _ => Err(CudaStatus::ErrorInvalidValue),
    }
}

pub extern "C" fn cudaMemGetDefaultMemPool(
    pool: *mut RawHandle,
    location: *const crate::abi::runtime::MemLocation,
    kind: u32,
) -> cudaError_t {
    // SAFETY: by cudaMemGetDefaultMemPool's contract `location` is NULL or readable.
    match unsafe { location_device(location, kind, "cudaMemGetDefaultMemPool") } {
        Ok(device) => cudaDeviceGetDefaultMemPool(pool, device),
        Err(e) => guard("cudaMemGetDefaultMemPool", || Err(e)),
    }
}

pub extern "C" fn cudaMemGetMemPool(
    pool: *mut RawHandle,
    location: *const crate::abi::runtime::MemLocation,
    kind: u32,
) -> cudaError_t {
    // SAFETY: by cudaMemGetMemPool's contract `location` is NULL or readable.
    match unsafe { location_device(location, kind, "cudaMemGetMemPool") } {
        Ok(device) => cudaDeviceGetMemPool(pool, device),
        Err(e) => guard("cudaMemGetMemPool", || Err(e)),
    }
}

pub extern "C" fn cudaMemSetMemPool(
    location: *const crate::abi::runtime::MemLocation,
    kind: u32,
    pool: RawHandle,
) -> cudaError_t {
    // SAFETY: by cudaMemSetMemPool's contract `location` is NULL or readable.
    match unsafe { location_device(location, kind, "cudaMemSetMemPool") } {
        Ok(device) => cudaDeviceSetMemPool(device, pool),
        Err(e) => guard("cudaMemSetMemPool", || Err(e)),
    }
}

#[cfg(test)]
mod tests;
