//! Where a guest process's time goes, call by call (`VMCUDA_PROFILE`).
//!
//! - `VMCUDA_PROFILE=1` (or `summary`): a summary on stderr when the process exits.
//! - `VMCUDA_PROFILE=FILE`: the summary into FILE instead (`%p` becomes the pid).
//! - `VMCUDA_PROFILE_TRACE=FILE`: a timeline in Chrome trace JSON, which Perfetto and
//!   `chrome://tracing` open (`%p` becomes the pid); it switches the profile on too.
//!
//! Two levels are counted. Driver calls, the outermost export a thread is in (a legacy
//! name calling its successor counts once): calls, time inside, and what they did on the
//! connection. Ops on the connection: requests waited for (round trips), requests
//! posted without a reply, bytes each way, the time the guest was blocked on the reply,
//! and the worker's share of it, which the host stamps into each reply (the rest is the
//! transport's, both ways, and the host's reading and writing). For a synchronizing op
//! the worker's time is mostly the GPU's.
//!
//! Off, it costs a load per driver call and per round trip. On, a lock per record: a
//! profile is for finding round trips, not for timing the last nanosecond.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use vmcuda_wire::op::Op;

/// Timeline events kept at most (about 150 bytes each); later ones are counted only.
const DEFAULT_MAX_EVENTS: usize = 1_000_000;

static PROFILE: OnceLock<Option<Profile>> = OnceLock::new();

/// The process's profile, if `VMCUDA_PROFILE` or `VMCUDA_PROFILE_TRACE` asks for one.
pub fn get() -> Option<&'static Profile> {
    PROFILE
        .get_or_init(|| {
            let summary = std::env::var("VMCUDA_PROFILE")
                .ok()
                .filter(|v| !v.is_empty());
            let trace = std::env::var("VMCUDA_PROFILE_TRACE")
                .ok()
                .filter(|v| !v.is_empty());
            if summary.is_none() && trace.is_none() {
                return None;
            }
            // SAFETY: `write_at_exit` is an `extern "C" fn()` that never unwinds.
            unsafe { libc::atexit(write_at_exit) };
            Some(Profile::new(summary, trace))
        })
        .as_ref()
}

/// What happened on the connection: for one request, one driver call (the calling
/// thread's, so far), or summed over many.
#[derive(Clone, Copy, Default)]
struct Tally {
    waited: u64,
    posted: u64,
    bytes_out: u64,
    bytes_in: u64,
    wait: Duration,
    worker: Duration,
}

const NO_TALLY: Tally = Tally {
    waited: 0,
    posted: 0,
    bytes_out: 0,
    bytes_in: 0,
    wait: Duration::ZERO,
    worker: Duration::ZERO,
};

impl Tally {
    fn add(&mut self, t: &Tally) {
        self.waited += t.waited;
        self.posted += t.posted;
        self.bytes_out += t.bytes_out;
        self.bytes_in += t.bytes_in;
        self.wait += t.wait;
        self.worker += t.worker;
    }
}

thread_local! {
    /// How deep the thread is in driver exports (only the outermost is counted).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static TALLY: Cell<Tally> = const { Cell::new(NO_TALLY) };
}

#[derive(Default)]
struct CallStats {
    calls: u64,
    time: Duration,
    max: Duration,
    tally: Tally,
}

struct Event {
    name: &'static str,
    /// Driver call, or an op the thread waited for.
    wire: bool,
    tid: i32,
    start: Duration,
    dur: Duration,
    tally: Tally,
}

struct Recorded {
    calls: HashMap<&'static str, CallStats>,
    ops: HashMap<u16, Tally>,
    events: Vec<Event>,
    dropped_events: u64,
    /// Time on the connection outside any driver call (the library's own threads).
    outside: Tally,
}

pub struct Profile {
    started: Instant,
    summary_to: Option<String>,
    trace_to: Option<String>,
    max_events: usize,
    recorded: Mutex<Recorded>,
}

impl Profile {
    fn new(summary: Option<String>, trace: Option<String>) -> Profile {
        let max_events = std::env::var("VMCUDA_PROFILE_EVENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_EVENTS);
        Profile {
            started: Instant::now(),
            summary_to: summary,
            trace_to: trace,
            max_events: max_events.min(DEFAULT_MAX_EVENTS * 16),
            recorded: Mutex::new(Recorded {
                calls: HashMap::new(),
                ops: HashMap::new(),
                events: Vec::new(),
                dropped_events: 0,
                outside: NO_TALLY,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keeps_events(&self) -> bool {
        self.trace_to.is_some()
    }

    /// Run driver export `name`'s body, counting it if it is the thread's outermost.
    pub fn call<T>(&self, name: &'static str, body: impl FnOnce() -> T) -> T {
        let depth = DEPTH.with(|d| {
            let v = d.get();
            d.set(v + 1);
            v
        });
        if depth > 0 {
            let r = body();
            DEPTH.with(|d| d.set(d.get() - 1));
            return r;
        }
        let before = TALLY.with(|t| t.replace(NO_TALLY));
        let start = Instant::now();
        let r = body();
        let dur = start.elapsed();
        let tally = TALLY.with(|t| t.replace(before));
        DEPTH.with(|d| d.set(0));
        let mut rec = self.lock();
        let stats = rec.calls.entry(name).or_default();
        stats.calls += 1;
        stats.time += dur;
        stats.max = stats.max.max(dur);
        stats.tally.add(&tally);
        if self.keeps_events() {
            self.push_event(
                &mut rec,
                Event {
                    name,
                    wire: false,
                    tid: tid(),
                    start: start - self.started,
                    dur,
                    tally,
                },
            );
        }
        r
    }

    fn push_event(&self, rec: &mut Recorded, e: Event) {
        if rec.events.len() < self.max_events {
            rec.events.push(e);
        } else {
            rec.dropped_events += 1;
        }
    }

    /// A request `op` that the thread waited for: `wait` blocked in all, `worker` of it
    /// the worker's (from the reply).
    pub fn waited(
        &self,
        op: Op,
        start: Instant,
        wait: Duration,
        worker: Duration,
        bytes_out: u64,
        bytes_in: u64,
    ) {
        let one = Tally {
            waited: 1,
            posted: 0,
            bytes_out,
            bytes_in,
            wait,
            worker,
        };
        let mut rec = self.count(op, &one);
        if self.keeps_events() {
            self.push_event(
                &mut rec,
                Event {
                    name: op.name(),
                    wire: true,
                    tid: tid(),
                    start: start.saturating_duration_since(self.started),
                    dur: wait,
                    tally: one,
                },
            );
        }
    }

    /// A request `op` posted without a reply.
    pub fn posted(&self, op: Op, bytes_out: u64) {
        let one = Tally {
            posted: 1,
            bytes_out,
            ..NO_TALLY
        };
        drop(self.count(op, &one));
    }

    /// Count `one` request of `op`: for its op, and for the thread's driver call if it
    /// is in one (else as the library's own traffic). The records, still locked.
    fn count(&self, op: Op, one: &Tally) -> std::sync::MutexGuard<'_, Recorded> {
        let in_call = DEPTH.with(Cell::get) > 0;
        if in_call {
            TALLY.with(|t| {
                let mut v = t.get();
                v.add(one);
                t.set(v);
            });
        }
        let mut rec = self.lock();
        rec.ops.entry(op.code()).or_default().add(one);
        if !in_call {
            rec.outside.add(one);
        }
        rec
    }

    fn write(&self) {
        let rec = self.lock();
        let elapsed = self.started.elapsed();
        let pid = std::process::id();
        if let Some(to) = &self.summary_to {
            let text = summary(&rec, elapsed, pid);
            if matches!(to.as_str(), "1" | "summary" | "stderr") {
                eprint!("{text}");
            } else if let Err(e) = std::fs::write(expand(to, pid), text) {
                eprintln!("vmcuda: VMCUDA_PROFILE: cannot write {to}: {e}");
            }
        }
        if let Some(to) = &self.trace_to {
            let path = expand(to, pid);
            if let Err(e) = std::fs::write(&path, trace_json(&rec, pid)) {
                eprintln!("vmcuda: VMCUDA_PROFILE_TRACE: cannot write {path}: {e}");
            }
        }
    }
}

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

fn expand(path: &str, pid: u32) -> String {
    path.replace("%p", &pid.to_string())
}

extern "C" fn write_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Some(p)) = PROFILE.get() {
            p.write();
        }
    });
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn kib(b: u64) -> f64 {
    b as f64 / 1024.0
}

/// The summary table: driver calls by total time, then ops on the connection.
fn summary(rec: &Recorded, elapsed: Duration, pid: u32) -> String {
    let mut out = String::new();
    let mut all = NO_TALLY;
    let mut in_calls = Duration::ZERO;
    let mut calls = 0;
    for s in rec.calls.values() {
        calls += s.calls;
        in_calls += s.time;
        all.add(&s.tally);
    }
    let _ = writeln!(
        out,
        "vmcuda profile, pid {pid}: {:.1} ms from the first driver call to exit; {calls} driver calls took {:.1} ms, \
         {:.1} ms of it blocked on {} round trips to the host ({:.1} ms in the worker), {} requests posted",
        ms(elapsed),
        ms(in_calls),
        ms(all.wait),
        all.waited,
        ms(all.worker),
        all.posted,
    );
    if rec.outside.waited + rec.outside.posted > 0 {
        let _ = writeln!(
            out,
            "  outside driver calls (the library's own threads): {} round trips, {:.1} ms blocked, {} posted",
            rec.outside.waited,
            ms(rec.outside.wait),
            rec.outside.posted
        );
    }
    let _ = writeln!(
        out,
        "{:<40} {:>8} {:>10} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "driver call",
        "calls",
        "total ms",
        "mean us",
        "max us",
        "waited",
        "posted",
        "blocked ms",
        "worker ms",
        "KiB out",
        "KiB in"
    );
    let mut rows: Vec<_> = rec.calls.iter().collect();
    rows.sort_by(|a, b| b.1.time.cmp(&a.1.time).then(a.0.cmp(b.0)));
    for (name, s) in rows {
        let _ = writeln!(
            out,
            "{:<40} {:>8} {:>10.3} {:>9.2} {:>9.1} {:>8} {:>8} {:>10.3} {:>10.3} {:>10.1} {:>10.1}",
            name,
            s.calls,
            ms(s.time),
            us(s.time) / s.calls as f64,
            us(s.max),
            s.tally.waited,
            s.tally.posted,
            ms(s.tally.wait),
            ms(s.tally.worker),
            kib(s.tally.bytes_out),
            kib(s.tally.bytes_in),
        );
    }
    let _ = writeln!(
        out,
        "{:<40} {:>8} {:>8} {:>12} {:>14} {:>12} {:>10} {:>10}",
        "op on the connection",
        "waited",
        "posted",
        "mean rtt us",
        "mean worker us",
        "mean rest us",
        "KiB out",
        "KiB in"
    );
    let mut ops: Vec<_> = rec.ops.iter().collect();
    ops.sort_by(|a, b| b.1.wait.cmp(&a.1.wait).then(b.1.posted.cmp(&a.1.posted)));
    for (code, t) in ops {
        let per = |d: Duration| {
            if t.waited == 0 {
                0.0
            } else {
                us(d) / t.waited as f64
            }
        };
        let _ = writeln!(
            out,
            "{:<40} {:>8} {:>8} {:>12.2} {:>14.2} {:>12.2} {:>10.1} {:>10.1}",
            Op::from_code(*code).map_or("unknown", Op::name),
            t.waited,
            t.posted,
            per(t.wait),
            per(t.worker),
            per(t.wait.saturating_sub(t.worker)),
            kib(t.bytes_out),
            kib(t.bytes_in),
        );
    }
    if rec.dropped_events > 0 {
        let _ = writeln!(
            out,
            "  the timeline kept the first {} events and dropped {} (VMCUDA_PROFILE_EVENTS)",
            rec.events.len(),
            rec.dropped_events
        );
    }
    out
}

/// Chrome trace JSON ("X" complete events, microseconds): driver calls, and within
/// them the round trips each waited for, on the thread that made them.
fn trace_json(rec: &Recorded, pid: u32) -> String {
    let events: Vec<serde_json::Value> = rec
        .events
        .iter()
        .map(|e| {
            let args = if e.wire {
                serde_json::json!({
                    "worker_us": us(e.tally.worker),
                    "rest_us": us(e.dur.saturating_sub(e.tally.worker)),
                    "bytes_out": e.tally.bytes_out,
                    "bytes_in": e.tally.bytes_in,
                })
            } else {
                serde_json::json!({
                    "round_trips": e.tally.waited,
                    "posted": e.tally.posted,
                    "blocked_us": us(e.tally.wait),
                    "worker_us": us(e.tally.worker),
                    "bytes_out": e.tally.bytes_out,
                    "bytes_in": e.tally.bytes_in,
                })
            };
            serde_json::json!({
                "name": if e.wire { format!("host: {}", e.name) } else { e.name.to_string() },
                "cat": if e.wire { "round trip" } else { "driver" },
                "ph": "X",
                "ts": us(e.start),
                "dur": us(e.dur),
                "pid": pid,
                "tid": e.tid,
                "args": args,
            })
        })
        .collect();
    serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": { "source": "vmcuda guest profile", "dropped_events": rec.dropped_events },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(trace: bool) -> Profile {
        Profile::new(Some("1".into()), trace.then(|| "t.json".into()))
    }

    #[test]
    fn round_trips_count_toward_the_outermost_call_only() {
        let p = profile(true);
        let t0 = Instant::now();
        p.call("cuOuter", || {
            p.call("cuInner", || {
                p.waited(
                    Op::StreamSynchronize,
                    t0,
                    Duration::from_micros(30),
                    Duration::from_micros(10),
                    64,
                    8,
                );
            });
            p.posted(Op::LaunchKernel, 200);
        });
        let rec = p.lock();
        assert!(!rec.calls.contains_key("cuInner"));
        let outer = &rec.calls["cuOuter"];
        assert_eq!(outer.calls, 1);
        assert_eq!(outer.tally.waited, 1);
        assert_eq!(outer.tally.posted, 1);
        assert_eq!(outer.tally.bytes_out, 264);
        assert_eq!(outer.tally.worker, Duration::from_micros(10));
        assert_eq!(rec.ops[&Op::StreamSynchronize.code()].waited, 1);
        assert_eq!(rec.ops[&Op::LaunchKernel.code()].posted, 1);
        assert_eq!(rec.outside.waited, 0);
        // The call and its round trip, both on the timeline.
        assert_eq!(rec.events.len(), 2);
    }

    #[test]
    fn traffic_outside_a_call_is_counted_apart() {
        let p = profile(false);
        p.posted(Op::LaunchKernel, 10);
        let rec = p.lock();
        assert_eq!(rec.outside.posted, 1);
        assert!(rec.events.is_empty(), "no timeline asked for");
    }

    #[test]
    fn summary_and_trace_name_what_was_counted() {
        let p = profile(true);
        p.call("cuCtxSynchronize", || {
            p.waited(
                Op::DeviceSynchronize,
                Instant::now(),
                Duration::from_micros(50),
                Duration::from_micros(20),
                40,
                0,
            )
        });
        let rec = p.lock();
        let text = summary(&rec, Duration::from_millis(1), 7);
        assert!(text.contains("cuCtxSynchronize"), "{text}");
        assert!(text.contains(Op::DeviceSynchronize.name()), "{text}");
        assert!(text.contains("1 round trips"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&trace_json(&rec, 7)).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 2);
        let wire = events.iter().find(|e| e["cat"] == "round trip").unwrap();
        assert_eq!(wire["args"]["worker_us"], 20.0);
        assert_eq!(wire["ph"], "X");
    }

    #[test]
    fn the_timeline_is_bounded() {
        let mut p = profile(true);
        p.max_events = 3;
        for _ in 0..5 {
            p.call("cuLaunchKernel", || ());
        }
        let rec = p.lock();
        assert_eq!(rec.events.len(), 3);
        assert_eq!(rec.dropped_events, 2);
        assert_eq!(rec.calls["cuLaunchKernel"].calls, 5);
    }
}
