//! The daemon's idle policy (`[suspend] idle_after_ms`): a VM whose workers have run
//! no request for that long is suspended, and resumed as soon as one of its workers
//! begins a request again (its guest called; the request waits in the worker until
//! the VM is back). The workers' requests are seen through their stats files
//! ([`WorkerGate`]). VMs the operator suspended are left to the operator.
//!
//! A VM whose resume fails (its GPU has no room for it: the driver's restore cannot
//! allocate) makes room: the VM idle longest among those running and quiet for a
//! quarter of `idle_after_ms` is suspended, and the resume is tried again
//! [`RETRY_EVERY`] later, for as long as its guest waits. So a host serves more VMs
//! than fit in its GPU memory at once, as long as enough of them are idle. Suspends and
//! resumes of different VMs run side by side, up to [`AT_ONCE`] (a suspend moves the
//! VM's GPU memory to host memory, seconds for a few GiB: one at a time, the policy
//! would fall behind VMs that idle briefly).
//!
//! Each suspend and resume runs as `vmcuda-host suspend` / `resume`, a process of its
//! own: the driver's checkpoint calls are made from a fresh process each time, as the
//! operator's command makes them. (Made from the daemon itself, the first resume after
//! its own checkpoint failed on the H200: `cuCheckpointProcessGetState` answered
//! `CUDA_ERROR_OPERATING_SYSTEM`.) The daemon also keeps no driver state of its own.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::stats::WorkerGate;

/// How often the workers are looked at: the most a guest's first call waits before
/// its VM's resume begins.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// How often a resume that found no room is tried again.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Suspends and resumes under way at once, at most.
pub const AT_ONCE: usize = 4;

/// What the policy knows of one VM.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Running {
        /// Requests begun, per worker, when last looked at.
        started: BTreeMap<u32, u64>,
        since: Instant,
    },
    /// Suspended by the policy: the requests begun at that moment.
    Suspended {
        started: BTreeMap<u32, u64>,
        at: Instant,
        /// A resume that failed is not tried again before this.
        retry: Option<Instant>,
    },
    /// A suspend or resume of it is under way; what it was before.
    Busy(Box<Seen>),
}

/// A suspend or resume to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    Suspend,
    Resume,
}

impl Act {
    fn command(self) -> &'static str {
        match self {
            Act::Suspend => "suspend",
            Act::Resume => "resume",
        }
    }
}

/// A suspend or resume that ended.
struct Done {
    vm: String,
    act: Act,
    result: Result<String, String>,
}

/// What suspends and resumes a VM: `vmcuda-host suspend|resume`, or a test's stand-in.
pub trait Operator: Send + Sync {
    /// Run `what` ("suspend" or "resume") on `vm`: its summary line, or why it failed.
    fn run(&self, what: &str, vm: &str) -> Result<String, String>;
}

/// The `vmcuda-host` commands, each a process of its own.
pub struct Commands {
    /// The `vmcuda-host` binary, which suspends and resumes.
    pub exe: PathBuf,
    pub state_dir: PathBuf,
    /// The daemon's configuration (the VMs' host_memory), as it was given.
    pub config: Option<PathBuf>,
    /// The workers' executor, as `suspend --executor` names it.
    pub executor: &'static str,
    pub lock_timeout: Duration,
}

impl Operator for Commands {
    /// `vmcuda-host suspend|resume VM`: its summary line, or why it failed.
    fn run(&self, what: &str, vm: &str) -> Result<String, String> {
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.arg(what)
            .arg(vm)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--executor")
            .arg(self.executor);
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        if what == "suspend" {
            cmd.arg("--lock-timeout-ms")
                .arg(self.lock_timeout.as_millis().to_string());
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let first = |b: &[u8]| {
            String::from_utf8_lossy(b)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        };
        if out.status.success() {
            Ok(first(&out.stdout))
        } else {
            Err(first(&out.stderr))
        }
    }
}

/// Each VM's workers as the census saw them: requests begun per worker, and whether
/// every one of them is between requests.
type Census = BTreeMap<String, (BTreeMap<u32, u64>, bool)>;

pub struct IdlePolicy {
    pub operator: Arc<dyn Operator>,
    pub state_dir: PathBuf,
    pub idle_after: Duration,
    /// GPU memory kept free for new guests (`[suspend] keep_free`; 0: none).
    pub keep_free: u64,
}

/// The GPU memory free now, the least of every GPU's (NVML), where NVML is there.
pub fn gpu_free() -> Option<u64> {
    crate::executor::cuda::free_memory()?.into_iter().min()
}

/// The policy's decisions, apart from the census and the commands (tested alone).
struct Decide {
    idle_after: Duration,
    seen: HashMap<String, Seen>,
    /// GPU memory kept free for new guests, and what is free now.
    keep_free: u64,
    free: Option<u64>,
}

impl Decide {
    /// Take what ended, then look at the census: the suspends and resumes to start
    /// (at most `room` of them).
    fn step(
        &mut self,
        done: Vec<Done>,
        census: &Census,
        now: Instant,
        room: usize,
    ) -> Vec<(String, Act)> {
        let mut short_of_room = 0;
        for d in done {
            let Some(Seen::Busy(before)) = self.seen.remove(&d.vm) else {
                continue;
            };
            let after = match (d.act, d.result, *before) {
                (Act::Suspend, Ok(summary), Seen::Running { started, since }) => {
                    info!(
                        vm = d.vm,
                        idle_ms = now.duration_since(since).as_millis() as u64,
                        "idle: {summary}"
                    );
                    Seen::Suspended {
                        started,
                        at: now,
                        retry: None,
                    }
                }
                (Act::Suspend, Err(e), Seen::Running { started, .. }) => {
                    // Tried again after another idle period, so said once a period at most.
                    warn!(vm = d.vm, "idle VM not suspended: {e}");
                    Seen::Running {
                        started,
                        since: now,
                    }
                }
                (Act::Resume, Ok(summary), Seen::Suspended { at, .. }) => {
                    info!(
                        vm = d.vm,
                        suspended_ms = now.duration_since(at).as_millis() as u64,
                        "its guest called: {summary}"
                    );
                    // Its workers' counts as the census has them now.
                    let started = census
                        .get(&d.vm)
                        .map(|(s, _)| s.clone())
                        .unwrap_or_default();
                    Seen::Running {
                        started,
                        since: now,
                    }
                }
                (Act::Resume, Err(e), Seen::Suspended { started, at, .. }) => {
                    warn!(vm = d.vm, "resuming the VM its guest called failed: {e}; making room, tried again in {} ms", RETRY_EVERY.as_millis());
                    short_of_room += 1;
                    Seen::Suspended {
                        started,
                        at,
                        retry: Some(now + RETRY_EVERY),
                    }
                }
                (_, _, other) => other,
            };
            self.seen.insert(d.vm, after);
        }
        self.seen.retain(|vm, _| census.contains_key(vm));
        // Resumes first: their guests wait. Suspends take what room is left, never the
        // last place while a resume is under way or waits (they can wait).
        let mut acts = Vec::new();
        for (vm, (started, _)) in census {
            if let Some(Seen::Suspended {
                started: before,
                retry,
                ..
            }) = self.seen.get(vm)
            {
                // A worker that began a request, or a new one: its guest called.
                let called = started.iter().any(|(pid, s)| before.get(pid) != Some(s));
                if called && retry.is_none_or(|r| now >= r) && acts.len() < room {
                    let s = self.seen.remove(vm).expect("just seen");
                    self.seen.insert(vm.clone(), Seen::Busy(Box::new(s)));
                    acts.push((vm.clone(), Act::Resume));
                }
            }
        }
        let resuming = self.seen.values().any(|s| {
            matches!(s, Seen::Busy(b) if matches!(**b, Seen::Suspended { .. }))
                || matches!(s, Seen::Suspended { retry: Some(_), .. })
        });
        let suspend_room = if resuming {
            room.saturating_sub(1)
        } else {
            room
        };
        for (vm, (started, quiet)) in census {
            let next = match self.seen.remove(vm) {
                None => Seen::Running {
                    started: started.clone(),
                    since: now,
                },
                Some(busy @ Seen::Busy(_)) => busy,
                Some(Seen::Running {
                    started: before,
                    since,
                }) => {
                    if &before != started || !quiet {
                        Seen::Running {
                            started: started.clone(),
                            since: now,
                        }
                    } else if now.duration_since(since) >= self.idle_after
                        && acts.len() < suspend_room
                    {
                        acts.push((vm.clone(), Act::Suspend));
                        Seen::Busy(Box::new(Seen::Running {
                            started: before,
                            since,
                        }))
                    } else {
                        Seen::Running {
                            started: before,
                            since,
                        }
                    }
                }
                // Resumed above, or waiting for its guest or its retry time.
                Some(suspended @ Seen::Suspended { .. }) => suspended,
            };
            self.seen.insert(vm.clone(), next);
        }
        // Room kept for new guests: one VM gives way at a time (what it frees shows
        // once its suspend is over).
        let suspending = self
            .seen
            .values()
            .any(|s| matches!(s, Seen::Busy(b) if matches!(**b, Seen::Running { .. })));
        if self.free.is_some_and(|f| f < self.keep_free) && !suspending {
            short_of_room += 1;
        }
        // Room for the resumes that found none: the VMs idle longest give way.
        let idle_enough = self.idle_after / 4;
        while short_of_room > 0 && acts.len() < room {
            let longest = self
                .seen
                .iter()
                .filter_map(|(vm, s)| match s {
                    Seen::Running { since, .. }
                        if now.duration_since(*since) >= idle_enough
                            && census.get(vm).is_some_and(|(_, quiet)| *quiet) =>
                    {
                        Some((*since, vm.clone()))
                    }
                    _ => None,
                })
                .min();
            let Some((_, vm)) = longest else {
                break;
            };
            info!(vm, "suspended to make room for a VM whose guest called");
            let before = self.seen.remove(&vm).expect("just found");
            self.seen.insert(vm.clone(), Seen::Busy(Box::new(before)));
            acts.push((vm, Act::Suspend));
            short_of_room -= 1;
        }
        acts
    }
}

impl IdlePolicy {
    /// Run the policy on a thread of its own, for as long as the daemon runs.
    pub fn spawn(self) -> std::io::Result<()> {
        info!(
            idle_after_ms = self.idle_after.as_millis() as u64,
            "VMs idle that long are suspended, and resumed when their guests call ([suspend])"
        );
        std::thread::Builder::new()
            .name("idle-suspend".into())
            .spawn(move || {
                let mut decide = Decide {
                    idle_after: self.idle_after,
                    seen: HashMap::new(),
                    keep_free: self.keep_free,
                    free: None,
                };
                let mut gates = HashMap::new();
                let (tx, rx) = mpsc::channel::<Done>();
                let mut running = 0usize;
                loop {
                    let done: Vec<Done> = rx.try_iter().collect();
                    running -= done.len();
                    if self.keep_free > 0 {
                        decide.free = gpu_free();
                    }
                    if let Some(census) = self.census(&mut gates) {
                        for (vm, act) in
                            decide.step(done, &census, Instant::now(), AT_ONCE - running)
                        {
                            running += 1;
                            let (op, tx) = (self.operator.clone(), tx.clone());
                            std::thread::spawn(move || {
                                let result = op.run(act.command(), &vm);
                                let _ = tx.send(Done { vm, act, result });
                            });
                        }
                    }
                    std::thread::sleep(LOOK_EVERY);
                }
            })
            .map(|_| ())
    }

    /// Every VM's workers as their gates show them.
    fn census(&self, gates: &mut HashMap<u32, WorkerGate>) -> Option<Census> {
        let census = crate::stats::census(&self.state_dir, false).ok()?;
        let live: Vec<u32> = census.guests.iter().map(|g| g.worker_pid).collect();
        gates.retain(|pid, _| live.contains(pid));
        let mut vms: Census = BTreeMap::new();
        for guest in &census.guests {
            let pid = guest.worker_pid;
            let gate = match gates.entry(pid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    match WorkerGate::open(&self.state_dir, pid) {
                        Ok(Some(gate)) => e.insert(gate),
                        _ => continue,
                    }
                }
            };
            let entry = vms
                .entry(guest.identity.vm.clone())
                .or_insert_with(|| (BTreeMap::new(), true));
            entry.0.insert(pid, gate.started());
            entry.1 &= gate.quiet();
        }
        Some(vms)
    }
}

#[cfg(test)]
mod tests;
