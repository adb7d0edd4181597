//! The load and fault driver shared by `tests/tests/load.rs` (host-memory executor)
//! and `tests/gpu/run-load.sh` (the CUDA executor, through the `load-driver` binary).
//!
//! For a bounded time it keeps N `load_guest` programs running against one daemon,
//! each with its own seed; it SIGKILLs some of them at random moments, lets others
//! crash themselves (`--crash`), and meanwhile connects raw protocol clients that
//! drop their connection after a handshake, half a frame, or half a copy. Guests that
//! end are replaced. Afterwards it checks the daemon: still alive, every worker
//! process gone, descriptors and threads back to their baseline, resident memory not
//! grown materially. Every guest that was neither killed nor crashed must have
//! printed `LOAD OK` (its own byte-for-byte checks passed).
//!
//! Randomness is a xorshift64 from one printed seed, so a failing run can be replayed
//! (timing differs, the choices do not).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use vmcuda_wire::frame::{self, FrameHeader, FLAG_REPLY};
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::{Allocated, Hello, MemAlloc, MemcpyHtoD, Op, StreamHandle};
use vmcuda_wire::transport::{ServerAddr, Stream};
use vmcuda_wire::CudaStatus;

use crate::hostile::{Hostile, HostileReport};

/// A small deterministic generator (xorshift64); no dependency needed for this.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        // Any nonzero state works; mixing keeps nearby seeds apart.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// `unix:PATH` or `tcp:HOST:PORT`.
    pub server: String,
    /// The `load_guest` program.
    pub guest: PathBuf,
    /// Directory of the guest `libcuda.so.1`.
    pub guest_lib_dir: PathBuf,
    /// Directory of NVIDIA's `libcudart.so.13`, after it on the guests' library path,
    /// when the loader would not find one.
    pub cudart_dir: Option<PathBuf>,
    /// The daemon under test.
    pub daemon_pid: u32,
    /// How long new guests are started for.
    pub seconds: f64,
    /// Guests running at once.
    pub guests: usize,
    pub seed: u64,
    pub verify_kernels: bool,
    /// Fraction of guests the driver SIGKILLs at a random moment of their run.
    pub kill_rate: f64,
    /// Fraction of guests started with `--crash` (they `_exit` mid-work themselves).
    pub crash_rate: f64,
    /// Raw protocol clients per second (connect, partial traffic, drop).
    pub raw_per_second: f64,
    /// Each guest runs for a random time in this range (seconds).
    pub guest_seconds: (f64, f64),
    /// Device memory each guest may hold at once (MiB).
    pub max_mib: u32,
    /// How long the daemon may take to reap its workers and close their descriptors.
    pub settle: Duration,
    /// Allowed growth of the daemon's resident memory (KiB).
    pub rss_slack_kib: u64,
    /// Print one line per finished guest.
    pub verbose: bool,
    /// One more guest that attacks the host meanwhile ([`crate::hostile`]).
    pub hostile: Option<Hostile>,
}

impl LoadConfig {
    pub fn new(server: String, guest: PathBuf, guest_lib_dir: PathBuf, daemon_pid: u32) -> Self {
        LoadConfig {
            server,
            guest,
            guest_lib_dir,
            cudart_dir: None,
            daemon_pid,
            seconds: 20.0,
            guests: 16,
            seed: 1,
            verify_kernels: false,
            kill_rate: 0.3,
            crash_rate: 0.1,
            raw_per_second: 4.0,
            guest_seconds: (1.0, 4.0),
            max_mib: 48,
            settle: Duration::from_secs(10),
            rss_slack_kib: 16 << 10,
            verbose: false,
            hostile: None,
        }
    }
}

/// What a daemon looks like from /proc at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcSnapshot {
    pub fds: usize,
    pub rss_kib: u64,
    pub threads: u64,
    pub workers: usize,
}

#[derive(Debug, Default)]
pub struct LoadReport {
    pub seed: u64,
    pub started: usize,
    /// Ran to the end and printed `LOAD OK`.
    pub ok: usize,
    /// SIGKILLed by the driver while running.
    pub killed: usize,
    /// Crashed themselves (`--crash`).
    pub crashed: usize,
    pub raw_clients: usize,
    /// Ops and bytes reported by the guests that printed `LOAD OK`.
    pub ops: u64,
    pub bytes: u64,
    /// The most worker processes seen at once.
    pub max_workers: usize,
    pub before: ProcSnapshot,
    pub after: ProcSnapshot,
    /// Peak resident memory of the daemon during the run (KiB).
    pub peak_rss_kib: u64,
    pub elapsed: Duration,
    pub failures: Vec<String>,
    /// What the hostile guest did, when there was one.
    pub hostile: Option<HostileReport>,
}

impl LoadReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// One line of `key=value` fields (tests/gpu/run-load.sh reads them).
    pub fn summary(&self) -> String {
        let fields: [(&str, String); 19] = [
            ("seed", self.seed.to_string()),
            ("seconds", format!("{:.1}", self.elapsed.as_secs_f64())),
            ("guests", self.started.to_string()),
            ("ok", self.ok.to_string()),
            ("killed", self.killed.to_string()),
            ("crashed", self.crashed.to_string()),
            ("raw_clients", self.raw_clients.to_string()),
            ("ops", self.ops.to_string()),
            ("bytes", self.bytes.to_string()),
            ("max_workers", self.max_workers.to_string()),
            ("fds_before", self.before.fds.to_string()),
            ("fds_after", self.after.fds.to_string()),
            ("threads_before", self.before.threads.to_string()),
            ("threads_after", self.after.threads.to_string()),
            ("rss_kib_before", self.before.rss_kib.to_string()),
            ("rss_kib_after", self.after.rss_kib.to_string()),
            ("rss_kib_peak", self.peak_rss_kib.to_string()),
            ("workers_left", self.after.workers.to_string()),
            ("failures", self.failures.len().to_string()),
        ];
        let mut fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(h) = &self.hostile {
            fields.push(format!("hostile_connections={}", h.connections));
            fields.push(format!("hostile_bad_requests={}", h.bad_requests));
            fields.push(format!("hostile_graph_nodes={}", h.graph_nodes));
            fields.push(format!("hostile_graph_refusals={}", h.graph_refusals));
        }
        format!("load {}", fields.join(" "))
    }
}

// ---------------------------------------------------------------- /proc

/// The state letter and parent pid of a process (`/proc/PID/stat`).
fn stat_of(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Alive and not a zombie.
pub fn process_alive(pid: u32) -> bool {
    matches!(stat_of(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

/// Direct children of `pid` (zombies included: an unreaped worker is a leak too).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| matches!(stat_of(p), Some((_, parent)) if parent == pid))
        .collect()
}

pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn status_field(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub fn snapshot(pid: u32) -> ProcSnapshot {
    ProcSnapshot {
        fds: fd_count(pid),
        rss_kib: status_field(pid, "VmRSS:"),
        threads: status_field(pid, "Threads:"),
        workers: children_of(pid).len(),
    }
}

// ---------------------------------------------------------------- guests

struct Running {
    child: Child,
    seed: u64,
    args: String,
    started: Instant,
    deadline: Instant,
    kill_at: Option<Instant>,
    killed: bool,
    crash: bool,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn start_guest(cfg: &LoadConfig, rng: &mut XorShift, seed: u64) -> std::io::Result<Running> {
    let (lo, hi) = cfg.guest_seconds;
    let secs = lo + (hi - lo) * rng.unit();
    let mut args = vec![
        "--seed".to_string(),
        seed.to_string(),
        "--seconds".into(),
        format!("{secs:.2}"),
        "--max-mib".into(),
        cfg.max_mib.to_string(),
    ];
    if rng.chance(0.25) {
        args.extend(["--threads".into(), "2".into()]);
    }
    if rng.chance(0.3) {
        args.push("--no-cleanup".into());
    }
    if cfg.verify_kernels {
        args.push("--verify-kernels".into());
    }
    let crash = rng.chance(cfg.crash_rate);
    if crash {
        args.push("--crash".into());
    }
    let now = Instant::now();
    let kill_at = (!crash && rng.chance(cfg.kill_rate))
        .then(|| now + Duration::from_secs_f64(0.1 + secs * rng.unit()));
    let mut library_path = cfg.guest_lib_dir.clone().into_os_string();
    if let Some(dir) = &cfg.cudart_dir {
        library_path.push(":");
        library_path.push(dir);
    }
    let mut child = Command::new(&cfg.guest)
        .args(&args)
        .env("LD_LIBRARY_PATH", library_path)
        .env("VMCUDA_SERVER", &cfg.server)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = drain(child.stdout.take().expect("piped"));
    let err = drain(child.stderr.take().expect("piped"));
    Ok(Running {
        child,
        seed,
        args: args.join(" "),
        started: now,
        // Its own time, its final checks and a loaded machine: a minute of grace.
        deadline: now + Duration::from_secs_f64(secs + 60.0),
        kill_at,
        killed: false,
        crash,
        out,
        err,
    })
}

/// A guest's `LOAD OK` line: (ops, bytes).
fn parse_ok(stdout: &str, seed: u64) -> Option<(u64, u64)> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("LOAD OK seed={seed} ")))?;
    let field = |k: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))?
            .parse()
            .ok()
    };
    Some((field("ops=")?, field("bytes=")?))
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

fn finish_guest(
    g: Running,
    status: std::process::ExitStatus,
    report: &mut LoadReport,
    verbose: bool,
) {
    use std::os::unix::process::ExitStatusExt;
    let stdout = String::from_utf8_lossy(&g.out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&g.err.join().unwrap_or_default()).into_owned();
    let took = g.started.elapsed().as_secs_f64();
    let describe = |what: &str| {
        format!(
            "guest seed={} ({}) {what} after {took:.1}s: {status}\nstdout: {}\nstderr: {}",
            g.seed,
            g.args,
            tail(&stdout, 2000),
            tail(&stderr, 2000)
        )
    };
    // A check that failed before the kill is still a failure.
    if stdout.contains("LOAD FAIL") {
        report.failures.push(describe("failed its checks"));
        return;
    }
    let outcome = if g.killed && status.signal() == Some(9) {
        report.killed += 1;
        "killed"
    } else if g.crash && status.code() == Some(99) && stdout.contains("LOAD CRASH") {
        report.crashed += 1;
        "crashed"
    } else if status.success() {
        match parse_ok(&stdout, g.seed) {
            Some((ops, bytes)) => {
                report.ok += 1;
                report.ops += ops;
                report.bytes += bytes;
                "ok"
            }
            None => {
                report.failures.push(describe("exited 0 without LOAD OK"));
                return;
            }
        }
    } else {
        report.failures.push(describe("ended abnormally"));
        return;
    };
    if verbose {
        eprintln!(
            "load: guest seed={} {outcome} after {took:.1}s ({})",
            g.seed, g.args
        );
    }
}

// ---------------------------------------------------------------- raw clients

/// Ways a raw client leaves; each must cost the daemon nothing that outlives it.
const RAW_KINDS: u64 = 7;

fn hello(s: &mut Stream) -> Result<(), String> {
    let h = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: "load-raw-client".into(),
        pid: std::process::id(),
    };
    send(
        s,
        Op::Hello,
        &postcard::to_stdvec(&h).expect("encodes"),
        &[],
    )?;
    let (status, _) = reply(s)?;
    if status != CudaStatus::Success {
        return Err(format!("hello refused: {status}"));
    }
    Ok(())
}

fn send(s: &mut Stream, op: Op, meta: &[u8], data: &[u8]) -> Result<(), String> {
    let h = FrameHeader::new(op.code(), 0, 1, meta.len(), data.len());
    frame::write_frame(s, &h, meta, data).map_err(|e| format!("send {op:?}: {e}"))
}

fn reply(s: &mut Stream) -> Result<(CudaStatus, Vec<u8>), String> {
    let (h, meta) = frame::read_head(s).map_err(|e| format!("no reply: {e}"))?;
    if !h.has(FLAG_REPLY) {
        return Err("a frame that is not a reply".into());
    }
    frame::read_data(s, &h).map_err(|e| format!("reply data: {e}"))?;
    Ok((CudaStatus(h.status.get()), meta))
}

fn alloc(s: &mut Stream, size: u64) -> Result<u64, String> {
    let meta = postcard::to_stdvec(&MemAlloc { size }).expect("encodes");
    send(s, Op::MemAlloc, &meta, &[])?;
    let (status, meta) = reply(s)?;
    if status != CudaStatus::Success {
        return Err(format!("alloc: {status}"));
    }
    let a: Allocated = postcard::from_bytes(&meta).map_err(|e| format!("alloc reply: {e}"))?;
    Ok(a.ptr)
}

/// One raw client of kind `kind`; returns an error only for what the daemon did wrong.
fn raw_client(addr: &ServerAddr, kind: u64, rng: &mut XorShift) -> Result<(), String> {
    let mut s = Stream::connect(addr, None).map_err(|e| format!("connect: {e}"))?;
    if let Stream::Unix(u) = &s {
        let _ = u.set_read_timeout(Some(Duration::from_secs(30)));
    }
    if let Stream::Tcp(t) = &s {
        let _ = t.set_read_timeout(Some(Duration::from_secs(30)));
    }
    let header_len = std::mem::size_of::<FrameHeader>();
    // A whole frame's bytes, of which a prefix is sent.
    let frame_bytes = |op: Op, meta: &[u8], data: &[u8]| {
        let mut v = Vec::new();
        let h = FrameHeader::new(op.code(), 0, 2, meta.len(), data.len());
        frame::write_frame(&mut v, &h, meta, data).expect("writes to a Vec");
        v
    };
    match kind {
        // Connect and go.
        0 => {}
        // A handshake, then go.
        1 => hello(&mut s)?,
        // Half a frame header before any handshake.
        2 => {
            let bytes = frame_bytes(Op::Hello, &[0; 16], &[]);
            let _ = s.write_all(&bytes[..header_len / 2]);
        }
        // Handshake, then half a header.
        3 => {
            hello(&mut s)?;
            let bytes = frame_bytes(Op::MemGetInfo, &[], &[]);
            let _ = s.write_all(&bytes[..1 + rng.below(header_len as u64 - 1) as usize]);
        }
        // An allocation left behind.
        4 => {
            hello(&mut s)?;
            alloc(&mut s, 1 + rng.below(8 << 20))?;
        }
        // Half a copy: the header promises a MiB, part of it arrives.
        5 => {
            hello(&mut s)?;
            let ptr = alloc(&mut s, 1 << 20)?;
            let meta = postcard::to_stdvec(&MemcpyHtoD {
                dst: ptr,
                stream: StreamHandle::LEGACY,
                is_async: false,
            })
            .expect("encodes");
            let bytes = frame_bytes(Op::MemcpyHtoD, &meta, &vec![0x5A; 1 << 20]);
            let sent = header_len + meta.len() + rng.below(1 << 20) as usize;
            let _ = s.write_all(&bytes[..sent]);
        }
        // Garbage instead of a frame.
        _ => {
            let junk: Vec<u8> = (0..64).map(|_| rng.next_u64() as u8).collect();
            let _ = s.write_all(&junk);
        }
    }
    Ok(())
}

/// Raw clients at `per_second` until `stop`; returns (count, failures).
fn raw_clients(
    addr: ServerAddr,
    per_second: f64,
    seed: u64,
    stop: Instant,
) -> JoinHandle<(usize, Vec<String>)> {
    thread::spawn(move || {
        let mut rng = XorShift::new(seed ^ 0x5241_5743);
        let mut count = 0;
        let mut failures = Vec::new();
        if per_second <= 0.0 {
            return (0, failures);
        }
        while Instant::now() < stop {
            let kind = rng.below(RAW_KINDS);
            if let Err(e) = raw_client(&addr, kind, &mut rng) {
                failures.push(format!("raw client of kind {kind}: {e}"));
            }
            count += 1;
            // Jittered pacing around the requested rate.
            let gap = (2.0 * rng.unit()) / per_second;
            thread::sleep(Duration::from_secs_f64(gap));
        }
        (count, failures)
    })
}

// ---------------------------------------------------------------- the run

/// Wait up to `within` for the daemon to have no workers and no more descriptors or
/// threads than `baseline`; returns the last snapshot.
fn settle(pid: u32, baseline: &ProcSnapshot, within: Duration) -> ProcSnapshot {
    let deadline = Instant::now() + within;
    loop {
        let now = snapshot(pid);
        let done = now.workers == 0 && now.fds <= baseline.fds && now.threads <= baseline.threads;
        if done || Instant::now() >= deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Run the load. The daemon must be idle (no guests) when this starts, since its
/// state at that moment is the baseline.
pub fn run(cfg: &LoadConfig) -> LoadReport {
    let mut report = LoadReport {
        seed: cfg.seed,
        ..Default::default()
    };
    let pid = cfg.daemon_pid;
    let begin = Instant::now();
    if !process_alive(pid) {
        report
            .failures
            .push(format!("daemon pid {pid} is not running"));
        return report;
    }
    // Against its own snapshot this only waits for the daemon to have no workers.
    report.before = settle(pid, &snapshot(pid), Duration::from_secs(5));
    if report.before.workers != 0 {
        report.failures.push(format!(
            "daemon has {} workers before the load",
            report.before.workers
        ));
    }
    report.peak_rss_kib = report.before.rss_kib;
    let addr: ServerAddr = match cfg.server.parse() {
        Ok(a) => a,
        Err(e) => {
            report.failures.push(format!("server address: {e}"));
            return report;
        }
    };

    let mut rng = XorShift::new(cfg.seed);
    let stop = begin + Duration::from_secs_f64(cfg.seconds);
    let raw = raw_clients(addr.clone(), cfg.raw_per_second, cfg.seed, stop);
    let hostile = cfg
        .hostile
        .as_ref()
        .map(|h| crate::hostile::start(addr.clone(), h, stop));
    let mut slots: Vec<Option<Running>> = (0..cfg.guests).map(|_| None).collect();
    let mut next_seed = cfg.seed.wrapping_mul(1000);
    let mut daemon_died = false;
    let mut last_probe = Instant::now() - Duration::from_secs(1);
    loop {
        let now = Instant::now();
        let starting = now < stop;
        for slot in slots.iter_mut() {
            if let Some(g) = slot.as_mut() {
                match g.child.try_wait() {
                    Ok(Some(status)) => {
                        let g = slot.take().expect("present");
                        finish_guest(g, status, &mut report, cfg.verbose);
                    }
                    Ok(None) => {
                        if g.kill_at.is_some_and(|t| now >= t) && !g.killed {
                            // SIGKILL: no chance to close anything, as when a VM dies.
                            let _ = g.child.kill();
                            g.killed = true;
                        } else if now >= g.deadline && !g.killed {
                            report.failures.push(format!(
                                "guest seed={} ({}) still running after {:.0}s: hung",
                                g.seed,
                                g.args,
                                g.started.elapsed().as_secs_f64()
                            ));
                            let _ = g.child.kill();
                            g.killed = true;
                            g.kill_at = None;
                        }
                    }
                    Err(e) => report.failures.push(format!("wait for guest: {e}")),
                }
            }
            if slot.is_none() && starting {
                next_seed += 1;
                match start_guest(cfg, &mut rng, next_seed) {
                    Ok(g) => {
                        report.started += 1;
                        *slot = Some(g);
                    }
                    Err(e) => report
                        .failures
                        .push(format!("cannot start {}: {e}", cfg.guest.display())),
                }
            }
        }
        // Probing /proc is not free on two cores; a few times a second is plenty.
        if now.duration_since(last_probe) >= Duration::from_millis(200) {
            last_probe = now;
            if !process_alive(pid) {
                daemon_died = true;
                report
                    .failures
                    .push("the daemon died during the load".into());
            } else {
                let s = snapshot(pid);
                report.max_workers = report.max_workers.max(s.workers);
                report.peak_rss_kib = report.peak_rss_kib.max(s.rss_kib);
            }
        }
        if daemon_died || (!starting && slots.iter().all(Option::is_none)) {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    // If the daemon died, stop what is left without judging it.
    for mut g in slots.iter_mut().filter_map(Option::take) {
        let _ = g.child.kill();
        let _ = g.child.wait();
    }
    report.hostile = hostile.map(|h| h.join().unwrap_or_default());
    let (raw_count, raw_failures) = raw
        .join()
        .unwrap_or((0, vec!["raw client thread panicked".into()]));
    report.raw_clients = raw_count;
    if !daemon_died {
        report.failures.extend(raw_failures);
    }
    if daemon_died {
        report.elapsed = begin.elapsed();
        return report;
    }

    // Everything has disconnected: the daemon must return to where it started.
    report.after = settle(pid, &report.before, cfg.settle);
    report.elapsed = begin.elapsed();
    if !process_alive(pid) {
        report
            .failures
            .push("the daemon died after the load".into());
        return report;
    }
    let after = report.after;
    if after.workers != 0 {
        let left: Vec<String> = children_of(pid)
            .into_iter()
            .map(|p| format!("{p} ({:?})", stat_of(p).map(|s| s.0)))
            .collect();
        report.failures.push(format!(
            "{} worker processes still there {:.0}s after the last guest: {}",
            after.workers,
            cfg.settle.as_secs_f64(),
            left.join(", ")
        ));
    }
    if after.fds != report.before.fds {
        report.failures.push(format!(
            "daemon descriptors: {} before, {} after{}",
            report.before.fds,
            after.fds,
            list_fds(pid)
        ));
    }
    if after.threads != report.before.threads {
        report.failures.push(format!(
            "daemon threads: {} before, {} after",
            report.before.threads, after.threads
        ));
    }
    if after.rss_kib > report.before.rss_kib + cfg.rss_slack_kib {
        report.failures.push(format!(
            "daemon resident memory grew from {} KiB to {} KiB (allowed {} KiB)",
            report.before.rss_kib, after.rss_kib, cfg.rss_slack_kib
        ));
    }
    if report.ok == 0 {
        report.failures.push("no guest ran to its end".into());
    }
    report
}

fn list_fds(pid: u32) -> String {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return String::new();
    };
    let targets: Vec<String> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let t = std::fs::read_link(e.path()).ok()?;
            Some(format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                t.display()
            ))
        })
        .collect();
    format!(" (now: {})", targets.join(", "))
}
