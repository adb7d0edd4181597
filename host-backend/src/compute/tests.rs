use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::board::{now_ns, slot, Board, SlotView};
use super::*;

/// A fresh directory for one test's board.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("vmcuda-compute-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn view(index: usize, priority: u64, vtime: u64, waiting_since: u64) -> SlotView {
    SlotView {
        index,
        pid: 100 + index as u32,
        vm: 1,
        share: 100,
        priority,
        cap: 0,
        heartbeat: now_ns(),
        waiting_since,
        vtime,
        used_ns: 0,
        throttled_ns: 0,
        active_at: 0,
    }
}

#[test]
fn next_in_line_is_the_highest_priority_then_the_least_virtual_time() {
    let now = now_ns();
    let slots = [
        view(0, 1, 50, 5),
        view(1, 1, 10, 9),
        view(2, 0, 0, 1),
        view(3, 1, 10, 3),
        view(4, 2, 900, 0), // not waiting
    ];
    // Same priority and virtual time: the longer wait goes first.
    assert_eq!(next_in_line(&slots, 99, now), Some(3));
    assert_eq!(next_in_line(&slots, 3, now), Some(1));
    let mut with_latency = slots.to_vec();
    with_latency[4].waiting_since = 7;
    assert_eq!(next_in_line(&with_latency, 99, now), Some(4));
    // A waiter whose worker is gone is passed over.
    with_latency[4].heartbeat = now - 3 * STALE_NS;
    assert_eq!(next_in_line(&with_latency, 99, now), Some(3));
    assert_eq!(next_in_line(&[], 0, now), None);
}

#[test]
fn virtual_time_runs_slower_for_larger_shares_and_faster_for_more_workers() {
    assert_eq!(virtual_ns(1_000, 100, 1), 1_000);
    assert_eq!(virtual_ns(1_000, 200, 1), 500);
    assert_eq!(virtual_ns(1_000, 50, 1), 2_000);
    assert_eq!(virtual_ns(1_000, 100, 2), 2_000);
    assert_eq!(virtual_ns(u64::MAX, 1, 1000), u64::MAX);
    assert_eq!(virtual_ns(5, 0, 0), 500);
}

fn timing(quantum_ms: u64) -> Timing {
    Timing {
        quantum_ns: quantum_ms * 1_000_000,
        linger_ns: [200_000, 200_000, 3_000_000],
    }
}

/// A worker's requests as a test thread makes them: each holds the "GPU" (a counter
/// that must never pass 1) for `work`, then waits `gap`.
struct Gpu {
    /// Requests on the "GPU" now (never more than one).
    on: AtomicUsize,
    overlaps: AtomicUsize,
    /// Requests done, by every worker.
    done: AtomicUsize,
}

impl Gpu {
    fn new() -> Gpu {
        Gpu {
            on: AtomicUsize::new(0),
            overlaps: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }
}

/// Returns the requests made, and for each the requests of others done while it
/// waited for its turn.
fn worker_loop(
    turns: &Turns,
    gpu: &Gpu,
    work: Duration,
    gap: Duration,
    until: Instant,
) -> (u64, Vec<usize>) {
    let (on_gpu, overlaps) = (&gpu.on, &gpu.overlaps);
    let mut requests = 0;
    let mut waits = Vec::new();
    while Instant::now() < until {
        let before = gpu.done.load(SeqCst);
        turns.request_begins(&mut || {});
        waits.push(gpu.done.load(SeqCst) - before);
        if on_gpu.fetch_add(1, SeqCst) != 0 {
            overlaps.fetch_add(1, SeqCst);
        }
        let t = Instant::now();
        while t.elapsed() < work {
            std::hint::spin_loop();
        }
        on_gpu.fetch_sub(1, SeqCst);
        gpu.done.fetch_add(1, SeqCst);
        turns.request_ends(&mut || {});
        requests += 1;
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    (requests, waits)
}

fn share(share: u32, priority: Priority, cap: Option<u32>) -> ComputeShare {
    ComputeShare {
        share,
        priority,
        cap,
    }
}

#[test]
fn turns_are_exclusive_and_follow_the_shares() {
    let dir = Scratch::new("t1");
    let gpu = Arc::new(Gpu::new());
    let until = Instant::now() + Duration::from_millis(1500);
    let shares = [("a", 200), ("b", 100), ("c", 100)];
    let used: Vec<u64> = std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, &(vm, s))| {
                let (dir, gpu) = (dir.path(), &gpu);
                scope.spawn(move || {
                    let t = Turns::join(
                        dir,
                        1000 + i as u32,
                        vm,
                        share(s, Priority::Normal, None),
                        timing(5),
                    )
                    .unwrap();
                    worker_loop(&t, gpu, Duration::from_micros(500), Duration::ZERO, until);
                    t.used_ns()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(gpu.overlaps.load(SeqCst), 0, "two workers ran at once");
    let total: u64 = used.iter().sum();
    let parts: Vec<f64> = used.iter().map(|&u| u as f64 / total as f64).collect();
    // 50%, 25%, 25%, each within 10% of its share.
    for (part, want) in parts.iter().zip([0.5, 0.25, 0.25]) {
        assert!(
            (part - want).abs() <= want * 0.10,
            "parts {parts:?}, wanted 0.5/0.25/0.25"
        );
    }
    // Everyone left: the board is empty and nobody holds the turn.
    let board = Board::open(dir.path()).unwrap();
    assert!(board.slots().is_empty());
    assert_eq!(board.turn(), None);
}

#[test]
fn a_latency_worker_waits_at_most_about_one_request_of_a_batch_worker() {
    let dir = Scratch::new("t2");
    let gpu = Gpu::new();
    let until = Instant::now() + Duration::from_millis(1000);
    let batch_work = Duration::from_millis(2);
    let (latency_waits, batch_requests) = std::thread::scope(|scope| {
        let batch = scope.spawn(|| {
            let t = Turns::join(
                dir.path(),
                2000,
                "batch",
                share(100, Priority::Batch, None),
                timing(10),
            )
            .unwrap();
            worker_loop(&t, &gpu, batch_work, Duration::ZERO, until).0
        });
        let latency = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            let t = Turns::join(
                dir.path(),
                2001,
                "infer",
                share(100, Priority::Latency, None),
                timing(10),
            )
            .unwrap();
            // Tokens: a short request, then the guest thinks for 10 ms.
            worker_loop(
                &t,
                &gpu,
                Duration::from_micros(300),
                Duration::from_millis(10),
                until,
            )
            .1
        });
        (latency.join().unwrap(), batch.join().unwrap())
    });
    assert_eq!(gpu.overlaps.load(SeqCst), 0);
    // While a token waited, at most the batch request under way ended, and one that
    // began just before the token asked (a count, not a time: test machines are busy).
    let most = latency_waits.iter().copied().max().unwrap_or(0);
    assert!(
        most <= 2,
        "batch requests done while a token waited: {latency_waits:?}"
    );
    // The batch worker still ran between tokens.
    assert!(batch_requests > 100, "batch requests: {batch_requests}");
}

#[test]
fn a_cap_holds_even_when_nobody_else_wants_the_gpu() {
    let dir = Scratch::new("t3");
    let gpu = Gpu::new();
    let run = Duration::from_millis(1200);
    let t = Turns::join(
        dir.path(),
        3000,
        "capped",
        share(100, Priority::Normal, Some(25)),
        timing(10),
    )
    .unwrap();
    let start = Instant::now();
    worker_loop(
        &t,
        &gpu,
        Duration::from_micros(500),
        Duration::ZERO,
        start + run,
    );
    let busy = t.used_ns() as f64 / start.elapsed().as_nanos() as f64;
    // 25% of the time, give or take the credit saved up at the start (and a busy test
    // machine's delays, which only make it less).
    assert!((0.10..=0.36).contains(&busy), "busy {busy:.3}");
    assert!(
        t.throttled_ns() > 500_000_000,
        "throttled {}",
        t.throttled_ns()
    );
}

#[test]
fn an_idle_holder_gives_the_turn_up_and_a_dead_one_is_passed_over() {
    let dir = Scratch::new("t4");
    let board = Board::open(dir.path()).unwrap();
    // A holder that died: its slot claimed, the turn its, the heartbeat old.
    let now = now_ns();
    let dead = board.claim(4000, now, STALE_NS).unwrap();
    board
        .slot(dead, slot::HEARTBEAT)
        .store(now - 3 * STALE_NS, SeqCst);
    assert!(board.hand(None, Some(dead), now));
    let t = Turns::join(dir.path(), 4001, "vm", ComputeShare::default(), timing(10)).unwrap();
    // The dead holder's turn is taken at once.
    assert!(t.request_begins(&mut || {}) < 100_000_000);
    assert_eq!(board.turn(), Some(t.shared.slot));
    t.request_ends(&mut || {});
    // Idle with a waiter: handed on after the linger.
    let other = Turns::join(dir.path(), 4002, "vm2", ComputeShare::default(), timing(10)).unwrap();
    let waited = other.request_begins(&mut || {});
    assert!(waited < 100_000_000, "waited {waited} ns");
    assert_eq!(board.turn(), Some(other.shared.slot));
    other.request_ends(&mut || {});
    // Gone: the turn goes with it.
    let other_slot = other.shared.slot;
    drop(other);
    assert_ne!(board.turn(), Some(other_slot));
    drop(t);
    assert!(board.slots().iter().all(|v| v.pid == 4000));
}

#[test]
fn a_run_time_change_reaches_live_workers() {
    let dir = Scratch::new("t5");
    let t = Turns::join(dir.path(), 5000, "vm5", ComputeShare::default(), timing(10)).unwrap();
    let _other = Turns::join(dir.path(), 5001, "vm6", ComputeShare::default(), timing(10)).unwrap();
    let new = share(40, Priority::Latency, Some(50));
    assert_eq!(apply(dir.path(), "vm5", new), 1);
    assert_eq!(t.share(), new);
    let census = census(dir.path()).unwrap();
    let vm6 = census.iter().find(|v| v.pid == 5001).unwrap();
    assert_eq!((vm6.share, vm6.priority, vm6.cap), (100, 1, 0));
}

#[test]
fn a_damaged_board_is_laid_out_anew() {
    let dir = Scratch::new("t6");
    std::fs::write(board::path(dir.path()), b"not a board").unwrap();
    let b = Board::open(dir.path()).unwrap();
    assert!(b.slots().is_empty());
    assert_eq!(
        std::fs::metadata(board::path(dir.path())).unwrap().len(),
        board::FILE_LEN as u64
    );
}
