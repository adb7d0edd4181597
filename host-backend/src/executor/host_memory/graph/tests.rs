use super::*;
use crate::executor::graph::{GraphBuild, Graphs};
use crate::executor::StreamOrder;
use crate::executor::{CopyExec, DeviceRange, MemoryExec, StreamExec};

fn r(ptr: DevicePtr, len: u64) -> DeviceRange {
    DeviceRange::for_tests(ptr, len)
}

/// A graph of two kernel nodes and an empty one, set in place (the double runs no
/// kernels, so none is captured).
fn kernels_and_empty(x: &mut HostMemoryExecutor) -> (ExecGraph, [ExecNode; 3]) {
    use crate::executor::graph::GraphBuild;
    let g = x.graph_create(0).unwrap();
    let kernel = || Recorded::Launch {
        function: 1,
        grid: [1; 3],
        block: [1; 3],
        shared_mem: 0,
        attributes: Vec::new(),
        params: Vec::new(),
    };
    let nodes = vec![
        Node::new(kernel(), vec![]),
        Node::new(kernel(), vec![]),
        Node::new(Recorded::Empty, vec![]),
    ];
    x.graphs.graphs.insert(g, nodes);
    (g, [node_id(g, 0), node_id(g, 1), node_id(g, 2)])
}

/// Edges keep their data: reported by every query, removed only with it, taken
/// only where CUDA takes them.
#[test]
fn edges_keep_their_data() {
    use crate::executor::graph::GraphBuild;
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let (g, [k1, k2, empty]) = kernels_and_empty(&mut x);
    let raw = |b: [u8; 8]| EdgeData::checked(u64::from_le_bytes(b)).unwrap();
    let programmatic = raw([1, 0, 1, 0, 0, 0, 0, 0]);
    let bad = CudaStatus::ErrorInvalidValue;
    // Programmatic only between kernel nodes, out of an early port.
    let into_empty = x.change_dependencies(g, &[k1], &[empty], &[programmatic], true);
    assert_eq!(into_empty.unwrap_err(), bad);
    let from_end = raw([0, 0, 1, 0, 0, 0, 0, 0]);
    let late = x.change_dependencies(g, &[k1], &[k2], &[from_end], true);
    assert_eq!(late.unwrap_err(), bad);
    x.change_dependencies(
        g,
        &[k1, k2],
        &[k2, empty],
        &[programmatic, EdgeData::default()],
        true,
    )
    .unwrap();
    let (from, to, data) = x.graph_edges(g).unwrap();
    assert_eq!((from, to), (vec![k1, k2], vec![k2, empty]));
    assert_eq!(data, vec![programmatic, EdgeData::default()]);
    assert_eq!(
        x.node_dependencies(g, k2).unwrap(),
        (vec![k1], vec![programmatic])
    );
    assert_eq!(
        x.dependent_nodes(g, k1).unwrap(),
        (vec![k2], vec![programmatic])
    );
    // A clone keeps them.
    let clone = x.graph_clone(g).unwrap();
    assert_eq!(
        x.graph_edges(clone).unwrap().2,
        vec![programmatic, EdgeData::default()]
    );
    // Removed with the data it has, or none given; not with other data.
    let completion = raw([2, 0, 1, 0, 0, 0, 0, 0]);
    let other = x.change_dependencies(g, &[k1], &[k2], &[completion], false);
    assert_eq!(other.unwrap_err(), bad);
    x.change_dependencies(g, &[k1], &[k2], &[programmatic], false)
        .unwrap();
    assert_eq!(x.node_dependencies(g, k2).unwrap(), (vec![], vec![]));
    x.change_dependencies(g, &[k1], &[k2], &[programmatic], true)
        .unwrap();
    x.change_dependencies(g, &[k1], &[k2], &[], false).unwrap();
    assert_eq!(x.node_dependencies(g, k2).unwrap(), (vec![], vec![]));
    // A default edge may leave a kernel at launch completion, to any node; never
    // at the programmatic port.
    let started = raw([2, 0, 0, 0, 0, 0, 0, 0]);
    x.change_dependencies(g, &[k1], &[empty], &[started], true)
        .unwrap();
    let early = raw([1, 0, 0, 0, 0, 0, 0, 0]);
    let refused = x.change_dependencies(g, &[k2], &[empty], &[early], true);
    assert_eq!(refused.unwrap_err(), bad);
    x.change_dependencies(g, &[k1], &[empty], &[started], false)
        .unwrap();
    // A capture into the graph after a programmatic edge: the captured node has it.
    let s = x.stream_create(1, 0).unwrap();
    x.begin_capture_to_graph(s, g, &[k1], &[programmatic])
        .unwrap();
    assert_eq!(
        x.capture_graph(s).unwrap().1,
        (vec![k1], vec![programmatic])
    );
    x.update_capture_dependencies(s, &[k2], &[completion], false)
        .unwrap();
    let (deps, edges) = x.capture_graph(s).unwrap().1;
    assert_eq!(
        (deps, edges),
        (vec![k1, k2], vec![programmatic, completion])
    );
    x.update_capture_dependencies(s, &[k1], &[], true).unwrap();
    assert_eq!(
        x.capture_graph(s).unwrap().1,
        (vec![k1], vec![EdgeData::default()])
    );
    x.update_capture_dependencies(s, &[k1], &[programmatic], true)
        .unwrap();
    assert!(x.record(s, || Recorded::Empty));
    let made = x.end_capture(s).unwrap();
    assert_eq!(made, g);
    let last = node_id(g, 3);
    assert_eq!(
        x.node_dependencies(g, last).unwrap(),
        (vec![k1], vec![programmatic])
    );
}

/// Only the origin stream ends a capture; ending it from a stream that joined it
/// fails and invalidates it, as the driver does.
#[test]
fn ending_a_capture_from_a_joined_stream_invalidates_it() {
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let (s, t) = (
        x.stream_create(1, 0).unwrap(),
        x.stream_create(1, 0).unwrap(),
    );
    x.begin_capture(s).unwrap();
    let fork = x.event_create(0).unwrap();
    x.event_record(fork, s, 0).unwrap();
    x.stream_wait_event(t, fork, 0).unwrap();
    assert_eq!(
        x.end_capture(t).unwrap_err(),
        CudaStatus::ErrorStreamCaptureUnmatched
    );
    assert_eq!(
        x.end_capture(s).unwrap_err(),
        CudaStatus::ErrorStreamCaptureInvalidated
    );
    assert!(!x.is_capturing(s) && !x.is_capturing(t));
}

#[test]
fn captured_work_is_recorded_and_replayed_by_each_launch() {
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let s = x.stream_create(0, 0).unwrap();
    let t = x.stream_create(0, 0).unwrap();
    let a = x.alloc(64).unwrap();
    let b = x.alloc(64).unwrap();
    x.begin_capture(s).unwrap();
    x.memset(r(a, 64), 7, StreamOrder::Queued(s)).unwrap();
    // Fork to `t` through an event, copy there, and join back.
    let fork = x.event_create(0).unwrap();
    let join = x.event_create(0).unwrap();
    x.event_record(fork, s, 0).unwrap();
    x.stream_wait_event(t, fork, 0).unwrap();
    x.copy_dtod(r(b, 64), r(a, 64), StreamOrder::Queued(t))
        .unwrap();
    x.event_record(join, t, 0).unwrap();
    x.stream_wait_event(s, join, 0).unwrap();
    x.memset(r(a, 8), 1, StreamOrder::Queued(s)).unwrap();
    // The graph being built, seen from the capture: s's last node is the frontier.
    let (building, (deps, edges)) = x.capture_graph(s).unwrap();
    assert_eq!(deps, vec![building << 16 | 3]);
    assert_eq!(edges, vec![EdgeData::default()]);
    assert_eq!(x.graph_nodes(building).unwrap().len(), 3);
    // Nothing ran yet; a pageable copy cannot be captured.
    assert_eq!(x.slice(a, 1).unwrap()[0], 0);
    assert_eq!(
        x.copy_htod(r(a, [1].len() as u64), &[1], StreamOrder::Queued(s))
            .unwrap_err(),
        CudaStatus::ErrorStreamCaptureUnsupported
    );
    let g = x.end_capture(s).unwrap();
    assert_eq!(g, building, "the graph keeps its id when the capture ends");
    assert!(!x.is_capturing(t), "joined streams leave with the origin");
    let nodes = x.graph_nodes(g).unwrap();
    assert_eq!(nodes.len(), 3);
    let deps = |x: &mut HostMemoryExecutor, n| x.node_dependencies(g, n).unwrap().0;
    assert_eq!(deps(&mut x, nodes[0]), Vec::<u64>::new());
    assert_eq!(deps(&mut x, nodes[1]), vec![nodes[0]]);
    assert_eq!(deps(&mut x, nodes[2]), vec![nodes[0], nodes[1]]);
    assert!(x.node_dependencies(g, 5).is_err());
    let exec = x.graph_instantiate(g, 0).unwrap();
    x.graph_destroy(g).unwrap();
    x.graph_launch(exec, LEGACY).unwrap();
    assert_eq!(x.slice(a, 9).unwrap(), &[1, 1, 1, 1, 1, 1, 1, 1, 7]);
    assert_eq!(x.slice(b, 2).unwrap(), &[7, 7]);
    x.graph_exec_destroy(exec).unwrap();
    assert_eq!(
        x.graph_launch(exec, LEGACY).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
}

const LEGACY: ExecStream = crate::executor::LEGACY_STREAM;

/// A body's work as the guest builds it: captured into the body graph.
fn copy_into(
    x: &mut HostMemoryExecutor,
    graph: ExecGraph,
    dst: DevicePtr,
    src: DevicePtr,
) -> ExecNode {
    let s = x.stream_create(0, 0).unwrap();
    x.begin_capture_to_graph(s, graph, &[], &[]).unwrap();
    x.copy_dtod(r(dst, 64), r(src, 64), StreamOrder::Queued(s))
        .unwrap();
    x.end_capture(s).unwrap();
    *x.graph_nodes(graph).unwrap().last().unwrap()
}

/// Conditional nodes (XLA's while and scan loops): bodies are graphs built into,
/// copied into the executable graph, whose body nodes take new parameters through
/// it; a body runs as its condition's default value says (no kernel changes it).
#[test]
fn conditional_bodies_run_by_their_default_values_and_update_through_the_exec() {
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let [a, b, c, d] = [0; 4].map(|_| x.alloc(64).unwrap());
    x.memset(r(a, 64), 1, StreamOrder::Waited(LEGACY)).unwrap();
    x.memset(r(c, 64), 3, StreamOrder::Waited(LEGACY)).unwrap();
    let g = x.graph_create(0).unwrap();
    let other = x.graph_create(0).unwrap();
    let once = x.conditional_handle_create(g, 1, 0).unwrap();
    let never = x.conditional_handle_create(g, 0, 0).unwrap();
    // A handle of another graph, a WHILE of two bodies: refused.
    assert!(x
        .add_conditional_node(other, &[], once, condition_kind::WHILE, 1)
        .is_err());
    assert!(x
        .add_conditional_node(g, &[], once, condition_kind::WHILE, 2)
        .is_err());
    let (w, bodies) = x
        .add_conditional_node(g, &[], once, condition_kind::WHILE, 1)
        .unwrap();
    assert_eq!(x.node_type(g, w).unwrap(), node_type::CONDITIONAL);
    let in_body = copy_into(&mut x, bodies[0], b, a);
    let (_, skipped) = x
        .add_conditional_node(g, &[w], never, condition_kind::IF, 1)
        .unwrap();
    copy_into(&mut x, skipped[0], d, a);
    let exec = x.graph_instantiate(g, 0).unwrap();
    // A later change to the body graph does not reach the executable graph.
    copy_into(&mut x, bodies[0], d, a);
    x.graph_launch(exec, LEGACY).unwrap();
    assert_eq!(x.slice(b, 1).unwrap()[0], 1, "the WHILE body ran");
    assert_eq!(
        x.slice(d, 1).unwrap()[0],
        0,
        "the IF body did not, nor the later node"
    );
    // The body's copy node takes new parameters through the executable graph.
    let scratch = x.graph_create(0).unwrap();
    let new = copy_into(&mut x, scratch, d, c);
    x.node_copy_params((bodies[0], in_body), (scratch, new), Some(exec))
        .unwrap();
    x.graph_launch(exec, LEGACY).unwrap();
    assert_eq!(x.slice(d, 1).unwrap()[0], 3);
    // A node of a graph that is no body of the executable graph's: refused.
    let stray = copy_into(&mut x, other, d, c);
    assert!(x
        .node_copy_params((other, stray), (scratch, new), Some(exec))
        .is_err());
    // Bodies go with their graph.
    x.graph_destroy(g).unwrap();
    assert!(x.graph_nodes(bodies[0]).is_err());
    x.graph_launch(exec, LEGACY).unwrap();
}

#[test]
fn the_default_pool_counts_stream_ordered_allocations() {
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let p = x.alloc_async(1000, None, LEGACY).unwrap();
    let q = x.alloc_async(24, None, LEGACY).unwrap();
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
            .unwrap(),
        1024
    );
    x.free_async(p, LEGACY).unwrap();
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
            .unwrap(),
        24
    );
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::USED_MEM_HIGH)
            .unwrap(),
        1024
    );
    x.pool_set_attribute(None, pool_attr::USED_MEM_HIGH, 0)
        .unwrap();
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::USED_MEM_HIGH)
            .unwrap(),
        24
    );
    assert!(x
        .pool_set_attribute(None, pool_attr::USED_MEM_CURRENT, 0)
        .is_err());
    x.pool_set_attribute(None, pool_attr::RELEASE_THRESHOLD, u64::MAX)
        .unwrap();
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::RELEASE_THRESHOLD)
            .unwrap(),
        u64::MAX
    );
    x.free_async(q, LEGACY).unwrap();
    assert_eq!(
        x.free_async(q, LEGACY).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
}

#[test]
fn a_made_pool_keeps_its_own_figures_and_its_maximum() {
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let pool = x.pool_create(4096, false).unwrap();
    let p = x.alloc_async(1000, Some(pool), LEGACY).unwrap();
    assert_eq!(
        x.pool_get_attribute(Some(pool), pool_attr::USED_MEM_CURRENT)
            .unwrap(),
        1000
    );
    assert_eq!(
        x.pool_get_attribute(None, pool_attr::USED_MEM_CURRENT)
            .unwrap(),
        0
    );
    // Past its maximum size: refused, and the pool is unchanged.
    assert_eq!(
        x.alloc_async(8192, Some(pool), LEGACY).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
    x.pool_set_attribute(Some(pool), pool_attr::RELEASE_THRESHOLD, u64::MAX)
        .unwrap();
    let used = x.used_memory;
    x.free_async(p, LEGACY).unwrap();
    // Kept by the pool (its reserve), until trimmed.
    assert_eq!(x.used_memory, used);
    assert_eq!(
        x.pool_get_attribute(Some(pool), pool_attr::RESERVED_MEM_CURRENT)
            .unwrap(),
        1024
    );
    x.pool_trim_to(Some(pool), 0).unwrap();
    assert_eq!(
        x.pool_get_attribute(Some(pool), pool_attr::RESERVED_MEM_CURRENT)
            .unwrap(),
        0
    );
    assert_eq!(x.pool_get_access(Some(pool), 0).unwrap(), 3);
    // Destroyed with an allocation live: the allocation stays until freed.
    let q = x.alloc_async(24, Some(pool), LEGACY).unwrap();
    x.pool_destroy(pool).unwrap();
    assert_eq!(
        x.pool_get_attribute(Some(pool), pool_attr::USED_MEM_CURRENT)
            .unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(
        x.alloc_async(24, Some(pool), LEGACY).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    x.free_async(q, LEGACY).unwrap();
    assert_eq!(
        x.pool_destroy(pool).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
}
