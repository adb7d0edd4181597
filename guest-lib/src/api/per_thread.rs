//! The per-thread default stream variants of runtime functions that programs built
//! with `--default-stream per-thread` (or `CUDA_API_PER_THREAD_DEFAULT_STREAM`) call:
//! one line each, over the base function.
//!
//! A `_ptsz` variant is its base with a NULL stream meaning the calling thread's
//! default stream (`cudaStreamPerThread`); the legacy stream, named, stays the legacy
//! stream. A `_ptds` variant of a synchronous call is the asynchronous call on the
//! thread's default stream and then a wait for that stream: the ordering the real
//! runtime gives (it runs such calls in that stream, and returns once they are done).

use std::ffi::{c_char, c_void};

use super::RawHandle;
use super::{graph, mem_pool, memory, stream};
use crate::cudaError_t;

/// `cudaStreamPerThread`.
const PER_THREAD: RawHandle = 2 as RawHandle;

/// A `_ptsz` stream argument: NULL is the thread's default stream.
fn per_thread(stream: RawHandle) -> RawHandle {
    if stream.is_null() {
        PER_THREAD
    } else {
        stream
    }
}

/// `_ptsz` variants: the base function with [`per_thread`] applied to `$stream`.
macro_rules! ptsz {
    ($($name:ident => $base:path [$stream:ident] ($($arg:ident: $ty:ty),* $(,)?);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) -> cudaError_t {
            let $stream = per_thread($stream);
            $base($($arg),*)
        }
    )*};
}

/// `_ptds` variants of synchronous calls: the asynchronous one on the thread's default
/// stream, then a wait for that stream.
macro_rules! ptds {
    ($($name:ident => $async_base:path [] ($($arg:ident: $ty:ty),* $(,)?);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) -> cudaError_t {
            match $async_base($($arg,)* PER_THREAD) {
                0 => stream::cudaStreamSynchronize(PER_THREAD),
                e => e,
            }
        }
    )*};
}

ptsz! {
    cudaFreeAsync_ptsz => mem_pool::cudaFreeAsync [stream] (ptr: *mut c_void, stream: RawHandle);
    cudaMallocAsync_ptsz => mem_pool::cudaMallocAsync [stream] (ptr: *mut *mut c_void, size: usize, stream: RawHandle);
    cudaGraphLaunch_ptsz => graph::cudaGraphLaunch [stream] (exec: RawHandle, stream: RawHandle);
    cudaMemcpyToSymbolAsync_ptsz => memory::cudaMemcpyToSymbolAsync [stream] (
        symbol: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32, stream: RawHandle);
    cudaMemcpyFromSymbolAsync_ptsz => memory::cudaMemcpyFromSymbolAsync [stream] (
        dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize, kind: u32, stream: RawHandle);
    cudaMemset2DAsync_ptsz => memory::cudaMemset2DAsync [stream] (
        ptr: *mut c_void, pitch: usize, value: i32, width: usize, height: usize, stream: RawHandle);
    cudaStreamBeginCapture_ptsz => graph::cudaStreamBeginCapture [stream] (stream: RawHandle, mode: u32);
    cudaStreamEndCapture_ptsz => graph::cudaStreamEndCapture [stream] (stream: RawHandle, graph: *mut RawHandle);
    cudaStreamIsCapturing_ptsz => graph::cudaStreamIsCapturing [stream] (stream: RawHandle, status: *mut u32);
    cudaStreamGetCaptureInfo_ptsz => graph::cudaStreamGetCaptureInfo [stream] (
        stream: RawHandle, status: *mut u32, id: *mut u64, graph: *mut RawHandle,
        dependencies: *mut *const RawHandle, edge_data: *mut *const c_void, count: *mut usize);
    cudaStreamGetDevice_ptsz => stream::cudaStreamGetDevice [stream] (stream: RawHandle, device: *mut i32);
    cudaStreamGetFlags_ptsz => stream::cudaStreamGetFlags [stream] (stream: RawHandle, flags: *mut u32);
    cudaStreamGetId_ptsz => stream::cudaStreamGetId [stream] (stream: RawHandle, id: *mut u64);
    cudaStreamGetPriority_ptsz => stream::cudaStreamGetPriority [stream] (stream: RawHandle, priority: *mut i32);
    cudaStreamSetAttribute_ptsz => stream::cudaStreamSetAttribute [stream] (
        stream: RawHandle, attr: u32, value: *const [u8; stream::STREAM_ATTR_LEN]);
    cudaStreamGetAttribute_ptsz => stream::cudaStreamGetAttribute [stream] (
        stream: RawHandle, attr: u32, value: *mut [u8; stream::STREAM_ATTR_LEN]);
}

ptds! {
    cudaMemset_ptds => memory::cudaMemsetAsync [] (ptr: *mut c_void, value: i32, count: usize);
    cudaMemset2D_ptds => memory::cudaMemset2DAsync [] (
        ptr: *mut c_void, pitch: usize, value: i32, width: usize, height: usize);
    cudaMemcpy2D_ptds => memory::cudaMemcpy2DAsync [] (
        dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32);
    cudaMemcpyToSymbol_ptds => memory::cudaMemcpyToSymbolAsync [] (
        symbol: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32);
    cudaMemcpyFromSymbol_ptds => memory::cudaMemcpyFromSymbolAsync [] (
        dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize, kind: u32);
}

/// Both streams NULL-is-per-thread.
#[no_mangle]
pub extern "C" fn cudaStreamCopyAttributes_ptsz(dst: RawHandle, src: RawHandle) -> cudaError_t {
    stream::cudaStreamCopyAttributes(per_thread(dst), per_thread(src))
}

/// `cudaEnablePerThreadDefaultStream`: what the default flags mean for a program built
/// for the per-thread default stream.
const ENABLE_PER_THREAD: u64 = 2;

#[no_mangle]
pub extern "C" fn cudaGetDriverEntryPoint_ptsz(
    symbol: *const c_char,
    func: *mut *mut c_void,
    flags: u64,
    status: *mut i32,
) -> cudaError_t {
    let flags = if flags == 0 { ENABLE_PER_THREAD } else { flags };
    super::errors::cudaGetDriverEntryPoint(symbol, func, flags, status)
}

#[no_mangle]
pub extern "C" fn cudaGetDriverEntryPointByVersion_ptsz(
    symbol: *const c_char,
    func: *mut *mut c_void,
    version: u32,
    flags: u64,
    status: *mut i32,
) -> cudaError_t {
    let flags = if flags == 0 { ENABLE_PER_THREAD } else { flags };
    super::errors::cudaGetDriverEntryPointByVersion(symbol, func, version, flags, status)
}
