//! The graph family's handlers: what the guest asks of captures, graphs, nodes and
//! executable graphs, checked against this session's tables before the executor runs it.

use super::*;

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
        let graph = self.end_capture(ctx, req)?;
        Ok((GraphMade { graph }, Vec::new()))
    }

    fn graph_instantiate(
        &mut self,
        _: &CallContext,
        req: GraphInstantiate,
        _: &[u8],
    ) -> HandlerResult<GraphExecMade> {
        let graph = self.finished_graph(req.graph)?;
        self.refuse_unassigned(req.graph, graph)?;
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
        if let PlainNode::ChildGraph(child) = req.node {
            self.unassigned_embedded((graph, node), child);
        }
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
        self.unassigned_gone(graph, Some(node));
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
        self.unassigned_cloned(graph, clone);
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
        self.refuse_unassigned(req.graph, graph)?;
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
        if exec.is_some() {
            self.refuse_unassigned_node((src_exec, src))?;
        }
        let charge = self.params_charge(at, dst, (src_exec, src))?;
        let copied = self
            .exec
            .node_copy_params((dst_exec, dst), (src_exec, src), exec);
        self.params_copied(charge, copied.is_ok());
        copied?;
        if exec.is_none() {
            self.unassigned_copied((dst_exec, dst), (src_exec, src));
        }
        nothing()
    }

    fn graph_exec_child_graph_node_set_params(
        &mut self,
        _: &CallContext,
        req: GraphExecChildGraphNodeSetParams,
        _: &[u8],
    ) -> HandlerResult<()> {
        let (exec, node) = self.exec_node(req.exec, req.node)?;
        let (_, graph, _) = self.node_ref(req.node)?;
        let child = self.finished_graph(req.child)?;
        self.refuse_memory_nodes(child, "a child graph")?;
        self.refuse_unassigned(req.child, child)?;
        // The node keeps a copy of the graph, nodes and all, as a new child-graph
        // node of it would.
        let kept = GRAPH_NODE_BYTES + self.graph_host_bytes(req.child);
        let charge = self.params_charge_bytes(NodeCopy::Exec(req.exec), node, kept)?;
        let set = self.exec.exec_child_graph_set(exec, (graph, node), child);
        self.params_copied(Some(charge), set.is_ok());
        set?;
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
