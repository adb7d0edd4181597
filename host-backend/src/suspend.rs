//! Suspending and resuming a VM's GPU work (`vmcuda-host suspend VM`, `resume VM`).
//!
//! Every worker of the VM (its VM's ledger lists them, whichever spawner started
//! them) is locked and checkpointed by a [`Checkpointer`]: on a GPU, the driver's
//! process checkpoint (`cuCheckpointProcess*`, [`driver`]),
//! which waits for the worker's CUDA calls in flight, then moves its GPU memory into
//! the worker's host memory and frees the GPU. The guest's calls meanwhile wait in the
//! worker, so its programs see a pause. Resumed, the driver puts every allocation,
//! module, stream, event and graph back at the same addresses.
//!
//! What a checkpoint holds is the VM's host memory: before a worker is locked, its GPU
//! memory is counted in the VM's ledger against `[[vm]] host_memory`
//! ([`VmLedger::mark_suspended`]), and a VM whose GPU memory does not fit is not
//! suspended at all. The figure is corrected to what the worker's resident memory
//! grew by, when that is more.
//!
//! A worker that fails part way is unlocked again and the workers already suspended
//! are resumed, so a VM is suspended whole or not at all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::ledger::{LedgerError, Mark, VmLedger, WorkerLine};
use crate::stats::WorkerGate;

/// Where a worker stands, as its [`Checkpointer`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessState {
    Running,
    /// Its CUDA calls are held; its GPU memory is still on the GPU.
    Locked,
    /// Its GPU memory is in host memory and the GPU is free of it.
    Checkpointed,
    /// The driver could not finish a checkpoint or restore.
    Failed,
}

/// What suspends one process's GPU work.
pub trait Checkpointer {
    fn state(&self, pid: u32) -> Result<ProcessState, SuspendError>;
    /// Hold the process's CUDA calls, once those in flight finish (within `timeout`).
    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), SuspendError>;
    fn checkpoint(&self, pid: u32) -> Result<(), SuspendError>;
    fn restore(&self, pid: u32) -> Result<(), SuspendError>;
    fn unlock(&self, pid: u32) -> Result<(), SuspendError>;
    /// Whether a checkpoint moves the process's GPU memory into its host memory, so
    /// that what its resident memory grows by is what the checkpoint holds.
    fn moves_memory(&self) -> bool {
        true
    }
    /// Whether the GPU has room to restore `bytes` of the process's memory: a restore
    /// the driver cannot allocate for fails, and leaves the process where no later
    /// restore succeeds (measured on the H200: `cudaErrorOperatingSystem` after it), so
    /// it is not tried without room.
    fn room_for(&self, _pid: u32, _bytes: u64) -> Result<(), SuspendError> {
        Ok(())
    }
}

#[derive(Debug, Error)]
pub enum SuspendError {
    #[error("VM {0} has no worker on this host now (nothing to suspend or resume)")]
    NoWorkers(String),
    #[error(
        "VM {vm} holds {need} bytes of GPU memory; its host_memory limit ({limit} bytes) \
         has room for {room}: raise [[vm]] host_memory to suspend it"
    )]
    OverHostMemory {
        vm: String,
        need: u64,
        room: u64,
        limit: u64,
    },
    #[error("VM {0} is suspended already")]
    AlreadySuspended(String),
    #[error("worker {pid}: {step} failed: {reason}")]
    Step {
        pid: u32,
        step: &'static str,
        reason: String,
    },
    #[error(
        "worker {pid}: no room on its GPU to restore it: {need} bytes needed, {free} free \
         (not tried: a restore without room leaves the worker unrestorable)"
    )]
    NoRoom { pid: u32, need: u64, free: u64 },
    #[error("the GPU driver's checkpoint is unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// One worker suspended or resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerReport {
    pub pid: u32,
    /// GPU memory counted as the VM's host memory while it is suspended.
    pub bytes: u64,
    /// What the worker's resident memory grew by in its checkpoint (suspend only).
    pub resident_growth: u64,
    pub elapsed: Duration,
}

/// A VM suspended or resumed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub workers: Vec<WorkerReport>,
    pub elapsed: Duration,
}

impl Report {
    pub fn bytes(&self) -> u64 {
        self.workers.iter().map(|w| w.bytes).sum()
    }

    /// One line for the operator.
    pub fn summary(&self, vm: &str, what: &str) -> String {
        let secs = self.elapsed.as_secs_f64();
        let gib = self.bytes() as f64 / (1u64 << 30) as f64;
        let rate = if secs > 0.0 { gib / secs } else { 0.0 };
        format!(
            "{what} VM {vm}: {} worker(s), {gib:.3} GiB of GPU memory, {secs:.3} s ({rate:.2} GiB/s)",
            self.workers.len()
        )
    }
}

/// What a worker holds on the GPU: the larger of its ledger's bytes (counted there
/// under a quota) and its figures' (`stats`, counted always).
fn device_bytes(line: &WorkerLine, figures: &[crate::stats::Guest]) -> u64 {
    let reported = figures
        .iter()
        .filter(|g| g.worker_pid == line.pid)
        .map(|g| g.device_memory_bytes)
        .max()
        .unwrap_or(0);
    line.device_bytes.max(reported)
}

/// A process's resident memory, in bytes (0 when it cannot be read).
fn resident(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// VM `vm`'s ledger under `state_dir` and its live workers, of which it has one at
/// least.
pub fn live_workers(
    state_dir: &Path,
    vm: &str,
) -> Result<(VmLedger, Vec<WorkerLine>), SuspendError> {
    let ledger =
        VmLedger::open(state_dir, vm)?.ok_or_else(|| SuspendError::NoWorkers(vm.into()))?;
    let workers = ledger.workers()?;
    if workers.is_empty() {
        return Err(SuspendError::NoWorkers(vm.into()));
    }
    Ok((ledger, workers))
}

/// Suspend every worker of VM `vm` (its ledger under `state_dir`), counting their GPU
/// memory against `host_limit`. All or nothing.
pub fn suspend_vm(
    state_dir: &Path,
    vm: &str,
    host_limit: u64,
    checkpointer: &dyn Checkpointer,
    lock_timeout: Duration,
) -> Result<Report, SuspendError> {
    let started = Instant::now();
    let (ledger, workers) = live_workers(state_dir, vm)?;
    if workers.iter().any(|w| w.suspended > 0) {
        return Err(SuspendError::AlreadySuspended(vm.into()));
    }
    for w in &workers {
        if checkpointer.state(w.pid)? != ProcessState::Running {
            return Err(SuspendError::AlreadySuspended(vm.into()));
        }
    }
    let figures = crate::stats::census(state_dir, false)
        .map(|c| c.guests)
        .unwrap_or_default();
    let sizes: Vec<u64> = workers.iter().map(|w| device_bytes(w, &figures)).collect();
    // Checked as a whole first, so a VM that cannot fit is not paused at all.
    let kept: u64 = workers.iter().map(|w| w.host_bytes).sum();
    let need: u64 = sizes.iter().sum();
    let room = host_limit.saturating_sub(kept);
    if need > room {
        return Err(SuspendError::OverHostMemory {
            vm: vm.into(),
            need,
            room,
            limit: host_limit,
        });
    }
    let mut done: Vec<WorkerReport> = Vec::new();
    for (w, &bytes) in workers.iter().zip(&sizes) {
        match suspend_worker(
            &ledger,
            checkpointer,
            w.pid,
            bytes,
            host_limit,
            lock_timeout,
        ) {
            Ok(Some(report)) => done.push(report),
            // Its guest left since the workers were listed: nothing of it to keep.
            Ok(None) => {}
            Err(e) => {
                // All or nothing: the workers already suspended run again.
                for r in done.iter().rev() {
                    let _ = resume_worker(&ledger, checkpointer, r.pid, r.bytes);
                }
                return Err(e);
            }
        }
    }
    Ok(Report {
        workers: done,
        elapsed: started.elapsed(),
    })
}

fn suspend_worker(
    ledger: &VmLedger,
    checkpointer: &dyn Checkpointer,
    pid: u32,
    bytes: u64,
    host_limit: u64,
    lock_timeout: Duration,
) -> Result<Option<WorkerReport>, SuspendError> {
    let started = Instant::now();
    match ledger.mark_suspended(pid, bytes, host_limit)? {
        Mark::Counted => {}
        Mark::Gone => return Ok(None),
        Mark::NoRoom => {
            // The VM's host memory grew since it was checked.
            return Err(SuspendError::Step {
                pid,
                step: "counting its GPU memory as host memory",
                reason: "the VM's host_memory has no room for it now".into(),
            });
        }
    }
    let before = resident(pid);
    // A worker that ends meanwhile (its guest left) took its memory with it: skipped.
    let gone = || !crate::ledger::alive(pid);
    if let Err(e) = checkpointer.lock(pid, lock_timeout) {
        let _ = ledger.clear_suspended(pid);
        return if gone() { Ok(None) } else { Err(e) };
    }
    if let Err(e) = checkpointer.checkpoint(pid) {
        let _ = checkpointer.unlock(pid);
        let _ = ledger.clear_suspended(pid);
        return if gone() { Ok(None) } else { Err(e) };
    }
    if gone() {
        let _ = ledger.clear_suspended(pid);
        return Ok(None);
    }
    let growth = if checkpointer.moves_memory() {
        resident(pid).saturating_sub(before)
    } else {
        0
    };
    let bytes = if growth > bytes {
        // The driver keeps more than the guest's allocations (its own state): counted
        // as it is, since it is held already.
        let _ = ledger.mark_suspended(pid, growth, u64::MAX);
        growth
    } else {
        bytes
    };
    Ok(Some(WorkerReport {
        pid,
        bytes,
        resident_growth: growth,
        elapsed: started.elapsed(),
    }))
}

fn resume_worker(
    ledger: &VmLedger,
    checkpointer: &dyn Checkpointer,
    pid: u32,
    bytes: u64,
) -> Result<WorkerReport, SuspendError> {
    let started = Instant::now();
    match checkpointer.state(pid)? {
        ProcessState::Running => {}
        ProcessState::Locked => checkpointer.unlock(pid)?,
        ProcessState::Checkpointed | ProcessState::Failed => {
            checkpointer.room_for(pid, bytes)?;
            checkpointer.restore(pid)?;
            checkpointer.unlock(pid)?;
        }
    }
    ledger.clear_suspended(pid)?;
    Ok(WorkerReport {
        pid,
        bytes,
        resident_growth: 0,
        elapsed: started.elapsed(),
    })
}

/// Resume every suspended worker of VM `vm`: each is restored and unlocked, and its
/// GPU memory stops counting as host memory. Workers the checkpointer finds locked or
/// checkpointed without a mark (a suspend cut short) are resumed too.
pub fn resume_vm(
    state_dir: &Path,
    vm: &str,
    checkpointer: &dyn Checkpointer,
) -> Result<Report, SuspendError> {
    let started = Instant::now();
    let (ledger, workers) = live_workers(state_dir, vm)?;
    let mut done = Vec::new();
    let mut first_error = None;
    for w in &workers {
        let state = checkpointer.state(w.pid)?;
        if w.suspended == 0 && state == ProcessState::Running {
            continue;
        }
        // Every worker gets its chance: one that cannot be restored does not keep
        // the others paused.
        match resume_worker(&ledger, checkpointer, w.pid, w.suspended) {
            Ok(r) => done.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Report {
        workers: done,
        elapsed: started.elapsed(),
    })
}

/// The test double's checkpointer, for workers of the host-memory executor (which has
/// no GPU memory to move). A lock holds the worker's next requests before they run,
/// once the one running is done ([`WorkerGate`]), as the driver's lock holds its CUDA
/// calls; an unlock lets them go; checkpoint and restore move nothing, and a held
/// worker is taken for a checkpointed one. So the commands, the ledger, a guest's
/// pause and the idle policy are tested without a GPU; it proves nothing of the
/// driver's checkpoint.
pub struct GateCheckpointer {
    state_dir: PathBuf,
}

impl GateCheckpointer {
    /// For the workers whose figures are under `state_dir`.
    pub fn new(state_dir: &Path) -> GateCheckpointer {
        GateCheckpointer {
            state_dir: state_dir.to_path_buf(),
        }
    }

    fn gate(&self, pid: u32, step: &'static str) -> Result<WorkerGate, SuspendError> {
        let reason = |why: String| SuspendError::Step {
            pid,
            step,
            reason: why,
        };
        match WorkerGate::open(&self.state_dir, pid) {
            Ok(Some(gate)) => Ok(gate),
            Ok(None) => Err(reason("it publishes no figures here".into())),
            Err(e) => Err(reason(e.to_string())),
        }
    }
}

impl Checkpointer for GateCheckpointer {
    fn state(&self, pid: u32) -> Result<ProcessState, SuspendError> {
        Ok(if self.gate(pid, "reading its state")?.held() {
            ProcessState::Checkpointed
        } else {
            ProcessState::Running
        })
    }

    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), SuspendError> {
        let gate = self.gate(pid, "lock")?;
        gate.hold();
        let deadline = Instant::now() + timeout;
        while !gate.quiet() {
            if Instant::now() > deadline {
                gate.release();
                return Err(SuspendError::Step {
                    pid,
                    step: "lock",
                    reason: "its request in flight did not finish in time".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn checkpoint(&self, _pid: u32) -> Result<(), SuspendError> {
        Ok(())
    }

    fn restore(&self, _pid: u32) -> Result<(), SuspendError> {
        Ok(())
    }

    fn unlock(&self, pid: u32) -> Result<(), SuspendError> {
        self.gate(pid, "unlock")?.release();
        Ok(())
    }

    fn moves_memory(&self) -> bool {
        false
    }
}

/// The GPU's checkpointer: the worker's own gate first, so that no guest request
/// runs while it is suspended, then the driver's lock and checkpoint. The driver's
/// lock alone does not hold every call: on the H200 a guest whose VM was suspended
/// while torch started got `cudaErrorDevicesUnavailable` (context calls answer that
/// in a checkpointed process instead of waiting). Resumed in the other order.
pub struct GatedCheckpointer<D> {
    gate: GateCheckpointer,
    driver: D,
}

impl<D: Checkpointer> GatedCheckpointer<D> {
    pub fn new(state_dir: &Path, driver: D) -> Self {
        GatedCheckpointer {
            gate: GateCheckpointer::new(state_dir),
            driver,
        }
    }
}

impl<D: Checkpointer> Checkpointer for GatedCheckpointer<D> {
    fn state(&self, pid: u32) -> Result<ProcessState, SuspendError> {
        Ok(match self.driver.state(pid)? {
            // Held by its gate only (a suspend or resume cut short between the two).
            ProcessState::Running if self.gate.state(pid)? != ProcessState::Running => {
                ProcessState::Locked
            }
            state => state,
        })
    }

    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), SuspendError> {
        self.gate.lock(pid, timeout)?;
        self.driver.lock(pid, timeout).inspect_err(|_| {
            let _ = self.gate.unlock(pid);
        })
    }

    fn checkpoint(&self, pid: u32) -> Result<(), SuspendError> {
        self.driver.checkpoint(pid)
    }

    fn restore(&self, pid: u32) -> Result<(), SuspendError> {
        self.driver.restore(pid)
    }

    fn unlock(&self, pid: u32) -> Result<(), SuspendError> {
        if self.driver.state(pid)? == ProcessState::Locked {
            self.driver.unlock(pid)?;
        }
        self.gate.unlock(pid)
    }

    fn moves_memory(&self) -> bool {
        self.driver.moves_memory()
    }

    fn room_for(&self, pid: u32, bytes: u64) -> Result<(), SuspendError> {
        self.driver.room_for(pid, bytes)
    }
}

pub mod driver;
pub mod idle;

#[cfg(test)]
mod tests;
