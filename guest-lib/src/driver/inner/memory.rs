//! Memory: device and pinned host allocations, pointer attributes and symbol
//! addresses here; copies ([`copy`]) and memsets ([`memset`]) in every kind and variant
//! beside it, sharing the stream-order and capture rules below.
//!
//! Pinned host memory lives in the guest (the host stages copies through its own
//! pinned buffers); the guest remembers it to answer flags and pointer queries.

pub(crate) mod copy;
mod managed;
pub(crate) mod memset;

pub use copy::*;
pub use managed::*;
pub use memset::*;

use std::ffi::c_void;

use vmcuda_wire::driver::MemsetElements;
use vmcuda_wire::op::{MemAlloc, MemAllocPitch, MemFree, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::{call, guard, known_stream, post, Result};
use crate::abi::runtime::PointerAttributesC;
use crate::capture;
use crate::gate;
use crate::pages::PAGE;
use crate::state::{self, registry, HostMemoryKind, HostRange};
use crate::{caller, cudaError_t};
use crate::{pinned, shared};

/// Whether an asynchronous operation on `[ptr, ptr + len)` can be sent without waiting:
/// the stream is known and the range lies inside one allocation this process made, so
/// the host has no synchronous error to report.
fn can_post(stream: StreamHandle, ptr: usize, len: usize) -> bool {
    super::known_stream(stream)
        && registry()
            .device_range(ptr as u64)
            .is_some_and(|(start, size, _)| ptr as u64 + len as u64 <= start + size)
}

/// Run a copy or memset of `ptrs` (device memory among them) on the host of that
/// memory's device, with `stream` as that host can take it: a stream of another host
/// is waited for there first, and the operation then runs synchronously on the
/// memory's device (several hosts only; with one, `op` runs as given).
fn on_memory_host(
    ptrs: &[usize],
    stream: StreamHandle,
    is_async: bool,
    op: impl FnOnce(StreamHandle, bool) -> Result<()>,
) -> Result<()> {
    let owner = ptrs.iter().find_map(|p| super::device_of_ptr(*p));
    let Some(owner) = owner else {
        return op(stream, is_async);
    };
    let stream_device = super::device_of_stream(stream).unwrap_or_else(state::current_device);
    if !super::on_different_hosts(owner, stream_device)? {
        return super::on_host_of(Some(owner), || op(stream, is_async));
    }
    wait_for_stream(stream)?;
    super::on_host_of(Some(owner), || op(StreamHandle::LEGACY, false))
}

/// Wait for `stream`'s work, on the stream's own host whichever device is current.
fn wait_for_stream(stream: StreamHandle) -> Result<()> {
    let device = super::device_of_stream(stream).unwrap_or_else(state::current_device);
    super::on_host_of(Some(device), || {
        gate::sync_stream(stream)?;
        call(&vmcuda_wire::op::StreamSynchronize { stream })
    })
}

/// CUDA's capture rules for a copy or memset on `stream` (see [`crate::capture`]):
/// a synchronous one is a potentially unsafe call, and one that cannot be captured is
/// refused on a capturing stream.
fn admit(stream: StreamHandle, is_async: bool, capturable: bool) -> Result<()> {
    if !is_async {
        capture::check_unsafe_call()?;
    }
    capture::check_stream_use(stream)?;
    if !is_async || !capturable {
        capture::refuse_if_capturing(stream)?;
    }
    Ok(())
}

/// Run a copy or memset in stream order: asynchronous ones may queue behind a host
/// function on their stream; synchronous ones first wait for the stream.
fn enqueue(
    stream: StreamHandle,
    is_async: bool,
    op: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<()> {
    if is_async {
        gate::submit(stream, op)
    } else {
        gate::sync_stream(stream)?;
        op()
    }
}

/// How many allocations are held aside at most while looking for device addresses
/// clear of the program's own memory.
const CLEAR_TRIES: usize = 8;

/// Allocate device memory with `alloc` (pointer, length, anything else it returns)
/// and register its range, clear of the program's own memory where possible.
///
/// Device pointers are numbers in the host's address space; one that falls where this
/// process already has memory would make `cudaMemcpyDefault` and pointer attributes
/// take that host memory for device memory (seen on the H200: a pageable buffer
/// allocated before `cudaMalloc` sat at the same numbers). Such an allocation is held
/// aside and another made (the driver cannot hand out a held range again); those held
/// are freed with `free` once a clear one comes. If none does, or allocating fails,
/// the last one is kept, ambiguous as before.
fn allocate_clear<T>(
    mut alloc: impl FnMut() -> Result<(u64, u64, T)>,
    mut free: impl FnMut(u64),
) -> Result<(u64, T)> {
    let device = state::current_device();
    let mut current = alloc()?;
    let mut held = Vec::new();
    let mut taken = false;
    loop {
        // Numbers another host's memory already has are never taken: the pointer
        // would name two allocations and calls about it would reach the wrong host.
        let elsewhere = on_another_host(current.0, current.1, device)?;
        if !elsewhere {
            taken = true;
            if registry().add_device_range(current.0, current.1, device) {
                break;
            }
        }
        if held.len() >= CLEAR_TRIES {
            break;
        }
        match alloc() {
            Ok(next) => {
                let previous = std::mem::replace(&mut current, next);
                held.push((previous, std::mem::take(&mut taken)));
            }
            Err(_) => break,
        }
    }
    // Forgotten before freed, as in `free_device`.
    for ((p, _, _), registered) in held {
        if registered {
            registry().remove_device_range(p);
        }
        free(p);
    }
    if !taken {
        free(current.0);
        eprintln!(
            "vmcuda: device {device}'s host keeps handing out addresses another host's memory has"
        );
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok((current.0, current.2))
}

/// Whether `[ptr, ptr + len)` overlaps memory of a device on another host than
/// `device`'s (several hosts only: each host's addresses are its own).
fn on_another_host(ptr: u64, len: u64, device: i32) -> Result<bool> {
    let Some(hosts) = crate::client::connected_hosts().filter(|h| h.count() > 1) else {
        return Ok(false);
    };
    if ptr == 0 {
        return Ok(false);
    }
    let end = ptr.saturating_add(len.max(1));
    let reg = registry();
    let covering = reg.device_range(ptr).map(|(_, _, d)| d);
    let inside = reg.device_ranges.range(ptr..end).map(|(_, (_, d))| *d);
    let host = hosts.host_of(device);
    Ok(covering
        .into_iter()
        .chain(inside)
        .any(|d| hosts.host_of(d) != host))
}

/// Free device memory the program allocated with `free` (the host's free), forgetting
/// its range first: the host may hand the address out again as soon as it is freed,
/// and another thread's allocation there must not be the range forgotten (its device
/// pointer would then pass for host memory, which the guest dereferences). A free that
/// fails leaves the memory the program's, so its range comes back.
pub(super) fn free_device(ptr: u64, free: impl FnOnce(u64) -> Result<()>) -> Result<()> {
    let forgotten = {
        let mut reg = registry();
        let range = reg.device_ranges.get(&ptr).copied();
        reg.remove_device_range(ptr);
        range
    };
    // The memory's own host frees it, whichever device is current.
    let freed = super::on_host_of(forgotten.map(|(_, device)| device), || free(ptr));
    if let (Err(_), Some((size, device))) = (&freed, forgotten) {
        registry().add_device_range(ptr, size, device);
    }
    freed
}

/// Free what [`allocate_clear`] held aside; a failure there leaves device memory the
/// program never saw, freed with the context.
fn free_held(p: u64) {
    let _ = call(&MemFree { ptr: p });
}

pub extern "C" fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    guard("cudaMalloc", || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        capture::check_unsafe_call()?;
        let alloc = || Ok((call(&MemAlloc { size: size as u64 })?.ptr, size as u64, ()));
        let (p, ()) = allocate_clear(alloc, free_held)?;
        // SAFETY: by cudaMalloc's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, p as *mut c_void) }
    })
}

pub extern "C" fn cudaFree(ptr: *mut c_void) -> cudaError_t {
    guard("cudaFree", || {
        capture::check_unsafe_call()?;
        if let Some(freed) = managed::free(ptr as usize) {
            return freed;
        }
        free_device(ptr as u64, |p| call(&MemFree { ptr: p }))
    })
}

pub extern "C" fn cudaMallocPitch(
    ptr: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> cudaError_t {
    guard("cudaMallocPitch", || {
        if ptr.is_null() || pitch.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let alloc = || {
            let r = call(&MemAllocPitch {
                width: width as u64,
                height: height as u64,
            })?;
            Ok((r.ptr, r.pitch * height as u64, r.pitch))
        };
        let (p, row_pitch) = allocate_clear(alloc, free_held)?;
        // SAFETY: by cudaMallocPitch's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, p as *mut c_void) }?;
        // SAFETY: by cudaMallocPitch's contract `pitch` is NULL or writable.
        unsafe { caller::write(pitch, row_pitch as usize) }
    })
}

/// Free a block `host_alloc` made (the registry entry was just removed, so once).
fn free_pinned(addr: usize) {
    // SAFETY: `addr` came from our posix_memalign and its registry entry is gone.
    unsafe { libc::free(addr as *mut c_void) };
}

fn host_alloc(size: usize, flags: u32) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    capture::check_unsafe_call()?;
    // Shared with a same-host backend when possible (kernels can then reach it), else
    // private page-aligned memory.
    let (p, shared) = match pinned::alloc(size, flags) {
        Some((p, region)) => (p as *mut c_void, Some(region)),
        None => {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: posix_memalign writes the new block's address into `p`; the
            // alignment is a power of two multiple of the pointer size.
            if unsafe { libc::posix_memalign(&mut p, 4096, size) } != 0 {
                return Err(CudaStatus::ErrorMemoryAllocation);
            }
            (p, None)
        }
    };
    let range = HostRange {
        size,
        flags,
        kind: HostMemoryKind::Allocated,
        device: state::current_device(),
        shared,
    };
    registry().host_ranges.insert(p as usize, range);
    Ok(p)
}

pub extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    guard("cudaMallocHost", || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaMallocHost's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, host_alloc(size, 0)?) }
    })
}

pub extern "C" fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) -> cudaError_t {
    guard("cudaHostAlloc", || {
        if ptr.is_null() || flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaHostAlloc's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, host_alloc(size, flags)?) }
    })
}

pub extern "C" fn cudaFreeHost(ptr: *mut c_void) -> cudaError_t {
    guard("cudaFreeHost", || {
        if ptr.is_null() {
            return Ok(());
        }
        capture::check_unsafe_call()?;
        let range = registry().take_host_range(ptr as usize, HostMemoryKind::Allocated);
        match range {
            Some(HostRange {
                shared: Some(region),
                flags,
                device,
                ..
            }) => pinned::free(region, flags, device),
            Some(_) => free_pinned(ptr as usize),
            None => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(())
    })
}

pub extern "C" fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: u32) -> cudaError_t {
    guard("cudaHostRegister", || {
        if ptr.is_null() || size == 0 || flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let start = ptr as usize;
        let end = start
            .checked_add(size)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let pages = (start / PAGE * PAGE, end.div_ceil(PAGE) * PAGE);
        let page_shared = {
            let reg = registry();
            let overlaps = reg
                .host_ranges
                .range(..end)
                .next_back()
                .is_some_and(|(s, r)| s + r.size > start);
            if overlaps {
                return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
            }
            // Pages already moved onto another region's memfd must stay where they are.
            reg.host_ranges
                .values()
                .filter_map(|r| r.shared)
                .any(|r| r.start < pages.1 && pages.0 < r.start + r.len)
        };
        let shared = if page_shared {
            None
        } else {
            // SAFETY: by cudaHostRegister's contract `[ptr, ptr + size)` is the program's
            // mapped memory; no shared region holds its pages (checked above).
            unsafe { shared::share_existing(start, size, flags) }.or_else(|| {
                // SAFETY: as above; in a VM guest, onto guest RAM the host maps.
                unsafe { crate::guest_pages::pinned::register_in_place(start, size) }
            })
        };
        let range = HostRange {
            size,
            flags,
            kind: HostMemoryKind::Registered,
            device: state::current_device(),
            shared,
        };
        registry().host_ranges.insert(start, range);
        Ok(())
    })
}

pub extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> cudaError_t {
    guard("cudaHostUnregister", || {
        let range = registry().take_host_range(ptr as usize, HostMemoryKind::Registered);
        match range {
            // The pages stay on their memfd (same contents); only the GPU lets go.
            Some(HostRange {
                shared: Some(region),
                ..
            }) => shared::unregister(region),
            Some(_) => {}
            None => return Err(CudaStatus::ErrorHostMemoryNotRegistered),
        }
        Ok(())
    })
}

pub extern "C" fn cudaHostGetFlags(flags: *mut u32, ptr: *mut c_void) -> cudaError_t {
    guard("cudaHostGetFlags", || {
        let r = registry()
            .host_range(ptr as usize)
            .ok_or(CudaStatus::ErrorInvalidValue)?
            .1;
        // Portable and mapped are implied for all pinned memory in a UVA process.
        // SAFETY: by cudaHostGetFlags's contract `flags` is NULL or writable.
        unsafe { caller::write(flags, r.flags | 0x2) }
    })
}

/// The device pointer of pinned memory shared with the host, if it is.
fn mapped_device_pointer(host_ptr: usize) -> Result<Option<u64>> {
    let (_, r) = registry()
        .host_range(host_ptr)
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    Ok(r.shared.map(|s| s.device_ptr + (host_ptr - s.start) as u64))
}

pub extern "C" fn cudaHostGetDevicePointer(
    device_ptr: *mut *mut c_void,
    host_ptr: *mut c_void,
    flags: u32,
) -> cudaError_t {
    guard("cudaHostGetDevicePointer", || {
        if flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        match mapped_device_pointer(host_ptr as usize)? {
            // SAFETY: by cudaHostGetDevicePointer's contract `device_ptr` is NULL or
            // writable.
            Some(d) => unsafe { caller::write(device_ptr, d as *mut c_void) },
            None => {
                eprintln!(
                    "vmcuda: cudaHostGetDevicePointer: this pinned memory is not shared with the host \
                     (shared memory needs a same-host unix: connection); not supported"
                );
                Err(CudaStatus::ErrorNotSupported)
            }
        }
    })
}

pub extern "C" fn cudaPointerGetAttributes(
    attrs: *mut PointerAttributesC,
    ptr: *const c_void,
) -> cudaError_t {
    guard("cudaPointerGetAttributes", || {
        let p = ptr as usize;
        // Asked before the registry is held: moving managed pages holds the managed
        // regions and then the registry (copies look up streams and ranges).
        let managed = crate::managed::region_of(p);
        let reg = registry();
        let (memory_type, device, device_pointer, host_pointer) =
            if let Some((_, _, dev, _)) = managed {
                // cudaMemoryTypeManaged: one address for both.
                (3, dev, p, p)
            } else if let Some((_, _, dev)) = reg.device_range(p as u64) {
                (2, dev, p, 0)
            } else if let Some((_, r)) = reg.host_range(p) {
                // Under UVA the device pointer of pinned memory is its host address.
                let device_pointer = r
                    .shared
                    .map_or(p, |s| s.device_ptr as usize + (p - s.start));
                (1, r.device, device_pointer, p)
            } else {
                // Unregistered memory: no device, and the pointer is its own host pointer.
                (0, -2, 0, p)
            };
        drop(reg);
        // SAFETY: by cudaPointerGetAttributes's contract `attrs` is NULL or writable.
        unsafe {
            caller::write(
                attrs,
                PointerAttributesC {
                    memory_type,
                    device,
                    device_pointer: device_pointer as *mut c_void,
                    host_pointer: host_pointer as *mut c_void,
                    reserved: [0; 8],
                },
            )
        }
    })
}

/// Whether `[ptr, ptr + len)` lies in one device range this process knows.
pub(crate) fn known_range(ptr: u64, len: u64) -> bool {
    state::registry()
        .device_range(ptr)
        .is_some_and(|(start, size, _)| ptr.saturating_add(len) <= start + size)
}

/// An asynchronous 16- or 32-bit memset on the program's `stream`, for the runtime's
/// graph memset nodes: a `cudaError_t`.
pub(crate) fn memset_elements_on(
    dst: u64,
    value: u32,
    element_size: u8,
    count: usize,
    stream: super::RawHandle,
) -> crate::cudaError_t {
    let stream = super::stream_handle(stream, false);
    match memset_elements(dst, value, element_size, count, stream, true) {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}

/// A 16- or 32-bit memset in stream order. One on a range and stream the guest knows
/// goes without a reply; anything else waits, so a bad pointer is reported by the
/// call itself, as natively.
pub(crate) fn memset_elements(
    dst: u64,
    value: u32,
    element_size: u8,
    count: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    crate::driver::check_initialized()?;
    let req = MemsetElements {
        dst,
        value,
        element_size,
        count: count as u64,
        stream,
        is_async,
    };
    let bytes = req.byte_len().ok_or(CudaStatus::ErrorInvalidValue)?;
    if count == 0 {
        return Ok(());
    }
    if !dst.is_multiple_of(element_size as u64) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let fire_and_forget = is_async && known_stream(stream) && known_range(dst, bytes);
    let job = move || {
        if fire_and_forget {
            post(&req, &[])
        } else {
            call(&req)
        }
    };
    if is_async {
        gate::submit(stream, job)
    } else {
        gate::sync_stream(stream)?;
        job()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_addresses::ProgramPage;

    #[test]
    fn a_device_range_over_the_programs_own_memory_is_traded_for_a_clear_one() {
        let mine_at = 0x2347_0000_0000usize;
        let clear_at = 0x2348_0000_0000u64;
        let _mine = ProgramPage::at(mine_at);
        let colliding = mine_at as u64 + 64;
        let mut offers = vec![(clear_at, 1024, "clear"), (colliding, 1024, "colliding")];
        let mut freed = Vec::new();
        let got = allocate_clear(|| Ok(offers.pop().unwrap()), |p| freed.push(p)).unwrap();
        assert_eq!(got, (clear_at, "clear"));
        assert_eq!(freed, [colliding]);
        assert!(registry().device_range(colliding).is_none());
        assert!(registry().device_range(clear_at).is_some());
        registry().remove_device_range(clear_at);
    }

    #[test]
    fn when_no_clear_range_comes_the_last_one_is_kept() {
        let mine_at = 0x2349_0000_0000usize;
        let _mine = ProgramPage::at(mine_at);
        // The first allocation collides and the next fails (out of memory, say): the
        // first is what the program gets, ambiguous as before, and nothing is freed.
        let colliding = mine_at as u64 + 128;
        let mut calls = 0;
        let mut freed = Vec::new();
        let got = allocate_clear(
            || {
                calls += 1;
                match calls {
                    1 => Ok((colliding, 4096, ())),
                    _ => Err(CudaStatus::ErrorMemoryAllocation),
                }
            },
            |p| freed.push(p),
        )
        .unwrap();
        assert_eq!((got.0, calls), (colliding, 2));
        assert!(freed.is_empty());
        assert!(registry().device_range(colliding).is_some());
        registry().remove_device_range(colliding);
    }

    /// The host reuses a freed device address at once (the CUDA driver does): another
    /// thread's allocation may get it before `cudaFree` returns. That allocation's range
    /// must stay known, or copies with `cudaMemcpyDefault` take its device pointer for
    /// host memory and the guest dereferences it.
    #[test]
    fn an_address_reused_while_it_is_freed_stays_device_memory() {
        let p = 0x234a_0000_0000u64;
        registry().add_device_range(p, 4096, 0);
        free_device(p, |freed| {
            // Another thread's cudaMalloc, between the host's free and its return.
            registry().add_device_range(freed, 8192, 0);
            Ok(())
        })
        .unwrap();
        assert_eq!(registry().device_range(p + 4096), Some((p, 8192, 0)));
        registry().remove_device_range(p);
    }

    #[test]
    fn a_failed_free_keeps_the_range() {
        let p = 0x234b_0000_0000u64;
        registry().add_device_range(p, 4096, 0);
        assert_eq!(
            free_device(p, |_| Err(CudaStatus::ErrorInvalidValue)),
            Err(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(registry().device_range(p), Some((p, 4096, 0)));
        registry().remove_device_range(p);
    }

    /// As for `cudaFree`: an allocation held aside and freed may come straight back to
    /// another thread, whose range must stay known.
    #[test]
    fn an_address_held_aside_and_reused_while_it_is_freed_stays_device_memory() {
        let mine_at = 0x234c_0000_0000usize;
        let clear_at = 0x234d_0000_0000u64;
        let _mine = ProgramPage::at(mine_at);
        let colliding = mine_at as u64 + 64;
        let mut offers = vec![(clear_at, 1024, ()), (colliding, 1024, ())];
        let got = allocate_clear(
            || Ok(offers.pop().unwrap()),
            |p| {
                registry().add_device_range(p, 512, 0);
            },
        )
        .unwrap();
        assert_eq!(got, (clear_at, ()));
        assert_eq!(
            registry().device_range(colliding),
            Some((colliding, 512, 0))
        );
        registry().remove_device_range(colliding);
        registry().remove_device_range(clear_at);
    }
}
