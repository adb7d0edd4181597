//! The host-memory account on the host-memory executor: graphs of captured launches,
//! executable graphs, clones, module images, frame buffers and handle tables, each
//! refused at the VM's `host_memory` and given back when it goes.

use vmcuda_wire::graph::*;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::{node_bytes, HANDLE_ENTRY_BYTES};
use crate::executor::host_memory::HostMemoryExecutor;
use crate::ledger::Ledger;
use crate::policy::Grant;
use crate::session::Session;

const MIB: u64 = 1 << 20;
const CTX: CallContext = CallContext { device: 0 };
/// A kernel with 5016 bytes of parameters (wire's test data, `bigparam.cu`).
const BIGPARAM: &[u8] = include_bytes!("../../../../wire/testdata/bigparam.cubin");

fn session(host_memory: u64) -> Session {
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = Some(64 * MIB);
    grant.host_memory = host_memory;
    Session::new(
        Box::new(HostMemoryExecutor::new(1 << 30, None).unwrap()),
        grant,
    )
}

/// The big kernel and its parameter bytes.
fn big_kernel(s: &mut Session) -> (FunctionHandle, Vec<u8>) {
    let module = s.module_load(&CTX, ModuleLoad, BIGPARAM).unwrap().0.module;
    let get = ModuleGetFunction {
        module,
        name: "_Z3bigi3BigPi".into(),
    };
    let info = s.module_get_function(&CTX, get, &[]).unwrap().0;
    let last = info.params.last().unwrap();
    (info.function, vec![0; (last.offset + last.size) as usize])
}

fn stream(s: &mut Session, id: u64) -> StreamHandle {
    let stream = StreamHandle(id);
    let create = StreamCreate {
        stream,
        flags: 0,
        priority: 0,
    };
    s.stream_create(&CTX, create, &[]).unwrap();
    stream
}

fn launch(
    s: &mut Session,
    function: FunctionHandle,
    stream: StreamHandle,
    params: &[u8],
) -> Result<(), CudaStatus> {
    let req = LaunchKernel {
        function,
        grid: [1; 3],
        block: [1; 3],
        shared_mem: 0,
        stream,
        attributes: vec![],
    };
    s.launch_kernel(&CTX, req, params).map(|_| ())
}

/// Capture up to `launches` launches of the big kernel on `st` (each call entered as
/// the worker enters it); answers the graph and how many launches were captured before
/// one was refused, if one was.
fn capture(
    s: &mut Session,
    st: StreamHandle,
    launches: usize,
) -> (GraphHandle, usize, Option<CudaStatus>) {
    let (function, params) = big_kernel(s);
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream: st }, &[])
        .unwrap();
    let mut refused = None;
    let mut captured = 0;
    for _ in 0..launches {
        s.enter(&CTX).unwrap();
        match launch(s, function, st, &params) {
            Ok(()) => captured += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let end = StreamEndCapture {
        stream: st,
        invalidated: false,
    };
    let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
    (graph, captured, refused)
}

fn instantiate(s: &mut Session, graph: GraphHandle) -> Result<GraphExecHandle, CudaStatus> {
    s.graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
        .map(|r| r.0.exec)
}

/// Captured launches keep their parameters in the worker: counted against the VM's
/// host memory, refused with cudaErrorMemoryAllocation at its limit (the quota of GPU
/// memory has nothing to do with it), and given back with the graph. Before, a guest
/// under a 64 MiB quota took a worker to gigabytes this way.
#[test]
fn captured_launches_are_refused_at_the_host_memory_limit_and_given_back() {
    let limit = 32 * MIB;
    let mut s = session(limit);
    let st = stream(&mut s, 0x100);
    big_kernel(&mut s);
    s.enter(&CTX).unwrap();
    let base = s.host_memory_bytes();
    assert!(base > BIGPARAM.len() as u64, "the image and the handles");
    let (graph, captured, refused) = capture(&mut s, st, 20_000);
    assert_eq!(refused, Some(CudaStatus::ErrorMemoryAllocation));
    let per_node = node_bytes(5016);
    assert!(
        (captured as u64) < limit / per_node,
        "{captured} launches captured"
    );
    assert!(
        captured as u64 > limit / per_node / 2,
        "{captured} launches captured"
    );
    assert!(s.host_memory_bytes() <= limit);
    // An executable graph keeps a copy of every node: no room for one.
    assert_eq!(
        instantiate(&mut s, graph),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    // Nor for a clone.
    assert_eq!(
        s.graph_clone(&CTX, GraphClone { original: graph }, &[])
            .map(|r| r.0.graph),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);

    // A smaller graph fits, with its executable graph; both give their memory back.
    let (graph, captured, refused) = capture(&mut s, st, 500);
    assert_eq!((captured, refused), (500, None));
    let with_graph = s.host_memory_bytes();
    assert!(with_graph >= base + 500 * per_node);
    let exec = instantiate(&mut s, graph).unwrap();
    assert!(s.host_memory_bytes() >= with_graph + 500 * per_node);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);
}

/// With a ledger the limit is the VM's: the connection's figure is in it, taken in
/// granules, and gone from it when the session ends.
#[test]
fn host_memory_is_counted_in_the_vms_ledger() {
    let dir = std::env::temp_dir().join(format!("vmcuda-host-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let limit = 16 * MIB;
    let mut s = session(limit).with_ledger(Ledger::join(&dir, "vm1", 4).unwrap());
    let st = stream(&mut s, 0x100);
    let (_, captured, refused) = capture(&mut s, st, 20_000);
    assert_eq!(refused, Some(CudaStatus::ErrorMemoryAllocation));
    assert!(captured > 0);
    let path = dir.join("ledger/vm1.ledger");
    let host_in_ledger = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.split(' ').nth(3))
            .map(|h| h.parse::<u64>().unwrap())
            .sum()
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let counted = host_in_ledger(&text);
    assert!(
        counted >= s.host_memory_bytes() && counted <= limit,
        "{counted} in the ledger: {text:?}"
    );
    drop(s);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(host_in_ledger(&text), 0, "{text:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Module images, frame buffers and handle tables count too.
#[test]
fn module_images_buffers_and_handles_are_counted() {
    let mut s = session(MIB);
    let base = s.host_memory_bytes();
    s.module_load(&CTX, ModuleLoad, BIGPARAM).unwrap();
    s.module_load(&CTX, ModuleLoad, BIGPARAM).unwrap();
    assert_eq!(
        s.host_memory_bytes(),
        base + BIGPARAM.len() as u64,
        "the same image is kept once"
    );
    assert_eq!(
        s.reply_buffer(2 * MIB as usize).err(),
        Some(CudaStatus::ErrorMemoryAllocation),
        "a frame buffer over the limit"
    );
    let before = s.host_memory_bytes();
    let reply = s.reply_buffer(64 << 10).unwrap();
    assert!(s.host_memory_bytes() >= before + (64 << 10));
    drop(reply);
    s.trim_reply_buffers(0);
    assert_eq!(s.host_memory_bytes(), before);
    // Streams until their handle-table entries fill the rest.
    let mut made = 0u64;
    let refused = loop {
        s.enter(&CTX).unwrap();
        let create = StreamCreate {
            stream: StreamHandle(0x100 + made),
            flags: 0,
            priority: 0,
        };
        match s.stream_create(&CTX, create, &[]) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 10_000, "streams never refused");
    };
    assert_eq!(refused, CudaStatus::ErrorMemoryAllocation);
    assert!(s.host_memory_bytes() <= MIB);
    assert!(made > 1000, "{made} streams");
}

fn add_empty(s: &mut Session, graph: GraphHandle) -> GraphNodeHandle {
    let add = GraphAddNode {
        graph,
        dependencies: vec![],
        node: PlainNode::Empty,
    };
    s.graph_add_node(&CTX, add, &[]).unwrap().0.node
}

/// One launch of `function` captured into `graph` (as `cuGraphAddKernelNode` makes
/// one): its node.
fn add_launch(
    s: &mut Session,
    graph: GraphHandle,
    st: StreamHandle,
    function: FunctionHandle,
    params: &[u8],
) -> GraphNodeHandle {
    let before = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
        .unwrap()
        .0
        .nodes;
    let begin = StreamBeginCaptureToGraph {
        stream: st,
        graph,
        dependencies: vec![],
        edges: vec![],
    };
    s.stream_begin_capture_to_graph(&CTX, begin, &[]).unwrap();
    launch(s, function, st, params).unwrap();
    let end = StreamEndCapture {
        stream: st,
        invalidated: false,
    };
    s.stream_end_capture(&CTX, end, &[]).unwrap();
    let after = s
        .graph_get_nodes(&CTX, GraphGetNodes { graph }, &[])
        .unwrap()
        .0
        .nodes;
    let new: Vec<_> = after.into_iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(new.len(), 1, "one node captured");
    new[0]
}

fn destroy_node(s: &mut Session, node: GraphNodeHandle) {
    s.graph_destroy_node(&CTX, GraphDestroyNode { node }, &[])
        .unwrap();
}

/// A destroyed node gives back what it was charged at once, not when its graph goes:
/// a guest that adds nodes to one graph and destroys them in a loop, by hand and as
/// captured launches with 5 KB of parameters, stays under its limit. Before, each
/// round kept its nodes' charge and the loop was refused within a few hundred rounds.
#[test]
fn destroyed_nodes_give_their_host_memory_back_at_once() {
    let limit = 8 * MIB;
    let mut s = session(limit);
    let st = stream(&mut s, 0x100);
    let (function, params) = big_kernel(&mut s);
    let graph = s
        .graph_create(&CTX, GraphCreate { flags: 0 }, &[])
        .unwrap()
        .0
        .graph;
    s.enter(&CTX).unwrap();
    let base = s.host_memory_bytes();
    let rounds = 1500u64;
    assert!(
        rounds * (node_bytes(0) + node_bytes(5016)) > 4 * limit,
        "the loop would go far over the limit if nodes kept their charge"
    );
    for _ in 0..rounds {
        s.enter(&CTX).unwrap();
        let empty = add_empty(&mut s, graph);
        let launched = add_launch(&mut s, graph, st, function, &params);
        assert!(s.host_memory_bytes() >= base + node_bytes(0) + node_bytes(5016));
        destroy_node(&mut s, empty);
        destroy_node(&mut s, launched);
        assert!(s.host_memory_bytes() <= limit);
    }
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);

    // A clone's nodes keep their originals' charges, and give them back the same way.
    let kept = add_empty(&mut s, graph);
    let launched = add_launch(&mut s, graph, st, function, &params);
    s.enter(&CTX).unwrap();
    let with_nodes = s.host_memory_bytes();
    let clone = s
        .graph_clone(&CTX, GraphClone { original: graph }, &[])
        .unwrap()
        .0
        .graph;
    for original in [kept, launched] {
        let find = GraphNodeFindInClone { original, clone };
        let copy = s.graph_node_find_in_clone(&CTX, find, &[]).unwrap().0.node;
        destroy_node(&mut s, copy);
    }
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), with_nodes + HANDLE_ENTRY_BYTES);
    s.graph_destroy(&CTX, GraphDestroy { graph: clone }, &[])
        .unwrap();
    for node in [kept, launched] {
        destroy_node(&mut s, node);
    }
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);
}

/// A kernel with one pointer parameter (wire's test data): its function and parameter
/// bytes.
fn tiny_kernel(s: &mut Session) -> (FunctionHandle, Vec<u8>) {
    const TINY: &[u8] = include_bytes!("../../../../wire/testdata/tiny.fatbin");
    let module = s.module_load(&CTX, ModuleLoad, TINY).unwrap().0.module;
    let get = ModuleGetFunction {
        module,
        name: "_Z4tinyPi".into(),
    };
    let info = s.module_get_function(&CTX, get, &[]).unwrap().0;
    (info.function, vec![0; 8])
}

/// A session's stream and its two kernels: the big one (5016 bytes of parameters) and
/// the tiny one (8).
struct Kernels {
    st: StreamHandle,
    big: (FunctionHandle, Vec<u8>),
    tiny: (FunctionHandle, Vec<u8>),
}

impl Kernels {
    fn new(host_memory: u64) -> (Session, Kernels) {
        let mut s = session(host_memory);
        let st = stream(&mut s, 0x100);
        let big = big_kernel(&mut s);
        let tiny = tiny_kernel(&mut s);
        (s, Kernels { st, big, tiny })
    }

    /// A launch of the big kernel (or the tiny one) captured into `graph`.
    fn add(&self, s: &mut Session, graph: GraphHandle, big: bool) -> GraphNodeHandle {
        let (function, params) = if big { &self.big } else { &self.tiny };
        add_launch(s, graph, self.st, *function, params)
    }
}

fn new_graph(s: &mut Session) -> GraphHandle {
    s.graph_create(&CTX, GraphCreate { flags: 0 }, &[])
        .unwrap()
        .0
        .graph
}

fn copy_params(
    s: &mut Session,
    dst: GraphNodeHandle,
    src: GraphNodeHandle,
    exec: Option<GraphExecHandle>,
) -> Result<(), CudaStatus> {
    s.enter(&CTX)?;
    let copy = GraphNodeCopyParams { dst, src, exec };
    s.graph_node_copy_params(&CTX, copy, &[]).map(|_| ())
}

/// New parameters for a node (`cudaGraphKernelNodeSetParams`, and its executable
/// graph's `cudaGraphExecKernelNodeSetParams`, both a copy from a node built in a
/// scratch graph) are charged as the node they come from: a small launch's node given
/// a large launch's parameters keeps them, once however often it is given them, and
/// gives them back when it is given small ones again. Before, the node kept what it
/// was charged when made.
#[test]
fn parameters_copied_into_a_node_are_charged_as_their_node() {
    let (mut s, k) = Kernels::new(64 * MIB);
    let graph = new_graph(&mut s);
    let node = k.add(&mut s, graph, false);
    let scratch = new_graph(&mut s);
    let large = k.add(&mut s, scratch, true);
    let small = k.add(&mut s, scratch, false);
    let exec = instantiate(&mut s, graph).unwrap();
    s.enter(&CTX).unwrap();
    let base = s.host_memory_bytes();
    let more = node_bytes(5016) - node_bytes(8);
    for at in [None, Some(exec)] {
        let before = s.host_memory_bytes();
        for _ in 0..100 {
            copy_params(&mut s, node, large, at).unwrap();
            assert_eq!(s.host_memory_bytes(), before + more, "{at:?}");
        }
    }
    copy_params(&mut s, node, small, None).unwrap();
    s.enter(&CTX).unwrap();
    assert_eq!(
        s.host_memory_bytes(),
        base + more,
        "the executable graph's copy"
    );
    // Updated with its graph, the executable graph keeps the graph's parameters.
    let update = GraphExecUpdate { exec, graph };
    s.graph_exec_update(&CTX, update, &[]).unwrap();
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);
}

fn set_kernel_params(
    s: &mut Session,
    node: GraphNodeHandle,
    exec: Option<GraphExecHandle>,
    (function, params): &(FunctionHandle, Vec<u8>),
    block: [u32; 3],
) -> Result<(), CudaStatus> {
    s.enter(&CTX)?;
    let req = GraphKernelNodeSetParams {
        node,
        exec,
        function: *function,
        grid: [1, 1, 1],
        block,
        shared_mem: 0,
    };
    s.graph_kernel_node_set_params(&CTX, req, params)
        .map(|_| ())
}

/// A kernel node's new parameters in one request (`cuGraph[Exec]KernelNodeSetParams`,
/// without a scratch graph) are checked as a launch's and charged as a launch's node:
/// a tiny kernel's node given the big kernel's parameters keeps them once however
/// often it is given them, and gives them back when given the tiny ones again. Nodes
/// that are not kernels, of another graph than the executable graph's, or unknown,
/// impossible shapes and parameter buffers of the wrong size are refused, and a
/// refusal changes nothing.
#[test]
fn kernel_parameters_set_in_one_request_are_checked_and_charged_as_a_launch() {
    let (mut s, k) = Kernels::new(64 * MIB);
    let graph = new_graph(&mut s);
    let node = k.add(&mut s, graph, false);
    let empty = add_empty(&mut s, graph);
    let exec = instantiate(&mut s, graph).unwrap();
    let other = new_graph(&mut s);
    let stranger = k.add(&mut s, other, false);
    s.enter(&CTX).unwrap();
    let base = s.host_memory_bytes();
    let more = node_bytes(5016) - node_bytes(8);
    let one = [32, 1, 1];
    for at in [None, Some(exec)] {
        let before = s.host_memory_bytes();
        for _ in 0..100 {
            set_kernel_params(&mut s, node, at, &k.big, one).unwrap();
            s.enter(&CTX).unwrap();
            assert_eq!(s.host_memory_bytes(), before + more, "{at:?}");
        }
        let refused = |s: &mut Session, node, params: &(FunctionHandle, Vec<u8>), block| {
            let r = set_kernel_params(s, node, at, params, block).unwrap_err();
            s.enter(&CTX).unwrap();
            assert_eq!(s.host_memory_bytes(), before + more, "{at:?}");
            r
        };
        let invalid = CudaStatus::ErrorInvalidValue;
        assert_eq!(
            refused(&mut s, empty, &k.big, one),
            invalid,
            "an empty node"
        );
        assert_eq!(
            refused(&mut s, GraphNodeHandle(0xdead), &k.big, one),
            invalid
        );
        assert_eq!(
            refused(&mut s, node, &k.big, [0, 1, 1]),
            invalid,
            "no threads"
        );
        assert_eq!(refused(&mut s, node, &k.big, [2048, 1, 1]), invalid);
        let short = (k.big.0, vec![0u8; 16]);
        assert_eq!(
            refused(&mut s, node, &short, one),
            invalid,
            "a short buffer"
        );
        if at.is_some() {
            assert_eq!(
                refused(&mut s, stranger, &k.tiny, one),
                invalid,
                "a node of another graph"
            );
        }
    }
    set_kernel_params(&mut s, node, None, &k.tiny, one).unwrap();
    set_kernel_params(&mut s, node, Some(exec), &k.tiny, one).unwrap();
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), base);
}

/// A captured kernel node's parameters read back are the launch's: its function
/// (the guest's handle), shape and parameter bytes; and after an update, the new
/// ones. Nodes that are not kernels, and unknown ones, are refused.
#[test]
fn a_kernel_nodes_parameters_read_back_are_its_launchs() {
    let (mut s, k) = Kernels::new(64 * MIB);
    let graph = new_graph(&mut s);
    let node = k.add(&mut s, graph, false);
    let empty = add_empty(&mut s, graph);
    let get = |s: &mut Session, node| {
        s.graph_kernel_node_get_params(&CTX, GraphKernelNodeGetParams { node }, &[])
    };
    let (got, bytes) = get(&mut s, node).unwrap();
    assert_eq!(got.function, k.tiny.0);
    assert_eq!(bytes, k.tiny.1);
    let mut changed = k.big.clone();
    changed.1[0] = 0x5a;
    set_kernel_params(&mut s, node, None, &changed, [64, 2, 1]).unwrap();
    let (got, bytes) = get(&mut s, node).unwrap();
    assert_eq!(
        (got.function, got.block, got.grid),
        (k.big.0, [64, 2, 1], [1, 1, 1])
    );
    assert_eq!(bytes, changed.1);
    let invalid = CudaStatus::ErrorInvalidValue;
    assert_eq!(get(&mut s, empty).unwrap_err(), invalid);
    assert_eq!(get(&mut s, GraphNodeHandle(0xdead)).unwrap_err(), invalid);
}

/// An executable graph updated with another graph keeps that graph's nodes'
/// parameters: charged for them (refused where they do not fit), and given back what
/// the old ones took over the new.
#[test]
fn an_executable_graph_updated_with_another_graph_is_charged_as_made_of_it() {
    let (mut s, k) = Kernels::new(64 * MIB);
    let small_graph = new_graph(&mut s);
    k.add(&mut s, small_graph, false);
    let large_graph = new_graph(&mut s);
    k.add(&mut s, large_graph, true);
    let exec = instantiate(&mut s, small_graph).unwrap();
    s.enter(&CTX).unwrap();
    let base = s.host_memory_bytes();
    let more = node_bytes(5016) - node_bytes(8);
    let update = |s: &mut Session, graph| {
        s.enter(&CTX).unwrap();
        let result = s
            .graph_exec_update(&CTX, GraphExecUpdate { exec, graph }, &[])
            .unwrap()
            .0;
        assert_eq!(result.result, update_result::SUCCESS);
        s.enter(&CTX).unwrap();
        s.host_memory_bytes()
    };
    assert_eq!(update(&mut s, large_graph), base + more);
    assert_eq!(update(&mut s, large_graph), base + more);
    assert_eq!(update(&mut s, small_graph), base);

    // Where the larger copies do not fit, the update is refused and nothing changes.
    let (mut s, k) = Kernels::new(MIB);
    let small_graph = new_graph(&mut s);
    let large_graph = new_graph(&mut s);
    for _ in 0..20 {
        k.add(&mut s, small_graph, false);
        k.add(&mut s, large_graph, true);
    }
    let exec = instantiate(&mut s, small_graph).unwrap();
    // Fill what is left with another executable graph of the small one.
    let mut others = Vec::new();
    while let Ok(e) = instantiate(&mut s, small_graph) {
        others.push(e);
    }
    s.enter(&CTX).unwrap();
    let full = s.host_memory_bytes();
    assert!(full + 20 * more > MIB, "{full}");
    let req = GraphExecUpdate {
        exec,
        graph: large_graph,
    };
    assert_eq!(
        s.graph_exec_update(&CTX, req, &[]).map(|r| r.0.result),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    s.enter(&CTX).unwrap();
    assert_eq!(s.host_memory_bytes(), full);
}
