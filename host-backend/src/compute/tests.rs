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
        latency_lease_ns: 10_000_000,
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
                        None,
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
                None,
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
                None,
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
    // On a loaded machine a thread the scheduler left waiting lets a few more through
    // now and then (a full CI run saw 3 and 7 among 57 tokens): nine tokens in ten keep
    // the bound, and no token waits for more than ten requests.
    let most = latency_waits.iter().copied().max().unwrap_or(0);
    let over = latency_waits.iter().filter(|&&n| n > 2).count();
    assert!(
        over * 10 <= latency_waits.len() && most <= 10,
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
        None,
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
    let t = Turns::join(
        dir.path(),
        4001,
        "vm",
        ComputeShare::default(),
        timing(10),
        None,
    )
    .unwrap();
    // The dead holder's turn is taken at once.
    assert!(t.request_begins(&mut || {}) < 100_000_000);
    assert_eq!(board.turn(), Some(t.shared.slot));
    t.request_ends(&mut || {});
    // Idle with a waiter: handed on after the linger.
    let other = Turns::join(
        dir.path(),
        4002,
        "vm2",
        ComputeShare::default(),
        timing(10),
        None,
    )
    .unwrap();
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
    let t = Turns::join(
        dir.path(),
        5000,
        "vm5",
        ComputeShare::default(),
        timing(10),
        None,
    )
    .unwrap();
    let _other = Turns::join(
        dir.path(),
        5001,
        "vm6",
        ComputeShare::default(),
        timing(10),
        None,
    )
    .unwrap();
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

/// A simulated asynchronous GPU shared by several workers, as the real one is: a
/// launch queues its work and returns at once, and one thread runs the queue's items
/// one at a time in the order they came (contexts never run on the GPU at the same
/// moment), each for its duration. What each worker's items took of the GPU is the
/// work it got, to hold against what it was charged.
struct SimGpu {
    state: std::sync::Mutex<SimState>,
    /// Signalled whenever an item is queued, done, or the GPU stops.
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct SimState {
    queue: std::collections::VecDeque<(usize, Duration)>,
    /// By worker: items queued and done so far, and the GPU time its items took.
    queued: Vec<u64>,
    done: Vec<u64>,
    busy: Vec<Duration>,
    stop: bool,
}

impl SimGpu {
    fn new(workers: usize) -> SimGpu {
        SimGpu {
            state: std::sync::Mutex::new(SimState {
                queued: vec![0; workers],
                done: vec![0; workers],
                busy: vec![Duration::ZERO; workers],
                ..SimState::default()
            }),
            changed: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap()
    }

    /// A launch of worker `w`: queued, and the call returns at once.
    fn launch(&self, w: usize, work: Duration) {
        let mut s = self.lock();
        s.queue.push_back((w, work));
        s.queued[w] += 1;
        self.changed.notify_all();
    }

    /// Wait for the work worker `w` queued so far (its synchronize, or its drain).
    fn wait(&self, w: usize) {
        let mut s = self.lock();
        let target = s.queued[w];
        while s.done[w] < target && !s.stop {
            s = self.changed.wait(s).unwrap();
        }
    }

    /// The GPU: runs the queue until stopped. Sleeping, not spinning, for an item's
    /// duration: the test machine's cores are for the workers.
    fn run(&self) {
        let mut s = self.lock();
        loop {
            if s.stop {
                return;
            }
            let Some((w, work)) = s.queue.pop_front() else {
                s = self.changed.wait(s).unwrap();
                continue;
            };
            drop(s);
            let t = Instant::now();
            std::thread::sleep(work);
            let took = t.elapsed();
            s = self.lock();
            s.done[w] += 1;
            s.busy[w] += took;
            self.changed.notify_all();
        }
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    fn busy(&self) -> Vec<Duration> {
        self.lock().busy.clone()
    }

    /// Worker `w`'s drain, for its keeper.
    fn drainer(self: &Arc<Self>, w: usize) -> Drainer {
        let gpu = Arc::clone(self);
        Arc::new(move || gpu.wait(w))
    }
}

/// A guest that launches `launches` kernels of `work` each, then synchronizes as the
/// guest library does: a posted request has the GPU write a done word, and the guest
/// waits for the word, sending nothing meanwhile (the worker is idle, its work still
/// queued). Rounds start `every` apart (at once when one takes longer). Returns how
/// long each round took, from its first request to its synchronize's end.
fn async_guest(
    turns: &Turns,
    gpu: &SimGpu,
    me: usize,
    (launches, work, every): (usize, Duration, Duration),
    until: Instant,
) -> Vec<Duration> {
    let mut drain = || gpu.wait(me);
    let mut rounds = Vec::new();
    while Instant::now() < until {
        let t = Instant::now();
        for _ in 0..launches {
            turns.request_begins(&mut drain);
            gpu.launch(me, work);
            turns.request_ends(&mut drain);
        }
        turns.request_begins(&mut drain);
        turns.request_ends(&mut drain);
        gpu.wait(me);
        rounds.push(t.elapsed());
        if let Some(rest) = every.checked_sub(t.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    rounds
}

/// Parts of the whole, in order.
fn parts(of: &[f64]) -> Vec<f64> {
    let total: f64 = of.iter().sum();
    of.iter().map(|v| v / total).collect()
}

/// VMs of `shares` (names and shares), each a guest of eight 1 ms kernels and a
/// synchronize (bench/compute_load.py's matmuls, scaled), on one simulated GPU for
/// 3 s; asserts that each VM's part of the work done, and of what it was charged, is
/// within 10% (relative) of its part of the shares.
fn work_follows_the_shares(name: &str, shares: &[(&str, u32)]) {
    let dir = Scratch::new(name);
    let gpu = Arc::new(SimGpu::new(shares.len()));
    let until = Instant::now() + Duration::from_secs(3);
    let charged: Vec<f64> = std::thread::scope(|scope| {
        let gpu_thread = scope.spawn(|| gpu.run());
        let workers: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, &(vm, s))| {
                let (dir, gpu) = (dir.path(), &gpu);
                scope.spawn(move || {
                    let t = Turns::join(
                        dir,
                        6000 + i as u32,
                        vm,
                        share(s, Priority::Normal, None),
                        timing(10),
                        Some(gpu.drainer(i)),
                    )
                    .unwrap();
                    let load = (8, Duration::from_millis(1), Duration::ZERO);
                    async_guest(&t, gpu, i, load, until);
                    t.used_ns() as f64
                })
            })
            .collect();
        let charged = workers.into_iter().map(|h| h.join().unwrap()).collect();
        gpu.stop();
        gpu_thread.join().unwrap();
        charged
    });
    let work: Vec<f64> = gpu.busy().iter().map(Duration::as_secs_f64).collect();
    let (work, charged) = (parts(&work), parts(&charged));
    let want = parts(
        &shares
            .iter()
            .map(|&(_, s)| f64::from(s))
            .collect::<Vec<_>>(),
    );
    eprintln!("{name}: work {work:.3?}, charged {charged:.3?}, shares {want:.3?}");
    for i in 0..shares.len() {
        assert!(
            (work[i] - want[i]).abs() <= want[i] * 0.10
                && (charged[i] - want[i]).abs() <= want[i] * 0.10,
            "work {work:.3?}, charged {charged:.3?}, wanted {want:.3?}"
        );
    }
}

#[test]
fn on_an_asynchronous_gpu_the_work_done_follows_the_shares() {
    work_follows_the_shares("async1", &[("a", 200), ("b", 100), ("c", 100)]);
}

/// Three quarters of the GPU need the same holder's turns back to back.
#[test]
fn on_an_asynchronous_gpu_a_vm_gets_more_than_half_when_its_share_says_so() {
    work_follows_the_shares("async3", &[("a", 300), ("b", 100)]);
}

/// A decoder (a `latency` VM: three short kernels and a synchronize per token, tokens
/// starting `every` apart) and a saturating `batch` VM (eight 500 µs kernels and a
/// synchronize, again and again), for `run`: on one simulated GPU and board (`shared`),
/// or each on its own, so that the decoder is alone on its GPU with the test machine
/// as loaded. Returns the tokens' times and the part of its GPU the batch VM got.
fn decoder_and_batch(shared: bool, every: Duration, run: Duration) -> (Vec<Duration>, f64) {
    let dirs = [Scratch::new("async2-a"), Scratch::new("async2-b")];
    let gpus = [Arc::new(SimGpu::new(2)), Arc::new(SimGpu::new(2))];
    let (decoder_gpu, batch_gpu) = (&gpus[0], &gpus[usize::from(!shared)]);
    let (decoder_dir, batch_dir) = (dirs[0].path(), dirs[usize::from(!shared)].path());
    let start = Instant::now();
    let until = start + run;
    let tokens = std::thread::scope(|scope| {
        let gpu_threads: Vec<_> = gpus.iter().map(|g| scope.spawn(|| g.run())).collect();
        let batch = scope.spawn(|| {
            let t = Turns::join(
                batch_dir,
                7000,
                "batch",
                share(100, Priority::Batch, None),
                timing(10),
                Some(batch_gpu.drainer(0)),
            )
            .unwrap();
            let load = (8, Duration::from_micros(500), Duration::ZERO);
            async_guest(&t, batch_gpu, 0, load, until);
        });
        let decoder = scope.spawn(|| {
            let t = Turns::join(
                decoder_dir,
                7001,
                "decoder",
                share(100, Priority::Latency, None),
                timing(10),
                Some(decoder_gpu.drainer(1)),
            )
            .unwrap();
            let load = (3, Duration::from_micros(100), every);
            async_guest(&t, decoder_gpu, 1, load, until)
        });
        let tokens = decoder.join().unwrap();
        batch.join().unwrap();
        for (g, t) in gpus.iter().zip(gpu_threads) {
            g.stop();
            t.join().unwrap();
        }
        tokens
    });
    let batch_part = batch_gpu.busy()[0].as_secs_f64() / start.elapsed().as_secs_f64();
    (tokens, batch_part)
}

fn median(of: &mut [Duration]) -> Duration {
    of.sort();
    of[of.len() / 2]
}

/// The bound: past its lease (10 ms here) the decoder leaves its next gap to the
/// others, so a lower priority gets about one gap (2 ms, less the decoder's token and
/// its linger) in every lease and gap: 1.3 ms in 12, about 11%. Asserted: at least 5%
/// (half of that, for a loaded test machine; 0.2% without the lease). The decoder's
/// median token beside the batch VM against alone is printed, not asserted: a time on a
/// loaded test machine (a full CI run saw 1.3 times); tests/gpu/run-compute.sh measures
/// it on the GPU.
#[test]
fn a_batch_vm_beside_a_decoder_with_short_gaps_still_gets_the_gpu() {
    let every = Duration::from_millis(2);
    let (mut alone, _) = decoder_and_batch(false, every, Duration::from_secs(2));
    let (mut beside, batch_part) = decoder_and_batch(true, every, Duration::from_secs(3));
    let (alone, beside) = (median(&mut alone), median(&mut beside));
    eprintln!("decoder p50 alone {alone:?}, beside the batch VM {beside:?}; the batch VM's part {batch_part:.3}");
    assert!(
        batch_part >= 0.05,
        "the batch VM got {batch_part:.3} of the GPU"
    );
}

#[test]
fn the_keeper_waits_for_an_idle_holders_work_and_charges_it_to_the_holder() {
    let dir = Scratch::new("drain");
    let drained = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&drained);
    // The holder's GPU work: 80 ms still queued when its guest goes quiet.
    let drainer: Drainer = Arc::new(move || {
        std::thread::sleep(Duration::from_millis(80));
        d.fetch_add(1, SeqCst);
    });
    let holder = Turns::join(
        dir.path(),
        8000,
        "a",
        ComputeShare::default(),
        timing(10),
        Some(drainer),
    )
    .unwrap();
    let next = Turns::join(
        dir.path(),
        8001,
        "b",
        ComputeShare::default(),
        timing(10),
        None,
    )
    .unwrap();
    holder.request_begins(&mut || {});
    holder.request_ends(&mut || {});
    let waited = next.request_begins(&mut || {});
    // The turn came once the holder's work was done, and that time was the holder's.
    assert_eq!(drained.load(SeqCst), 1);
    assert!(waited >= 80_000_000, "waited {waited} ns");
    assert!(
        holder.used_ns() >= 80_000_000,
        "charged {}",
        holder.used_ns()
    );
    next.request_ends(&mut || {});
}

#[test]
fn a_latency_holder_past_its_lease_lingers_as_a_normal_one() {
    let t = ComputeConfig::default().timing();
    assert_eq!(t.latency_lease_ns, 10_000_000);
    let normal = t.linger_ns[Priority::Normal as usize];
    assert_eq!(t.linger(Priority::Latency, 9_999_999), 3_000_000);
    assert_eq!(t.linger(Priority::Latency, 10_000_000), normal);
    assert_eq!(t.linger(Priority::Normal, 50_000_000), normal);
    assert_eq!(t.linger(Priority::Batch, 0), normal);
}
