//! The graph family of the executor seam on the test double.

use super::*;

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
