//! Driver functions that are inner functions ([`super::inner`], written in the runtime
//! API's shapes) in other clothes, one line each, and the per-thread default stream
//! variants (`_ptsz`, `_ptds`) of the driver's stream functions.
//!
//! A twin calls the inner function with the same meaning (handles, flags and enums
//! are numbered alike in both APIs; where a type differs, the line converts) and
//! leaves the thread's last error as it was, as the real driver does.
//!
//! A `_ptsz` variant is its base function with a NULL stream meaning the calling
//! thread's default stream (`CU_STREAM_PER_THREAD`). A `_ptds` variant of a
//! synchronous call is the asynchronous call on that stream, then a wait for it: the
//! same ordering the real driver gives.

use std::ffi::{c_char, c_void};

use super::inner::{self, RawHandle};
use super::memory::*;
use super::module::*;
use super::result::CUresult;
use super::stream::*;
use super::vmm::cuMemMapArrayAsync;
use super::{check_initialized, export, keeping_last_error};
use crate::abi::driver::{DecompressParamsC, Memcpy2D, RawMemOp};

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;
type StreamCallback = Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>;

/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: RawHandle = 2 as RawHandle;

/// A `_ptsz` stream argument: NULL is the thread's default stream.
fn per_thread(stream: RawHandle) -> RawHandle {
    if stream.is_null() {
        PER_THREAD
    } else {
        stream
    }
}

macro_rules! twins {
    ($($(#[$m:meta])* $base:literal => $name:ident($($arg:ident: $ty:ty),* $(,)?) => $call:expr;)*) => {
        $(
            export! {
                $(#[$m])*
                fn $name($($arg: $ty),*) {
                    check_initialized()?;
                    keeping_last_error(|| $call)
                }
            }
        )*

        /// The twins by base or exported name.
        pub fn lookup(name: &str) -> Option<*mut c_void> {
            Some(match name {
                $($base | stringify!($name) => $name as *mut c_void,)*
                _ => return more_lookup(name).or_else(|| per_thread_lookup(name)),
            })
        }

        /// Every (base name, exported name) pair.
        pub const NAMES: &[(&str, &str)] = &[$(($base, stringify!($name)),)*];
    };
}

twins! {
    "cuCtxGetStreamPriorityRange" => cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32)
        => inner::device::cudaDeviceGetStreamPriorityRange(least, greatest);
    "cuCtxGetCacheConfig" => cuCtxGetCacheConfig(config: *mut u32) => inner::device::cudaDeviceGetCacheConfig(config);
    "cuCtxSetCacheConfig" => cuCtxSetCacheConfig(config: u32) => inner::device::cudaDeviceSetCacheConfig(config);
    /// `CU_CTX_MAP_HOST` and the scheduling flags are the runtime's device flags.
    "cuCtxGetFlags" => cuCtxGetFlags(flags: *mut u32) => inner::device::cudaGetDeviceFlags(flags);
    "cuCtxSetFlags" => cuCtxSetFlags(flags: u32) => inner::device::cudaSetDeviceFlags(flags);
    "cuDeviceGetHostAtomicCapabilities" => cuDeviceGetHostAtomicCapabilities(caps: *mut u32, ops: *const u32, count: u32, device: i32)
        => inner::device::cudaDeviceGetHostAtomicCapabilities(caps, ops, count, device);
    "cuDeviceGetP2PAtomicCapabilities" => cuDeviceGetP2PAtomicCapabilities(caps: *mut u32, ops: *const u32, count: u32, src: i32, dst: i32)
        => inner::device::cudaDeviceGetP2PAtomicCapabilities(caps, ops, count, src, dst);
    "cuDeviceCanAccessPeer" => cuDeviceCanAccessPeer(can: *mut i32, device: i32, peer: i32)
        => inner::device::cudaDeviceCanAccessPeer(can, device, peer);
    "cuDeviceGetP2PAttribute" => cuDeviceGetP2PAttribute(value: *mut i32, attr: u32, src: i32, dst: i32)
        => inner::device::cudaDeviceGetP2PAttribute(value, attr, src, dst);
    "cuDeviceGetByPCIBusId" => cuDeviceGetByPCIBusId(device: *mut i32, id: *const c_char)
        => inner::device::cudaDeviceGetByPCIBusId(device, id);
    "cuProfilerStart" => cuProfilerStart() => inner::errors::cudaProfilerStart();
    "cuProfilerStop" => cuProfilerStop() => inner::errors::cudaProfilerStop();

    "cuDeviceGetDefaultMemPool" => cuDeviceGetDefaultMemPool(pool: *mut RawHandle, device: i32)
        => inner::mem_pool::cudaDeviceGetDefaultMemPool(pool, device);
    "cuDeviceGetMemPool" => cuDeviceGetMemPool(pool: *mut RawHandle, device: i32)
        => inner::mem_pool::cudaDeviceGetMemPool(pool, device);
    "cuDeviceSetMemPool" => cuDeviceSetMemPool(device: i32, pool: RawHandle)
        => inner::mem_pool::cudaDeviceSetMemPool(device, pool);
    /// `CUmemPoolProps` is laid out as `cudaMemPoolProps`.
    "cuMemPoolCreate" => cuMemPoolCreate(pool: *mut RawHandle, props: *const c_void)
        => inner::mem_pool::cudaMemPoolCreate(pool, props);
    "cuMemPoolDestroy" => cuMemPoolDestroy(pool: RawHandle) => inner::mem_pool::cudaMemPoolDestroy(pool);
    /// `CUmemLocation` is laid out as `cudaMemLocation`; the flags are the same enum.
    "cuMemPoolGetAccess" => cuMemPoolGetAccess(flags: *mut u32, pool: RawHandle, location: *const c_void)
        => inner::mem_pool::cudaMemPoolGetAccess(flags, pool, location);
    "cuMemAllocFromPoolAsync" => cuMemAllocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: RawHandle, stream: RawHandle)
        => inner::mem_pool::cudaMallocFromPoolAsync(ptr, size, pool, stream);
    "cuMemPoolExportToShareableHandle" => cuMemPoolExportToShareableHandle(
        handle: *mut c_void, pool: RawHandle, handle_type: i32, flags: u32,
    ) => inner::mem_pool::cudaMemPoolExportToShareableHandle(handle, pool, handle_type, flags);
    "cuMemPoolImportFromShareableHandle" => cuMemPoolImportFromShareableHandle(
        pool: *mut RawHandle, handle: *mut c_void, handle_type: i32, flags: u32,
    ) => inner::mem_pool::cudaMemPoolImportFromShareableHandle(pool, handle, handle_type, flags);
    "cuMemPoolExportPointer" => cuMemPoolExportPointer(data: *mut c_void, ptr: u64)
        => inner::mem_pool::cudaMemPoolExportPointer(data, ptr as *mut c_void);
    "cuMemPoolImportPointer" => cuMemPoolImportPointer(ptr: *mut *mut c_void, pool: RawHandle, data: *mut c_void)
        => inner::mem_pool::cudaMemPoolImportPointer(ptr, pool, data);
    "cuMemPoolSetAttribute" => cuMemPoolSetAttribute(pool: RawHandle, attr: u32, value: *mut c_void)
        => inner::mem_pool::cudaMemPoolSetAttribute(pool, attr, value);
    "cuMemPoolGetAttribute" => cuMemPoolGetAttribute(pool: RawHandle, attr: u32, value: *mut c_void)
        => inner::mem_pool::cudaMemPoolGetAttribute(pool, attr, value);
    "cuMemPoolTrimTo" => cuMemPoolTrimTo(pool: RawHandle, keep: usize) => inner::mem_pool::cudaMemPoolTrimTo(pool, keep);
    /// `CUmemAccessDesc` is laid out as `cudaMemAccessDesc`.
    "cuMemPoolSetAccess" => cuMemPoolSetAccess(pool: RawHandle, descs: *const c_void, count: usize)
        => inner::mem_pool::cudaMemPoolSetAccess(pool, descs, count);
    /// CUDA 13's pool calls by location (`CUmemLocation`, `CUmemAllocationType` are the
    /// runtime's).
    "cuMemGetDefaultMemPool" => cuMemGetDefaultMemPool(pool: *mut RawHandle, location: *const crate::abi::runtime::MemLocation, kind: u32)
        => inner::mem_pool::cudaMemGetDefaultMemPool(pool, location, kind);
    "cuMemGetMemPool" => cuMemGetMemPool(pool: *mut RawHandle, location: *const crate::abi::runtime::MemLocation, kind: u32)
        => inner::mem_pool::cudaMemGetMemPool(pool, location, kind);
    "cuMemSetMemPool" => cuMemSetMemPool(location: *const crate::abi::runtime::MemLocation, kind: u32, pool: RawHandle)
        => inner::mem_pool::cudaMemSetMemPool(location, kind, pool);
    "cuMemAllocAsync" => cuMemAllocAsync(ptr: *mut *mut c_void, size: usize, stream: RawHandle)
        => inner::mem_pool::cudaMallocAsync(ptr, size, stream);
    "cuMemFreeAsync" => cuMemFreeAsync(ptr: u64, stream: RawHandle) => inner::mem_pool::cudaFreeAsync(ptr as *mut c_void, stream);

    /// `CU_MEMHOSTREGISTER_*` are `cudaHostRegister*`.
    "cuMemHostRegister" => cuMemHostRegister_v2(ptr: *mut c_void, size: usize, flags: u32)
        => inner::memory::cudaHostRegister(ptr, size, flags);
    "cuMemHostUnregister" => cuMemHostUnregister(ptr: *mut c_void) => inner::memory::cudaHostUnregister(ptr);
    "cuMemHostGetDevicePointer" => cuMemHostGetDevicePointer_v2(out: *mut *mut c_void, ptr: *mut c_void, flags: u32)
        => inner::memory::cudaHostGetDevicePointer(out, ptr, flags);
    "cuMemHostGetFlags" => cuMemHostGetFlags(flags: *mut u32, ptr: *mut c_void) => inner::memory::cudaHostGetFlags(flags, ptr);
    /// A char argument arrives as a byte: widened here, not reinterpreted.
    "cuMemsetD2D8" => cuMemsetD2D8_v2(dst: u64, pitch: usize, value: u8, width: usize, height: usize)
        => inner::memory::cudaMemset2D(dst as *mut c_void, pitch, i32::from(value), width, height);
    "cuMemsetD2D8Async" => cuMemsetD2D8Async(dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: RawHandle)
        => inner::memory::cudaMemset2DAsync(dst as *mut c_void, pitch, i32::from(value), width, height, stream);

    /// Managed memory: `CUmemLocation` is laid out as `cudaMemLocation`, the advice and
    /// range attributes are the same enums, `CU_MEM_ATTACH_*` are `cudaMemAttach*`.
    "cuMemAllocManaged" => cuMemAllocManaged(ptr: *mut *mut c_void, size: usize, flags: u32)
        => if size == 0 { CudaStatus::ErrorInvalidValue.0 } else { inner::memory::cudaMallocManaged(ptr, size, flags) };
    /// What the name means in CUDA 13 (`cuMemPrefetchAsync` exported is CUDA 8's).
    "cuMemPrefetchAsync" => cuMemPrefetchAsync_v2(
        ptr: u64, count: usize, location: crate::abi::runtime::MemLocation, flags: u32, stream: RawHandle,
    ) => inner::memory::cudaMemPrefetchAsync(ptr as *const c_void, count, location, flags, stream);
    "cuMemAdvise" => cuMemAdvise_v2(ptr: u64, count: usize, advice: u32, location: crate::abi::runtime::MemLocation)
        => inner::memory::cudaMemAdvise(ptr as *const c_void, count, advice, location);
    "cuMemRangeGetAttribute" => cuMemRangeGetAttribute(
        data: *mut c_void, size: usize, attribute: u32, ptr: u64, count: usize,
    ) => inner::memory::cudaMemRangeGetAttribute(data, size, attribute, ptr as *const c_void, count);
    "cuMemRangeGetAttributes" => cuMemRangeGetAttributes(
        data: *const *mut c_void, sizes: *const usize, attributes: *const u32, n: usize, ptr: u64, count: usize,
    ) => inner::memory::cudaMemRangeGetAttributes(data, sizes, attributes, n, ptr as *const c_void, count);
    "cuStreamAttachMemAsync" => cuStreamAttachMemAsync(stream: RawHandle, ptr: u64, length: usize, flags: u32)
        => inner::memory::cudaStreamAttachMemAsync(stream, ptr as *mut c_void, length, flags);
    "cuMemPrefetchBatchAsync" => cuMemPrefetchBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, locations: *const crate::abi::runtime::MemLocation,
        indexes: *const usize, n_locations: usize, flags: u64, stream: RawHandle,
    ) => inner::memory::cudaMemPrefetchBatchAsync(ptrs, sizes, count, locations, indexes, n_locations, flags, stream);
    "cuMemDiscardBatchAsync" => cuMemDiscardBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, flags: u64, stream: RawHandle,
    ) => inner::memory::cudaMemDiscardBatchAsync(ptrs, sizes, count, flags, stream);
    "cuMemDiscardAndPrefetchBatchAsync" => cuMemDiscardAndPrefetchBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, locations: *const crate::abi::runtime::MemLocation,
        indexes: *const usize, n_locations: usize, flags: u64, stream: RawHandle,
    ) => inner::memory::cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, count, locations, indexes, n_locations, flags, stream);

    "cuStreamGetFlags" => cuStreamGetFlags(stream: RawHandle, flags: *mut u32) => inner::stream::cudaStreamGetFlags(stream, flags);
    "cuStreamGetPriority" => cuStreamGetPriority(stream: RawHandle, priority: *mut i32)
        => inner::stream::cudaStreamGetPriority(stream, priority);
    /// `CUstreamAttrValue` is laid out as `cudaStreamAttrValue`, the ids alike.
    "cuArrayGetPlane" => cuArrayGetPlane(out: *mut RawHandle, array: RawHandle, plane: u32)
        => inner::array::cudaArrayGetPlane(out, array, plane);
    "cuArrayGetSparseProperties" => cuArrayGetSparseProperties(props: *mut c_void, array: RawHandle)
        => inner::array::cudaArrayGetSparseProperties(props, array);
    "cuMipmappedArrayGetSparseProperties" => cuMipmappedArrayGetSparseProperties(props: *mut c_void, mipmap: RawHandle)
        => inner::array::cudaMipmappedArrayGetSparseProperties(props, mipmap);
    "cuArrayGetMemoryRequirements" => cuArrayGetMemoryRequirements(reqs: *mut c_void, array: RawHandle, device: i32)
        => inner::array::cudaArrayGetMemoryRequirements(reqs, array, device);
    "cuMipmappedArrayGetMemoryRequirements" => cuMipmappedArrayGetMemoryRequirements(reqs: *mut c_void, mipmap: RawHandle, device: i32)
        => inner::array::cudaMipmappedArrayGetMemoryRequirements(reqs, mipmap, device);
    "cuGraphKernelNodeSetAttribute" => cuGraphKernelNodeSetAttribute(node: RawHandle, attr: u32, value: *const [u8; crate::abi::runtime::STREAM_ATTR_LEN])
        => inner::graph_build::cudaGraphKernelNodeSetAttribute(node, attr, value);
    "cuGraphKernelNodeGetAttribute" => cuGraphKernelNodeGetAttribute(node: RawHandle, attr: u32, value: *mut [u8; crate::abi::runtime::STREAM_ATTR_LEN])
        => inner::graph_build::cudaGraphKernelNodeGetAttribute(node, attr, value);
    "cuStreamSetAttribute" => cuStreamSetAttribute(stream: RawHandle, attr: u32, value: *const [u8; crate::abi::runtime::STREAM_ATTR_LEN])
        => inner::stream::cudaStreamSetAttribute(stream, attr, value);
    "cuStreamGetAttribute" => cuStreamGetAttribute(stream: RawHandle, attr: u32, value: *mut [u8; crate::abi::runtime::STREAM_ATTR_LEN])
        => inner::stream::cudaStreamGetAttribute(stream, attr, value);
    "cuStreamCopyAttributes" => cuStreamCopyAttributes(dst: RawHandle, src: RawHandle)
        => inner::stream::cudaStreamCopyAttributes(dst, src);
    "cuStreamGetId" => cuStreamGetId(stream: RawHandle, id: *mut u64) => inner::stream::cudaStreamGetId(stream, id);
    "cuStreamGetDevice" => cuStreamGetDevice(stream: RawHandle, device: *mut i32) => inner::stream::cudaStreamGetDevice(stream, device);
    /// `CUstreamCallback` has `cudaStreamCallback_t`'s ABI.
    "cuStreamAddCallback" => cuStreamAddCallback(stream: RawHandle, callback: StreamCallback, data: *mut c_void, flags: u32)
        => inner::stream::cudaStreamAddCallback(stream, callback, data, flags);
    "cuLaunchHostFunc" => cuLaunchHostFunc(stream: RawHandle, f: HostFn, data: *mut c_void)
        => inner::stream::cudaLaunchHostFunc(stream, f, data);
    "cuEventRecordWithFlags" => cuEventRecordWithFlags(event: RawHandle, stream: RawHandle, flags: u32)
        => inner::stream::cudaEventRecordWithFlags(event, stream, flags);

    "cuStreamBeginCapture" => cuStreamBeginCapture_v2(stream: RawHandle, mode: u32) => inner::graph::cudaStreamBeginCapture(stream, mode);
    "cuStreamEndCapture" => cuStreamEndCapture(stream: RawHandle, graph: *mut RawHandle) => inner::graph::cudaStreamEndCapture(stream, graph);
    "cuStreamIsCapturing" => cuStreamIsCapturing(stream: RawHandle, status: *mut u32) => inner::graph::cudaStreamIsCapturing(stream, status);
    "cuStreamGetCaptureInfo" => cuStreamGetCaptureInfo_v3(
        stream: RawHandle, status: *mut u32, id: *mut u64, graph: *mut RawHandle,
        deps: *mut *const RawHandle, edges: *mut *const c_void, count: *mut usize,
    ) => inner::graph::cudaStreamGetCaptureInfo(stream, status, id, graph, deps, edges, count);
    /// CUDA 11.3's signature: no edge data.
    "cuStreamGetCaptureInfo_v2" => cuStreamGetCaptureInfo_v2(
        stream: RawHandle, status: *mut u32, id: *mut u64, graph: *mut RawHandle,
        deps: *mut *const RawHandle, count: *mut usize,
    ) => inner::graph::cudaStreamGetCaptureInfo(stream, status, id, graph, deps, std::ptr::null_mut(), count);
    "cuThreadExchangeStreamCaptureMode" => cuThreadExchangeStreamCaptureMode(mode: *mut u32)
        => inner::graph::cudaThreadExchangeStreamCaptureMode(mode);
    "cuGraphInstantiateWithFlags" => cuGraphInstantiateWithFlags(exec: *mut RawHandle, graph: RawHandle, flags: u64)
        => inner::graph_build::cudaGraphInstantiateWithFlags(exec, graph, flags);
    "cuGraphLaunch" => cuGraphLaunch(exec: RawHandle, stream: RawHandle) => inner::graph::cudaGraphLaunch(exec, stream);
    "cuGraphDestroy" => cuGraphDestroy(graph: RawHandle) => inner::graph::cudaGraphDestroy(graph);
    "cuGraphExecDestroy" => cuGraphExecDestroy(exec: RawHandle) => inner::graph_build::cudaGraphExecDestroy(exec);
    "cuGraphGetNodes" => cuGraphGetNodes(graph: RawHandle, nodes: *mut RawHandle, count: *mut usize)
        => inner::graph::cudaGraphGetNodes(graph, nodes, count);
    /// CUDA 12.3's signature, with edge data: what the name means in CUDA 13.
    "cuGraphNodeGetDependencies" => cuGraphNodeGetDependencies_v2(
        node: RawHandle, deps: *mut RawHandle, edges: *mut c_void, count: *mut usize,
    ) => inner::graph::cudaGraphNodeGetDependencies(node, deps, edges, count);
    "cuGraphDebugDotPrint" => cuGraphDebugDotPrint(graph: RawHandle, path: *const c_char, flags: u32)
        => inner::graph::cudaGraphDebugDotPrint(graph, path, flags);
    // Graphs built by hand: the parameter structs the runtime's twins take are laid
    // out alike (the driver's context arguments name the current context).
    // Logs, user objects, notifications: the runtime's, whose types the driver's match.
    "cuLogsRegisterCallback" => cuLogsRegisterCallback(
        callback: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_char, usize)>,
        data: *mut c_void, handle: *mut RawHandle,
    ) => inner::logs::cudaLogsRegisterCallback(callback, data, handle);
    "cuLogsUnregisterCallback" => cuLogsUnregisterCallback(handle: RawHandle)
        => inner::logs::cudaLogsUnregisterCallback(handle);
    "cuLogsCurrent" => cuLogsCurrent(iterator: *mut u32, flags: u32) => inner::logs::cudaLogsCurrent(iterator, flags);
    "cuLogsDumpToFile" => cuLogsDumpToFile(iterator: *mut u32, path: *const c_char, flags: u32)
        => inner::logs::cudaLogsDumpToFile(iterator, path, flags);
    "cuLogsDumpToMemory" => cuLogsDumpToMemory(iterator: *mut u32, buffer: *mut c_char, size: *mut usize, flags: u32)
        => inner::logs::cudaLogsDumpToMemory(iterator, buffer, size, flags);
    "cuUserObjectCreate" => cuUserObjectCreate(
        out: *mut RawHandle, ptr: *mut c_void, destroy: Option<unsafe extern "C" fn(*mut c_void)>,
        initial: u32, flags: u32,
    ) => inner::logs::cudaUserObjectCreate(out, ptr, destroy, initial, flags);
    "cuUserObjectRetain" => cuUserObjectRetain(object: RawHandle, count: u32)
        => inner::logs::cudaUserObjectRetain(object, count);
    "cuUserObjectRelease" => cuUserObjectRelease(object: RawHandle, count: u32)
        => inner::logs::cudaUserObjectRelease(object, count);
    "cuGraphRetainUserObject" => cuGraphRetainUserObject(graph: RawHandle, object: RawHandle, count: u32, flags: u32)
        => inner::logs::cudaGraphRetainUserObject(graph, object, count, flags);
    "cuGraphReleaseUserObject" => cuGraphReleaseUserObject(graph: RawHandle, object: RawHandle, count: u32)
        => inner::logs::cudaGraphReleaseUserObject(graph, object, count);
    "cuDeviceRegisterAsyncNotification" => cuDeviceRegisterAsyncNotification(
        device: i32, callback: *const c_void, data: *mut c_void, handle: *mut RawHandle,
    ) => inner::logs::cudaDeviceRegisterAsyncNotification(device, callback, data, handle);
    "cuDeviceUnregisterAsyncNotification" => cuDeviceUnregisterAsyncNotification(device: i32, handle: RawHandle)
        => inner::logs::cudaDeviceUnregisterAsyncNotification(device, handle);
    "cuDeviceGraphMemTrim" => cuDeviceGraphMemTrim(device: i32) => inner::graph::cudaDeviceGraphMemTrim(device);
    "cuDeviceGetGraphMemAttribute" => cuDeviceGetGraphMemAttribute(device: i32, attr: u32, value: *mut u64)
        => inner::graph::cudaDeviceGetGraphMemAttribute(device, attr, value);
    "cuDeviceSetGraphMemAttribute" => cuDeviceSetGraphMemAttribute(device: i32, attr: u32, value: *mut u64)
        => inner::graph::cudaDeviceSetGraphMemAttribute(device, attr, value);
    "cuGraphExecGetFlags" => cuGraphExecGetFlags(exec: RawHandle, flags: *mut u64)
        => inner::graph_build::cudaGraphExecGetFlags(exec, flags);
    /// CUDA 13's signature (no failure index).
    "cuMemcpyBatchAsync" => cuMemcpyBatchAsync_v2(
        dsts: *const *mut c_void, srcs: *const *const c_void, sizes: *const usize, count: usize,
        attrs: *mut c_void, attrs_idxs: *mut usize, num_attrs: usize, stream: RawHandle,
    ) => inner::memory::copy::cudaMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream);
    /// CUDA 13's signature (no failure index); `CUDA_MEMCPY3D_BATCH_OP` is laid out as
    /// the runtime's `cudaMemcpy3DBatchOp`.
    "cuMemcpy3DBatchAsync" => cuMemcpy3DBatchAsync_v2(
        count: usize, ops: *const crate::abi::runtime::Memcpy3DBatchOp, flags: u64, stream: RawHandle,
    ) => inner::array::cudaMemcpy3DBatchAsync(count, ops, flags, stream);
    "cuGraphAddEmptyNode" => cuGraphAddEmptyNode(out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize)
        => inner::graph_build::cudaGraphAddEmptyNode(out, graph, deps, count);
    "cuGraphAddChildGraphNode" => cuGraphAddChildGraphNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize, child: RawHandle,
    ) => inner::graph_build::cudaGraphAddChildGraphNode(out, graph, deps, count, child);
    "cuGraphAddEventRecordNode" => cuGraphAddEventRecordNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize, event: RawHandle,
    ) => inner::graph_build::cudaGraphAddEventRecordNode(out, graph, deps, count, event);
    "cuGraphAddEventWaitNode" => cuGraphAddEventWaitNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize, event: RawHandle,
    ) => inner::graph_build::cudaGraphAddEventWaitNode(out, graph, deps, count, event);
    "cuGraphClone" => cuGraphClone(out: *mut RawHandle, original: RawHandle)
        => inner::graph_build::cudaGraphClone(out, original);
    "cuGraphAddHostNode" => cuGraphAddHostNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize,
        params: *const crate::abi::runtime::HostNodeParams,
    ) => inner::graph_build::cudaGraphAddHostNode(out, graph, deps, count, params);
    "cuGraphHostNodeGetParams" => cuGraphHostNodeGetParams(node: RawHandle, params: *mut crate::abi::runtime::HostNodeParams)
        => inner::graph_build::cudaGraphHostNodeGetParams(node, params);
    "cuGraphHostNodeSetParams" => cuGraphHostNodeSetParams(node: RawHandle, params: *const crate::abi::runtime::HostNodeParams)
        => inner::graph_build::cudaGraphHostNodeSetParams(node, params);
    "cuGraphExecHostNodeSetParams" => cuGraphExecHostNodeSetParams(
        exec: RawHandle, node: RawHandle, params: *const crate::abi::runtime::HostNodeParams,
    ) => inner::graph_build::cudaGraphExecHostNodeSetParams(exec, node, params);
    "cuGraphAddMemsetNode" => cuGraphAddMemsetNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize,
        params: *const crate::abi::runtime::MemsetParams, _ctx: RawHandle,
    ) => inner::graph_build::cudaGraphAddMemsetNode(out, graph, deps, count, params);
    "cuGraphMemsetNodeSetParams" => cuGraphMemsetNodeSetParams(node: RawHandle, params: *const crate::abi::runtime::MemsetParams)
        => inner::graph_build::cudaGraphMemsetNodeSetParams(node, params);
    "cuGraphMemsetNodeGetParams" => cuGraphMemsetNodeGetParams(node: RawHandle, params: *mut crate::abi::runtime::MemsetParams)
        => inner::graph_build::cudaGraphMemsetNodeGetParams(node, params);
    "cuGraphExecMemsetNodeSetParams" => cuGraphExecMemsetNodeSetParams(
        exec: RawHandle, node: RawHandle, params: *const crate::abi::runtime::MemsetParams, _ctx: RawHandle,
    ) => inner::graph_build::cudaGraphExecMemsetNodeSetParams(exec, node, params);
    "cuGraphAddMemAllocNode" => cuGraphAddMemAllocNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize,
        params: *mut crate::abi::runtime::MemAllocNodeParams,
    ) => inner::graph_build::cudaGraphAddMemAllocNode(out, graph, deps, count, params);
    "cuGraphMemAllocNodeGetParams" => cuGraphMemAllocNodeGetParams(node: RawHandle, params: *mut crate::abi::runtime::MemAllocNodeParams)
        => inner::graph_build::cudaGraphMemAllocNodeGetParams(node, params);
    "cuGraphAddMemFreeNode" => cuGraphAddMemFreeNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize, ptr: u64,
    ) => inner::graph_build::cudaGraphAddMemFreeNode(out, graph, deps, count, ptr as *mut c_void);
    "cuGraphMemFreeNodeGetParams" => cuGraphMemFreeNodeGetParams(node: RawHandle, ptr: *mut *mut c_void)
        => inner::graph_build::cudaGraphMemFreeNodeGetParams(node, ptr);
    "cuGraphEventRecordNodeGetEvent" => cuGraphEventRecordNodeGetEvent(node: RawHandle, event: *mut RawHandle)
        => inner::graph_build::cudaGraphEventRecordNodeGetEvent(node, event);
    "cuGraphEventRecordNodeSetEvent" => cuGraphEventRecordNodeSetEvent(node: RawHandle, event: RawHandle)
        => inner::graph_build::cudaGraphEventRecordNodeSetEvent(node, event);
    "cuGraphEventWaitNodeGetEvent" => cuGraphEventWaitNodeGetEvent(node: RawHandle, event: *mut RawHandle)
        => inner::graph_build::cudaGraphEventWaitNodeGetEvent(node, event);
    "cuGraphEventWaitNodeSetEvent" => cuGraphEventWaitNodeSetEvent(node: RawHandle, event: RawHandle)
        => inner::graph_build::cudaGraphEventWaitNodeSetEvent(node, event);
    "cuGraphExecEventRecordNodeSetEvent" => cuGraphExecEventRecordNodeSetEvent(exec: RawHandle, node: RawHandle, event: RawHandle)
        => inner::graph_build::cudaGraphExecEventRecordNodeSetEvent(exec, node, event);
    "cuGraphExecEventWaitNodeSetEvent" => cuGraphExecEventWaitNodeSetEvent(exec: RawHandle, node: RawHandle, event: RawHandle)
        => inner::graph_build::cudaGraphExecEventWaitNodeSetEvent(exec, node, event);
    "cuGraphExecChildGraphNodeSetParams" => cuGraphExecChildGraphNodeSetParams(exec: RawHandle, node: RawHandle, child: RawHandle)
        => inner::graph_build::cudaGraphExecChildGraphNodeSetParams(exec, node, child);
    /// CUDA 12.3's signatures, with edge data: what the names mean in CUDA 13.
    "cuGraphAddDependencies" => cuGraphAddDependencies_v2(
        graph: RawHandle, from: *const RawHandle, to: *const RawHandle, edges: *const u64, count: usize,
    ) => inner::graph_build::cudaGraphAddDependencies(graph, from, to, edges, count);
    "cuGraphRemoveDependencies" => cuGraphRemoveDependencies_v2(
        graph: RawHandle, from: *const RawHandle, to: *const RawHandle, edges: *const u64, count: usize,
    ) => inner::graph_build::cudaGraphRemoveDependencies(graph, from, to, edges, count);
    "cuGraphGetEdges" => cuGraphGetEdges_v2(
        graph: RawHandle, from: *mut RawHandle, to: *mut RawHandle, edges: *mut u8, count: *mut usize,
    ) => inner::graph_build::cudaGraphGetEdges(graph, from, to, edges, count);
    "cuGraphNodeGetDependentNodes" => cuGraphNodeGetDependentNodes_v2(
        node: RawHandle, nodes: *mut RawHandle, edges: *mut u8, count: *mut usize,
    ) => inner::graph_build::cudaGraphNodeGetDependentNodes(node, nodes, edges, count);
    "cuGraphGetRootNodes" => cuGraphGetRootNodes(graph: RawHandle, nodes: *mut RawHandle, count: *mut usize)
        => inner::graph_build::cudaGraphGetRootNodes(graph, nodes, count);
    "cuStreamBeginCaptureToGraph" => cuStreamBeginCaptureToGraph(
        stream: RawHandle, graph: RawHandle, deps: *const RawHandle, edges: *const u64, count: usize, mode: u32,
    ) => inner::graph_build::cudaStreamBeginCaptureToGraph(stream, graph, deps, edges, count, mode);
    /// CUDA 12.3's signature, with edge data: what the name means in CUDA 13.
    "cuStreamUpdateCaptureDependencies" => cuStreamUpdateCaptureDependencies_v2(
        stream: RawHandle, deps: *const RawHandle, edges: *const u64, count: usize, flags: u32,
    ) => inner::graph_build::cudaStreamUpdateCaptureDependencies(stream, deps, edges, count, flags);
    "cuGraphUpload" => cuGraphUpload(exec: RawHandle, stream: RawHandle) => inner::graph_build::cudaGraphUpload(exec, stream);
    /// CUDA 12's signature, with the result info.
    "cuGraphExecUpdate" => cuGraphExecUpdate_v2(exec: RawHandle, graph: RawHandle, info: *mut crate::abi::runtime::ExecUpdateResultInfo)
        => inner::graph_build::cudaGraphExecUpdate(exec, graph, info);
    "cuGraphInstantiateWithParams" => cuGraphInstantiateWithParams(
        exec: *mut RawHandle, graph: RawHandle, params: *mut crate::abi::runtime::InstantiateParams,
    ) => inner::graph_build::cudaGraphInstantiateWithParams(exec, graph, params);
    "cuGraphConditionalHandleCreate" => cuGraphConditionalHandleCreate(
        handle: *mut u64, graph: RawHandle, _ctx: RawHandle, default_value: u32, flags: u32,
    ) => inner::graph::cudaGraphConditionalHandleCreate(handle, graph, default_value, flags);
}

/// `_ptsz` variants: the base function with `per_thread` applied to the stream.
macro_rules! ptsz {
    ($($name:ident => $base:ident($($arg:ident: $ty:ty),*) [$stream:ident];)*) => {
        $(
            #[export_name = concat!("__vmcuda_", stringify!($name))]
            #[allow(non_snake_case)]
            pub extern "C" fn $name($($arg: $ty),*) -> CUresult {
                let $stream = per_thread($stream);
                $base($($arg),*)
            }
        )*
        const PTSZ: &[(&str, *const ())] = &[$((stringify!($name), $name as *const ()),)*];
    };
}

/// `_ptds` variants of synchronous calls: the asynchronous one on the thread's
/// default stream, then a wait for that stream.
macro_rules! ptds {
    ($($name:ident => $async_base:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[export_name = concat!("__vmcuda_", stringify!($name))]
            #[allow(non_snake_case)]
            pub extern "C" fn $name($($arg: $ty),*) -> CUresult {
                match $async_base($($arg,)* PER_THREAD) {
                    0 => cuStreamSynchronize(PER_THREAD),
                    e => e,
                }
            }
        )*
        const PTDS: &[(&str, *const ())] = &[$((stringify!($name), $name as *const ()),)*];
    };
}

ptsz! {
    cuStreamQuery_ptsz => cuStreamQuery(stream: RawHandle) [stream];
    cuStreamSynchronize_ptsz => cuStreamSynchronize(stream: RawHandle) [stream];
    cuStreamWaitEvent_ptsz => cuStreamWaitEvent(stream: RawHandle, event: RawHandle, flags: u32) [stream];
    cuEventRecord_ptsz => cuEventRecord(event: RawHandle, stream: RawHandle) [stream];
    cuEventRecordWithFlags_ptsz => cuEventRecordWithFlags(event: RawHandle, stream: RawHandle, flags: u32) [stream];
    cuStreamGetFlags_ptsz => cuStreamGetFlags(stream: RawHandle, flags: *mut u32) [stream];
    cuStreamGetPriority_ptsz => cuStreamGetPriority(stream: RawHandle, priority: *mut i32) [stream];
    cuStreamGetId_ptsz => cuStreamGetId(stream: RawHandle, id: *mut u64) [stream];
    cuStreamSetAttribute_ptsz => cuStreamSetAttribute(stream: RawHandle, attr: u32, value: *const [u8; crate::abi::runtime::STREAM_ATTR_LEN]) [stream];
    cuStreamGetAttribute_ptsz => cuStreamGetAttribute(stream: RawHandle, attr: u32, value: *mut [u8; crate::abi::runtime::STREAM_ATTR_LEN]) [stream];
    cuStreamGetDevice_ptsz => cuStreamGetDevice(stream: RawHandle, device: *mut i32) [stream];
    cuStreamAddCallback_ptsz => cuStreamAddCallback(stream: RawHandle, callback: StreamCallback, data: *mut c_void, flags: u32) [stream];
    cuLaunchHostFunc_ptsz => cuLaunchHostFunc(stream: RawHandle, f: HostFn, data: *mut c_void) [stream];
    cuStreamBeginCapture_v2_ptsz => cuStreamBeginCapture_v2(stream: RawHandle, mode: u32) [stream];
    cuStreamEndCapture_ptsz => cuStreamEndCapture(stream: RawHandle, graph: *mut RawHandle) [stream];
    cuStreamIsCapturing_ptsz => cuStreamIsCapturing(stream: RawHandle, status: *mut u32) [stream];
    cuStreamGetCaptureInfo_v3_ptsz => cuStreamGetCaptureInfo_v3(
        stream: RawHandle, status: *mut u32, id: *mut u64, graph: *mut RawHandle,
        deps: *mut *const RawHandle, edges: *mut *const c_void, count: *mut usize) [stream];
    cuStreamGetCaptureInfo_v2_ptsz => cuStreamGetCaptureInfo_v2(
        stream: RawHandle, status: *mut u32, id: *mut u64, graph: *mut RawHandle,
        deps: *mut *const RawHandle, count: *mut usize) [stream];
    cuGraphLaunch_ptsz => cuGraphLaunch(exec: RawHandle, stream: RawHandle) [stream];
    cuGraphUpload_ptsz => cuGraphUpload(exec: RawHandle, stream: RawHandle) [stream];
    cuMemcpyBatchAsync_v2_ptsz => cuMemcpyBatchAsync_v2(
        dsts: *const *mut c_void, srcs: *const *const c_void, sizes: *const usize, count: usize,
        attrs: *mut c_void, attrs_idxs: *mut usize, num_attrs: usize, stream: RawHandle
    ) [stream];
    cuMemcpy3DBatchAsync_v2_ptsz => cuMemcpy3DBatchAsync_v2(
        count: usize, ops: *const crate::abi::runtime::Memcpy3DBatchOp, flags: u64, stream: RawHandle
    ) [stream];
    cuStreamUpdateCaptureDependencies_v2_ptsz => cuStreamUpdateCaptureDependencies_v2(
        stream: RawHandle, deps: *const RawHandle, edges: *const u64, count: usize, flags: u32
    ) [stream];
    cuMemAllocAsync_ptsz => cuMemAllocAsync(ptr: *mut *mut c_void, size: usize, stream: RawHandle) [stream];
    cuMemFreeAsync_ptsz => cuMemFreeAsync(ptr: u64, stream: RawHandle) [stream];
    cuMemAllocFromPoolAsync_ptsz => cuMemAllocFromPoolAsync(
        ptr: *mut *mut c_void, size: usize, pool: RawHandle, stream: RawHandle) [stream];
    cuMemcpyAsync_ptsz => cuMemcpyAsync(dst: u64, src: u64, size: usize, stream: RawHandle) [stream];
    cuMemcpyHtoDAsync_v2_ptsz => cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, size: usize, stream: RawHandle) [stream];
    cuMemcpyDtoHAsync_v2_ptsz => cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, size: usize, stream: RawHandle) [stream];
    cuMemcpyDtoDAsync_v2_ptsz => cuMemcpyDtoDAsync_v2(dst: u64, src: u64, size: usize, stream: RawHandle) [stream];
    cuMemsetD8Async_ptsz => cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: RawHandle) [stream];
    cuMemsetD16Async_ptsz => cuMemsetD16Async(dst: u64, value: u16, count: usize, stream: RawHandle) [stream];
    cuMemsetD32Async_ptsz => cuMemsetD32Async(dst: u64, value: u32, count: usize, stream: RawHandle) [stream];
    cuMemsetD2D16Async_ptsz => cuMemsetD2D16Async(
        dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: RawHandle) [stream];
    cuMemsetD2D32Async_ptsz => cuMemsetD2D32Async(
        dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: RawHandle) [stream];
    cuMemsetD2D8Async_ptsz => cuMemsetD2D8Async(
        dst: u64, pitch: usize, value: u8, width: usize, height: usize, stream: RawHandle) [stream];
    cuStreamWriteValue32_v2_ptsz => cuStreamWriteValue32_v2(stream: RawHandle, addr: u64, value: u32, flags: u32) [stream];
    cuStreamWriteValue64_v2_ptsz => cuStreamWriteValue64_v2(stream: RawHandle, addr: u64, value: u64, flags: u32) [stream];
    cuStreamWaitValue32_v2_ptsz => cuStreamWaitValue32_v2(stream: RawHandle, addr: u64, value: u32, flags: u32) [stream];
    cuStreamWaitValue64_v2_ptsz => cuStreamWaitValue64_v2(stream: RawHandle, addr: u64, value: u64, flags: u32) [stream];
    cuMemMapArrayAsync_ptsz => cuMemMapArrayAsync(list: *mut c_void, count: u32, stream: RawHandle) [stream];
    cuMemBatchDecompressAsync_ptsz => cuMemBatchDecompressAsync(
        params: *const DecompressParamsC, count: usize, flags: u32, error_index: *mut usize, stream: RawHandle) [stream];
    cuStreamBatchMemOp_v2_ptsz => cuStreamBatchMemOp_v2(
        stream: RawHandle, count: u32, params: *const RawMemOp, flags: u32) [stream];
    cuLaunchKernel_ptsz => cuLaunchKernel(
        f: *mut c_void, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shared_mem: u32, stream: RawHandle, args: *const *const u8, extra: *const *const c_void) [stream];
    cuMemcpy2DAsync_v2_ptsz => cuMemcpy2DAsync_v2(copy: *const Memcpy2D, stream: RawHandle) [stream];
    cuMemcpyPeerAsync_ptsz => cuMemcpyPeerAsync(
        dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, size: usize, stream: RawHandle) [stream];
    cuMemPrefetchAsync_v2_ptsz => cuMemPrefetchAsync_v2(
        ptr: u64, count: usize, location: crate::abi::runtime::MemLocation, flags: u32, stream: RawHandle) [stream];
    cuMemPrefetchAsync_ptsz => cuMemPrefetchAsync(ptr: u64, count: usize, device: i32, stream: RawHandle) [stream];
    cuStreamAttachMemAsync_ptsz => cuStreamAttachMemAsync(stream: RawHandle, ptr: u64, length: usize, flags: u32) [stream];
    cuMemPrefetchBatchAsync_ptsz => cuMemPrefetchBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, locations: *const crate::abi::runtime::MemLocation,
        indexes: *const usize, n_locations: usize, flags: u64, stream: RawHandle) [stream];
    cuMemDiscardBatchAsync_ptsz => cuMemDiscardBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, flags: u64, stream: RawHandle) [stream];
    cuMemDiscardAndPrefetchBatchAsync_ptsz => cuMemDiscardAndPrefetchBatchAsync(
        ptrs: *const *mut c_void, sizes: *const usize, count: usize, locations: *const crate::abi::runtime::MemLocation,
        indexes: *const usize, n_locations: usize, flags: u64, stream: RawHandle) [stream];
    cuLaunchCooperativeKernel_ptsz => cuLaunchCooperativeKernel(
        f: *mut c_void, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shared_mem: u32, stream: RawHandle, args: *const *const u8) [stream];
}

ptds! {
    cuMemcpy_ptds => cuMemcpyAsync(dst: u64, src: u64, size: usize);
    cuMemcpyHtoD_v2_ptds => cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, size: usize);
    cuMemcpyDtoH_v2_ptds => cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, size: usize);
    cuMemcpyDtoD_v2_ptds => cuMemcpyDtoDAsync_v2(dst: u64, src: u64, size: usize);
    cuMemsetD8_v2_ptds => cuMemsetD8Async(dst: u64, value: u8, count: usize);
    cuMemsetD16_v2_ptds => cuMemsetD16Async(dst: u64, value: u16, count: usize);
    cuMemsetD32_v2_ptds => cuMemsetD32Async(dst: u64, value: u32, count: usize);
    cuMemsetD2D8_v2_ptds => cuMemsetD2D8Async(dst: u64, pitch: usize, value: u8, width: usize, height: usize);
    cuMemsetD2D16_v2_ptds => cuMemsetD2D16Async(dst: u64, pitch: usize, value: u16, width: usize, height: usize);
    cuMemsetD2D32_v2_ptds => cuMemsetD2D32Async(dst: u64, pitch: usize, value: u32, width: usize, height: usize);
    cuMemcpy2D_v2_ptds => cuMemcpy2DAsync_v2(copy: *const Memcpy2D);
    cuMemcpy2DUnaligned_v2_ptds => cuMemcpy2DAsync_v2(copy: *const Memcpy2D);
    cuMemcpyPeer_ptds => cuMemcpyPeerAsync(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, size: usize);
}

/// Both streams NULL-is-per-thread.
#[export_name = "__vmcuda_cuStreamCopyAttributes_ptsz"]
#[allow(non_snake_case)]
pub extern "C" fn cuStreamCopyAttributes_ptsz(dst: RawHandle, src: RawHandle) -> CUresult {
    cuStreamCopyAttributes(per_thread(dst), per_thread(src))
}

/// The `_ptsz` and `_ptds` variants defined here, by exported name (with the other
/// modules' they are `cuGetProcAddress`'s, [`crate::driver::proc_address`]).
pub const PER_THREAD_NAMES: &[&[(&str, *const ())]] = &[
    PTSZ,
    PTDS,
    &[("cuLaunchKernelEx_ptsz", cuLaunchKernelEx_ptsz as *const ())],
    &[(
        "cuStreamCopyAttributes_ptsz",
        cuStreamCopyAttributes_ptsz as *const (),
    )],
];

/// A `_ptsz` or `_ptds` variant by its exported name.
fn per_thread_lookup(name: &str) -> Option<*mut c_void> {
    PER_THREAD_NAMES
        .iter()
        .flat_map(|list| list.iter())
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f as *mut c_void)
}

// ---- functions that are a little more than a runtime call ------------------------------

use super::context::{context_of, device_of, CUcontext};
use super::result::status;
use crate::caller;
use crate::driver::inner::device::properties;
use vmcuda_wire::CudaStatus;

export! {
    /// Contexts name devices here: the peer context's device.
    fn cuCtxEnablePeerAccess(peer: CUcontext, flags: u32) {
        check_initialized()?;
        let device = device_of(peer)?;
        keeping_last_error(|| inner::device::cudaDeviceEnablePeerAccess(device, flags))
    }
}

export! {
    fn cuCtxDisablePeerAccess(peer: CUcontext) {
        check_initialized()?;
        let device = device_of(peer)?;
        keeping_last_error(|| inner::device::cudaDeviceDisablePeerAccess(device))
    }
}

export! {
    /// A context's id: its device's ordinal + 1 (one context per device here), the
    /// number the library export table hands out too.
    fn cuCtxGetId(ctx: CUcontext, id: *mut u64) {
        check_initialized()?;
        let device = if ctx.is_null() { super::context::current_device()? } else { device_of(ctx)? };
        // SAFETY: by cuCtxGetId's contract `id` is NULL or writable.
        unsafe { caller::write(id, device as u64 + 1) }
    }
}

/// The context a stream belongs to: its device's.
fn stream_context(stream: RawHandle) -> super::Result<CUcontext> {
    let mut device = 0i32;
    keeping_last_error(|| inner::stream::cudaStreamGetDevice(stream, &mut device))?;
    Ok(context_of(device))
}

export! {
    fn cuStreamGetCtx(stream: RawHandle, ctx: *mut CUcontext) {
        check_initialized()?;
        let c = stream_context(stream)?;
        // SAFETY: by cuStreamGetCtx's contract `ctx` is NULL or writable.
        unsafe { caller::write(ctx, c) }
    }
}

export! {
    /// No green contexts here: the green context is always NULL.
    fn cuStreamGetCtx_v2(stream: RawHandle, ctx: *mut CUcontext, green: *mut RawHandle) {
        check_initialized()?;
        let c = stream_context(stream)?;
        // SAFETY: by cuStreamGetCtx_v2's contract `ctx` is NULL or writable.
        unsafe { caller::write(ctx, c) }?;
        // SAFETY: by cuStreamGetCtx_v2's contract `green` is NULL or writable.
        unsafe { caller::write_opt(green, std::ptr::null_mut()) };
        Ok(())
    }
}

export! {
    /// Hopper has one shared-memory bank size: setting it is a no-op, as on the driver.
    fn cuCtxSetSharedMemConfig(_config: u32) {
        check_initialized()
    }
}

export! {
    /// `CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE`.
    fn cuCtxGetSharedMemConfig(config: *mut u32) {
        check_initialized()?;
        // SAFETY: by cuCtxGetSharedMemConfig's contract `config` is NULL or writable.
        unsafe { caller::write(config, 1) }
    }
}

export! {
    fn cuFuncSetSharedMemConfig(f: *mut c_void, _config: u32) {
        function_facts(f)?;
        Ok(())
    }
}

/// `size_t (*)(int blockSize)`: the dynamic shared memory a block size needs.
type BlockToSmem = Option<unsafe extern "C" fn(i32) -> usize>;

/// The block size that keeps the most threads resident, as CUDA's occupancy helper
/// finds it: every multiple of the warp size up to the limit, largest first.
///
/// # Safety
/// `smem_of` is NULL or a function of the program's that may be called with a block
/// size.
unsafe fn potential_block_size(
    f: *mut c_void,
    smem_of: BlockToSmem,
    dynamic_smem: usize,
    limit: i32,
    flags: u32,
) -> super::Result<(i32, i32)> {
    function_facts(f)?;
    let props = properties(super::context::current_device()?)?;
    // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, WARP_SIZE, MULTIPROCESSOR_COUNT,
    // MAX_THREADS_PER_MULTIPROCESSOR.
    let attr = |a: u32| props.attribute(a).unwrap_or(0);
    let (device_max, warp, sms, per_sm) = (attr(1), attr(10).max(1), attr(16), attr(39));
    let mut max_block = device_max.min(get_attribute(f, 0)?);
    if limit > 0 {
        max_block = max_block.min(limit);
    }
    let (mut best_block, mut best_blocks, mut best_threads) = (0, 0, 0);
    let mut aligned = (max_block + warp - 1) / warp * warp;
    while aligned > 0 {
        let block = max_block.min(aligned);
        let smem = match smem_of {
            // SAFETY: as `potential_block_size`'s caller promised.
            Some(cb) => unsafe { cb(block) },
            None => dynamic_smem,
        };
        let mut blocks = 0i32;
        match cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
            &mut blocks,
            f,
            block,
            smem,
            flags,
        ) {
            0 => {}
            e => return Err(status(e)),
        }
        if block * blocks > best_threads {
            (best_block, best_blocks, best_threads) = (block, blocks, block * blocks);
        }
        if best_threads == per_sm {
            break;
        }
        aligned -= warp;
    }
    Ok((best_blocks * sms, best_block))
}

export! {
    fn cuOccupancyMaxPotentialBlockSize(
        min_grid: *mut i32, block: *mut i32, f: *mut c_void, smem_of: BlockToSmem, dynamic_smem: usize, limit: i32,
    ) {
        if min_grid.is_null() || block.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `smem_of` is NULL or the program's callback.
        let (grid, size) = unsafe { potential_block_size(f, smem_of, dynamic_smem, limit, 0) }?;
        // SAFETY: checked non-NULL; writable by the function's contract.
        unsafe { caller::write(min_grid, grid)?; caller::write(block, size) }
    }
}

export! {
    fn cuOccupancyMaxPotentialBlockSizeWithFlags(
        min_grid: *mut i32, block: *mut i32, f: *mut c_void, smem_of: BlockToSmem, dynamic_smem: usize, limit: i32,
        flags: u32,
    ) {
        if min_grid.is_null() || block.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `smem_of` is NULL or the program's callback.
        let (grid, size) = unsafe { potential_block_size(f, smem_of, dynamic_smem, limit, flags) }?;
        // SAFETY: checked non-NULL; writable by the function's contract.
        unsafe { caller::write(min_grid, grid)?; caller::write(block, size) }
    }
}

/// Extra lookups for the functions above.
/// A device ordinal as a location: `CU_DEVICE_CPU` (-1) is the host.
fn location_of_device(device: i32) -> crate::abi::runtime::MemLocation {
    match device {
        -1 => crate::abi::runtime::MemLocation { kind: 2, id: 0 },
        d => crate::abi::runtime::MemLocation { kind: 1, id: d },
    }
}

export! {
    /// CUDA 8's signature, a device ordinal for the destination.
    fn cuMemPrefetchAsync(ptr: u64, count: usize, device: i32, stream: RawHandle) {
        check_initialized()?;
        let location = location_of_device(device);
        keeping_last_error(|| inner::memory::cudaMemPrefetchAsync(ptr as *const c_void, count, location, 0, stream))
    }
}

export! {
    /// CUDA 8's signature, a device ordinal for the location.
    fn cuMemAdvise(ptr: u64, count: usize, advice: u32, device: i32) {
        check_initialized()?;
        let location = location_of_device(device);
        keeping_last_error(|| inner::memory::cudaMemAdvise(ptr as *const c_void, count, advice, location))
    }
}

pub fn more_lookup(name: &str) -> Option<*mut c_void> {
    Some(match name {
        "cuCtxEnablePeerAccess" => cuCtxEnablePeerAccess as *mut c_void,
        "cuCtxDisablePeerAccess" => cuCtxDisablePeerAccess as *mut c_void,
        "cuCtxGetId" => cuCtxGetId as *mut c_void,
        "cuStreamGetCtx" | "cuStreamGetCtx_v2" => cuStreamGetCtx_v2 as *mut c_void,
        "cuCtxSetSharedMemConfig" => cuCtxSetSharedMemConfig as *mut c_void,
        "cuCtxGetSharedMemConfig" => cuCtxGetSharedMemConfig as *mut c_void,
        "cuFuncSetSharedMemConfig" => cuFuncSetSharedMemConfig as *mut c_void,
        "cuOccupancyMaxPotentialBlockSize" => cuOccupancyMaxPotentialBlockSize as *mut c_void,
        "cuOccupancyMaxPotentialBlockSizeWithFlags" => {
            cuOccupancyMaxPotentialBlockSizeWithFlags as *mut c_void
        }
        _ => return None,
    })
}
