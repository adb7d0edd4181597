//! The host-memory executor: a test double for machines without a GPU.
//!
//! Device memory is ordinary host memory behind fake device addresses, with every
//! access bounds-checked against the allocation it falls in; copies, memsets, streams
//! and events behave as CUDA specifies (work completes in issue order, so every stream
//! is always idle). A kernel launch is checked, **recorded** (name, grid, block, shared
//! memory, argument bytes) and logged, but never run: its results are not computed.
//! It never stands in for a GPU result.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use vmcuda_wire::cubin;
use vmcuda_wire::fatbin;
use vmcuda_wire::op::{DevicePtr, ExecutorKind, ParamInfo};

use crate::policy::GpuSelection;

use super::{allocation_footprint, ExecEvent, ExecFunction, ExecModule, ExecStream, Executor};
use crate::executor::StagingExec;

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
    /// The image's cubin, found and decompressed once at load: kernel and global
    /// lookups read it, and a fatbinary of thousands of kernels (a framework's) must not
    /// be parsed and decompressed again for each of them.
    cubin: ModuleCubin,
    /// Its kernels' parameter layouts, read from the cubin in one pass at the first
    /// lookup (a framework looks up thousands; one scan of the cubin each was slow).
    kernels: std::cell::OnceCell<KernelTable>,
    globals: HashMap<String, (DevicePtr, u64, bool)>,
}

/// A cubin's kernels by name, each with its parameter layout (or why it has none).
type KernelTable = HashMap<String, Result<Vec<cubin::ParamInfo>, cubin::CubinError>>;

/// Where a module's cubin is: the image itself (a lone ELF cubin), or a copy taken out
/// of its fatbinary.
enum ModuleCubin {
    Image,
    Extracted(Vec<u8>),
}

impl Module {
    /// The module of `image`, with `extracted`, its cubin if the caller has already
    /// taken it out of the fatbinary.
    fn new(image: &[u8], extracted: Option<Vec<u8>>) -> Result<Module, String> {
        let cubin = match extracted {
            _ if is_elf(image) => ModuleCubin::Image,
            Some(elf) => ModuleCubin::Extracted(elf),
            None => ModuleCubin::Extracted(module_cubin(image, |elf| Ok(elf.to_vec()))?),
        };
        Ok(Module {
            image: image.to_vec(),
            cubin,
            kernels: std::cell::OnceCell::new(),
            globals: HashMap::new(),
        })
    }

    /// The cubin's kernels and their parameter layouts.
    fn kernels(&self) -> Result<&KernelTable, cubin::CubinError> {
        if let Some(table) = self.kernels.get() {
            return Ok(table);
        }
        let table = cubin::Cubin::parse(self.cubin())?.kernel_table();
        Ok(self.kernels.get_or_init(|| table))
    }

    fn cubin(&self) -> &[u8] {
        match &self.cubin {
            ModuleCubin::Image => &self.image,
            ModuleCubin::Extracted(elf) => elf,
        }
    }
}

fn is_elf(image: &[u8]) -> bool {
    image.starts_with(b"\x7fELF")
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

mod array;
mod copy;
mod device;
mod driver;
mod graph;
mod launch;
mod memory;
mod module;
mod pass_through;
mod shared;
mod stream;

pub struct HostMemoryExecutor {
    total_memory: u64,
    used_memory: u64,
    next_address: u64,
    /// Allocation start -> bytes. Globals of modules live here too. Each takes
    /// [`allocation_footprint`] of its length from `total_memory`, as on a GPU.
    memory: BTreeMap<u64, shared::Bytes>,
    /// Allocations another worker exported and this one mapped (CUDA IPC): in
    /// `memory`, never counted in `used_memory` (the exporter's device holds them).
    ipc_imports: HashSet<DevicePtr>,
    /// Allocations of another worker's pool mapped here through an imported pool
    /// (`pool_import_pointer_from`): in `memory`, not counted in `used_memory` either,
    /// but freed by the guest as its own allocations are.
    pool_pointer_imports: HashSet<DevicePtr>,
    /// The pretend device (index into `visible`) each allocation, stream and event
    /// was made on: a device reset destroys those of the current device only.
    device_of: HashMap<u64, usize>,
    modules: HashMap<ExecModule, Module>,
    functions: HashMap<ExecFunction, Function>,
    /// The last image measured for its data (`module_facts`, which the session asks
    /// right before loading it) with its cubin, so that a load decompresses it no
    /// second time.
    measured: Option<(Vec<u8>, Vec<u8>)>,
    /// Function handles by kernel name: a kernel looked up again gets its handle.
    function_ids: HashMap<String, ExecFunction>,
    streams: HashMap<ExecStream, (u32, i32)>,
    /// Stream attributes set, by stream and attribute id.
    stream_attributes: HashMap<(ExecStream, u32), [u8; super::STREAM_ATTR_LEN]>,
    events: HashMap<ExecEvent, Event>,
    next_id: u64,
    limits: HashMap<u32, u64>,
    cache_config: u32,
    launch_log: Option<File>,
    /// Posted launches held before they reach the launch log, as the CUDA executor
    /// holds them before they reach the GPU (its `launch_batch`): so the worker's duty
    /// to send them is tested without one. Not with `VMCUDA_BATCH_LAUNCHES=0`.
    held: Option<Vec<LaunchRecord>>,
    /// Host ranges shared by the guest: (start, size).
    host_registered: Vec<(u64, u64)>,
    /// The pretend host devices this guest sees, in its order (one memory serves them
    /// all), and the index of the current one.
    visible: Vec<usize>,
    current: usize,
    /// Address reservations and physical allocations (see `driver`).
    vmm: driver::HostVmm,
    /// Captures, graphs and the default pool (see `graph`).
    graphs: graph::HostGraphs,
    arrays: array::HostArrays,
    /// The ids of the modules' texture and surface references (module, name,
    /// surface).
    reference_ids: HashMap<(ExecModule, String, bool), u64>,
    /// Where to note the memory still held when this executor is dropped (a session
    /// owns its executor to the end: tests read what it left behind here).
    #[cfg(test)]
    held_at_drop: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Whether imported pools make allocations: a test's stand-in for a driver that
    /// allowed them (CUDA's rule forbids it, as this executor does otherwise).
    #[cfg(test)]
    imported_pools_allocate: bool,
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
            ipc_imports: HashSet::new(),
            pool_pointer_imports: HashSet::new(),
            device_of: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            measured: None,
            function_ids: HashMap::new(),
            streams: HashMap::new(),
            stream_attributes: HashMap::new(),
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
            held: std::env::var("VMCUDA_BATCH_LAUNCHES")
                .map_or(true, |v| v != "0")
                .then(Vec::new),
            host_registered: Vec::new(),
            visible: vec![0],
            current: 0,
            vmm: Default::default(),
            graphs: Default::default(),
            arrays: Default::default(),
            reference_ids: HashMap::new(),
            #[cfg(test)]
            held_at_drop: None,
            #[cfg(test)]
            imported_pools_allocate: false,
        })
    }

    /// Let imported pools make allocations, as a driver might that did not follow
    /// CUDA's rule: what the session refuses itself, whatever its executor allows.
    #[cfg(test)]
    pub(crate) fn letting_imported_pools_allocate(mut self) -> Self {
        self.imported_pools_allocate = true;
        self
    }

    /// Whether imported pools make allocations (never, outside tests).
    pub(super) fn imported_pools_allocate(&self) -> bool {
        #[cfg(test)]
        return self.imported_pools_allocate;
        #[cfg(not(test))]
        false
    }

    /// Note in `cell` the memory this executor still holds when it is dropped.
    #[cfg(test)]
    pub(crate) fn report_held_at_drop(
        mut self,
        cell: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        self.held_at_drop = Some(cell);
        self
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
}

/// Append one record as one JSON line in a single write. Every worker appends to the
/// same log (O_APPEND): one write(2) per line keeps lines whole, where `writeln!`
/// issues two (the text, then the newline) and concurrent workers interleave them.
fn append_record(log: &mut File, record: &LaunchRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    log.write_all(&line)
}

/// Run `f` on the module's cubin: the image itself if it is one, else the fatbinary's
/// highest-architecture cubin, decompressed if need be.
fn module_cubin<T>(
    image: &[u8],
    f: impl FnOnce(&[u8]) -> Result<T, cubin::CubinError>,
) -> Result<T, String> {
    // A lone ELF cubin (what cuModuleLoadData also takes) is its own cubin.
    if is_elf(image) {
        return f(image).map_err(|e| e.to_string());
    }
    let parsed = fatbin::parse(image).map_err(|e| e.to_string())?;
    let elf = cubin::find_cubin(&parsed).map_err(|e| e.to_string())?;
    f(&elf).map_err(|e| e.to_string())
}

#[cfg(test)]
impl Drop for HostMemoryExecutor {
    fn drop(&mut self) {
        if let Some(cell) = &self.held_at_drop {
            cell.store(self.used_memory, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;

impl StagingExec for HostMemoryExecutor {}
