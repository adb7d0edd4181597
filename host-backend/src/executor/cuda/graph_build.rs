//! Graphs built by hand on real GPUs: node by node, edges, clones, executable-graph
//! updates and conditional nodes.
//!
//! Kernel, copy, memset and memory nodes never come here: the guest issues their work
//! on a stream capturing into the graph (`begin_capture_to_graph`), so they are
//! checked and made as the same work on a stream is. A node's new parameters come the
//! same way, as a node of a scratch graph whose parameters `node_copy_params` copies
//! with the driver's typed getters and setters. Graphs that belong to a node (a
//! child-graph node's, a conditional node's bodies) are kept apart: readable and built
//! into, never destroyed but with their node.

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;
use vmcuda_wire::graph::{conditional_type, node_type, EdgeData};
use vmcuda_wire::CudaStatus;

use super::super::graph::{
    ExecEdges, ExecGraph, ExecGraphExec, ExecLinked, ExecNode, ExecPlainNode, ExecUpdate,
    GraphBuild,
};
use super::super::{
    ExecFunction, ExecResult, ExecStream, KernelShape, StreamAttrValue, STREAM_ATTR_LEN,
};
use super::graph::{edge_data, edge_from_driver, first_edge, no_edge_data, OwnedGraph};
use super::{check, launch_batch, CudaExecutor};

fn node(id: ExecNode) -> sys::CUgraphNode {
    id as usize as sys::CUgraphNode
}

fn nodes(ids: &[ExecNode]) -> Vec<sys::CUgraphNode> {
    ids.iter().map(|&n| node(n)).collect()
}

/// A pointer to the first of `list`, or NULL for none (the driver takes NULL with 0).
fn first(list: &[sys::CUgraphNode]) -> *const sys::CUgraphNode {
    if list.is_empty() {
        ptr::null()
    } else {
        list.as_ptr()
    }
}

/// A plain node's object, checked.
enum Plain {
    Empty,
    Child(sys::CUgraph),
    Record(sys::CUevent),
    Wait(sys::CUevent),
}

impl CudaExecutor {
    /// A graph of this executor's: a finished one, one a node owns, or one a capture
    /// is building (the driver lets nodes be added to it meanwhile).
    fn any_graph(&self, graph: ExecGraph) -> ExecResult<sys::CUgraph> {
        if self.graph_tables.owned.contains_key(&graph)
            || self.graph_tables.building.contains_key(&graph)
        {
            return Ok(graph as usize as sys::CUgraph);
        }
        self.graph(graph)
    }

    fn exec_of(&self, exec: ExecGraphExec) -> ExecResult<sys::CUgraphExec> {
        if self.graph_tables.execs.contains_key(&exec) {
            Ok(exec as usize as sys::CUgraphExec)
        } else {
            Err(CudaStatus::ErrorInvalidValue)
        }
    }

    /// Keep a graph `node` of `parent` owns (its child graph, a conditional body).
    fn own(&mut self, g: sys::CUgraph, idx: usize, parent: ExecGraph, node: ExecNode) -> ExecGraph {
        let id = g as usize as ExecGraph;
        let owned = OwnedGraph {
            device: idx,
            parent,
            node,
        };
        self.graph_tables.owned.insert(id, owned);
        id
    }

    /// A child-graph node of `g` after `deps` that `child` itself becomes (ownership
    /// moved to the node).
    fn add_moved_child(
        g: sys::CUgraph,
        deps: &[sys::CUgraphNode],
        child: sys::CUgraph,
    ) -> ExecResult<ExecNode> {
        // SAFETY: a plain C union of C structs, all-zero valid.
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH;
        params.__bindgen_anon_1.graph = sys::CUDA_CHILD_GRAPH_NODE_PARAMS {
            graph: child,
            ownership: sys::CUgraphChildGraphNodeOwnership::CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE,
        };
        let mut n: sys::CUgraphNode = ptr::null_mut();
        // SAFETY: `g` and `child` are live graphs of this executor, `deps` nodes of `g`;
        // out-pointer to a local.
        check(unsafe {
            sys::cuGraphAddNode_v2(&mut n, g, first(deps), ptr::null(), deps.len(), &mut params)
        })?;
        Ok(n as usize as ExecNode)
    }

    fn raw_node_type(n: sys::CUgraphNode) -> ExecResult<sys::CUgraphNodeType> {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `n` is a node of a live graph (the session pairs nodes with graphs);
        // out-pointer to a local.
        check(unsafe { sys::cuGraphNodeGetType(n, &mut ty) })?;
        Ok(ty)
    }
}

impl GraphBuild for CudaExecutor {
    fn graph_create(&mut self, flags: u32) -> ExecResult<ExecGraph> {
        let idx = self.bind()?;
        let mut g: sys::CUgraph = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuGraphCreate(&mut g, flags) })?;
        let id = g as usize as ExecGraph;
        // A new graph may have the address of one a destroyed node owned.
        self.graph_tables.owned.remove(&id);
        self.graph_tables.graphs.insert(id, idx);
        Ok(id)
    }

    fn begin_capture_to_graph(
        &mut self,
        stream: ExecStream,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        let g = self.any_graph(graph)?;
        let deps = nodes(dependencies);
        let data = edge_data(edges);
        let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `s` is checked, `g` live, `deps` nodes of `g` (paired by the session),
        // `data` empty or one record per node (the session checked the count).
        check(unsafe {
            sys::cuStreamBeginCaptureToGraph(
                s,
                g,
                first(&deps),
                first_edge(&data),
                deps.len(),
                relaxed,
            )
        })?;
        self.batch.capture_began(stream);
        // Until the capture ends the graph is the capture's: readable only.
        let owned = self.graph_tables.owned.remove(&graph);
        self.graph_tables.graphs.remove(&graph);
        self.graph_tables.building.insert(graph, idx);
        self.graph_tables.into_existing.insert(graph, owned);
        Ok(())
    }

    fn update_capture_dependencies(
        &mut self,
        stream: ExecStream,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
        set: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let mut deps = nodes(dependencies);
        let data = edge_data(edges);
        let flags = match set {
            true => {
                sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES
            }
            false => {
                sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_ADD_CAPTURE_DEPENDENCIES
            }
        };
        let list = if deps.is_empty() {
            ptr::null_mut()
        } else {
            deps.as_mut_ptr()
        };
        // SAFETY: `s` is checked; `deps` are nodes of its capture's graph (the session
        // paired them), `data` empty or one record per node.
        check(unsafe {
            sys::cuStreamUpdateCaptureDependencies_v2(
                s,
                list,
                first_edge(&data),
                deps.len(),
                flags as u32,
            )
        })
    }

    fn add_plain_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        plain: ExecPlainNode,
    ) -> ExecResult<ExecNode> {
        let idx = self.bind()?;
        let g = self.any_graph(graph)?;
        let deps = nodes(dependencies);
        let mut n: sys::CUgraphNode = ptr::null_mut();
        let (d, count) = (first(&deps), deps.len());
        let plain = match plain {
            ExecPlainNode::MovedChildGraph(child) => {
                let c = self.graph(child)?;
                let node = Self::add_moved_child(g, &deps, c)?;
                // The graph is the node's now: never destroyed but with it.
                self.graph_tables.graphs.remove(&child);
                self.own(c, idx, graph, node);
                return Ok(node);
            }
            ExecPlainNode::ChildGraph(child) => Plain::Child(self.any_graph(child)?),
            ExecPlainNode::EventRecord(e) => Plain::Record(self.event(e)?),
            ExecPlainNode::EventWait(e) => Plain::Wait(self.event(e)?),
            ExecPlainNode::Empty => Plain::Empty,
        };
        // SAFETY: `g` is live, `deps` are its nodes, out-pointer to a local; the child
        // graph and events are this executor's (checked above).
        let r = unsafe {
            match plain {
                Plain::Empty => sys::cuGraphAddEmptyNode(&mut n, g, d, count),
                Plain::Child(c) => sys::cuGraphAddChildGraphNode(&mut n, g, d, count, c),
                Plain::Record(e) => sys::cuGraphAddEventRecordNode(&mut n, g, d, count, e),
                Plain::Wait(e) => sys::cuGraphAddEventWaitNode(&mut n, g, d, count, e),
            }
        };
        check(r)?;
        Ok(n as usize as ExecNode)
    }

    fn node_type(&mut self, graph: ExecGraph, n: ExecNode) -> ExecResult<u32> {
        self.bind()?;
        self.readable_graph(graph)?;
        Ok(Self::raw_node_type(node(n))? as u32)
    }

    fn kernel_node_set_attribute(
        &mut self,
        graph: ExecGraph,
        n: ExecNode,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()> {
        self.bind()?;
        self.readable_graph(graph)?;
        let id =
            super::launch::launch_attribute_id_from(attr).ok_or(CudaStatus::ErrorInvalidValue)?;
        let v = super::stream::attr_value_from(value);
        // SAFETY: `n` is a node of a live graph (the session pairs nodes with graphs);
        // `id` a valid attribute id; `v` a local the driver only reads.
        check(unsafe { sys::cuGraphKernelNodeSetAttribute(node(n), id, &v) })
    }

    fn kernel_node_get_attribute(
        &mut self,
        graph: ExecGraph,
        n: ExecNode,
        attr: u32,
    ) -> ExecResult<StreamAttrValue> {
        self.bind()?;
        self.readable_graph(graph)?;
        let id =
            super::launch::launch_attribute_id_from(attr).ok_or(CudaStatus::ErrorInvalidValue)?;
        let mut v = super::stream::attr_value_from(&[0; STREAM_ATTR_LEN]);
        // SAFETY: as in kernel_node_set_attribute; the driver writes `v`.
        check(unsafe { sys::cuGraphKernelNodeGetAttribute(node(n), id, &mut v) })?;
        Ok(super::stream::attr_value_bytes(&v))
    }

    fn kernel_node_copy_attributes(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
    ) -> ExecResult<()> {
        self.bind()?;
        self.readable_graph(dst.0)?;
        self.readable_graph(src.0)?;
        // SAFETY: both are nodes of live graphs, paired with them by the session.
        check(unsafe { sys::cuGraphKernelNodeCopyAttributes(node(dst.1), node(src.1)) })
    }

    fn change_dependencies(
        &mut self,
        graph: ExecGraph,
        from: &[ExecNode],
        to: &[ExecNode],
        edges: &[EdgeData],
        add: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let g = self.any_graph(graph)?;
        if from.len() != to.len() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (from, to) = (nodes(from), nodes(to));
        let data = edge_data(edges);
        let (f, t, d, n) = (first(&from), first(&to), first_edge(&data), from.len());
        // SAFETY: `g` is live; `from` and `to` are its nodes, as many of each, and
        // `data` empty or as many records.
        check(unsafe {
            if add {
                sys::cuGraphAddDependencies_v2(g, f, t, d, n)
            } else {
                sys::cuGraphRemoveDependencies_v2(g, f, t, d, n)
            }
        })
    }

    fn graph_edges(&mut self, graph: ExecGraph) -> ExecResult<ExecEdges> {
        self.bind()?;
        let g = self.readable_graph(graph)?;
        let mut count = 0usize;
        // SAFETY: `g` is live; with NULL lists the driver only counts.
        check(unsafe {
            sys::cuGraphGetEdges_v2(
                g,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                &mut count,
            )
        })?;
        if count == 0 {
            return Ok((Vec::new(), Vec::new(), Vec::new()));
        }
        let mut from = vec![ptr::null_mut(); count];
        let mut to = vec![ptr::null_mut(); count];
        let mut data = vec![no_edge_data(); count];
        // SAFETY: the three lists have room for `count` entries.
        check(unsafe {
            sys::cuGraphGetEdges_v2(
                g,
                from.as_mut_ptr(),
                to.as_mut_ptr(),
                data.as_mut_ptr(),
                &mut count,
            )
        })?;
        let ids = |l: Vec<sys::CUgraphNode>| -> Vec<ExecNode> {
            l.into_iter()
                .take(count)
                .map(|n| n as usize as ExecNode)
                .collect()
        };
        let data = data.iter().take(count).map(edge_from_driver).collect();
        Ok((ids(from), ids(to), data))
    }

    fn root_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>> {
        self.bind()?;
        let g = self.readable_graph(graph)?;
        // SAFETY: `g` is live; the driver writes at most `*count` nodes.
        Self::node_list(|out, count| unsafe { sys::cuGraphGetRootNodes(g, out, count) })
    }

    fn dependent_nodes(&mut self, graph: ExecGraph, n: ExecNode) -> ExecResult<ExecLinked> {
        self.bind()?;
        self.readable_graph(graph)?;
        let n = node(n);
        // SAFETY: `n` is a node of a live graph; the driver writes at most `*count`
        // nodes and as many edge records.
        Self::linked_list(|out, edges, count| unsafe {
            sys::cuGraphNodeGetDependentNodes_v2(n, out, edges, count)
        })
    }

    fn destroy_node(&mut self, graph: ExecGraph, n: ExecNode) -> ExecResult<()> {
        self.bind()?;
        self.any_graph(graph)?;
        self.graph_tables
            .forget_owned(|o| o.parent == graph && o.node == n);
        // SAFETY: `n` is a node of a live graph, destroyed once (the session forgets it).
        check(unsafe { sys::cuGraphDestroyNode(node(n)) })
    }

    fn graph_clone(&mut self, graph: ExecGraph) -> ExecResult<ExecGraph> {
        let idx = self.bind()?;
        let g = self.any_graph(graph)?;
        let mut c: sys::CUgraph = ptr::null_mut();
        // SAFETY: `g` is live; out-pointer to a local.
        check(unsafe { sys::cuGraphClone(&mut c, g) })?;
        let id = c as usize as ExecGraph;
        self.graph_tables.owned.remove(&id);
        self.graph_tables.graphs.insert(id, idx);
        Ok(id)
    }

    fn find_in_clone(
        &mut self,
        graph: ExecGraph,
        n: ExecNode,
        clone: ExecGraph,
    ) -> ExecResult<ExecNode> {
        self.bind()?;
        self.any_graph(graph)?;
        let c = self.any_graph(clone)?;
        let mut found: sys::CUgraphNode = ptr::null_mut();
        // SAFETY: `n` is a node of a live graph, `c` a live graph; out-pointer to a local.
        check(unsafe { sys::cuGraphNodeFindInClone(&mut found, node(n), c) })?;
        Ok(found as usize as ExecNode)
    }

    fn exec_update(&mut self, exec: ExecGraphExec, graph: ExecGraph) -> ExecResult<ExecUpdate> {
        self.bind()?;
        let e = self.exec_of(exec)?;
        let g = self.any_graph(graph)?;
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        // SAFETY: `e` and `g` are live; out-pointer to a local.
        let r = unsafe { sys::cuGraphExecUpdate_v2(e, g, &mut info) };
        let failed = sys::cudaError_enum::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        if r != failed {
            check(r)?;
        }
        Ok((
            info.result as u32,
            info.errorNode as usize as ExecNode,
            info.errorFromNode as usize as ExecNode,
        ))
    }

    fn node_set_enabled(
        &mut self,
        exec: ExecGraphExec,
        n: ExecNode,
        enabled: bool,
    ) -> ExecResult<()> {
        self.bind()?;
        let e = self.exec_of(exec)?;
        // SAFETY: `e` is live and `n` a node of the graph it was made of.
        check(unsafe { sys::cuGraphNodeSetEnabled(e, node(n), u32::from(enabled)) })
    }

    fn node_enabled(&mut self, exec: ExecGraphExec, n: ExecNode) -> ExecResult<bool> {
        self.bind()?;
        let e = self.exec_of(exec)?;
        let mut on = 0u32;
        // SAFETY: as in node_set_enabled; out-pointer to a local.
        check(unsafe { sys::cuGraphNodeGetEnabled(e, node(n), &mut on) })?;
        Ok(on != 0)
    }

    fn graph_upload(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let e = self.exec_of(exec)?;
        let s = self.stream(stream)?;
        // SAFETY: `e` is live, `s` checked.
        check(unsafe { sys::cuGraphUpload(e, s) })
    }

    fn child_graph(&mut self, graph: ExecGraph, n: ExecNode) -> ExecResult<ExecGraph> {
        let idx = self.bind()?;
        self.readable_graph(graph)?;
        let mut g: sys::CUgraph = ptr::null_mut();
        // SAFETY: `n` is a node of a live graph; out-pointer to a local.
        check(unsafe { sys::cuGraphChildGraphNodeGetGraph(node(n), &mut g) })?;
        Ok(self.own(g, idx, graph, n))
    }

    fn node_copy_params(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
    ) -> ExecResult<()> {
        use sys::CUgraphNodeType as T;
        let idx = self.bind()?;
        self.any_graph(dst.0)?;
        self.any_graph(src.0)?;
        let e = exec.map(|x| self.exec_of(x)).transpose()?;
        let ctx = self.context(idx)?;
        let (d, s) = (node(dst.1), node(src.1));
        let ty = Self::raw_node_type(s)?;
        if Self::raw_node_type(d)? != ty {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: (every arm) `d` and `s` are nodes of live graphs of this executor, of
        // type `ty`; `e` is a live executable graph; the parameters read from `s` stay
        // valid while `s` lives, through the setter's copy.
        let r = unsafe {
            match ty {
                T::CU_GRAPH_NODE_TYPE_KERNEL => {
                    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
                    check(sys::cuGraphKernelNodeGetParams_v2(s, &mut p))?;
                    match e {
                        Some(e) => sys::cuGraphExecKernelNodeSetParams_v2(e, d, &p),
                        None => sys::cuGraphKernelNodeSetParams_v2(d, &p),
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEMSET => {
                    let mut p: sys::CUDA_MEMSET_NODE_PARAMS = std::mem::zeroed();
                    check(sys::cuGraphMemsetNodeGetParams(s, &mut p))?;
                    match e {
                        Some(e) => sys::cuGraphExecMemsetNodeSetParams(e, d, &p, ctx),
                        None => sys::cuGraphMemsetNodeSetParams(d, &p),
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEMCPY => {
                    // Its memory types are C enums with no zero value: the driver fills
                    // the struct before it is read.
                    let mut out = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::uninit();
                    check(sys::cuGraphMemcpyNodeGetParams(s, out.as_mut_ptr()))?;
                    let p = out.assume_init();
                    match e {
                        Some(e) => sys::cuGraphExecMemcpyNodeSetParams(e, d, &p, ctx),
                        None => sys::cuGraphMemcpyNodeSetParams(d, &p),
                    }
                }
                T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
                    let mut ev: sys::CUevent = ptr::null_mut();
                    check(sys::cuGraphEventRecordNodeGetEvent(s, &mut ev))?;
                    match e {
                        Some(e) => sys::cuGraphExecEventRecordNodeSetEvent(e, d, ev),
                        None => sys::cuGraphEventRecordNodeSetEvent(d, ev),
                    }
                }
                T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
                    let mut ev: sys::CUevent = ptr::null_mut();
                    check(sys::cuGraphEventWaitNodeGetEvent(s, &mut ev))?;
                    match e {
                        Some(e) => sys::cuGraphExecEventWaitNodeSetEvent(e, d, ev),
                        None => sys::cuGraphEventWaitNodeSetEvent(d, ev),
                    }
                }
                T::CU_GRAPH_NODE_TYPE_GRAPH => {
                    let Some(e) = e else {
                        // CUDA has no call that changes a graph's child-graph node.
                        return Err(CudaStatus::ErrorInvalidValue);
                    };
                    let mut g: sys::CUgraph = ptr::null_mut();
                    check(sys::cuGraphChildGraphNodeGetGraph(s, &mut g))?;
                    sys::cuGraphExecChildGraphNodeSetParams(e, d, g)
                }
                T::CU_GRAPH_NODE_TYPE_EMPTY => sys::CUresult::CUDA_SUCCESS,
                // A host function's slot operations (the only batch nodes a guest's
                // graph holds, their words checked when they were made): a host node's
                // new function in its own slot.
                T::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => {
                    let mut p: sys::CUDA_BATCH_MEM_OP_NODE_PARAMS = std::mem::zeroed();
                    check(sys::cuGraphBatchMemOpNodeGetParams(s, &mut p))?;
                    match e {
                        Some(e) => sys::cuGraphExecBatchMemOpNodeSetParams(e, d, &p),
                        None => sys::cuGraphBatchMemOpNodeSetParams(d, &p),
                    }
                }
                _ => return Err(CudaStatus::ErrorNotSupported),
            }
        };
        check(r)
    }

    fn exec_child_graph_set(
        &mut self,
        exec: ExecGraphExec,
        node: (ExecGraph, ExecNode),
        child: ExecGraph,
    ) -> ExecResult<()> {
        self.bind()?;
        self.any_graph(node.0)?;
        let e = self.exec_of(exec)?;
        let g = self.any_graph(child)?;
        // SAFETY: `e` is a live executable graph of this executor, `node.1` a node of
        // one of its live graphs and `g` a live graph; the driver copies `g`.
        check(unsafe { sys::cuGraphExecChildGraphNodeSetParams(e, self::node(node.1), g) })
    }

    fn kernel_node_set_params(
        &mut self,
        node: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
        function: ExecFunction,
        shape: &KernelShape,
        params: &[u8],
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        self.any_graph(node.0)?;
        let e = exec.map(|x| self.exec_of(x)).transpose()?;
        let n = self::node(node.1);
        if Self::raw_node_type(n)? != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_shape(idx, shape.grid, shape.block)?;
        let func = self.function_in_context(function, idx)?;
        // Each parameter at its alignment (up to 16 bytes) in the buffer.
        let aligned: Vec<u128> = launch_batch::aligned_words(params).collect();
        let shape = (shape.grid, shape.block, shape.shared_mem);
        let buffer = aligned.as_ptr().cast();
        let r = launch_batch::kernel_node_params(func, shape, buffer, params.len(), |p| {
            // SAFETY: `n` is a kernel node of a live graph of this executor, `e` a live
            // executable graph; `func` is the kernel's function in the current context;
            // the parameters' buffer outlives the call, which copies them.
            unsafe {
                match e {
                    Some(e) => sys::cuGraphExecKernelNodeSetParams_v2(e, n, p),
                    None => sys::cuGraphKernelNodeSetParams_v2(n, p),
                }
            }
        });
        check(r)
    }

    fn kernel_node_get_params(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
    ) -> ExecResult<(ExecFunction, KernelShape, Vec<u8>)> {
        self.bind()?;
        self.any_graph(graph)?;
        let n = self::node(node);
        if Self::raw_node_type(n)? != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: an all-zero CUDA_KERNEL_NODE_PARAMS is valid (null pointers, zero
        // sizes); the driver fills it.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: `n` is a kernel node of a live graph of this executor; `p` is a local.
        check(unsafe { sys::cuGraphKernelNodeGetParams_v2(n, &mut p) })?;
        let function = self.function_of(p.func, p.kern)?;
        let layout = super::module::kernel_params(self.kernel(function)?)?;
        let total = layout
            .iter()
            .map(|q| (q.offset + q.size) as usize)
            .max()
            .unwrap_or(0);
        let mut packed = vec![0u8; total];
        if !p.kernelParams.is_null() {
            for (i, q) in layout.iter().enumerate() {
                // SAFETY: the driver's `kernelParams` holds one pointer per parameter
                // of the node's kernel (`layout`'s), each to that parameter's bytes,
                // valid while the node is not changed (the worker changes nothing
                // before this returns).
                let arg = unsafe { *p.kernelParams.add(i) } as *const u8;
                if arg.is_null() {
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                // SAFETY: as above, `q.size` bytes at `arg`.
                let bytes = unsafe { std::slice::from_raw_parts(arg, q.size as usize) };
                packed[q.offset as usize..][..q.size as usize].copy_from_slice(bytes);
            }
        } else if !p.extra.is_null() {
            // SAFETY: the driver's `extra` is an END-terminated list of (key, value)
            // pairs, valid while the node is not changed.
            let (buffer, size) = unsafe { launch_batch::extra_buffer(p.extra) };
            if !buffer.is_null() {
                let len = size.min(total);
                // SAFETY: the buffer holds `size` bytes (the list's size word).
                let bytes = unsafe { std::slice::from_raw_parts(buffer, len) };
                packed[..len].copy_from_slice(bytes);
            }
        }
        let shape = KernelShape {
            grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
            block: [p.blockDimX, p.blockDimY, p.blockDimZ],
            shared_mem: p.sharedMemBytes,
        };
        Ok((function, shape, packed))
    }

    fn host_function_signal(&mut self, stream: ExecStream, slot: u64) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `slot` lies in guest memory mapped and registered here (the session
        // checked); out-pointer to a local.
        check(unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, slot as usize as *mut c_void, 0)
        })?;
        let (request, done) = (device, device + 4);
        // One batch (one graph node): done cleared, request set, then wait for done.
        // The driver performs a batch's operations in order.
        use sys::CUstreamBatchMemOpType as Op;
        let write = |address, value| {
            // SAFETY: a plain C union; all-zero is valid, then the write's fields.
            let mut p: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
            p.writeValue.operation = Op::CU_STREAM_MEM_OP_WRITE_VALUE_32;
            p.writeValue.address = address;
            p.writeValue.__bindgen_anon_1.value = value;
            p
        };
        // SAFETY: as above.
        let mut wait: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
        wait.waitValue.operation = Op::CU_STREAM_MEM_OP_WAIT_VALUE_32;
        wait.waitValue.address = done;
        wait.waitValue.__bindgen_anon_1.value = 1;
        wait.waitValue.flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
        let mut ops = [write(done, 0), write(request, 1), wait];
        // SAFETY: both words lie in that registered memory; `s` is checked; `ops`
        // holds the three operations the count says.
        check(unsafe { sys::cuStreamBatchMemOp_v2(s, ops.len() as u32, ops.as_mut_ptr(), 0) })
    }

    fn conditional_handle_create(
        &mut self,
        graph: ExecGraph,
        default_value: u32,
        flags: u32,
    ) -> ExecResult<u64> {
        let idx = self.bind()?;
        let g = self.any_graph(graph)?;
        let ctx = self.context(idx)?;
        let mut h: sys::CUgraphConditionalHandle = 0;
        // SAFETY: `g` is live, `ctx` the current device's context; out-pointer to a local.
        check(unsafe {
            sys::cuGraphConditionalHandleCreate(&mut h, g, ctx, default_value, flags)
        })?;
        Ok(h)
    }

    fn add_conditional_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> ExecResult<(ExecNode, Vec<ExecGraph>)> {
        let idx = self.bind()?;
        let g = self.any_graph(graph)?;
        let ctx = self.context(idx)?;
        let deps = nodes(dependencies);
        use sys::CUgraphConditionalNodeType as C;
        let kind = match kind {
            conditional_type::IF => C::CU_GRAPH_COND_TYPE_IF,
            conditional_type::WHILE => C::CU_GRAPH_COND_TYPE_WHILE,
            conditional_type::SWITCH => C::CU_GRAPH_COND_TYPE_SWITCH,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        // SAFETY: a plain C union of C structs, all-zero valid.
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle,
            type_: kind,
            size,
            phGraph_out: ptr::null_mut(),
            ctx,
        };
        let mut n: sys::CUgraphNode = ptr::null_mut();
        // SAFETY: `g` is live, `deps` its nodes; the driver points `phGraph_out` at an
        // array of its own with the `size` body graphs.
        check(unsafe {
            sys::cuGraphAddNode_v2(
                &mut n,
                g,
                first(&deps),
                ptr::null(),
                deps.len(),
                &mut params,
            )
        })?;
        // SAFETY: the conditional parameters are the union's member this call used.
        let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
        if out.is_null() {
            return Err(CudaStatus::ErrorUnknown);
        }
        // SAFETY: the driver's array holds `size` graphs, valid while the node lives.
        let made = unsafe { std::slice::from_raw_parts(out, size as usize) };
        let id = n as usize as ExecNode;
        let bodies = made.iter().map(|&b| self.own(b, idx, graph, id)).collect();
        Ok((id, bodies))
    }
}

/// `cudaGraphNodeType` numbers are the driver's.
const _: () = assert!(node_type::CONDITIONAL == 13 && node_type::MEM_FREE == 11);
