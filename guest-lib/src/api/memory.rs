//! Memory: device and pinned host allocations, copies and memsets in every kind and
//! variant, symbols, pointer attributes.
//!
//! Pinned host memory lives in the guest (the host stages copies through its own
//! pinned buffers); the guest remembers it to answer flags and pointer queries.

use std::ffi::c_void;

use vmcuda_wire::op::{
    MemAlloc, MemAllocPitch, MemFree, Memcpy2DDtoD, Memcpy2DDtoH, Memcpy2DHtoD, MemcpyDtoD,
    MemcpyDtoH, MemcpyHtoD, MemcpyPeer, MemcpyShared, Memset, Memset2D, StreamHandle,
    StreamSynchronize,
};
use vmcuda_wire::CudaStatus;

use super::registration::variable;
use super::{call, call_with, guard, stream_handle, RawHandle, Result};
use crate::capture;
use crate::client::{self, Sink};
use crate::copy_route::{self, Direction, Route, Shape};
use crate::gate;
use crate::shared;
use crate::staging;
use crate::state::{self, registry, HostMemoryKind, HostRange};
use crate::{caller, cudaError_t};

/// Whether an asynchronous operation on `[ptr, ptr + len)` can be sent without waiting:
/// the stream is known and the range lies inside one allocation this process made, so
/// the host has no synchronous error to report.
fn can_post(stream: StreamHandle, ptr: usize, len: usize) -> bool {
    super::known_stream(stream)
        && registry()
            .device_range(ptr as u64)
            .is_some_and(|(start, size, _)| ptr as u64 + len as u64 <= start + size)
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

/// One-dimensional copy of `count` bytes.
///
/// # Safety
/// Each host side of the copy (`kind` says which) is NULL or the program's memory,
/// readable (`src`) or writable (`dst`) for `count` bytes; an asynchronous copy's stays
/// so until its stream reaches the copy (CUDA's contract for asynchronous copies).
unsafe fn memcpy(
    dst: usize,
    src: usize,
    count: usize,
    kind: u32,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let direction = Direction::resolve(kind, dst, src)?;
    let capturable = copy_route::capturable(direction, Shape::Linear, dst, src, count);
    admit(stream, is_async, capturable)?;
    enqueue(stream, is_async, move || {
        // SAFETY: as `memcpy`'s caller promised.
        unsafe { memcpy_now(dst, src, count, direction, stream, is_async) }
    })
}

/// The staging area a [`Route::Staged`] copy goes through.
fn staging_area() -> &'static staging::Staging {
    staging::staging().expect("a copy is staged only where the staging area exists")
}

/// # Safety
/// As for [`memcpy`].
unsafe fn memcpy_now(
    dst: usize,
    src: usize,
    count: usize,
    direction: Direction,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    let route = copy_route::route(direction, Shape::Linear, dst, src, count);
    match (route, direction) {
        (Route::Guest, _) => {
            settle_posted_reads(stream)?;
            // SAFETY: as `memcpy_now`'s caller promised.
            unsafe { caller::copy_host(dst as *mut u8, src as *const u8, count) }
        }
        (Route::Device, _) => call(&MemcpyDtoD {
            dst: dst as u64,
            src: src as u64,
            size: count as u64,
            stream,
            is_async,
        }),
        (Route::Pinned, Direction::HostToDevice) => {
            shared_copy(dst as u64, src as u64, count, true, stream, is_async)
        }
        (Route::Pinned, _) => shared_copy(src as u64, dst as u64, count, false, stream, is_async),
        (Route::Staged, Direction::HostToDevice) => {
            // SAFETY: as `memcpy_now`'s caller promised.
            let data = unsafe { caller::bytes(src as *const u8, count) }?;
            staging_area().to_device(dst as u64, data, stream)
        }
        (Route::Staged, _) => {
            // SAFETY: as `memcpy_now`'s caller promised.
            let out = unsafe { caller::bytes_mut(dst as *mut u8, count) }?;
            staging_area().to_host(out, src as u64, stream)
        }
        (Route::Socket, Direction::HostToDevice) => {
            // SAFETY: as `memcpy_now`'s caller promised.
            let data = unsafe { caller::bytes(src as *const u8, count) }?;
            // The bytes travel with the requests, so a copy into memory this process
            // allocated needs no answer chunk by chunk: every chunk is sent at once and
            // only the last is waited for (a synchronous copy), or none (an async one).
            // A failed chunk is reported by that last reply.
            let post = can_post(stream, dst, count);
            let chunk_len = client::chunk();
            let chunks = data.chunks(chunk_len).count();
            for (i, chunk) in data.chunks(chunk_len).enumerate() {
                let req = MemcpyHtoD {
                    dst: (dst + i * chunk_len) as u64,
                    stream,
                    is_async,
                };
                if post && (is_async || i + 1 < chunks) {
                    super::post(&req, chunk)?;
                } else {
                    call_with(&req, chunk, Sink::None)?;
                }
            }
            Ok(())
        }
        (Route::Socket, _) => {
            // SAFETY: as `memcpy_now`'s caller promised.
            let out = unsafe { caller::bytes_mut(dst as *mut u8, count) }?;
            // All chunk requests go out together; the replies land in place.
            let chunk_len = client::chunk();
            let requests = out
                .chunks_mut(chunk_len)
                .enumerate()
                .map(|(i, chunk)| {
                    let req = MemcpyDtoH {
                        src: (src + i * chunk_len) as u64,
                        size: chunk.len() as u64,
                        stream,
                        is_async,
                    };
                    (req, chunk)
                })
                .collect();
            client::client()?.call_many(state::current_device(), requests)
        }
    }
}

/// Set once a device-to-host copy into shared pinned memory has been posted: the GPU
/// may still be writing host memory the program can see.
static POSTED_READS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A host-to-host copy runs in the guest, but in stream order: when a posted copy may
/// still be writing pinned memory, the stream is waited for first.
fn settle_posted_reads(stream: StreamHandle) -> Result<()> {
    if POSTED_READS.load(std::sync::atomic::Ordering::Relaxed) {
        call(&StreamSynchronize { stream })?;
    }
    Ok(())
}

/// A copy between device memory and pinned memory the host shares: one request, no
/// bytes on the socket. Asynchronous copies into this process's own allocations are
/// posted (the GPU works on them while the program runs on, as natively); the rest wait.
fn shared_copy(
    device: u64,
    host: u64,
    count: usize,
    to_device: bool,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let req = MemcpyShared {
        device,
        host,
        size: count as u64,
        to_device,
        stream,
        is_async,
    };
    if is_async && can_post(stream, device as usize, count) {
        if to_device {
            return super::post(&req, &[]);
        }
        POSTED_READS.store(true, std::sync::atomic::Ordering::Relaxed);
        // The program will read that memory: the copy starts now, as natively, not
        // when the queue next goes out (a program that peeks before synchronizing,
        // wrongly but commonly, sees what it would natively more often).
        super::post_now(&req, &[])
    } else {
        call(&req)
    }
}

/// # Safety
/// Each host side of the copy (`kind` says which) is the program's memory, readable
/// (`src`) or writable (`dst`) for `height` rows of `width` bytes at its pitch; an
/// asynchronous copy's stays so until its stream reaches the copy.
#[allow(clippy::too_many_arguments)]
unsafe fn memcpy_2d(
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let direction = Direction::resolve(kind, dst, src)?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    let capturable = copy_route::capturable(direction, Shape::Pitched, dst, src, width);
    admit(stream, is_async, capturable)?;
    if width > dpitch || width > spitch {
        return Err(CudaStatus::ErrorInvalidPitchValue);
    }
    enqueue(stream, is_async, move || {
        // SAFETY: as `memcpy_2d`'s caller promised.
        unsafe {
            memcpy_2d_now(
                dst, dpitch, src, spitch, width, height, direction, stream, is_async,
            )
        }
    })
}

/// # Safety
/// As for [`memcpy_2d`].
#[allow(clippy::too_many_arguments)]
unsafe fn memcpy_2d_now(
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
    direction: Direction,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    // Rows travel packed; at most a chunk's bytes per request.
    let rows_per_chunk = (client::chunk() / width).max(1);
    let route = copy_route::route(direction, Shape::Pitched, dst, src, width);
    match (route, direction) {
        (Route::Guest, _) => settle_posted_reads(stream).and_then(|()| {
            (0..height).try_for_each(|r| {
                // SAFETY: as `memcpy_2d_now`'s caller promised.
                unsafe {
                    caller::copy_host(
                        (dst + r * dpitch) as *mut u8,
                        (src + r * spitch) as *const u8,
                        width,
                    )
                }
            })
        }),
        (Route::Device, _) => call(&Memcpy2DDtoD {
            dst: dst as u64,
            dpitch: dpitch as u64,
            src: src as u64,
            spitch: spitch as u64,
            width: width as u64,
            height: height as u64,
            stream,
            is_async,
        }),
        // The socket: a pitched copy with a host side has no other route.
        (_, Direction::HostToDevice) => {
            let mut first = 0;
            while first < height {
                let rows = rows_per_chunk.min(height - first);
                let mut packed = Vec::with_capacity(rows * width);
                for r in first..first + rows {
                    // SAFETY: as `memcpy_2d_now`'s caller promised.
                    let row = unsafe { caller::bytes((src + r * spitch) as *const u8, width) }?;
                    packed.extend_from_slice(row);
                }
                let req = Memcpy2DHtoD {
                    dst: (dst + first * dpitch) as u64,
                    dpitch: dpitch as u64,
                    width: width as u64,
                    height: rows as u64,
                    stream,
                    is_async,
                };
                call_with(&req, &packed, Sink::None)?;
                first += rows;
            }
            Ok(())
        }
        _ => {
            let mut first = 0;
            while first < height {
                let rows = rows_per_chunk.min(height - first);
                let mut packed = vec![0u8; rows * width];
                let req = Memcpy2DDtoH {
                    src: (src + first * spitch) as u64,
                    spitch: spitch as u64,
                    width: width as u64,
                    height: rows as u64,
                    stream,
                    is_async,
                };
                call_with(&req, &[], Sink::Into(&mut packed))?;
                for (i, row) in packed.chunks(width).enumerate() {
                    // SAFETY: as `memcpy_2d_now`'s caller promised.
                    unsafe { caller::bytes_mut((dst + (first + i) * dpitch) as *mut u8, width) }?
                        .copy_from_slice(row);
                }
                first += rows;
            }
            Ok(())
        }
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
    while !registry().add_device_range(current.0, current.1, device) && held.len() < CLEAR_TRIES {
        match alloc() {
            Ok(next) => held.push(std::mem::replace(&mut current, next)),
            Err(_) => break,
        }
    }
    for (p, _, _) in held {
        free(p);
        registry().remove_device_range(p);
    }
    Ok((current.0, current.2))
}

/// Free what [`allocate_clear`] held aside; a failure there leaves device memory the
/// program never saw, freed with the context.
fn free_held(p: u64) {
    let _ = call(&MemFree { ptr: p });
}

#[no_mangle]
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

#[no_mangle]
pub extern "C" fn cudaFree(ptr: *mut c_void) -> cudaError_t {
    guard("cudaFree", || {
        capture::check_unsafe_call()?;
        call(&MemFree { ptr: ptr as u64 })?;
        registry().remove_device_range(ptr as u64);
        Ok(())
    })
}

#[no_mangle]
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

#[no_mangle]
pub extern "C" fn cudaMallocManaged(
    _ptr: *mut *mut c_void,
    _size: usize,
    _flags: u32,
) -> cudaError_t {
    guard("cudaMallocManaged", || {
        eprintln!(
            "vmcuda: cudaMallocManaged: managed memory cannot span the VM boundary; not supported"
        );
        Err(CudaStatus::ErrorNotSupported)
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
    let (p, shared) = match shared::alloc(size, flags) {
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

#[no_mangle]
pub extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    guard("cudaMallocHost", || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaMallocHost's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, host_alloc(size, 0)?) }
    })
}

#[no_mangle]
pub extern "C" fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) -> cudaError_t {
    guard("cudaHostAlloc", || {
        if ptr.is_null() || flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaHostAlloc's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, host_alloc(size, flags)?) }
    })
}

#[no_mangle]
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
                ..
            }) => shared::free(region),
            Some(_) => free_pinned(ptr as usize),
            None => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: u32) -> cudaError_t {
    guard("cudaHostRegister", || {
        if ptr.is_null() || size == 0 || flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let start = ptr as usize;
        let end = start
            .checked_add(size)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let pages = (
            start / shared::PAGE * shared::PAGE,
            end.div_ceil(shared::PAGE) * shared::PAGE,
        );
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
            unsafe { shared::share_existing(start, size, flags) }
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

#[no_mangle]
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

#[no_mangle]
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

#[no_mangle]
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

/// `struct cudaPointerAttributes` (CUDA 13 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PointerAttributesC {
    pub memory_type: i32,
    pub device: i32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub reserved: [i64; 8],
}

#[no_mangle]
pub extern "C" fn cudaPointerGetAttributes(
    attrs: *mut PointerAttributesC,
    ptr: *const c_void,
) -> cudaError_t {
    guard("cudaPointerGetAttributes", || {
        let p = ptr as usize;
        let reg = registry();
        let (memory_type, device, device_pointer, host_pointer) =
            if let Some((_, _, dev)) = reg.device_range(p as u64) {
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

macro_rules! export_memcpy {
    ($name:ident, $per_thread:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(
            dst: *mut c_void,
            src: *const c_void,
            count: usize,
            kind: u32,
        ) -> cudaError_t {
            // SAFETY: by cudaMemcpy's contract the host sides are the program's memory of
            // `count` bytes (kept valid until the stream gets there, when asynchronous).
            guard(stringify!($name), || unsafe {
                memcpy(
                    dst as usize,
                    src as usize,
                    count,
                    kind,
                    stream_handle(std::ptr::null_mut(), $per_thread),
                    false,
                )
            })
        }
    };
}
export_memcpy!(cudaMemcpy, false);
export_memcpy!(cudaMemcpy_ptds, true);

macro_rules! export_memcpy_async {
    ($name:ident, $per_thread:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(
            dst: *mut c_void,
            src: *const c_void,
            count: usize,
            kind: u32,
            stream: RawHandle,
        ) -> cudaError_t {
            // SAFETY: by cudaMemcpy's contract the host sides are the program's memory of
            // `count` bytes (kept valid until the stream gets there, when asynchronous).
            guard(stringify!($name), || unsafe {
                memcpy(
                    dst as usize,
                    src as usize,
                    count,
                    kind,
                    stream_handle(stream, $per_thread),
                    true,
                )
            })
        }
    };
}
export_memcpy_async!(cudaMemcpyAsync, false);
export_memcpy_async!(cudaMemcpyAsync_ptsz, true);

#[no_mangle]
pub extern "C" fn cudaMemcpy2D(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaMemcpy2D", || {
        // SAFETY: by cudaMemcpy2D's contract its pointer arguments are as `memcpy_2d`
        // requires.
        unsafe {
            memcpy_2d(
                dst as usize,
                dpitch,
                src as usize,
                spitch,
                width,
                height,
                kind,
                StreamHandle::LEGACY,
                false,
            )
        }
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpy2DAsync", || {
        // SAFETY: by cudaMemcpy2DAsync's contract its pointer arguments are as `memcpy_2d`
        // requires.
        unsafe {
            memcpy_2d(
                dst as usize,
                dpitch,
                src as usize,
                spitch,
                width,
                height,
                kind,
                stream_handle(stream, false),
                true,
            )
        }
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaMemcpy2DAsync_ptsz(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpy2DAsync_ptsz", || {
        // SAFETY: by cudaMemcpy2DAsync_ptsz's contract its pointer arguments are as
        // `memcpy_2d` requires.
        unsafe {
            memcpy_2d(
                dst as usize,
                dpitch,
                src as usize,
                spitch,
                width,
                height,
                kind,
                stream_handle(stream, true),
                true,
            )
        }
    })
}

fn memset(
    ptr: usize,
    value: i32,
    count: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    admit(stream, is_async, true)?;
    let req = Memset {
        dst: ptr as u64,
        value: value as u8,
        size: count as u64,
        stream,
        is_async,
    };
    let post = is_async && can_post(stream, ptr, count);
    enqueue(stream, is_async, move || {
        if post {
            super::post(&req, &[])
        } else {
            call(&req)
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemset(ptr: *mut c_void, value: i32, count: usize) -> cudaError_t {
    guard("cudaMemset", || {
        memset(ptr as usize, value, count, StreamHandle::LEGACY, false)
    })
}

#[no_mangle]
pub extern "C" fn cudaMemsetAsync(
    ptr: *mut c_void,
    value: i32,
    count: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemsetAsync", || {
        memset(
            ptr as usize,
            value,
            count,
            stream_handle(stream, false),
            true,
        )
    })
}

#[no_mangle]
pub extern "C" fn cudaMemsetAsync_ptsz(
    ptr: *mut c_void,
    value: i32,
    count: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemsetAsync_ptsz", || {
        memset(
            ptr as usize,
            value,
            count,
            stream_handle(stream, true),
            true,
        )
    })
}

fn memset_2d(
    ptr: usize,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if width == 0 || height == 0 {
        return Ok(());
    }
    admit(stream, is_async, true)?;
    let req = Memset2D {
        dst: ptr as u64,
        pitch: pitch as u64,
        value: value as u8,
        width: width as u64,
        height: height as u64,
        stream,
        is_async,
    };
    enqueue(stream, is_async, move || call(&req))
}

#[no_mangle]
pub extern "C" fn cudaMemset2D(
    ptr: *mut c_void,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
) -> cudaError_t {
    guard("cudaMemset2D", || {
        memset_2d(
            ptr as usize,
            pitch,
            value,
            width,
            height,
            StreamHandle::LEGACY,
            false,
        )
    })
}

#[no_mangle]
pub extern "C" fn cudaMemset2DAsync(
    ptr: *mut c_void,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemset2DAsync", || {
        memset_2d(
            ptr as usize,
            pitch,
            value,
            width,
            height,
            stream_handle(stream, false),
            true,
        )
    })
}

fn memcpy_peer(
    dst: usize,
    dst_device: i32,
    src: usize,
    src_device: i32,
    count: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    let req = MemcpyPeer {
        dst: dst as u64,
        dst_device,
        src: src as u64,
        src_device,
        size: count as u64,
        stream,
        is_async,
    };
    enqueue(stream, is_async, move || call(&req))
}

#[no_mangle]
pub extern "C" fn cudaMemcpyPeer(
    dst: *mut c_void,
    dst_device: i32,
    src: *const c_void,
    src_device: i32,
    count: usize,
) -> cudaError_t {
    guard("cudaMemcpyPeer", || {
        memcpy_peer(
            dst as usize,
            dst_device,
            src as usize,
            src_device,
            count,
            StreamHandle::LEGACY,
            false,
        )
    })
}

#[no_mangle]
pub extern "C" fn cudaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: i32,
    src: *const c_void,
    src_device: i32,
    count: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpyPeerAsync", || {
        memcpy_peer(
            dst as usize,
            dst_device,
            src as usize,
            src_device,
            count,
            stream_handle(stream, false),
            true,
        )
    })
}

/// The device address of `symbol + offset`, checking `count` fits.
fn symbol_range(symbol: *const c_void, offset: usize, count: usize) -> Result<usize> {
    let (ptr, size) = variable(symbol as usize)?;
    if offset.checked_add(count).is_none_or(|end| end > size) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(ptr as usize + offset)
}

/// Copies to a symbol go host or device to device; the symbol's address is a device
/// range, so `cudaMemcpyDefault` resolves like any other copy.
///
/// # Safety
/// `src` is as for [`memcpy`].
unsafe fn to_symbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let dst = symbol_range(symbol, offset, count)?;
    match Direction::resolve(kind, dst, src as usize)? {
        Direction::HostToDevice | Direction::DeviceToDevice => {
            // SAFETY: as `to_symbol`'s caller promised.
            unsafe { memcpy(dst, src as usize, count, kind, stream, is_async) }
        }
        _ => Err(CudaStatus::ErrorInvalidMemcpyDirection),
    }
}

/// # Safety
/// `dst` is as for [`memcpy`].
unsafe fn from_symbol(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let src = symbol_range(symbol, offset, count)?;
    match Direction::resolve(kind, dst as usize, src)? {
        Direction::DeviceToHost | Direction::DeviceToDevice => {
            // SAFETY: as `from_symbol`'s caller promised.
            unsafe { memcpy(dst as usize, src, count, kind, stream, is_async) }
        }
        _ => Err(CudaStatus::ErrorInvalidMemcpyDirection),
    }
}

#[no_mangle]
pub extern "C" fn cudaMemcpyToSymbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaMemcpyToSymbol", || {
        // SAFETY: by cudaMemcpyToSymbol's contract its pointer arguments are as `to_symbol`
        // requires.
        unsafe {
            to_symbol(
                symbol,
                src,
                count,
                offset,
                kind,
                StreamHandle::LEGACY,
                false,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemcpyToSymbolAsync(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpyToSymbolAsync", || {
        // SAFETY: by cudaMemcpyToSymbolAsync's contract its pointer arguments are as
        // `to_symbol` requires.
        unsafe {
            to_symbol(
                symbol,
                src,
                count,
                offset,
                kind,
                stream_handle(stream, false),
                true,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemcpyFromSymbol(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaMemcpyFromSymbol", || {
        // SAFETY: by cudaMemcpyFromSymbol's contract its pointer arguments are as
        // `from_symbol` requires.
        unsafe {
            from_symbol(
                dst,
                symbol,
                count,
                offset,
                kind,
                StreamHandle::LEGACY,
                false,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaMemcpyFromSymbolAsync(
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: u32,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpyFromSymbolAsync", || {
        // SAFETY: by cudaMemcpyFromSymbolAsync's contract its pointer arguments are as
        // `from_symbol` requires.
        unsafe {
            from_symbol(
                dst,
                symbol,
                count,
                offset,
                kind,
                stream_handle(stream, false),
                true,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn cudaGetSymbolAddress(
    dev_ptr: *mut *mut c_void,
    symbol: *const c_void,
) -> cudaError_t {
    guard("cudaGetSymbolAddress", || {
        // SAFETY: by cudaGetSymbolAddress's contract `dev_ptr` is NULL or writable.
        unsafe { caller::write(dev_ptr, variable(symbol as usize)?.0 as *mut c_void) }
    })
}

#[no_mangle]
pub extern "C" fn cudaGetSymbolSize(size: *mut usize, symbol: *const c_void) -> cudaError_t {
    guard("cudaGetSymbolSize", || {
        // SAFETY: by cudaGetSymbolSize's contract `size` is NULL or writable.
        unsafe { caller::write(size, variable(symbol as usize)?.1) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::ProgramPage;

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
}
