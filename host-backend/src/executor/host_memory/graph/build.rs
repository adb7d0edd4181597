//! Graphs built by hand on the host-memory test double.
//!
//! Work nodes come from captures into the graph (`begin_capture_to_graph` puts the
//! graph's nodes back into a capture whose frontier is the given dependencies); the
//! rest are edited here. A destroyed node stays as `Removed`, so that node ids, which
//! carry their index, stay put. A child node holds its own copy of the child graph;
//! `child_graph` shows a further copy (edits to it do not reach the node: a double's
//! limit). A graph moved into its node stays a graph of its own, as a conditional
//! node's bodies do, copied into each executable graph made. A conditional node's bodies are graphs of their own until the graph is
//! instantiated, when the executable graph takes copies; their conditions keep their
//! default values, as only kernels change them (see `HostMemoryExecutor::run`).

use std::collections::BTreeMap;

use vmcuda_wire::graph::{node_type, update_result, EdgeData};
use vmcuda_wire::CudaStatus;

use super::super::super::graph::{
    ExecEdges, ExecGraph, ExecGraphExec, ExecLinked, ExecNode, ExecPlainNode, ExecUpdate,
    GraphBuild,
};
use super::super::super::{
    ExecFunction, ExecResult, ExecStream, KernelShape, StreamAttrValue, STREAM_ATTR_LEN,
};
use super::{allocations, live_nodes, node_id, Capture, HostMemoryExecutor, Node, Recorded};

impl HostMemoryExecutor {
    /// A finished graph's nodes, to change.
    fn graph_mut(&mut self, graph: ExecGraph) -> ExecResult<&mut Vec<Node>> {
        self.graphs
            .graphs
            .get_mut(&graph)
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    /// A graph's nodes to add to: a finished graph's, or one a capture is building.
    fn nodes_to_extend(&mut self, graph: ExecGraph) -> ExecResult<&mut Vec<Node>> {
        if self.graphs.graphs.contains_key(&graph) {
            return self.graph_mut(graph);
        }
        self.graphs
            .captures
            .values_mut()
            .find(|c| c.graph == graph)
            .map(|c| &mut c.nodes)
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    /// The index of a live node of `nodes` (of `graph`).
    fn live_index(graph: ExecGraph, node: ExecNode, nodes: &[Node]) -> ExecResult<usize> {
        let i = Self::node_index(graph, node, nodes.len())?;
        if matches!(nodes[i].op, Recorded::Removed) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(i)
    }

    fn indices(graph: ExecGraph, ids: &[ExecNode], nodes: &[Node]) -> ExecResult<Vec<usize>> {
        ids.iter()
            .map(|&n| Self::live_index(graph, n, nodes))
            .collect()
    }

    /// `edges` (empty, or one per dependency: the session's promise) as a frontier
    /// keeps them: by node index, the default ones left out.
    fn frontier_edges(deps: &[usize], edges: &[EdgeData]) -> BTreeMap<usize, EdgeData> {
        deps.iter()
            .zip(edges)
            .filter(|(_, e)| !e.is_default())
            .map(|(&d, &e)| (d, e))
            .collect()
    }

    /// Whether CUDA takes an edge with `data` from `from` to `to` (as the driver
    /// answers): other than default data only out of a kernel node; a programmatic
    /// edge only between kernel nodes, out of a port that fires early; a default one
    /// out of the launch-completion port to any node, never out of the programmatic
    /// port.
    fn edge_fits(from: &Node, to: &Node, data: EdgeData) -> ExecResult<bool> {
        if data.is_default() {
            return Ok(true);
        }
        let kernel = |n: &Node| n.op.node_type().map(|t| t == node_type::KERNEL);
        if !kernel(from)? {
            return Ok(false);
        }
        Ok(match data.kind() {
            EdgeData::TYPE_PROGRAMMATIC => kernel(to)? && data.from_port() != 0,
            _ => data.from_port() == EdgeData::PORT_LAUNCH_COMPLETION,
        })
    }

    fn event_known(&self, event: u64) -> ExecResult<()> {
        if self.events.contains_key(&event) {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }
}

/// The launch attributes a kernel node takes (`CUlaunchAttributeID`): access policy
/// window, cooperative, cluster dimension and scheduling, priority, memory sync domain
/// map and domain, preferred cluster dimension, device-updatable, shared memory carveout.
const KERNEL_NODE_ATTRIBUTES: [u32; 10] = [1, 2, 4, 5, 8, 9, 10, 11, 13, 14];

impl HostMemoryExecutor {
    /// Kernel node `node` of `graph`, and, for one attribute, `attr`, which a kernel
    /// node must take.
    fn kernel_node(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        attr: Option<u32>,
    ) -> ExecResult<&mut Node> {
        if attr.is_some_and(|a| !KERNEL_NODE_ATTRIBUTES.contains(&a)) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let nodes = self.graph_mut(graph)?;
        let i = Self::node_index(graph, node, nodes.len())?;
        if nodes[i].op.node_type()? != node_type::KERNEL {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(&mut nodes[i])
    }
}

impl GraphBuild for HostMemoryExecutor {
    fn graph_create(&mut self, _flags: u32) -> ExecResult<ExecGraph> {
        let graph = self.fresh_id();
        self.graphs.graphs.insert(graph, Vec::new());
        Ok(graph)
    }

    fn begin_capture_to_graph(
        &mut self,
        stream: ExecStream,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if self.is_capturing(stream) {
            return Err(CudaStatus::ErrorIllegalState);
        }
        let nodes = self.graph_mut(graph)?;
        let frontier = Self::indices(graph, dependencies, nodes)?;
        let data = Self::frontier_edges(&frontier, edges);
        let nodes = std::mem::take(nodes);
        self.graphs.graphs.remove(&graph);
        self.graphs.next_capture += 1;
        let id = self.graphs.next_capture;
        let capture = Capture {
            graph,
            origin: stream,
            nodes,
            invalidated: false,
        };
        self.graphs.captures.insert(id, capture);
        self.graphs.capturing.insert(stream, (id, frontier));
        self.graphs.frontier_edges.insert(stream, data);
        Ok(())
    }

    fn update_capture_dependencies(
        &mut self,
        stream: ExecStream,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
        set: bool,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let &(id, _) = self
            .graphs
            .capturing
            .get(&stream)
            .ok_or(CudaStatus::ErrorIllegalState)?;
        let capture = &self.graphs.captures[&id];
        let deps = Self::indices(capture.graph, dependencies, &capture.nodes)?;
        let data = Self::frontier_edges(&deps, edges);
        let frontier = &mut self.graphs.capturing.get_mut(&stream).expect("looked up").1;
        let kept = self.graphs.frontier_edges.entry(stream).or_default();
        if set {
            frontier.clear();
            kept.clear();
        }
        for d in deps {
            if !frontier.contains(&d) {
                frontier.push(d);
            }
        }
        kept.extend(data);
        Ok(())
    }

    fn add_plain_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        node: ExecPlainNode,
    ) -> ExecResult<ExecNode> {
        let op = match node {
            ExecPlainNode::Empty => Recorded::Empty,
            ExecPlainNode::ChildGraph(child) => Recorded::Child(self.nodes_of(child)?.clone()),
            // The graph is the node's: it stays here under its id (its node ids name
            // the node's nodes), and goes with the node.
            ExecPlainNode::MovedChildGraph(child) if child != graph => Recorded::MovedChild {
                graph: child,
                nodes: self.graph_mut(child)?.clone(),
            },
            ExecPlainNode::MovedChildGraph(_) => return Err(CudaStatus::ErrorInvalidValue),
            ExecPlainNode::EventRecord(e) => {
                self.event_known(e)?;
                Recorded::EventRecord(e)
            }
            ExecPlainNode::EventWait(e) => {
                self.event_known(e)?;
                Recorded::EventWait(e)
            }
        };
        let nodes = self.nodes_to_extend(graph)?;
        let deps = Self::indices(graph, dependencies, nodes)?;
        if nodes.len() >= super::MAX_NODES {
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        nodes.push(Node::new(op, deps));
        Ok(node_id(graph, nodes.len() - 1))
    }

    fn node_type(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<u32> {
        let nodes = self.nodes_of(graph)?;
        let i = Self::node_index(graph, node, nodes.len())?;
        nodes[i].op.node_type()
    }

    fn kernel_node_set_attribute(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()> {
        let n = self.kernel_node(graph, node, Some(attr))?;
        n.attributes.insert(attr, *value);
        Ok(())
    }

    fn kernel_node_get_attribute(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        attr: u32,
    ) -> ExecResult<StreamAttrValue> {
        let n = self.kernel_node(graph, node, Some(attr))?;
        Ok(n.attributes
            .get(&attr)
            .copied()
            .unwrap_or([0; STREAM_ATTR_LEN]))
    }

    fn kernel_node_copy_attributes(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
    ) -> ExecResult<()> {
        let copied = self.kernel_node(src.0, src.1, None)?.attributes.clone();
        self.kernel_node(dst.0, dst.1, None)?.attributes = copied;
        Ok(())
    }

    fn change_dependencies(
        &mut self,
        graph: ExecGraph,
        from: &[ExecNode],
        to: &[ExecNode],
        edges: &[EdgeData],
        add: bool,
    ) -> ExecResult<()> {
        let nodes = self.graph_mut(graph)?;
        if from.len() != to.len() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let from = Self::indices(graph, from, nodes)?;
        let to = Self::indices(graph, to, nodes)?;
        let data = |i: usize| edges.get(i).copied().unwrap_or_default();
        // All or nothing: check every edge first. An edge is removed with the data it
        // has, or with none given (the driver removes a programmatic edge then too).
        for (i, (&f, &t)) in from.iter().zip(&to).enumerate() {
            let has = nodes[t].deps.contains(&f);
            let other_data = !edges.is_empty() && nodes[t].edge(f) != data(i);
            if f == t || has == add || (!add && other_data) {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            if add && !Self::edge_fits(&nodes[f], &nodes[t], data(i))? {
                return Err(CudaStatus::ErrorInvalidValue);
            }
        }
        for (i, (&f, &t)) in from.iter().zip(&to).enumerate() {
            let node = &mut nodes[t];
            if add {
                node.deps.push(f);
                if !data(i).is_default() {
                    node.edges.insert(f, data(i));
                }
            } else {
                node.deps.retain(|&d| d != f);
                node.edges.remove(&f);
            }
        }
        Ok(())
    }

    fn graph_edges(&mut self, graph: ExecGraph) -> ExecResult<ExecEdges> {
        let nodes = self.nodes_of(graph)?;
        let (mut from, mut to, mut data) = (Vec::new(), Vec::new(), Vec::new());
        for i in live_nodes(nodes) {
            for &d in &nodes[i].deps {
                from.push(node_id(graph, d));
                to.push(node_id(graph, i));
                data.push(nodes[i].edge(d));
            }
        }
        Ok((from, to, data))
    }

    fn root_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>> {
        let nodes = self.nodes_of(graph)?;
        Ok(live_nodes(nodes)
            .filter(|&i| nodes[i].deps.is_empty())
            .map(|i| node_id(graph, i))
            .collect())
    }

    fn dependent_nodes(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecLinked> {
        let nodes = self.nodes_of(graph)?;
        let at = Self::live_index(graph, node, nodes)?;
        Ok(live_nodes(nodes)
            .filter(|&i| nodes[i].deps.contains(&at))
            .map(|i| (node_id(graph, i), nodes[i].edge(at)))
            .unzip())
    }

    fn destroy_node(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<()> {
        let nodes = self.graph_mut(graph)?;
        let at = Self::live_index(graph, node, nodes)?;
        if matches!(
            nodes[at].op,
            Recorded::MemAlloc { .. } | Recorded::MemFree { .. }
        ) {
            return Err(CudaStatus::ErrorNotSupported);
        }
        let gone = std::mem::replace(&mut nodes[at].op, Recorded::Removed);
        nodes[at].deps.clear();
        nodes[at].edges.clear();
        for n in nodes.iter_mut() {
            n.deps.retain(|&d| d != at);
            n.edges.remove(&at);
        }
        self.drop_bodies(&[Node::new(gone, Vec::new())]);
        Ok(())
    }

    fn graph_clone(&mut self, graph: ExecGraph) -> ExecResult<ExecGraph> {
        let nodes = self.nodes_of(graph)?.clone();
        if nodes
            .iter()
            .any(|n| matches!(n.op, Recorded::MemAlloc { .. } | Recorded::MemFree { .. }))
        {
            return Err(CudaStatus::ErrorNotSupported);
        }
        // A clone would share the bodies' and moved children's graphs (a double's
        // limit).
        if nodes.iter().any(|n| {
            matches!(
                n.op,
                Recorded::Conditional { .. } | Recorded::MovedChild { .. }
            )
        }) {
            return Err(CudaStatus::ErrorNotSupported);
        }
        let clone = self.fresh_id();
        self.graphs.graphs.insert(clone, nodes);
        Ok(clone)
    }

    fn find_in_clone(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        clone: ExecGraph,
    ) -> ExecResult<ExecNode> {
        let at = Self::live_index(graph, node, self.nodes_of(graph)?)?;
        let cloned = self.nodes_of(clone)?;
        let found = node_id(clone, at);
        Self::live_index(clone, found, cloned)?;
        Ok(found)
    }

    fn exec_update(&mut self, exec: ExecGraphExec, graph: ExecGraph) -> ExecResult<ExecUpdate> {
        let new = self.with_bodies(self.nodes_of(graph)?.clone())?;
        let old = self
            .graphs
            .execs
            .get(&exec)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if new.len() != old.len() {
            return Ok((update_result::TOPOLOGY_CHANGED, 0, 0));
        }
        for (i, (n, o)) in new.iter().zip(old).enumerate() {
            let same_type = n.op.node_type().ok() == o.op.node_type().ok();
            if !same_type {
                return Ok((update_result::NODE_TYPE_CHANGED, node_id(graph, i), 0));
            }
            if n.deps != o.deps {
                return Ok((update_result::TOPOLOGY_CHANGED, node_id(graph, i), 0));
            }
        }
        let old = self.graphs.execs.get_mut(&exec).expect("looked up above");
        // Its launches use the new graph's memory from now on (as the driver's do): the
        // old graph's goes where nothing else holds it.
        let before: Vec<_> = allocations(old).collect();
        for (o, n) in old.iter_mut().zip(new) {
            o.op = n.op;
        }
        self.graph_memory_sweep(before);
        Ok((update_result::SUCCESS, 0, 0))
    }

    fn node_set_enabled(
        &mut self,
        exec: ExecGraphExec,
        node: ExecNode,
        enabled: bool,
    ) -> ExecResult<()> {
        let source = *self
            .graphs
            .exec_source
            .get(&exec)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let nodes = self.graphs.execs.get_mut(&exec).expect("kept together");
        let at = Self::live_index(source, node, nodes)?;
        if !matches!(
            nodes[at].op,
            Recorded::Launch { .. }
                | Recorded::Memset { .. }
                | Recorded::Memset2D { .. }
                | Recorded::MemsetElements { .. }
                | Recorded::CopyDtoD { .. }
                | Recorded::Copy2DDtoD { .. }
                | Recorded::CopyRegistered { .. }
        ) {
            // CUDA enables and disables kernel, copy and memset nodes only.
            return Err(CudaStatus::ErrorInvalidValue);
        }
        nodes[at].enabled = enabled;
        Ok(())
    }

    fn node_enabled(&mut self, exec: ExecGraphExec, node: ExecNode) -> ExecResult<bool> {
        let source = *self
            .graphs
            .exec_source
            .get(&exec)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let nodes = &self.graphs.execs[&exec];
        let at = Self::live_index(source, node, nodes)?;
        Ok(nodes[at].enabled)
    }

    fn graph_upload(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        if !self.graphs.execs.contains_key(&exec) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(()) // nothing to stage on host memory
    }

    fn child_graph(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecGraph> {
        let nodes = self.nodes_of(graph)?;
        let at = Self::live_index(graph, node, nodes)?;
        let child = match &nodes[at].op {
            Recorded::Child(child) => child.clone(),
            // The node's graph itself.
            Recorded::MovedChild { graph, .. } => return Ok(*graph),
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        let id = self.fresh_id();
        self.graphs.graphs.insert(id, child);
        Ok(id)
    }

    fn node_copy_params(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
    ) -> ExecResult<()> {
        let from = self.nodes_of(src.0)?;
        let op = from[Self::live_index(src.0, src.1, from)?].op.clone();
        let to = self.nodes_of(dst.0)?;
        let at = Self::live_index(dst.0, dst.1, to)?;
        if to[at].op.node_type()? != op.node_type()? {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        match op.node_type()? {
            node_type::MEM_ALLOC | node_type::MEM_FREE => {
                return Err(CudaStatus::ErrorNotSupported)
            }
            // CUDA has no call that changes a graph's child-graph node.
            node_type::GRAPH if exec.is_none() => return Err(CudaStatus::ErrorInvalidValue),
            _ => {}
        }
        let nodes = match exec {
            Some(e) => self.exec_nodes_mut(e, dst.0)?,
            None => self.graph_mut(dst.0)?,
        };
        let node = nodes.get_mut(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        if node.op.node_type()? != op.node_type()? {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        node.op = op;
        Ok(())
    }

    fn exec_child_graph_set(
        &mut self,
        exec: ExecGraphExec,
        node: (ExecGraph, ExecNode),
        child: ExecGraph,
    ) -> ExecResult<()> {
        let copy = self.nodes_of(child)?.clone();
        let at = Self::live_index(node.0, node.1, self.nodes_of(node.0)?)?;
        let nodes = self.exec_nodes_mut(exec, node.0)?;
        let n = nodes.get_mut(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        // As the driver: a child-graph node, given a graph of its graph's shape.
        let Recorded::Child(old) = &n.op else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        if !Self::same_topology(old, &copy) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        n.op = Recorded::Child(copy);
        Ok(())
    }

    fn kernel_node_set_params(
        &mut self,
        node: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
        function: ExecFunction,
        shape: &KernelShape,
        params: &[u8],
    ) -> ExecResult<()> {
        let f = self.function(function)?;
        Self::check_shape(shape, f)?;
        Self::check_params(f, params)?;
        let at = Self::live_index(node.0, node.1, self.nodes_of(node.0)?)?;
        let nodes = match exec {
            Some(e) => self.exec_nodes_mut(e, node.0)?,
            None => self.graph_mut(node.0)?,
        };
        let n = nodes.get_mut(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        // The node's launch attributes stay (they are set apart from its parameters).
        let Recorded::Launch { attributes, .. } = &n.op else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        n.op = Recorded::Launch {
            function,
            grid: shape.grid,
            block: shape.block,
            shared_mem: shape.shared_mem,
            attributes: attributes.clone(),
            params: params.to_vec(),
        };
        Ok(())
    }

    fn kernel_node_get_params(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
    ) -> ExecResult<(ExecFunction, KernelShape, Vec<u8>)> {
        let nodes = self.nodes_of(graph)?;
        match &nodes[Self::live_index(graph, node, nodes)?].op {
            Recorded::Launch {
                function,
                grid,
                block,
                shared_mem,
                params,
                ..
            } => {
                let shape = KernelShape {
                    grid: *grid,
                    block: *block,
                    shared_mem: *shared_mem,
                };
                Ok((*function, shape, params.clone()))
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn host_function_signal(&mut self, stream: ExecStream, slot: u64) -> ExecResult<()> {
        self.check_stream(stream)?;
        if !self.record(stream, || Recorded::HostSignal { slot }) {
            super::signal_host_function(slot);
        }
        Ok(())
    }

    fn conditional_handle_create(
        &mut self,
        graph: ExecGraph,
        default_value: u32,
        _flags: u32,
    ) -> ExecResult<u64> {
        self.nodes_of(graph)?;
        let handle = self.fresh_id();
        self.graphs
            .conditionals
            .insert(handle, (graph, default_value));
        Ok(handle)
    }

    fn add_conditional_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> ExecResult<(ExecNode, Vec<ExecGraph>)> {
        use super::condition_kind::{IF, SWITCH, WHILE};
        if self.graphs.conditionals.get(&handle).map(|c| c.0) != Some(graph) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let fits = match kind {
            IF => (1..=2).contains(&size),
            WHILE => size == 1,
            SWITCH => size >= 1,
            _ => false,
        };
        if !fits {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let nodes = self.nodes_to_extend(graph)?;
        let deps = Self::indices(graph, dependencies, nodes)?;
        if nodes.len() >= super::MAX_NODES {
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        let bodies: Vec<ExecGraph> = (0..size).map(|_| self.fresh_id()).collect();
        let op = Recorded::Conditional {
            handle,
            kind,
            bodies: bodies.iter().map(|&b| (b, Vec::new())).collect(),
        };
        let nodes = self.nodes_to_extend(graph)?;
        nodes.push(Node::new(op, deps));
        let made = node_id(graph, nodes.len() - 1);
        for &b in &bodies {
            self.graphs.graphs.insert(b, Vec::new());
        }
        Ok((made, bodies))
    }
}

impl HostMemoryExecutor {
    /// Whether `a` and `b` have the same nodes, in order, of the same types with the
    /// same dependencies (what the driver asks of an executable child graph's update).
    fn same_topology(a: &[Node], b: &[Node]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.deps == y.deps && x.op.node_type().ok() == y.op.node_type().ok())
    }
}
