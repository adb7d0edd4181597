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
    GraphConditionalHandleCreate, GraphCreate, GraphDestroyNode, GraphExecChildGraphNodeSetParams,
    GraphExecUpdate, GraphGetEdges, GraphGetRootNodes, GraphKernelNodeCopyAttributes,
    GraphKernelNodeGetAttribute, GraphKernelNodeGetParams, GraphKernelNodeSetAttribute,
    GraphKernelNodeSetParams, GraphNodeFindInClone, GraphNodeGetDependentNodes,
    GraphNodeGetEnabled, GraphNodeGetType, GraphNodeSetEnabled, GraphOps, GraphRemoveDependencies,
    GraphUpload, HostFunctionSignal, KernelNodeAttribute, KernelNodeParameters, LinkedNodes,
    NodeEnabled, NodeType, StreamUpdateCaptureDependencies,
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
    /// Captured memsets on memory not the guest's, checked when their graph is to
    /// become executable ([`unassigned`]).
    pub(super) unassigned: unassigned::Unassigned,
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
        self.unassigned_gone(entry.exec, None);
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
        self.unassigned_gone(graph, None);
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
            let _ = self.exec.device_graph_mem_trim();
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

mod end_capture;
mod ops;
pub(super) mod unassigned;

#[cfg(test)]
mod tests;
