//! Stream capture, CUDA graphs and stream-ordered memory on the wire.
//!
//! Graphs, executable graphs and graph nodes are host objects: the host names them
//! with ids of its own session (never host pointers), and a guest can only ever name
//! the ones its own connection made. Capture state is the guest's to answer
//! (`cudaStreamIsCapturing` costs no round trip): the host only begins and ends the
//! driver's capture. A memory pool is a device's default pool, named by the device,
//! or one the guest made, named by the host ([`PoolRef`]).

use serde::{Deserialize, Serialize};

use crate::handle::{DevicePtr, EventHandle, StreamHandle};
pub use crate::handle::{GraphExecHandle, GraphHandle, GraphNodeHandle, MemPoolHandle};

/// `cudaStreamCaptureMode` values.
pub mod capture_mode {
    pub const GLOBAL: u32 = 0;
    pub const THREAD_LOCAL: u32 = 1;
    pub const RELAXED: u32 = 2;
}

/// `cudaMemPoolAttr` values.
pub mod pool_attr {
    pub const REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
    pub const REUSE_ALLOW_OPPORTUNISTIC: u32 = 2;
    pub const REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
    pub const RELEASE_THRESHOLD: u32 = 4;
    pub const RESERVED_MEM_CURRENT: u32 = 5;
    pub const RESERVED_MEM_HIGH: u32 = 6;
    pub const USED_MEM_CURRENT: u32 = 7;
    pub const USED_MEM_HIGH: u32 = 8;

    /// Whether the attribute's value is an `int` (else a `cuuint64_t`).
    pub fn is_int(attr: u32) -> bool {
        (REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES).contains(&attr)
    }

    /// Whether CUDA knows the attribute at all.
    pub fn is_known(attr: u32) -> bool {
        (REUSE_FOLLOW_EVENT_DEPENDENCIES..=USED_MEM_HIGH).contains(&attr)
    }

    /// Whether `cudaMemPoolSetAttribute` may set it to `value`: the reuse flags and the
    /// release threshold take any value; the high-water marks only a reset to 0; the
    /// current figures are read-only.
    pub fn settable(attr: u32, value: u64) -> bool {
        match attr {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=RELEASE_THRESHOLD => true,
            RESERVED_MEM_HIGH | USED_MEM_HIGH => value == 0,
            _ => false,
        }
    }
}

/// Begin capturing `stream` into a new graph. The host always captures in relaxed
/// mode: one worker thread runs every guest thread's calls, so the calling thread's
/// capture mode is the guest's to enforce.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamBeginCapture {
    pub stream: StreamHandle,
}

/// End the capture begun on `stream`. `invalidated`: the guest refused a call during
/// the capture (CUDA invalidates the capture then): the host ends the driver's capture,
/// drops what it made and answers `cudaErrorStreamCaptureInvalidated`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamEndCapture {
    pub stream: StreamHandle,
    pub invalidated: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphMade {
    pub graph: GraphHandle,
}
/// The graph a capturing stream is building and the nodes its next node will depend
/// on (`cudaStreamGetCaptureInfo` when the program asks for them). The graph keeps
/// its handle when the capture ends.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamGetCaptureGraph {
    pub stream: StreamHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CaptureGraph {
    pub graph: GraphHandle,
    pub dependencies: Vec<GraphNodeHandle>,
    /// One per dependency.
    pub edges: Vec<RawEdge>,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphInstantiate {
    pub graph: GraphHandle,
    pub flags: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphExecMade {
    pub exec: GraphExecHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphLaunch {
    pub exec: GraphExecHandle,
    pub stream: StreamHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphDestroy {
    pub graph: GraphHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphExecDestroy {
    pub exec: GraphExecHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphGetNodes {
    pub graph: GraphHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphNodeGetDependencies {
    pub node: GraphNodeHandle,
}
/// Nodes, in the driver's order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphNodes {
    pub nodes: Vec<GraphNodeHandle>,
}
/// The graph in Graphviz DOT; the text comes back in the reply and the guest writes it
/// to the program's path (the host never touches the guest's files).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphDebugDot {
    pub graph: GraphHandle,
    pub flags: u32,
}
/// At most this much DOT text travels (the reply's argument block is bounded).
pub const MAX_DOT_LEN: usize = (crate::frame::MAX_META_LEN as usize) - 64;
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DotText {
    pub text: Vec<u8>,
}

/// `cudaGraphNodeType` values.
pub mod node_type {
    pub const KERNEL: u32 = 0;
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const HOST: u32 = 3;
    pub const GRAPH: u32 = 4;
    pub const EMPTY: u32 = 5;
    pub const WAIT_EVENT: u32 = 6;
    pub const EVENT_RECORD: u32 = 7;
    pub const MEM_ALLOC: u32 = 10;
    pub const MEM_FREE: u32 = 11;
    pub const BATCH_MEM_OP: u32 = 12;
    pub const CONDITIONAL: u32 = 13;
}

/// `cudaGraphExecUpdateResult` values.
pub mod update_result {
    pub const SUCCESS: u32 = 0;
    pub const ERROR: u32 = 1;
    pub const TOPOLOGY_CHANGED: u32 = 2;
    pub const NODE_TYPE_CHANGED: u32 = 3;
    pub const FUNCTION_CHANGED: u32 = 4;
    pub const PARAMETERS_CHANGED: u32 = 5;
    pub const NOT_SUPPORTED: u32 = 6;
    pub const UNSUPPORTED_FUNCTION_CHANGE: u32 = 7;
    pub const ATTRIBUTES_CHANGED: u32 = 8;
}

/// `cudaGraphConditionalNodeType` values.
pub mod conditional_type {
    pub const IF: u32 = 0;
    pub const WHILE: u32 = 1;
    pub const SWITCH: u32 = 2;
}

/// Begin capturing `stream` into the existing graph `graph`, the first captured work
/// depending on `dependencies` (nodes of that graph). A graph built by hand gets its
/// kernel, copy, memset and memory nodes this way: the guest issues the node's work on
/// a stream capturing into the graph, so each node is checked exactly as the same
/// work issued on a stream is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamBeginCaptureToGraph {
    pub stream: StreamHandle,
    pub graph: GraphHandle,
    pub dependencies: Vec<GraphNodeHandle>,
    /// One per dependency, or none for default edges.
    pub edges: Vec<RawEdge>,
}

/// A node with no work a stream could carry.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum PlainNode {
    Empty,
    /// A child graph: a copy of `GraphHandle`'s graph, taken now.
    ChildGraph(GraphHandle),
    EventRecord(EventHandle),
    EventWait(EventHandle),
    /// A child graph that `GraphHandle`'s graph itself becomes (the ownership "move"
    /// of `cudaChildGraphNodeParams`): it goes with the node from then on.
    MovedChildGraph(GraphHandle),
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphAddNode {
    pub graph: GraphHandle,
    pub dependencies: Vec<GraphNodeHandle>,
    pub node: PlainNode,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphNodeMade {
    pub node: GraphNodeHandle,
}

/// Edges, as pairs `from[i] -> to[i]` with `data[i]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EdgeList {
    pub from: Vec<GraphNodeHandle>,
    pub to: Vec<GraphNodeHandle>,
    pub data: Vec<RawEdge>,
}

/// A node's dependencies or dependent nodes, each with the data of its edge.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LinkedNodes {
    pub nodes: Vec<GraphNodeHandle>,
    pub edges: Vec<RawEdge>,
}

/// `cudaGraphEdgeData` as the program wrote it, 8 bytes read little-endian: the
/// upstream node's port, the downstream node's port, the type, five reserved bytes.
/// All zero is the default edge: the downstream node waits for all of the upstream one.
pub type RawEdge = u64;

/// Edge data that passed [`EdgeData::checked`]: a known port and type, no downstream
/// port (no node type defines one) and zero reserved bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EdgeData {
    from_port: u8,
    kind: u8,
}

impl EdgeData {
    /// `cudaGraphKernelNodePortProgrammatic`: every block triggered or ended.
    pub const PORT_PROGRAMMATIC: u8 = 1;
    /// `cudaGraphKernelNodePortLaunchCompletion`: every block began.
    pub const PORT_LAUNCH_COMPLETION: u8 = 2;
    /// `cudaGraphDependencyTypeProgrammatic`.
    pub const TYPE_PROGRAMMATIC: u8 = 1;

    /// The edge data the program gave, if CUDA could take it.
    pub fn checked(raw: RawEdge) -> Option<EdgeData> {
        let [from_port, to_port, kind, reserved @ ..] = raw.to_le_bytes();
        let known = from_port <= Self::PORT_LAUNCH_COMPLETION
            && to_port == 0
            && kind <= Self::TYPE_PROGRAMMATIC
            && reserved == [0; 5];
        known.then_some(EdgeData { from_port, kind })
    }

    /// Edge data the driver reported.
    pub fn from_driver(from_port: u8, kind: u8) -> EdgeData {
        EdgeData { from_port, kind }
    }

    pub fn raw(self) -> RawEdge {
        u64::from_le_bytes([self.from_port, 0, self.kind, 0, 0, 0, 0, 0])
    }

    pub fn from_port(self) -> u8 {
        self.from_port
    }

    pub fn kind(self) -> u8 {
        self.kind
    }

    pub fn is_default(self) -> bool {
        self == EdgeData::default()
    }
}

/// `cudaGraphExecUpdate`'s result; the nodes are absent (0) where the driver names
/// none.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ExecUpdateResult {
    pub result: u32,
    pub error_node: GraphNodeHandle,
    pub error_from_node: GraphNodeHandle,
}

/// Give node `dst` the parameters of node `src`, a node of the same type the guest
/// just built (in a scratch graph) with the new ones: in `dst`'s graph, or, with
/// `exec`, in that executable graph only. So a node's new parameters are checked as
/// a new node's are.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphNodeCopyParams {
    pub dst: GraphNodeHandle,
    pub src: GraphNodeHandle,
    pub exec: Option<GraphExecHandle>,
}

/// A conditional node (`cudaGraphCondType*` `kind`, `size` bodies: 1 for IF and
/// WHILE, 1 or 2 for IF with an else, any for SWITCH) on a handle of `graph`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GraphAddConditionalNode {
    pub graph: GraphHandle,
    pub dependencies: Vec<GraphNodeHandle>,
    pub handle: u64,
    pub kind: u32,
    pub size: u32,
}
/// The node and its body graphs, which belong to it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConditionalNodeMade {
    pub node: GraphNodeHandle,
    pub bodies: Vec<GraphHandle>,
}

/// At most this many bodies a conditional node may have.
pub const MAX_CONDITIONAL_BODIES: u32 = 64;

/// `cudaMallocAsync` from the current device's default pool, ordered on `stream`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAllocAsync {
    pub size: u64,
    pub stream: StreamHandle,
}
/// `cudaFreeAsync`: the memory is released once `stream` reaches this point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemFreeAsync {
    pub ptr: DevicePtr,
    pub stream: StreamHandle,
}
/// A memory pool as every pool op names it: a device's default pool (the host's own
/// number for the device) or a pool the guest made on this host.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum PoolRef {
    Default(i32),
    Created(MemPoolHandle),
}
/// `cudaMemPoolCreate`: a pool of pinned device memory on `device`, at most `max_size`
/// bytes (0: the driver's default); `shareable`: it may be exported (POSIX file
/// descriptor handles, the only shareable type the guest passes on) for the same
/// program to import.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolCreate {
    pub device: i32,
    pub max_size: u64,
    pub shareable: bool,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PoolMade {
    pub pool: MemPoolHandle,
}
/// `cudaMemPoolDestroy`: allocations still live from it stay the guest's until freed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolDestroy {
    pub pool: MemPoolHandle,
}
/// `cudaMallocFromPoolAsync`, ordered on `stream`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAllocFromPoolAsync {
    pub size: u64,
    pub pool: PoolRef,
    pub stream: StreamHandle,
}
/// An attribute of a memory pool.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolGetAttribute {
    pub pool: PoolRef,
    pub attr: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PoolAttributeValue {
    pub value: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolSetAttribute {
    pub pool: PoolRef,
    pub attr: u32,
    pub value: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolTrimTo {
    pub pool: PoolRef,
    pub min_bytes_to_keep: u64,
}
/// One `cudaMemAccessDesc`: a location (`cudaMemLocationType`, id) and its
/// `cudaMemAccessFlags`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemAccess {
    pub location_type: i32,
    pub location_id: i32,
    pub flags: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolSetAccess {
    pub pool: PoolRef,
    pub access: Vec<MemAccess>,
}
/// `cudaMemPoolGetAccess`: what a location (a device, by the host's own number) may do
/// with the pool's memory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemPoolGetAccess {
    pub pool: PoolRef,
    pub location_type: i32,
    pub location_id: i32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PoolAccess {
    pub flags: u32,
}

/// `cudaMemLocationTypeDevice`.
pub const LOCATION_DEVICE: i32 = 1;
/// Whether `flags` is a `cudaMemAccessFlags` value: `ProtNone` 0, `ProtRead` 1,
/// `ProtReadWrite` 3.
pub fn access_flags_valid(flags: u32) -> bool {
    matches!(flags, 0 | 1 | 3)
}

#[cfg(test)]
mod tests {
    use super::pool_attr::*;
    use super::EdgeData;

    #[test]
    fn pool_attributes_have_cudas_types_and_rules() {
        assert!(is_int(REUSE_ALLOW_OPPORTUNISTIC));
        assert!(!is_int(RELEASE_THRESHOLD));
        assert!(settable(RELEASE_THRESHOLD, u64::MAX));
        assert!(settable(USED_MEM_HIGH, 0));
        assert!(!settable(USED_MEM_HIGH, 5));
        assert!(!settable(USED_MEM_CURRENT, 0));
        assert!(!is_known(0) && !is_known(9));
    }

    #[test]
    fn edge_data_takes_what_cuda_defines() {
        // from_port, to_port, type, reserved: byte by byte, as the C struct lies.
        let raw = |b: [u8; 8]| u64::from_le_bytes(b);
        assert_eq!(EdgeData::checked(0), Some(EdgeData::default()));
        let programmatic = EdgeData::checked(raw([1, 0, 1, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(programmatic.from_port(), EdgeData::PORT_PROGRAMMATIC);
        assert_eq!(programmatic.kind(), EdgeData::TYPE_PROGRAMMATIC);
        assert_eq!(programmatic.raw(), raw([1, 0, 1, 0, 0, 0, 0, 0]));
        assert!(!programmatic.is_default());
        let completion = EdgeData::checked(raw([2, 0, 1, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(completion.from_port(), EdgeData::PORT_LAUNCH_COMPLETION);
        // An unknown port, a downstream port, an unknown type, a reserved byte.
        assert_eq!(EdgeData::checked(raw([3, 0, 0, 0, 0, 0, 0, 0])), None);
        assert_eq!(EdgeData::checked(raw([0, 1, 0, 0, 0, 0, 0, 0])), None);
        assert_eq!(EdgeData::checked(raw([0, 0, 2, 0, 0, 0, 0, 0])), None);
        assert_eq!(EdgeData::checked(raw([1, 0, 1, 0, 0, 0, 0, 9])), None);
    }
}
