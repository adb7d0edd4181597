//! The graph part of the executor seam: stream capture, graphs and executable graphs,
//! stream-ordered allocation and memory pools (the devices' default pools and pools
//! made for the guest).
//!
//! Graph, executable-graph and node ids are the executor's own; the session maps the
//! guest's handles onto them and checks them first. Capture is always relaxed at this
//! level (the guest enforces its threads' capture modes).

use vmcuda_wire::graph::MemAccess;
use vmcuda_wire::op::DevicePtr;

use super::{ExecResult, ExecStream};

pub type ExecGraph = u64;
pub type ExecGraphExec = u64;
pub type ExecNode = u64;
/// A memory pool made by `pool_create`, by the executor's own id.
pub type ExecPool = u64;

pub trait Graphs {
    /// Begin capturing `stream` (relaxed mode).
    fn begin_capture(&mut self, stream: ExecStream) -> ExecResult<()>;
    /// Whether `stream` is capturing now (begun on it, or joined through an event).
    fn stream_capturing(&mut self, stream: ExecStream) -> ExecResult<bool>;
    /// The graph `stream`'s capture is building and the stream's current dependencies.
    fn capture_graph(&mut self, stream: ExecStream) -> ExecResult<(ExecGraph, Vec<ExecNode>)>;
    /// End the capture begun on `stream`; the graph it made.
    fn end_capture(&mut self, stream: ExecStream) -> ExecResult<ExecGraph>;
    fn graph_instantiate(&mut self, graph: ExecGraph, flags: u64) -> ExecResult<ExecGraphExec>;
    fn graph_launch(&mut self, exec: ExecGraphExec, stream: ExecStream) -> ExecResult<()>;
    fn graph_destroy(&mut self, graph: ExecGraph) -> ExecResult<()>;
    fn graph_exec_destroy(&mut self, exec: ExecGraphExec) -> ExecResult<()>;
    /// The graph's nodes, in the driver's order.
    fn graph_nodes(&mut self, graph: ExecGraph) -> ExecResult<Vec<ExecNode>>;
    /// The nodes `node` (of `graph`) depends on.
    fn node_dependencies(&mut self, graph: ExecGraph, node: ExecNode) -> ExecResult<Vec<ExecNode>>;
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
    /// bytes (0: the driver's default), with no shareable handle types.
    fn pool_create(&mut self, max_size: u64) -> ExecResult<ExecPool>;
    /// Destroy a pool `pool_create` made; what is still allocated from it stays valid
    /// until freed.
    fn pool_destroy(&mut self, pool: ExecPool) -> ExecResult<()>;
    /// The `cudaMemAccessFlags` device `device` (a guest device number) has on `pool`.
    fn pool_get_access(&mut self, pool: Option<ExecPool>, device: i32) -> ExecResult<u32>;
    /// Give the current device's graph memory that nothing holds any more back to the
    /// device, once the work issued so far is done (`cuDeviceGraphMemTrim`): the driver
    /// keeps freed graph memory cached for later launches until it is trimmed.
    fn graph_mem_trim(&mut self) -> ExecResult<()>;
    /// Device ids in `access` are the guest's device numbers.
    fn pool_set_access(&mut self, pool: Option<ExecPool>, access: &[MemAccess]) -> ExecResult<()>;
}
