//! The CUDA executor: a guest's calls run on real GPUs through the CUDA driver API
//! (cudarc's raw `sys` bindings, with libcuda loaded at run time).
//!
//! Design:
//! - [`CudaExecutor::new`] checks that libcuda can be loaded and exports every entry
//!   point used here before the first cudarc call (cudarc panics on a missing library
//!   or symbol), so a host without a GPU gets an error and can fall back.
//! - One retained primary context per device, made lazily. Every call that needs a
//!   context first binds the current device's context to the calling thread (a cheap
//!   `cuCtxGetCurrent` compare), so the executor never relies on stale thread state.
//! - Stream and event ids are the driver handles' pointer values; ids from the guest
//!   are looked up in this executor's tables before anything reaches the driver.
//!   `LEGACY_STREAM` is the NULL stream and `PER_THREAD_STREAM` `CU_STREAM_PER_THREAD`.
//! - A module is one fatbinary, which may hold several containers back to back (nvcc 13
//!   puts a linker stub's container before the user's): each container is loaded with
//!   `cuLibraryLoadData` (context-independent) and images are cached by SHA-256.
//!   Functions are `CUkernel`s, launched directly with `cuLaunchKernelEx`.
//! - Synchronous copies above [`STAGING_THRESHOLD`] go through a per-device pinned
//!   buffer in two halves: filling (or draining) one half overlaps the DMA of the
//!   other, on the target stream, so stream ordering is that of the plain copy.
//! - Every failing `CUresult` becomes `CudaStatus::from_driver(code)`.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::ptr;

use cudarc::driver::sys;
use sha2::{Digest, Sha256};
use tracing::{debug, warn};
use vmcuda_wire::fatbin::{container_total_len, CONTAINER_HEADER_LEN};
use vmcuda_wire::op::{
    DeviceProperties, DevicePtr, ExecutorKind, FuncAttributes, LaunchAttribute, ParamInfo,
    PointerAttributes,
};
use vmcuda_wire::CudaStatus;

use crate::policy::GpuSelection;

use super::{
    ExecEvent, ExecFunction, ExecModule, ExecResult, ExecStream, Executor, LaunchConfig, Pitched,
    LEGACY_STREAM, PER_THREAD_STREAM,
};

/// Synchronous copies larger than this go through the pinned staging buffer.
pub const STAGING_THRESHOLD: usize = 256 * 1024;
/// Size of each of the two halves of a device's pinned staging buffer.
pub const STAGING_HALF: usize = 8 << 20;
/// `CU_STREAM_PER_THREAD` (`(CUstream)0x2` in cuda.h).
const CU_STREAM_PER_THREAD: usize = 0x2;
/// Queued device-to-host copies into the worker's reply area are split into pieces of
/// this many bytes, each with its own event, so the worker can send a piece while the
/// next is still on the copy engine.
const DTOH_PIECE: usize = 256 << 10;
/// `CU_DEVICE_INVALID` (`(CUdevice)-2` in cuda.h): the device ordinal the driver
/// reports for a pointer it does not know.
const CU_DEVICE_INVALID: c_int = -2;
/// Size of `CUlaunchAttributeValue` (and of the runtime's `cudaLaunchAttributeValue`).
const LAUNCH_ATTRIBUTE_VALUE_LEN: usize = 64;
/// Upper bound on the parameter-info walk (the parameter buffer is at most 32 KiB).
const MAX_KERNEL_PARAMS: usize = 32 * 1024;
/// `cuDeviceGetAttribute` with plain integers, so that probing every attribute number
/// never materialises an invalid `CUdevice_attribute` enum value.
type RawDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, sys::CUdevice) -> c_uint;

/// Every driver entry point this executor calls. cudarc resolves symbols lazily and
/// panics on a missing one, so `new` checks them all up front.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuDeviceGetP2PAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxGetLimit",
    "cuCtxSetLimit",
    "cuCtxGetCacheConfig",
    "cuCtxSetCacheConfig",
    "cuCtxGetStreamPriorityRange",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemHostRegister_v2",
    "cuMemHostGetDevicePointer_v2",
    "cuMemHostUnregister",
    "cuMemFree_v2",
    "cuMemAllocPitch_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpy2D_v2",
    "cuMemcpy2DAsync_v2",
    "cuMemsetD8_v2",
    "cuMemsetD8Async",
    "cuMemsetD2D8_v2",
    "cuMemsetD2D8Async",
    "cuMemcpyPeer",
    "cuMemcpyPeerAsync",
    "cuPointerGetAttributes",
    "cuLibraryLoadData",
    "cuLibraryUnload",
    "cuLibraryGetKernel",
    "cuLibraryGetGlobal",
    "cuKernelGetParamInfo",
    "cuKernelGetAttribute",
    "cuKernelSetAttribute",
    "cuKernelSetCacheConfig",
    "cuKernelGetFunction",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cuOccupancyAvailableDynamicSMemPerBlock",
    "cuLaunchKernelEx",
    "cuStreamCreateWithPriority",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventElapsedTime_v2",
];

/// `Ok` for `CUDA_SUCCESS`, else the runtime status with the same meaning.
fn check(r: sys::CUresult) -> ExecResult<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaStatus::from_driver(r as u32))
    }
}

fn to_usize(v: u64) -> ExecResult<usize> {
    usize::try_from(v).map_err(|_| CudaStatus::ErrorInvalidValue)
}

/// Rejects a device range whose end does not fit in 64 bits, so that chunk offsets
/// computed later cannot overflow.
fn check_range(ptr: DevicePtr, len: usize) -> ExecResult<()> {
    ptr.checked_add(len as u64)
        .map(|_| ())
        .ok_or(CudaStatus::ErrorInvalidValue)
}

/// `width * height` as a byte count that must equal a host buffer's length.
fn packed_len(width: u64, height: u64) -> ExecResult<usize> {
    width
        .checked_mul(height)
        .ok_or(CudaStatus::ErrorInvalidValue)
        .and_then(to_usize)
}

/// The enum variant of `$ty` whose number is `$v`, if it is one of those listed.
macro_rules! enum_from_u32 {
    ($v:expr, $ty:ident, [$($var:ident),* $(,)?]) => {{
        let v: u32 = $v;
        $(if v == sys::$ty::$var as u32 {
            Some(sys::$ty::$var)
        } else)* {
            None
        }
    }};
}

/// The runtime's `cudaLimit` numbers are `CUlimit`'s.
fn limit_from(limit: u32) -> Option<sys::CUlimit> {
    enum_from_u32!(
        limit,
        CUlimit,
        [
            CU_LIMIT_STACK_SIZE,
            CU_LIMIT_PRINTF_FIFO_SIZE,
            CU_LIMIT_MALLOC_HEAP_SIZE,
            CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH,
            CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT,
            CU_LIMIT_MAX_L2_FETCH_GRANULARITY,
            CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
        ]
    )
}

/// The runtime's `cudaFuncCache` numbers are `CUfunc_cache`'s.
fn cache_config_from(config: u32) -> Option<sys::CUfunc_cache> {
    enum_from_u32!(
        config,
        CUfunc_cache,
        [
            CU_FUNC_CACHE_PREFER_NONE,
            CU_FUNC_CACHE_PREFER_SHARED,
            CU_FUNC_CACHE_PREFER_L1,
            CU_FUNC_CACHE_PREFER_EQUAL,
        ]
    )
}

/// The settable `cudaFuncAttribute`s (8..=15) have the numbers of the matching
/// `CUfunction_attribute`s.
fn func_attribute_from(attribute: i32) -> Option<sys::CUfunction_attribute> {
    let attribute = u32::try_from(attribute).ok()?;
    enum_from_u32!(
        attribute,
        CUfunction_attribute,
        [
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH,
            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
        ]
    )
}

/// The runtime's `cudaLaunchAttributeID` numbers are `CUlaunchAttributeID`'s.
fn launch_attribute_id_from(id: u32) -> Option<sys::CUlaunchAttributeID> {
    enum_from_u32!(
        id,
        CUlaunchAttributeID,
        [
            CU_LAUNCH_ATTRIBUTE_IGNORE,
            CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
            CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
            CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
            CU_LAUNCH_ATTRIBUTE_PRIORITY,
            CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
            CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
            CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
            CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
            CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
            CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
        ]
    )
}

/// An entry point of a library cudarc loaded (the driver, cuBLAS, cuBLASLt), with the C
/// signature `F`; a library without it answers `cudaErrorNotSupported`, logged.
///
/// # Safety
/// `F` must be the symbol's C signature (or a plain address, `*const c_void`).
unsafe fn entry_point<F: Copy>(
    lib: &libloading::Library,
    library: &'static str,
    name: &str,
) -> ExecResult<F> {
    // SAFETY: only looks the symbol up; the caller vouches for its signature.
    match unsafe { lib.get::<F>(name.as_bytes()) } {
        Ok(f) => Ok(*f),
        Err(_) => {
            warn!(
                library,
                name, "an entry point this executor needs is missing"
            );
            Err(CudaStatus::ErrorNotSupported)
        }
    }
}

/// Splits a module image into what `cuLibraryLoadData` takes one at a time: the
/// fatbinary containers laid back to back, or a single ELF cubin or PTX text.
fn split_image(image: &[u8]) -> ExecResult<Vec<&[u8]>> {
    if image.starts_with(b"\x7fELF") || is_ptx(image) {
        return Ok(vec![image]);
    }
    let mut pieces = Vec::new();
    let mut rest = image;
    while !rest.is_empty() {
        let header = rest
            .get(..CONTAINER_HEADER_LEN)
            .and_then(|h| <&[u8; CONTAINER_HEADER_LEN]>::try_from(h).ok());
        let total = header.and_then(|h| container_total_len(h).ok());
        let Some(total) = total else {
            if pieces.is_empty() {
                return Err(CudaStatus::ErrorInvalidKernelImage);
            }
            // Trailing bytes that are not a container (e.g. padding) end the walk.
            break;
        };
        let total = usize::try_from(total).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
        if total > rest.len() {
            return Err(CudaStatus::ErrorInvalidKernelImage);
        }
        let (piece, tail) = rest.split_at(total);
        pieces.push(piece);
        rest = tail;
    }
    if pieces.is_empty() {
        return Err(CudaStatus::ErrorInvalidKernelImage);
    }
    Ok(pieces)
}

/// Whether an image is PTX text (the driver's JIT compiles it): no NUL inside (the
/// guest sends the text without its terminator) and a `.version` directive near the
/// top, after the comments ptxas and NVRTC write there.
fn is_ptx(image: &[u8]) -> bool {
    let end = image.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let text = &image[..end];
    let head = &text[..text.len().min(4096)];
    !text.is_empty() && !text.contains(&0) && head.windows(8).any(|w| w == b".version")
}

/// Loads one fatbinary container or cubin. The driver parses the image through its
/// own headers, so it gets an 8-byte aligned copy with zero padding behind it (it
/// keeps its own copy of the code, so the buffer may go afterwards).
fn load_library(piece: &[u8]) -> ExecResult<sys::CUlibrary> {
    let mut words = vec![0u64; piece.len().div_ceil(8) + 8];
    for (word, chunk) in words.iter_mut().zip(piece.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    let mut library: sys::CUlibrary = ptr::null_mut();
    // SAFETY: `library` is a valid out-pointer; `words` holds the image and outlives
    // the call; no JIT or library options are passed (null arrays with zero counts).
    let r = unsafe {
        sys::cuLibraryLoadData(
            &mut library,
            words.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    };
    check(r)?;
    Ok(library)
}

/// The parameter layout of a kernel, in declaration order.
fn kernel_params(kernel: sys::CUkernel) -> ExecResult<Vec<ParamInfo>> {
    let mut params = Vec::new();
    for index in 0..MAX_KERNEL_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `kernel` came from cuLibraryGetKernel of a library still loaded;
        // both out-pointers are locals.
        let r = unsafe { sys::cuKernelGetParamInfo(kernel, index, &mut offset, &mut size) };
        if r == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
            break; // past the last parameter
        }
        check(r)?;
        params.push(ParamInfo {
            offset: u32::try_from(offset).map_err(|_| CudaStatus::ErrorInvalidValue)?,
            size: u32::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?,
        });
    }
    Ok(params)
}

/// A device's pinned staging buffer (two halves of [`STAGING_HALF`] bytes) and the
/// events that say when the DMA of each half is over. All of it belongs to the
/// device's primary context.
#[derive(Clone, Copy)]
struct Staging {
    host: *mut u8,
    events: [sys::CUevent; 2],
}

impl Staging {
    /// Allocates the buffer and events in the current context.
    fn create() -> ExecResult<Staging> {
        let mut host: *mut c_void = ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; flags 0 is a plain pinned allocation.
        check(unsafe { sys::cuMemHostAlloc(&mut host, 2 * STAGING_HALF, 0) })?;
        let mut staging = Staging {
            host: host.cast(),
            events: [ptr::null_mut(); 2],
        };
        for i in 0..2 {
            let mut event: sys::CUevent = ptr::null_mut();
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
            // SAFETY: `event` is a valid out-pointer.
            let r = unsafe { sys::cuEventCreate(&mut event, flags) };
            if let Err(e) = check(r) {
                staging.destroy();
                return Err(e);
            }
            staging.events[i] = event;
        }
        Ok(staging)
    }

    /// Frees the buffer and events; the owning context must be current and no copy
    /// may be using them.
    fn destroy(self) {
        for event in self.events {
            if !event.is_null() {
                // SAFETY: the event was created by `create` and is destroyed once.
                let _ = unsafe { sys::cuEventDestroy_v2(event) };
            }
        }
        // SAFETY: `host` came from cuMemHostAlloc in `create` and is freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.host.cast()) };
    }

    fn half(&self, h: usize) -> *mut u8 {
        // Stays inside the 2 * STAGING_HALF allocation for h in 0..2.
        self.host.wrapping_add((h % 2) * STAGING_HALF)
    }
}

/// Host to device through the staging buffer, on stream `s`; returns once the data
/// has arrived. The caller has bound the context owning `st` and checked the range.
fn staged_htod(st: Staging, dst: DevicePtr, src: &[u8], s: sys::CUstream) -> ExecResult<()> {
    let result = (|| {
        for (i, chunk) in src.chunks(STAGING_HALF).enumerate() {
            let h = i % 2;
            let buf = st.half(h);
            if i >= 2 {
                // Half h last fed chunk i - 2: wait until its DMA has read it.
                // SAFETY: the event belongs to the current context and was recorded.
                check(unsafe { sys::cuEventSynchronize(st.events[h]) })?;
            }
            // SAFETY: `buf` has STAGING_HALF >= chunk.len() bytes of our pinned
            // buffer that no DMA reads any more; the guest's bytes do not overlap it.
            unsafe { ptr::copy_nonoverlapping(chunk.as_ptr(), buf, chunk.len()) };
            let at = dst + (i * STAGING_HALF) as u64;
            // SAFETY: `buf` is pinned and stays untouched until the event recorded
            // below has completed; the device range was checked by the caller.
            check(unsafe { sys::cuMemcpyHtoDAsync_v2(at, buf.cast(), chunk.len(), s) })?;
            // SAFETY: the event and stream belong to the current context.
            check(unsafe { sys::cuEventRecord(st.events[h], s) })?;
        }
        // SAFETY: `s` is a stream of the current context (or a default stream).
        check(unsafe { sys::cuStreamSynchronize(s) })
    })();
    if result.is_err() {
        // Let nothing in flight still read the staging buffer (best effort).
        // SAFETY: as above.
        let _ = unsafe { sys::cuStreamSynchronize(s) };
    }
    result
}

/// Device to host through the staging buffer, on stream `s`: the DMA of chunk i runs
/// while chunk i - 1 is copied out. Returns once `dst` is filled.
fn staged_dtoh(st: Staging, dst: &mut [u8], src: DevicePtr, s: sys::CUstream) -> ExecResult<()> {
    let n = dst.len();
    let chunk_range = |i: usize| {
        let off = i * STAGING_HALF;
        (off, STAGING_HALF.min(n - off))
    };
    let mut drain = |i: usize| -> ExecResult<()> {
        let h = i % 2;
        let (off, len) = chunk_range(i);
        // SAFETY: the event belongs to the current context and was recorded after
        // the DMA into half h.
        check(unsafe { sys::cuEventSynchronize(st.events[h]) })?;
        // SAFETY: the DMA into half h is complete; `dst[off..off + len]` is in
        // bounds (len is clamped to n - off) and does not overlap the pinned buffer.
        unsafe { ptr::copy_nonoverlapping(st.half(h), dst[off..off + len].as_mut_ptr(), len) };
        Ok(())
    };
    let result = (|| {
        let chunks = n.div_ceil(STAGING_HALF);
        for i in 0..chunks {
            let h = i % 2;
            let (off, len) = chunk_range(i);
            // Half h last held chunk i - 2, drained in the previous iteration.
            // SAFETY: `half(h)` has STAGING_HALF >= len pinned bytes nobody reads
            // or writes now; the device range was checked by the caller.
            let r =
                unsafe { sys::cuMemcpyDtoHAsync_v2(st.half(h).cast(), src + off as u64, len, s) };
            check(r)?;
            // SAFETY: the event and stream belong to the current context.
            check(unsafe { sys::cuEventRecord(st.events[h], s) })?;
            if i > 0 {
                drain(i - 1)?;
            }
        }
        if chunks > 0 {
            drain(chunks - 1)?;
        }
        Ok(())
    })();
    if result.is_err() {
        // Let no DMA still write into the staging buffer (best effort).
        // SAFETY: `s` is a stream of the current context (or a default stream).
        let _ = unsafe { sys::cuStreamSynchronize(s) };
    }
    result
}

/// Launch-shape limits of a device, for the checks the runtime makes itself.
#[derive(Clone, Copy)]
struct LaunchLimits {
    max_threads: u64,
    max_block: [u64; 3],
    max_grid: [u64; 3],
}

enum StagingState {
    Untried,
    Ready(Staging),
    Unavailable,
}

struct Device {
    handle: sys::CUdevice,
    name: String,
    /// The retained primary context, once made.
    ctx: Option<sys::CUcontext>,
    staging: StagingState,
    limits: Option<LaunchLimits>,
    /// A non-blocking stream of our own for zeroing fresh allocations, so the zeroing
    /// waits for none of the guest's work and none of it waits for the zeroing.
    scrub_stream: Option<sys::CUstream>,
}

/// A loaded fatbinary: one library per container that loaded, and the first load
/// error, reported when a kernel or variable is found in none of them.
struct Module {
    libraries: Vec<sys::CUlibrary>,
    load_error: Option<CudaStatus>,
}

mod blas;
mod blas_table;
mod blaslt;
mod driver;
mod graph;

/// The executor for real GPUs. See the module documentation.
pub struct CudaExecutor {
    driver_version: i32,
    devices: Vec<Device>,
    /// Index into `devices` of the current device.
    current: usize,
    get_attribute_raw: RawDeviceGetAttribute,
    /// Live streams and events (handle value -> device index).
    streams: HashMap<ExecStream, usize>,
    events: HashMap<ExecEvent, usize>,
    modules: HashMap<ExecModule, Module>,
    module_by_digest: HashMap<[u8; 32], ExecModule>,
    next_module: ExecModule,
    /// Kernels handed out (id = the `CUkernel` pointer value).
    functions: HashMap<ExecFunction, sys::CUkernel>,
    /// `CUfunction`s of kernels in a device's context, for the occupancy calls.
    function_cache: HashMap<(ExecFunction, usize), sys::CUfunction>,
    /// Host ranges registered with the driver (start, length): copies to and from them
    /// are DMA'd directly, with no staging.
    registered: Vec<(usize, usize)>,
    /// cuBLAS handles and entry points (see `blas`).
    blas: blas::CudaBlas,
    /// cuBLASLt handles and entry points (see `blaslt`).
    lt: blaslt::CudaLt,
    queued: QueuedCopies,
    /// Graphs and executable graphs (see `graph`).
    graph_tables: graph::CudaGraphs,
}

/// Copies from and into the worker's page-locked buffers queued without waiting (see
/// `Executor::copy_htod_queued`), each followed by an event recorded on its stream.
#[derive(Default)]
struct QueuedCopies {
    /// Worker buffer -> (device index, event) of the copy last queued from it.
    htod: HashMap<usize, (usize, sys::CUevent)>,
    /// The pieces of the last device-to-host copy not waited for yet, in order:
    /// (first byte, device index, event).
    dtoh: VecDeque<(usize, usize, sys::CUevent)>,
    /// Events free for reuse: (device index, event).
    spare: Vec<(usize, sys::CUevent)>,
}

/// A device's UUID bytes.
fn device_uuid(handle: sys::CUdevice) -> ExecResult<[u8; 16]> {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: out-pointer to a local; `handle` came from cuDeviceGet.
    check(unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, handle) })?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// A UUID as nvidia-smi writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

impl CudaExecutor {
    /// Whether `[ptr, ptr + len)` lies inside one registered (page-locked) range.
    fn page_locked(&self, ptr: usize, len: usize) -> bool {
        self.registered
            .iter()
            .any(|(s, l)| ptr >= *s && ptr + len <= s + l)
    }
}

impl CudaExecutor {
    /// Initialises the driver. Fails (without panicking) when libcuda is missing or
    /// too old, when `cuInit` fails, or when there is no device.
    /// Only the GPUs `gpus` selects are visible, in its order: the guest's device i
    /// is the host's `gpus[i]`.
    pub fn new(gpus: &GpuSelection) -> Result<CudaExecutor, CudaStatus> {
        // SAFETY: only dlopens candidate library names and closes them again.
        if !unsafe { sys::is_culib_present() } {
            debug!("libcuda not found");
            return Err(CudaStatus::ErrorNoDevice);
        }
        match std::panic::catch_unwind(|| Self::init(gpus)) {
            Ok(result) => result,
            Err(_) => {
                warn!("the CUDA driver library panicked while loading");
                Err(CudaStatus::ErrorNoDevice)
            }
        }
    }

    fn init(gpus: &GpuSelection) -> Result<CudaExecutor, CudaStatus> {
        // SAFETY: `is_culib_present` succeeded, so cudarc finds the library again.
        let lib = unsafe { sys::culib() };
        // SAFETY: only looks symbols up; the pointers are not used.
        let missing: Vec<&str> = REQUIRED_SYMBOLS
            .iter()
            .chain(graph::SYMBOLS)
            .copied()
            .filter(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
            .collect();
        if !missing.is_empty() {
            warn!(
                ?missing,
                "the CUDA driver lacks entry points this executor needs"
            );
            return Err(CudaStatus::ErrorInsufficientDriver);
        }
        // SAFETY: the symbol exists (checked above) and has this C signature, with
        // plain integers for the enum argument and the result.
        let get_attribute_raw: RawDeviceGetAttribute = unsafe {
            match lib.get::<RawDeviceGetAttribute>(b"cuDeviceGetAttribute") {
                Ok(f) => *f,
                Err(_) => return Err(CudaStatus::ErrorInsufficientDriver),
            }
        };

        // SAFETY: plain driver initialisation.
        check(unsafe { sys::cuInit(0) })?;
        let mut driver_version = 0;
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuDriverGetVersion(&mut driver_version) })?;
        let mut count = 0;
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuDeviceGetCount(&mut count) })?;
        if count <= 0 {
            return Err(CudaStatus::ErrorNoDevice);
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let mut handle: sys::CUdevice = 0;
            // SAFETY: out-pointer to a local; the ordinal is below the count.
            check(unsafe { sys::cuDeviceGet(&mut handle, ordinal) })?;
            let mut name = [0 as c_char; 256];
            // SAFETY: the buffer has the length passed; the driver NUL-terminates.
            check(unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, handle) })?;
            let bytes: Vec<u8> = name
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            devices.push(Device {
                handle,
                name: String::from_utf8_lossy(&bytes).into_owned(),
                ctx: None,
                staging: StagingState::Untried,
                limits: None,
                scrub_stream: None,
            });
        }
        let uuids = devices
            .iter()
            .map(|d| device_uuid(d.handle).map(|u| format_uuid(&u)))
            .collect::<Result<Vec<_>, _>>()?;
        let picked = gpus.resolve(&uuids).map_err(|msg| {
            warn!("{msg}");
            CudaStatus::ErrorNoDevice
        })?;
        let mut all: Vec<Option<Device>> = devices.into_iter().map(Some).collect();
        let devices: Vec<Device> = picked.iter().filter_map(|&i| all[i].take()).collect();
        if devices.is_empty() {
            return Err(CudaStatus::ErrorNoDevice);
        }
        debug!(
            driver_version,
            devices = devices.len(),
            "CUDA driver initialised"
        );
        Ok(CudaExecutor {
            driver_version,
            devices,
            current: 0,
            get_attribute_raw,
            streams: HashMap::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            module_by_digest: HashMap::new(),
            next_module: 1,
            functions: HashMap::new(),
            function_cache: HashMap::new(),
            registered: Vec::new(),
            blas: Default::default(),
            lt: Default::default(),
            queued: QueuedCopies::default(),
            graph_tables: Default::default(),
        })
    }

    fn device_index(&self, device: i32) -> ExecResult<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&i| i < self.devices.len())
            .ok_or(CudaStatus::ErrorInvalidDevice)
    }

    /// The retained primary context of device `idx`, retaining it on first use.
    fn context(&mut self, idx: usize) -> ExecResult<sys::CUcontext> {
        let dev = self
            .devices
            .get_mut(idx)
            .ok_or(CudaStatus::ErrorInvalidDevice)?;
        if let Some(ctx) = dev.ctx {
            return Ok(ctx);
        }
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: out-pointer to a local; `handle` came from cuDeviceGet.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev.handle) })?;
        debug!(device = idx, "retained the primary context");
        dev.ctx = Some(ctx);
        Ok(ctx)
    }

    /// Makes the current device's primary context current on this thread (skipped
    /// when it already is) and returns the device index.
    fn bind(&mut self) -> ExecResult<usize> {
        let idx = self.current;
        let ctx = self.context(idx)?;
        let mut now: sys::CUcontext = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuCtxGetCurrent(&mut now) })?;
        if now != ctx {
            // SAFETY: `ctx` is a primary context this executor retained and holds.
            check(unsafe { sys::cuCtxSetCurrent(ctx) })?;
        }
        Ok(idx)
    }

    /// The driver stream for an executor stream id.
    fn stream(&self, id: ExecStream) -> ExecResult<sys::CUstream> {
        match id {
            LEGACY_STREAM => Ok(ptr::null_mut()),
            PER_THREAD_STREAM => Ok(CU_STREAM_PER_THREAD as sys::CUstream),
            _ if self.streams.contains_key(&id) => Ok(id as usize as sys::CUstream),
            _ => Err(CudaStatus::ErrorInvalidResourceHandle),
        }
    }

    fn event(&self, id: ExecEvent) -> ExecResult<sys::CUevent> {
        if self.events.contains_key(&id) {
            Ok(id as usize as sys::CUevent)
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }

    fn kernel(&self, function: ExecFunction) -> ExecResult<sys::CUkernel> {
        self.functions
            .get(&function)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }

    /// The kernel's `CUfunction` in device `idx`'s context, which must be current.
    fn function_in_context(
        &mut self,
        function: ExecFunction,
        idx: usize,
    ) -> ExecResult<sys::CUfunction> {
        if let Some(&f) = self.function_cache.get(&(function, idx)) {
            return Ok(f);
        }
        let kernel = self.kernel(function)?;
        let mut f: sys::CUfunction = ptr::null_mut();
        // SAFETY: out-pointer to a local; `kernel` belongs to a loaded library.
        check(unsafe { sys::cuKernelGetFunction(&mut f, kernel) })?;
        self.function_cache.insert((function, idx), f);
        Ok(f)
    }

    /// The staging buffer of device `idx` (whose context must be current), made on
    /// first use; `None` when pinned memory cannot be had (copies then go direct).
    fn staging(&mut self, idx: usize) -> Option<Staging> {
        let dev = &mut self.devices[idx];
        match dev.staging {
            StagingState::Ready(st) => Some(st),
            StagingState::Unavailable => None,
            StagingState::Untried => match Staging::create() {
                Ok(st) => {
                    debug!(
                        device = idx,
                        bytes = 2 * STAGING_HALF,
                        "pinned staging buffer ready"
                    );
                    dev.staging = StagingState::Ready(st);
                    Some(st)
                }
                Err(e) => {
                    warn!(device = idx, error = %e, "no pinned staging buffer; copying directly");
                    dev.staging = StagingState::Unavailable;
                    None
                }
            },
        }
    }

    fn launch_limits(&mut self, idx: usize) -> ExecResult<LaunchLimits> {
        if let Some(limits) = self.devices[idx].limits {
            return Ok(limits);
        }
        let handle = self.devices[idx].handle;
        let get = |attr: sys::CUdevice_attribute| -> ExecResult<u64> {
            let mut v: c_int = 0;
            // SAFETY: out-pointer to a local; `handle` came from cuDeviceGet.
            check(unsafe { sys::cuDeviceGetAttribute(&mut v, attr, handle) })?;
            Ok(u64::try_from(v).unwrap_or(0))
        };
        use sys::CUdevice_attribute as A;
        let limits = LaunchLimits {
            max_threads: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
        };
        self.devices[idx].limits = Some(limits);
        Ok(limits)
    }

    /// One wire launch attribute as the driver's `CUlaunchAttribute`.
    fn launch_attribute(&self, attr: &LaunchAttribute) -> ExecResult<sys::CUlaunchAttribute> {
        if attr.value.len() > LAUNCH_ATTRIBUTE_VALUE_LEN {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = launch_attribute_id_from(attr.id).ok_or(CudaStatus::ErrorInvalidValue)?;
        if matches!(
            id,
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
                | sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT
        ) {
            // The value starts with a CUevent: it must be one of ours.
            let mut handle = [0u8; 8];
            for (d, s) in handle.iter_mut().zip(&attr.value) {
                *d = *s;
            }
            self.event(u64::from_ne_bytes(handle))?;
        }
        let mut pad = [0 as c_char; LAUNCH_ATTRIBUTE_VALUE_LEN];
        for (d, s) in pad.iter_mut().zip(&attr.value) {
            *d = *s as c_char;
        }
        Ok(sys::CUlaunchAttribute {
            id,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue { pad },
        })
    }

    /// Runs a 2D copy: the synchronous driver call on the legacy stream, else the
    /// asynchronous one on `s`, followed by a wait on `s` when `wait`.
    fn memcpy_2d(
        &self,
        p: &sys::CUDA_MEMCPY2D,
        stream: ExecStream,
        s: sys::CUstream,
        is_async: bool,
        wait: bool,
    ) -> ExecResult<()> {
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: `p` describes buffers the caller checked and keeps alive.
            return check(unsafe { sys::cuMemcpy2D_v2(p) });
        }
        // SAFETY: as above; a pageable source is staged by the driver before the
        // call returns, and a host destination is waited for below.
        check(unsafe { sys::cuMemcpy2DAsync_v2(p, s) })?;
        if wait {
            // SAFETY: `s` is a checked stream of this executor or a default stream.
            check(unsafe { sys::cuStreamSynchronize(s) })?;
        }
        Ok(())
    }

    /// Destroys the streams, events and staging buffer of device `idx`, whose context
    /// must be current. Errors are ignored: this is cleanup.
    /// Device `idx`'s scrub stream (its context must be current), made on first use.
    fn scrub_stream(&mut self, idx: usize) -> ExecResult<sys::CUstream> {
        if let Some(s) = self.devices[idx].scrub_stream {
            return Ok(s);
        }
        let mut s: sys::CUstream = ptr::null_mut();
        // SAFETY: out-pointer to a local; a context is current. Flag 1 is
        // CU_STREAM_NON_BLOCKING.
        check(unsafe { sys::cuStreamCreate(&mut s, 1) })?;
        self.devices[idx].scrub_stream = Some(s);
        Ok(s)
    }

    fn destroy_device_objects(&mut self, idx: usize) {
        // cuBLAS(Lt) handles and graphs first: they use the streams below.
        self.lt_destroy_device(idx);
        self.blas_destroy_device(idx);
        self.graphs_destroy_device(idx);
        self.forget_queued(idx);
        if let Some(s) = self.devices[idx].scrub_stream.take() {
            // SAFETY: made by scrub_stream and destroyed once (it has left the device).
            let _ = unsafe { sys::cuStreamDestroy_v2(s) };
        }
        let streams: Vec<ExecStream> = self
            .streams
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&s, _)| s)
            .collect();
        for id in streams {
            self.streams.remove(&id);
            // SAFETY: the stream was created by stream_create and is destroyed once.
            let _ = unsafe { sys::cuStreamDestroy_v2(id as usize as sys::CUstream) };
        }
        let events: Vec<ExecEvent> = self
            .events
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&e, _)| e)
            .collect();
        for id in events {
            self.events.remove(&id);
            // SAFETY: the event was created by event_create and is destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(id as usize as sys::CUevent) };
        }
        if let StagingState::Ready(st) =
            std::mem::replace(&mut self.devices[idx].staging, StagingState::Untried)
        {
            st.destroy();
        }
        self.function_cache.retain(|&(_, d), _| d != idx);
    }
}

impl Executor for CudaExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Cuda
    }

    fn banner(&self) -> String {
        let first = &self.devices[0].name;
        let names = if self.devices.iter().all(|d| &d.name == first) {
            format!("{} x {}", self.devices.len(), first)
        } else {
            self.devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("CUDA executor: {names} (driver {})", self.driver_version)
    }

    fn driver_version(&self) -> i32 {
        self.driver_version
    }

    fn device_count(&self) -> i32 {
        self.devices.len() as i32
    }

    fn set_device(&mut self, device: i32) -> ExecResult<()> {
        let idx = self.device_index(device)?;
        let previous = self.current;
        self.current = idx;
        if let Err(e) = self.bind() {
            self.current = previous;
            return Err(e);
        }
        Ok(())
    }

    fn device_properties(&mut self, device: i32) -> ExecResult<DeviceProperties> {
        let idx = self.device_index(device)?;
        let handle = self.devices[idx].handle;
        let uuid = device_uuid(handle)?;
        let mut total: usize = 0;
        // SAFETY: as above.
        check(unsafe { sys::cuDeviceTotalMem_v2(&mut total, handle) })?;
        let max = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX as u32;
        let mut attributes = Vec::with_capacity(max as usize);
        for attr in 1..max {
            let mut value: c_int = 0;
            // SAFETY: the function pointer is libcuda's cuDeviceGetAttribute, called
            // with its C signature; it only writes `value`.
            let r = unsafe { (self.get_attribute_raw)(&mut value, attr as c_int, handle) };
            if r == 0 {
                attributes.push((attr, value));
            }
        }
        Ok(DeviceProperties {
            name: self.devices[idx].name.clone(),
            uuid,
            luid: [0; 8],
            luid_device_node_mask: 0,
            total_global_mem: total as u64,
            attributes,
        })
    }

    fn synchronize(&mut self) -> ExecResult<()> {
        self.bind()?;
        // SAFETY: a context is current.
        check(unsafe { sys::cuCtxSynchronize() })
    }

    fn device_reset(&mut self) -> ExecResult<()> {
        let idx = self.current;
        if self.devices[idx].ctx.is_none() {
            return Ok(()); // never initialised: nothing to reset
        }
        // Best effort: the objects are destroyed with the context anyway.
        let _ = self.bind();
        self.destroy_device_objects(idx);
        let handle = self.devices[idx].handle;
        // SAFETY: `handle` came from cuDeviceGet; every object of ours in that
        // context has just been destroyed.
        check(unsafe { sys::cuDevicePrimaryCtxReset_v2(handle) })?;
        // Resetting keeps our reference: take a fresh handle and drop the extra one.
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, handle) })?;
        // SAFETY: balances the retain just above; our original reference remains.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(handle) };
        self.devices[idx].ctx = Some(ctx);
        debug!(device = idx, "device reset");
        // SAFETY: `ctx` is the retained primary context.
        check(unsafe { sys::cuCtxSetCurrent(ctx) })
    }

    fn get_limit(&mut self, limit: u32) -> ExecResult<u64> {
        self.bind()?;
        let limit = limit_from(limit).ok_or(CudaStatus::ErrorInvalidValue)?;
        let mut value: usize = 0;
        // SAFETY: out-pointer to a local; a context is current.
        check(unsafe { sys::cuCtxGetLimit(&mut value, limit) })?;
        Ok(value as u64)
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> ExecResult<()> {
        self.bind()?;
        let limit = limit_from(limit).ok_or(CudaStatus::ErrorInvalidValue)?;
        let value = to_usize(value)?;
        // SAFETY: a context is current.
        check(unsafe { sys::cuCtxSetLimit(limit, value) })
    }

    fn get_cache_config(&mut self) -> ExecResult<u32> {
        self.bind()?;
        let mut raw: u32 = 0;
        // SAFETY: CUfunc_cache is a 4-byte C enum; the driver writes it into `raw`,
        // which is only ever read as an integer.
        check(unsafe { sys::cuCtxGetCacheConfig((&mut raw as *mut u32).cast()) })?;
        Ok(raw)
    }

    fn set_cache_config(&mut self, config: u32) -> ExecResult<()> {
        self.bind()?;
        let config = cache_config_from(config).ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: a context is current.
        check(unsafe { sys::cuCtxSetCacheConfig(config) })
    }

    fn stream_priority_range(&mut self) -> ExecResult<(i32, i32)> {
        self.bind()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: out-pointers to locals; a context is current.
        check(unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) })?;
        Ok((least, greatest))
    }

    fn can_access_peer(&mut self, device: i32, peer: i32) -> ExecResult<bool> {
        let a = self.devices[self.device_index(device)?].handle;
        let b = self.devices[self.device_index(peer)?].handle;
        let mut can: c_int = 0;
        // SAFETY: out-pointer to a local; both handles came from cuDeviceGet.
        check(unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) })?;
        Ok(can != 0)
    }

    fn p2p_attribute(&mut self, attr: u32, src: i32, dst: i32) -> ExecResult<i32> {
        use sys::CUdevice_P2PAttribute as A;
        let attr = match attr {
            1 => A::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
            2 => A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
            3 => A::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            4 => A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED,
            5 => A::CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        let a = self.devices[self.device_index(src)?].handle;
        let b = self.devices[self.device_index(dst)?].handle;
        let mut value: c_int = 0;
        // SAFETY: out-pointer to a local; both handles came from cuDeviceGet and the
        // attribute is a valid enum value.
        check(unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attr, a, b) })?;
        Ok(value)
    }

    fn enable_peer_access(&mut self, peer: i32, flags: u32) -> ExecResult<()> {
        let peer_idx = self.device_index(peer)?;
        let peer_ctx = self.context(peer_idx)?;
        self.bind()?;
        // SAFETY: `peer_ctx` is a retained primary context; a context is current.
        check(unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, flags) })
    }

    fn disable_peer_access(&mut self, peer: i32) -> ExecResult<()> {
        let peer_idx = self.device_index(peer)?;
        self.bind()?;
        // A peer whose context was never made cannot have been enabled.
        let peer_ctx = self.devices[peer_idx]
            .ctx
            .ok_or(CudaStatus::ErrorPeerAccessNotEnabled)?;
        // SAFETY: `peer_ctx` is a retained primary context; a context is current.
        check(unsafe { sys::cuCtxDisablePeerAccess(peer_ctx) })
    }

    fn mem_info(&mut self) -> ExecResult<(u64, u64)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out-pointers to locals; a context is current.
        check(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&mut self, size: u64) -> ExecResult<DevicePtr> {
        self.bind()?;
        if size == 0 {
            return Ok(0);
        }
        let size = to_usize(size)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; a context is current.
        check(unsafe { sys::cuMemAlloc_v2(&mut ptr, size) })?;
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        self.bind()?;
        if ptr == 0 {
            return Ok(());
        }
        // SAFETY: the driver validates the pointer; a context is current.
        check(unsafe { sys::cuMemFree_v2(ptr) })
    }

    fn alloc_pitch(&mut self, width: u64, height: u64) -> ExecResult<(DevicePtr, u64)> {
        self.bind()?;
        if width == 0 || height == 0 {
            return Ok((0, 0));
        }
        let (width, height) = (to_usize(width)?, to_usize(height)?);
        let mut ptr: sys::CUdeviceptr = 0;
        let mut pitch: usize = 0;
        // SAFETY: out-pointers to locals; a context is current.
        check(unsafe { sys::cuMemAllocPitch_v2(&mut ptr, &mut pitch, width, height, 16) })?;
        Ok((ptr, pitch as u64))
    }

    fn copy_htod(
        &mut self,
        dst: DevicePtr,
        src: &[u8],
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        check_range(dst, src.len())?;
        if is_async {
            // SAFETY: `src` is valid for its length during the call, and the driver
            // copies pageable memory to its own staging before returning.
            check(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), s) })?;
            if self.page_locked(src.as_ptr() as usize, src.len()) {
                // From page-locked memory the DMA really is asynchronous, and `src`
                // (the worker's receive buffer) is reused as soon as we return: wait,
                // as the driver itself does for a pageable source.
                // SAFETY: `s` is a checked stream of this executor or a default stream.
                check(unsafe { sys::cuStreamSynchronize(s) })?;
            }
            return Ok(());
        }
        if src.len() > STAGING_THRESHOLD && !self.page_locked(src.as_ptr() as usize, src.len()) {
            if let Some(st) = self.staging(idx) {
                return staged_htod(st, dst, src, s);
            }
        }
        if stream == LEGACY_STREAM {
            // SAFETY: `src` is valid for its length during the call.
            return check(unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) });
        }
        // SAFETY: as above; the wait below keeps the copy synchronous.
        check(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), s) })?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        check(unsafe { sys::cuStreamSynchronize(s) })
    }

    fn copy_dtoh(
        &mut self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        // Asynchronous or not, the reply carries the bytes: the copy is waited for.
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        check_range(src, dst.len())?;
        if dst.len() > STAGING_THRESHOLD && !self.page_locked(dst.as_ptr() as usize, dst.len()) {
            if let Some(st) = self.staging(idx) {
                return staged_dtoh(st, dst, src, s);
            }
        }
        if stream == LEGACY_STREAM {
            // SAFETY: `dst` is valid and exclusively ours for its length.
            return check(unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) });
        }
        // SAFETY: as above; the copy is waited for before `dst` is used again.
        check(unsafe { sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), s) })?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        check(unsafe { sys::cuStreamSynchronize(s) })
    }

    fn copy_dtod(
        &mut self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if size == 0 {
            return Ok(());
        }
        let size = to_usize(size)?;
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: device pointers are validated by the driver.
            return check(unsafe { sys::cuMemcpyDtoD_v2(dst, src, size) });
        }
        // SAFETY: as above; `s` is checked.
        check(unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, size, s) })
    }

    fn copy_2d_htod(
        &mut self,
        dst: Pitched,
        src: &[u8],
        width: u64,
        height: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if src.len() != packed_len(width, height)? {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            srcHost: src.as_ptr().cast(),
            srcDevice: 0,
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(width)?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: ptr::null_mut(),
            dstDevice: dst.ptr,
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(dst.pitch)?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        // A page-locked source (the worker's receive buffer) is reused once we
        // return, so an asynchronous copy from it is waited for, as the driver waits
        // for a pageable one.
        let wait = !is_async || self.page_locked(src.as_ptr() as usize, src.len());
        self.memcpy_2d(&p, stream, s, is_async, wait)
    }

    fn copy_2d_dtoh(
        &mut self,
        dst: &mut [u8],
        src: Pitched,
        width: u64,
        height: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if dst.len() != packed_len(width, height)? {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: ptr::null(),
            srcDevice: src.ptr,
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(src.pitch)?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            dstHost: dst.as_mut_ptr().cast(),
            dstDevice: 0,
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(width)?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        // The reply carries the bytes: always wait.
        self.memcpy_2d(&p, stream, s, is_async, true)
    }

    fn copy_2d_dtod(
        &mut self,
        dst: Pitched,
        src: Pitched,
        width: u64,
        height: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: ptr::null(),
            srcDevice: src.ptr,
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(src.pitch)?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: ptr::null_mut(),
            dstDevice: dst.ptr,
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(dst.pitch)?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        self.memcpy_2d(&p, stream, s, is_async, false)
    }

    fn memset(
        &mut self,
        dst: DevicePtr,
        value: u8,
        size: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if size == 0 {
            return Ok(());
        }
        let size = to_usize(size)?;
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: the device range is validated by the driver.
            return check(unsafe { sys::cuMemsetD8_v2(dst, value, size) });
        }
        // SAFETY: as above; `s` is checked.
        check(unsafe { sys::cuMemsetD8Async(dst, value, size, s) })
    }

    fn zero_fill(&mut self, dst: DevicePtr, size: u64) -> ExecResult<()> {
        let idx = self.bind()?;
        if size == 0 {
            return Ok(());
        }
        let size = to_usize(size)?;
        let s = self.scrub_stream(idx)?;
        // SAFETY: `dst` is an allocation the driver just made; `s` is ours.
        check(unsafe { sys::cuMemsetD8Async(dst, 0, size, s) })?;
        // SAFETY: as above. Waiting here means the zeroes are in place before the
        // guest hears of the allocation, whatever stream it then uses.
        check(unsafe { sys::cuStreamSynchronize(s) })
    }

    fn memset_2d(
        &mut self,
        dst: Pitched,
        value: u8,
        width: u64,
        height: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        let (pitch, width, height) = (to_usize(dst.pitch)?, to_usize(width)?, to_usize(height)?);
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: the device range is validated by the driver.
            return check(unsafe { sys::cuMemsetD2D8_v2(dst.ptr, pitch, value, width, height) });
        }
        // SAFETY: as above; `s` is checked.
        check(unsafe { sys::cuMemsetD2D8Async(dst.ptr, pitch, value, width, height, s) })
    }

    fn copy_peer(
        &mut self,
        dst: DevicePtr,
        dst_device: i32,
        src: DevicePtr,
        src_device: i32,
        size: u64,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        let dst_idx = self.device_index(dst_device)?;
        let src_idx = self.device_index(src_device)?;
        let dst_ctx = self.context(dst_idx)?;
        let src_ctx = self.context(src_idx)?;
        self.bind()?;
        let s = self.stream(stream)?;
        if size == 0 {
            return Ok(());
        }
        let size = to_usize(size)?;
        if is_async {
            // SAFETY: both contexts are retained primary contexts; `s` is checked;
            // device pointers are validated by the driver.
            return check(unsafe { sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, size, s) });
        }
        // SAFETY: as above.
        check(unsafe { sys::cuMemcpyPeer(dst, dst_ctx, src, src_ctx, size) })
    }

    /// For a pointer the driver does not know, the answer is what the driver fills in
    /// (memory type 0 = `cudaMemoryTypeUnregistered`, device `CU_DEVICE_INVALID` = -2,
    /// device pointer 0), which is what the runtime reports from it.
    fn host_register(&mut self, ptr: u64, size: u64) -> ExecResult<DevicePtr> {
        self.bind()?;
        let size = to_usize(size)?;
        // Portable (every context) and mapped (reachable from kernels), as CUDA 13 treats
        // all pinned memory.
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the session mapped `[ptr, ptr + size)` into this process (shared
        // with the guest) before calling, and keeps it mapped until host_unregister.
        check(unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, size, flags) })?;
        self.registered.push((ptr as usize, size));
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` was registered just above; the driver writes one CUdeviceptr.
        let r =
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, ptr as *mut c_void, 0) };
        if let Err(e) = check(r) {
            // SAFETY: undoing the registration made above.
            unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) };
            self.registered.retain(|(p, _)| *p != ptr as usize);
            return Err(e);
        }
        Ok(device_ptr)
    }

    fn host_unregister(&mut self, ptr: u64) -> ExecResult<()> {
        self.bind()?;
        self.registered.retain(|(p, _)| *p != ptr as usize);
        // SAFETY: the driver checks that `ptr` starts a registered range.
        check(unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) })
    }

    fn copy_registered(
        &mut self,
        device: DevicePtr,
        host: u64,
        size: u64,
        to_device: bool,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if size == 0 {
            return Ok(());
        }
        let len = to_usize(size)?;
        check_range(device, len)?;
        let host = host as *mut c_void;
        // SAFETY: the session checked that `[host, host + len)` lies inside one range it
        // mapped and registered with the driver (host_register), which stays mapped and
        // registered until host_unregister, and that `[device, device + len)` is the
        // guest's own memory. Guest memory changing under the DMA is the guest's race,
        // as with native pinned memory; it cannot touch this process's own memory.
        check(unsafe {
            if to_device {
                sys::cuMemcpyHtoDAsync_v2(device, host, len, s)
            } else {
                sys::cuMemcpyDtoHAsync_v2(host, device, len, s)
            }
        })?;
        if is_async {
            return Ok(());
        }
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        check(unsafe { sys::cuStreamSynchronize(s) })
    }

    fn pointer_attributes(&mut self, ptr: DevicePtr) -> ExecResult<PointerAttributes> {
        self.bind()?;
        let mut memory_type: c_uint = 0;
        // Written as a C bool (one byte) or int: zeroed either way.
        let mut is_managed: c_uint = 0;
        let mut ordinal: c_int = CU_DEVICE_INVALID;
        let mut device_pointer: sys::CUdeviceptr = 0;
        use sys::CUpointer_attribute as P;
        let mut attributes = [
            P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            P::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        ];
        let mut data: [*mut c_void; 4] = [
            (&mut memory_type as *mut c_uint).cast(),
            (&mut is_managed as *mut c_uint).cast(),
            (&mut ordinal as *mut c_int).cast(),
            (&mut device_pointer as *mut sys::CUdeviceptr).cast(),
        ];
        // SAFETY: four attributes, each with a data pointer to a local of at least
        // the size the driver writes for it (unsigned int, bool, int, CUdeviceptr).
        let r = unsafe {
            sys::cuPointerGetAttributes(
                attributes.len() as c_uint,
                attributes.as_mut_ptr(),
                data.as_mut_ptr(),
                ptr,
            )
        };
        check(r)?;
        // CUmemorytype: 1 host, 2 device; cudaMemoryType: 1 host, 2 device, 3 managed.
        let memory_type = if is_managed != 0 {
            3
        } else {
            i32::try_from(memory_type).unwrap_or(0)
        };
        Ok(PointerAttributes {
            memory_type,
            device: ordinal,
            device_pointer,
        })
    }

    fn load_module(&mut self, image: &[u8]) -> ExecResult<ExecModule> {
        self.bind()?;
        let digest: [u8; 32] = Sha256::digest(image).into();
        if let Some(&module) = self.module_by_digest.get(&digest) {
            return Ok(module);
        }
        let mut libraries = Vec::new();
        let mut load_error = None;
        for (i, piece) in split_image(image)?.into_iter().enumerate() {
            match load_library(piece) {
                Ok(library) => libraries.push(library),
                Err(e) => {
                    warn!(container = i, bytes = piece.len(), error = %e, "cuLibraryLoadData failed");
                    load_error.get_or_insert(e);
                }
            }
        }
        if libraries.is_empty() {
            return Err(load_error.unwrap_or(CudaStatus::ErrorInvalidKernelImage));
        }
        let module = self.next_module;
        self.next_module += 1;
        debug!(
            module,
            libraries = libraries.len(),
            bytes = image.len(),
            "module loaded"
        );
        self.modules.insert(
            module,
            Module {
                libraries,
                load_error,
            },
        );
        self.module_by_digest.insert(digest, module);
        Ok(module)
    }

    fn get_function(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecFunction, Vec<ParamInfo>)> {
        self.bind()?;
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let cname = CString::new(name).map_err(|_| CudaStatus::ErrorInvalidDeviceFunction)?;
        let mut found = None;
        for &library in &m.libraries {
            let mut kernel: sys::CUkernel = ptr::null_mut();
            // SAFETY: out-pointer to a local; `library` is loaded; `cname` is a
            // NUL-terminated string that outlives the call.
            let r = unsafe { sys::cuLibraryGetKernel(&mut kernel, library, cname.as_ptr()) };
            if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                continue;
            }
            check(r)?;
            found = Some(kernel);
            break;
        }
        let kernel = match found {
            Some(kernel) => kernel,
            None => {
                return Err(m
                    .load_error
                    .unwrap_or(CudaStatus::ErrorInvalidDeviceFunction))
            }
        };
        let params = kernel_params(kernel)?;
        let id = kernel as usize as ExecFunction;
        self.functions.insert(id, kernel);
        debug!(
            module,
            name,
            function = id,
            params = params.len(),
            "kernel found"
        );
        Ok((id, params))
    }

    fn get_global(&mut self, module: ExecModule, name: &str) -> ExecResult<(DevicePtr, u64)> {
        self.bind()?;
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let cname = CString::new(name).map_err(|_| CudaStatus::ErrorInvalidSymbol)?;
        for &library in &m.libraries {
            let mut ptr: sys::CUdeviceptr = 0;
            let mut size: usize = 0;
            // SAFETY: out-pointers to locals; `library` is loaded; `cname` outlives
            // the call.
            let r =
                unsafe { sys::cuLibraryGetGlobal(&mut ptr, &mut size, library, cname.as_ptr()) };
            if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                continue;
            }
            check(r)?;
            return Ok((ptr, size as u64));
        }
        Err(m.load_error.unwrap_or(CudaStatus::ErrorInvalidSymbol))
    }

    fn func_attributes(&mut self, function: ExecFunction) -> ExecResult<FuncAttributes> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let handle = self.devices[idx].handle;
        let get = |attr: sys::CUfunction_attribute| -> ExecResult<i32> {
            let mut value: c_int = 0;
            // SAFETY: out-pointer to a local; `kernel` belongs to a loaded library;
            // `handle` came from cuDeviceGet.
            check(unsafe { sys::cuKernelGetAttribute(&mut value, attr, kernel, handle) })?;
            Ok(value)
        };
        // The cluster attributes are answered by every device this runs on (sm_90+);
        // should one fail elsewhere, it reads as 0 rather than failing the call.
        let optional = |attr| get(attr).unwrap_or(0);
        let bytes = |v: i32| u64::try_from(v).unwrap_or(0);
        use sys::CUfunction_attribute as F;
        Ok(FuncAttributes {
            shared_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?),
            const_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?),
            local_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
            max_threads_per_block: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            num_regs: get(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            ptx_version: get(F::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
            binary_version: get(F::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
            cache_mode_ca: get(F::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA)?,
            max_dynamic_shared_size_bytes: get(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            preferred_shmem_carveout: get(F::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)?,
            cluster_dim_must_be_set: optional(F::CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET),
            required_cluster_width: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH),
            required_cluster_height: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT),
            required_cluster_depth: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH),
            cluster_scheduling_policy_preference: optional(
                F::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            ),
            non_portable_cluster_size_allowed: optional(
                F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            ),
        })
    }

    fn func_set_attribute(
        &mut self,
        function: ExecFunction,
        attribute: i32,
        value: i32,
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let attr = func_attribute_from(attribute).ok_or(CudaStatus::ErrorInvalidValue)?;
        let handle = self.devices[idx].handle;
        // SAFETY: `kernel` belongs to a loaded library; `handle` came from cuDeviceGet.
        check(unsafe { sys::cuKernelSetAttribute(attr, value, kernel, handle) })
    }

    fn func_set_cache_config(&mut self, function: ExecFunction, config: u32) -> ExecResult<()> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let config = cache_config_from(config).ok_or(CudaStatus::ErrorInvalidValue)?;
        let handle = self.devices[idx].handle;
        // SAFETY: `kernel` belongs to a loaded library; `handle` came from cuDeviceGet.
        check(unsafe { sys::cuKernelSetCacheConfig(kernel, config, handle) })
    }

    fn launch(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        params: &[u8],
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        // The kernel's function in this context, looked up once: launching the
        // library's kernel handle instead makes the driver find it on every launch.
        let func = self.function_in_context(function, idx)?;
        let s = self.stream(config.stream)?;

        // Impossible shapes are refused before the driver sees them, with the code
        // CUDA 13's runtime gives (cudaErrorInvalidValue, measured on the H200).
        let limits = self.launch_limits(idx)?;
        let block = config.block.map(u64::from);
        let grid = config.grid.map(u64::from);
        let bad_shape = block.contains(&0)
            || grid.contains(&0)
            || block.iter().product::<u64>() > limits.max_threads
            || block.iter().zip(&limits.max_block).any(|(b, m)| b > m)
            || grid.iter().zip(&limits.max_grid).any(|(g, m)| g > m);
        if bad_shape {
            return Err(CudaStatus::ErrorInvalidValue);
        }

        let mut attrs = config
            .attributes
            .iter()
            .map(|a| self.launch_attribute(a))
            .collect::<ExecResult<Vec<_>>>()?;
        let cfg = sys::CUlaunchConfig {
            gridDimX: config.grid[0],
            gridDimY: config.grid[1],
            gridDimZ: config.grid[2],
            blockDimX: config.block[0],
            blockDimY: config.block[1],
            blockDimZ: config.block[2],
            sharedMemBytes: config.shared_mem,
            hStream: s,
            attrs: if attrs.is_empty() {
                ptr::null_mut()
            } else {
                attrs.as_mut_ptr()
            },
            numAttrs: c_uint::try_from(attrs.len()).map_err(|_| CudaStatus::ErrorInvalidValue)?,
        };

        // Each parameter must sit at an address aligned as it is (up to 16 bytes):
        // copy the buffer when its start is not 16-byte aligned.
        let aligned: Vec<u128>;
        let buffer: *const u8 = if (params.as_ptr() as usize) & 15 == 0 {
            params.as_ptr()
        } else {
            let mut words = vec![0u128; params.len().div_ceil(16)];
            for (word, chunk) in words.iter_mut().zip(params.chunks(16)) {
                let mut bytes = [0u8; 16];
                bytes[..chunk.len()].copy_from_slice(chunk);
                *word = u128::from_ne_bytes(bytes);
            }
            aligned = words;
            aligned.as_ptr().cast()
        };
        let mut size: usize = params.len();
        let mut extra: [*mut c_void; 5] = [
            sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
            buffer.cast_mut().cast(),
            sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
            (&mut size as *mut usize).cast(),
            sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void,
        ];
        let extra_ptr = if params.is_empty() {
            ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };
        if attrs.is_empty() {
            // SAFETY: `func` belongs to the current context (bound above); `extra` is
            // the END-terminated list whose buffer (`size` bytes) and size word outlive
            // the call, and the driver copies the parameters before returning.
            return check(unsafe {
                sys::cuLaunchKernel(
                    func,
                    cfg.gridDimX,
                    cfg.gridDimY,
                    cfg.gridDimZ,
                    cfg.blockDimX,
                    cfg.blockDimY,
                    cfg.blockDimZ,
                    cfg.sharedMemBytes,
                    s,
                    ptr::null_mut(),
                    extra_ptr,
                )
            });
        }
        // SAFETY: as above; `cfg` and the attribute array it points to live until the
        // call returns.
        let r = unsafe { sys::cuLaunchKernelEx(&cfg, func, ptr::null_mut(), extra_ptr) };
        check(r)
    }

    fn occupancy_max_active_blocks(
        &mut self,
        function: ExecFunction,
        block_size: i32,
        dynamic_smem: u64,
        flags: u32,
    ) -> ExecResult<i32> {
        let idx = self.bind()?;
        let f = self.function_in_context(function, idx)?;
        let smem = to_usize(dynamic_smem)?;
        let mut blocks: c_int = 0;
        // SAFETY: out-pointer to a local; `f` is the kernel's function in the
        // current context.
        check(unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                &mut blocks,
                f,
                block_size,
                smem,
                flags,
            )
        })?;
        Ok(blocks)
    }

    fn occupancy_available_dynamic_smem(
        &mut self,
        function: ExecFunction,
        num_blocks: i32,
        block_size: i32,
    ) -> ExecResult<u64> {
        let idx = self.bind()?;
        let f = self.function_in_context(function, idx)?;
        let mut bytes: usize = 0;
        // SAFETY: out-pointer to a local; `f` is the kernel's function in the
        // current context.
        check(unsafe {
            sys::cuOccupancyAvailableDynamicSMemPerBlock(&mut bytes, f, num_blocks, block_size)
        })?;
        Ok(bytes as u64)
    }

    fn stream_create(&mut self, flags: u32, priority: i32) -> ExecResult<ExecStream> {
        let idx = self.bind()?;
        let mut s: sys::CUstream = ptr::null_mut();
        // SAFETY: out-pointer to a local; a context is current.
        check(unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, priority) })?;
        let id = s as usize as ExecStream;
        self.streams.insert(id, idx);
        debug!(stream = id, device = idx, flags, priority, "stream created");
        Ok(id)
    }

    fn stream_destroy(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        if self.streams.remove(&stream).is_none() {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        debug!(stream, "stream destroyed");
        // SAFETY: the stream was created by stream_create and is destroyed once
        // (it has just left the table).
        check(unsafe { sys::cuStreamDestroy_v2(stream as usize as sys::CUstream) })
    }

    fn stream_synchronize(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        check(unsafe { sys::cuStreamSynchronize(s) })
    }

    fn stream_query(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: as above. CUDA_ERROR_NOT_READY maps to ErrorNotReady.
        check(unsafe { sys::cuStreamQuery(s) })
    }

    fn stream_wait_event(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let e = self.event(event)?;
        // SAFETY: `s` and `e` are checked handles of this executor (or a default
        // stream).
        check(unsafe { sys::cuStreamWaitEvent(s, e, flags) })
    }

    fn event_create(&mut self, flags: u32) -> ExecResult<ExecEvent> {
        let idx = self.bind()?;
        let mut e: sys::CUevent = ptr::null_mut();
        // SAFETY: out-pointer to a local; a context is current.
        check(unsafe { sys::cuEventCreate(&mut e, flags) })?;
        let id = e as usize as ExecEvent;
        self.events.insert(id, idx);
        debug!(event = id, device = idx, flags, "event created");
        Ok(id)
    }

    fn event_destroy(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        if self.events.remove(&event).is_none() {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // SAFETY: the event was created by event_create and is destroyed once (it
        // has just left the table).
        check(unsafe { sys::cuEventDestroy_v2(event as usize as sys::CUevent) })
    }

    fn event_record(&mut self, event: ExecEvent, stream: ExecStream, flags: u32) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        // SAFETY: `e` and `s` are checked handles of this executor (or a default
        // stream).
        check(unsafe { sys::cuEventRecordWithFlags(e, s, flags) })
    }

    fn event_synchronize(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        // SAFETY: `e` is a checked event of this executor.
        check(unsafe { sys::cuEventSynchronize(e) })
    }

    fn event_query(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        // SAFETY: as above. CUDA_ERROR_NOT_READY maps to ErrorNotReady.
        check(unsafe { sys::cuEventQuery(e) })
    }

    fn event_elapsed_ms(&mut self, start: ExecEvent, end: ExecEvent) -> ExecResult<f32> {
        self.bind()?;
        let a = self.event(start)?;
        let b = self.event(end)?;
        let mut ms: f32 = 0.0;
        // SAFETY: out-pointer to a local; both events are checked.
        check(unsafe { sys::cuEventElapsedTime_v2(&mut ms, a, b) })?;
        Ok(ms)
    }

    fn copy_htod_queued(
        &mut self,
        dst: DevicePtr,
        src: &[u8],
        stream: ExecStream,
        is_async: bool,
        buffer: usize,
    ) -> ExecResult<()> {
        // The worker released the buffer before filling it; this only guards the rule.
        self.release_buffer(buffer)?;
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        if !self.page_locked(src.as_ptr() as usize, src.len()) {
            return self.copy_htod(dst, src, stream, is_async);
        }
        check_range(dst, src.len())?;
        let event = self.copy_event(idx)?;
        // SAFETY: `src` is page-locked memory of the worker's, left untouched until
        // release_buffer(buffer) has waited for the event recorded below; the device
        // range was checked; `s` is a checked stream of this executor or a default one.
        let r = check(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), s) })
            // SAFETY: the event was made in the current context, as `s` was.
            .and_then(|()| check(unsafe { sys::cuEventRecord(event, s) }));
        match r {
            Ok(()) => {
                self.queued.htod.insert(buffer, (idx, event));
                Ok(())
            }
            Err(e) => {
                self.queued.spare.push((idx, event));
                // A copy queued before the record failed may still read the buffer.
                // SAFETY: as above.
                let _ = unsafe { sys::cuStreamSynchronize(s) };
                Err(e)
            }
        }
    }

    fn release_buffer(&mut self, buffer: usize) -> ExecResult<()> {
        match self.queued.htod.remove(&buffer) {
            Some((idx, event)) => self.wait_queued(idx, event),
            None => Ok(()),
        }
    }

    fn copy_dtoh_queued(
        &mut self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()> {
        // The area holds one reply at a time; the worker waited for the last one's
        // pieces already, this only guards the rule.
        let _ = self.dtoh_landed(usize::MAX);
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        if !self.page_locked(dst.as_ptr() as usize, dst.len()) {
            return self.copy_dtoh(dst, src, stream, is_async);
        }
        check_range(src, dst.len())?;
        let base = dst.as_mut_ptr();
        for start in (0..dst.len()).step_by(DTOH_PIECE) {
            let len = DTOH_PIECE.min(dst.len() - start);
            let queued = self.copy_event(idx).and_then(|event| {
                // SAFETY: `base + start` starts `len` bytes inside `dst`, page-locked
                // memory of the worker's that it neither reads before dtoh_landed has
                // waited for the event recorded below nor frees before all of them; the
                // device range was checked; `s` is a checked stream.
                let r = check(unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        base.wrapping_add(start).cast(),
                        src + start as u64,
                        len,
                        s,
                    )
                })
                // SAFETY: the event was made in the current context, as `s` was.
                .and_then(|()| check(unsafe { sys::cuEventRecord(event, s) }));
                match r {
                    Ok(()) => self.queued.dtoh.push_back((start, idx, event)),
                    Err(_) => self.queued.spare.push((idx, event)),
                }
                r
            });
            if let Err(e) = queued {
                // Nothing may still write into the area once this returns.
                // SAFETY: as above.
                let _ = unsafe { sys::cuStreamSynchronize(s) };
                let _ = self.dtoh_landed(usize::MAX);
                return Err(e);
            }
        }
        Ok(())
    }

    fn dtoh_landed(&mut self, end: usize) -> ExecResult<()> {
        let mut result = Ok(());
        while let Some(&(start, idx, event)) = self.queued.dtoh.front() {
            if start >= end {
                break;
            }
            self.queued.dtoh.pop_front();
            result = result.and(self.wait_queued(idx, event));
        }
        result
    }
}

impl CudaExecutor {
    /// An event of device `idx` (whose context is current) for a queued copy.
    fn copy_event(&mut self, idx: usize) -> ExecResult<sys::CUevent> {
        if let Some(i) = self.queued.spare.iter().position(|(d, _)| *d == idx) {
            return Ok(self.queued.spare.swap_remove(i).1);
        }
        let mut event: sys::CUevent = ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        // SAFETY: `event` is a valid out-pointer; a context is current.
        check(unsafe { sys::cuEventCreate(&mut event, flags) })?;
        Ok(event)
    }

    /// Wait for a queued copy's event in its device's context (restoring the current
    /// one after), and keep the event for the next copy.
    fn wait_queued(&mut self, idx: usize, event: sys::CUevent) -> ExecResult<()> {
        let ctx = self.devices[idx].ctx.unwrap_or(ptr::null_mut());
        let mut now: sys::CUcontext = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let _ = unsafe { sys::cuCtxGetCurrent(&mut now) };
        let switch = !ctx.is_null() && now != ctx;
        if switch {
            // SAFETY: `ctx` is a primary context this executor holds.
            let _ = unsafe { sys::cuCtxSetCurrent(ctx) };
        }
        // SAFETY: the event was made by copy_event in device `idx`'s context and was
        // recorded; it is not destroyed while queued.
        let r = check(unsafe { sys::cuEventSynchronize(event) });
        self.queued.spare.push((idx, event));
        if switch {
            // SAFETY: `now` was current a moment ago (or null: unbind).
            let _ = unsafe { sys::cuCtxSetCurrent(now) };
        }
        r
    }

    /// Wait for every queued copy on device `idx` and free its events (its context
    /// is current and about to lose its objects).
    fn forget_queued(&mut self, idx: usize) {
        let buffers: Vec<usize> = self
            .queued
            .htod
            .iter()
            .filter(|(_, (d, _))| *d == idx)
            .map(|(b, _)| *b)
            .collect();
        for b in buffers {
            let _ = self.release_buffer(b);
        }
        if self.queued.dtoh.iter().any(|(_, d, _)| *d == idx) {
            let _ = self.dtoh_landed(usize::MAX);
        }
        self.queued.spare.retain(|&(d, event)| {
            if d == idx {
                // SAFETY: made by copy_event, no longer queued, destroyed once.
                let _ = unsafe { sys::cuEventDestroy_v2(event) };
            }
            d != idx
        });
    }
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        for idx in 0..self.devices.len() {
            let Some(ctx) = self.devices[idx].ctx else {
                continue;
            };
            // SAFETY: `ctx` is a primary context this executor still holds.
            let _ = unsafe { sys::cuCtxSetCurrent(ctx) };
            self.destroy_device_objects(idx);
        }
        for (_, module) in self.modules.drain() {
            for library in module.libraries {
                // SAFETY: each library was loaded by load_module and is unloaded once.
                let _ = unsafe { sys::cuLibraryUnload(library) };
            }
        }
        self.module_by_digest.clear();
        self.functions.clear();
        // SAFETY: unbinding leaves no thread pointing at a context about to go.
        let _ = unsafe { sys::cuCtxSetCurrent(ptr::null_mut()) };
        for dev in &mut self.devices {
            if dev.ctx.take().is_some() {
                // SAFETY: releases the one reference this executor retained.
                let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev.handle) };
            }
        }
        debug!("CUDA executor released");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ptx_text_is_one_piece_and_junk_is_refused() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n";
        assert_eq!(super::split_image(ptx).unwrap(), vec![&ptx[..]]);
        let mut terminated = ptx.to_vec();
        terminated.push(0);
        assert_eq!(super::split_image(&terminated).unwrap().len(), 1);
        assert!(super::split_image(b"not a module\0.version").is_err());
        assert!(super::split_image(b"plain text").is_err());
    }

    use super::*;

    fn container(body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn images_split_into_containers() {
        let a = container(&[1; 8]);
        let b = container(&[2; 16]);
        let mut both = a.clone();
        both.extend_from_slice(&b);
        assert_eq!(split_image(&both).unwrap(), vec![&a[..], &b[..]]);
        // Trailing padding ends the walk.
        let mut padded = a.clone();
        padded.extend_from_slice(&[0; 5]);
        assert_eq!(split_image(&padded).unwrap(), vec![&a[..]]);
        // A cubin goes whole.
        let elf = b"\x7fELF and the rest".to_vec();
        assert_eq!(split_image(&elf).unwrap(), vec![&elf[..]]);
    }

    #[test]
    fn bad_images_are_refused() {
        assert_eq!(split_image(b""), Err(CudaStatus::ErrorInvalidKernelImage));
        assert_eq!(
            split_image(b"garbage garbage garbage"),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
        let a = container(&[1; 8]);
        assert_eq!(
            split_image(&a[..a.len() - 1]),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
    }

    #[test]
    fn runtime_numbers_map_to_driver_enums() {
        assert_eq!(limit_from(0), Some(sys::CUlimit::CU_LIMIT_STACK_SIZE));
        assert_eq!(
            limit_from(6),
            Some(sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        );
        assert_eq!(limit_from(4242), None);
        assert_eq!(
            cache_config_from(3),
            Some(sys::CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL)
        );
        assert_eq!(cache_config_from(4), None);
        assert_eq!(
            func_attribute_from(8),
            Some(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        );
        assert_eq!(
            func_attribute_from(15),
            Some(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
        );
        assert_eq!(func_attribute_from(7), None);
        assert_eq!(func_attribute_from(-1), None);
        assert_eq!(launch_attribute_id_from(15), None);
        assert_eq!(
            launch_attribute_id_from(16),
            Some(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
        );
    }

    #[test]
    fn packed_lengths() {
        assert_eq!(packed_len(3, 4), Ok(12));
        assert_eq!(packed_len(u64::MAX, 2), Err(CudaStatus::ErrorInvalidValue));
        assert_eq!(
            check_range(u64::MAX - 1, 2),
            Err(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(check_range(16, 2), Ok(()));
    }

    #[test]
    fn launch_attribute_sizes_match_the_runtime() {
        assert_eq!(
            std::mem::size_of::<sys::CUlaunchAttributeValue>(),
            LAUNCH_ATTRIBUTE_VALUE_LEN
        );
        assert_eq!(
            std::mem::size_of::<sys::CUlaunchAttribute>(),
            8 + LAUNCH_ATTRIBUTE_VALUE_LEN
        );
    }

    /// Runs only where a GPU is present: a no-GPU machine must get an error, never a
    /// panic.
    #[test]
    fn new_never_panics() {
        match CudaExecutor::new(&GpuSelection::all()) {
            Ok(exec) => assert!(exec.device_count() > 0),
            Err(status) => assert!(!status.is_success()),
        }
    }
}
