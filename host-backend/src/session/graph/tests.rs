use super::*;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::policy::Grant;
use vmcuda_wire::graph::*;
use vmcuda_wire::op::*;

const CTX: CallContext = CallContext { device: 0 };

fn session(quota: Option<u64>) -> Session {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = quota;
    Session::new(Box::new(exec), grant)
}

/// The guest's stream 0x100, made in `s`.
fn new_stream(s: &mut Session) -> StreamHandle {
    let stream = StreamHandle(0x100);
    let create = StreamCreate {
        stream,
        flags: 0,
        priority: 0,
    };
    s.stream_create(&CTX, create, &[]).unwrap();
    stream
}

/// An empty graph, made in `s`.
fn new_graph(s: &mut Session) -> GraphHandle {
    s.graph_create(&CTX, GraphCreate { flags: 0 }, &[])
        .unwrap()
        .0
        .graph
}

/// A session with a stream of the guest's and 4 KiB of device memory.
fn with_stream_and_memory() -> (Session, StreamHandle, u64) {
    let mut s = session(None);
    let stream = new_stream(&mut s);
    let ptr = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    (s, stream, ptr)
}

#[test]
fn graphs_are_named_here_and_stale_or_foreign_handles_are_refused() {
    let mut s = session(None);
    let stream = new_stream(&mut s);
    let ptr = s
        .mem_alloc_async(&CTX, MemAllocAsync { size: 256, stream }, &[])
        .unwrap()
        .0
        .ptr;
    let begin = StreamBeginCapture { stream };
    s.stream_begin_capture(&CTX, begin, &[]).unwrap();
    let legacy = StreamBeginCapture {
        stream: StreamHandle::LEGACY,
    };
    assert_eq!(
        s.stream_begin_capture(&CTX, legacy, &[]).unwrap_err(),
        CudaStatus::ErrorStreamCaptureUnsupported
    );
    let memset = Memset {
        dst: ptr,
        value: 5,
        size: 256,
        stream,
        is_async: true,
    };
    s.memset(&CTX, memset, &[]).unwrap();
    // The graph being built, as cudaStreamGetCaptureInfo shows it: readable, not
    // destroyable, and the same graph once the capture ends.
    let shown = s
        .stream_get_capture_graph(&CTX, StreamGetCaptureGraph { stream }, &[])
        .unwrap()
        .0;
    assert_eq!(shown.dependencies.len(), 1);
    let building = GraphGetNodes { graph: shown.graph };
    assert_eq!(
        s.graph_get_nodes(&CTX, building, &[]).unwrap().0.nodes,
        shown.dependencies
    );
    let early = GraphDestroy { graph: shown.graph };
    assert_eq!(
        s.graph_destroy(&CTX, early, &[]).unwrap_err(),
        CudaStatus::ErrorIllegalState
    );
    // A copy through the socket cannot be captured.
    let htod = MemcpyHtoD {
        dst: ptr,
        stream,
        is_async: true,
    };
    assert_eq!(
        s.memcpy_htod(&CTX, htod, &[1, 2]).unwrap_err(),
        CudaStatus::ErrorStreamCaptureUnsupported
    );
    let end = StreamEndCapture {
        stream,
        invalidated: false,
    };
    let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
    assert_eq!(graph, shown.graph);
    let nodes = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
        .unwrap()
        .0
        .nodes;
    assert_eq!(nodes.len(), 1);
    let again = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
        .unwrap();
    assert_eq!(again.0.nodes, nodes, "the same node, the same handle");
    let exec = s
        .graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
        .unwrap()
        .0
        .exec;
    s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
        .unwrap();
    let dot = s
        .graph_debug_dot(&CTX, GraphDebugDot { graph, flags: 0 }, &[])
        .unwrap()
        .0
        .text;
    assert!(String::from_utf8(dot).unwrap().starts_with("digraph"));
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    let refused = CudaStatus::ErrorInvalidValue;
    // Destroyed, never made, or made by the wrong kind of call: refused.
    assert_eq!(
        s.graph_destroy(&CTX, GraphDestroy { graph }, &[])
            .unwrap_err(),
        refused
    );
    let stale_node = GraphNodeGetDependencies { node: nodes[0] };
    assert_eq!(
        s.graph_node_get_dependencies(&CTX, stale_node, &[])
            .unwrap_err(),
        refused
    );
    let foreign = GraphLaunch {
        exec: GraphExecHandle(graph.0),
        stream,
    };
    assert_eq!(s.graph_launch(&CTX, foreign, &[]).unwrap_err(), refused);
    // The executable graph outlives its graph.
    s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
        .unwrap();
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    // An invalidated capture gives no graph.
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream }, &[])
        .unwrap();
    let end = StreamEndCapture {
        stream,
        invalidated: true,
    };
    assert_eq!(
        s.stream_end_capture(&CTX, end, &[]).unwrap_err(),
        CudaStatus::ErrorStreamCaptureInvalidated
    );
}

#[test]
fn stream_ordered_allocations_are_charged_and_only_the_guests_own_are_freed() {
    let mut s = session(Some(1 << 20));
    let stream = StreamHandle::LEGACY;
    let ptr = s
        .mem_alloc_async(&CTX, MemAllocAsync { size: 4096, stream }, &[])
        .unwrap()
        .0
        .ptr;
    let free = |s: &mut Session| s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free;
    assert_eq!(free(&mut s), (1 << 20) - 4096);
    let too_big = MemAllocAsync {
        size: 1 << 20,
        stream,
    };
    assert_eq!(
        s.mem_alloc_async(&CTX, too_big, &[]).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
    let wild = MemFreeAsync {
        ptr: ptr + 16,
        stream,
    };
    assert_eq!(
        s.mem_free_async(&CTX, wild, &[]).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    let used = MemPoolGetAttribute {
        pool: PoolRef::Default(0),
        attr: pool_attr::USED_MEM_CURRENT,
    };
    assert_eq!(
        s.mem_pool_get_attribute(&CTX, used.clone(), &[])
            .unwrap()
            .0
            .value,
        4096
    );
    s.mem_free_async(&CTX, MemFreeAsync { ptr, stream }, &[])
        .unwrap();
    assert_eq!(free(&mut s), 1 << 20);
    assert_eq!(
        s.mem_pool_get_attribute(&CTX, used, &[]).unwrap().0.value,
        0
    );
    // The release threshold is held to the quota; unknown attributes are refused.
    let threshold = MemPoolSetAttribute {
        pool: PoolRef::Default(0),
        attr: pool_attr::RELEASE_THRESHOLD,
        value: u64::MAX,
    };
    s.mem_pool_set_attribute(&CTX, threshold, &[]).unwrap();
    let get = MemPoolGetAttribute {
        pool: PoolRef::Default(0),
        attr: pool_attr::RELEASE_THRESHOLD,
    };
    assert_eq!(
        s.mem_pool_get_attribute(&CTX, get, &[]).unwrap().0.value,
        1 << 20
    );
    let unknown = MemPoolGetAttribute {
        pool: PoolRef::Default(0),
        attr: 42,
    };
    assert!(s.mem_pool_get_attribute(&CTX, unknown, &[]).is_err());
    let other_device = MemPoolTrimTo {
        pool: PoolRef::Default(3),
        min_bytes_to_keep: 0,
    };
    assert_eq!(
        s.mem_pool_trim_to(&CTX, other_device, &[]).unwrap_err(),
        CudaStatus::ErrorInvalidDevice
    );
}

/// As the driver: a memset on memory not the guest's is taken into a capture (not
/// outside one, and no copy is), and its graph is refused at instantiation until the
/// node is given the guest's memory; graphs that embed it are refused too.
#[test]
fn captured_memsets_on_unassigned_memory_are_checked_when_their_graph_is_instantiated() {
    let (mut s, stream, ptr) = with_stream_and_memory();
    let unknown: u64 = 0x80;
    let memset = |dst: u64| Memset {
        dst,
        value: 7,
        size: 256,
        stream,
        is_async: true,
    };
    assert_eq!(
        s.memset(&CTX, memset(unknown), &[]).unwrap_err(),
        CudaStatus::ErrorInvalidValue,
        "outside a capture"
    );
    let capture = |s: &mut Session, work: &dyn Fn(&mut Session) -> HandlerResult<()>| {
        s.stream_begin_capture(&CTX, StreamBeginCapture { stream }, &[])
            .unwrap();
        let worked = work(s);
        let end = StreamEndCapture {
            stream,
            invalidated: false,
        };
        let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
        (worked, graph)
    };
    let (worked, graph) = capture(&mut s, &|s| {
        s.memset(&CTX, memset(unknown), &[])?;
        let two_d = Memset2D {
            dst: unknown,
            pitch: 256,
            value: 1,
            width: 128,
            height: 4,
            stream,
            is_async: true,
        };
        s.memset_2d(&CTX, two_d, &[])
    });
    worked.unwrap();
    let nodes = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
        .unwrap()
        .0
        .nodes;
    assert_eq!(nodes.len(), 2);
    let (copied, _) = capture(&mut s, &|s| {
        let dtod = MemcpyDtoD {
            dst: unknown,
            src: ptr,
            size: 256,
            stream,
            is_async: true,
        };
        s.memcpy_dtod(&CTX, dtod, &[])
    });
    assert_eq!(copied.unwrap_err(), CudaStatus::ErrorInvalidValue, "a copy");
    let instantiate = |s: &mut Session, graph| {
        s.graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
            .map(|r| r.0.exec)
    };
    assert_eq!(
        instantiate(&mut s, graph).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // A graph embedding it as a child is refused too.
    let parent = new_graph(&mut s);
    let child = GraphAddNode {
        graph: parent,
        dependencies: Vec::new(),
        node: PlainNode::ChildGraph(graph),
    };
    s.graph_add_node(&CTX, child, &[]).unwrap();
    assert_eq!(
        instantiate(&mut s, parent).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // New parameters naming the guest's memory (a node captured on it, copied over)
    // clear each node; then the graph is instantiated and runs on that memory.
    let (worked, scratch) = capture(&mut s, &|s| s.memset(&CTX, memset(ptr), &[]));
    worked.unwrap();
    let src = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph: scratch }, &[])
        .unwrap()
        .0
        .nodes[0];
    for (i, dst) in nodes.iter().enumerate() {
        let copy = GraphNodeCopyParams {
            dst: *dst,
            src,
            exec: None,
        };
        s.graph_node_copy_params(&CTX, copy, &[]).unwrap();
        let left = instantiate(&mut s, graph);
        match i {
            0 => assert_eq!(
                left.unwrap_err(),
                CudaStatus::ErrorInvalidValue,
                "one node left"
            ),
            _ => {
                let exec = left.unwrap();
                s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
                    .unwrap();
            }
        }
    }
    s.stream_synchronize(&CTX, StreamSynchronize { stream }, &[])
        .unwrap();
    let read = MemcpyDtoH {
        src: ptr,
        size: 256,
        stream,
        is_async: false,
    };
    assert_eq!(s.memcpy_dtoh(&CTX, read, &[]).unwrap().1, vec![7u8; 256]);
    // The parent kept its copy of the child as it was.
    assert_eq!(
        instantiate(&mut s, parent).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
}

#[test]
fn an_executable_child_graph_node_takes_a_graph_of_its_shape_and_only_the_guests_memory() {
    let (mut s, stream, ptr) = with_stream_and_memory();
    // A graph of `values.len()` memsets in a chain, captured.
    let memsets = |s: &mut Session, dst: u64, values: &[u8]| {
        s.stream_begin_capture(&CTX, StreamBeginCapture { stream }, &[])
            .unwrap();
        for &value in values {
            let memset = Memset {
                dst,
                value,
                size: 256,
                stream,
                is_async: true,
            };
            s.memset(&CTX, memset, &[]).unwrap();
        }
        let end = StreamEndCapture {
            stream,
            invalidated: false,
        };
        s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph
    };
    let (first, second, longer) = (
        memsets(&mut s, ptr, &[3]),
        memsets(&mut s, ptr, &[5]),
        memsets(&mut s, ptr, &[9, 9]),
    );
    let unassigned = memsets(&mut s, 0x80, &[7]);
    let holder = new_graph(&mut s);
    let add = GraphAddNode {
        graph: holder,
        dependencies: Vec::new(),
        node: PlainNode::ChildGraph(first),
    };
    let held = s.graph_add_node(&CTX, add.clone(), &[]).unwrap().0.node;
    let exec = s
        .graph_instantiate(
            &CTX,
            GraphInstantiate {
                graph: holder,
                flags: 0,
            },
            &[],
        )
        .unwrap()
        .0
        .exec;
    let run = |s: &mut Session| {
        s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
            .unwrap();
        let read = MemcpyDtoH {
            src: ptr,
            size: 256,
            stream,
            is_async: false,
        };
        let bytes = s.memcpy_dtoh(&CTX, read, &[]).unwrap().1;
        assert!(bytes.iter().all(|b| *b == bytes[0]));
        bytes[0]
    };
    let set = |s: &mut Session, node, child| {
        let req = GraphExecChildGraphNodeSetParams { exec, node, child };
        s.graph_exec_child_graph_node_set_params(&CTX, req, &[])
            .map(|_| ())
    };
    assert_eq!(run(&mut s), 3);
    set(&mut s, held, second).unwrap();
    assert_eq!(run(&mut s), 5);
    // Refused, the executable graph keeping what it had: a graph of another shape,
    // one whose memset names memory not the guest's, a graph or node unknown, and a
    // node of another graph.
    let invalid = CudaStatus::ErrorInvalidValue;
    assert_eq!(set(&mut s, held, longer).unwrap_err(), invalid);
    assert_eq!(set(&mut s, held, unassigned).unwrap_err(), invalid);
    assert_eq!(set(&mut s, held, GraphHandle(0xdead)).unwrap_err(), invalid);
    assert_eq!(
        set(&mut s, GraphNodeHandle(0xdead), second).unwrap_err(),
        invalid
    );
    let other = new_graph(&mut s);
    let elsewhere = GraphAddNode {
        graph: other,
        ..add
    };
    let foreign = s.graph_add_node(&CTX, elsewhere, &[]).unwrap().0.node;
    assert_eq!(set(&mut s, foreign, second).unwrap_err(), invalid);
    assert_eq!(run(&mut s), 5);
}
