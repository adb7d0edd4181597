//! Stream capture, graphs and stream-ordered memory requests.
//!
//! Graphs, executable graphs and nodes are named here (this session's counter, never
//! a driver pointer); a handle the guest did not get from this session, or one it has
//! destroyed, is refused with `cudaErrorInvalidValue` and logged. Stream-ordered
//! allocations are charged to the guest's quota and entered among its allocations
//! like `cudaMalloc`'s, so every range check and the clean-up at disconnect cover
//! them. A new allocation is zeroed in its stream's order (not at once: the pool may
//! hand back memory that earlier work on the stream still uses); inside a capture the
//! zeroing is a node of the graph, right after the allocation node, because the driver
//! hands a graph's memory out at each launch with whatever was in it: a node the
//! program did not ask for, the price of never showing it another tenant's bytes. On a
//! GPU that node is a kernel of the executor's own, not a memset: the driver refuses to
//! update an executable graph whose memset node would move to another graph's memory.
//!
//! Graph memory (an allocation node's) is charged from the capture that made it for
//! as long as anything holds it: its graph (still being captured, or finished), an
//! executable graph made of it, or the allocation being live: a launch of a graph that
//! does not free it itself makes it live (the guest may then use and free it), and
//! `cudaFree`, `cudaFreeAsync` or a launch of another graph's free node ends that.
//! When the last holder goes, the memory is refunded and the device's graph memory
//! trimmed (the driver caches freed graph memory for later launches), so the charge is
//! what the executor holds: the host-memory executor keeps graph memory exactly as
//! long, and a GPU maps no more than that (it maps at a launch; the charge is taken at
//! the capture, before anything can be taken). `cudaFree` of graph memory that is not
//! live is refused: CUDA lets it be freed outside its graph only once a launch made it
//! live. Captures still open when their stream is destroyed, a device is reset or the
//! session ends are ended, and their graphs destroyed.
//!
//! Copies through the socket cannot be captured (their bytes live in this worker's
//! buffers, not in memory the graph could read later): refused on a capturing stream.

use std::collections::{BTreeSet, HashMap, HashSet};

use tracing::warn;
use vmcuda_wire::graph::{
    node_type, update_result, ConditionalNodeMade, EdgeList, ExecUpdateResult,
    GraphAddConditionalNode, GraphAddNode, GraphNodeCopyParams, GraphNodeMade, PlainNode,
    StreamBeginCaptureToGraph, MAX_CONDITIONAL_BODIES,
};
use vmcuda_wire::graph::{
    CaptureGraph, DotText, GraphDebugDot, GraphDestroy, GraphExecDestroy, GraphExecHandle,
    GraphExecMade, GraphGetNodes, GraphHandle, GraphInstantiate, GraphLaunch, GraphMade,
    GraphNodeGetDependencies, GraphNodeHandle, GraphNodes, StreamBeginCapture, StreamEndCapture,
    StreamGetCaptureGraph, MAX_DOT_LEN,
};
use vmcuda_wire::op::{CallContext, DevicePtr, HandlerResult, StreamHandle};
use vmcuda_wire::op::{
    ConditionalHandle, GraphAddDependencies, GraphChildGraphNodeGetGraph, GraphClone,
    GraphConditionalHandleCreate, GraphCreate, GraphDestroyNode, GraphExecUpdate, GraphGetEdges,
    GraphGetRootNodes, GraphKernelNodeCopyAttributes, GraphKernelNodeGetAttribute,
    GraphKernelNodeGetParams, GraphKernelNodeSetAttribute, GraphKernelNodeSetParams,
    GraphNodeFindInClone, GraphNodeGetDependentNodes, GraphNodeGetEnabled, GraphNodeGetType,
    GraphNodeSetEnabled, GraphOps, GraphRemoveDependencies, GraphUpload, HostFunctionSignal,
    KernelNodeAttribute, KernelNodeParameters, LinkedNodes, NodeEnabled, NodeType,
    StreamUpdateCaptureDependencies,
};
use vmcuda_wire::CudaStatus;

use crate::executor::graph::{ExecGraph, ExecGraphExec, ExecNode, ExecPlainNode};
use crate::executor::{ExecStream, KernelShape};

use super::accounting::Allocation;
use super::graph_build::MAX_NODE_HANDLES;
use super::host_memory::{node_bytes, NodeCopy, GRAPH_NODE_BYTES};
use super::{nothing, Session};

pub(super) struct GraphEntry {
    pub(super) exec: ExecGraph,
    /// Handles given out for this graph's nodes, by the executor's node id.
    pub(super) nodes: HashMap<ExecNode, GraphNodeHandle>,
    /// Still being captured into (shown by `cudaStreamGetCaptureInfo`): readable, not
    /// the guest's to destroy or instantiate until its capture ends.
    pub(super) building: bool,
    /// The graph whose node owns this one (a child graph, a conditional body): it goes
    /// with that graph and is never the guest's to destroy.
    pub(super) owner: Option<GraphHandle>,
}

#[derive(Default)]
pub(super) struct GraphTables {
    pub(super) graphs: HashMap<GraphHandle, GraphEntry>,
    pub(super) execs: HashMap<GraphExecHandle, ExecGraphExec>,
    /// Every node handle given out: its graph and the executor's node id.
    pub(super) nodes: HashMap<GraphNodeHandle, (GraphHandle, ExecNode)>,
    /// The handles of graphs still being built, by the executor's graph id.
    pub(super) building: HashMap<ExecGraph, GraphHandle>,
    /// Graphs with memory nodes (allocation or free nodes), by the executor's graph id,
    /// for as long as the graph or an executable graph made of it lives.
    pub(super) memory: HashMap<ExecGraph, GraphMemory>,
    /// Graph memory, by the address its allocation node returned, for as long as
    /// anything holds it (see the module documentation).
    allocations: HashMap<DevicePtr, GraphAllocation>,
    /// The graph with memory nodes whose memory each executable graph holds: the one it
    /// was made of, or the last it was updated with (`cudaGraphExecUpdate`: its
    /// launches then use that graph's allocations, as the driver does).
    exec_graph: HashMap<GraphExecHandle, ExecGraph>,
    /// A capture was begun: the session's end and a device reset look for captures
    /// still open (and ask the executor nothing otherwise).
    captured: bool,
    /// Graphs being captured into that existed before (`cudaStreamBeginCaptureToGraph`):
    /// the guest's whatever the capture's end.
    pub(super) into_existing: HashSet<ExecGraph>,
    /// The graph each executable graph was made of (the nodes that name its nodes).
    pub(super) exec_source: HashMap<GraphExecHandle, GraphHandle>,
    /// Clones, and the graph each was cloned from.
    pub(super) clone_of: HashMap<GraphHandle, GraphHandle>,
    /// Conditional handles, and the graph each was made for.
    pub(super) conditionals: HashMap<u64, GraphHandle>,
    /// Host-function slots streams were told to wait on (this process's addresses).
    pub(super) host_function_slots: HashSet<u64>,
    /// The nodes host functions made in graphs: host nodes to the guest, whatever the
    /// executor made them of.
    pub(super) host_nodes: HashSet<(ExecGraph, ExecNode)>,
    /// Streams a capture was begun on and has not ended on. Only those end a capture
    /// when they go: ending one on a stream that merely joined it would invalidate the
    /// whole capture (the driver's rule), and a joined stream may go mid-capture.
    pub(super) capture_origins: HashSet<ExecStream>,
    /// Graphs moved into a child-graph node (ownership "move"): never instantiated on
    /// their own, as CUDA has it.
    pub(super) moved: HashSet<GraphHandle>,
    /// Conditional nodes' body graphs: their nodes are updated through the executable
    /// graphs made of the graph holding the conditional node (as XLA does for loop
    /// bodies), so they count as that graph's nodes there.
    pub(super) bodies: HashSet<GraphHandle>,
}

/// A graph's memory nodes, and whether the graph itself and how many executable graphs
/// made of it hold its allocations.
pub(super) struct GraphMemory {
    graph: bool,
    execs: u32,
    /// The addresses its allocation nodes returned.
    allocations: Vec<DevicePtr>,
    /// Other graphs' allocations its free nodes free, at each launch.
    frees: Vec<DevicePtr>,
}

impl GraphMemory {
    /// Whether executable graphs hold this memory.
    pub(super) fn held_by_execs(&self) -> bool {
        self.execs > 0
    }

    /// A graph being captured, with no memory node yet.
    fn capturing() -> GraphMemory {
        GraphMemory {
            graph: true,
            execs: 0,
            allocations: Vec::new(),
            frees: Vec::new(),
        }
    }
}

/// One allocation node's memory.
#[derive(Clone, Copy)]
pub(super) struct GraphAllocation {
    /// The graph whose allocation node made it.
    graph: ExecGraph,
    /// The bytes the guest asked for, and those charged for it (on `device`).
    size: u64,
    charged: u64,
    device: i32,
    /// A free node of its own graph frees it: it is never live past a launch, and the
    /// guest cannot reach it outside the graph.
    freed_in_graph: bool,
    /// A launch made it live, and nothing has freed it since.
    live: bool,
}

impl Session {
    pub(super) fn graph_entry(&self, graph: GraphHandle) -> Result<&GraphEntry, CudaStatus> {
        self.graph_tables.graphs.get(&graph).ok_or_else(|| {
            warn!(client = %self.client, graph = graph.0, "refused an unknown graph handle");
            CudaStatus::ErrorInvalidValue
        })
    }

    /// The guest's handles for `nodes` of `graph`, made on first sight.
    pub(super) fn node_handles(
        &mut self,
        graph: GraphHandle,
        nodes: Vec<ExecNode>,
    ) -> Vec<GraphNodeHandle> {
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let known = self.graph_tables.graphs[&graph].nodes.get(&node).copied();
            let handle = match known {
                Some(h) => h,
                None => {
                    let h = GraphNodeHandle(self.handles.fresh());
                    let entry = self.graph_tables.graphs.get_mut(&graph).expect("checked");
                    entry.nodes.insert(node, h);
                    self.graph_tables.nodes.insert(h, (graph, node));
                    h
                }
            };
            out.push(handle);
        }
        out
    }

    /// Name an executor graph for the guest, within its limit of objects.
    pub(super) fn name_graph(
        &mut self,
        exec: ExecGraph,
        building: bool,
    ) -> Result<GraphHandle, CudaStatus> {
        let have = self.graph_tables.graphs.len();
        self.accounts
            .check_count("graph", have, self.grant.max_streams)?;
        let handle = GraphHandle(self.handles.fresh());
        let entry = GraphEntry {
            exec,
            nodes: HashMap::new(),
            building,
            owner: None,
        };
        self.graph_tables.graphs.insert(handle, entry);
        if building {
            self.graph_tables.building.insert(exec, handle);
        }
        Ok(handle)
    }

    /// Forget a graph and its nodes' handles, and the graphs its nodes own.
    pub(super) fn forget_graph(&mut self, graph: GraphHandle) -> Option<GraphEntry> {
        let entry = self.graph_tables.graphs.remove(&graph)?;
        self.graph_host_released(entry.exec);
        for handle in entry.nodes.values() {
            self.graph_tables.nodes.remove(handle);
        }
        let tables = &mut self.graph_tables;
        tables.clone_of.remove(&graph);
        tables.moved.remove(&graph);
        tables.bodies.remove(&graph);
        tables.conditionals.retain(|_, g| *g != graph);
        let owned: Vec<GraphHandle> = tables
            .graphs
            .iter()
            .filter(|(_, e)| e.owner == Some(graph))
            .map(|(&h, _)| h)
            .collect();
        for h in owned {
            self.forget_graph(h);
        }
        Some(entry)
    }

    /// A finished graph's executor id; one still being built is refused.
    pub(super) fn finished_graph(&self, graph: GraphHandle) -> Result<ExecGraph, CudaStatus> {
        let entry = self.graph_entry(graph)?;
        if entry.building {
            warn!(client = %self.client, graph = graph.0,
                "refused a graph whose capture has not ended");
            return Err(CudaStatus::ErrorIllegalState);
        }
        Ok(entry.exec)
    }

    /// Destroy every graph and executable graph, ending the captures still open first,
    /// and free the graph memory still live (the session ends): everything is refunded.
    pub(super) fn graphs_drop_all(&mut self) {
        // Streams waiting for a host function the guest will not run now go on.
        for here in std::mem::take(&mut self.graph_tables.host_function_slots) {
            crate::shared_memory::release_host_function(&self.shared, here);
        }
        self.end_all_captures(None);
        self.graph_host_release_all();
        let tables = std::mem::take(&mut self.graph_tables);
        for (_, exec) in tables.execs {
            let _ = self.exec.graph_exec_destroy(exec);
        }
        for (_, entry) in tables.graphs.into_iter().filter(|(_, e)| !e.building) {
            let _ = self.exec.graph_destroy(entry.exec);
        }
        let mut devices = BTreeSet::new();
        for (ptr, a) in tables.allocations {
            if a.live {
                let _ = self.exec.free(ptr);
            }
            self.accounts.remove_allocation(ptr);
            self.accounts.refund(a.charged);
            devices.insert(a.device);
        }
        self.trim_graph_memory(None, devices);
    }

    /// Destroy every graph and executable graph and end every capture (`device` is
    /// about to be reset: the guest loses them all, those of its other devices too).
    /// The graph memory of `device` is refunded (the reset frees it); that of other
    /// devices goes as its holders do, and what is live there stays until freed.
    pub(super) fn graphs_reset(&mut self, device: i32) {
        self.end_all_captures(Some(device));
        self.graph_host_release_all();
        let tables = std::mem::take(&mut self.graph_tables);
        for (_, exec) in tables.execs {
            let _ = self.exec.graph_exec_destroy(exec);
        }
        for (_, entry) in tables.graphs.into_iter().filter(|(_, e)| !e.building) {
            let _ = self.exec.graph_destroy(entry.exec);
        }
        let mut others = Vec::new();
        for (ptr, a) in tables.allocations {
            if a.device == device {
                self.accounts.remove_allocation(ptr);
                self.accounts.refund(a.charged);
            } else {
                self.graph_tables.allocations.insert(ptr, a);
                others.push(ptr);
            }
        }
        self.graph_memory_sweep(Some(device), others);
    }

    /// End every capture still open on the guest's streams and destroy what it made.
    fn end_all_captures(&mut self, current: Option<i32>) {
        if !self.graph_tables.captured {
            return;
        }
        let origins: Vec<ExecStream> = self.graph_tables.capture_origins.iter().copied().collect();
        for s in origins {
            if self.exec.stream_capturing(s).unwrap_or(false) {
                self.abandon_capture(current, s);
            }
        }
    }

    /// End the capture begun on `s` and destroy the graph it made, with its memory (its
    /// stream goes, or the session ends); a stream that only joined a capture leaves it
    /// to its origin.
    pub(super) fn abandon_capture(&mut self, current: Option<i32>, s: ExecStream) {
        if !self.graph_tables.capture_origins.remove(&s) {
            return; // it only joined a capture, which its origin ends
        }
        let Ok((building, _)) = self.exec.capture_graph(s) else {
            return;
        };
        let made = self.exec.end_capture(s);
        if made.is_err() && self.exec.capture_graph(s).is_ok_and(|(c, _)| c == building) {
            return;
        }
        if self.graph_tables.into_existing.remove(&building) {
            // The guest's graph before the capture, and still.
            if let Some(h) = self.graph_tables.building.remove(&building) {
                if let Some(entry) = self.graph_tables.graphs.get_mut(&h) {
                    entry.building = false;
                }
            }
            return;
        }
        if let Some(h) = self.graph_tables.building.remove(&building) {
            self.forget_graph(h);
        }
        if let Ok(graph) = made {
            let _ = self.exec.graph_destroy(graph);
        }
        self.graph_dropped(current, building);
    }

    /// Note graph memory just allocated by a node of the capture building `graph`, its
    /// `charged` bytes already counted against the quota.
    pub(super) fn graph_allocation_add(
        &mut self,
        graph: ExecGraph,
        ptr: DevicePtr,
        size: u64,
        charged: u64,
        device: i32,
    ) {
        let memory = self
            .graph_tables
            .memory
            .entry(graph)
            .or_insert_with(GraphMemory::capturing);
        memory.allocations.push(ptr);
        let allocation = GraphAllocation {
            graph,
            size,
            charged,
            device,
            freed_in_graph: false,
            live: false,
        };
        self.graph_tables.allocations.insert(ptr, allocation);
    }

    /// The graph memory at `ptr`, if it is graph memory.
    pub(super) fn graph_allocation(&self, ptr: DevicePtr) -> Option<GraphAllocation> {
        self.graph_tables.allocations.get(&ptr).copied()
    }

    /// Whether the guest may free `ptr` outside a graph: anything but graph memory that
    /// is not live (never launched, or already freed): CUDA allows only that.
    pub(super) fn graph_memory_freeable(&self, ptr: DevicePtr) -> bool {
        self.graph_allocation(ptr).is_none_or(|a| a.live)
    }

    /// The guest freed `ptr` outside a graph (the executor has): if it is graph memory,
    /// its life ends, and the memory goes when nothing else holds it.
    pub(super) fn graph_memory_freed(&mut self, current: i32, ptr: DevicePtr) {
        if let Some(a) = self.graph_tables.allocations.get_mut(&ptr) {
            a.live = false;
            self.graph_memory_sweep(Some(current), vec![ptr]);
        }
    }

    /// A free node of the capture on `s` for `ptr`, graph memory the guest holds: its
    /// own graph's allocation (then never live past a launch, and no more the guest's
    /// to reach) or another's (whose life a launch of this graph ends). An allocation
    /// is freed at most once in a graph, and one its own graph frees by no other.
    pub(super) fn graph_free_node(
        &mut self,
        s: ExecStream,
        ptr: DevicePtr,
    ) -> Result<(), CudaStatus> {
        let (graph, _) = self.exec.capture_graph(s)?;
        let a = self
            .graph_allocation(ptr)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let own = a.graph == graph;
        let freed_here = self
            .graph_tables
            .memory
            .get(&graph)
            .is_some_and(|m| m.frees.contains(&ptr));
        if a.freed_in_graph || freed_here {
            warn!(client = %self.client, ptr = format_args!("{ptr:#x}"),
                "refused a second free node for a graph allocation");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.exec.free_async(ptr, s)?;
        if own {
            if let Some(a) = self.graph_tables.allocations.get_mut(&ptr) {
                a.freed_in_graph = true;
            }
            self.accounts.remove_allocation(ptr);
        } else {
            let memory = self
                .graph_tables
                .memory
                .entry(graph)
                .or_insert_with(GraphMemory::capturing);
            memory.frees.push(ptr);
        }
        Ok(())
    }

    /// `graph` is gone (destroyed, or its capture failed): its memory goes where no
    /// executable graph made of it holds it and it is not live.
    fn graph_dropped(&mut self, current: Option<i32>, graph: ExecGraph) {
        self.graph_host_released(graph);
        let Some(memory) = self.graph_tables.memory.get_mut(&graph) else {
            return;
        };
        memory.graph = false;
        let ptrs = memory.allocations.clone();
        self.graph_memory_sweep(current, ptrs);
    }

    /// The executable graph `exec` is gone: its graph's memory goes where nothing else
    /// holds it.
    fn exec_dropped(&mut self, current: i32, exec: GraphExecHandle) {
        let Some(graph) = self.graph_tables.exec_graph.remove(&exec) else {
            return;
        };
        self.graph_let_go(Some(current), graph);
    }

    /// `exec` was updated with `graph`: it holds that graph's memory now, if it has
    /// memory nodes, and no longer the memory of the graph it held before.
    fn exec_updated(&mut self, current: i32, exec: GraphExecHandle, graph: ExecGraph) {
        let before = match self.graph_tables.memory.get_mut(&graph) {
            Some(memory) => {
                memory.execs = memory.execs.saturating_add(1);
                self.graph_tables.exec_graph.insert(exec, graph)
            }
            None => self.graph_tables.exec_graph.remove(&exec),
        };
        if let Some(before) = before {
            self.graph_let_go(Some(current), before);
        }
    }

    /// `child` became a child-graph node of `parent` (`parent_exec`): the node owns
    /// it, and its memory nodes are the parent's from then on (held and launched with
    /// it, as the driver has them).
    pub(super) fn child_moved(
        &mut self,
        parent: GraphHandle,
        parent_exec: ExecGraph,
        child: GraphHandle,
    ) {
        let tables = &mut self.graph_tables;
        let Some(entry) = tables.graphs.get_mut(&child) else {
            return;
        };
        entry.owner = Some(parent);
        tables.moved.insert(child);
        let Some(moved) = tables.memory.remove(&entry.exec) else {
            return;
        };
        for ptr in &moved.allocations {
            if let Some(a) = tables.allocations.get_mut(ptr) {
                a.graph = parent_exec;
            }
        }
        let memory = tables
            .memory
            .entry(parent_exec)
            .or_insert_with(GraphMemory::capturing);
        memory.allocations.extend(moved.allocations);
        memory.frees.extend(moved.frees);
    }

    /// An executable graph no longer holds `graph`'s memory: it goes where nothing
    /// else holds it.
    fn graph_let_go(&mut self, current: Option<i32>, graph: ExecGraph) {
        let Some(memory) = self.graph_tables.memory.get_mut(&graph) else {
            return;
        };
        memory.execs = memory.execs.saturating_sub(1);
        let ptrs = memory.allocations.clone();
        self.graph_memory_sweep(current, ptrs);
    }

    /// `exec` ran to the end: the allocations its graph does not free itself are live
    /// (the guest's to use and free), and those of other graphs it frees are not.
    fn graph_launched(&mut self, current: i32, exec: GraphExecHandle) {
        let Some(graph) = self.graph_tables.exec_graph.get(&exec) else {
            return;
        };
        let Some(memory) = self.graph_tables.memory.get(graph) else {
            return;
        };
        let (allocations, frees) = (memory.allocations.clone(), memory.frees.clone());
        for ptr in allocations {
            let Some(a) = self.graph_tables.allocations.get_mut(&ptr) else {
                continue;
            };
            if a.freed_in_graph {
                continue;
            }
            a.live = true;
            if !self.accounts.allocations.contains_key(&ptr) {
                let allocation = Allocation {
                    size: a.size,
                    charged: 0,
                    device: a.device,
                    pooled: false,
                    made_pool: None,
                };
                self.accounts.add_allocation(ptr, allocation);
            }
        }
        for &ptr in &frees {
            if let Some(a) = self.graph_tables.allocations.get_mut(&ptr) {
                if a.live {
                    a.live = false;
                    self.accounts.remove_allocation(ptr);
                }
            }
        }
        self.graph_memory_sweep(Some(current), frees);
    }

    /// Refund the graph memory among `ptrs` that nothing holds any more (the executor
    /// has let it go), and trim the devices it was on.
    fn graph_memory_sweep(&mut self, current: Option<i32>, ptrs: Vec<DevicePtr>) {
        let tables = &mut self.graph_tables;
        let mut devices = BTreeSet::new();
        for ptr in ptrs {
            let Some(a) = tables.allocations.get(&ptr).copied() else {
                continue;
            };
            let held = a.live
                || tables
                    .memory
                    .get(&a.graph)
                    .is_some_and(|m| m.graph || m.execs > 0);
            if held {
                continue;
            }
            tables.allocations.remove(&ptr);
            self.accounts.remove_allocation(ptr);
            self.accounts.refund(a.charged);
            devices.insert(a.device);
        }
        tables.memory.retain(|_, m| m.graph || m.execs > 0);
        self.trim_graph_memory(current, devices);
    }

    /// Give the graph memory cached on `devices` back to them, then make `current`
    /// (where known) the current device again.
    fn trim_graph_memory(&mut self, current: Option<i32>, devices: BTreeSet<i32>) {
        if devices.is_empty() {
            return;
        }
        for device in devices {
            if Some(device) != current && self.exec.set_device(device).is_err() {
                continue;
            }
            let _ = self.exec.graph_mem_trim();
        }
        if let Some(device) = current {
            let _ = self.exec.set_device(device);
        }
    }

    /// Refuse a copy through the socket on a capturing stream.
    pub(super) fn refuse_if_capturing(&mut self, stream: ExecStream) -> Result<(), CudaStatus> {
        if self.exec.stream_capturing(stream)? {
            warn!(client = %self.client, stream,
                "refused a copy through the socket on a capturing stream");
            return Err(CudaStatus::ErrorStreamCaptureUnsupported);
        }
        Ok(())
    }

    pub(super) fn graph_exec(&self, exec: GraphExecHandle) -> Result<ExecGraphExec, CudaStatus> {
        self.graph_tables.execs.get(&exec).copied().ok_or_else(|| {
            warn!(client = %self.client, exec = exec.0, "refused an unknown executable graph");
            CudaStatus::ErrorInvalidValue
        })
    }
}

impl GraphOps for Session {
    fn stream_begin_capture(
        &mut self,
        _: &CallContext,
        req: StreamBeginCapture,
        _: &[u8],
    ) -> HandlerResult<()> {
        if req.stream == StreamHandle::LEGACY {
            return Err(CudaStatus::ErrorStreamCaptureUnsupported);
        }
        let s = self.handles.stream(req.stream)?;
        self.exec.begin_capture(s)?;
        self.graph_tables.captured = true;
        self.graph_tables.capture_origins.insert(s);
        nothing()
    }

    fn stream_get_capture_graph(
        &mut self,
        _: &CallContext,
        req: StreamGetCaptureGraph,
        _: &[u8],
    ) -> HandlerResult<CaptureGraph> {
        let s = self.handles.stream(req.stream)?;
        let (graph, (deps, edges)) = self.exec.capture_graph(s)?;
        let handle = match self.graph_tables.building.get(&graph) {
            Some(&h) => h,
            None => self.name_graph(graph, true)?,
        };
        let dependencies = self.node_handles(handle, deps);
        Ok((
            CaptureGraph {
                graph: handle,
                dependencies,
                edges: edges.iter().map(|e| e.raw()).collect(),
            },
            Vec::new(),
        ))
    }

    fn stream_end_capture(
        &mut self,
        ctx: &CallContext,
        req: StreamEndCapture,
        _: &[u8],
    ) -> HandlerResult<GraphMade> {
        let s = self.handles.stream(req.stream)?;
        self.graph_tables.capture_origins.remove(&s);
        // A graph the guest saw being built keeps its handle, or goes with a failure.
        let shown = match self.graph_tables.building.is_empty() {
            true => None,
            false => self.exec.capture_graph(s).ok().and_then(|(g, _)| {
                let h = self.graph_tables.building.remove(&g)?;
                Some((g, h))
            }),
        };
        let building = self.exec.capture_graph(s).ok().map(|(g, _)| g);
        let ended = self.exec.end_capture(s);
        if let Some(g) = building.filter(|g| self.graph_tables.into_existing.contains(g)) {
            // A capture into a graph the guest had: it keeps its graph and handle
            // whatever the end (unless the capture goes on, ended from a stream that
            // only joined it).
            if ended.is_err() && self.exec.capture_graph(s).is_ok_and(|(c, _)| c == g) {
                if let Some((g, h)) = shown {
                    self.graph_tables.building.insert(g, h);
                }
                return Err(ended.expect_err("checked"));
            }
            self.graph_tables.into_existing.remove(&g);
            let h = match shown {
                Some((_, h)) => h,
                None => return ended.and(Err(CudaStatus::ErrorIllegalState)),
            };
            if let Some(entry) = self.graph_tables.graphs.get_mut(&h) {
                entry.building = false;
            }
            ended?;
            if req.invalidated {
                return Err(CudaStatus::ErrorStreamCaptureInvalidated);
            }
            return Ok((GraphMade { graph: h }, Vec::new()));
        }
        let graph = match ended {
            Ok(graph) => graph,
            Err(e) => {
                if let Some((_, h)) = shown {
                    self.forget_graph(h);
                }
                // No graph came of it: its allocation nodes' memory goes back, unless
                // the capture goes on (ended from a stream that only joined it).
                if let Some(g) = building {
                    let going_on = self.exec.capture_graph(s).is_ok_and(|(c, _)| c == g);
                    if !going_on {
                        self.graph_dropped(Some(ctx.device), g);
                    }
                }
                return Err(e);
            }
        };
        if let Some(g) = building.filter(|&g| g != graph) {
            // The executor named the graph anew: the memory follows it.
            self.graph_host_renamed(g, graph);
            if let Some(memory) = self.graph_tables.memory.remove(&g) {
                for ptr in &memory.allocations {
                    if let Some(a) = self.graph_tables.allocations.get_mut(ptr) {
                        a.graph = graph;
                    }
                }
                self.graph_tables.memory.insert(graph, memory);
            }
        }
        if let Some((g, h)) = shown {
            if g == graph && !req.invalidated {
                let entry = self
                    .graph_tables
                    .graphs
                    .get_mut(&h)
                    .expect("shown graphs are kept");
                entry.building = false;
                return Ok((GraphMade { graph: h }, Vec::new()));
            }
            self.forget_graph(h);
        }
        if req.invalidated {
            // The guest refused a call of this capture, which CUDA invalidates.
            let _ = self.exec.graph_destroy(graph);
            self.graph_dropped(Some(ctx.device), graph);
            return Err(CudaStatus::ErrorStreamCaptureInvalidated);
        }
        match self.name_graph(graph, false) {
            Ok(handle) => Ok((GraphMade { graph: handle }, Vec::new())),
            Err(e) => {
                let _ = self.exec.graph_destroy(graph);
                self.graph_dropped(Some(ctx.device), graph);
                Err(e)
            }
        }
    }

    fn graph_instantiate(
        &mut self,
        _: &CallContext,
        req: GraphInstantiate,
        _: &[u8],
    ) -> HandlerResult<GraphExecMade> {
        let graph = self.finished_graph(req.graph)?;
        if self.graph_tables.moved.contains(&req.graph) {
            warn!(client = %self.client, graph = req.graph.0,
                "refused to instantiate a graph moved into a node");
            return Err(CudaStatus::ErrorNotSupported);
        }
        self.accounts.check_count(
            "executable graph",
            self.graph_tables.execs.len(),
            self.grant.max_streams,
        )?;
        let kept = self.exec_host_charge(req.graph)?;
        let exec = match self.exec.graph_instantiate(graph, req.flags) {
            Ok(exec) => exec,
            Err(e) => {
                self.exec_host_made(None, kept);
                return Err(e);
            }
        };
        let handle = GraphExecHandle(self.handles.fresh());
        self.exec_host_made(Some(handle), kept);
        self.exec_host_nodes(handle, graph);
        self.graph_tables.execs.insert(handle, exec);
        self.graph_tables.exec_source.insert(handle, req.graph);
        if let Some(memory) = self.graph_tables.memory.get_mut(&graph) {
            memory.execs = memory.execs.saturating_add(1);
            self.graph_tables.exec_graph.insert(handle, graph);
        }
        Ok((GraphExecMade { exec: handle }, Vec::new()))
    }

    fn graph_launch(&mut self, ctx: &CallContext, req: GraphLaunch, _: &[u8]) -> HandlerResult<()> {
        let exec = self.graph_exec(req.exec)?;
        let s = self.handles.stream(req.stream)?;
        self.exec.graph_launch(exec, s)?;
        self.graph_launched(ctx.device, req.exec);
        nothing()
    }

    fn graph_destroy(
        &mut self,
        ctx: &CallContext,
        req: GraphDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let graph = self.finished_graph(req.graph)?;
        if self.graph_entry(req.graph)?.owner.is_some() {
            warn!(client = %self.client, graph = req.graph.0,
                "refused to destroy a graph that a node owns");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.forget_graph(req.graph);
        self.exec.graph_destroy(graph)?;
        self.graph_dropped(Some(ctx.device), graph);
        nothing()
    }

    fn graph_exec_destroy(
        &mut self,
        ctx: &CallContext,
        req: GraphExecDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let exec = self.graph_exec(req.exec)?;
        self.graph_tables.execs.remove(&req.exec);
        self.graph_tables.exec_source.remove(&req.exec);
        let r = self.exec.graph_exec_destroy(exec);
        self.exec_host_released(req.exec);
        self.exec_dropped(ctx.device, req.exec);
        r?;
        nothing()
    }

    fn graph_get_nodes(
        &mut self,
        _: &CallContext,
        req: GraphGetNodes,
        _: &[u8],
    ) -> HandlerResult<GraphNodes> {
        let graph = self.graph_entry(req.graph)?.exec;
        let nodes = self.exec.graph_nodes(graph)?;
        let nodes = self.node_handles(req.graph, nodes);
        Ok((GraphNodes { nodes }, Vec::new()))
    }

    fn graph_node_get_dependencies(
        &mut self,
        _: &CallContext,
        req: GraphNodeGetDependencies,
        _: &[u8],
    ) -> HandlerResult<LinkedNodes> {
        let Some(&(graph, node)) = self.graph_tables.nodes.get(&req.node) else {
            warn!(client = %self.client, node = req.node.0, "refused an unknown graph node");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let exec_graph = self.graph_entry(graph)?.exec;
        let linked = self.exec.node_dependencies(exec_graph, node)?;
        Ok((self.linked_nodes(graph, linked), Vec::new()))
    }

    fn graph_create(
        &mut self,
        _: &CallContext,
        req: GraphCreate,
        _: &[u8],
    ) -> HandlerResult<GraphMade> {
        if req.flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let graph = self.exec.graph_create(0)?;
        match self.name_graph(graph, false) {
            Ok(handle) => Ok((GraphMade { graph: handle }, Vec::new())),
            Err(e) => {
                let _ = self.exec.graph_destroy(graph);
                Err(e)
            }
        }
    }

    fn stream_begin_capture_to_graph(
        &mut self,
        _: &CallContext,
        req: StreamBeginCaptureToGraph,
        _: &[u8],
    ) -> HandlerResult<()> {
        if req.stream == StreamHandle::LEGACY {
            return Err(CudaStatus::ErrorStreamCaptureUnsupported);
        }
        let s = self.handles.stream(req.stream)?;
        let graph = self.editable_graph(req.graph)?;
        let deps = self.nodes_in(req.graph, &req.dependencies)?;
        let edges = self.checked_edges(&req.edges, deps.len())?;
        self.exec.begin_capture_to_graph(s, graph, &deps, &edges)?;
        let tables = &mut self.graph_tables;
        tables.captured = true;
        tables.capture_origins.insert(s);
        tables.into_existing.insert(graph);
        tables.building.insert(graph, req.graph);
        if let Some(entry) = tables.graphs.get_mut(&req.graph) {
            entry.building = true;
        }
        nothing()
    }

    fn graph_add_node(
        &mut self,
        _: &CallContext,
        req: GraphAddNode,
        _: &[u8],
    ) -> HandlerResult<GraphNodeMade> {
        let graph = self.extendable_graph(req.graph)?;
        let deps = self.nodes_in(req.graph, &req.dependencies)?;
        let plain = match req.node {
            PlainNode::Empty => ExecPlainNode::Empty,
            PlainNode::ChildGraph(child) => {
                let child = self.finished_graph(child)?;
                self.refuse_memory_nodes(child, "a child graph")?;
                ExecPlainNode::ChildGraph(child)
            }
            PlainNode::EventRecord(e) => ExecPlainNode::EventRecord(self.handles.event(e)?),
            PlainNode::EventWait(e) => ExecPlainNode::EventWait(self.handles.event(e)?),
            PlainNode::MovedChildGraph(child) => {
                ExecPlainNode::MovedChildGraph(self.movable_graph(req.graph, child)?)
            }
        };
        // A child-graph node copies its graph, nodes and all.
        let kept = match req.node {
            PlainNode::ChildGraph(child) => GRAPH_NODE_BYTES + self.graph_host_bytes(child),
            _ => GRAPH_NODE_BYTES,
        };
        let charge = self.graph_node_charge(graph, kept)?;
        let made = self.exec.add_plain_node(graph, &deps, plain);
        let node = self.node_made(Some(charge), made)?;
        self.node_kept(charge, node);
        if let PlainNode::MovedChildGraph(child) = req.node {
            self.child_moved(req.graph, graph, child);
        }
        let node = self.node_handles(req.graph, vec![node])[0];
        Ok((GraphNodeMade { node }, Vec::new()))
    }

    fn graph_node_get_type(
        &mut self,
        _: &CallContext,
        req: GraphNodeGetType,
        _: &[u8],
    ) -> HandlerResult<NodeType> {
        let (_, graph, node) = self.node_ref(req.node)?;
        let ty = match self.graph_tables.host_nodes.contains(&(graph, node)) {
            true => node_type::HOST,
            false => self.exec.node_type(graph, node)?,
        };
        Ok((NodeType { ty }, Vec::new()))
    }

    fn graph_kernel_node_set_attribute(
        &mut self,
        _: &CallContext,
        req: GraphKernelNodeSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        let (graph, node) = self.kernel_node_ref(req.node)?;
        let value = self.checked_attr_value(req.attr, &req.value)?;
        self.exec
            .kernel_node_set_attribute(graph, node, req.attr, &value)?;
        nothing()
    }

    fn graph_kernel_node_get_attribute(
        &mut self,
        _: &CallContext,
        req: GraphKernelNodeGetAttribute,
        _: &[u8],
    ) -> HandlerResult<KernelNodeAttribute> {
        let (graph, node) = self.kernel_node_ref(req.node)?;
        let value = self.exec.kernel_node_get_attribute(graph, node, req.attr)?;
        Ok((
            KernelNodeAttribute {
                value: value.to_vec(),
            },
            Vec::new(),
        ))
    }

    fn graph_kernel_node_copy_attributes(
        &mut self,
        _: &CallContext,
        req: GraphKernelNodeCopyAttributes,
        _: &[u8],
    ) -> HandlerResult<()> {
        let dst = self.kernel_node_ref(req.dst)?;
        let src = self.kernel_node_ref(req.src)?;
        self.exec.kernel_node_copy_attributes(dst, src)?;
        nothing()
    }

    fn graph_add_dependencies(
        &mut self,
        _: &CallContext,
        req: GraphAddDependencies,
        _: &[u8],
    ) -> HandlerResult<()> {
        let graph = self.finished_graph(req.graph)?;
        let from = self.nodes_in(req.graph, &req.from)?;
        let to = self.nodes_in(req.graph, &req.to)?;
        let edges = self.checked_edges(&req.edges, from.len())?;
        self.exec
            .change_dependencies(graph, &from, &to, &edges, true)?;
        nothing()
    }

    fn graph_remove_dependencies(
        &mut self,
        _: &CallContext,
        req: GraphRemoveDependencies,
        _: &[u8],
    ) -> HandlerResult<()> {
        let graph = self.finished_graph(req.graph)?;
        let from = self.nodes_in(req.graph, &req.from)?;
        let to = self.nodes_in(req.graph, &req.to)?;
        let edges = self.checked_edges(&req.edges, from.len())?;
        self.exec
            .change_dependencies(graph, &from, &to, &edges, false)?;
        nothing()
    }

    fn graph_get_edges(
        &mut self,
        _: &CallContext,
        req: GraphGetEdges,
        _: &[u8],
    ) -> HandlerResult<EdgeList> {
        let graph = self.graph_entry(req.graph)?.exec;
        let (from, to, data) = self.exec.graph_edges(graph)?;
        let from = self.node_handles(req.graph, from);
        let to = self.node_handles(req.graph, to);
        let data = data.iter().map(|e| e.raw()).collect();
        Ok((EdgeList { from, to, data }, Vec::new()))
    }

    fn graph_get_root_nodes(
        &mut self,
        _: &CallContext,
        req: GraphGetRootNodes,
        _: &[u8],
    ) -> HandlerResult<GraphNodes> {
        let graph = self.graph_entry(req.graph)?.exec;
        let roots = self.exec.root_nodes(graph)?;
        let nodes = self.node_handles(req.graph, roots);
        Ok((GraphNodes { nodes }, Vec::new()))
    }

    fn graph_node_get_dependent_nodes(
        &mut self,
        _: &CallContext,
        req: GraphNodeGetDependentNodes,
        _: &[u8],
    ) -> HandlerResult<LinkedNodes> {
        let (handle, graph, node) = self.node_ref(req.node)?;
        let linked = self.exec.dependent_nodes(graph, node)?;
        Ok((self.linked_nodes(handle, linked), Vec::new()))
    }

    fn graph_destroy_node(
        &mut self,
        _: &CallContext,
        req: GraphDestroyNode,
        _: &[u8],
    ) -> HandlerResult<()> {
        let (handle, graph, node) = self.node_ref(req.node)?;
        self.finished_graph(handle)?;
        let ty = self.exec.node_type(graph, node)?;
        if ty == node_type::MEM_ALLOC || ty == node_type::MEM_FREE {
            warn!(client = %self.client, "refused to destroy a memory node");
            return Err(CudaStatus::ErrorNotSupported);
        }
        if ty == node_type::GRAPH || ty == node_type::CONDITIONAL {
            // The graphs it owns go with it.
            let owned: Vec<GraphHandle> = self
                .graph_tables
                .graphs
                .iter()
                .filter(|(_, e)| e.owner == Some(handle))
                .map(|(&h, _)| h)
                .collect();
            for h in owned {
                self.forget_graph(h);
            }
        }
        self.exec.destroy_node(graph, node)?;
        // What the node kept goes with it, not with its graph.
        self.graph_node_destroyed(graph, node);
        self.graph_tables.nodes.remove(&req.node);
        if let Some(entry) = self.graph_tables.graphs.get_mut(&handle) {
            entry.nodes.remove(&node);
        }
        nothing()
    }

    fn graph_clone(
        &mut self,
        _: &CallContext,
        req: GraphClone,
        _: &[u8],
    ) -> HandlerResult<GraphMade> {
        let graph = self.finished_graph(req.original)?;
        self.refuse_memory_nodes(graph, "a clone")?;
        // A clone keeps copies of all the original's nodes.
        let kept = self.graph_host_bytes(req.original);
        self.accounts.host.charge(kept, "graph clone")?;
        let named =
            self.exec
                .graph_clone(graph)
                .and_then(|clone| match self.name_graph(clone, false) {
                    Ok(h) => Ok((clone, h)),
                    Err(e) => {
                        let _ = self.exec.graph_destroy(clone);
                        Err(e)
                    }
                });
        let (clone, handle) = match named {
            Ok(made) => made,
            Err(e) => {
                self.accounts.host.refund(kept);
                return Err(e);
            }
        };
        self.graph_host_charged(clone, kept);
        self.graph_host_cloned(graph, clone);
        self.graph_tables.clone_of.insert(handle, req.original);
        // The clone's copies of host nodes are host nodes too.
        let host_nodes: Vec<ExecNode> = self
            .graph_tables
            .host_nodes
            .iter()
            .filter(|(g, _)| *g == graph)
            .map(|&(_, n)| n)
            .collect();
        for n in host_nodes {
            if let Ok(copy) = self.exec.find_in_clone(graph, n, clone) {
                self.graph_tables.host_nodes.insert((clone, copy));
            }
        }
        Ok((GraphMade { graph: handle }, Vec::new()))
    }

    fn graph_node_find_in_clone(
        &mut self,
        _: &CallContext,
        req: GraphNodeFindInClone,
        _: &[u8],
    ) -> HandlerResult<GraphNodeMade> {
        let (original, graph, node) = self.node_ref(req.original)?;
        if self.graph_tables.clone_of.get(&req.clone) != Some(&original) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let clone = self.graph_entry(req.clone)?.exec;
        let found = self.exec.find_in_clone(graph, node, clone)?;
        let node = self.node_handles(req.clone, vec![found])[0];
        Ok((GraphNodeMade { node }, Vec::new()))
    }

    fn graph_exec_update(
        &mut self,
        ctx: &CallContext,
        req: GraphExecUpdate,
        _: &[u8],
    ) -> HandlerResult<ExecUpdateResult> {
        let exec = self.graph_exec(req.exec)?;
        let graph = self.finished_graph(req.graph)?;
        // The executable graph takes copies of the graph's nodes' parameters.
        let charge = self.exec_update_charge(req.exec, req.graph)?;
        let updated = self.exec.exec_update(exec, graph);
        let done = matches!(updated, Ok((update_result::SUCCESS, _, _)));
        self.exec_update_done(charge, done.then_some(graph));
        let (result, error_node, error_from_node) = updated?;
        if result == update_result::SUCCESS {
            self.exec_updated(ctx.device, req.exec, graph);
        }
        let name = |s: &mut Self, n: ExecNode| match n {
            0 => GraphNodeHandle(0),
            n => s.node_handles(req.graph, vec![n])[0],
        };
        let result = ExecUpdateResult {
            result,
            error_node: name(self, error_node),
            error_from_node: name(self, error_from_node),
        };
        Ok((result, Vec::new()))
    }

    fn graph_node_set_enabled(
        &mut self,
        _: &CallContext,
        req: GraphNodeSetEnabled,
        _: &[u8],
    ) -> HandlerResult<()> {
        let (exec, node) = self.exec_node(req.exec, req.node)?;
        self.exec.node_set_enabled(exec, node, req.enabled != 0)?;
        nothing()
    }

    fn graph_node_get_enabled(
        &mut self,
        _: &CallContext,
        req: GraphNodeGetEnabled,
        _: &[u8],
    ) -> HandlerResult<NodeEnabled> {
        let (exec, node) = self.exec_node(req.exec, req.node)?;
        let enabled = u32::from(self.exec.node_enabled(exec, node)?);
        Ok((NodeEnabled { enabled }, Vec::new()))
    }

    fn graph_upload(&mut self, _: &CallContext, req: GraphUpload, _: &[u8]) -> HandlerResult<()> {
        let exec = self.graph_exec(req.exec)?;
        let s = self.handles.stream(req.stream)?;
        self.exec.graph_upload(exec, s)?;
        nothing()
    }

    fn graph_child_graph_node_get_graph(
        &mut self,
        _: &CallContext,
        req: GraphChildGraphNodeGetGraph,
        _: &[u8],
    ) -> HandlerResult<GraphMade> {
        let (owner, graph, node) = self.node_ref(req.node)?;
        let child = self.exec.child_graph(graph, node)?;
        let graph = self.owned_graph(child, owner)?;
        Ok((GraphMade { graph }, Vec::new()))
    }

    fn graph_node_copy_params(
        &mut self,
        _: &CallContext,
        req: GraphNodeCopyParams,
        _: &[u8],
    ) -> HandlerResult<()> {
        let (dst_graph, dst_exec, dst) = self.node_ref(req.dst)?;
        let (_, src_exec, src) = self.node_ref(req.src)?;
        let exec = match req.exec {
            Some(e) => Some(self.exec_node(e, req.dst)?.0),
            None => {
                self.finished_graph(dst_graph)?;
                None
            }
        };
        // The node keeps its new parameters: charged as the node they come from.
        let at = match req.exec {
            Some(e) => NodeCopy::Exec(e),
            None => NodeCopy::Graph(dst_exec),
        };
        let charge = self.params_charge(at, dst, (src_exec, src))?;
        let copied = self
            .exec
            .node_copy_params((dst_exec, dst), (src_exec, src), exec);
        self.params_copied(charge, copied.is_ok());
        copied?;
        nothing()
    }

    fn graph_kernel_node_set_params(
        &mut self,
        _: &CallContext,
        req: GraphKernelNodeSetParams,
        params: &[u8],
    ) -> HandlerResult<()> {
        let (graph, node) = self.kernel_node_ref(req.node)?;
        let exec = match req.exec {
            Some(e) => Some(self.exec_node(e, req.node)?.0),
            None => {
                self.finished_graph(self.node_ref(req.node)?.0)?;
                None
            }
        };
        let function = self.handles.function(req.function)?;
        let shape = KernelShape {
            grid: req.grid,
            block: req.block,
            shared_mem: req.shared_mem,
        };
        // The node keeps its new parameter bytes, as a launch captured into it would.
        let at = match req.exec {
            Some(e) => NodeCopy::Exec(e),
            None => NodeCopy::Graph(graph),
        };
        let charge = self.params_charge_bytes(at, node, node_bytes(params.len() as u64))?;
        let set = self
            .exec
            .kernel_node_set_params((graph, node), exec, function, &shape, params);
        self.params_copied(Some(charge), set.is_ok());
        if let Err(status) = set {
            warn!(client = %self.client, node = req.node.0, exec = req.exec.map_or(0, |e| e.0),
                %status, "a kernel node's new parameters were refused");
        }
        set?;
        nothing()
    }

    fn graph_kernel_node_get_params(
        &mut self,
        _: &CallContext,
        req: GraphKernelNodeGetParams,
        _: &[u8],
    ) -> HandlerResult<KernelNodeParameters> {
        let (graph, node) = self.kernel_node_ref(req.node)?;
        let (f, shape, packed) = self.exec.kernel_node_get_params(graph, node)?;
        // The node's kernel is one of the guest's modules': named already.
        let function = self.handles.name_function(f);
        let reply = KernelNodeParameters {
            function,
            grid: shape.grid,
            block: shape.block,
            shared_mem: shape.shared_mem,
        };
        Ok((reply, packed))
    }

    fn graph_conditional_handle_create(
        &mut self,
        _: &CallContext,
        req: GraphConditionalHandleCreate,
        _: &[u8],
    ) -> HandlerResult<ConditionalHandle> {
        let graph = self.extendable_graph(req.graph)?;
        self.accounts.check_count(
            "conditional handle",
            self.graph_tables.conditionals.len(),
            MAX_NODE_HANDLES as u32,
        )?;
        let handle = self
            .exec
            .conditional_handle_create(graph, req.default_value, req.flags)?;
        self.graph_tables.conditionals.insert(handle, req.graph);
        Ok((ConditionalHandle { handle }, Vec::new()))
    }

    fn graph_add_conditional_node(
        &mut self,
        _: &CallContext,
        req: GraphAddConditionalNode,
        _: &[u8],
    ) -> HandlerResult<ConditionalNodeMade> {
        let graph = self.extendable_graph(req.graph)?;
        let deps = self.nodes_in(req.graph, &req.dependencies)?;
        if self.graph_tables.conditionals.get(&req.handle) != Some(&req.graph) {
            warn!(client = %self.client, graph = req.graph.0,
                "refused a conditional handle not made for this graph");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if req.size == 0 || req.size > MAX_CONDITIONAL_BODIES {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let charge = self.graph_node_charge(graph, GRAPH_NODE_BYTES)?;
        let made = self
            .exec
            .add_conditional_node(graph, &deps, req.handle, req.kind, req.size);
        let (node, bodies) = self.node_made(Some(charge), made)?;
        self.node_kept(charge, node);
        let node = self.node_handles(req.graph, vec![node])[0];
        let mut named = Vec::with_capacity(bodies.len());
        for body in bodies {
            let body = self.owned_graph(body, req.graph)?;
            self.graph_tables.bodies.insert(body);
            named.push(body);
        }
        Ok((
            ConditionalNodeMade {
                node,
                bodies: named,
            },
            Vec::new(),
        ))
    }

    fn stream_update_capture_dependencies(
        &mut self,
        _: &CallContext,
        req: StreamUpdateCaptureDependencies,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let (graph, _) = self.exec.capture_graph(s)?;
        let Some(&handle) = self.graph_tables.building.get(&graph) else {
            // The guest never saw this graph, so it holds none of its nodes.
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let deps = self.nodes_in(handle, &req.dependencies)?;
        let edges = self.checked_edges(&req.edges, deps.len())?;
        self.exec
            .update_capture_dependencies(s, &deps, &edges, req.set)?;
        nothing()
    }

    fn host_function_signal(
        &mut self,
        _: &CallContext,
        req: HostFunctionSignal,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        if !req.slot.is_multiple_of(4) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let here = self.shared_here(req.slot, 8)?;
        self.exec.host_function_signal(s, here)?;
        self.graph_tables.host_function_slots.insert(here);
        if let Ok((graph, (deps, _))) = self.exec.capture_graph(s) {
            if let Some(&node) = deps.last() {
                self.graph_tables.host_nodes.insert((graph, node));
            }
        }
        nothing()
    }

    fn graph_debug_dot(
        &mut self,
        _: &CallContext,
        req: GraphDebugDot,
        _: &[u8],
    ) -> HandlerResult<DotText> {
        let graph = self.graph_entry(req.graph)?.exec;
        let text = self.exec.graph_dot(graph, req.flags)?;
        if text.len() > MAX_DOT_LEN {
            warn!(client = %self.client, bytes = text.len(), "graph's DOT text too long to send");
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok((DotText { text }, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use vmcuda_wire::graph::*;
    use vmcuda_wire::op::*;

    const CTX: CallContext = CallContext { device: 0 };

    fn session(quota: Option<u64>) -> Session {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let mut grant = Grant::unlimited("test");
        grant.memory_quota = quota;
        Session::new(Box::new(exec), grant)
    }

    #[test]
    fn graphs_are_named_here_and_stale_or_foreign_handles_are_refused() {
        let mut s = session(None);
        let stream = StreamHandle(0x100);
        let create = StreamCreate {
            stream,
            flags: 0,
            priority: 0,
        };
        s.stream_create(&CTX, create, &[]).unwrap();
        let ptr = s
            .mem_alloc_async(&CTX, MemAllocAsync { size: 256, stream }, &[])
            .unwrap()
            .0
            .ptr;
        let begin = StreamBeginCapture { stream };
        s.stream_begin_capture(&CTX, begin, &[]).unwrap();
        let legacy = StreamBeginCapture {
            stream: StreamHandle::LEGACY,
        };
        assert_eq!(
            s.stream_begin_capture(&CTX, legacy, &[]).unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnsupported
        );
        let memset = Memset {
            dst: ptr,
            value: 5,
            size: 256,
            stream,
            is_async: true,
        };
        s.memset(&CTX, memset, &[]).unwrap();
        // The graph being built, as cudaStreamGetCaptureInfo shows it: readable, not
        // destroyable, and the same graph once the capture ends.
        let shown = s
            .stream_get_capture_graph(&CTX, StreamGetCaptureGraph { stream }, &[])
            .unwrap()
            .0;
        assert_eq!(shown.dependencies.len(), 1);
        let building = GraphGetNodes { graph: shown.graph };
        assert_eq!(
            s.graph_get_nodes(&CTX, building, &[]).unwrap().0.nodes,
            shown.dependencies
        );
        let early = GraphDestroy { graph: shown.graph };
        assert_eq!(
            s.graph_destroy(&CTX, early, &[]).unwrap_err(),
            CudaStatus::ErrorIllegalState
        );
        // A copy through the socket cannot be captured.
        let htod = MemcpyHtoD {
            dst: ptr,
            stream,
            is_async: true,
        };
        assert_eq!(
            s.memcpy_htod(&CTX, htod, &[1, 2]).unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnsupported
        );
        let end = StreamEndCapture {
            stream,
            invalidated: false,
        };
        let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
        assert_eq!(graph, shown.graph);
        let nodes = s
            .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
            .unwrap()
            .0
            .nodes;
        assert_eq!(nodes.len(), 1);
        let again = s
            .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
            .unwrap();
        assert_eq!(again.0.nodes, nodes, "the same node, the same handle");
        let exec = s
            .graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
            .unwrap()
            .0
            .exec;
        s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
            .unwrap();
        let dot = s
            .graph_debug_dot(&CTX, GraphDebugDot { graph, flags: 0 }, &[])
            .unwrap()
            .0
            .text;
        assert!(String::from_utf8(dot).unwrap().starts_with("digraph"));
        s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
        let refused = CudaStatus::ErrorInvalidValue;
        // Destroyed, never made, or made by the wrong kind of call: refused.
        assert_eq!(
            s.graph_destroy(&CTX, GraphDestroy { graph }, &[])
                .unwrap_err(),
            refused
        );
        let stale_node = GraphNodeGetDependencies { node: nodes[0] };
        assert_eq!(
            s.graph_node_get_dependencies(&CTX, stale_node, &[])
                .unwrap_err(),
            refused
        );
        let foreign = GraphLaunch {
            exec: GraphExecHandle(graph.0),
            stream,
        };
        assert_eq!(s.graph_launch(&CTX, foreign, &[]).unwrap_err(), refused);
        // The executable graph outlives its graph.
        s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
            .unwrap();
        s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
            .unwrap();
        // An invalidated capture gives no graph.
        s.stream_begin_capture(&CTX, StreamBeginCapture { stream }, &[])
            .unwrap();
        let end = StreamEndCapture {
            stream,
            invalidated: true,
        };
        assert_eq!(
            s.stream_end_capture(&CTX, end, &[]).unwrap_err(),
            CudaStatus::ErrorStreamCaptureInvalidated
        );
    }

    #[test]
    fn stream_ordered_allocations_are_charged_and_only_the_guests_own_are_freed() {
        let mut s = session(Some(1 << 20));
        let stream = StreamHandle::LEGACY;
        let ptr = s
            .mem_alloc_async(&CTX, MemAllocAsync { size: 4096, stream }, &[])
            .unwrap()
            .0
            .ptr;
        let free = |s: &mut Session| s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free;
        assert_eq!(free(&mut s), (1 << 20) - 4096);
        let too_big = MemAllocAsync {
            size: 1 << 20,
            stream,
        };
        assert_eq!(
            s.mem_alloc_async(&CTX, too_big, &[]).unwrap_err(),
            CudaStatus::ErrorMemoryAllocation
        );
        let wild = MemFreeAsync {
            ptr: ptr + 16,
            stream,
        };
        assert_eq!(
            s.mem_free_async(&CTX, wild, &[]).unwrap_err(),
            CudaStatus::ErrorInvalidValue
        );
        let used = MemPoolGetAttribute {
            pool: PoolRef::Default(0),
            attr: pool_attr::USED_MEM_CURRENT,
        };
        assert_eq!(
            s.mem_pool_get_attribute(&CTX, used.clone(), &[])
                .unwrap()
                .0
                .value,
            4096
        );
        s.mem_free_async(&CTX, MemFreeAsync { ptr, stream }, &[])
            .unwrap();
        assert_eq!(free(&mut s), 1 << 20);
        assert_eq!(
            s.mem_pool_get_attribute(&CTX, used, &[]).unwrap().0.value,
            0
        );
        // The release threshold is held to the quota; unknown attributes are refused.
        let threshold = MemPoolSetAttribute {
            pool: PoolRef::Default(0),
            attr: pool_attr::RELEASE_THRESHOLD,
            value: u64::MAX,
        };
        s.mem_pool_set_attribute(&CTX, threshold, &[]).unwrap();
        let get = MemPoolGetAttribute {
            pool: PoolRef::Default(0),
            attr: pool_attr::RELEASE_THRESHOLD,
        };
        assert_eq!(
            s.mem_pool_get_attribute(&CTX, get, &[]).unwrap().0.value,
            1 << 20
        );
        let unknown = MemPoolGetAttribute {
            pool: PoolRef::Default(0),
            attr: 42,
        };
        assert!(s.mem_pool_get_attribute(&CTX, unknown, &[]).is_err());
        let other_device = MemPoolTrimTo {
            pool: PoolRef::Default(3),
            min_bytes_to_keep: 0,
        };
        assert_eq!(
            s.mem_pool_trim_to(&CTX, other_device, &[]).unwrap_err(),
            CudaStatus::ErrorInvalidDevice
        );
    }
}
