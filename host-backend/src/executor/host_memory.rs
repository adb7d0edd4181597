//! The host-memory executor: a test double for machines without a GPU.
//!
//! Device memory is ordinary host memory behind fake device addresses, with every
//! access bounds-checked against the allocation it falls in; copies, memsets, streams
//! and events behave as CUDA specifies (work completes in issue order, so every stream
//! is always idle). A kernel launch is checked, **recorded** (name, grid, block, shared
//! memory, argument bytes) and logged, but never run: its results are not computed.
//! GEMMs forwarded from cuBLAS are computed by a CPU reference (`blas`), so forwarding
//! can be checked end to end. It never stands in for a GPU result.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use cudarc::driver::sys::CUdevice_attribute as A;
use serde::Serialize;
use tracing::{info, warn};
use vmcuda_wire::cubin;
use vmcuda_wire::fatbin;
use vmcuda_wire::op::{
    DeviceProperties, DevicePtr, ExecutorKind, FuncAttributes, ParamInfo, PointerAttributes,
};
use vmcuda_wire::CudaStatus;

use crate::policy::GpuSelection;

use super::{
    ExecEvent, ExecFunction, ExecModule, ExecResult, ExecStream, Executor, LaunchConfig, Pitched,
    LEGACY_STREAM, PER_THREAD_STREAM,
};

/// Fake device addresses start here: never null, and in a region Linux leaves empty in
/// ordinary processes, so test logs tell device and host addresses apart at a glance.
pub const ADDRESS_BASE: u64 = 0x2000_0000_0000;
/// Allocations are aligned like cudaMalloc's and separated by an unmapped guard gap,
/// so an overrun lands outside every allocation and is refused.
const ALIGN: u64 = 512;
const GUARD: u64 = 4096;
const PITCH_ALIGN: u64 = 512;
pub const DEFAULT_MEMORY: u64 = 4 << 30;

/// What the test double says about itself everywhere it is asked.
pub const BANNER: &str =
    "HOST-MEMORY TEST EXECUTOR (no GPU): memory, streams and events are real; kernels are recorded, NOT executed";

/// One recorded kernel launch, as written to the launch log.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchRecord {
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: u64,
    /// The packed parameter buffer, hex.
    pub params: String,
    pub param_layout: Vec<(u32, u32)>,
}

struct Module {
    image: Vec<u8>,
    globals: HashMap<String, (DevicePtr, u64)>,
}

struct Function {
    name: String,
    params: Vec<ParamInfo>,
    max_dynamic_smem: i32,
    carveout: i32,
}

struct Event {
    timing: bool,
    recorded_at: Option<Instant>,
}

/// A non-empty pitched region inside the allocation at `start`, from `offset` in it.
struct Region {
    start: u64,
    offset: usize,
    pitch: usize,
    width: usize,
    height: usize,
}

impl Region {
    /// Byte ranges of the rows within the allocation.
    fn rows(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..self.height).map(|row| {
            let from = self.offset + row * self.pitch;
            from..from + self.width
        })
    }
}

mod blas;
mod blaslt;
mod driver;
mod graph;
pub mod reference;

pub struct HostMemoryExecutor {
    total_memory: u64,
    used_memory: u64,
    next_address: u64,
    /// Allocation start -> bytes. Globals of modules live here too.
    memory: BTreeMap<u64, Vec<u8>>,
    modules: HashMap<ExecModule, Module>,
    functions: HashMap<ExecFunction, Function>,
    streams: HashMap<ExecStream, (u32, i32)>,
    events: HashMap<ExecEvent, Event>,
    next_id: u64,
    limits: HashMap<u32, u64>,
    cache_config: u32,
    launch_log: Option<File>,
    /// Host ranges shared by the guest: (start, size).
    host_registered: Vec<(u64, u64)>,
    /// The pretend host devices this guest sees, in its order (one memory serves them
    /// all), and the index of the current one.
    visible: Vec<usize>,
    current: usize,
    /// Live cuBLAS handle ids (see `blas`).
    blas_handles: HashSet<u64>,
    /// Address reservations and physical allocations (see `driver`).
    vmm: driver::HostVmm,
    /// Live cuBLASLt handle ids (see `blaslt`).
    lt_handles: HashSet<u64>,
    /// Captures, graphs and the default pool (see `graph`).
    graphs: graph::HostGraphs,
}

impl HostMemoryExecutor {
    /// `launch_log`: append one JSON line per recorded launch to this file.
    pub fn new(total_memory: u64, launch_log: Option<PathBuf>) -> std::io::Result<Self> {
        let launch_log = match launch_log {
            Some(path) => Some(File::options().create(true).append(true).open(path)?),
            None => None,
        };
        Ok(HostMemoryExecutor {
            total_memory,
            used_memory: 0,
            next_address: ADDRESS_BASE,
            memory: BTreeMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            next_id: 0x1000,
            limits: HashMap::from([
                (0, 1024),    // cudaLimitStackSize
                (1, 1 << 20), // cudaLimitPrintfFifoSize
                (2, 8 << 20), // cudaLimitMallocHeapSize
                (5, 2048),    // cudaLimitDevRuntimePendingLaunchCount
                (6, 32),      // cudaLimitMaxL2FetchGranularity
                (7, 0),       // cudaLimitPersistingL2CacheSize
            ]),
            cache_config: 0,
            launch_log,
            host_registered: Vec::new(),
            visible: vec![0],
            current: 0,
            blas_handles: HashSet::new(),
            vmm: Default::default(),
            lt_handles: HashSet::new(),
            graphs: Default::default(),
        })
    }

    /// Pretend the host has `host_devices` GPUs, of which the guest sees `gpus`.
    pub fn with_devices(
        mut self,
        host_devices: usize,
        gpus: &GpuSelection,
    ) -> Result<Self, String> {
        let uuids: Vec<String> = (0..host_devices)
            .map(|i| super::cuda::format_uuid(&Self::uuid(i)))
            .collect();
        self.visible = gpus.resolve(&uuids)?;
        if self.visible.is_empty() {
            return Err("no device is visible".into());
        }
        Ok(self)
    }

    /// Pretend device `i`'s UUID.
    fn uuid(i: usize) -> [u8; 16] {
        let mut uuid = *b"vmcuda-hostmem-0";
        uuid[15] = b'0' + (i % 10) as u8;
        uuid[14] = b'0' + (i / 10 % 10) as u8;
        uuid
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 16;
        self.next_id
    }

    fn allocate(&mut self, size: u64, init: Option<&[u8]>) -> ExecResult<DevicePtr> {
        let mut bytes = self.take_zeroed(size)?;
        if let Some(init) = init {
            bytes[..init.len()].copy_from_slice(init);
        }
        let ptr = self.next_address;
        self.next_address = align_up(ptr + size.max(1) + GUARD, ALIGN);
        self.memory.insert(ptr, bytes);
        Ok(ptr)
    }

    /// `size` zeroed bytes of this executor's memory, counted as used: out of memory
    /// past the executor's total, or when the process cannot get them.
    fn take_zeroed(&mut self, size: u64) -> ExecResult<Vec<u8>> {
        let fits = self
            .used_memory
            .checked_add(size)
            .is_some_and(|u| u <= self.total_memory);
        if !fits {
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size as usize)
            .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
        bytes.resize(size as usize, 0);
        self.used_memory += size;
        Ok(bytes)
    }

    /// The allocation holding `[ptr, ptr + len)` and the offset of `ptr` in it.
    fn locate(&self, ptr: DevicePtr, len: u64) -> ExecResult<(u64, usize)> {
        let (start, bytes) = self
            .memory
            .range(..=ptr)
            .next_back()
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let offset = ptr - start;
        let end = offset
            .checked_add(len)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if end > bytes.len() as u64 || (len == 0 && offset > bytes.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((*start, offset as usize))
    }

    fn slice(&self, ptr: DevicePtr, len: u64) -> ExecResult<&[u8]> {
        let (start, off) = self.locate(ptr, len)?;
        Ok(&self.memory[&start][off..off + len as usize])
    }

    fn slice_mut(&mut self, ptr: DevicePtr, len: u64) -> ExecResult<&mut [u8]> {
        let (start, off) = self.locate(ptr, len)?;
        Ok(&mut self.allocation_mut(start)[off..off + len as usize])
    }

    /// The bytes of the allocation starting at `start`, which `locate` just found.
    fn allocation_mut(&mut self, start: u64) -> &mut [u8] {
        self.memory
            .get_mut(&start)
            .expect("located allocation exists")
    }

    fn check_stream(&self, stream: ExecStream) -> ExecResult<()> {
        if stream == LEGACY_STREAM
            || stream == PER_THREAD_STREAM
            || self.streams.contains_key(&stream)
        {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }

    /// Where a pitched region (`height` rows of `width` bytes, `pitch` apart) lies:
    /// `None` when it is empty (zero width or height: a no-op, as in CUDA), else the one
    /// allocation holding all of it. The region is checked as a whole before a byte
    /// moves, so a bad one fails without a partial copy, with no arithmetic overflow,
    /// and in one lookup however many rows it claims.
    fn pitched(&self, p: Pitched, width: u64, height: u64) -> ExecResult<Option<Region>> {
        if width > p.pitch && height > 1 {
            return Err(CudaStatus::ErrorInvalidPitchValue);
        }
        if width == 0 || height == 0 {
            return Ok(None);
        }
        let span = p
            .pitch
            .checked_mul(height - 1)
            .and_then(|s| s.checked_add(width))
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let (start, offset) = self.locate(p.ptr, span)?;
        // All of it fits in one allocation, so every number below fits in a usize.
        Ok(Some(Region {
            start,
            offset,
            pitch: p.pitch as usize,
            width: width as usize,
            height: height as usize,
        }))
    }

    fn function(&self, f: ExecFunction) -> ExecResult<&Function> {
        self.functions
            .get(&f)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }

    fn properties() -> DeviceProperties {
        // An H100-class shape, so programs that size launches from properties run.
        let attributes = [
            (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
            (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152),
            (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536),
            (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
            (A::CU_DEVICE_ATTRIBUTE_MAX_PITCH, i32::MAX),
            (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
            (A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_980_000),
            (A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512),
            (A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1),
            (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4),
            (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
            (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
            (A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3_201_000),
            (A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120),
            (A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 << 20),
            (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
            (A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2),
            (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
            (A::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32),
            (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
            (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
            (A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                233_472,
            ),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
                65536,
            ),
            (A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                232_448,
            ),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32),
            (
                A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                1024,
            ),
            (A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1),
        ];
        DeviceProperties {
            name: "vmcuda host-memory test executor (no GPU)".into(),
            uuid: *b"vmcuda-hostmem-0",
            luid: [0; 8],
            luid_device_node_mask: 0,
            total_global_mem: DEFAULT_MEMORY,
            // Every attribute a CUDA 13 driver answers; the ones not listed are 0.
            attributes: (1..A::CU_DEVICE_ATTRIBUTE_MAX as u32)
                .map(|n| {
                    (
                        n,
                        attributes
                            .iter()
                            .find(|(a, _)| *a as u32 == n)
                            .map_or(0, |(_, v)| *v),
                    )
                })
                .collect(),
        }
    }

    fn check_launch(&self, config: &LaunchConfig<'_>, function: &Function) -> ExecResult<()> {
        let [bx, by, bz] = config.block;
        let [gx, gy, gz] = config.grid;
        let threads = bx as u64 * by as u64 * bz as u64;
        if threads == 0 || threads > 1024 || bx > 1024 || by > 1024 || bz > 64 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > i32::MAX as u32 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let smem_limit = 49152.max(function.max_dynamic_smem as u32);
        if config.shared_mem > smem_limit {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_stream(config.stream)
    }
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Executor for HostMemoryExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::HostMemory
    }
    fn banner(&self) -> String {
        BANNER.into()
    }
    fn driver_version(&self) -> i32 {
        vmcuda_wire::handshake::RUNTIME_VERSION
    }
    fn device_count(&self) -> i32 {
        self.visible.len() as i32
    }
    fn set_device(&mut self, device: i32) -> ExecResult<()> {
        self.current = usize::try_from(device)
            .ok()
            .filter(|&d| d < self.visible.len())
            .ok_or(CudaStatus::ErrorInvalidDevice)?;
        Ok(())
    }
    fn device_properties(&mut self, device: i32) -> ExecResult<DeviceProperties> {
        let previous = self.current;
        self.set_device(device)?;
        let host_index = self.visible[self.current];
        self.current = previous;
        let mut p = Self::properties();
        p.total_global_mem = self.total_memory;
        if host_index != 0 {
            p.name = format!("{} #{host_index}", p.name);
        }
        p.uuid = Self::uuid(host_index);
        Ok(p)
    }
    fn synchronize(&mut self) -> ExecResult<()> {
        Ok(())
    }
    fn device_reset(&mut self) -> ExecResult<()> {
        self.memory.clear();
        self.used_memory = 0;
        self.streams.clear();
        self.events.clear();
        self.graphs.clear();
        for module in self.modules.values_mut() {
            module.globals.clear();
        }
        Ok(())
    }
    fn get_limit(&mut self, limit: u32) -> ExecResult<u64> {
        self.limits
            .get(&limit)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidValue)
    }
    fn set_limit(&mut self, limit: u32, value: u64) -> ExecResult<()> {
        match self.limits.get_mut(&limit) {
            Some(v) => {
                *v = value;
                Ok(())
            }
            None => Err(CudaStatus::ErrorInvalidValue),
        }
    }
    fn get_cache_config(&mut self) -> ExecResult<u32> {
        Ok(self.cache_config)
    }
    fn set_cache_config(&mut self, config: u32) -> ExecResult<()> {
        if config > 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.cache_config = config;
        Ok(())
    }
    fn stream_priority_range(&mut self) -> ExecResult<(i32, i32)> {
        Ok((0, -5))
    }
    fn can_access_peer(&mut self, device: i32, peer: i32) -> ExecResult<bool> {
        self.set_device(device)?;
        self.set_device(peer)?;
        // One device: there is no peer, and a device is not its own peer.
        Ok(false)
    }
    fn enable_peer_access(&mut self, peer: i32, _flags: u32) -> ExecResult<()> {
        self.set_device(peer)?;
        Err(CudaStatus::ErrorInvalidDevice)
    }
    fn disable_peer_access(&mut self, peer: i32) -> ExecResult<()> {
        self.set_device(peer)?;
        Err(CudaStatus::ErrorPeerAccessNotEnabled)
    }
    fn mem_info(&mut self) -> ExecResult<(u64, u64)> {
        Ok((self.total_memory - self.used_memory, self.total_memory))
    }

    fn alloc(&mut self, size: u64) -> ExecResult<DevicePtr> {
        if size == 0 {
            return Ok(0);
        }
        self.allocate(size, None)
    }
    fn free(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        let bytes = self
            .memory
            .remove(&ptr)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.used_memory -= bytes.len() as u64;
        self.pool_forget(ptr);
        Ok(())
    }
    fn alloc_pitch(&mut self, width: u64, height: u64) -> ExecResult<(DevicePtr, u64)> {
        if width == 0 || height == 0 {
            return Ok((0, 0));
        }
        let pitch = align_up(width, PITCH_ALIGN);
        let size = pitch
            .checked_mul(height)
            .ok_or(CudaStatus::ErrorMemoryAllocation)?;
        Ok((self.allocate(size, None)?, pitch))
    }
    fn copy_htod(
        &mut self,
        dst: DevicePtr,
        src: &[u8],
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        self.slice_mut(dst, src.len() as u64)?.copy_from_slice(src);
        Ok(())
    }
    fn copy_dtoh(
        &mut self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        dst.copy_from_slice(self.slice(src, dst.len() as u64)?);
        Ok(())
    }
    fn copy_dtod(
        &mut self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.slice(src, size)?;
        self.slice(dst, size)?;
        if self.record(stream, || graph::Recorded::CopyDtoD { dst, src, size }) {
            return Ok(());
        }
        let bytes = self.slice(src, size)?.to_vec();
        self.slice_mut(dst, size)?.copy_from_slice(&bytes);
        Ok(())
    }
    fn copy_2d_htod(
        &mut self,
        dst: Pitched,
        src: &[u8],
        width: u64,
        height: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        if width.checked_mul(height) != Some(src.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let Some(region) = self.pitched(dst, width, height)? else {
            return Ok(());
        };
        let bytes = self.allocation_mut(region.start);
        for (row, packed) in region.rows().zip(src.chunks_exact(region.width)) {
            bytes[row].copy_from_slice(packed);
        }
        Ok(())
    }
    fn copy_2d_dtoh(
        &mut self,
        dst: &mut [u8],
        src: Pitched,
        width: u64,
        height: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        if width.checked_mul(height) != Some(dst.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let Some(region) = self.pitched(src, width, height)? else {
            return Ok(());
        };
        let bytes = &self.memory[&region.start];
        for (row, packed) in region.rows().zip(dst.chunks_exact_mut(region.width)) {
            packed.copy_from_slice(&bytes[row]);
        }
        Ok(())
    }
    fn copy_2d_dtod(
        &mut self,
        dst: Pitched,
        src: Pitched,
        width: u64,
        height: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        // Both regions are checked before anything is allocated or copied: the staging
        // buffer is sized by the guest's numbers only once they fit in real allocations.
        let (Some(from), Some(to)) = (
            self.pitched(src, width, height)?,
            self.pitched(dst, width, height)?,
        ) else {
            return Ok(());
        };
        let op = || graph::Recorded::Copy2DDtoD {
            dst,
            src,
            width,
            height,
        };
        if self.record(stream, op) {
            return Ok(());
        }
        // Staged, so overlapping regions copy as if through a temporary, like CUDA.
        let mut packed = Vec::with_capacity(from.width * from.height);
        let bytes = &self.memory[&from.start];
        for row in from.rows() {
            packed.extend_from_slice(&bytes[row]);
        }
        let bytes = self.allocation_mut(to.start);
        for (row, staged) in to.rows().zip(packed.chunks_exact(to.width)) {
            bytes[row].copy_from_slice(staged);
        }
        Ok(())
    }
    fn memset(
        &mut self,
        dst: DevicePtr,
        value: u8,
        size: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.slice(dst, size)?;
        if self.record(stream, || graph::Recorded::Memset { dst, value, size }) {
            return Ok(());
        }
        self.slice_mut(dst, size)?.fill(value);
        Ok(())
    }
    fn zero_fill(&mut self, dst: DevicePtr, size: u64) -> ExecResult<()> {
        self.slice_mut(dst, size)?.fill(0);
        Ok(())
    }
    fn memset_2d(
        &mut self,
        dst: Pitched,
        value: u8,
        width: u64,
        height: u64,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let Some(region) = self.pitched(dst, width, height)? else {
            return Ok(());
        };
        let op = || graph::Recorded::Memset2D {
            dst,
            value,
            width,
            height,
        };
        if self.record(stream, op) {
            return Ok(());
        }
        let bytes = self.allocation_mut(region.start);
        for row in region.rows() {
            bytes[row].fill(value);
        }
        Ok(())
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
        self.set_device(dst_device)?;
        self.set_device(src_device)?;
        self.copy_dtod(dst, src, size, stream, is_async)
    }
    fn pointer_attributes(&mut self, ptr: DevicePtr) -> ExecResult<PointerAttributes> {
        Ok(match self.locate(ptr, 0) {
            Ok(_) => PointerAttributes {
                memory_type: 2,
                device: 0,
                device_pointer: ptr,
            },
            Err(_) => PointerAttributes {
                memory_type: 0,
                device: -2,
                device_pointer: 0,
            },
        })
    }

    fn host_register(&mut self, ptr: u64, size: u64) -> ExecResult<DevicePtr> {
        // No GPU to map it for: the range is only remembered, and its device pointer
        // is the host pointer, as under UVA.
        if self
            .host_registered
            .iter()
            .any(|(p, s)| ptr < p + s && *p < ptr + size)
        {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        self.host_registered.push((ptr, size));
        Ok(ptr)
    }
    fn host_unregister(&mut self, ptr: u64) -> ExecResult<()> {
        let before = self.host_registered.len();
        self.host_registered.retain(|(p, _)| *p != ptr);
        if self.host_registered.len() == before {
            return Err(CudaStatus::ErrorHostMemoryNotRegistered);
        }
        Ok(())
    }
    fn copy_registered(
        &mut self,
        device: DevicePtr,
        host: u64,
        size: u64,
        to_device: bool,
        stream: ExecStream,
        _is_async: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let end = host
            .checked_add(size)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if !self
            .host_registered
            .iter()
            .any(|(p, s)| host >= *p && end <= p + s)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let len = usize::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        self.slice(device, size)?;
        let op = || graph::Recorded::CopyRegistered {
            device,
            host,
            size,
            to_device,
        };
        if self.record(stream, op) {
            return Ok(());
        }
        let host = host as *mut u8;
        if to_device {
            let dst = self.slice_mut(device, size)?;
            // SAFETY: `[host, host + len)` lies inside a range registered with this
            // executor, which the session keeps mapped until host_unregister; it is
            // shared guest memory, never this executor's own (`dst`), so they do not
            // overlap. Like a DMA engine, this reads whatever the guest has there now.
            unsafe { std::ptr::copy_nonoverlapping(host, dst.as_mut_ptr(), len) };
        } else {
            let src = self.slice(device, size)?;
            // SAFETY: as above, writing the guest's shared pages.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), host, len) };
        }
        Ok(())
    }

    fn load_module(&mut self, image: &[u8]) -> ExecResult<ExecModule> {
        // Parse now so a broken image fails here, as cuLibraryLoadData would. PTX text
        // (which the real driver compiles) lands here too: it cannot be run or even
        // read for kernels without the driver, so it is refused as an invalid image.
        module_cubin(image, |_| Ok(())).map_err(|e| {
            warn!("module image refused: {e}");
            CudaStatus::ErrorInvalidKernelImage
        })?;
        if let Some((id, _)) = self.modules.iter().find(|(_, m)| m.image == image) {
            return Ok(*id);
        }
        let id = self.fresh_id();
        self.modules.insert(
            id,
            Module {
                image: image.to_vec(),
                globals: HashMap::new(),
            },
        );
        Ok(id)
    }
    fn get_function(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecFunction, Vec<ParamInfo>)> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let params = module_cubin(&m.image, |elf| cubin::kernel_params(elf, name))
            .map_err(|_| CudaStatus::ErrorInvalidDeviceFunction)?;
        let params: Vec<ParamInfo> = params
            .into_iter()
            .map(|p| ParamInfo {
                offset: p.offset,
                size: p.size,
            })
            .collect();
        if let Some((id, _)) = self.functions.iter().find(|(_, f)| f.name == name) {
            return Ok((*id, params));
        }
        let id = self.fresh_id();
        self.functions.insert(
            id,
            Function {
                name: name.into(),
                params: params.clone(),
                max_dynamic_smem: 49152,
                carveout: -1,
            },
        );
        Ok((id, params))
    }
    fn get_global(&mut self, module: ExecModule, name: &str) -> ExecResult<(DevicePtr, u64)> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        if let Some(g) = m.globals.get(name) {
            return Ok(*g);
        }
        let var = module_cubin(&m.image, |elf| cubin::global(elf, name))
            .ok()
            .flatten()
            .ok_or(CudaStatus::ErrorInvalidSymbol)?;
        let ptr = self.allocate(var.size, Some(&var.init))?;
        let m = self.modules.get_mut(&module).expect("module checked above");
        m.globals.insert(name.into(), (ptr, var.size));
        Ok((ptr, var.size))
    }
    fn func_attributes(&mut self, function: ExecFunction) -> ExecResult<FuncAttributes> {
        let f = self.function(function)?;
        Ok(FuncAttributes {
            max_threads_per_block: 1024,
            ptx_version: 90,
            binary_version: 90,
            max_dynamic_shared_size_bytes: f.max_dynamic_smem,
            preferred_shmem_carveout: f.carveout,
            ..Default::default()
        })
    }
    fn func_set_attribute(
        &mut self,
        function: ExecFunction,
        attribute: i32,
        value: i32,
    ) -> ExecResult<()> {
        let f = self
            .functions
            .get_mut(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        match attribute {
            8 if (0..=232_448).contains(&value) => f.max_dynamic_smem = value,
            9 if (-1..=100).contains(&value) => f.carveout = value,
            10..=15 => {}
            _ => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(())
    }
    fn func_set_cache_config(&mut self, function: ExecFunction, config: u32) -> ExecResult<()> {
        self.function(function)?;
        if config > 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }
    fn launch(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        params: &[u8],
    ) -> ExecResult<()> {
        self.check_launch(config, self.function(function)?)?;
        // A field borrow (not `self.function`), so the launch log can be written below.
        let f = self
            .functions
            .get(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        let expected = f.params.last().map_or(0, |p| (p.offset + p.size) as usize);
        if params.len() != expected {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let op = || graph::Recorded::Launch {
            function,
            grid: config.grid,
            block: config.block,
            shared_mem: config.shared_mem,
            attributes: config.attributes.to_vec(),
            params: params.to_vec(),
        };
        if self.record(config.stream, op) {
            return Ok(());
        }
        let f = self
            .functions
            .get(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        info!(
            kernel = %f.name, grid = ?config.grid, block = ?config.block,
            "kernel launch recorded, NOT executed (host-memory test executor)"
        );
        if let Some(log) = &mut self.launch_log {
            let record = LaunchRecord {
                kernel: f.name.clone(),
                grid: config.grid,
                block: config.block,
                shared_mem: config.shared_mem,
                stream: config.stream,
                params: hex(params),
                param_layout: f.params.iter().map(|p| (p.offset, p.size)).collect(),
            };
            if let Err(e) = append_record(log, &record) {
                warn!("cannot write launch log: {e}");
            }
        }
        Ok(())
    }
    fn occupancy_max_active_blocks(
        &mut self,
        function: ExecFunction,
        block_size: i32,
        dynamic_smem: u64,
        _flags: u32,
    ) -> ExecResult<i32> {
        self.function(function)?;
        if block_size <= 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let by_threads = 2048 / block_size.min(1024);
        let by_smem = if dynamic_smem == 0 {
            32
        } else {
            (233_472 / dynamic_smem.max(1)) as i32
        };
        Ok(by_threads.min(by_smem).min(32))
    }
    fn occupancy_available_dynamic_smem(
        &mut self,
        function: ExecFunction,
        num_blocks: i32,
        block_size: i32,
    ) -> ExecResult<u64> {
        self.function(function)?;
        if num_blocks <= 0 || block_size <= 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((233_472 / num_blocks as u64)
            .saturating_sub(1024)
            .min(232_448))
    }

    fn stream_create(&mut self, flags: u32, priority: i32) -> ExecResult<ExecStream> {
        if flags > 1 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        // Priorities are clamped into the advertised range, as CUDA does.
        self.streams.insert(id, (flags, priority.clamp(-5, 0)));
        Ok(id)
    }
    fn stream_destroy(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.streams
            .remove(&stream)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }
    fn stream_synchronize(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)
    }
    fn stream_query(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)
    }
    fn stream_wait_event(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if !self.events.contains_key(&event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.wait_event_in_capture(stream, event)
    }
    fn event_create(&mut self, flags: u32) -> ExecResult<ExecEvent> {
        if flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        self.events.insert(
            id,
            Event {
                timing: flags & 2 == 0,
                recorded_at: None,
            },
        );
        Ok(id)
    }
    fn event_destroy(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.events
            .remove(&event)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }
    fn event_record(
        &mut self,
        event: ExecEvent,
        stream: ExecStream,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let e = self
            .events
            .get_mut(&event)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        e.recorded_at = Some(Instant::now());
        self.record_event_in_capture(event, stream);
        Ok(())
    }
    fn event_synchronize(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.events
            .get(&event)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }
    fn event_query(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.event_synchronize(event)
    }
    fn event_elapsed_ms(&mut self, start: ExecEvent, end: ExecEvent) -> ExecResult<f32> {
        let (a, b) = match (self.events.get(&start), self.events.get(&end)) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(CudaStatus::ErrorInvalidResourceHandle),
        };
        if !a.timing || !b.timing {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        match (a.recorded_at, b.recorded_at) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f32() * 1000.0),
            _ => Err(CudaStatus::ErrorInvalidResourceHandle),
        }
    }
}

/// Append one record as one JSON line in a single write. Every worker appends to the
/// same log (O_APPEND): one write(2) per line keeps lines whole, where `writeln!`
/// issues two (the text, then the newline) and concurrent workers interleave them.
fn append_record(log: &mut File, record: &LaunchRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    log.write_all(&line)
}

/// Run `f` on the module's first uncompressed ELF cubin.
fn module_cubin<T>(
    image: &[u8],
    f: impl FnOnce(&[u8]) -> Result<T, cubin::CubinError>,
) -> Result<T, String> {
    // A lone ELF cubin (what cuModuleLoadData also takes) is its own cubin.
    if image.starts_with(b"\x7fELF") {
        return f(image).map_err(|e| e.to_string());
    }
    let parsed = fatbin::parse(image).map_err(|e| e.to_string())?;
    let elf = cubin::find_cubin(&parsed).map_err(|e| e.to_string())?;
    f(elf).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers are separate processes, each with its own O_APPEND descriptor of the
    /// log; threads with their own descriptors race the same way.
    #[test]
    fn concurrent_appenders_keep_launch_log_lines_whole() {
        const WRITERS: usize = 4;
        const RECORDS: usize = 3000;
        let path = std::env::temp_dir().join(format!("vmcuda-launch-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut log = File::options()
                        .create(true)
                        .append(true)
                        .open(&path)
                        .unwrap();
                    for i in 0..RECORDS {
                        let record = LaunchRecord {
                            kernel: format!("k{w}"),
                            grid: [i as u32, 1, 1],
                            block: [32, 1, 1],
                            shared_mem: 0,
                            stream: 0,
                            params: "ab".repeat(64),
                            param_layout: vec![(0, 8)],
                        };
                        append_record(&mut log, &record).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let mut per_writer = [0usize; WRITERS];
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("torn launch log line ({e}): {line}"));
            let w: usize = v["kernel"].as_str().unwrap()[1..].parse().unwrap();
            per_writer[w] += 1;
        }
        assert_eq!(per_writer, [RECORDS; WRITERS]);
    }

    const S: ExecStream = LEGACY_STREAM;

    fn exec() -> HostMemoryExecutor {
        HostMemoryExecutor::new(64 << 20, None).unwrap()
    }

    fn at(ptr: DevicePtr, pitch: u64) -> Pitched {
        Pitched { ptr, pitch }
    }

    #[test]
    fn pitched_copies_and_memsets_land_row_by_row() {
        let mut e = exec();
        let p = e.alloc(4096).unwrap();
        e.memset(p, 0, 4096, S, false).unwrap();
        e.copy_2d_htod(at(p, 16), b"abcdef", 3, 2, S, false)
            .unwrap();
        e.memset_2d(at(p + 3, 16), b'-', 1, 2, S, false).unwrap();
        let mut out = [0u8; 8];
        e.copy_2d_dtoh(&mut out, at(p, 16), 4, 2, S, false).unwrap();
        assert_eq!(&out, b"abc-def-");
        // Overlapping regions copy as if through a temporary.
        e.copy_2d_dtod(at(p + 1, 16), at(p, 16), 4, 2, S, false)
            .unwrap();
        e.copy_2d_dtoh(&mut out, at(p, 16), 4, 2, S, false).unwrap();
        assert_eq!(&out, b"aabcddef");
    }

    #[test]
    fn a_region_past_its_allocation_fails_before_any_byte_moves() {
        let mut e = exec();
        let p = e.alloc(64).unwrap();
        e.memset(p, 0, 64, S, false).unwrap();
        // Rows 0..3 fit, row 4 does not.
        assert_eq!(
            e.memset_2d(at(p, 16), 9, 8, 5, S, false),
            Err(CudaStatus::ErrorInvalidValue)
        );
        let mut out = [1u8; 64];
        e.copy_dtoh(&mut out, p, S, false).unwrap();
        assert_eq!(out, [0u8; 64], "nothing written");
    }

    #[test]
    fn absurd_pitched_regions_get_errors_not_allocations_or_endless_loops() {
        // Found by the dispatch fuzz target: copy_2d_dtod sized its staging buffer from
        // the guest's width and height before checking them, so a 2D copy of 2^54 bytes
        // aborted the worker on a failed allocation.
        let mut e = exec();
        let p = e.alloc(4096).unwrap();
        let huge = 1u64 << 27;
        assert_eq!(
            e.copy_2d_dtod(at(p, huge), at(p, huge), huge, huge, S, false),
            Err(CudaStatus::ErrorInvalidValue)
        );
        // Row addresses that overflow u64.
        assert_eq!(
            e.memset_2d(at(p, u64::MAX), 0, 1, 3, S, false),
            Err(CudaStatus::ErrorInvalidValue)
        );
        let mut out = [0u8; 2];
        assert_eq!(
            e.copy_2d_dtoh(&mut out, at(u64::MAX, 1), 1, 2, S, false),
            Err(CudaStatus::ErrorInvalidValue)
        );
        // Empty regions are no-ops however many rows they claim (they used to loop
        // over every row).
        e.memset_2d(at(p, 0), 0, 0, u64::MAX, S, false).unwrap();
        e.copy_2d_dtod(at(p, 0), at(p, 0), 0, u64::MAX, S, false)
            .unwrap();
        e.copy_2d_htod(at(p, 0), &[], 0, u64::MAX, S, false)
            .unwrap();
        // width * height overflowing is a mismatch with the data, not a panic.
        assert_eq!(
            e.copy_2d_htod(at(p, 1 << 33), &[0; 4], 1 << 32, 1 << 32, S, false),
            Err(CudaStatus::ErrorInvalidValue)
        );
    }
}
