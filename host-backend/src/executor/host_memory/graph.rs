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

impl HostMemoryExecutor {
    /// Record `op` if `stream` is capturing (true), else leave it to run (false).
    pub(super) fn record(&mut self, stream: ExecStream, op: impl FnOnce() -> Recorded) -> bool {
        let Some((id, frontier)) = self.graphs.capturing.get_mut(&stream) else {
            return false;
        };
        let Some(capture) = self.graphs.captures.get_mut(id) else {
            return false;
        };
        let index = capture.nodes.len();
        let mut node = Node::new(op(), std::mem::replace(frontier, vec![index]));
        node.edges = self
            .graphs
            .frontier_edges
            .remove(&stream)
            .unwrap_or_default();
        capture.nodes.push(node);
        true
    }

    pub(super) fn is_capturing(&self, stream: ExecStream) -> bool {
        self.graphs.capturing.contains_key(&stream)
    }

    /// Operations a capture cannot hold (copies through the socket, synchronizing the
    /// capturing stream): refused, as CUDA refuses them.
    pub(super) fn refuse_in_capture(&self, stream: ExecStream) -> ExecResult<()> {
        if self.is_capturing(stream) {
            warn!(stream, "refused an operation a stream capture cannot hold");
            return Err(CudaStatus::ErrorStreamCaptureUnsupported);
        }
        Ok(())
    }

    /// An event recorded on a capturing stream remembers the stream's frontier.
    pub(super) fn record_event_in_capture(&mut self, event: ExecEvent, stream: ExecStream) {
        match self.graphs.capturing.get(&stream) {
            Some(entry) => {
                self.graphs.event_frontier.insert(event, entry.clone());
            }
            None => {
                self.graphs.event_frontier.remove(&event);
            }
        }
    }

    /// A stream waiting for an event recorded in a capture joins that capture.
    pub(super) fn wait_event_in_capture(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
    ) -> ExecResult<()> {
        let Some((id, deps)) = self.graphs.event_frontier.get(&event).cloned() else {
            return Ok(());
        };
        if !self.graphs.captures.contains_key(&id) {
            return Ok(()); // that capture has ended
        }
        match self.graphs.capturing.get_mut(&stream) {
            Some((other, _)) if *other != id => Err(CudaStatus::ErrorStreamCaptureMerge),
            Some((_, frontier)) => {
                for d in deps {
                    if !frontier.contains(&d) {
                        frontier.push(d);
                    }
                }
                Ok(())
            }
            None => {
                self.graphs.capturing.insert(stream, (id, deps));
                Ok(())
            }
        }
    }

    /// Note an allocation from a pool.
    fn pool_add(&mut self, which: Option<ExecPool>, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        let pool = self.pool_mut(which)?;
        pool.live.insert(ptr, size);
        pool.used += size;
        pool.used_high = pool.used_high.max(pool.used);
        Ok(())
    }

    /// Forget `ptr` if it came from a pool (freed either way).
    pub(super) fn pool_forget(&mut self, ptr: DevicePtr) {
        let Some(which) = self.pool_of(ptr) else {
            return;
        };
        if let Ok(pool) = self.pool_mut(which) {
            if let Some(size) = pool.live.remove(&ptr) {
                pool.used -= size;
            }
        }
    }

    /// The nodes of a graph, or of the graph a capture is building.
    fn nodes_of(&self, graph: ExecGraph) -> ExecResult<&Vec<Node>> {
        if let Some(nodes) = self.graphs.graphs.get(&graph) {
            return Ok(nodes);
        }
        self.graphs
            .captures
            .values()
            .find(|c| c.graph == graph)
            .map(|c| &c.nodes)
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    fn node_index(graph: ExecGraph, node: ExecNode, len: usize) -> ExecResult<usize> {
        let index = (node & 0xFFFF) as usize;
        if node >> 16 != graph || index == 0 || index > len {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(index - 1)
    }

    fn run(&mut self, op: Recorded, stream: ExecStream) -> ExecResult<()> {
        match op {
            Recorded::Memset { dst, value } => self.memset(dst, value, stream, true),
            Recorded::Memset2D { dst, value } => self.memset_2d(dst, value, stream, true),
            Recorded::MemsetElements {
                dst,
                value,
                element_size,
                count,
            } => self.memset_elements(dst, value, element_size, count, stream, true),
            Recorded::CopyDtoD { dst, src } => self.copy_dtod(dst, src, stream, true),
            Recorded::Copy2DDtoD { dst, src } => self.copy_2d_dtod(dst, src, stream, true),
            Recorded::CopyRegistered {
                device,
                host,
                to_device,
            } => self.copy_registered(device, host, to_device, stream, true),
            Recorded::MemAlloc { ptr, size } => {
                if let Ok(bytes) = self.slice_mut(ptr, size) {
                    bytes.fill(GRAPH_MEMORY_FILL);
                }
                Ok(())
            }
            // Its effect on the allocation's life is the launch's (see graph_launch).
            Recorded::MemFree { .. } | Recorded::Empty | Recorded::Removed => Ok(()),
            Recorded::Child(nodes) | Recorded::MovedChild { nodes, .. } => {
                self.run_nodes(&nodes, stream)
            }
            Recorded::Conditional {
                handle,
                kind,
                bodies,
            } => {
                // A condition changes only by a kernel (cudaGraphSetConditional), which
                // the double never runs: it holds its default value, and a WHILE runs
                // its body once at most (else no launch would end).
                let value = self.graphs.conditionals.get(&handle).map_or(0, |c| c.1);
                let body = match kind {
                    condition_kind::IF if value != 0 => bodies.first(),
                    condition_kind::IF => bodies.get(1),
                    condition_kind::WHILE if value != 0 => bodies.first(),
                    condition_kind::SWITCH => bodies.get(value as usize),
                    _ => None,
                };
                match body {
                    Some((_, nodes)) => self.run_nodes(nodes, stream),
                    None => Ok(()),
                }
            }
            Recorded::EventRecord(event) => self.event_record(event, stream, 0),
            Recorded::EventWait(event) => self.stream_wait_event(stream, event, 0),
            Recorded::HostSignal { slot } => {
                signal_host_function(slot);
                Ok(())
            }
            Recorded::BatchMemOp(ops) => {
                use crate::executor::driver::Driver;
                self.stream_batch_mem_op(stream, &ops)
            }
            Recorded::Launch {
                function,
                grid,
                block,
                shared_mem,
                attributes,
                params,
            } => {
                let config = LaunchConfig {
                    grid,
                    block,
                    shared_mem,
                    stream,
                    attributes: &attributes,
                };
                self.launch(function, &config, &params)
            }
        }
    }
}

impl HostMemoryExecutor {
    /// `nodes` as an executable graph holds them: each conditional node with copies of
    /// its bodies' nodes, each moved child graph's node with a copy of the graph's
    /// nodes as they are now (theirs filled in alike).
    fn with_bodies(&self, mut nodes: Vec<Node>) -> ExecResult<Vec<Node>> {
        for n in nodes.iter_mut() {
            for (id, inner) in held_graphs_mut(&mut n.op) {
                let body = self
                    .graphs
                    .graphs
                    .get(&id)
                    .cloned()
                    .ok_or(CudaStatus::ErrorInvalidValue)?;
                if run_order(&body).is_none() {
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                *inner = self.with_bodies(body)?;
            }
        }
        Ok(nodes)
    }

    /// Forget the graphs `nodes` hold (conditional bodies, moved child graphs): they go
    /// with their node.
    fn drop_bodies(&mut self, nodes: &[Node]) {
        let mut pending: Vec<ExecGraph> = bodies_of(nodes);
        while let Some(body) = pending.pop() {
            if let Some(inner) = self.graphs.graphs.remove(&body) {
                pending.extend(bodies_of(&inner));
            }
        }
    }

    /// The nodes of executable graph `exec` that node ids of `graph` name: its own, or
    /// those of a graph one of its nodes holds (a conditional body, a moved child).
    fn exec_nodes_mut(
        &mut self,
        exec: ExecGraphExec,
        graph: ExecGraph,
    ) -> ExecResult<&mut Vec<Node>> {
        let source = self.graphs.exec_source.get(&exec).copied();
        let nodes = self
            .graphs
            .execs
            .get_mut(&exec)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if source == Some(graph) {
            return Ok(nodes);
        }
        body_mut(nodes, graph).ok_or(CudaStatus::ErrorInvalidValue)
    }

    /// Run the enabled nodes of a graph in an order its edges allow.
    fn run_nodes(&mut self, nodes: &[Node], stream: ExecStream) -> ExecResult<()> {
        let order = run_order(nodes).ok_or(CudaStatus::ErrorInvalidValue)?;
        for i in order {
            if nodes[i].enabled {
                self.run(nodes[i].op.clone(), stream)?;
            }
        }
        Ok(())
    }
}

impl Graphs for HostMemoryExecutor {
    fn begin_capture(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        if self.is_capturing(stream) {
            return Err(CudaStatus::ErrorIllegalState);
        }
        self.graphs.next_capture += 1;
        let id = self.graphs.next_capture;
        let graph = self.fresh_id();
        self.graphs.captures.insert(
            id,
            Capture {
                graph,
                origin: stream,
                nodes: Vec::new(),
                invalidated: false,
            },
        );
        self.graphs.capturing.insert(stream, (id, Vec::new()));
        Ok(())
    }

    fn end_capture(&mut self, stream: ExecStream) -> ExecResult<ExecGraph> {
        self.check_stream(stream)?;
        let &(id, _) = self
            .graphs
            .capturing
            .get(&stream)
            .ok_or(CudaStatus::ErrorIllegalState)?;
        if self.graphs.captures[&id].origin != stream {
            if let Some(c) = self.graphs.captures.get_mut(&id) {
                c.invalidated = true;
            }
            return Err(CudaStatus::ErrorStreamCaptureUnmatched);
        }
        let capture = self.graphs.captures.remove(&id).expect("looked up above");
        self.graphs.capturing.retain(|_, (c, _)| *c != id);
        let capturing = &self.graphs.capturing;
        self.graphs
            .frontier_edges
            .retain(|s, _| capturing.contains_key(s));
        if capture.invalidated {
            self.graph_memory_sweep(allocations(&capture.nodes).collect::<Vec<_>>());
            return Err(CudaStatus::ErrorStreamCaptureInvalidated);
        }
        if capture.nodes.len() > MAX_NODES {
            // No graph came of it: its allocations go with it.
            self.graph_memory_sweep(allocations(&capture.nodes).collect::<Vec<_>>());
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        self.graphs.graphs.insert(capture.graph, capture.nodes);
        Ok(capture.graph)
    }

    fn graph_instantiate(&mut self, graph: ExecGraph, _flags: u64) -> ExecResult<ExecGraphExec> {
        let nodes = self
            .graphs
            .graphs
            .get(&graph)
            .cloned()
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if run_order(&nodes).is_none() {
            return Err(CudaStatus::ErrorInvalidValue); // a cycle
        }
        let nodes = self.with_bodies(nodes)?;
        let exec = self.fresh_id();
        self.graphs.execs.insert(exec, nodes);
        self.graphs.exec_source.insert(exec, graph);
        Ok(exec)
    }

    fn graph_launch(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        let nodes = self
            .graphs
            .execs
            .get(&exec)
            .cloned()
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.run_nodes(&nodes, stream)?;
        // A launch that ran to the end: the allocations the graph does not free itself
        // are live now, and those of other graphs it frees are not.
        let mut ended = Vec::new();
        for node in &nodes {
            match node.op {
                Recorded::MemAlloc { ptr, .. } if !frees(&nodes, ptr) => {
                    if let Some(live) = self.graphs.graph_memory.get_mut(&ptr) {
                        *live = true;
                    }
                }
                Recorded::MemFree { ptr } if !allocates(&nodes, ptr) => {
                    if let Some(live) = self.graphs.graph_memory.get_mut(&ptr) {
                        *live = false;
                        ended.push(ptr);
                    }
                }
                _ => {}
            }
        }
        self.graph_memory_sweep(ended);
        Ok(())
    }

    fn graph_destroy(&mut self, graph: ExecGraph) -> ExecResult<()> {
        let nodes = self
            .graphs
            .graphs
            .remove(&graph)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.graph_memory_sweep(allocations(&nodes).collect::<Vec<_>>());
        self.drop_bodies(&nodes);
        Ok(())
    }

    fn graph_exec_destroy(&mut self, exec: ExecGraphExec) -> ExecResult<()> {
        let nodes = self
            .graphs
            .execs
            .remove(&exec)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.graphs.exec_source.remove(&exec);
        self.graph_memory_sweep(allocations(&nodes).collect::<Vec<_>>());
        Ok(())
    }

    fn capture_graph(&mut self, stream: ExecStream) -> ExecResult<(ExecGraph, ExecLinked)> {
        self.check_stream(stream)?;
        let (id, frontier) = self
            .graphs
            .capturing
            .get(&stream)
            .ok_or(CudaStatus::ErrorIllegalState)?;
        let graph = self.graphs.captures[id].graph;
        let edges = self.graphs.frontier_edges.get(&stream);
        let edge = |d: usize| edges.and_then(|e| e.get(&d)).copied().unwrap_or_default();
        Ok((
            graph,
            frontier
                .iter()
                .map(|&d| (node_id(graph, d), edge(d)))
                .unzip(),
        ))
    }

    fn graph_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>> {
        let nodes = self.nodes_of(graph)?;
        Ok(live_nodes(nodes).map(|i| node_id(graph, i)).collect())
    }

    fn node_dependencies(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecLinked> {
        let nodes = self.nodes_of(graph)?;
        let n = &nodes[Self::node_index(graph, node, nodes.len())?];
        Ok(n.deps
            .iter()
            .map(|&d| (node_id(graph, d), n.edge(d)))
            .unzip())
    }

    fn graph_dot(&mut self, graph: ExecGraph, _flags: u32) -> ExecResult<Vec<u8>> {
        let nodes = self
            .graphs
            .graphs
            .get(&graph)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let mut dot = String::from("digraph dot {\n");
        for (i, node) in nodes.iter().enumerate() {
            dot.push_str(&format!("  node{i} [label=\"{} {i}\"];\n", node.op.label()));
            for d in &node.deps {
                dot.push_str(&format!("  node{d} -> node{i};\n"));
            }
        }
        dot.push_str("}\n");
        Ok(dot.into_bytes())
    }

    fn alloc_async(
        &mut self,
        size: u64,
        which: Option<ExecPool>,
        stream: ExecStream,
    ) -> ExecResult<DevicePtr> {
        self.check_stream(stream)?;
        let allocate_imported = self.imported_pools_allocate();
        let pool = self.pool(which)?;
        // As the driver: an imported pool only maps its exporter's allocations.
        if pool.imported_from.is_some() && !allocate_imported {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (idle, max_size) = (pool.idle, pool.max_size);
        if max_size != 0 {
            // The pool grows by what it cannot take from what it keeps.
            let grows = allocation_footprint(size).saturating_sub(idle);
            if self.pool_reserved(which)?.saturating_add(grows) > max_size {
                return Err(CudaStatus::ErrorMemoryAllocation);
            }
        }
        if self.is_capturing(stream) {
            // An allocation node: the graph's memory, made now and kept by the graph.
            let ptr = self.alloc(size)?;
            if ptr != 0 {
                self.record(stream, || Recorded::MemAlloc { ptr, size });
                self.graphs.graph_memory.insert(ptr, false);
            }
            return Ok(ptr);
        }
        // What the pool keeps is used first.
        let reuse = idle.min(allocation_footprint(size));
        self.pool_keep(which, idle - reuse)?;
        let ptr = match self.alloc(size) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.pool_mut(which)?.idle += reuse;
                self.used_memory += reuse;
                return Err(e);
            }
        };
        if ptr != 0 {
            self.pool_add(which, ptr, size)?;
        }
        Ok(ptr)
    }

    fn free_async(&mut self, ptr: DevicePtr, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        if let Some(&(id, _)) = self.graphs.capturing.get(&stream) {
            self.check_free_node(id, ptr)?;
            self.record(stream, || Recorded::MemFree { ptr });
            return Ok(());
        }
        // Work completes in issue order here: the stream has already reached this point.
        let which = self.pool_of(ptr);
        let pooled = which.and_then(|w| self.pool(w).ok()?.live.get(&ptr).copied());
        self.free(ptr)?;
        if let (Some(which), Some(size)) = (which, pooled) {
            // The pool keeps it, up to its release threshold.
            let kept = allocation_footprint(size);
            let pool = self.pool_mut(which)?;
            pool.idle += kept;
            let threshold = pool.release_threshold;
            self.used_memory += kept;
            self.pool_keep(which, threshold)?;
        }
        Ok(())
    }

    fn pool_get_attribute(&mut self, which: Option<ExecPool>, attr: u32) -> ExecResult<u64> {
        let pool = self.pool(which)?;
        let reuse = pool.reuse.unwrap_or([1; 3]);
        Ok(match attr {
            pool_attr::REUSE_FOLLOW_EVENT_DEPENDENCIES
                ..=pool_attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => reuse[attr as usize - 1],
            pool_attr::RELEASE_THRESHOLD => pool.release_threshold,
            pool_attr::RESERVED_MEM_CURRENT => self.pool_reserved(which)?,
            pool_attr::USED_MEM_CURRENT => pool.used,
            pool_attr::RESERVED_MEM_HIGH | pool_attr::USED_MEM_HIGH => pool.used_high,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        })
    }

    fn pool_set_attribute(
        &mut self,
        which: Option<ExecPool>,
        attr: u32,
        value: u64,
    ) -> ExecResult<()> {
        if !pool_attr::settable(attr, value) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let pool = self.pool_mut(which)?;
        match attr {
            pool_attr::RELEASE_THRESHOLD => {
                pool.release_threshold = value;
                self.pool_keep(which, value)?;
            }
            pool_attr::RESERVED_MEM_HIGH | pool_attr::USED_MEM_HIGH => pool.used_high = pool.used,
            _ => {
                let mut reuse = pool.reuse.unwrap_or([1; 3]);
                reuse[attr as usize - 1] = u64::from(value != 0);
                pool.reuse = Some(reuse);
            }
        }
        Ok(())
    }

    fn stream_capturing(&mut self, stream: ExecStream) -> ExecResult<bool> {
        self.check_stream(stream)?;
        Ok(self.is_capturing(stream))
    }

    fn pool_trim_to(&mut self, which: Option<ExecPool>, min_bytes_to_keep: u64) -> ExecResult<()> {
        // The pool's reserve shrinks to the bytes asked for, never below what is live.
        let live = self.pool_reserved(which)? - self.pool(which)?.idle;
        self.pool_keep(which, min_bytes_to_keep.saturating_sub(live))
    }

    fn graph_mem_attribute(&mut self, attr: u32) -> ExecResult<u64> {
        // Used: the allocations a launch made live; reserved: all the graphs hold.
        let live: u64 = self
            .graphs
            .graph_memory
            .iter()
            .filter(|(_, &live)| live)
            .filter_map(|(p, _)| self.memory.get(p).map(|m| m.len() as u64))
            .sum();
        let footprint: u64 = self
            .graphs
            .graph_memory
            .keys()
            .filter_map(|&p| {
                self.memory
                    .get(&p)
                    .map(|m| allocation_footprint(m.len() as u64))
            })
            .sum();
        self.graphs.graph_mem_high[0] = self.graphs.graph_mem_high[0].max(live);
        self.graphs.graph_mem_high[1] = self.graphs.graph_mem_high[1].max(footprint);
        Ok(match attr {
            0 => live,
            1 => self.graphs.graph_mem_high[0],
            2 => footprint,
            3 => self.graphs.graph_mem_high[1],
            _ => return Err(CudaStatus::ErrorInvalidValue),
        })
    }

    fn graph_mem_reset_high(&mut self, attr: u32) -> ExecResult<()> {
        match attr {
            1 => self.graphs.graph_mem_high[0] = 0,
            3 => self.graphs.graph_mem_high[1] = 0,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(())
    }

    fn graph_mem_trim(&mut self) -> ExecResult<()> {
        // Graph memory goes the moment nothing holds it: there is no cache to trim.
        Ok(())
    }

    fn pool_create(&mut self, max_size: u64, shareable: bool) -> ExecResult<ExecPool> {
        Ok(self.add_pool(Pool {
            max_size,
            shareable,
            ..Pool::default()
        }))
    }

    fn pool_export(&mut self, pool: ExecPool) -> ExecResult<ExecShare> {
        // As the driver: only a pool made with a shareable handle type.
        if !self.pool(Some(pool))?.shareable {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(self.keep_share(pool, None))
    }

    fn pool_import(&mut self, share: ExecShare) -> ExecResult<ExecPool> {
        let Some(&(from, None)) = self.graphs.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        Ok(self.add_pool(Pool {
            imported_from: Some(from),
            ..Pool::default()
        }))
    }

    fn pool_export_pointer(&mut self, ptr: DevicePtr) -> ExecResult<ExecShare> {
        let from = self
            .graphs
            .created
            .iter()
            .find(|(_, p)| p.shareable && p.live.contains_key(&ptr))
            .map(|(&id, _)| id)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        Ok(self.keep_share(from, Some(ptr)))
    }

    /// Checked as the driver would; but one address per allocation is all this double's
    /// memory can hold, so the mapping itself is refused.
    fn pool_import_pointer(&mut self, pool: ExecPool, share: ExecShare) -> ExecResult<DevicePtr> {
        let Some(&(from, Some(_))) = self.graphs.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        if self.pool(Some(pool))?.imported_from != Some(from) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Err(CudaStatus::ErrorNotSupported)
    }

    fn share_drop(&mut self, share: ExecShare) {
        self.graphs.shares.remove(&share);
    }

    fn pool_share_out(&mut self, share: ExecShare) -> ExecResult<(OwnedFd, [u8; SHARE_LEN])> {
        let Some(&(from, None)) = self.graphs.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // The double's "driver descriptor": a memfd holding the pool's name.
        let key = self.pool_key(from)?;
        let fd = key_descriptor(&key)?;
        Ok((fd, [0; SHARE_LEN]))
    }

    fn pointer_share_out(
        &mut self,
        share: ExecShare,
    ) -> ExecResult<([u8; SHARE_LEN], Option<OwnedFd>)> {
        let Some(&(from, Some(ptr))) = self.graphs.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // Only while the allocation is live in its pool, as the driver exports it.
        if !self.pool(Some(from))?.live.contains_key(&ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let key = self.pool_key(from)?;
        let (fd, len) = self.share_allocation(ptr)?;
        // The export data: the pool's name and the allocation's length.
        let mut data = [0u8; SHARE_LEN];
        data[..16].copy_from_slice(&key);
        data[16..24].copy_from_slice(&len.to_le_bytes());
        Ok((data, Some(fd)))
    }

    fn pool_import_from(
        &mut self,
        shared: OwnedFd,
        _handle: &[u8; SHARE_LEN],
    ) -> ExecResult<ExecPool> {
        let mut key: PoolKey = [0; 16];
        // A descriptor that is not a pool's is refused, as the driver refuses it.
        match nix::sys::uio::pread(&shared, &mut key, 0) {
            Ok(16) => {}
            _ => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(self.add_pool(Pool {
            remote_key: Some(key),
            ..Pool::default()
        }))
    }

    fn pool_import_pointer_from(
        &mut self,
        pool: ExecPool,
        data: &[u8; SHARE_LEN],
        size: u64,
        shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr> {
        // Only through an import of the allocation's own pool, as the driver checks.
        let from = self.pool(Some(pool))?.remote_key;
        let len = u64::from_le_bytes(data[16..24].try_into().expect("8 bytes"));
        if from.is_none_or(|k| data[..16] != k) || len != size {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let fd = shared.ok_or(CudaStatus::ErrorInvalidValue)?;
        let ptr = self.map_shared(fd, size)?;
        self.pool_pointer_imports.insert(ptr);
        Ok(ptr)
    }

    fn pool_destroy(&mut self, which: ExecPool) -> ExecResult<()> {
        // What it keeps goes back now; what is live stays until it is freed (as CUDA
        // releases a destroyed pool's memory once its allocations are freed).
        self.pool_keep(Some(which), 0)?;
        // Its live allocations are plain ones from now on.
        self.graphs.created.remove(&which);
        Ok(())
    }

    fn pool_get_access(&mut self, which: Option<ExecPool>, device: i32) -> ExecResult<u32> {
        self.pool(which)?;
        if device < 0 || device as usize >= self.visible.len() {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // One pretend device: its own pool's memory is read-write for it.
        Ok(if device as usize == self.current {
            3
        } else {
            0
        })
    }

    fn pool_set_access(&mut self, which: Option<ExecPool>, access: &[MemAccess]) -> ExecResult<()> {
        self.pool(which)?;
        for a in access {
            let known_device = a.location_id >= 0 && (a.location_id as usize) < self.visible.len();
            if a.location_type != LOCATION_DEVICE || !known_device || !access_flags_valid(a.flags) {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            // One pretend device: access from another (a peer) is not possible.
            if a.location_id as usize != self.current {
                return Err(CudaStatus::ErrorInvalidDevice);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::graph::{GraphBuild, Graphs};
    use crate::executor::{CopyExec, DeviceRange, MemoryExec, StreamExec};

    fn r(ptr: DevicePtr, len: u64) -> DeviceRange {
        DeviceRange::for_tests(ptr, len)
    }

    /// A graph of two kernel nodes and an empty one, set in place (the double runs no
    /// kernels, so none is captured).
    fn kernels_and_empty(x: &mut HostMemoryExecutor) -> (ExecGraph, [ExecNode; 3]) {
        use crate::executor::graph::GraphBuild;
        let g = x.graph_create(0).unwrap();
        let kernel = || Recorded::Launch {
            function: 1,
            grid: [1; 3],
            block: [1; 3],
            shared_mem: 0,
            attributes: Vec::new(),
            params: Vec::new(),
        };
        let nodes = vec![
            Node::new(kernel(), vec![]),
            Node::new(kernel(), vec![]),
            Node::new(Recorded::Empty, vec![]),
        ];
        x.graphs.graphs.insert(g, nodes);
        (g, [node_id(g, 0), node_id(g, 1), node_id(g, 2)])
    }

    /// Edges keep their data: reported by every query, removed only with it, taken
    /// only where CUDA takes them.
    #[test]
    fn edges_keep_their_data() {
        use crate::executor::graph::GraphBuild;
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let (g, [k1, k2, empty]) = kernels_and_empty(&mut x);
        let raw = |b: [u8; 8]| EdgeData::checked(u64::from_le_bytes(b)).unwrap();
        let programmatic = raw([1, 0, 1, 0, 0, 0, 0, 0]);
        let bad = CudaStatus::ErrorInvalidValue;
        // Programmatic only between kernel nodes, out of an early port.
        let into_empty = x.change_dependencies(g, &[k1], &[empty], &[programmatic], true);
        assert_eq!(into_empty.unwrap_err(), bad);
        let from_end = raw([0, 0, 1, 0, 0, 0, 0, 0]);
        let late = x.change_dependencies(g, &[k1], &[k2], &[from_end], true);
        assert_eq!(late.unwrap_err(), bad);
        x.change_dependencies(
            g,
            &[k1, k2],
            &[k2, empty],
            &[programmatic, EdgeData::default()],
            true,
        )
        .unwrap();
        let (from, to, data) = x.graph_edges(g).unwrap();
        assert_eq!((from, to), (vec![k1, k2], vec![k2, empty]));
        assert_eq!(data, vec![programmatic, EdgeData::default()]);
        assert_eq!(
            x.node_dependencies(g, k2).unwrap(),
            (vec![k1], vec![programmatic])
        );
        assert_eq!(
            x.dependent_nodes(g, k1).unwrap(),
            (vec![k2], vec![programmatic])
        );
        // A clone keeps them.
        let clone = x.graph_clone(g).unwrap();
        assert_eq!(
            x.graph_edges(clone).unwrap().2,
            vec![programmatic, EdgeData::default()]
        );
        // Removed with the data it has, or none given; not with other data.
        let completion = raw([2, 0, 1, 0, 0, 0, 0, 0]);
        let other = x.change_dependencies(g, &[k1], &[k2], &[completion], false);
        assert_eq!(other.unwrap_err(), bad);
        x.change_dependencies(g, &[k1], &[k2], &[programmatic], false)
            .unwrap();
        assert_eq!(x.node_dependencies(g, k2).unwrap(), (vec![], vec![]));
        x.change_dependencies(g, &[k1], &[k2], &[programmatic], true)
            .unwrap();
        x.change_dependencies(g, &[k1], &[k2], &[], false).unwrap();
        assert_eq!(x.node_dependencies(g, k2).unwrap(), (vec![], vec![]));
        // A default edge may leave a kernel at launch completion, to any node; never
        // at the programmatic port.
        let started = raw([2, 0, 0, 0, 0, 0, 0, 0]);
        x.change_dependencies(g, &[k1], &[empty], &[started], true)
            .unwrap();
        let early = raw([1, 0, 0, 0, 0, 0, 0, 0]);
        let refused = x.change_dependencies(g, &[k2], &[empty], &[early], true);
        assert_eq!(refused.unwrap_err(), bad);
        x.change_dependencies(g, &[k1], &[empty], &[started], false)
            .unwrap();
        // A capture into the graph after a programmatic edge: the captured node has it.
        let s = x.stream_create(1, 0).unwrap();
        x.begin_capture_to_graph(s, g, &[k1], &[programmatic])
            .unwrap();
        assert_eq!(
            x.capture_graph(s).unwrap().1,
            (vec![k1], vec![programmatic])
        );
        x.update_capture_dependencies(s, &[k2], &[completion], false)
            .unwrap();
        let (deps, edges) = x.capture_graph(s).unwrap().1;
        assert_eq!(
            (deps, edges),
            (vec![k1, k2], vec![programmatic, completion])
        );
        x.update_capture_dependencies(s, &[k1], &[], true).unwrap();
        assert_eq!(
            x.capture_graph(s).unwrap().1,
            (vec![k1], vec![EdgeData::default()])
        );
        x.update_capture_dependencies(s, &[k1], &[programmatic], true)
            .unwrap();
        assert!(x.record(s, || Recorded::Empty));
        let made = x.end_capture(s).unwrap();
        assert_eq!(made, g);
        let last = node_id(g, 3);
        assert_eq!(
            x.node_dependencies(g, last).unwrap(),
            (vec![k1], vec![programmatic])
        );
    }

    /// Only the origin stream ends a capture; ending it from a stream that joined it
    /// fails and invalidates it, as the driver does.
    #[test]
    fn ending_a_capture_from_a_joined_stream_invalidates_it() {
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let (s, t) = (
            x.stream_create(1, 0).unwrap(),
            x.stream_create(1, 0).unwrap(),
        );
        x.begin_capture(s).unwrap();
        let fork = x.event_create(0).unwrap();
        x.event_record(fork, s, 0).unwrap();
        x.stream_wait_event(t, fork, 0).unwrap();
        assert_eq!(
            x.end_capture(t).unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnmatched
        );
        assert_eq!(
            x.end_capture(s).unwrap_err(),
            CudaStatus::ErrorStreamCaptureInvalidated
        );
        assert!(!x.is_capturing(s) && !x.is_capturing(t));
    }

    #[test]
    fn captured_work_is_recorded_and_replayed_by_each_launch() {
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let s = x.stream_create(0, 0).unwrap();
        let t = x.stream_create(0, 0).unwrap();
        let a = x.alloc(64).unwrap();
        let b = x.alloc(64).unwrap();
        x.begin_capture(s).unwrap();
        x.memset(r(a, 64), 7, s, true).unwrap();
        // Fork to `t` through an event, copy there, and join back.
        let fork = x.event_create(0).unwrap();
        let join = x.event_create(0).unwrap();
        x.event_record(fork, s, 0).unwrap();
        x.stream_wait_event(t, fork, 0).unwrap();
        x.copy_dtod(r(b, 64), r(a, 64), t, true).unwrap();
        x.event_record(join, t, 0).unwrap();
        x.stream_wait_event(s, join, 0).unwrap();
        x.memset(r(a, 8), 1, s, true).unwrap();
        // The graph being built, seen from the capture: s's last node is the frontier.
        let (building, (deps, edges)) = x.capture_graph(s).unwrap();
        assert_eq!(deps, vec![building << 16 | 3]);
        assert_eq!(edges, vec![EdgeData::default()]);
        assert_eq!(x.graph_nodes(building).unwrap().len(), 3);
        // Nothing ran yet; a pageable copy cannot be captured.
        assert_eq!(x.slice(a, 1).unwrap()[0], 0);
        assert_eq!(
            x.copy_htod(r(a, [1].len() as u64), &[1], s, true)
                .unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnsupported
        );
        let g = x.end_capture(s).unwrap();
        assert_eq!(g, building, "the graph keeps its id when the capture ends");
        assert!(!x.is_capturing(t), "joined streams leave with the origin");
        let nodes = x.graph_nodes(g).unwrap();
        assert_eq!(nodes.len(), 3);
        let deps = |x: &mut HostMemoryExecutor, n| x.node_dependencies(g, n).unwrap().0;
        assert_eq!(deps(&mut x, nodes[0]), Vec::<u64>::new());
        assert_eq!(deps(&mut x, nodes[1]), vec![nodes[0]]);
        assert_eq!(deps(&mut x, nodes[2]), vec![nodes[0], nodes[1]]);
        assert!(x.node_dependencies(g, 5).is_err());
        let exec = x.graph_instantiate(g, 0).unwrap();
        x.graph_destroy(g).unwrap();
        x.graph_launch(exec, LEGACY).unwrap();
        assert_eq!(x.slice(a, 9).unwrap(), &[1, 1, 1, 1, 1, 1, 1, 1, 7]);
        assert_eq!(x.slice(b, 2).unwrap(), &[7, 7]);
        x.graph_exec_destroy(exec).unwrap();
        assert_eq!(
            x.graph_launch(exec, LEGACY).unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
    }

    const LEGACY: ExecStream = crate::executor::LEGACY_STREAM;

    /// A body's work as the guest builds it: captured into the body graph.
    fn copy_into(
        x: &mut HostMemoryExecutor,
        graph: ExecGraph,
        dst: DevicePtr,
        src: DevicePtr,
    ) -> ExecNode {
        let s = x.stream_create(0, 0).unwrap();
        x.begin_capture_to_graph(s, graph, &[], &[]).unwrap();
        x.copy_dtod(r(dst, 64), r(src, 64), s, true).unwrap();
        x.end_capture(s).unwrap();
        *x.graph_nodes(graph).unwrap().last().unwrap()
    }

    /// Conditional nodes (XLA's while and scan loops): bodies are graphs built into,
    /// copied into the executable graph, whose body nodes take new parameters through
    /// it; a body runs as its condition's default value says (no kernel changes it).
    #[test]
    fn conditional_bodies_run_by_their_default_values_and_update_through_the_exec() {
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let [a, b, c, d] = [0; 4].map(|_| x.alloc(64).unwrap());
        x.memset(r(a, 64), 1, LEGACY, false).unwrap();
        x.memset(r(c, 64), 3, LEGACY, false).unwrap();
        let g = x.graph_create(0).unwrap();
        let other = x.graph_create(0).unwrap();
        let once = x.conditional_handle_create(g, 1, 0).unwrap();
        let never = x.conditional_handle_create(g, 0, 0).unwrap();
        // A handle of another graph, a WHILE of two bodies: refused.
        assert!(x
            .add_conditional_node(other, &[], once, condition_kind::WHILE, 1)
            .is_err());
        assert!(x
            .add_conditional_node(g, &[], once, condition_kind::WHILE, 2)
            .is_err());
        let (w, bodies) = x
            .add_conditional_node(g, &[], once, condition_kind::WHILE, 1)
            .unwrap();
        assert_eq!(x.node_type(g, w).unwrap(), node_type::CONDITIONAL);
        let in_body = copy_into(&mut x, bodies[0], b, a);
        let (_, skipped) = x
            .add_conditional_node(g, &[w], never, condition_kind::IF, 1)
            .unwrap();
        copy_into(&mut x, skipped[0], d, a);
        let exec = x.graph_instantiate(g, 0).unwrap();
        // A later change to the body graph does not reach the executable graph.
        copy_into(&mut x, bodies[0], d, a);
        x.graph_launch(exec, LEGACY).unwrap();
        assert_eq!(x.slice(b, 1).unwrap()[0], 1, "the WHILE body ran");
        assert_eq!(
            x.slice(d, 1).unwrap()[0],
            0,
            "the IF body did not, nor the later node"
        );
        // The body's copy node takes new parameters through the executable graph.
        let scratch = x.graph_create(0).unwrap();
        let new = copy_into(&mut x, scratch, d, c);
        x.node_copy_params((bodies[0], in_body), (scratch, new), Some(exec))
            .unwrap();
        x.graph_launch(exec, LEGACY).unwrap();
        assert_eq!(x.slice(d, 1).unwrap()[0], 3);
        // A node of a graph that is no body of the executable graph's: refused.
        let stray = copy_into(&mut x, other, d, c);
        assert!(x
            .node_copy_params((other, stray), (scratch, new), Some(exec))
            .is_err());
        // Bodies go with their graph.
        x.graph_destroy(g).unwrap();
        assert!(x.graph_nodes(bodies[0]).is_err());
        x.graph_launch(exec, LEGACY).unwrap();
    }

    #[test]
    fn the_default_pool_counts_stream_ordered_allocations() {
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let p = x.alloc_async(1000, None, LEGACY).unwrap();
        let q = x.alloc_async(24, None, LEGACY).unwrap();
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
                .unwrap(),
            1024
        );
        x.free_async(p, LEGACY).unwrap();
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
                .unwrap(),
            24
        );
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::USED_MEM_HIGH)
                .unwrap(),
            1024
        );
        x.pool_set_attribute(None, pool_attr::USED_MEM_HIGH, 0)
            .unwrap();
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::USED_MEM_HIGH)
                .unwrap(),
            24
        );
        assert!(x
            .pool_set_attribute(None, pool_attr::USED_MEM_CURRENT, 0)
            .is_err());
        x.pool_set_attribute(None, pool_attr::RELEASE_THRESHOLD, u64::MAX)
            .unwrap();
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::RELEASE_THRESHOLD)
                .unwrap(),
            u64::MAX
        );
        x.free_async(q, LEGACY).unwrap();
        assert_eq!(
            x.free_async(q, LEGACY).unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
    }

    #[test]
    fn a_made_pool_keeps_its_own_figures_and_its_maximum() {
        let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
        let pool = x.pool_create(4096, false).unwrap();
        let p = x.alloc_async(1000, Some(pool), LEGACY).unwrap();
        assert_eq!(
            x.pool_get_attribute(Some(pool), pool_attr::USED_MEM_CURRENT)
                .unwrap(),
            1000
        );
        assert_eq!(
            x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
                .unwrap(),
            0
        );
        // Past its maximum size: refused, and the pool is unchanged.
        assert_eq!(
            x.alloc_async(8192, Some(pool), LEGACY).unwrap_err(),
            CudaStatus::ErrorMemoryAllocation
        );
        x.pool_set_attribute(Some(pool), pool_attr::RELEASE_THRESHOLD, u64::MAX)
            .unwrap();
        let used = x.used_memory;
        x.free_async(p, LEGACY).unwrap();
        // Kept by the pool (its reserve), until trimmed.
        assert_eq!(x.used_memory, used);
        assert_eq!(
            x.pool_get_attribute(Some(pool), pool_attr::RESERVED_MEM_CURRENT)
                .unwrap(),
            1024
        );
        x.pool_trim_to(Some(pool), 0).unwrap();
        assert_eq!(
            x.pool_get_attribute(Some(pool), pool_attr::RESERVED_MEM_CURRENT)
                .unwrap(),
            0
        );
        assert_eq!(x.pool_get_access(Some(pool), 0).unwrap(), 3);
        // Destroyed with an allocation live: the allocation stays until freed.
        let q = x.alloc_async(24, Some(pool), LEGACY).unwrap();
        x.pool_destroy(pool).unwrap();
        assert_eq!(
            x.pool_get_attribute(Some(pool), pool_attr::USED_MEM_CURRENT)
                .unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
        assert_eq!(
            x.alloc_async(24, Some(pool), LEGACY).unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
        x.free_async(q, LEGACY).unwrap();
        assert_eq!(
            x.pool_destroy(pool).unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
    }
}
