//! Copies: `cudaMemcpy*` in every kind and variant (1D, 2D, peer, symbols), each
//! taking the route [`crate::copy_route`] chooses.

use std::ffi::c_void;

use vmcuda_wire::op::{
    Memcpy2DDtoD, Memcpy2DDtoH, Memcpy2DHtoD, MemcpyDtoD, MemcpyDtoH, MemcpyHtoD, MemcpyPeer,
    MemcpyShared, PeerExpect, PeerReceive, PeerSend, StreamHandle, StreamSynchronize,
};
use vmcuda_wire::CudaStatus;

use super::{admit, can_post, enqueue, on_memory_host, wait_for_stream};
use crate::abi::runtime::{Memcpy3DParms, PitchedPtr, Pos};
use crate::client::{self, Sink};
use crate::copy_route::{self, Direction, Route, Shape};
use crate::driver::inner::{call, call_with, guard, stream_handle, RawHandle, Result};
use crate::driver::keeping_last_error;
use crate::staging;
use crate::state;
use crate::{caller, cudaError_t};

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
    if let Some((dst_device, src_device)) = across_hosts(direction, dst, src)? {
        let rows = Rows::linear(dst, src, count);
        return across_hosts_copy(rows, dst_device, src_device, stream);
    }
    on_memory_host(&[dst, src], stream, is_async, |stream, is_async| {
        let capturable = copy_route::capturable(direction, Shape::Linear, dst, src, count);
        let rows = Rows::linear(dst, src, count);
        if let Some(staged) = staged_in_capture(rows, direction, stream, is_async, capturable) {
            return staged;
        }
        admit(stream, is_async, capturable)?;
        enqueue(stream, is_async, move || {
            // SAFETY: as `memcpy`'s caller promised.
            unsafe { memcpy_now(dst, src, count, direction, stream, is_async) }
        })
    })
}

/// An asynchronous copy between the device and the program's own host memory in a
/// stream capture, which the host cannot reach when the graph runs: staged through
/// shared pinned memory, a host function moving the bytes on the program's side (see
/// `host_functions::capture_pageable_copy`). `None`: not such a copy, or no shared
/// memory here (the copy is then refused, as before).
fn staged_in_capture(
    rows: Rows,
    direction: Direction,
    stream: StreamHandle,
    is_async: bool,
    capturable: bool,
) -> Option<Result<()>> {
    if !is_async || capturable || !crate::capture::is_capturing(stream) {
        return None;
    }
    if let Err(e) = crate::capture::check_stream_use(stream) {
        return Some(Err(e));
    }
    let rows_of = |p: usize| if rows.height == 1 { rows.width } else { p };
    let (to_device, host, pitch, device, device_pitch) = match direction {
        Direction::HostToDevice => (true, rows.src, rows.spitch, rows.dst, rows.dpitch),
        Direction::DeviceToHost => (false, rows.dst, rows.dpitch, rows.src, rows.spitch),
        _ => return None,
    };
    let copy = crate::host_functions::PageableCopy {
        host,
        pitch: rows_of(pitch),
        device: device as u64,
        device_pitch: rows_of(device_pitch),
        width: rows.width,
        height: rows.height,
        to_device,
    };
    if crate::driver::inner::node_builder::in_build() {
        // A node being built: it is made into one node by its builder.
        return crate::host_functions::capture_pageable_copy(stream, copy);
    }
    // Several nodes: made one, as the program's capture has one copy.
    if !crate::pinned::available() {
        return None;
    }
    Some(crate::driver::inner::node_builder::capture_as_one_node(
        stream,
        |s| {
            crate::host_functions::capture_pageable_copy(s, copy)
                .unwrap_or(Err(CudaStatus::ErrorStreamCaptureUnsupported))
        },
    ))
}

/// The rows of a copy (a linear copy is one row).
#[derive(Clone, Copy)]
struct Rows {
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
}

impl Rows {
    /// A linear copy of `count` bytes: one row.
    fn linear(dst: usize, src: usize, count: usize) -> Rows {
        Rows {
            dst,
            dpitch: 0,
            src,
            spitch: 0,
            width: count,
            height: 1,
        }
    }
}

mod hosts;
use hosts::*;

/// The staging area a [`Route::Staged`] copy goes through.
fn staging_area() -> &'static staging::Staging {
    staging::staging().expect("a copy is staged only where the staging area exists")
}

/// # Safety
/// As for [`memcpy`].
pub(super) unsafe fn memcpy_now(
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
                    crate::driver::inner::post(&req, chunk)?;
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
pub(super) fn shared_copy(
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
        done: None,
    };
    if !is_async && can_post(stream, device as usize, count) {
        // Posted, and the GPU says when it is done (see `done_word`).
        let done = crate::done_word::synchronous(stream, count, |done| {
            let asynchronous = MemcpyShared {
                is_async: true,
                done: Some(done),
                ..req.clone()
            };
            crate::driver::inner::post_now(&asynchronous, &[])
        });
        if let Some(done) = done {
            return done;
        }
    }
    if is_async && can_post(stream, device as usize, count) {
        if to_device {
            return crate::driver::inner::post(&req, &[]);
        }
        POSTED_READS.store(true, std::sync::atomic::Ordering::Relaxed);
        // The program will read that memory: the copy starts now, as natively, not
        // when the queue next goes out (a program that peeks before synchronizing,
        // wrongly but commonly, sees what it would natively more often).
        crate::driver::inner::post_now(&req, &[])
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
    if width > dpitch || width > spitch {
        return Err(CudaStatus::ErrorInvalidPitchValue);
    }
    if let Some((dst_device, src_device)) = across_hosts(direction, dst, src)? {
        let rows = Rows {
            dst,
            dpitch,
            src,
            spitch,
            width,
            height,
        };
        return across_hosts_copy(rows, dst_device, src_device, stream);
    }
    on_memory_host(&[dst, src], stream, is_async, |stream, is_async| {
        let capturable = copy_route::capturable(direction, Shape::Pitched, dst, src, width);
        let rows = Rows {
            dst,
            dpitch,
            src,
            spitch,
            width,
            height,
        };
        if let Some(staged) = staged_in_capture(rows, direction, stream, is_async, capturable) {
            return staged;
        }
        admit(stream, is_async, capturable)?;
        enqueue(stream, is_async, move || {
            // SAFETY: as `memcpy_2d`'s caller promised.
            unsafe {
                memcpy_2d_now(
                    dst, dpitch, src, spitch, width, height, direction, stream, is_async,
                )
            }
        })
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

macro_rules! export_memcpy {
    ($name:ident, $per_thread:expr) => {
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

macro_rules! export_memcpy_async {
    ($name:ident, $per_thread:expr) => {
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
    if crate::driver::inner::on_different_hosts(dst_device, src_device)? {
        let rows = Rows::linear(dst, src, count);
        return across_hosts_copy(rows, dst_device, src_device, stream);
    }
    let req = MemcpyPeer {
        dst: dst as u64,
        dst_device: crate::driver::inner::local_device(dst_device)?,
        src: src as u64,
        src_device: crate::driver::inner::local_device(src_device)?,
        size: count as u64,
        stream,
        is_async,
    };
    on_memory_host(&[dst, src], stream, is_async, |stream, is_async| {
        let req = MemcpyPeer {
            stream,
            is_async,
            ..req
        };
        enqueue(stream, is_async, move || call(&req))
    })
}

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

/// `cudaMemcpyBatchAsync`: each copy in stream order, as `cudaMemcpyAsync` does it (the
/// attributes' access-order hints change nothing here: the copies run in order).
///
/// # Safety
/// The lists hold `count` entries, each copy's host side the program's memory.
unsafe fn memcpy_batch(
    dsts: *const *mut c_void,
    srcs: *const *const c_void,
    sizes: *const usize,
    count: usize,
    num_attrs: usize,
    stream: StreamHandle,
) -> Result<()> {
    if count == 0 || num_attrs == 0 || num_attrs > count {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let (d, s, n) = unsafe {
        (
            caller::slice(dsts, count)?,
            caller::slice(srcs, count)?,
            caller::slice(sizes, count)?,
        )
    };
    for i in 0..count {
        // cudaMemcpyDefault: where each pointer lives says the direction.
        // SAFETY: as the caller promised.
        unsafe { memcpy(d[i] as usize, s[i] as usize, n[i], 4, stream, true) }?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaMemcpyBatchAsync(
    dsts: *const *mut c_void,
    srcs: *const *const c_void,
    sizes: *const usize,
    count: usize,
    _attrs: *mut c_void,
    _attrs_idxs: *mut usize,
    num_attrs: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpyBatchAsync", || {
        // SAFETY: by its contract the lists hold `count` entries of the program's
        // memory.
        unsafe {
            memcpy_batch(
                dsts,
                srcs,
                sizes,
                count,
                num_attrs,
                stream_handle(stream, false),
            )
        }
    })
}

/// A 3D copy between linear memory as pitched 2D copies in `stream`'s order: one when
/// the slices follow each other evenly, else one per slice; a synchronous one waits
/// for the stream after.
pub(crate) fn memcpy_3d_linear(
    p: &Memcpy3DParms,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let raw = stream.0 as usize as RawHandle;
    let run = |f: &dyn Fn() -> cudaError_t| keeping_last_error(f);
    let e = p.extent;
    if e.width == 0 || e.height == 0 || e.depth == 0 {
        return Ok(());
    }
    let at = |q: &PitchedPtr, pos: &Pos| -> usize {
        let slice = q.pitch * q.ysize;
        (q.ptr as usize)
            .wrapping_add(pos.z * slice)
            .wrapping_add(pos.y * q.pitch)
            .wrapping_add(pos.x)
    };
    let (src, dst) = (at(&p.src_ptr, &p.src_pos), at(&p.dst_ptr, &p.dst_pos));
    let even = |q: &PitchedPtr| e.depth == 1 || q.ysize == e.height;
    if even(&p.src_ptr) && even(&p.dst_ptr) {
        let rows = e.height * e.depth;
        let packed = |q: &PitchedPtr| rows == 1 || q.pitch == e.width;
        if packed(&p.src_ptr) && packed(&p.dst_ptr) {
            // One linear copy: the only shape a copy with a host side can be captured
            // in (pinned memory the host reaches; pitched rows go through the socket).
            run(&|| {
                cudaMemcpyAsync(
                    dst as *mut c_void,
                    src as *const c_void,
                    e.width * rows,
                    p.kind,
                    raw,
                )
            })?;
        } else {
            run(&|| {
                cudaMemcpy2DAsync(
                    dst as *mut c_void,
                    p.dst_ptr.pitch,
                    src as *const c_void,
                    p.src_ptr.pitch,
                    e.width,
                    rows,
                    p.kind,
                    raw,
                )
            })?;
        }
    } else {
        for z in 0..e.depth {
            run(&|| {
                cudaMemcpy2DAsync(
                    (dst + z * p.dst_ptr.pitch * p.dst_ptr.ysize) as *mut c_void,
                    p.dst_ptr.pitch,
                    (src + z * p.src_ptr.pitch * p.src_ptr.ysize) as *const c_void,
                    p.src_ptr.pitch,
                    e.width,
                    e.height,
                    p.kind,
                    raw,
                )
            })?;
        }
    }
    if !is_async {
        run(&|| crate::driver::inner::stream::cudaStreamSynchronize(raw))?;
    }
    Ok(())
}
