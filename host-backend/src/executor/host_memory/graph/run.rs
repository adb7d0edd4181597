//! Recording into a capture, and running a graph's nodes in their order: the double's
//! graph launches.

use super::*;
use crate::executor::StreamOrder;

impl HostMemoryExecutor {
    /// Record `op` if `stream` is capturing (true), else leave it to run (false).
    pub(in crate::executor::host_memory) fn record(
        &mut self,
        stream: ExecStream,
        op: impl FnOnce() -> Recorded,
    ) -> bool {
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

    pub(in crate::executor::host_memory) fn is_capturing(&self, stream: ExecStream) -> bool {
        self.graphs.capturing.contains_key(&stream)
    }

    /// Operations a capture cannot hold (copies through the socket, synchronizing the
    /// capturing stream): refused, as CUDA refuses them.
    pub(in crate::executor::host_memory) fn refuse_in_capture(
        &self,
        stream: ExecStream,
    ) -> ExecResult<()> {
        if self.is_capturing(stream) {
            warn!(stream, "refused an operation a stream capture cannot hold");
            return Err(CudaStatus::ErrorStreamCaptureUnsupported);
        }
        Ok(())
    }

    /// An event recorded on a capturing stream remembers the stream's frontier.
    pub(in crate::executor::host_memory) fn record_event_in_capture(
        &mut self,
        event: ExecEvent,
        stream: ExecStream,
    ) {
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
    pub(in crate::executor::host_memory) fn wait_event_in_capture(
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
    pub(super) fn pool_add(
        &mut self,
        which: Option<ExecPool>,
        ptr: DevicePtr,
        size: u64,
    ) -> ExecResult<()> {
        let pool = self.pool_mut(which)?;
        pool.live.insert(ptr, size);
        pool.used += size;
        pool.used_high = pool.used_high.max(pool.used);
        Ok(())
    }

    /// Forget `ptr` if it came from a pool (freed either way).
    pub(in crate::executor::host_memory) fn pool_forget(&mut self, ptr: DevicePtr) {
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
    pub(super) fn nodes_of(&self, graph: ExecGraph) -> ExecResult<&Vec<Node>> {
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

    pub(super) fn node_index(graph: ExecGraph, node: ExecNode, len: usize) -> ExecResult<usize> {
        let index = (node & 0xFFFF) as usize;
        if node >> 16 != graph || index == 0 || index > len {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(index - 1)
    }

    pub(super) fn run(&mut self, op: Recorded, stream: ExecStream) -> ExecResult<()> {
        match op {
            Recorded::Memset { dst, value } => self.memset(dst, value, StreamOrder::Queued(stream)),
            Recorded::Memset2D { dst, value } => {
                self.memset_2d(dst, value, StreamOrder::Queued(stream))
            }
            Recorded::MemsetElements {
                dst,
                value,
                element_size,
                count,
            } => self.memset_elements(dst, value, element_size, count, StreamOrder::Queued(stream)),
            Recorded::CopyDtoD { dst, src } => {
                self.copy_dtod(dst, src, StreamOrder::Queued(stream))
            }
            Recorded::Copy2DDtoD { dst, src } => {
                self.copy_2d_dtod(dst, src, StreamOrder::Queued(stream))
            }
            Recorded::CopyRegistered {
                device,
                host,
                to_device,
            } => self.copy_registered(device, host, to_device, StreamOrder::Queued(stream)),
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
    pub(super) fn with_bodies(&self, mut nodes: Vec<Node>) -> ExecResult<Vec<Node>> {
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
    pub(super) fn drop_bodies(&mut self, nodes: &[Node]) {
        let mut pending: Vec<ExecGraph> = bodies_of(nodes);
        while let Some(body) = pending.pop() {
            if let Some(inner) = self.graphs.graphs.remove(&body) {
                pending.extend(bodies_of(&inner));
            }
        }
    }

    /// The nodes of executable graph `exec` that node ids of `graph` name: its own, or
    /// those of a graph one of its nodes holds (a conditional body, a moved child).
    pub(super) fn exec_nodes_mut(
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
    pub(super) fn run_nodes(&mut self, nodes: &[Node], stream: ExecStream) -> ExecResult<()> {
        let order = run_order(nodes).ok_or(CudaStatus::ErrorInvalidValue)?;
        for i in order {
            if nodes[i].enabled {
                self.run(nodes[i].op.clone(), stream)?;
            }
        }
        Ok(())
    }
}
