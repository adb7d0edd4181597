//! The executor seam: what the host does with a guest's calls once they are decoded
//! and their handles checked.
//!
//! Two implementations: [`cuda::CudaExecutor`] runs everything on real GPUs through
//! the CUDA driver API (cudarc), [`host_memory::HostMemoryExecutor`] is the test double
//! for machines without a GPU (real memory semantics; kernels recorded, never run;
//! GEMMs and cuBLASLt matmuls computed by CPU references, see
//! [`host_memory::reference`]).
//!
//! Streams, events, modules and functions are the executor's own `u64` ids here; the
//! session maps the guest's handles onto them and checks them first.

pub mod array;
mod checked;
pub mod cuda;
pub mod driver;
pub mod graph;
pub mod host_memory;

use std::os::fd::OwnedFd;
use vmcuda_wire::op::{
    DeviceProperties, DevicePtr, ExecutorKind, FuncAttributes, GpuStatus, LaunchAttribute,
    ParamInfo, PointerAttributes,
};

use vmcuda_wire::CudaStatus;

use crate::compute::Drainer;

pub use self::checked::{DeviceRange, PitchedRange};

pub type ExecResult<T> = Result<T, CudaStatus>;

/// The driver hands out small allocations from its own 2 MiB chunks in steps of this
/// many bytes: 20,000 one-byte `cudaMalloc`s take about 10 MiB of an H100.
pub const SMALL_ALLOCATION_STEP: u64 = 512;
/// Allocations above this many bytes get whole large pages of their own.
pub const SMALL_ALLOCATION_MAX: u64 = 1 << 20;
/// The GPU's large page, the unit in which bigger allocations are mapped.
pub const LARGE_PAGE: u64 = 2 << 20;

/// The device memory an allocation of `size` bytes really takes, as the quota counts
/// it: up to [`SMALL_ALLOCATION_MAX`] rounded up to [`SMALL_ALLOCATION_STEP`], above it
/// rounded up to whole [`LARGE_PAGE`]s. Both executors take memory by this rule, so the
/// figures the host-memory executor shows are the ones the GPU would.
pub fn allocation_footprint(size: u64) -> u64 {
    let step = if size <= SMALL_ALLOCATION_MAX {
        SMALL_ALLOCATION_STEP
    } else {
        LARGE_PAGE
    };
    size.checked_next_multiple_of(step).unwrap_or(u64::MAX)
}

/// The `cudaLimit` numbers whose values the context reserves device memory for.
pub mod limit {
    /// `cudaLimitStackSize`: bytes per thread, reserved for every thread that can be
    /// resident on the device at once.
    pub const STACK_SIZE: u32 = 0;
    /// `cudaLimitPrintfFifoSize`: bytes.
    pub const PRINTF_FIFO_SIZE: u32 = 1;
    /// `cudaLimitMallocHeapSize`: bytes.
    pub const MALLOC_HEAP_SIZE: u32 = 2;
}

/// An executor's stream id. `LEGACY_STREAM` and `PER_THREAD_STREAM` are the default
/// streams, the same numbers as the wire's `StreamHandle`s for them.
pub type ExecStream = u64;
pub const LEGACY_STREAM: ExecStream = 0;
pub const PER_THREAD_STREAM: ExecStream = 2;

/// Where a copy or memset runs in stream order, as CUDA's two shapes of a call have
/// it: queued on a stream, returning once queued (the `*Async` calls), or done before
/// it returns, after what the stream already holds (the synchronous calls, on a default
/// stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOrder {
    Queued(ExecStream),
    Waited(ExecStream),
}

impl StreamOrder {
    /// The order a request names: its checked stream and whether it is asynchronous.
    pub fn of(stream: ExecStream, is_async: bool) -> StreamOrder {
        if is_async {
            StreamOrder::Queued(stream)
        } else {
            StreamOrder::Waited(stream)
        }
    }

    pub fn stream(self) -> ExecStream {
        match self {
            StreamOrder::Queued(s) | StreamOrder::Waited(s) => s,
        }
    }

    /// Whether the call may return before its work is done.
    pub fn is_queued(self) -> bool {
        matches!(self, StreamOrder::Queued(_))
    }
}

/// `sizeof(cudaStreamAttrValue)`.
pub const STREAM_ATTR_LEN: usize = 64;

/// A stream attribute's value: the bytes of `CUstreamAttrValue`.
pub type StreamAttrValue = [u8; STREAM_ATTR_LEN];
pub type ExecEvent = u64;
pub type ExecModule = u64;
pub type ExecFunction = u64;

/// A kernel's grid, block and dynamic shared memory, as a graph's kernel node holds
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
}

/// A kernel launch's shape.
#[derive(Clone, Debug)]
pub struct LaunchConfig<'a> {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: ExecStream,
    pub attributes: &'a [LaunchAttribute],
}

/// The executor seam, one trait per API family (as the op table is grouped), each
/// implemented by an executor in its family's file; every executor also answers the
/// driver-API calls beyond the runtime's ([`driver::Driver`]) and the graph and memory-pool calls ([`graph::Graphs`]).
pub trait Executor:
    DeviceExec
    + vmcuda_wire::op::PassThroughExec
    + MemoryExec
    + CopyExec
    + StagingExec
    + ModuleExec
    + LaunchExec
    + StreamExec
    + driver::Driver
    + graph::Graphs
    + graph::GraphBuild
    + array::ArrayExec
{
    fn kind(&self) -> ExecutorKind;
    /// One line describing the backend, shown to the guest.
    fn banner(&self) -> String;
    fn driver_version(&self) -> i32;
    fn device_count(&self) -> i32;
}

/// Devices: properties, synchronization, reset, limits, cache configuration, peers.
pub trait DeviceExec {
    /// Make `device` current for the calls that follow (the calling guest thread's
    /// current device travels with every request).
    fn set_device(&mut self, device: i32) -> ExecResult<()>;

    fn device_properties(&mut self, device: i32) -> ExecResult<DeviceProperties>;
    /// Wait for the work queued on every device this executor used (before the
    /// worker hands its turn on the GPU to another, see `crate::compute`).
    fn drain(&mut self) -> ExecResult<()>;
    /// What `drain` does, for another thread to call while the request thread is idle
    /// (the worker's turn keeper, which hands an idle holder's turn on once its queued
    /// work is done); None where this executor cannot give it.
    fn keeper_drain(&self) -> Option<Drainer>;
    /// Have the GPU write `value` to `word` (4 bytes) once every stream of the
    /// current device has done the work queued on it so far.
    fn device_write_done(&mut self, word: DeviceRange, value: u32) -> ExecResult<()>;
    /// Destroy everything the guest made on the current device and start afresh.
    fn device_reset(&mut self) -> ExecResult<()>;
    fn get_limit(&mut self, limit: u32) -> ExecResult<u64>;
    fn set_limit(&mut self, limit: u32, value: u64) -> ExecResult<()>;
    fn can_access_peer(&mut self, device: i32, peer: i32) -> ExecResult<bool>;
    /// A `CUdevice_P2PAttribute` of the link from `src` to `dst` (guest ordinals).
    fn p2p_attribute(&mut self, attr: u32, src: i32, dst: i32) -> ExecResult<i32>;
    /// `device`'s live readings (utilization, temperature, power, clocks, PCI ids,
    /// driver version); the guest's own share is the session's to fill in.
    fn gpu_status(&mut self, device: i32) -> ExecResult<GpuStatus>;
    /// The widest 1D texture over linear memory of the current device, in elements of
    /// `channels` channels of `format` (a `CUarray_format`; both checked).
    fn texture_1d_linear_max_width(&mut self, format: u32, channels: u32) -> ExecResult<u64>;
    /// Make GPUDirect RDMA writes to the current context visible to its owner, or to
    /// every device.
    fn flush_gpu_direct_rdma_writes(&mut self, to_all_devices: bool) -> ExecResult<()>;
    /// The SM count the current device's context is limited to
    /// (`cuCtxGetExecAffinity`, `CU_EXEC_AFFINITY_TYPE_SM_COUNT`).
    fn exec_affinity_sm_count(&mut self) -> ExecResult<u32>;
    /// The `CUatomicCapability` bits of each operation (checked `CUatomicOperation`s)
    /// for atomics from the current device to host memory (`peer` `None`) or to
    /// device `peer`'s memory.
    fn atomic_capabilities(
        &mut self,
        operations: &[u32],
        peer: Option<i32>,
    ) -> ExecResult<Vec<u32>>;
}

/// Device allocations, memsets, pointer attributes and host memory registered with the GPU.
pub trait MemoryExec {
    /// (free, total) bytes of the current device.
    fn mem_info(&mut self) -> ExecResult<(u64, u64)>;

    fn alloc(&mut self, size: u64) -> ExecResult<DevicePtr>;
    fn free(&mut self, ptr: DevicePtr) -> ExecResult<()>;
    /// (pointer, pitch) for `height` rows of `width` bytes.
    fn alloc_pitch(&mut self, width: u64, height: u64) -> ExecResult<(DevicePtr, u64)>;
    fn memset(&mut self, dst: DeviceRange, value: u8, order: StreamOrder) -> ExecResult<()>;
    /// Zero a fresh stream-ordered allocation in the order of `stream`, which is
    /// capturing: the graph's node right after the allocation node. A memset node
    /// here; an executor may make one that an executable-graph update can carry to
    /// another graph's memory (the driver refuses to move a memset node's destination
    /// to another graph's allocation).
    fn zero_in_capture(&mut self, dst: DeviceRange, stream: ExecStream) -> ExecResult<()> {
        self.memset(dst, 0, StreamOrder::Queued(stream))
    }
    /// Zero a fresh allocation before the guest sees it, synchronously and ordered
    /// with nothing the guest queued: memory is never handed over with what an
    /// earlier owner (another guest) left in it.
    fn zero_fill(&mut self, dst: DevicePtr, size: u64) -> ExecResult<()>;
    fn memset_2d(&mut self, dst: PitchedRange, value: u8, order: StreamOrder) -> ExecResult<()>;
    fn pointer_attributes(&mut self, ptr: DevicePtr) -> ExecResult<PointerAttributes>;
    /// Page-lock `[ptr, ptr + size)` of this process (memory shared with the guest,
    /// mapped at the guest's address) and map it for the GPU; returns its device pointer.
    fn host_register(&mut self, ptr: u64, size: u64) -> ExecResult<DevicePtr>;
    fn host_unregister(&mut self, ptr: u64) -> ExecResult<()>;
    /// Export the allocation starting at `ptr` for another process (CUDA IPC): the
    /// driver's handle, and the shared memory behind it where the executor has some to
    /// pass on (the test double's).
    fn ipc_export_memory(&mut self, ptr: DevicePtr) -> ExecResult<IpcExported>;
    /// Open another worker's export of `size` bytes in the current context (`flags`:
    /// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`); its address here.
    fn ipc_open_memory(
        &mut self,
        handle: &[u8],
        size: u64,
        flags: u32,
        shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr>;
    /// Unmap an allocation `ipc_open_memory` mapped.
    fn ipc_close_memory(&mut self, ptr: DevicePtr) -> ExecResult<()>;
}

/// What exporting an allocation for another process gave.
#[derive(Debug)]
pub struct IpcExported {
    /// The driver's handle (`CUipcMemHandle`), [`IPC_HANDLE_LEN`] bytes.
    pub handle: Vec<u8>,
    /// Memory another process can map (the test double's memfd).
    pub shared: Option<OwnedFd>,
}

/// The length of the driver's IPC handles.
pub const IPC_HANDLE_LEN: usize = 64;

/// Copies between host buffers, device memory, peers and registered host memory.
pub trait CopyExec {
    /// `dst` is as long as `src`.
    fn copy_htod(&mut self, dst: DeviceRange, src: &[u8], order: StreamOrder) -> ExecResult<()>;
    /// `src` is as long as `dst`.
    fn copy_dtoh(&mut self, dst: &mut [u8], src: DeviceRange, order: StreamOrder)
        -> ExecResult<()>;
    /// `dst` and `src` are as long as each other.
    fn copy_dtod(
        &mut self,
        dst: DeviceRange,
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()>;
    /// `src` holds `dst`'s rows packed.
    fn copy_2d_htod(&mut self, dst: PitchedRange, src: &[u8], order: StreamOrder)
        -> ExecResult<()>;
    /// Fills `dst` with `src`'s rows packed.
    fn copy_2d_dtoh(
        &mut self,
        dst: &mut [u8],
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()>;
    /// `dst` and `src` have the same width and height.
    fn copy_2d_dtod(
        &mut self,
        dst: PitchedRange,
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()>;
    /// `dst` and `src` are as long as each other.
    fn copy_peer(
        &mut self,
        dst: DeviceRange,
        dst_device: i32,
        src: DeviceRange,
        src_device: i32,
        order: StreamOrder,
    ) -> ExecResult<()>;
    /// Copy between device memory and `[host, host + size)` of this process, which lies
    /// inside one range registered with [`MemoryExec::host_register`] (the caller checks):
    /// the DMA engine reads or writes those pages directly. An asynchronous copy is left
    /// running on `stream`; a synchronous one is complete on return.
    fn copy_registered(
        &mut self,
        device: DeviceRange,
        host: u64,
        to_device: bool,
        order: StreamOrder,
    ) -> ExecResult<()>;
}

/// Copies that overlap the worker's own I/O: queued from its page-locked buffers and
/// into its reply area. The defaults copy at once.
pub trait StagingExec: CopyExec {
    /// Like [`CopyExec::copy_htod`] from the worker's page-locked buffer number
    /// `buffer`, but may return before the copy has read `src`: the worker then leaves
    /// those bytes untouched until [`StagingExec::release_buffer`] has returned for the
    /// buffer, and waits with it before answering a synchronous copy. Stream order is
    /// the copy's as ever. The default copies at once.
    fn copy_htod_queued(
        &mut self,
        dst: DeviceRange,
        src: &[u8],
        order: StreamOrder,
        buffer: usize,
    ) -> ExecResult<()> {
        let _ = buffer;
        self.copy_htod(dst, src, order)
    }

    /// Wait until no copy queued from `buffer` still reads it; an error is the copy's.
    fn release_buffer(&mut self, buffer: usize) -> ExecResult<()> {
        let _ = buffer;
        Ok(())
    }

    /// Like [`CopyExec::copy_dtoh`] into the worker's page-locked reply area, but may
    /// return before `dst` is filled: the worker reads no byte of it before
    /// [`StagingExec::dtoh_landed`] has returned for an end at or past that byte, and
    /// frees or reuses it only after asking for its whole length. The default copies at
    /// once.
    fn copy_dtoh_queued(
        &mut self,
        dst: &mut [u8],
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        self.copy_dtoh(dst, src, order)
    }

    /// Wait until the first `end` bytes of the last queued device-to-host copy have
    /// landed; an error is the copy's.
    fn dtoh_landed(&mut self, end: usize) -> ExecResult<()> {
        let _ = end;
        Ok(())
    }
}

/// What the session learns of a module image before it is loaded (see
/// [`ModuleExec::module_facts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModuleFacts {
    /// Bytes of device memory loading it on the current device sets aside for its
    /// globals and constant banks (the sections of the cubin the driver would pick, see
    /// [`vmcuda_wire::cubin::Cubin::module_data_len`]).
    pub data_len: u64,
    /// Whether its kernels call `printf` ([`vmcuda_wire::cubin::Cubin::prints`]).
    pub prints: bool,
}

/// The facts of a cubin (what an executor reads of the one the driver would load).
pub(crate) fn cubin_facts(elf: &[u8]) -> Result<ModuleFacts, vmcuda_wire::cubin::CubinError> {
    let cubin = vmcuda_wire::cubin::Cubin::parse(elf)?;
    Ok(ModuleFacts {
        data_len: cubin.module_data_len()?,
        prints: cubin.prints(),
    })
}

/// Modules: loading, their globals, kernels and their layouts.
pub trait ModuleExec {
    /// What loading `image` on the current device takes and holds, before it is
    /// loaded: the session charges its data first. A broken image fails as
    /// `load_module` would.
    fn module_facts(&mut self, image: &[u8]) -> ExecResult<ModuleFacts>;
    /// The architecture [`ModuleExec::module_facts`] measures for on the current
    /// device (`major * 10 + minor`): facts kept for it hold for every GPU of it. An
    /// executor without one keeps none.
    fn image_arch(&mut self) -> ExecResult<u32> {
        Err(CudaStatus::ErrorNotSupported)
    }
    /// Load a fatbinary (raw containers). Loading the same bytes twice may return the
    /// same module.
    fn load_module(&mut self, image: &[u8]) -> ExecResult<ExecModule>;
    /// A kernel by mangled name, with its parameter layout.
    fn get_function(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecFunction, Vec<ParamInfo>)>;
    /// A module-scope variable's device address and size.
    fn get_global(&mut self, module: ExecModule, name: &str) -> ExecResult<(DevicePtr, u64, bool)>;
    /// Every kernel the module holds, by mangled name.
    fn function_names(&mut self, module: ExecModule) -> ExecResult<Vec<String>>;
}

/// The most posted launches an executor holds back to send together.
pub const MAX_HELD_LAUNCHES: usize = 32;

/// Kernel attributes, launches and occupancy.
pub trait LaunchExec {
    fn func_attributes(&mut self, function: ExecFunction) -> ExecResult<FuncAttributes>;
    fn func_set_attribute(
        &mut self,
        function: ExecFunction,
        attribute: i32,
        value: i32,
    ) -> ExecResult<()>;
    fn func_set_cache_config(&mut self, function: ExecFunction, config: u32) -> ExecResult<()>;
    /// `params` is the packed parameter buffer laid out as `get_function` said.
    fn launch(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        params: &[u8],
    ) -> ExecResult<()>;
    /// Send the posted launches an executor may hold back to send together (the CUDA
    /// executor's `launch_batch`): the worker calls it before any other call and before
    /// it would wait for one. The first error among them.
    fn send_held_launches(&mut self) -> ExecResult<()> {
        Ok(())
    }
    /// Whether launches are held.
    fn holds_launches(&self) -> bool {
        false
    }
    /// Clusters of `config`'s shape that can be resident at once (its stream unused).
    fn occupancy_max_active_clusters(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32>;
    /// The most blocks a cluster of `config`'s shape could hold (its stream unused).
    fn occupancy_max_potential_cluster_size(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32>;
    fn occupancy_max_active_blocks(
        &mut self,
        function: ExecFunction,
        block_size: i32,
        dynamic_smem: u64,
        flags: u32,
    ) -> ExecResult<i32>;
    fn occupancy_available_dynamic_smem(
        &mut self,
        function: ExecFunction,
        num_blocks: i32,
        block_size: i32,
    ) -> ExecResult<u64>;
}

/// Streams and events.
pub trait StreamExec {
    fn stream_create(&mut self, flags: u32, priority: i32) -> ExecResult<ExecStream>;
    fn stream_destroy(&mut self, stream: ExecStream) -> ExecResult<()>;
    fn stream_synchronize(&mut self, stream: ExecStream) -> ExecResult<()>;
    /// `Err(ErrorNotReady)` while work is pending.
    fn stream_query(&mut self, stream: ExecStream) -> ExecResult<()>;
    fn stream_wait_event(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
        flags: u32,
    ) -> ExecResult<()>;
    /// Set or read a stream attribute: `attr` a `CUstreamAttrID`, the value the 64
    /// bytes of `CUstreamAttrValue`.
    fn stream_set_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()>;
    fn stream_get_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
    ) -> ExecResult<StreamAttrValue>;
    fn stream_copy_attributes(&mut self, dst: ExecStream, src: ExecStream) -> ExecResult<()>;
    fn event_create(&mut self, flags: u32) -> ExecResult<ExecEvent>;
    fn event_destroy(&mut self, event: ExecEvent) -> ExecResult<()>;
    fn event_record(&mut self, event: ExecEvent, stream: ExecStream, flags: u32) -> ExecResult<()>;
    fn event_synchronize(&mut self, event: ExecEvent) -> ExecResult<()>;
    /// Capture in `event` (of the current device) all the work of the current device's
    /// context (`cuCtxRecordEvent`).
    fn ctx_record_event(&mut self, event: ExecEvent) -> ExecResult<()>;
    /// Make the current device's context's later work wait for `event`
    /// (`cuCtxWaitEvent`).
    fn ctx_wait_event(&mut self, event: ExecEvent) -> ExecResult<()>;
    fn event_query(&mut self, event: ExecEvent) -> ExecResult<()>;
    fn event_elapsed_ms(&mut self, start: ExecEvent, end: ExecEvent) -> ExecResult<f32>;
    /// The driver's handle (`CUipcEventHandle`) of an interprocess event.
    fn ipc_export_event(&mut self, event: ExecEvent) -> ExecResult<Vec<u8>>;
    /// Another worker's interprocess event opened here, on the current device.
    fn ipc_open_event(&mut self, handle: &[u8]) -> ExecResult<ExecEvent>;
}
