//! The op-code table.
//!
//! One line per forwarded call: explicit op code (append-only, never positional: a
//! snapshot test guards them), the host handler method, the request and reply types,
//! and whether CUDA lets the caller run on without waiting (`Async`) or not (`Sync`).
//! The macro expands the table into [`Op`], the [`Request`] impls the guest calls
//! through, the host's [`Handler`] trait and its [`dispatch`] function.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use thiserror::Error;

use crate::blas::{BlasCreate, BlasDestroy, BlasGemm, BlasSetWorkspace};
use crate::blas_table::{BlasCall, BlasCallWaited, BlasOutputs};
use crate::blaslt::{LtCreate, LtDestroy, LtHeuristic, LtHeuristicReply, LtMatmul};
use crate::driver::{
    AllocationProp, Granularity, Link, Linked, MemAddressFree, MemAddressReserve, MemCreate,
    MemCreated, MemGetAllocationGranularity, MemGetAllocationProperties, MemMap, MemRelease,
    MemRetainAllocationHandle, MemSetAccess, MemUnmap, MemsetElements, Reserved,
    StreamWriteValue32, TensorMapEncodeTiled,
};
use crate::graph::{
    CaptureGraph, DotText, GraphDebugDot, GraphDestroy, GraphExecDestroy, GraphExecMade,
    GraphGetNodes, GraphInstantiate, GraphLaunch, GraphMade, GraphNodeGetDependencies, GraphNodes,
    MemAllocAsync, MemFreeAsync, MemPoolGetAttribute, MemPoolSetAccess, MemPoolSetAttribute,
    MemPoolTrimTo, PoolAttributeValue, StreamBeginCapture, StreamEndCapture, StreamGetCaptureGraph,
};
use crate::status::CudaStatus;

/// A device pointer as the GPU sees it. Guests get real device addresses because
/// kernels take pointers inside arguments and structs.
pub type DevicePtr = u64;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u64);
    };
}
handle!(
    /// A stream named by the guest. `0` is the legacy default stream and
    /// [`StreamHandle::PER_THREAD`] the per-thread default stream; others are made by
    /// `StreamCreate`, with ids the guest picks so creating one needs no round trip.
    StreamHandle
);
handle!(
    /// An event named by the guest (ids picked by the guest, like streams).
    EventHandle
);
handle!(
    /// A loaded module (one fatbinary), named by the host.
    ModuleHandle
);
handle!(
    /// A kernel of a loaded module, named by the host.
    FunctionHandle
);

impl StreamHandle {
    pub const LEGACY: StreamHandle = StreamHandle(0);
    pub const PER_THREAD: StreamHandle = StreamHandle(2);
    pub fn is_default(self) -> bool {
        self == Self::LEGACY || self == Self::PER_THREAD
    }
}

/// Whether CUDA makes the calling host thread wait for the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Sync,
    Async,
}

/// A request type, tied to its op code and reply type by the table.
pub trait Request: Serialize + DeserializeOwned {
    const OP: Op;
    type Reply: Serialize + DeserializeOwned;
}

/// Per-call facts from the frame header.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallContext {
    /// The calling guest thread's current device.
    pub device: i32,
}

/// A handler's answer: the reply and its bulk data (empty for most ops).
pub type HandlerResult<R> = Result<(R, Vec<u8>), CudaStatus>;

#[derive(Debug, Error)]
pub enum DispatchError {
    #[error("undecodable arguments for {op:?}: {source}")]
    Decode {
        op: Op,
        #[source]
        source: postcard::Error,
    },
    #[error("{0}")]
    Cuda(CudaStatus),
}

/// An encoded reply: argument block and bulk data.
pub struct EncodedReply {
    pub meta: Vec<u8>,
    pub data: Vec<u8>,
}

macro_rules! op_table {
    ($( $code:literal $name:ident => $method:ident ($req:ty) -> $reply:ty, $mode:ident; )*) => {
        /// Every op code. The numbers are the protocol: never change or reuse one.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Op { $($name = $code,)* }

        impl Op {
            pub const ALL: &'static [Op] = &[$(Op::$name,)*];

            pub fn from_code(code: u16) -> Option<Op> {
                match code { $($code => Some(Op::$name),)* _ => None }
            }
            pub fn code(self) -> u16 {
                self as u16
            }
            pub fn name(self) -> &'static str {
                match self { $(Op::$name => stringify!($name),)* }
            }
            pub fn mode(self) -> Mode {
                match self { $(Op::$name => Mode::$mode,)* }
            }
        }

        $(impl Request for $req {
            const OP: Op = Op::$name;
            type Reply = $reply;
        })*

        /// The host side of the table: one method per op.
        pub trait Handler {
            $(fn $method(&mut self, ctx: &CallContext, req: $req, data: &[u8]) -> HandlerResult<$reply>;)*
        }

        /// Decode a request, run its handler and encode the reply.
        pub fn dispatch<H: Handler + ?Sized>(
            handler: &mut H,
            ctx: &CallContext,
            op: Op,
            meta: &[u8],
            data: &[u8],
        ) -> Result<EncodedReply, DispatchError> {
            match op {
                $(Op::$name => {
                    let req: $req = postcard::from_bytes(meta)
                        .map_err(|source| DispatchError::Decode { op, source })?;
                    let (reply, data) = handler.$method(ctx, req, data).map_err(DispatchError::Cuda)?;
                    let meta = postcard::to_stdvec(&reply).expect("reply types always encode");
                    Ok(EncodedReply { meta, data })
                })*
            }
        }
    };
}

op_table! {
    0x0001 Hello => hello(Hello) -> HelloReply, Sync;

    0x0100 DeviceGetProperties => device_get_properties(DeviceGetProperties) -> DeviceProperties, Sync;
    0x0101 DeviceSynchronize => device_synchronize(DeviceSynchronize) -> (), Sync;
    0x0102 DeviceReset => device_reset(DeviceReset) -> (), Sync;
    0x0103 DeviceGetLimit => device_get_limit(DeviceGetLimit) -> LimitValue, Sync;
    0x0104 DeviceSetLimit => device_set_limit(DeviceSetLimit) -> (), Sync;
    0x0105 DeviceGetCacheConfig => device_get_cache_config(DeviceGetCacheConfig) -> CacheConfig, Sync;
    0x0106 DeviceSetCacheConfig => device_set_cache_config(CacheConfig) -> (), Sync;
    0x0107 DeviceGetStreamPriorityRange => device_get_stream_priority_range(DeviceGetStreamPriorityRange) -> PriorityRange, Sync;
    0x0108 DeviceCanAccessPeer => device_can_access_peer(DeviceCanAccessPeer) -> CanAccessPeer, Sync;
    0x0109 DeviceEnablePeerAccess => device_enable_peer_access(DeviceEnablePeerAccess) -> (), Sync;
    0x010A DeviceDisablePeerAccess => device_disable_peer_access(DeviceDisablePeerAccess) -> (), Sync;
    0x010B MemGetInfo => mem_get_info(MemGetInfo) -> MemInfo, Sync;

    0x0200 MemAlloc => mem_alloc(MemAlloc) -> Allocated, Sync;
    0x0201 MemFree => mem_free(MemFree) -> (), Sync;
    0x0202 MemAllocPitch => mem_alloc_pitch(MemAllocPitch) -> AllocatedPitch, Sync;
    0x0203 MemcpyHtoD => memcpy_htod(MemcpyHtoD) -> (), Async;
    0x0204 MemcpyDtoH => memcpy_dtoh(MemcpyDtoH) -> (), Sync;
    0x0205 MemcpyDtoD => memcpy_dtod(MemcpyDtoD) -> (), Async;
    0x0206 Memcpy2DHtoD => memcpy_2d_htod(Memcpy2DHtoD) -> (), Async;
    0x0207 Memcpy2DDtoH => memcpy_2d_dtoh(Memcpy2DDtoH) -> (), Sync;
    0x0208 Memcpy2DDtoD => memcpy_2d_dtod(Memcpy2DDtoD) -> (), Async;
    0x0209 Memset => memset(Memset) -> (), Async;
    0x020A Memset2D => memset_2d(Memset2D) -> (), Async;
    0x020B MemcpyPeer => memcpy_peer(MemcpyPeer) -> (), Async;
    0x020C PointerGetAttributes => pointer_get_attributes(PointerGetAttributes) -> PointerAttributes, Sync;
    0x020D HostRegisterShared => host_register_shared(HostRegisterShared) -> SharedHostMemory, Sync;
    0x020E HostUnregisterShared => host_unregister_shared(HostUnregisterShared) -> (), Sync;
    0x020F MemcpyShared => memcpy_shared(MemcpyShared) -> (), Async;
    0x0210 HostRegisterGuestPages => host_register_guest_pages(HostRegisterGuestPages) -> SharedHostMemory, Sync;

    0x0300 ModuleLoad => module_load(ModuleLoad) -> ModuleLoaded, Sync;
    0x0301 ModuleGetFunction => module_get_function(ModuleGetFunction) -> FunctionInfo, Sync;
    0x0302 ModuleGetGlobal => module_get_global(ModuleGetGlobal) -> GlobalInfo, Sync;
    0x0303 FuncGetAttributes => func_get_attributes(FuncGetAttributes) -> FuncAttributes, Sync;
    0x0304 FuncSetAttribute => func_set_attribute(FuncSetAttribute) -> (), Sync;
    0x0305 FuncSetCacheConfig => func_set_cache_config(FuncSetCacheConfig) -> (), Sync;
    0x0306 LaunchKernel => launch_kernel(LaunchKernel) -> (), Async;
    0x0307 OccupancyMaxActiveBlocks => occupancy_max_active_blocks(OccupancyMaxActiveBlocks) -> BlockCount, Sync;
    0x0308 OccupancyAvailableDynamicSmem => occupancy_available_dynamic_smem(OccupancyAvailableDynamicSmem) -> SmemBytes, Sync;

    0x0400 StreamCreate => stream_create(StreamCreate) -> (), Async;
    0x0401 StreamDestroy => stream_destroy(StreamDestroy) -> (), Async;
    0x0402 StreamSynchronize => stream_synchronize(StreamSynchronize) -> (), Sync;
    0x0403 StreamQuery => stream_query(StreamQuery) -> (), Sync;
    0x0404 StreamWaitEvent => stream_wait_event(StreamWaitEvent) -> (), Async;

    0x0500 EventCreate => event_create(EventCreate) -> (), Async;
    0x0501 EventDestroy => event_destroy(EventDestroy) -> (), Async;
    0x0502 EventRecord => event_record(EventRecord) -> (), Async;
    0x0503 EventSynchronize => event_synchronize(EventSynchronize) -> (), Sync;
    0x0504 EventQuery => event_query(EventQuery) -> (), Sync;
    0x0505 EventElapsedTime => event_elapsed_time(EventElapsedTime) -> ElapsedTime, Sync;

    // cuBLAS (types in crate::blas). Create waits: the host makes a real handle and
    // charges its workspace to the guest's quota, either of which can fail.
    0x0600 BlasCreate => blas_create(BlasCreate) -> (), Sync;
    0x0601 BlasDestroy => blas_destroy(BlasDestroy) -> (), Async;
    0x0602 BlasSetWorkspace => blas_set_workspace(BlasSetWorkspace) -> (), Async;
    0x0603 BlasGemm => blas_gemm(BlasGemm) -> (), Async;

    // The driver API (types in crate::driver). VMM calls wait: each can fail with a
    // code the program checks at once (quota, a range outside a reservation).
    0x0900 MemsetElements => memset_elements(MemsetElements) -> (), Async;
    0x0901 StreamWriteValue32 => stream_write_value32(StreamWriteValue32) -> (), Async;
    0x0902 MemAddressReserve => mem_address_reserve(MemAddressReserve) -> Reserved, Sync;
    0x0903 MemAddressFree => mem_address_free(MemAddressFree) -> (), Sync;
    0x0904 MemCreate => mem_create(MemCreate) -> MemCreated, Sync;
    0x0905 MemRelease => mem_release(MemRelease) -> (), Sync;
    0x0906 MemMap => mem_map(MemMap) -> (), Sync;
    0x0907 MemUnmap => mem_unmap(MemUnmap) -> (), Sync;
    0x0908 MemSetAccess => mem_set_access(MemSetAccess) -> (), Sync;
    0x0909 MemGetAllocationGranularity => mem_get_allocation_granularity(MemGetAllocationGranularity) -> Granularity, Sync;
    0x090A MemRetainAllocationHandle => mem_retain_allocation_handle(MemRetainAllocationHandle) -> MemCreated, Sync;
    0x090B MemGetAllocationProperties => mem_get_allocation_properties(MemGetAllocationProperties) -> AllocationProp, Sync;
    0x090C Link => link(Link) -> Linked, Sync;
    0x090D TensorMapEncodeTiled => tensor_map_encode_tiled(TensorMapEncodeTiled) -> (), Sync;
    // cuBLASLt (types in crate::blaslt). Descriptors stay in the guest; the heuristic
    // waits for the host's cuBLASLt, matmuls are posted like GEMMs.
    0x0800 LtCreate => lt_create(LtCreate) -> (), Sync;
    0x0801 LtDestroy => lt_destroy(LtDestroy) -> (), Async;
    0x0802 LtHeuristic => lt_heuristic(LtHeuristic) -> LtHeuristicReply, Sync;
    0x0803 LtMatmul => lt_matmul(LtMatmul) -> (), Async;
    // Stream capture, graphs, stream-ordered memory (types in crate::graph). Capture
    // begins and ends waiting (the driver may refuse either); a graph launch and the
    // destruction of objects the guest knows it made are posted.
    0x0700 StreamBeginCapture => stream_begin_capture(StreamBeginCapture) -> (), Sync;
    0x0701 StreamEndCapture => stream_end_capture(StreamEndCapture) -> GraphMade, Sync;
    0x0702 GraphInstantiate => graph_instantiate(GraphInstantiate) -> GraphExecMade, Sync;
    0x0703 GraphLaunch => graph_launch(GraphLaunch) -> (), Async;
    0x0704 GraphDestroy => graph_destroy(GraphDestroy) -> (), Async;
    0x0705 GraphExecDestroy => graph_exec_destroy(GraphExecDestroy) -> (), Async;
    0x0706 GraphGetNodes => graph_get_nodes(GraphGetNodes) -> GraphNodes, Sync;
    0x0707 GraphNodeGetDependencies => graph_node_get_dependencies(GraphNodeGetDependencies) -> GraphNodes, Sync;
    0x0708 GraphDebugDot => graph_debug_dot(GraphDebugDot) -> DotText, Sync;
    0x0709 MemAllocAsync => mem_alloc_async(MemAllocAsync) -> Allocated, Sync;
    0x070A MemFreeAsync => mem_free_async(MemFreeAsync) -> (), Async;
    0x070B MemPoolGetAttribute => mem_pool_get_attribute(MemPoolGetAttribute) -> PoolAttributeValue, Sync;
    0x070C MemPoolSetAttribute => mem_pool_set_attribute(MemPoolSetAttribute) -> (), Sync;
    0x070D MemPoolTrimTo => mem_pool_trim_to(MemPoolTrimTo) -> (), Sync;
    0x070E MemPoolSetAccess => mem_pool_set_access(MemPoolSetAccess) -> (), Sync;
    0x070F StreamGetCaptureGraph => stream_get_capture_graph(StreamGetCaptureGraph) -> CaptureGraph, Sync;
    // Every function of crate::blas_table: posted, or waited for when host values come
    // back (results and in/out scalars in host pointer mode, the batched solvers' info).
    0x0610 BlasCall => blas_call(BlasCall) -> (), Async;
    0x0611 BlasCallWaited => blas_call_waited(BlasCallWaited) -> BlasOutputs, Sync;
}

/// Host-to-guest event (flag `FLAG_EVENT`, not in the table because guests never send
/// it): kernel `printf` and device-assert text, in the data section, for the guest's
/// stdout (`fd` 1) or stderr (`fd` 2), sent just before the reply of the call during
/// which the driver produced it.
pub const OP_CONSOLE: u16 = 0xF001;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Console {
    pub fd: u8,
}

// ---- handshake ----

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    pub protocol: u32,
    /// The CUDA runtime version the guest library implements (e.g. 13000).
    pub runtime_version: i32,
    pub capabilities: u64,
    /// Authentication token (checked by policy; empty when none is configured).
    pub token: Vec<u8>,
    /// The guest program's name and pid, for the host's logs.
    pub client: String,
    pub pid: u32,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ExecutorKind {
    /// A real GPU through the CUDA driver.
    Cuda,
    /// The host-memory test double: kernels are recorded, never run.
    HostMemory,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HelloReply {
    pub protocol: u32,
    pub driver_version: i32,
    pub device_count: i32,
    pub executor: ExecutorKind,
    pub capabilities: u64,
    /// One human-readable line about the backend (shown by tools and the demo).
    pub banner: String,
}

// ---- devices ----

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceGetProperties {
    pub device: i32,
}

/// Everything `cudaGetDeviceProperties` and `cudaDeviceGetAttribute` answer, fetched
/// once per device and cached by the guest.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceProperties {
    pub name: String,
    pub uuid: [u8; 16],
    pub luid: [u8; 8],
    pub luid_device_node_mask: u32,
    pub total_global_mem: u64,
    /// `(cudaDeviceAttr, value)` for every attribute the device answers; the runtime's
    /// and the driver's attribute numbers are the same.
    pub attributes: Vec<(u32, i32)>,
}

impl DeviceProperties {
    pub fn attribute(&self, attr: u32) -> Option<i32> {
        self.attributes.iter().find(|a| a.0 == attr).map(|a| a.1)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceSynchronize;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceReset;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceGetLimit {
    pub limit: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LimitValue {
    pub value: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceSetLimit {
    pub limit: u32,
    pub value: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceGetCacheConfig;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CacheConfig {
    pub config: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceGetStreamPriorityRange;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PriorityRange {
    pub least: i32,
    pub greatest: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceCanAccessPeer {
    pub device: i32,
    pub peer: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CanAccessPeer {
    pub can_access: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceEnablePeerAccess {
    pub peer: i32,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeviceDisablePeerAccess {
    pub peer: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemGetInfo;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemInfo {
    pub free: u64,
    pub total: u64,
}

// ---- memory ----

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAlloc {
    pub size: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Allocated {
    pub ptr: DevicePtr,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemFree {
    pub ptr: DevicePtr,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAllocPitch {
    pub width: u64,
    pub height: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AllocatedPitch {
    pub ptr: DevicePtr,
    pub pitch: u64,
}
/// Host to device; the bytes are the frame's data section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyHtoD {
    pub dst: DevicePtr,
    pub stream: StreamHandle,
    pub is_async: bool,
}
/// Device to host; the bytes come back as the reply's data section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyDtoH {
    pub src: DevicePtr,
    pub size: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyDtoD {
    pub dst: DevicePtr,
    pub src: DevicePtr,
    pub size: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
/// A pitched host-to-device copy; the data section holds the rows packed
/// (`width * height` bytes), the guest having dropped its own pitch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Memcpy2DHtoD {
    pub dst: DevicePtr,
    pub dpitch: u64,
    pub width: u64,
    pub height: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
/// A pitched device-to-host copy; the reply's data holds the rows packed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Memcpy2DDtoH {
    pub src: DevicePtr,
    pub spitch: u64,
    pub width: u64,
    pub height: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Memcpy2DDtoD {
    pub dst: DevicePtr,
    pub dpitch: u64,
    pub src: DevicePtr,
    pub spitch: u64,
    pub width: u64,
    pub height: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Memset {
    pub dst: DevicePtr,
    pub value: u8,
    pub size: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Memset2D {
    pub dst: DevicePtr,
    pub pitch: u64,
    pub value: u8,
    pub width: u64,
    pub height: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyPeer {
    pub dst: DevicePtr,
    pub dst_device: i32,
    pub src: DevicePtr,
    pub src_device: i32,
    pub size: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PointerGetAttributes {
    pub ptr: DevicePtr,
}
/// `cudaPointerAttributes` for a pointer the host knows (`memory_type` is a
/// `cudaMemoryType`: 0 unregistered, 1 host, 2 device, 3 managed).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PointerAttributes {
    pub memory_type: i32,
    pub device: i32,
    pub device_pointer: DevicePtr,
}

/// Share guest host memory with the backend: the frame carries a memfd (SCM_RIGHTS,
/// Unix sockets only) whose first `size` bytes the guest has mapped at `addr`. The
/// backend maps it at the same address and registers it with the GPU, so kernels can
/// reach it through the device pointer in the reply (equal to `addr` under UVA).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostRegisterShared {
    pub addr: u64,
    pub size: u64,
    /// `cudaHostAlloc`/`cudaHostRegister` flags.
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SharedHostMemory {
    pub device_ptr: DevicePtr,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostUnregisterShared {
    pub addr: u64,
}
/// `HostRegisterShared` flag (outside CUDA's flag bits): the region is the guest
/// library's own staging area for pageable copies, not memory the program asked for.
/// The host takes one per connection, of at most [`MAX_STAGING_LEN`] bytes, and does not
/// count it against the quota (like its own receive buffers).
pub const SHARED_STAGING: u32 = 1 << 31;
pub const MAX_STAGING_LEN: u64 = 256 << 20;

/// Share guest memory with a backend that has the guest's RAM mapped (the vhost-user
/// device's workers): the guest process has `size` bytes at `addr`, made of pages of
/// `page_size` bytes whose guest-physical addresses are `pages`, in order. The backend
/// maps those pages side by side and registers them with the GPU; copies then name
/// `addr` in [`MemcpyShared`] as for [`HostRegisterShared`]. The memory is the host's to
/// copy from and to only: its device pointer in the reply is 0 (kernels cannot reach
/// it). Only connections from a privileged guest source port may ask (the guest-physical
/// addresses reach any of the VM's memory); see docs/security.md.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostRegisterGuestPages {
    pub addr: u64,
    pub size: u64,
    pub page_size: u64,
    pub pages: Vec<u64>,
    /// As in [`HostRegisterShared`] ([`SHARED_STAGING`] for the staging area).
    pub flags: u32,
}

/// A copy between device memory and guest memory the host has mapped (shared pinned
/// memory, or the staging area): the DMA engine reads or writes the guest's pages, and
/// no byte travels on the socket. `host` is the guest's address, inside one region
/// registered with `HostRegisterShared`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyShared {
    pub device: DevicePtr,
    pub host: u64,
    pub size: u64,
    pub to_device: bool,
    pub stream: StreamHandle,
    /// Left running on the stream (`cudaMemcpyAsync`); otherwise done before the reply.
    pub is_async: bool,
}

// ---- modules and kernels ----

/// Load one fatbinary (the raw back-to-back containers, in the data section).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModuleLoad;
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModuleLoaded {
    pub module: ModuleHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModuleGetFunction {
    pub module: ModuleHandle,
    /// The mangled kernel name.
    pub name: String,
}
/// One kernel parameter's place in the parameter buffer.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ParamInfo {
    pub offset: u32,
    pub size: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FunctionInfo {
    pub function: FunctionHandle,
    /// The parameter layout, cached by the guest to pack arguments.
    pub params: Vec<ParamInfo>,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModuleGetGlobal {
    pub module: ModuleHandle,
    pub name: String,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GlobalInfo {
    pub ptr: DevicePtr,
    pub size: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FuncGetAttributes {
    pub function: FunctionHandle,
}
/// `cudaFuncAttributes`, field for field.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FuncAttributes {
    pub shared_size_bytes: u64,
    pub const_size_bytes: u64,
    pub local_size_bytes: u64,
    pub max_threads_per_block: i32,
    pub num_regs: i32,
    pub ptx_version: i32,
    pub binary_version: i32,
    pub cache_mode_ca: i32,
    pub max_dynamic_shared_size_bytes: i32,
    pub preferred_shmem_carveout: i32,
    pub cluster_dim_must_be_set: i32,
    pub required_cluster_width: i32,
    pub required_cluster_height: i32,
    pub required_cluster_depth: i32,
    pub cluster_scheduling_policy_preference: i32,
    pub non_portable_cluster_size_allowed: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FuncSetAttribute {
    pub function: FunctionHandle,
    /// A `cudaFuncAttribute`.
    pub attribute: i32,
    pub value: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FuncSetCacheConfig {
    pub function: FunctionHandle,
    pub config: u32,
}
/// One launch attribute (`cudaLaunchAttribute`): its id and the 64-byte value union.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LaunchAttribute {
    pub id: u32,
    pub value: Vec<u8>,
}
/// A kernel launch; the data section is the packed parameter buffer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LaunchKernel {
    pub function: FunctionHandle,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: StreamHandle,
    pub attributes: Vec<LaunchAttribute>,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OccupancyMaxActiveBlocks {
    pub function: FunctionHandle,
    pub block_size: i32,
    pub dynamic_smem: u64,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlockCount {
    pub blocks: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OccupancyAvailableDynamicSmem {
    pub function: FunctionHandle,
    pub num_blocks: i32,
    pub block_size: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SmemBytes {
    pub bytes: u64,
}

// ---- streams and events ----

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamCreate {
    pub stream: StreamHandle,
    pub flags: u32,
    pub priority: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamDestroy {
    pub stream: StreamHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamSynchronize {
    pub stream: StreamHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamQuery {
    pub stream: StreamHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamWaitEvent {
    pub stream: StreamHandle,
    pub event: EventHandle,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventCreate {
    pub event: EventHandle,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventDestroy {
    pub event: EventHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventRecord {
    pub event: EventHandle,
    pub stream: StreamHandle,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventSynchronize {
    pub event: EventHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventQuery {
    pub event: EventHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventElapsedTime {
    pub start: EventHandle,
    pub end: EventHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ElapsedTime {
    pub ms: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op codes are the protocol. This snapshot only ever grows: a code that
    /// changes, disappears or gets reused breaks every deployed guest.
    #[test]
    fn op_codes_are_append_only() {
        let snapshot = include_str!("../ops.snapshot");
        let current: Vec<String> = Op::ALL
            .iter()
            .map(|op| format!("{:#06x} {}", op.code(), op.name()))
            .collect();
        for line in snapshot.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                current.iter().any(|c| c == line),
                "op `{line}` from ops.snapshot is gone or renumbered"
            );
        }
        for line in &current {
            assert!(
                snapshot.lines().any(|l| l == line),
                "new op `{line}`: append it to wire/ops.snapshot"
            );
        }
    }

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut codes: Vec<u16> = Op::ALL.iter().map(|o| o.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Op::ALL.len());
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(*op));
        }
        assert_eq!(Op::from_code(0xEEEE), None);
        assert!(Op::from_code(OP_CONSOLE).is_none());
    }

    #[test]
    fn request_types_know_their_op() {
        assert_eq!(<MemAlloc as Request>::OP, Op::MemAlloc);
        assert_eq!(Op::LaunchKernel.mode(), Mode::Async);
        assert_eq!(Op::MemcpyDtoH.mode(), Mode::Sync);
    }
}
