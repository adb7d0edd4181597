//! Stream capture and graphs on the host-memory test double.
//!
//! While a stream captures, the operations issued to it (memsets, device-to-device
//! and shared-memory copies, kernel launches) are checked as usual and then recorded
//! as graph nodes instead of run; each node depends on what its stream had issued in
//! the capture before it, and an event recorded in a capture carries that frontier to
//! a stream that waits for it (joining that stream to the capture), as in CUDA. A graph
//! launch replays the nodes in capture order (a valid order of their dependencies) on
//! the launch stream; kernels are still only recorded, never run.
//!
//! A stream-ordered allocation inside a capture is an allocation node: the memory is
//! made at once (its address is fixed from then on, as the driver's is) and every
//! launch hands it out again filled with [`GRAPH_MEMORY_FILL`], as the driver hands a
//! graph's memory out with whatever was in it. The memory is kept for as long as
//! anything holds it: the capture or graph whose node made it, an executable graph
//! made of that graph, or the allocation being live (a launch of a graph that does not
//! free it itself made it live, and neither `cudaFree`, `cudaFreeAsync` nor a launch
//! of another graph's free node has ended it since). When the last of those goes, so
//! does the memory. `cudaFree` of graph memory that is not live is refused (CUDA lets
//! it be freed outside its graph only once a launch made it live); a free node may
//! free only graph memory, and never an allocation its own graph frees.
//!
//! The default pool keeps what is freed into it, up to its release threshold (given
//! back at once past it, as if the device had synchronized), until it is trimmed;
//! that memory counts as used in the executor's figures, as on a GPU. Pools made with
//! `pool_create` behave alike, and refuse to grow past their maximum size.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;

use tracing::warn;
use vmcuda_wire::graph::{
    access_flags_valid, node_type, pool_attr, EdgeData, MemAccess, LOCATION_DEVICE,
};
use vmcuda_wire::op::{DevicePtr, LaunchAttribute};
use vmcuda_wire::CudaStatus;

use super::super::graph::{
    ExecGraph, ExecGraphExec, ExecLinked, ExecNode, ExecPool, ExecShare, Graphs, SHARE_LEN,
};
use super::super::{
    DeviceRange, ExecEvent, ExecFunction, ExecResult, ExecStream, LaunchConfig, PitchedRange,
};
use super::{allocation_footprint, HostMemoryExecutor};
use crate::executor::driver::Driver;
use crate::executor::CopyExec;
use crate::executor::LaunchExec;
use crate::executor::MemoryExec;
use crate::executor::StreamExec;

mod build;
mod ops;
mod run;
#[cfg(test)]
mod tests;

/// Nodes per graph: node ids carry their index in 16 bits.
const MAX_NODES: usize = 0xFFFF;

/// What a graph's allocation node leaves in its memory at each launch: never zero, so
/// that a test sees whether anything zeroed it after.
pub const GRAPH_MEMORY_FILL: u8 = 0xA5;

/// One recorded operation.
#[derive(Clone, Debug)]
pub(super) enum Recorded {
    Memset {
        dst: DeviceRange,
        value: u8,
    },
    Memset2D {
        dst: PitchedRange,
        value: u8,
    },
    /// A 16- or 32-bit memset (the driver's `cuMemsetD16/D32`).
    MemsetElements {
        dst: DevicePtr,
        value: u32,
        element_size: u8,
        count: u64,
    },
    CopyDtoD {
        dst: DeviceRange,
        src: DeviceRange,
    },
    Copy2DDtoD {
        dst: PitchedRange,
        src: PitchedRange,
    },
    CopyRegistered {
        device: DeviceRange,
        host: u64,
        to_device: bool,
    },
    /// A graph's own memory, handed out at each launch.
    MemAlloc {
        ptr: DevicePtr,
        size: u64,
    },
    /// A free node: the graph is done with the allocation at `ptr` (its own, which
    /// then is never live past a launch, or another graph's live one, which the
    /// launch ends).
    MemFree {
        ptr: DevicePtr,
    },
    /// Nothing to run: an empty node, or one destroyed (kept so that node ids, which
    /// carry their index, stay put).
    Empty,
    Removed,
    /// A child graph: its own copy of the nodes.
    Child(Vec<Node>),
    /// A child graph moved into its node (ownership "move"): the graph stays one of
    /// the double's, under its id, and its node ids name the node's nodes (updated
    /// through an executable graph). The copy of its nodes is made when the node is,
    /// and again when an executable graph is made.
    MovedChild {
        graph: ExecGraph,
        nodes: Vec<Node>,
    },
    /// A conditional node: its handle, its kind (`cudaGraphCondType`: IF 0, WHILE 1,
    /// SWITCH 2) and its bodies, each a graph of its own: in a graph their ids (their
    /// nodes are in `HostGraphs::graphs`), in an executable graph the ids and copies of
    /// their nodes made when it was instantiated.
    Conditional {
        handle: u64,
        kind: u32,
        bodies: Vec<(ExecGraph, Vec<Node>)>,
    },
    EventRecord(ExecEvent),
    EventWait(ExecEvent),
    /// A `cuStreamBatchMemOp`'s operations (checked by the session).
    BatchMemOp(Vec<vmcuda_wire::driver::MemOp>),
    /// A host function's place (see `GraphBuild::host_function_signal`).
    HostSignal {
        slot: u64,
    },
    Launch {
        function: ExecFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        attributes: Vec<LaunchAttribute>,
        params: Vec<u8>,
    },
}

impl Recorded {
    fn label(&self) -> &'static str {
        match self {
            Recorded::Memset { .. }
            | Recorded::Memset2D { .. }
            | Recorded::MemsetElements { .. } => "MEMSET",
            Recorded::CopyDtoD { .. }
            | Recorded::Copy2DDtoD { .. }
            | Recorded::CopyRegistered { .. } => "MEMCPY",
            Recorded::Launch { .. } => "KERNEL",
            Recorded::MemAlloc { .. } => "MEM_ALLOC",
            Recorded::MemFree { .. } => "MEM_FREE",
            Recorded::Empty | Recorded::Removed => "EMPTY",
            Recorded::Child(_) | Recorded::MovedChild { .. } => "GRAPH",
            Recorded::Conditional { .. } => "CONDITIONAL",
            Recorded::EventRecord(_) => "EVENT_RECORD",
            Recorded::EventWait(_) => "WAIT_EVENT",
            Recorded::HostSignal { .. } => "HOST",
            Recorded::BatchMemOp(_) => "BATCH_MEM_OP",
        }
    }

    /// Its `cudaGraphNodeType`.
    fn node_type(&self) -> ExecResult<u32> {
        Ok(match self {
            Recorded::Launch { .. } => node_type::KERNEL,
            Recorded::Memset { .. }
            | Recorded::Memset2D { .. }
            | Recorded::MemsetElements { .. } => node_type::MEMSET,
            Recorded::CopyDtoD { .. }
            | Recorded::Copy2DDtoD { .. }
            | Recorded::CopyRegistered { .. } => node_type::MEMCPY,
            Recorded::MemAlloc { .. } => node_type::MEM_ALLOC,
            Recorded::MemFree { .. } => node_type::MEM_FREE,
            Recorded::Empty => node_type::EMPTY,
            Recorded::Child(_) | Recorded::MovedChild { .. } => node_type::GRAPH,
            Recorded::Conditional { .. } => node_type::CONDITIONAL,
            Recorded::EventRecord(_) => node_type::EVENT_RECORD,
            Recorded::EventWait(_) => node_type::WAIT_EVENT,
            Recorded::HostSignal { .. } => node_type::HOST,
            Recorded::BatchMemOp(_) => node_type::BATCH_MEM_OP,
            Recorded::Removed => return Err(CudaStatus::ErrorInvalidValue),
        })
    }
}

#[derive(Clone, Debug)]
pub(super) struct Node {
    op: Recorded,
    /// Indices of the nodes this one depends on.
    deps: Vec<usize>,
    /// The edge data of those dependencies that have any other than the default.
    edges: BTreeMap<usize, EdgeData>,
    /// Runs when launched (`cudaGraphNodeSetEnabled` on an executable graph's copy).
    enabled: bool,
    /// A kernel node's launch attributes, as set (`cudaGraphKernelNodeSetAttribute`).
    attributes: std::collections::BTreeMap<u32, crate::executor::StreamAttrValue>,
}

impl Node {
    /// The data of this node's edge from node `from`.
    fn edge(&self, from: usize) -> EdgeData {
        self.edges.get(&from).copied().unwrap_or_default()
    }

    fn new(op: Recorded, deps: Vec<usize>) -> Node {
        Node {
            op,
            deps,
            edges: Default::default(),
            enabled: true,
            attributes: Default::default(),
        }
    }
}

/// The order to run `nodes` in: every node after those it depends on, else in index
/// order; `None` if the edges make a cycle.
fn run_order(nodes: &[Node]) -> Option<Vec<usize>> {
    let mut waiting: Vec<usize> = nodes.iter().map(|n| n.deps.len()).collect();
    let mut done = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    while order.len() < nodes.len() {
        let next = (0..nodes.len()).find(|&i| !done[i] && waiting[i] == 0)?;
        done[next] = true;
        order.push(next);
        for (i, n) in nodes.iter().enumerate() {
            waiting[i] -= n.deps.iter().filter(|&&d| d == next).count();
        }
    }
    Some(order)
}

/// A capture in progress: the id its graph will have, its nodes and which stream it
/// began on.
struct Capture {
    graph: ExecGraph,
    origin: ExecStream,
    nodes: Vec<Node>,
    /// Ended from a stream that only joined it: the driver invalidates the capture
    /// then, and its origin's end fails.
    invalidated: bool,
}

/// What the double keeps for graphs and its default pool.
#[derive(Default)]
pub(super) struct HostGraphs {
    captures: HashMap<u64, Capture>,
    /// Streams in a capture: (capture id, the nodes the stream's next node depends on).
    capturing: HashMap<ExecStream, (u64, Vec<usize>)>,
    /// The edge data of a capturing stream's frontier, where other than the default
    /// (set by a capture into a graph or new capture dependencies).
    frontier_edges: HashMap<ExecStream, BTreeMap<usize, EdgeData>>,
    /// Events recorded in a capture: (capture id, the recording stream's frontier).
    event_frontier: HashMap<ExecEvent, (u64, Vec<usize>)>,
    next_capture: u64,
    graphs: HashMap<ExecGraph, Vec<Node>>,
    execs: HashMap<ExecGraphExec, Vec<Node>>,
    /// The graph each executable graph was made of (whose node ids name its nodes).
    exec_source: HashMap<ExecGraphExec, ExecGraph>,
    /// Conditional handles: the graph each was made for and its default value.
    conditionals: HashMap<u64, (ExecGraph, u32)>,
    /// Graph memory (allocation nodes' memory), by address: whether it is live.
    graph_memory: HashMap<DevicePtr, bool>,
    pool: Pool,
    /// Pools made with `pool_create`, by id.
    created: HashMap<ExecPool, Pool>,
    /// Graph memory's high marks (used, reserved), as last seen.
    graph_mem_high: [u64; 2],
    next_pool: ExecPool,
    /// Exports, by number: the exported pool, and for an allocation its address.
    shares: HashMap<ExecShare, (ExecPool, Option<DevicePtr>)>,
    next_share: ExecShare,
}

/// The default pool's figures: what is allocated from it, and what it keeps of what
/// was freed into it (see the module documentation).
#[derive(Default)]
struct Pool {
    live: HashMap<DevicePtr, u64>,
    used: u64,
    used_high: u64,
    /// Freed memory the pool keeps reserved (footprint bytes), counted as used.
    idle: u64,
    release_threshold: u64,
    /// The three reuse flags, `cudaMemPoolReuse*` 1..=3 (CUDA's default: all on).
    reuse: Option<[u64; 3]>,
    /// The most it may reserve (0: no limit).
    max_size: u64,
    /// Made with a shareable handle type (it may be exported).
    shareable: bool,
    /// Imported from an export of this pool.
    imported_from: Option<ExecPool>,
    /// The name this pool's exports to other processes carry (random, drawn at the
    /// first): what the driver's export data says of its pool.
    key: Option<PoolKey>,
    /// Imported from another process's pool of that name.
    remote_key: Option<PoolKey>,
}

/// A pool's name in its exports to other processes.
type PoolKey = [u8; 16];

impl HostMemoryExecutor {
    /// Drop every graph and capture and what the pool keeps (the device was reset, and
    /// its memory released): graph memory of other devices that nothing holds now goes
    /// too; what is live stays until it is freed.
    pub(super) fn graphs_reset(&mut self) {
        // The reset destroys the pools the guest made, too.
        let idle: u64 = self.graphs.created.values().map(|p| p.idle).sum();
        self.used_memory -= self.graphs.pool.idle + idle;
        let graph_memory = std::mem::take(&mut self.graphs.graph_memory);
        self.graphs = HostGraphs::default();
        for (ptr, live) in graph_memory {
            if !self.memory.contains_key(&ptr) {
                continue; // the reset device's
            }
            if live {
                self.graphs.graph_memory.insert(ptr, true);
            } else {
                self.release(ptr);
            }
        }
    }

    /// Whether `ptr` is graph memory that is not live (so not the guest's to free).
    pub(super) fn graph_memory_idle(&self, ptr: DevicePtr) -> bool {
        self.graphs.graph_memory.get(&ptr) == Some(&false)
    }

    /// End the life of graph memory at `ptr` (freed outside its graph), releasing it
    /// when nothing else holds it; false if it is not graph memory.
    pub(super) fn graph_memory_free(&mut self, ptr: DevicePtr) -> bool {
        let Some(live) = self.graphs.graph_memory.get_mut(&ptr) else {
            return false;
        };
        *live = false;
        self.graph_memory_sweep([ptr]);
        true
    }

    /// Whether anything holds the graph memory at `ptr`: a launch made it live, or a
    /// capture, graph or executable graph has the node that allocates it.
    fn graph_memory_held(&self, ptr: DevicePtr) -> bool {
        let graphs = &self.graphs;
        let allocates = |nodes: &Vec<Node>| allocates(nodes, ptr);
        graphs.graph_memory.get(&ptr) == Some(&true)
            || graphs.captures.values().any(|c| allocates(&c.nodes))
            || graphs.graphs.values().any(allocates)
            || graphs.execs.values().any(allocates)
    }

    /// Release the graph memory among `ptrs` that nothing holds any more.
    fn graph_memory_sweep(&mut self, ptrs: impl IntoIterator<Item = DevicePtr>) {
        for ptr in ptrs {
            if self.graphs.graph_memory.contains_key(&ptr) && !self.graph_memory_held(ptr) {
                self.graphs.graph_memory.remove(&ptr);
                self.release(ptr);
            }
        }
    }

    /// May a free node of the capture `id` free `ptr`? Only graph memory, once per
    /// graph, and not an allocation that its own graph frees.
    fn check_free_node(&self, id: u64, ptr: DevicePtr) -> ExecResult<()> {
        let nodes = &self.graphs.captures[&id].nodes;
        let graphs = &self.graphs;
        let freed_by_owner = |n: &Vec<Node>| allocates(n, ptr) && frees(n, ptr);
        let refused = !graphs.graph_memory.contains_key(&ptr)
            || frees(nodes, ptr)
            || (!allocates(nodes, ptr)
                && (graphs.captures.values().any(|c| freed_by_owner(&c.nodes))
                    || graphs.graphs.values().any(freed_by_owner)
                    || graphs.execs.values().any(freed_by_owner)));
        if refused {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    /// The default pool (`None`) or a pool made with `pool_create`.
    fn keep_share(&mut self, pool: ExecPool, ptr: Option<DevicePtr>) -> ExecShare {
        self.graphs.next_share += 1;
        let id = self.graphs.next_share;
        self.graphs.shares.insert(id, (pool, ptr));
        id
    }

    /// A pool made or imported: its id.
    fn add_pool(&mut self, pool: Pool) -> ExecPool {
        self.graphs.next_pool += 1;
        let id = self.graphs.next_pool;
        self.graphs.created.insert(id, pool);
        id
    }

    /// The name of pool `which` in its exports to other processes, drawn at the first.
    fn pool_key(&mut self, which: ExecPool) -> ExecResult<PoolKey> {
        let pool = self.pool_mut(Some(which))?;
        if let Some(key) = pool.key {
            return Ok(key);
        }
        let mut key: PoolKey = [0; 16];
        vmcuda_wire::tls::random_bytes(&mut key).map_err(|_| CudaStatus::ErrorOperatingSystem)?;
        pool.key = Some(key);
        Ok(key)
    }

    fn pool(&self, which: Option<ExecPool>) -> ExecResult<&Pool> {
        match which {
            None => Ok(&self.graphs.pool),
            Some(id) => self
                .graphs
                .created
                .get(&id)
                .ok_or(CudaStatus::ErrorInvalidValue),
        }
    }

    fn pool_mut(&mut self, which: Option<ExecPool>) -> ExecResult<&mut Pool> {
        match which {
            None => Ok(&mut self.graphs.pool),
            Some(id) => self
                .graphs
                .created
                .get_mut(&id)
                .ok_or(CudaStatus::ErrorInvalidValue),
        }
    }

    /// Keep at most `keep` bytes of freed memory in the pool, giving the rest back.
    fn pool_keep(&mut self, which: Option<ExecPool>, keep: u64) -> ExecResult<()> {
        let pool = self.pool_mut(which)?;
        let idle = pool.idle.min(keep);
        let given = pool.idle - idle;
        pool.idle = idle;
        self.used_memory -= given;
        Ok(())
    }

    /// The bytes the pool has reserved: its live allocations' and what it keeps.
    fn pool_reserved(&self, which: Option<ExecPool>) -> ExecResult<u64> {
        let pool = self.pool(which)?;
        let live: u64 = pool.live.values().map(|&s| allocation_footprint(s)).sum();
        Ok(live + pool.idle)
    }

    /// The pool `ptr` was allocated from, if any.
    fn pool_of(&self, ptr: DevicePtr) -> Option<Option<ExecPool>> {
        if self.graphs.pool.live.contains_key(&ptr) {
            return Some(None);
        }
        self.graphs
            .created
            .iter()
            .find(|(_, p)| p.live.contains_key(&ptr))
            .map(|(&id, _)| Some(id))
    }
}

/// A memfd holding a pool's name: the double's descriptor for a pool export.
fn key_descriptor(key: &PoolKey) -> ExecResult<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let os = |_| CudaStatus::ErrorOperatingSystem;
    let fd = memfd_create(c"vmcuda-pool", MFdFlags::MFD_CLOEXEC).map_err(os)?;
    if nix::sys::uio::pwrite(&fd, key, 0).map_err(os)? != key.len() {
        return Err(CudaStatus::ErrorOperatingSystem);
    }
    Ok(fd)
}

/// Ask the guest to run a host function (done cleared, request set) and wait until it
/// has, as the GPU's stream would. The guest runs it on a thread of its own that needs
/// nothing from this worker; a guest that never does is given up on after a while.
fn signal_host_function(slot: u64) {
    use std::sync::atomic::{AtomicU32, Ordering};
    let words = slot as usize as *const AtomicU32;
    // SAFETY: `slot` is 8 bytes of guest memory mapped in this process (the session
    // checked), 4-aligned; the guest reads and writes the words atomically too.
    let (request, done) = unsafe { (&*words, &*words.wrapping_add(1)) };
    done.store(0, Ordering::SeqCst);
    request.store(1, Ordering::SeqCst);
    let start = std::time::Instant::now();
    while done.load(Ordering::SeqCst) == 0 {
        if start.elapsed() > std::time::Duration::from_secs(10) {
            warn!("a host function was not run by the guest within 10 s; going on");
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// `cudaGraphConditionalNodeType`.
pub(super) mod condition_kind {
    pub const IF: u32 = 0;
    pub const WHILE: u32 = 1;
    pub const SWITCH: u32 = 2;
}

/// The graphs a node holds as its own, under their ids: a conditional node's bodies,
/// a moved child graph.
fn held_graphs(op: &Recorded) -> Vec<(ExecGraph, &Vec<Node>)> {
    match op {
        Recorded::Conditional { bodies, .. } => bodies.iter().map(|(id, n)| (*id, n)).collect(),
        Recorded::MovedChild { graph, nodes } => vec![(*graph, nodes)],
        _ => Vec::new(),
    }
}

/// As `held_graphs`, to change.
fn held_graphs_mut(op: &mut Recorded) -> Vec<(ExecGraph, &mut Vec<Node>)> {
    match op {
        Recorded::Conditional { bodies, .. } => bodies.iter_mut().map(|(id, n)| (*id, n)).collect(),
        Recorded::MovedChild { graph, nodes } => vec![(*graph, nodes)],
        _ => Vec::new(),
    }
}

/// The graphs `nodes` hold as their own (see `held_graphs`), theirs included.
fn bodies_of(nodes: &[Node]) -> Vec<ExecGraph> {
    let mut found = Vec::new();
    for n in nodes {
        for (id, inner) in held_graphs(&n.op) {
            found.push(id);
            found.extend(bodies_of(inner));
        }
    }
    found
}

/// The nodes of held graph `graph` among `nodes`' (at any depth).
fn body_mut(nodes: &mut [Node], graph: ExecGraph) -> Option<&mut Vec<Node>> {
    for n in nodes.iter_mut() {
        for (id, inner) in held_graphs_mut(&mut n.op) {
            if id == graph {
                return Some(inner);
            }
            if let Some(found) = body_mut(inner, graph) {
                return Some(found);
            }
        }
    }
    None
}

/// A node's id: its graph's and its index.
fn node_id(graph: ExecGraph, index: usize) -> ExecNode {
    graph << 16 | (index as u64 + 1)
}

/// The indices of the nodes not destroyed.
fn live_nodes(nodes: &[Node]) -> impl Iterator<Item = usize> + '_ {
    (0..nodes.len()).filter(|&i| !matches!(nodes[i].op, Recorded::Removed))
}

/// The graph memory `nodes` allocate, child graphs' (moved into their nodes) included.
fn allocations(nodes: &[Node]) -> std::vec::IntoIter<DevicePtr> {
    let mut found = Vec::new();
    for n in nodes {
        match &n.op {
            Recorded::MemAlloc { ptr, .. } => found.push(*ptr),
            Recorded::Child(inner) | Recorded::MovedChild { nodes: inner, .. } => {
                found.extend(allocations(inner))
            }
            _ => {}
        }
    }
    found.into_iter()
}

/// Whether `nodes` allocate the graph memory at `ptr`.
fn allocates(nodes: &[Node], ptr: DevicePtr) -> bool {
    allocations(nodes).any(|p| p == ptr)
}

/// Whether `nodes` free the graph memory at `ptr`.
fn frees(nodes: &[Node], ptr: DevicePtr) -> bool {
    nodes.iter().any(|n| match &n.op {
        Recorded::MemFree { ptr: p } => *p == ptr,
        Recorded::Child(inner) | Recorded::MovedChild { nodes: inner, .. } => frees(inner, ptr),
        _ => false,
    })
}
