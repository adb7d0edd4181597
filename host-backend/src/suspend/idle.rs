//! The daemon's idle policy (`[suspend] idle_after_ms`): a VM whose workers have run
//! no request for that long is suspended, and resumed as soon as one of its workers
//! begins a request again (its guest called; the request waits in the worker until
//! the VM is back). The workers' requests are seen through their stats files
//! ([`WorkerGate`]). VMs the operator suspended are left to the operator.
//!
//! Each suspend and resume runs as `vmcuda-host suspend` / `resume`, a process of its
//! own: the driver's checkpoint calls are made from a fresh process each time, as the
//! operator's command makes them. (Made from the daemon itself, the first resume after
//! its own checkpoint failed on the H200: `cuCheckpointProcessGetState` answered
//! `CUDA_ERROR_OPERATING_SYSTEM`.) The daemon also keeps no driver state of its own.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::stats::WorkerGate;

/// How often the workers are looked at: the most a guest's first call waits before
/// its VM's resume begins.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What the policy knows of one VM.
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
    },
}

pub struct IdlePolicy {
    /// The `vmcuda-host` binary, which suspends and resumes.
    pub exe: PathBuf,
    pub state_dir: PathBuf,
    /// The daemon's configuration (the VMs' host_memory), as it was given.
    pub config: Option<PathBuf>,
    /// The workers' executor, as `suspend --executor` names it.
    pub executor: &'static str,
    pub idle_after: Duration,
    pub lock_timeout: Duration,
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
                let mut seen = HashMap::new();
                let mut gates = HashMap::new();
                loop {
                    self.look(&mut seen, &mut gates);
                    std::thread::sleep(LOOK_EVERY);
                }
            })
            .map(|_| ())
    }

    /// One look at every VM's workers.
    fn look(&self, seen: &mut HashMap<String, Seen>, gates: &mut HashMap<u32, WorkerGate>) {
        let Ok(census) = crate::stats::census(&self.state_dir, false) else {
            return;
        };
        let mut vms: BTreeMap<String, BTreeMap<u32, (u64, bool)>> = BTreeMap::new();
        let live: Vec<u32> = census.guests.iter().map(|g| g.worker_pid).collect();
        gates.retain(|pid, _| live.contains(pid));
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
            vms.entry(guest.identity.vm.clone())
                .or_default()
                .insert(pid, (gate.started(), gate.quiet()));
        }
        seen.retain(|vm, _| vms.contains_key(vm));
        let now = Instant::now();
        for (vm, workers) in vms {
            let started: BTreeMap<u32, u64> = workers.iter().map(|(p, (s, _))| (*p, *s)).collect();
            let quiet = workers.values().all(|(_, q)| *q);
            match seen.remove(&vm) {
                None => {
                    seen.insert(
                        vm,
                        Seen::Running {
                            started,
                            since: now,
                        },
                    );
                }
                Some(Seen::Running {
                    started: before,
                    since,
                }) => {
                    if before != started || !quiet {
                        seen.insert(
                            vm,
                            Seen::Running {
                                started,
                                since: now,
                            },
                        );
                    } else if now.duration_since(since) >= self.idle_after {
                        seen.insert(vm.clone(), self.suspend(&vm, started, now, since));
                    } else {
                        seen.insert(
                            vm,
                            Seen::Running {
                                started: before,
                                since,
                            },
                        );
                    }
                }
                Some(Seen::Suspended {
                    started: before,
                    at,
                }) => {
                    // A worker that began a request, or a new one: its guest called.
                    let called = started.iter().any(|(pid, s)| before.get(pid) != Some(s));
                    if called {
                        self.resume(&vm, at);
                        seen.insert(
                            vm,
                            Seen::Running {
                                started,
                                since: Instant::now(),
                            },
                        );
                    } else {
                        seen.insert(
                            vm,
                            Seen::Suspended {
                                started: before,
                                at,
                            },
                        );
                    }
                }
            }
        }
    }

    /// `vmcuda-host suspend|resume VM`: its summary line, or why it failed.
    fn command(&self, what: &str, vm: &str) -> Result<String, String> {
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

    fn suspend(&self, vm: &str, started: BTreeMap<u32, u64>, now: Instant, since: Instant) -> Seen {
        match self.command("suspend", vm) {
            Ok(summary) => {
                info!(
                    vm,
                    idle_ms = now.duration_since(since).as_millis() as u64,
                    "idle: {summary}"
                );
                Seen::Suspended {
                    started,
                    at: Instant::now(),
                }
            }
            Err(e) => {
                // Tried again after another idle period, so said once a period at most.
                warn!(vm, "idle VM not suspended: {e}");
                Seen::Running {
                    started,
                    since: now,
                }
            }
        }
    }

    fn resume(&self, vm: &str, at: Instant) {
        match self.command("resume", vm) {
            Ok(summary) => info!(
                vm,
                suspended_ms = at.elapsed().as_millis() as u64,
                "its guest called: {summary}"
            ),
            Err(e) => warn!(vm, "resuming the VM its guest called failed: {e}"),
        }
    }
}
