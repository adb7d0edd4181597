//! The graph part of the executor seam: stream capture, graphs and executable graphs,
//! stream-ordered allocation and memory pools (the devices' default pools and pools
//! made for the guest).
//!
//! Graph, executable-graph and node ids are the executor's own; the session maps the
//! guest's handles onto them and checks them first. Capture is always relaxed at this
//! level (the guest enforces its threads' capture modes).

use std::os::fd::OwnedFd;

use vmcuda_wire::graph::{EdgeData, MemAccess};
use vmcuda_wire::op::DevicePtr;

use super::{ExecEvent, ExecFunction, ExecResult, ExecStream, KernelShape, StreamAttrValue};

pub type ExecGraph = u64;
pub type ExecGraphExec = u64;
pub type ExecNode = u64;
/// A memory pool made by `pool_create`, by the executor's own id.
pub type ExecPool = u64;
/// An exported pool or allocation, as an executor names it.
pub type ExecShare = u64;
/// The bytes that go with an export to another process (`CUmemPoolPtrExportData`'s
/// length).
pub const SHARE_LEN: usize = 64;

/// A node with no work a stream could carry, by the executor's ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecPlainNode {
    Empty,
    /// A copy of this graph, taken now.
    ChildGraph(ExecGraph),
    EventRecord(ExecEvent),
    EventWait(ExecEvent),
    /// This graph itself, which the node owns from then on (the session checked it is
    /// the guest's, finished and owned by nothing else).
    MovedChildGraph(ExecGraph),
}

/// Nodes, each with the data of its edge to or from the node asked about.
pub type ExecLinked = (Vec<ExecNode>, Vec<EdgeData>);
/// A graph's edges `from[i] -> to[i]` with `data[i]`.
pub type ExecEdges = (Vec<ExecNode>, Vec<ExecNode>, Vec<EdgeData>);

/// `cudaGraphExecUpdate`'s answer: the result code and the nodes it names (0: none).
pub type ExecUpdate = (u32, ExecNode, ExecNode);

/// Graphs built by hand, node by node. Node ids are those of the graph named beside
/// them (the session checks that pairing).
pub trait GraphBuild {
    fn graph_create(&mut self, flags: u32) -> ExecResult<ExecGraph>;
    /// Begin capturing `stream` into `graph` (relaxed), the first work captured
    /// depending on `dependencies`. `end_capture` ends it and gives `graph` back.
    /// `edges` (here and below) is empty for default edges, else one per dependency.
    fn begin_capture_to_graph(
        &mut self,
        stream: ExecStream,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
    ) -> ExecResult<()>;
    /// A capturing stream's next work depends on `dependencies` (nodes of its
    /// capture's graph): instead of what it depended on (`set`), or besides.
    fn update_capture_dependencies(
        &mut self,
        stream: ExecStream,
        dependencies: &[ExecNode],
        edges: &[EdgeData],
        set: bool,
    ) -> ExecResult<()>;
    fn add_plain_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        node: ExecPlainNode,
    ) -> ExecResult<ExecNode>;
    /// The node's `cudaGraphNodeType`.
    fn node_type(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<u32>;
    /// Set or read a launch attribute of kernel node `node` of `graph`: `attr` a
    /// `CUkernelNodeAttrID`, the value laid out as a stream's.
    fn kernel_node_set_attribute(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()>;
    fn kernel_node_get_attribute(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        attr: u32,
    ) -> ExecResult<StreamAttrValue>;
    /// Copy every launch attribute of kernel node `src` to kernel node `dst` (each a
    /// graph and a node of it).
    fn kernel_node_copy_attributes(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
    ) -> ExecResult<()>;
    /// Add (or, with `add` false, remove) the edges `from[i] -> to[i]` (with
    /// `edges[i]`).
    fn change_dependencies(
        &mut self,
        graph: ExecGraph,
        from: &[ExecNode],
        to: &[ExecNode],
        edges: &[EdgeData],
        add: bool,
    ) -> ExecResult<()>;
    /// Every edge, as (from, to, data) lists.
    fn graph_edges(&mut self, graph: ExecGraph) -> ExecResult<ExecEdges>;
    fn root_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>>;
    fn dependent_nodes(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecLinked>;
    fn destroy_node(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<()>;
    fn graph_clone(&mut self, graph: ExecGraph) -> ExecResult<ExecGraph>;
    /// The node of `clone` (a clone of `graph`) that was `node`.
    fn find_in_clone(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
        clone: ExecGraph,
    ) -> ExecResult<ExecNode>;
    /// Update `exec` to `graph`'s parameters, where its topology is the same.
    fn exec_update(&mut self, exec: ExecGraphExec, graph: ExecGraph) -> ExecResult<ExecUpdate>;
    /// Enable or disable `node` (of the graph `exec` was made of) in `exec`.
    fn node_set_enabled(
        &mut self,
        exec: ExecGraphExec,
        node: ExecNode,
        enabled: bool,
    ) -> ExecResult<()>;
    fn node_enabled(&mut self, exec: ExecGraphExec, node: ExecNode) -> ExecResult<bool>;
    fn graph_upload(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()>;
    /// The graph a child-graph node holds (the node's: not to destroy).
    fn child_graph(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecGraph>;
    /// Give `dst` the parameters of `src` (a node of the same type): in its graph, or
    /// with `exec`, in that executable graph only.
    fn node_copy_params(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
    ) -> ExecResult<()>;
    /// Give child-graph node `node` (of `exec`'s graph or a graph it holds) a copy of
    /// `child` in `exec` only, where `child`'s topology is the node's graph's.
    fn exec_child_graph_set(
        &mut self,
        exec: ExecGraphExec,
        node: (ExecGraph, ExecNode),
        child: ExecGraph,
    ) -> ExecResult<()>;
    /// New kernel parameters for kernel node `node`: `function` of `shape` with the
    /// packed parameter buffer `params` (as a launch's), in its graph, or with `exec`,
    /// in that executable graph only.
    fn kernel_node_set_params(
        &mut self,
        node: (ExecGraph, ExecNode),
        exec: Option<ExecGraphExec>,
        function: ExecFunction,
        shape: &KernelShape,
        params: &[u8],
    ) -> ExecResult<()>;
    /// A kernel node's function, shape and packed parameter buffer, as the driver holds
    /// them.
    fn kernel_node_get_params(
        &mut self,
        graph: ExecGraph,
        node: ExecNode,
    ) -> ExecResult<(ExecFunction, KernelShape, Vec<u8>)>;
    /// Put a host function's place in `stream`'s order (captured, a graph's host
    /// node): set the request word at `slot` (this process's address of 8 bytes of
    /// the guest's shared memory, mapped and registered here: request, done), clear
    /// the done word, and wait until the guest sets it.
    fn host_function_signal(&mut self, stream: ExecStream, slot: u64) -> ExecResult<()>;
    /// A conditional handle of `graph`: the value device code sets.
    fn conditional_handle_create(
        &mut self,
        graph: ExecGraph,
        default_value: u32,
        flags: u32,
    ) -> ExecResult<u64>;
    /// A conditional node of `kind` with `size` bodies: the node and the bodies, which
    /// are its own (built into, never destroyed but with it).
    fn add_conditional_node(
        &mut self,
        graph: ExecGraph,
        dependencies: &[ExecNode],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> ExecResult<(ExecNode, Vec<ExecGraph>)>;
}

pub trait Graphs {
    /// Begin capturing `stream` (relaxed mode).
    fn begin_capture(&mut self, stream: ExecStream) -> ExecResult<()>;
    /// Whether `stream` is capturing now (begun on it, or joined through an event).
    fn stream_capturing(&mut self, stream: ExecStream) -> ExecResult<bool>;
    /// The graph `stream`'s capture is building and the stream's current dependencies.
    fn capture_graph(&mut self, stream: ExecStream) -> ExecResult<(ExecGraph, ExecLinked)>;
    /// End the capture begun on `stream`; the graph it made.
    fn end_capture(&mut self, stream: ExecStream) -> ExecResult<ExecGraph>;
    fn graph_instantiate(&mut self, graph: ExecGraph, flags: u64) -> ExecResult<ExecGraphExec>;
    fn graph_launch(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()>;
    fn graph_destroy(&mut self, graph: ExecGraph) -> ExecResult<()>;
    fn graph_exec_destroy(&mut self, exec: ExecGraphExec) -> ExecResult<()>;
    /// The graph's nodes, in the driver's order.
    fn graph_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>>;
    /// The nodes `node` (of `graph`) depends on.
    fn node_dependencies(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<ExecLinked>;
    /// The graph in Graphviz DOT.
    fn graph_dot(&mut self, graph: ExecGraph, flags: u32) -> ExecResult<Vec<u8>>;

    /// `size` bytes from `pool` (`None`: the current device's default pool), ordered
    /// on `stream`.
    fn alloc_async(
        &mut self,
        size: u64,
        pool: Option<ExecPool>,
        stream: ExecStream,
    ) -> ExecResult<DevicePtr>;
    /// Release `ptr` (from `alloc_async`, or from `alloc`) once `stream` gets there.
    fn free_async(&mut self, ptr: DevicePtr, stream: ExecStream) -> ExecResult<()>;
    /// An attribute of `pool` (`None`: the current device's default pool; `int` ones
    /// widened).
    fn pool_get_attribute(&mut self, pool: Option<ExecPool>, attr: u32) -> ExecResult<u64>;
    fn pool_set_attribute(
        &mut self,
        pool: Option<ExecPool>,
        attr: u32,
        value: u64,
    ) -> ExecResult<()>;
    fn pool_trim_to(&mut self, pool: Option<ExecPool>, min_bytes_to_keep: u64) -> ExecResult<()>;
    /// A pool of pinned memory on the current device, reserving at most `max_size`
    /// bytes (0: the driver's default); `shareable`: with POSIX file-descriptor
    /// handles, so it may be exported, else none.
    fn pool_create(&mut self, max_size: u64, shareable: bool) -> ExecResult<ExecPool>;
    /// Export a shareable pool: the executor keeps what the driver gave, named by the
    /// result, until [`Graphs::share_drop`] or the device's reset.
    fn pool_export(&mut self, pool: ExecPool) -> ExecResult<ExecShare>;
    /// An exported pool imported as another pool, on the current device (the
    /// exporting pool's).
    fn pool_import(&mut self, share: ExecShare) -> ExecResult<ExecPool>;
    /// Export an allocation from a shareable pool.
    fn pool_export_pointer(&mut self, ptr: DevicePtr) -> ExecResult<ExecShare>;
    /// Map an exported allocation through an imported pool: a new address for the same
    /// memory, freed as any allocation is.
    fn pool_import_pointer(&mut self, pool: ExecPool, share: ExecShare) -> ExecResult<DevicePtr>;
    fn share_drop(&mut self, share: ExecShare);
    /// A pool export (from [`Graphs::pool_export`]) for another process of the VM: a
    /// descriptor for the importing worker's executor (the driver's POSIX handle,
    /// copied) and the bytes that go with it.
    fn pool_share_out(&mut self, share: ExecShare) -> ExecResult<(OwnedFd, [u8; SHARE_LEN])>;
    /// An allocation export (from [`Graphs::pool_export_pointer`]) for another process
    /// of the VM: its export data (the driver's 64 bytes) and, where the executor
    /// needs one to share the memory, a descriptor of it.
    fn pointer_share_out(
        &mut self,
        share: ExecShare,
    ) -> ExecResult<([u8; SHARE_LEN], Option<OwnedFd>)>;
    /// Another process's pool export ([`Graphs::pool_share_out`] of its worker's
    /// executor) imported as a pool, on the current device.
    fn pool_import_from(
        &mut self,
        shared: OwnedFd,
        handle: &[u8; SHARE_LEN],
    ) -> ExecResult<ExecPool>;
    /// Another process's allocation export ([`Graphs::pointer_share_out`]), `size`
    /// bytes, mapped through `pool` (a pool [`Graphs::pool_import_from`] made): a new
    /// address of the same memory, freed as any allocation is.
    fn pool_import_pointer_from(
        &mut self,
        pool: ExecPool,
        data: &[u8; SHARE_LEN],
        size: u64,
        shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr>;
    /// Destroy a pool `pool_create` made; what is still allocated from it stays valid
    /// until freed.
    fn pool_destroy(&mut self, pool: ExecPool) -> ExecResult<()>;
    /// The `cudaMemAccessFlags` device `device` (a guest device number) has on `pool`.
    fn pool_get_access(&mut self, pool: Option<ExecPool>, device: i32) -> ExecResult<u32>;
    /// A `cudaGraphMemAttr*` figure of the current device's graph memory.
    fn graph_mem_attribute(&mut self, attr: u32) -> ExecResult<u64>;
    /// Reset a high mark (`cudaGraphMemAttrUsedMemHigh` or `ReservedMemHigh`) to the
    /// current figure.
    fn graph_mem_reset_high(&mut self, attr: u32) -> ExecResult<()>;
    /// Device ids in `access` are the guest's device numbers.
    fn pool_set_access(&mut self, pool: Option<ExecPool>, access: &[MemAccess]) -> ExecResult<()>;
}
