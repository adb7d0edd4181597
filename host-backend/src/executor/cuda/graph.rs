//! Stream capture, graphs and stream-ordered memory on real GPUs.
//!
//! Capture is begun in relaxed mode: this worker thread runs every guest thread's
//! calls, so the driver's own per-thread rules would see one thread; the guest applies
//! its threads' capture modes itself. Graphs and executable graphs are the driver's,
//! kept in tables (id = handle value -> device index) so that no guest number reaches
//! the driver unchecked. Memory pools are each device's default pool and the pools made
//! for the guest (a table of them, like the graphs'). Graph memory is
//! the driver's graph memory pool: mapped at a launch, cached after it is freed (by a
//! free node, `cuMemFree` or `cuMemFreeAsync`) or its graph destroyed, and given back
//! by `graph_mem_trim`, which the session calls when nothing holds it any more.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;
use tracing::warn;
use vmcuda_wire::graph::{pool_attr, EdgeData, MemAccess};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::graph::{
    ExecGraph, ExecGraphExec, ExecLinked, ExecNode, ExecPool, ExecShare, Graphs, SHARE_LEN,
};
use super::super::{ExecResult, ExecStream, LEGACY_STREAM};
use super::{check, to_usize, CudaExecutor};

/// Live graphs and executable graphs (handle value -> device index).
#[derive(Default)]
pub(super) struct CudaGraphs {
    pub(super) graphs: HashMap<ExecGraph, usize>,
    pub(super) execs: HashMap<ExecGraphExec, usize>,
    /// Graphs still being captured into that `capture_graph` has shown: readable, but
    /// the driver's until their capture ends.
    pub(super) building: HashMap<ExecGraph, usize>,
    /// Pools made by `pool_create` or `pool_import` (id = the `CUmemoryPool` value ->
    /// device index).
    pools: HashMap<ExecPool, usize>,
    /// Exported pools and allocations (device index, what the driver gave), by number.
    shares: HashMap<ExecShare, (usize, Share)>,
    /// The descriptors of pools imported from other processes (`pool_import_from`).
    imported: HashMap<ExecPool, OwnedFd>,
    next_share: ExecShare,
    /// Graphs a node owns (a child graph, a conditional node's bodies): built into and
    /// read, destroyed only with their node, and forgotten then (the driver reuses
    /// their addresses for new graphs).
    pub(super) owned: HashMap<ExecGraph, OwnedGraph>,
    /// Graphs being captured into by `begin_capture_to_graph`, and what a node-owned
    /// one was. They are the program's before and after, whatever the capture's end.
    pub(super) into_existing: HashMap<ExecGraph, Option<OwnedGraph>>,
}

/// What the driver gave for an export.
pub(super) enum Share {
    /// A pool's POSIX file descriptor.
    Pool(OwnedFd),
    /// An allocation's export data.
    Pointer(sys::CUmemPoolPtrExportData),
}

/// A graph a node owns: its device, and the node and graph that own it.
#[derive(Clone, Copy, Debug)]
pub(super) struct OwnedGraph {
    pub(super) device: usize,
    pub(super) parent: ExecGraph,
    pub(super) node: ExecNode,
}

impl CudaGraphs {
    /// Forget the graphs owned by what `gone` says is gone, and theirs in turn.
    pub(super) fn forget_owned(&mut self, gone: impl Fn(&OwnedGraph) -> bool) {
        let mut dropped: Vec<ExecGraph> = self
            .owned
            .iter()
            .filter(|(_, o)| gone(o))
            .map(|(&g, _)| g)
            .collect();
        while let Some(g) = dropped.pop() {
            self.owned.remove(&g);
            dropped.extend(
                self.owned
                    .iter()
                    .filter(|(_, o)| o.parent == g)
                    .map(|(&c, _)| c),
            );
        }
    }
}

/// The driver's enum for a graph-memory attribute (0..=3).
fn graph_mem_attribute(attr: u32) -> ExecResult<sys::CUgraphMem_attribute> {
    use sys::CUgraphMem_attribute as A;
    Ok(match attr {
        0 => A::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
        1 => A::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
        2 => A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
        3 => A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// The driver's enum for a pool attribute the session has checked (1..=8).
fn pool_attribute(attr: u32) -> ExecResult<sys::CUmemPool_attribute> {
    use sys::CUmemPool_attribute as A;
    Ok(match attr {
        pool_attr::REUSE_FOLLOW_EVENT_DEPENDENCIES => {
            A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
        }
        pool_attr::REUSE_ALLOW_OPPORTUNISTIC => A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
        pool_attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
        }
        pool_attr::RELEASE_THRESHOLD => A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        pool_attr::RESERVED_MEM_CURRENT => A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        pool_attr::RESERVED_MEM_HIGH => A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        pool_attr::USED_MEM_CURRENT => A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        pool_attr::USED_MEM_HIGH => A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// An allocation's export data mapped through pool `p` (live, its device current).
fn import_pointer(
    p: sys::CUmemoryPool,
    mut data: sys::CUmemPoolPtrExportData,
) -> ExecResult<DevicePtr> {
    let mut out: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; `p` is a live pool; `data` is a copy of what a
    // driver gave for an export (this worker's, or another's through the registry),
    // which the driver judges.
    check(unsafe { sys::cuMemPoolImportPointer(&mut out, p, &mut data) })?;
    Ok(out)
}

impl CudaExecutor {
    /// Destroy the graphs of device `idx` (its context is current).
    pub(super) fn graphs_destroy_device(&mut self, idx: usize) {
        self.graph_tables.shares.retain(|_, (d, _)| *d != idx);
        self.graph_tables.pools.retain(|&pool, d| {
            if *d == idx {
                // SAFETY: made by pool_create, destroyed once (leaving the table).
                let _ = unsafe { sys::cuMemPoolDestroy(pool as usize as sys::CUmemoryPool) };
            }
            *d != idx
        });
        let pools = &self.graph_tables.pools;
        self.graph_tables
            .imported
            .retain(|p, _| pools.contains_key(p));
        self.graph_tables.building.retain(|_, d| *d != idx);
        self.graph_tables.owned.retain(|_, o| o.device != idx);
        self.graph_tables.into_existing.clear();
        self.graph_tables.execs.retain(|&exec, d| {
            if *d == idx {
                // SAFETY: made by graph_instantiate, destroyed once (leaving the table).
                let _ = unsafe { sys::cuGraphExecDestroy(exec as usize as sys::CUgraphExec) };
            }
            *d != idx
        });
        self.graph_tables.graphs.retain(|&graph, d| {
            if *d == idx {
                // SAFETY: made by end_capture, destroyed once (leaving the table).
                let _ = unsafe { sys::cuGraphDestroy(graph as usize as sys::CUgraph) };
            }
            *d != idx
        });
    }

    fn keep_share(&mut self, idx: usize, share: Share) -> ExecShare {
        self.graph_tables.next_share += 1;
        let id = self.graph_tables.next_share;
        self.graph_tables.shares.insert(id, (idx, share));
        id
    }

    /// A pool's POSIX descriptor (this worker's export, or another's passed here)
    /// imported as a pool of device `idx`, current; the descriptor stays the caller's.
    fn import_pool_descriptor(&mut self, idx: usize, fd: c_int) -> ExecResult<ExecPool> {
        let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        let mut pool: sys::CUmemoryPool = ptr::null_mut();
        // SAFETY: out-pointer to a local; a POSIX handle is passed as the descriptor's
        // number, which stays open (the driver does not take it).
        check(unsafe {
            sys::cuMemPoolImportFromShareableHandle(&mut pool, fd as isize as *mut c_void, posix, 0)
        })?;
        let id = pool as usize as ExecPool;
        self.graph_tables.pools.insert(id, idx);
        Ok(id)
    }

    /// A finished graph of this executor.
    pub(super) fn graph(&self, graph: ExecGraph) -> ExecResult<sys::CUgraph> {
        if self.graph_tables.graphs.contains_key(&graph) {
            Ok(graph as usize as sys::CUgraph)
        } else {
            Err(CudaStatus::ErrorInvalidValue)
        }
    }

    /// A finished graph, one a node owns, or one a capture is still building (to read
    /// only).
    pub(super) fn readable_graph(&self, graph: ExecGraph) -> ExecResult<sys::CUgraph> {
        if self.graph_tables.building.contains_key(&graph)
            || self.graph_tables.owned.contains_key(&graph)
        {
            return Ok(graph as usize as sys::CUgraph);
        }
        self.graph(graph)
    }

    /// The current device's default memory pool.
    fn default_pool(&mut self) -> ExecResult<sys::CUmemoryPool> {
        let idx = self.bind()?;
        let mut pool: sys::CUmemoryPool = ptr::null_mut();
        // SAFETY: out-pointer to a local; the device handle came from cuDeviceGet.
        check(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.devices[idx].handle) })?;
        Ok(pool)
    }

    /// `pool`: one `pool_create` made, or (None) the current device's default pool.
    fn pool(&mut self, pool: Option<ExecPool>) -> ExecResult<sys::CUmemoryPool> {
        match pool {
            None => self.default_pool(),
            Some(id) if self.graph_tables.pools.contains_key(&id) => {
                self.bind()?;
                Ok(id as usize as sys::CUmemoryPool)
            }
            Some(_) => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    /// Read a node list with the driver's two-call convention.
    pub(super) fn node_list(
        fill: impl Fn(*mut sys::CUgraphNode, *mut usize) -> sys::CUresult,
    ) -> ExecResult<Vec<ExecNode>> {
        let mut count = 0usize;
        check(fill(ptr::null_mut(), &mut count))?;
        if count == 0 {
            // The driver refuses a list to fill with room for nothing (a root node's
            // dependencies): INVALID_VALUE.
            return Ok(Vec::new());
        }
        let mut nodes: Vec<sys::CUgraphNode> = vec![ptr::null_mut(); count];
        check(fill(nodes.as_mut_ptr(), &mut count))?;
        nodes.truncate(count);
        Ok(nodes.into_iter().map(|n| n as usize as ExecNode).collect())
    }

    /// As `node_list`, with each node's edge data.
    pub(super) fn linked_list(
        fill: impl Fn(*mut sys::CUgraphNode, *mut sys::CUgraphEdgeData, *mut usize) -> sys::CUresult,
    ) -> ExecResult<ExecLinked> {
        let mut count = 0usize;
        check(fill(ptr::null_mut(), ptr::null_mut(), &mut count))?;
        if count == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut nodes: Vec<sys::CUgraphNode> = vec![ptr::null_mut(); count];
        let mut edges = vec![no_edge_data(); count];
        check(fill(nodes.as_mut_ptr(), edges.as_mut_ptr(), &mut count))?;
        nodes.truncate(count);
        edges.truncate(count);
        let nodes = nodes.into_iter().map(|n| n as usize as ExecNode).collect();
        Ok((nodes, edges.iter().map(edge_from_driver).collect()))
    }
}

/// Default edge data, as the driver lays it out.
pub(super) fn no_edge_data() -> sys::CUgraphEdgeData {
    sys::CUgraphEdgeData {
        from_port: 0,
        to_port: 0,
        type_: 0,
        reserved: [0; 5],
    }
}

/// Checked edge data for the driver; empty for default edges (passed as NULL).
pub(super) fn edge_data(edges: &[EdgeData]) -> Vec<sys::CUgraphEdgeData> {
    edges
        .iter()
        .map(|e| sys::CUgraphEdgeData {
            from_port: e.from_port(),
            type_: e.kind(),
            ..no_edge_data()
        })
        .collect()
}

/// A pointer to the first of `list`, or NULL for default edges.
pub(super) fn first_edge(list: &[sys::CUgraphEdgeData]) -> *const sys::CUgraphEdgeData {
    if list.is_empty() {
        ptr::null()
    } else {
        list.as_ptr()
    }
}

pub(super) fn edge_from_driver(e: &sys::CUgraphEdgeData) -> EdgeData {
    EdgeData::from_driver(e.from_port, e.type_)
}

impl Graphs for CudaExecutor {
    fn begin_capture(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        check(unsafe { sys::cuStreamBeginCapture_v2(s, relaxed) })?;
        self.batch.capture_began(stream);
        Ok(())
    }

    fn stream_capturing(&mut self, stream: ExecStream) -> ExecResult<bool> {
        if stream == LEGACY_STREAM {
            return Ok(false); // the legacy stream never captures
        }
        self.bind()?;
        let s = self.stream(stream)?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: out-pointer to a local; `s` is checked.
        check(unsafe { sys::cuStreamIsCapturing(s, &mut status) })?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    fn capture_graph(&mut self, stream: ExecStream) -> ExecResult<(ExecGraph, ExecLinked)> {
        self.bind()?;
        let s = self.stream(stream)?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut graph: sys::CUgraph = ptr::null_mut();
        let mut deps: *const sys::CUgraphNode = ptr::null();
        let mut edges: *const sys::CUgraphEdgeData = ptr::null();
        let mut count = 0usize;
        // SAFETY: out-pointers to locals; `s` is checked; no id asked.
        check(unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                s,
                &mut status,
                ptr::null_mut(),
                &mut graph,
                &mut deps,
                &mut edges,
                &mut count,
            )
        })?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null()
        {
            return Err(CudaStatus::ErrorIllegalState);
        }
        let nodes = if count == 0 || deps.is_null() {
            Vec::new()
        } else {
            // SAFETY: the driver returned `count` nodes at `deps`, valid until the next
            // call on this stream; copied out at once.
            unsafe { std::slice::from_raw_parts(deps, count) }
                .iter()
                .map(|&n| n as usize as ExecNode)
                .collect()
        };
        let data = if nodes.is_empty() || edges.is_null() {
            vec![EdgeData::default(); nodes.len()]
        } else {
            // SAFETY: as for `deps`: `count` records at `edges`, copied out at once.
            unsafe { std::slice::from_raw_parts(edges, count) }
                .iter()
                .map(edge_from_driver)
                .collect()
        };
        let id = graph as usize as ExecGraph;
        self.graph_tables.building.insert(id, self.current);
        Ok((id, (nodes, data)))
    }

    fn end_capture(&mut self, stream: ExecStream) -> ExecResult<ExecGraph> {
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        let mut existing = None;
        if !self.graph_tables.building.is_empty() {
            // The graph being built stops being readable here whatever the outcome (an
            // invalidated capture's graph is gone with it, unless it existed before).
            if let Ok((g, _)) = self.capture_graph(stream) {
                self.graph_tables.building.remove(&g);
                existing = self
                    .graph_tables
                    .into_existing
                    .remove(&g)
                    .map(|owned| (g, owned));
            }
        }
        let mut graph: sys::CUgraph = ptr::null_mut();
        // SAFETY: out-pointer to a local; `s` is checked.
        let ended = check(unsafe { sys::cuStreamEndCapture(s, &mut graph) });
        // Launches may be held again once the capture is over (an end called from a
        // stream that only joined it leaves it open).
        if !self.stream_capturing(stream).unwrap_or(false) {
            self.batch.capture_ended(stream);
        }
        if let Some((g, owned)) = existing {
            // The program's graph, with what the capture added to it or not.
            match owned {
                Some(o) => {
                    self.graph_tables.owned.insert(g, o);
                }
                None => {
                    self.graph_tables.graphs.insert(g, idx);
                }
            }
            ended?;
            return Ok(g);
        }
        ended?;
        if graph.is_null() {
            return Err(CudaStatus::ErrorStreamCaptureInvalidated);
        }
        let id = graph as usize as ExecGraph;
        // A new graph may have the address of one a destroyed node owned.
        self.graph_tables.owned.remove(&id);
        self.graph_tables.graphs.insert(id, idx);
        Ok(id)
    }

    fn graph_instantiate(&mut self, graph: ExecGraph, flags: u64) -> ExecResult<ExecGraphExec> {
        let idx = self.bind()?;
        let g = self.graph(graph)?;
        let mut exec: sys::CUgraphExec = ptr::null_mut();
        // SAFETY: out-pointer to a local; `g` is a live graph of this executor.
        check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g, flags) })?;
        let id = exec as usize as ExecGraphExec;
        self.graph_tables.execs.insert(id, idx);
        Ok(id)
    }

    fn graph_launch(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        if !self.graph_tables.execs.contains_key(&exec) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: `exec` is a live executable graph of this executor; `s` is checked.
        check(unsafe { sys::cuGraphLaunch(exec as usize as sys::CUgraphExec, s) })
    }

    fn graph_destroy(&mut self, graph: ExecGraph) -> ExecResult<()> {
        self.bind()?;
        let g = self.graph(graph)?;
        self.graph_tables.graphs.remove(&graph);
        self.graph_tables.forget_owned(|o| o.parent == graph);
        // SAFETY: a live graph, destroyed once (it has left the table).
        check(unsafe { sys::cuGraphDestroy(g) })
    }

    fn graph_exec_destroy(&mut self, exec: ExecGraphExec) -> ExecResult<()> {
        self.bind()?;
        if self.graph_tables.execs.remove(&exec).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: a live executable graph, destroyed once (it has left the table).
        check(unsafe { sys::cuGraphExecDestroy(exec as usize as sys::CUgraphExec) })
    }

    fn graph_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>> {
        self.bind()?;
        let g = self.readable_graph(graph)?;
        // SAFETY: `g` is live; the driver writes at most `*count` nodes to the buffer.
        Self::node_list(|nodes, count| unsafe { sys::cuGraphGetNodes(g, nodes, count) })
    }

    fn node_dependencies(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecLinked> {
        self.bind()?;
        // The session hands out only nodes it got from graph_nodes of this live graph.
        self.readable_graph(graph)?;
        let n = node as usize as sys::CUgraphNode;
        // SAFETY: `n` is a node of a live graph; the driver writes at most `*count`
        // nodes and as many edge records.
        Self::linked_list(|deps, edges, count| unsafe {
            sys::cuGraphNodeGetDependencies_v2(n, deps, edges, count)
        })
    }

    fn graph_dot(&mut self, graph: ExecGraph, flags: u32) -> ExecResult<Vec<u8>> {
        self.bind()?;
        let g = self.readable_graph(graph)?;
        // The driver writes a file: one of ours, made new (never an existing path),
        // read back and removed.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "vmcuda-graph-{}-{}.dot",
            crate::process::host_pid(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.flush());
        if let Err(e) = made {
            warn!("cannot make a file for the graph's DOT text: {e}");
            return Err(CudaStatus::ErrorOperatingSystem);
        }
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| CudaStatus::ErrorOperatingSystem)?;
        // SAFETY: `g` is live; `c_path` is a NUL-terminated path we own.
        let printed = check(unsafe { sys::cuGraphDebugDotPrint(g, c_path.as_ptr(), flags) });
        let text = std::fs::read(&path);
        let _ = std::fs::remove_file(&path);
        printed?;
        text.map_err(|_| CudaStatus::ErrorOperatingSystem)
    }

    fn alloc_async(
        &mut self,
        size: u64,
        pool: Option<ExecPool>,
        stream: ExecStream,
    ) -> ExecResult<DevicePtr> {
        self.bind()?;
        let s = self.stream(stream)?;
        let size = to_usize(size)?;
        let mut ptr: sys::CUdeviceptr = 0;
        match pool {
            // SAFETY: out-pointer to a local; `s` is checked.
            None => check(unsafe { sys::cuMemAllocAsync(&mut ptr, size, s) })?,
            Some(_) => {
                let p = self.pool(pool)?;
                // SAFETY: out-pointer to a local; `p` is a live pool of this executor's;
                // `s` is checked.
                check(unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size, p, s) })?
            }
        }
        Ok(ptr)
    }

    fn free_async(&mut self, ptr: DevicePtr, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: the session passes only allocations of this guest; `s` is checked.
        check(unsafe { sys::cuMemFreeAsync(ptr, s) })
    }

    fn pool_get_attribute(&mut self, pool: Option<ExecPool>, attr: u32) -> ExecResult<u64> {
        let pool = self.pool(pool)?;
        let a = pool_attribute(attr)?;
        // Room for either an `int` or a `cuuint64_t` (little endian: an `int` lands in
        // the low bytes).
        let mut value = 0u64;
        // SAFETY: `pool` is a live pool; `value` has room for the attribute's type.
        check(unsafe { sys::cuMemPoolGetAttribute(pool, a, (&mut value as *mut u64).cast()) })?;
        if pool_attr::is_int(attr) {
            value &= 0xFFFF_FFFF;
        }
        Ok(value)
    }

    fn pool_set_attribute(
        &mut self,
        pool: Option<ExecPool>,
        attr: u32,
        value: u64,
    ) -> ExecResult<()> {
        let pool = self.pool(pool)?;
        let a = pool_attribute(attr)?;
        let mut wide = value;
        let mut narrow = i32::from(value != 0);
        let arg: *mut std::ffi::c_void = if pool_attr::is_int(attr) {
            (&mut narrow as *mut i32).cast()
        } else {
            (&mut wide as *mut u64).cast()
        };
        // SAFETY: `pool` is a live pool; `arg` points at a value of the attribute's
        // type.
        check(unsafe { sys::cuMemPoolSetAttribute(pool, a, arg) })
    }

    fn pool_trim_to(&mut self, pool: Option<ExecPool>, min_bytes_to_keep: u64) -> ExecResult<()> {
        let pool = self.pool(pool)?;
        // The driver gives back only memory whose asynchronous frees it saw finish, and
        // it sees that when the host synchronizes; a guest whose synchronize ended on
        // a done word made none here.
        self.settle_finished_streams()?;
        let keep = usize::try_from(min_bytes_to_keep).unwrap_or(usize::MAX);
        // SAFETY: `pool` is a live pool.
        check(unsafe { sys::cuMemPoolTrimTo(pool, keep) })
    }

    fn pool_create(&mut self, max_size: u64, shareable: bool) -> ExecResult<ExecPool> {
        let idx = self.bind()?;
        use sys::CUmemAllocationHandleType as H;
        let props = sys::CUmemPoolProps {
            allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: match shareable {
                true => H::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                false => H::CU_MEM_HANDLE_TYPE_NONE,
            },
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.devices[idx].handle,
            },
            win32SecurityAttributes: ptr::null_mut(),
            maxSize: usize::try_from(max_size).map_err(|_| CudaStatus::ErrorInvalidValue)?,
            usage: 0,
            reserved: [0; 54],
        };
        let mut pool: sys::CUmemoryPool = ptr::null_mut();
        // SAFETY: out-pointer to a local; `props` is a complete CUmemPoolProps.
        check(unsafe { sys::cuMemPoolCreate(&mut pool, &props) })?;
        let id = pool as usize as ExecPool;
        self.graph_tables.pools.insert(id, idx);
        Ok(id)
    }

    fn pool_export(&mut self, pool: ExecPool) -> ExecResult<ExecShare> {
        let idx = self.bind()?;
        let p = self.pool(Some(pool))?;
        let mut fd: c_int = -1;
        let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        // SAFETY: `p` is a live pool; for POSIX handles the driver writes an int.
        check(unsafe {
            sys::cuMemPoolExportToShareableHandle((&mut fd as *mut c_int).cast(), p, posix, 0)
        })?;
        if fd < 0 {
            return Err(CudaStatus::ErrorUnknown);
        }
        // SAFETY: the driver just opened `fd` for us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(self.keep_share(idx, Share::Pool(fd)))
    }

    fn pool_import(&mut self, share: ExecShare) -> ExecResult<ExecPool> {
        let idx = self.bind()?;
        let Some((d, Share::Pool(fd))) = self.graph_tables.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        if *d != idx {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        let fd = fd.as_raw_fd();
        self.import_pool_descriptor(idx, fd)
    }

    fn pool_export_pointer(&mut self, dptr: DevicePtr) -> ExecResult<ExecShare> {
        let idx = self.bind()?;
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: out-pointer to a local; the driver judges the pointer.
        check(unsafe { sys::cuMemPoolExportPointer(&mut data, dptr) })?;
        Ok(self.keep_share(idx, Share::Pointer(data)))
    }

    fn pool_import_pointer(&mut self, pool: ExecPool, share: ExecShare) -> ExecResult<DevicePtr> {
        self.bind()?;
        let p = self.pool(Some(pool))?;
        let Some((_, Share::Pointer(data))) = self.graph_tables.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let data = *data;
        import_pointer(p, data)
    }

    fn share_drop(&mut self, share: ExecShare) {
        self.graph_tables.shares.remove(&share);
    }

    fn pool_share_out(&mut self, share: ExecShare) -> ExecResult<(OwnedFd, [u8; SHARE_LEN])> {
        let Some((_, Share::Pool(fd))) = self.graph_tables.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // The driver's descriptor is all another worker needs.
        let copy = fd
            .try_clone()
            .map_err(|_| CudaStatus::ErrorOperatingSystem)?;
        Ok((copy, [0; SHARE_LEN]))
    }

    fn pointer_share_out(
        &mut self,
        share: ExecShare,
    ) -> ExecResult<([u8; SHARE_LEN], Option<OwnedFd>)> {
        let Some((_, Share::Pointer(data))) = self.graph_tables.shares.get(&share) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // The memory travels through the pool's descriptor, imported already.
        Ok((data.reserved, None))
    }

    fn pool_import_from(
        &mut self,
        shared: OwnedFd,
        _handle: &[u8; SHARE_LEN],
    ) -> ExecResult<ExecPool> {
        let idx = self.bind()?;
        let pool = self.import_pool_descriptor(idx, shared.as_raw_fd())?;
        // Kept open while the pool lives, as the exporter keeps its own.
        self.graph_tables.imported.insert(pool, shared);
        Ok(pool)
    }

    fn pool_import_pointer_from(
        &mut self,
        pool: ExecPool,
        data: &[u8; SHARE_LEN],
        _size: u64,
        _shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr> {
        self.bind()?;
        let p = self.pool(Some(pool))?;
        import_pointer(p, sys::CUmemPoolPtrExportData { reserved: *data })
    }

    fn pool_destroy(&mut self, pool: ExecPool) -> ExecResult<()> {
        let p = self.pool(Some(pool))?;
        self.graph_tables.pools.remove(&pool);
        // SAFETY: made by pool_create, destroyed once (it has left the table).
        let destroyed = check(unsafe { sys::cuMemPoolDestroy(p) });
        self.graph_tables.imported.remove(&pool);
        destroyed
    }

    fn pool_get_access(&mut self, pool: Option<ExecPool>, device: i32) -> ExecResult<u32> {
        let pool = self.pool(pool)?;
        // Guest device numbers are this executor's device indices.
        let idx = self.device_index(device)?;
        let mut location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: self.devices[idx].handle,
        };
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: `pool` is a live pool; out-pointer and location are locals.
        check(unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, &mut location) })?;
        Ok(flags as u32)
    }

    fn graph_mem_attribute(&mut self, attr: u32) -> ExecResult<u64> {
        let idx = self.bind()?;
        let attr = graph_mem_attribute(attr)?;
        let mut value: u64 = 0;
        // SAFETY: the device handle came from cuDeviceGet; the driver writes one u64.
        check(unsafe {
            sys::cuDeviceGetGraphMemAttribute(
                self.devices[idx].handle,
                attr,
                (&mut value as *mut u64).cast(),
            )
        })?;
        Ok(value)
    }

    fn graph_mem_reset_high(&mut self, attr: u32) -> ExecResult<()> {
        let idx = self.bind()?;
        let attr = graph_mem_attribute(attr)?;
        let mut zero: u64 = 0;
        // SAFETY: as above; the driver reads one u64 (a high mark's reset to 0).
        check(unsafe {
            sys::cuDeviceSetGraphMemAttribute(
                self.devices[idx].handle,
                attr,
                (&mut zero as *mut u64).cast(),
            )
        })
    }

    fn pool_set_access(&mut self, pool: Option<ExecPool>, access: &[MemAccess]) -> ExecResult<()> {
        let pool = self.pool(pool)?;
        let mut descs = Vec::with_capacity(access.len());
        for a in access {
            // Guest device numbers are this executor's device indices.
            let idx = self.device_index(a.location_id)?;
            let flags = match a.flags {
                0 => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
                1 => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
                3 => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                _ => return Err(CudaStatus::ErrorInvalidValue),
            };
            descs.push(sys::CUmemAccessDesc {
                location: sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: self.devices[idx].handle,
                },
                flags,
            });
        }
        // SAFETY: `pool` is a live pool; `descs` holds `len` entries.
        check(unsafe { sys::cuMemPoolSetAccess(pool, descs.as_ptr(), descs.len()) })
    }
}
