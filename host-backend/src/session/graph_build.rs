//! What the handlers of graphs built by hand share: nodes looked up and paired with
//! their graphs, graphs that nodes own, and the rules for graphs with memory nodes.
//!
//! Every node handle names one node of one graph; a request that pairs a node with
//! another graph (a dependency from elsewhere, an executable graph made of another
//! graph) is refused with `cudaErrorInvalidValue` and logged, so the executor only
//! ever sees nodes with the graph they belong to. Graphs with memory nodes are not
//! cloned, used as child graphs, updated into executable graphs or have those nodes
//! destroyed: their memory is charged to the graph that captured it (see graph.rs),
//! and a second holder of the same allocation node would make that charge wrong.

use tracing::warn;
use vmcuda_wire::graph::{EdgeData, GraphExecHandle, GraphHandle, GraphNodeHandle};
use vmcuda_wire::graph::{LinkedNodes, RawEdge};
use vmcuda_wire::CudaStatus;

use crate::executor::graph::{ExecGraph, ExecGraphExec, ExecLinked, ExecNode};

use super::Session;

/// Node handles a graph may hand out: each is a host object the guest can make
/// (an empty node costs one request), so they are bounded.
pub(super) const MAX_NODE_HANDLES: usize = 1 << 16;

impl Session {
    /// A node the guest holds: its graph and the executor's ids.
    pub(super) fn node_ref(
        &self,
        node: GraphNodeHandle,
    ) -> Result<(GraphHandle, ExecGraph, ExecNode), CudaStatus> {
        let Some(&(graph, n)) = self.graph_tables.nodes.get(&node) else {
            warn!(client = %self.client, node = node.0, "refused an unknown graph node");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        Ok((graph, self.graph_entry(graph)?.exec, n))
    }

    /// The executor's graph and node for a kernel node of the guest's.
    pub(super) fn kernel_node_ref(
        &mut self,
        node: GraphNodeHandle,
    ) -> Result<(ExecGraph, ExecNode), CudaStatus> {
        let (_, graph, n) = self.node_ref(node)?;
        if self.graph_tables.host_nodes.contains(&(graph, n))
            || self.exec.node_type(graph, n)? != vmcuda_wire::graph::node_type::KERNEL
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((graph, n))
    }

    /// The executor's ids of `nodes`, each of which must be a node of `graph`.
    pub(super) fn nodes_in(
        &self,
        graph: GraphHandle,
        nodes: &[GraphNodeHandle],
    ) -> Result<Vec<ExecNode>, CudaStatus> {
        nodes
            .iter()
            .map(|&node| {
                let (g, _, n) = self.node_ref(node)?;
                if g != graph {
                    warn!(client = %self.client, node = node.0, graph = graph.0,
                        "refused a node of another graph");
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                Ok(n)
            })
            .collect()
    }

    /// The edge data given for `count` dependencies, checked: empty for default edges
    /// (none given, or all default).
    pub(super) fn checked_edges(
        &self,
        raw: &[RawEdge],
        count: usize,
    ) -> Result<Vec<EdgeData>, CudaStatus> {
        if raw.is_empty() {
            return Ok(Vec::new());
        }
        if raw.len() != count {
            warn!(client = %self.client, edges = raw.len(), count,
                "refused edge data for another number of dependencies");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut edges = Vec::with_capacity(count);
        for &r in raw {
            let Some(e) = EdgeData::checked(r) else {
                warn!(client = %self.client, edge = r, "refused edge data CUDA does not define");
                return Err(CudaStatus::ErrorInvalidValue);
            };
            edges.push(e);
        }
        if edges.iter().all(|e| e.is_default()) {
            edges.clear();
        }
        Ok(edges)
    }

    /// The guest's view of nodes linked to one of `graph`'s, with their edge data.
    pub(super) fn linked_nodes(
        &mut self,
        graph: GraphHandle,
        (nodes, edges): ExecLinked,
    ) -> LinkedNodes {
        LinkedNodes {
            nodes: self.node_handles(graph, nodes),
            edges: edges.iter().map(|e| e.raw()).collect(),
        }
    }

    /// A finished graph the guest may add nodes to or change: its executor id.
    pub(super) fn editable_graph(&self, graph: GraphHandle) -> Result<ExecGraph, CudaStatus> {
        self.finished_graph(graph)?;
        self.extendable_graph(graph)
    }

    /// A graph the guest may add nodes to through the graph calls: a finished one, or
    /// one a capture is building (CUDA allows both).
    pub(super) fn extendable_graph(&self, graph: GraphHandle) -> Result<ExecGraph, CudaStatus> {
        let entry = self.graph_entry(graph)?;
        let exec = entry.exec;
        if entry.nodes.len() >= MAX_NODE_HANDLES {
            warn!(client = %self.client, graph = graph.0, "refused a node past the graph's limit");
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok(exec)
    }

    /// An executable graph and a node of the graph it was made of.
    pub(super) fn exec_node(
        &self,
        exec: GraphExecHandle,
        node: GraphNodeHandle,
    ) -> Result<(ExecGraphExec, ExecNode), CudaStatus> {
        let e = self.graph_exec(exec)?;
        let (graph, _, n) = self.node_ref(node)?;
        let source = self.graph_tables.exec_source.get(&exec).copied();
        if source.is_none() || !self.graph_or_body_of(graph, source) {
            warn!(client = %self.client, node = node.0, exec = exec.0, graph = graph.0,
                source = source.map_or(0, |g| g.0),
                "refused a node of another graph than the executable graph's");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((e, n))
    }

    /// Whether `graph` is `source`, or a graph whose nodes are `source`'s own nodes: a
    /// conditional node's body, or a graph moved into a child-graph node (ownership
    /// "move": the node holds that very graph, no copy), at any depth. XLA updates its
    /// loop bodies and its moved child command buffers so, through the executable
    /// graph of the outermost graph; a copied child graph's nodes are not the
    /// executable graph's and stay refused, as the driver refuses them.
    fn graph_or_body_of(&self, mut graph: GraphHandle, source: Option<GraphHandle>) -> bool {
        loop {
            if Some(graph) == source {
                return true;
            }
            if !self.graph_tables.bodies.contains(&graph)
                && !self.graph_tables.moved.contains(&graph)
            {
                return false;
            }
            match self.graph_tables.graphs.get(&graph).and_then(|e| e.owner) {
                Some(owner) => graph = owner,
                None => return false,
            }
        }
    }

    /// Whether the graph has memory nodes (allocation or free nodes).
    pub(super) fn has_memory_nodes(&self, graph: ExecGraph) -> bool {
        self.graph_tables.memory.contains_key(&graph)
    }

    /// Refuse what would give a graph's memory nodes a second holder.
    pub(super) fn refuse_memory_nodes(
        &self,
        graph: ExecGraph,
        what: &'static str,
    ) -> Result<(), CudaStatus> {
        if self.has_memory_nodes(graph) {
            warn!(client = %self.client, what, "refused for a graph with memory nodes");
            return Err(CudaStatus::ErrorNotSupported);
        }
        Ok(())
    }

    /// A graph the guest may move into a child-graph node of `parent`: finished, the
    /// guest's (no node owns it), not `parent` nor a graph that owns `parent`; with
    /// memory nodes, only where no executable graph made of it holds them and into a
    /// graph no node owns.
    pub(super) fn movable_graph(
        &self,
        parent: GraphHandle,
        child: GraphHandle,
    ) -> Result<ExecGraph, CudaStatus> {
        let exec = self.finished_graph(child)?;
        let mut above = Some(parent);
        while let Some(g) = above {
            if g == child {
                warn!(client = %self.client, graph = child.0, "refused to move a graph into itself");
                return Err(CudaStatus::ErrorInvalidValue);
            }
            above = self.graph_entry(g)?.owner;
        }
        if self.graph_entry(child)?.owner.is_some() {
            warn!(client = %self.client, graph = child.0, "refused to move a graph a node owns");
            return Err(CudaStatus::ErrorNotSupported);
        }
        if let Some(memory) = self.graph_tables.memory.get(&exec) {
            // Memory nodes go only where an executable graph can be made of the graph
            // holding them (CUDA refuses them in a graph a node owns).
            if memory.held_by_execs() || self.graph_entry(parent)?.owner.is_some() {
                warn!(client = %self.client, graph = child.0,
                    "refused to move a graph with memory nodes that executable graphs hold, or into a graph a node owns");
                return Err(CudaStatus::ErrorNotSupported);
            }
        }
        Ok(exec)
    }

    /// The guest's handle for a graph a node of `owner` owns, named on first sight.
    pub(super) fn owned_graph(
        &mut self,
        exec: ExecGraph,
        owner: GraphHandle,
    ) -> Result<GraphHandle, CudaStatus> {
        let known = self
            .graph_tables
            .graphs
            .iter()
            .find(|(_, e)| e.exec == exec && e.owner.is_some())
            .map(|(&h, _)| h);
        if let Some(h) = known {
            return Ok(h);
        }
        let h = self.name_graph(exec, false)?;
        if let Some(entry) = self.graph_tables.graphs.get_mut(&h) {
            entry.owner = Some(owner);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use vmcuda_wire::graph::*;
    use vmcuda_wire::op::*;
    use vmcuda_wire::CudaStatus;

    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use crate::session::Session;

    const CTX: CallContext = CallContext { device: 0 };
    const REFUSED: CudaStatus = CudaStatus::ErrorInvalidValue;

    fn session() -> Session {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        Session::new(Box::new(exec), Grant::unlimited("test"))
    }

    fn create(s: &mut Session) -> GraphHandle {
        s.graph_create(&CTX, GraphCreate { flags: 0 }, &[])
            .unwrap()
            .0
            .graph
    }

    fn plain(s: &mut Session, graph: GraphHandle, deps: &[GraphNodeHandle]) -> GraphNodeHandle {
        let req = GraphAddNode {
            graph,
            dependencies: deps.to_vec(),
            node: PlainNode::Empty,
        };
        s.graph_add_node(&CTX, req, &[]).unwrap().0.node
    }

    /// A memset node of `graph` after `deps`, made as the guest makes one.
    fn memset_node(
        s: &mut Session,
        stream: StreamHandle,
        graph: GraphHandle,
        deps: &[GraphNodeHandle],
        dst: DevicePtr,
        value: u8,
    ) -> GraphNodeHandle {
        let begin = StreamBeginCaptureToGraph {
            stream,
            graph,
            dependencies: deps.to_vec(),
            edges: Vec::new(),
        };
        s.stream_begin_capture_to_graph(&CTX, begin, &[]).unwrap();
        let memset = Memset {
            dst,
            value,
            size: 64,
            stream,
            is_async: true,
        };
        s.memset(&CTX, memset, &[]).unwrap();
        let shown = s
            .stream_get_capture_graph(&CTX, StreamGetCaptureGraph { stream }, &[])
            .unwrap()
            .0;
        assert_eq!(
            shown.graph, graph,
            "the guest's own graph, under its handle"
        );
        let end = StreamEndCapture {
            stream,
            invalidated: false,
        };
        let ended = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
        assert_eq!(ended, graph);
        shown.dependencies[0]
    }

    #[test]
    fn graphs_built_by_hand_pair_every_node_with_its_own_graph() {
        let mut s = session();
        let stream = StreamHandle(0x100);
        let made = StreamCreate {
            stream,
            flags: 1,
            priority: 0,
        };
        s.stream_create(&CTX, made, &[]).unwrap();
        let ptr = s
            .mem_alloc(&CTX, MemAlloc { size: 256 }, &[])
            .unwrap()
            .0
            .ptr;
        let g = create(&mut s);
        let first = plain(&mut s, g, &[]);
        let set = memset_node(&mut s, stream, g, &[first], ptr, 7);
        let ty = |s: &mut Session, node| {
            let req = GraphNodeGetType { node };
            s.graph_node_get_type(&CTX, req, &[]).unwrap().0.ty
        };
        assert_eq!(ty(&mut s, first), node_type::EMPTY);
        assert_eq!(ty(&mut s, set), node_type::MEMSET);
        let edges = s
            .graph_get_edges(&CTX, GraphGetEdges { graph: g }, &[])
            .unwrap()
            .0;
        assert_eq!((edges.from, edges.to), (vec![first], vec![set]));

        // A node of another graph is refused wherever a node of this one is meant.
        let other = create(&mut s);
        let foreign = plain(&mut s, other, &[]);
        let req = GraphAddNode {
            graph: g,
            dependencies: vec![foreign],
            node: PlainNode::Empty,
        };
        assert_eq!(s.graph_add_node(&CTX, req, &[]).unwrap_err(), REFUSED);
        let req = GraphAddDependencies {
            graph: g,
            from: vec![first],
            to: vec![foreign],
            edges: Vec::new(),
        };
        assert_eq!(
            s.graph_add_dependencies(&CTX, req, &[]).unwrap_err(),
            REFUSED
        );
        let begin = StreamBeginCaptureToGraph {
            stream,
            graph: g,
            dependencies: vec![foreign],
            edges: Vec::new(),
        };
        assert_eq!(
            s.stream_begin_capture_to_graph(&CTX, begin, &[])
                .unwrap_err(),
            REFUSED
        );
        let stale = GraphNodeGetType {
            node: GraphNodeHandle(0xdead),
        };
        assert_eq!(
            s.graph_node_get_type(&CTX, stale, &[]).unwrap_err(),
            REFUSED
        );

        // New parameters come from a node of the same type only.
        let scratch = create(&mut s);
        let newer = memset_node(&mut s, stream, scratch, &[], ptr, 9);
        let copy = |dst, src, exec| GraphNodeCopyParams { dst, src, exec };
        s.graph_node_copy_params(&CTX, copy(set, newer, None), &[])
            .unwrap();
        assert_eq!(
            s.graph_node_copy_params(&CTX, copy(first, newer, None), &[])
                .unwrap_err(),
            REFUSED
        );

        // An executable graph names the nodes of the graph it was made of only.
        let exec = s
            .graph_instantiate(&CTX, GraphInstantiate { graph: g, flags: 0 }, &[])
            .unwrap()
            .0
            .exec;
        let req = GraphNodeSetEnabled {
            exec,
            node: set,
            enabled: 0,
        };
        s.graph_node_set_enabled(&CTX, req, &[]).unwrap();
        let req = GraphNodeSetEnabled {
            exec,
            node: newer,
            enabled: 0,
        };
        assert_eq!(
            s.graph_node_set_enabled(&CTX, req, &[]).unwrap_err(),
            REFUSED
        );
        assert_eq!(
            s.graph_node_copy_params(&CTX, copy(newer, set, Some(exec)), &[])
                .unwrap_err(),
            REFUSED
        );

        // A child graph is the node's: not the guest's to destroy, gone with it.
        let parent = create(&mut s);
        let req = GraphAddNode {
            graph: parent,
            dependencies: vec![],
            node: PlainNode::ChildGraph(g),
        };
        let child = s.graph_add_node(&CTX, req, &[]).unwrap().0.node;
        let inside = s
            .graph_child_graph_node_get_graph(
                &CTX,
                GraphChildGraphNodeGetGraph { node: child },
                &[],
            )
            .unwrap()
            .0
            .graph;
        let destroy = GraphDestroy { graph: inside };
        assert_eq!(
            s.graph_destroy(&CTX, destroy.clone(), &[]).unwrap_err(),
            REFUSED
        );
        s.graph_destroy(&CTX, GraphDestroy { graph: parent }, &[])
            .unwrap();
        let req = GraphGetNodes { graph: inside };
        assert_eq!(s.graph_get_nodes(&CTX, req, &[]).unwrap_err(), REFUSED);

        // A clone's nodes are found from the original's only.
        let clone = s
            .graph_clone(&CTX, GraphClone { original: g }, &[])
            .unwrap()
            .0
            .graph;
        let req = GraphNodeFindInClone {
            original: set,
            clone,
        };
        let found = s.graph_node_find_in_clone(&CTX, req, &[]).unwrap().0.node;
        assert_eq!(ty(&mut s, found), node_type::MEMSET);
        let req = GraphNodeFindInClone {
            original: newer,
            clone,
        };
        assert_eq!(
            s.graph_node_find_in_clone(&CTX, req, &[]).unwrap_err(),
            REFUSED
        );

        // Destroyed nodes are forgotten; conditional nodes take the handles made for
        // their graph only.
        s.graph_destroy_node(&CTX, GraphDestroyNode { node: first }, &[])
            .unwrap();
        let req = GraphNodeGetType { node: first };
        assert_eq!(s.graph_node_get_type(&CTX, req, &[]).unwrap_err(), REFUSED);
        let req = GraphConditionalHandleCreate {
            graph: g,
            default_value: 0,
            flags: 0,
        };
        let handle = s
            .graph_conditional_handle_create(&CTX, req, &[])
            .unwrap()
            .0
            .handle;
        let req = GraphAddConditionalNode {
            graph: g,
            dependencies: vec![],
            handle: 42,
            kind: conditional_type::IF,
            size: 1,
        };
        assert_eq!(
            s.graph_add_conditional_node(&CTX, req, &[]).unwrap_err(),
            REFUSED,
            "a handle this session never made"
        );
        let req = GraphAddConditionalNode {
            graph: g,
            dependencies: vec![],
            handle,
            kind: conditional_type::WHILE,
            size: 1,
        };
        let made = s.graph_add_conditional_node(&CTX, req, &[]).unwrap().0;
        assert_eq!(made.bodies.len(), 1);
        s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
            .unwrap();
    }

    /// XLA's loop bodies: a conditional node's body graph is updated through the
    /// executable graph made of the graph holding the node (the driver allows it; a
    /// CUDA host decides each update), so the session names those nodes there. Other
    /// graphs' nodes stay refused. (The bodies are marked here by hand, as
    /// `graph_add_conditional_node` marks the ones it names.)
    #[test]
    fn an_executable_graph_names_its_conditional_bodies_nodes() {
        let mut s = session();
        let g = create(&mut s);
        plain(&mut s, g, &[]);
        let body = create(&mut s);
        let inner = plain(&mut s, body, &[]);
        let nested = create(&mut s);
        let deeper = plain(&mut s, nested, &[]);
        let unrelated = create(&mut s);
        let outside = plain(&mut s, unrelated, &[]);
        let exec = s
            .graph_instantiate(&CTX, GraphInstantiate { graph: g, flags: 0 }, &[])
            .unwrap()
            .0
            .exec;
        assert_eq!(
            s.exec_node(exec, inner).unwrap_err(),
            REFUSED,
            "not yet a body"
        );
        for (graph, owner) in [(body, g), (nested, body)] {
            s.graph_tables.graphs.get_mut(&graph).unwrap().owner = Some(owner);
            s.graph_tables.bodies.insert(graph);
        }
        s.exec_node(exec, inner).unwrap();
        s.exec_node(exec, deeper).unwrap();
        assert_eq!(s.exec_node(exec, outside).unwrap_err(), REFUSED);
        // A graph moved into a child-graph node is the node's own: its nodes are named
        // too (XLA's child command buffers).
        s.graph_tables.bodies.remove(&body);
        s.graph_tables.moved.insert(body);
        s.exec_node(exec, inner).unwrap();
        s.exec_node(exec, deeper).unwrap();
        // A graph the exec's graph owns but neither as a body nor moved (a copied
        // child graph's) is refused.
        s.graph_tables.moved.remove(&body);
        assert_eq!(s.exec_node(exec, inner).unwrap_err(), REFUSED);
        assert_eq!(s.exec_node(exec, deeper).unwrap_err(), REFUSED);
        // A destroyed body is forgotten.
        s.graph_tables.bodies.insert(body);
        s.forget_graph(body);
        assert!(!s.graph_tables.bodies.contains(&body));
    }

    #[test]
    fn graphs_with_memory_nodes_are_not_cloned_nor_their_memory_nodes_destroyed() {
        let mut s = session();
        let stream = StreamHandle(0x100);
        let made = StreamCreate {
            stream,
            flags: 1,
            priority: 0,
        };
        s.stream_create(&CTX, made, &[]).unwrap();
        let g = create(&mut s);
        let begin = StreamBeginCaptureToGraph {
            stream,
            graph: g,
            dependencies: vec![],
            edges: Vec::new(),
        };
        s.stream_begin_capture_to_graph(&CTX, begin, &[]).unwrap();
        let alloc = MemAllocAsync { size: 4096, stream };
        s.mem_alloc_async(&CTX, alloc, &[]).unwrap();
        let end = StreamEndCapture {
            stream,
            invalidated: false,
        };
        assert_eq!(s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph, g);
        let nodes = s
            .graph_get_nodes(&CTX, GraphGetNodes { graph: g }, &[])
            .unwrap()
            .0
            .nodes;
        let alloc_node = nodes
            .iter()
            .copied()
            .find(|&node| {
                let req = GraphNodeGetType { node };
                s.graph_node_get_type(&CTX, req, &[]).unwrap().0.ty == node_type::MEM_ALLOC
            })
            .expect("an allocation node");
        let unsupported = CudaStatus::ErrorNotSupported;
        let req = GraphClone { original: g };
        assert_eq!(s.graph_clone(&CTX, req, &[]).unwrap_err(), unsupported);
        let req = GraphDestroyNode { node: alloc_node };
        assert_eq!(
            s.graph_destroy_node(&CTX, req, &[]).unwrap_err(),
            unsupported
        );
        let parent = create(&mut s);
        let req = GraphAddNode {
            graph: parent,
            dependencies: vec![],
            node: PlainNode::ChildGraph(g),
        };
        assert_eq!(s.graph_add_node(&CTX, req, &[]).unwrap_err(), unsupported);
        // The memory goes with the graph, as a captured graph's does.
        let free = |s: &mut Session| s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free;
        let before = free(&mut s);
        s.graph_destroy(&CTX, GraphDestroy { graph: g }, &[])
            .unwrap();
        assert!(free(&mut s) > before);
    }
    /// Edge data is checked before any executor sees it: one record per edge, each
    /// one CUDA defines; all-default data is the same as none.
    #[test]
    fn edge_data_is_checked_at_the_door() {
        let mut s = session();
        let g = create(&mut s);
        let a = plain(&mut s, g, &[]);
        let b = plain(&mut s, g, &[]);
        let add = |s: &mut Session, edges: Vec<u64>| {
            let req = GraphAddDependencies {
                graph: g,
                from: vec![a],
                to: vec![b],
                edges,
            };
            s.graph_add_dependencies(&CTX, req, &[])
        };
        let downstream_port = u64::from_le_bytes([0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(add(&mut s, vec![0, 0]).unwrap_err(), REFUSED);
        assert_eq!(add(&mut s, vec![downstream_port]).unwrap_err(), REFUSED);
        assert_eq!(add(&mut s, vec![1 << 40]).unwrap_err(), REFUSED);
        add(&mut s, vec![0]).unwrap();
        let edges = s
            .graph_get_edges(&CTX, GraphGetEdges { graph: g }, &[])
            .unwrap()
            .0;
        assert_eq!(edges.data, vec![0]);
        let deps = GraphNodeGetDependencies { node: b };
        let linked = s.graph_node_get_dependencies(&CTX, deps, &[]).unwrap().0;
        assert_eq!((linked.nodes, linked.edges), (vec![a], vec![0]));
    }

    #[test]
    fn only_kernel_nodes_take_launch_attributes() {
        let mut s = session();
        let g = create(&mut s);
        let empty = plain(&mut s, g, &[]);
        let priority = 8;
        let set = GraphKernelNodeSetAttribute {
            node: empty,
            attr: priority,
            value: vec![0; 64],
        };
        assert_eq!(
            s.graph_kernel_node_set_attribute(&CTX, set, &[])
                .unwrap_err(),
            REFUSED
        );
        let get = GraphKernelNodeGetAttribute {
            node: GraphNodeHandle(0xdead),
            attr: priority,
        };
        assert_eq!(
            s.graph_kernel_node_get_attribute(&CTX, get, &[])
                .unwrap_err(),
            REFUSED
        );
        let copy = GraphKernelNodeCopyAttributes {
            dst: empty,
            src: empty,
        };
        assert_eq!(
            s.graph_kernel_node_copy_attributes(&CTX, copy, &[])
                .unwrap_err(),
            REFUSED
        );
    }
}

#[cfg(test)]
mod capture_tests {
    use vmcuda_wire::graph::*;
    use vmcuda_wire::op::*;

    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use crate::session::Session;

    const CTX: CallContext = CallContext { device: 0 };

    /// A stream that joined a capture may go before the capture ends (as CUDA allows):
    /// that ends nothing; the capture ends on its origin with the joined work in it.
    #[test]
    fn a_joined_stream_going_does_not_end_the_capture() {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let mut s = Session::new(Box::new(exec), Grant::unlimited("test"));
        let (origin, joined) = (StreamHandle(0x100), StreamHandle(0x200));
        for stream in [origin, joined] {
            let made = StreamCreate {
                stream,
                flags: 1,
                priority: 0,
            };
            s.stream_create(&CTX, made, &[]).unwrap();
        }
        let event = EventHandle(0x300);
        s.event_create(&CTX, EventCreate { event, flags: 0 }, &[])
            .unwrap();
        let ptr = s
            .mem_alloc(&CTX, MemAlloc { size: 256 }, &[])
            .unwrap()
            .0
            .ptr;
        let begin = StreamBeginCapture { stream: origin };
        s.stream_begin_capture(&CTX, begin, &[]).unwrap();
        let record = EventRecord {
            event,
            stream: origin,
            flags: 0,
        };
        s.event_record(&CTX, record, &[]).unwrap();
        let wait = StreamWaitEvent {
            stream: joined,
            event,
            flags: 0,
        };
        s.stream_wait_event(&CTX, wait, &[]).unwrap();
        let memset = Memset {
            dst: ptr,
            value: 1,
            size: 256,
            stream: joined,
            is_async: true,
        };
        s.memset(&CTX, memset, &[]).unwrap();
        let record = EventRecord {
            event,
            stream: joined,
            flags: 0,
        };
        s.event_record(&CTX, record, &[]).unwrap();
        let wait = StreamWaitEvent {
            stream: origin,
            event,
            flags: 0,
        };
        s.stream_wait_event(&CTX, wait, &[]).unwrap();
        s.stream_destroy(&CTX, StreamDestroy { stream: joined }, &[])
            .unwrap();
        let end = StreamEndCapture {
            stream: origin,
            invalidated: false,
        };
        let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
        let nodes = s
            .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
            .unwrap()
            .0
            .nodes;
        assert_eq!(nodes.len(), 1, "the joined stream's memset");
    }
}
