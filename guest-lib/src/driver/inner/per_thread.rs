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
        stream: RawHandle, attr: u32, value: *const [u8; crate::abi::runtime::STREAM_ATTR_LEN]);
    cudaStreamGetAttribute_ptsz => stream::cudaStreamGetAttribute [stream] (
        stream: RawHandle, attr: u32, value: *mut [u8; crate::abi::runtime::STREAM_ATTR_LEN]);
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
pub extern "C" fn cudaStreamCopyAttributes_ptsz(dst: RawHandle, src: RawHandle) -> cudaError_t {
    stream::cudaStreamCopyAttributes(per_thread(dst), per_thread(src))
}

/// `cudaEnablePerThreadDefaultStream`: what the default flags mean for a program built
/// for the per-thread default stream.
const ENABLE_PER_THREAD: u64 = 2;

pub extern "C" fn cudaGetDriverEntryPoint_ptsz(
    symbol: *const c_char,
    func: *mut *mut c_void,
    flags: u64,
    status: *mut i32,
) -> cudaError_t {
    let flags = if flags == 0 { ENABLE_PER_THREAD } else { flags };
    super::errors::cudaGetDriverEntryPoint(symbol, func, flags, status)
}

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

/// Each thread's own default stream (`cudaStreamPerThread`, `CU_STREAM_PER_THREAD`,
/// and the NULL stream of a `_ptsz` call): a blocking stream the guest makes for the
/// thread on first use on each device, so that the default streams of two threads run
/// independently of each other, as natively, and each synchronizes with the legacy
/// stream. It goes away with its thread. If it cannot be made (no connection), the host's
/// shared per-thread stream stands in, and the call fails there as it would.
pub(crate) mod default_stream {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    use vmcuda_wire::op::{StreamCreate, StreamDestroy, StreamHandle};

    use crate::state::{self, registry, StreamInfo};

    /// Bumped by a device reset, which destroys every stream of the device on the host:
    /// streams made before it are made again.
    static EPOCH: AtomicU64 = AtomicU64::new(0);

    /// This thread's streams: device -> (stream, the epoch it was made in).
    struct Streams(HashMap<i32, (StreamHandle, u64)>);

    impl Drop for Streams {
        /// Nothing here waits: a thread may exit while another holds the connection in
        /// a long call, or the whole process may be exiting under one. What is not done
        /// (the connection busy, host functions still queued on the stream) the host
        /// undoes when the connection closes.
        fn drop(&mut self) {
            let epoch = EPOCH.load(Ordering::Acquire);
            for (device, (stream, made)) in self.0.drain() {
                if let Some(mut r) = state::try_registry() {
                    r.streams.remove(&stream.0);
                }
                if made == epoch && !crate::gate::stream_busy(stream) {
                    // Posted behind the thread's own work on it, which still runs.
                    let _ = std::panic::catch_unwind(|| {
                        crate::client::client()
                            .and_then(|c| c.post_if_free(device, &StreamDestroy { stream }))
                    });
                }
            }
        }
    }

    thread_local! {
        static STREAMS: RefCell<Streams> = RefCell::new(Streams(HashMap::new()));
    }

    /// The calling thread's default stream on the current device.
    pub(crate) fn current() -> StreamHandle {
        let device = state::current_device();
        let epoch = EPOCH.load(Ordering::Acquire);
        let known = STREAMS
            .try_with(|s| s.borrow().0.get(&device).copied())
            .ok()
            .flatten();
        match known {
            Some((stream, made)) if made == epoch => stream,
            _ => make(device, epoch).unwrap_or(StreamHandle::PER_THREAD),
        }
    }

    fn make(device: i32, epoch: u64) -> Option<StreamHandle> {
        let stream = StreamHandle(state::fresh_id());
        let req = StreamCreate {
            stream,
            flags: 0,
            priority: 0,
        };
        crate::driver::inner::post(&req, &[]).ok()?;
        registry().streams.insert(
            stream.0,
            StreamInfo {
                device,
                flags: 0,
                priority: 0,
            },
        );
        let kept = STREAMS.try_with(|s| s.borrow_mut().0.insert(device, (stream, epoch)));
        if let Ok(Some((old, _))) = kept {
            registry().streams.remove(&old.0);
        }
        Some(stream)
    }

    /// A device was reset: its streams are gone on the host.
    pub(crate) fn forget() {
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
}
