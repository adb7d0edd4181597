//! Stream gates: asynchronous host functions (`cudaLaunchHostFunc`,
//! `cudaStreamAddCallback`) with CUDA's ordering.
//!
//! A host function runs once the work before it on its stream is done, and the work
//! after it waits until it returns. The host GPU cannot wait for a function that runs
//! in the guest, so the guest holds the line itself: while a stream has a pending
//! host function, everything later enqueued on that stream is queued here (the call
//! returns at once, as CUDA's would) and a per-stream thread submits it in order:
//! wait for the stream to drain on the host, run the function, submit what followed.
//! Queries answer "not ready" while a gate is busy; synchronizing calls wait for it.
//! The legacy default stream waits for the blocking streams' gates, as it waits for
//! their work natively. Failures of queued calls surface at the next synchronizing
//! call on that stream, as asynchronous CUDA errors do.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use vmcuda_wire::op::{EventHandle, StreamHandle, StreamQuery};
use vmcuda_wire::CudaStatus;

use crate::client;
use crate::state;

type Job = Box<dyn FnOnce() -> Result<(), CudaStatus> + Send>;

#[derive(Default)]
struct Gate {
    queue: VecDeque<(i32, Job)>,
    /// Work is queued or being run: later work on the stream goes behind it.
    running: bool,
    /// The stream's thread is alive (running its queue, or idle a while waiting for
    /// more): frameworks enqueue host functions every step, and a thread made for
    /// each cost them tens of microseconds.
    thread: bool,
    /// The first failure of a queued call, owed to the next synchronizing call.
    error: Option<CudaStatus>,
}

#[derive(Default)]
struct Gates {
    gates: HashMap<StreamHandle, Gate>,
    /// Events whose record is still queued behind a gate.
    pending_events: HashSet<u64>,
}

static GATES: Mutex<Option<Gates>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Option<Gates>> {
    let mut g = GATES.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(Gates::default);
    g
}

fn gates(g: &mut Option<Gates>) -> &mut Gates {
    g.as_mut().expect("initialised by lock()")
}

fn busy(g: &Gates, stream: StreamHandle) -> bool {
    g.gates.get(&stream).is_some_and(|gate| gate.running)
}

/// Streams whose gates the given stream must wait behind: its own, and for the legacy
/// default stream every blocking stream's (and the other way round).
fn blockers(g: &Gates, stream: StreamHandle) -> Vec<StreamHandle> {
    // The per-thread default stream is not non-blocking: it synchronizes with the
    // legacy stream like any stream created without cudaStreamNonBlocking.
    let blocking = |s: &StreamHandle| {
        s.is_default()
            || state::registry()
                .streams
                .get(&s.0)
                .is_some_and(|i| i.flags & 1 == 0)
    };
    let stream_blocks = blocking(&stream);
    g.gates
        .iter()
        .filter(|(s, gate)| {
            gate.running
                && (**s == stream
                    || (stream_blocks
                        && blocking(s)
                        && (**s == StreamHandle::LEGACY || stream == StreamHandle::LEGACY)))
        })
        .map(|(s, _)| *s)
        .collect()
}

/// How long a stream's thread waits for more work once its queue is empty.
const IDLE: Duration = Duration::from_secs(2);

fn start(g: &mut Gates, stream: StreamHandle) {
    let gate = g.gates.entry(stream).or_default();
    gate.running = true;
    if gate.thread {
        // Idle on CHANGED, or still in its loop: it finds the new job.
        CHANGED.notify_all();
        return;
    }
    gate.thread = true;
    std::thread::Builder::new()
        .name("vmcuda-stream-gate".into())
        .spawn(move || drain(stream))
        .expect("spawn gate thread");
}

/// Run the stream's queue in order; once empty, wait up to [`IDLE`] for more, then end.
fn drain(stream: StreamHandle) {
    let mut g = lock();
    loop {
        let gate = gates(&mut g)
            .gates
            .get_mut(&stream)
            .expect("gate exists while its thread lives");
        let Some((device, job)) = gate.queue.pop_front() else {
            if gate.running {
                gate.running = false;
                CHANGED.notify_all();
            }
            let (back, timeout) = CHANGED
                .wait_timeout_while(g, IDLE, |g| {
                    gates(g)
                        .gates
                        .get(&stream)
                        .is_some_and(|gate| gate.queue.is_empty())
                })
                .unwrap_or_else(|p| p.into_inner());
            g = back;
            if timeout.timed_out() {
                let gate = gates(&mut g).gates.get_mut(&stream).expect("kept");
                if gate.queue.is_empty() {
                    gate.thread = false;
                    return;
                }
            }
            continue;
        };
        drop(g);
        state::set_current_device(device);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
            .unwrap_or(Err(CudaStatus::ErrorUnknown));
        g = lock();
        if let Err(e) = result {
            let gate = gates(&mut g)
                .gates
                .get_mut(&stream)
                .expect("gate exists while running");
            gate.error.get_or_insert(e);
        }
        CHANGED.notify_all();
    }
}

/// Enqueue work on `stream`: run now, or queue it behind a busy gate.
pub fn submit(
    stream: StreamHandle,
    job: impl FnOnce() -> Result<(), CudaStatus> + Send + 'static,
) -> Result<(), CudaStatus> {
    let mut g = lock();
    let gs = gates(&mut g);
    let blocked = blockers(gs, stream);
    if blocked.is_empty() {
        drop(g);
        return job();
    }
    let waits: Vec<StreamHandle> = blocked.into_iter().filter(|s| *s != stream).collect();
    let device = state::current_device();
    let gate = gs.gates.entry(stream).or_default();
    if !waits.is_empty() {
        // Behind other streams' gates (legacy-stream semantics): wait for them first.
        gate.queue
            .push_back((device, Box::new(move || wait_for(&waits))));
    }
    gate.queue.push_back((device, Box::new(job)));
    start(gs, stream);
    Ok(())
}

/// Queue work on `stream` behind the gate even if it is idle (it waits on something
/// queued elsewhere).
pub fn submit_behind(
    stream: StreamHandle,
    job: impl FnOnce() -> Result<(), CudaStatus> + Send + 'static,
) -> Result<(), CudaStatus> {
    let device = state::current_device();
    let mut g = lock();
    let gs = gates(&mut g);
    gs.gates
        .entry(stream)
        .or_default()
        .queue
        .push_back((device, Box::new(job)));
    start(gs, stream);
    Ok(())
}

/// Enqueue a host function on `stream`: it runs after the stream's earlier work.
pub fn host_function(
    stream: StreamHandle,
    f: impl FnOnce(Result<(), CudaStatus>) + Send + 'static,
) {
    let device = state::current_device();
    let mut g = lock();
    let gs = gates(&mut g);
    let waits: Vec<StreamHandle> = blockers(gs, stream)
        .into_iter()
        .filter(|s| *s != stream)
        .collect();
    let gate = gs.gates.entry(stream).or_default();
    if !waits.is_empty() {
        gate.queue
            .push_back((device, Box::new(move || wait_for(&waits))));
    }
    gate.queue.push_back((
        device,
        Box::new(move || {
            let status = wait_host_idle(stream);
            f(status);
            Ok(())
        }),
    ));
    start(gs, stream);
}

/// Wait until the stream's submitted work is done: on a word the GPU writes after it
/// where there is one, else by queries (a blocking wait would hold the shared
/// connection and stop every other thread); the stream's error, if it failed.
fn wait_host_idle(stream: StreamHandle) -> Result<(), CudaStatus> {
    let query = || {
        client::client()?.call(
            state::current_device(),
            &StreamQuery { stream },
            &[],
            client::Sink::None,
        )
    };
    // Not while anything is captured (the write could join a capture), and only on a
    // stream of the current device (a stream operation goes to its context's stream).
    let here =
        crate::request::device_of_stream(stream).is_none_or(|d| d == state::current_device());
    if here && !crate::capture::any() {
        let write = |done| crate::done_word::write_after(stream, done);
        if let Some(done) = crate::done_word::wait_off_thread(write, query) {
            return done;
        }
    }
    crate::request::wait_by_queries(query)
}

fn wait_for(streams: &[StreamHandle]) -> Result<(), CudaStatus> {
    let mut g = lock();
    while streams.iter().any(|s| busy(gates(&mut g), *s)) {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    Ok(())
}

/// Wait until `stream` (and, for the legacy stream, the blocking streams) have no
/// queued work; returns a queued call's failure if one happened.
pub fn sync_stream(stream: StreamHandle) -> Result<(), CudaStatus> {
    let mut g = lock();
    loop {
        let blocked = blockers(gates(&mut g), stream);
        if blocked.is_empty() {
            break;
        }
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    match gates(&mut g)
        .gates
        .get_mut(&stream)
        .and_then(|gate| gate.error.take())
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Wait until no stream has queued work (`cudaDeviceSynchronize`).
pub fn sync_all() -> Result<(), CudaStatus> {
    let mut g = lock();
    while gates(&mut g).gates.values().any(|gate| gate.running) {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    match gates(&mut g)
        .gates
        .values_mut()
        .find_map(|gate| gate.error.take())
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Wait until no stream has queued work, leaving any queued call's failure for the
/// synchronizing call it is owed to (`cuCtxRecordEvent` captures the work queued here).
pub fn wait_all_submitted() {
    let mut g = lock();
    while gates(&mut g).gates.values().any(|gate| gate.running) {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
}

/// Whether `stream` has queued work (its query must answer "not ready").
pub fn stream_busy(stream: StreamHandle) -> bool {
    let mut g = lock();
    !blockers(gates(&mut g), stream).is_empty()
}

/// Record `event` on `stream`, queued behind the gate if there is one.
pub fn record_event(
    stream: StreamHandle,
    event: EventHandle,
    job: impl FnOnce() -> Result<(), CudaStatus> + Send + 'static,
) -> Result<(), CudaStatus> {
    if !stream_busy(stream) {
        return job();
    }
    gates(&mut lock()).pending_events.insert(event.0);
    submit(stream, move || {
        let r = job();
        gates(&mut lock()).pending_events.remove(&event.0);
        CHANGED.notify_all();
        r
    })
}

pub fn event_pending(event: EventHandle) -> bool {
    gates(&mut lock()).pending_events.contains(&event.0)
}

/// Wait until the event's record has been submitted to the host.
pub fn wait_event_submitted(event: EventHandle) {
    let mut g = lock();
    while gates(&mut g).pending_events.contains(&event.0) {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    #[test]
    fn a_streams_thread_runs_its_queue_in_order_and_is_kept_for_the_next_work() {
        let stream = StreamHandle(0x5eed_0001);
        let seen = Arc::new(StdMutex::new(Vec::new()));
        for round in 0..3 {
            for i in 0..2 {
                let seen = Arc::clone(&seen);
                submit_behind(stream, move || {
                    seen.lock()
                        .unwrap()
                        .push((round * 2 + i, std::thread::current().id()));
                    Ok(())
                })
                .unwrap();
            }
            sync_stream(stream).unwrap();
        }
        let seen = seen.lock().unwrap();
        let order: Vec<_> = seen.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [0, 1, 2, 3, 4, 5]);
        // One thread for all three rounds, though the queue emptied between them.
        assert!(seen.iter().all(|(_, t)| *t == seen[0].1), "{seen:?}");
        assert_ne!(seen[0].1, std::thread::current().id());
    }
}
