use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};

use super::*;

/// A checkpointer that keeps each process's state and the calls made, and fails the
/// step it is told to.
#[derive(Default)]
struct Recorder {
    states: RefCell<HashMap<u32, ProcessState>>,
    calls: RefCell<Vec<(&'static str, u32)>>,
    fail: Option<(&'static str, u32)>,
    /// Called before each lock, with its pid.
    before_lock: Option<Box<dyn Fn(u32)>>,
    /// The GPU's free memory, when a restore is to be checked against it.
    free: Option<u64>,
}

impl Recorder {
    fn step(
        &self,
        step: &'static str,
        pid: u32,
        from: &[ProcessState],
        to: ProcessState,
    ) -> Result<(), SuspendError> {
        self.calls.borrow_mut().push((step, pid));
        if self.fail == Some((step, pid)) {
            return Err(SuspendError::Step {
                pid,
                step,
                reason: "told to fail".into(),
            });
        }
        let mut states = self.states.borrow_mut();
        let state = states.entry(pid).or_insert(ProcessState::Running);
        assert!(from.contains(state), "{step} of {pid} from {state:?}");
        *state = to;
        Ok(())
    }

    fn of(&self, pid: u32) -> ProcessState {
        *self
            .states
            .borrow()
            .get(&pid)
            .unwrap_or(&ProcessState::Running)
    }
}

impl Checkpointer for Recorder {
    fn state(&self, pid: u32) -> Result<ProcessState, SuspendError> {
        Ok(self.of(pid))
    }
    fn lock(&self, pid: u32, _timeout: Duration) -> Result<(), SuspendError> {
        if let Some(hook) = &self.before_lock {
            hook(pid);
        }
        self.step("lock", pid, &[ProcessState::Running], ProcessState::Locked)
    }
    fn checkpoint(&self, pid: u32) -> Result<(), SuspendError> {
        self.step(
            "checkpoint",
            pid,
            &[ProcessState::Locked],
            ProcessState::Checkpointed,
        )
    }
    fn restore(&self, pid: u32) -> Result<(), SuspendError> {
        self.step(
            "restore",
            pid,
            &[ProcessState::Checkpointed],
            ProcessState::Locked,
        )
    }
    fn unlock(&self, pid: u32) -> Result<(), SuspendError> {
        self.step(
            "unlock",
            pid,
            &[ProcessState::Locked],
            ProcessState::Running,
        )
    }
    /// The sleeping "workers" have no GPU memory to move; what their resident memory
    /// does meanwhile is not a checkpoint's.
    fn moves_memory(&self) -> bool {
        false
    }
    fn room_for(&self, pid: u32, bytes: u64) -> Result<(), SuspendError> {
        match self.free {
            Some(free) if free < bytes => Err(SuspendError::NoRoom {
                pid,
                need: bytes,
                free,
            }),
            _ => Ok(()),
        }
    }
}

/// A VM's ledger under a scratch state directory with two live "workers" (sleeping
/// processes) holding `device` bytes of GPU memory and `host` of host memory each.
struct Vm {
    dir: PathBuf,
    workers: Vec<Child>,
}

impl Vm {
    fn new(name: &str, device: u64, host: u64) -> Vm {
        let dir =
            std::env::temp_dir().join(format!("vmcuda-suspend-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ledger")).unwrap();
        let workers: Vec<Child> = (0..2)
            .map(|_| Command::new("sleep").arg("60").spawn().unwrap())
            .collect();
        let text: String = workers
            .iter()
            .map(|c| format!("{} {device} 0 {host}\n", c.id()))
            .collect();
        std::fs::write(
            dir.join("ledger").join(crate::ledger::file_name("vm")),
            text,
        )
        .unwrap();
        Vm { dir, workers }
    }

    fn pids(&self) -> Vec<u32> {
        self.workers.iter().map(|c| c.id()).collect()
    }

    fn suspended(&self) -> Vec<u64> {
        let ledger = VmLedger::open(&self.dir, "vm").unwrap().unwrap();
        ledger
            .workers()
            .unwrap()
            .iter()
            .map(|w| w.suspended)
            .collect()
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        for c in &mut self.workers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_vm_is_suspended_whole_its_gpu_memory_counted_as_host_memory_and_resumed() {
    let vm = Vm::new("whole", 1000, 100);
    let cp = Recorder::default();
    let report = suspend_vm(&vm.dir, "vm", 10_000, &cp, SECOND).unwrap();
    let [a, b] = vm.pids()[..] else {
        unreachable!()
    };
    assert_eq!(report.bytes(), 2000);
    assert_eq!(
        *cp.calls.borrow(),
        vec![
            ("lock", a),
            ("checkpoint", a),
            ("lock", b),
            ("checkpoint", b)
        ]
    );
    assert_eq!(vm.suspended(), vec![1000, 1000]);
    assert!(matches!(
        suspend_vm(&vm.dir, "vm", 10_000, &cp, SECOND),
        Err(SuspendError::AlreadySuspended(_))
    ));
    cp.calls.borrow_mut().clear();
    let report = resume_vm(&vm.dir, "vm", &cp).unwrap();
    assert_eq!(report.workers.len(), 2);
    assert_eq!(
        *cp.calls.borrow(),
        vec![("restore", a), ("unlock", a), ("restore", b), ("unlock", b)]
    );
    assert_eq!(vm.suspended(), vec![0, 0]);
    assert_eq!(
        (cp.of(a), cp.of(b)),
        (ProcessState::Running, ProcessState::Running)
    );
    // Nothing is suspended now: a second resume touches no worker.
    cp.calls.borrow_mut().clear();
    assert!(resume_vm(&vm.dir, "vm", &cp).unwrap().workers.is_empty());
    assert!(cp.calls.borrow().is_empty());
}

#[test]
fn a_vm_whose_gpu_memory_does_not_fit_its_host_memory_is_not_paused_at_all() {
    let vm = Vm::new("over", 1000, 100);
    let cp = Recorder::default();
    // 2 x 100 kept, 2 x 1000 to hold: 2200 is over 2100.
    match suspend_vm(&vm.dir, "vm", 2100, &cp, SECOND) {
        Err(SuspendError::OverHostMemory { need, room, .. }) => {
            assert_eq!((need, room), (2000, 1900))
        }
        other => panic!("{other:?}"),
    }
    assert!(cp.calls.borrow().is_empty(), "no worker was locked");
    assert_eq!(vm.suspended(), vec![0, 0]);
    suspend_vm(&vm.dir, "vm", 2200, &cp, SECOND).expect("exactly at the limit");
}

#[test]
fn a_failed_checkpoint_leaves_every_worker_of_the_vm_running() {
    let vm = Vm::new("fails", 1000, 0);
    let [a, b] = vm.pids()[..] else {
        unreachable!()
    };
    let cp = Recorder {
        fail: Some(("checkpoint", b)),
        ..Default::default()
    };
    assert!(matches!(
        suspend_vm(&vm.dir, "vm", u64::MAX, &cp, SECOND),
        Err(SuspendError::Step {
            step: "checkpoint",
            ..
        })
    ));
    assert_eq!(
        *cp.calls.borrow(),
        vec![
            ("lock", a),
            ("checkpoint", a),
            ("lock", b),
            ("checkpoint", b),
            ("unlock", b),
            ("restore", a),
            ("unlock", a)
        ]
    );
    assert_eq!(
        (cp.of(a), cp.of(b)),
        (ProcessState::Running, ProcessState::Running)
    );
    assert_eq!(vm.suspended(), vec![0, 0]);
}

#[test]
fn a_vm_without_workers_has_nothing_to_suspend() {
    let dir = std::env::temp_dir().join(format!("vmcuda-suspend-{}-none", std::process::id()));
    let cp = Recorder::default();
    assert!(matches!(
        suspend_vm(&dir, "nobody", u64::MAX, &cp, SECOND),
        Err(SuspendError::NoWorkers(_))
    ));
    assert!(matches!(
        resume_vm(&dir, "nobody", &cp),
        Err(SuspendError::NoWorkers(_))
    ));
}

/// A worker found locked or checkpointed without its mark (a suspend cut short) is
/// resumed too.
#[test]
fn resume_finishes_a_suspend_that_was_cut_short() {
    let vm = Vm::new("cut", 1000, 0);
    let [a, b] = vm.pids()[..] else {
        unreachable!()
    };
    let cp = Recorder::default();
    cp.states.borrow_mut().insert(a, ProcessState::Locked);
    cp.states.borrow_mut().insert(b, ProcessState::Checkpointed);
    resume_vm(&vm.dir, "vm", &cp).unwrap();
    assert_eq!(
        *cp.calls.borrow(),
        vec![("unlock", a), ("restore", b), ("unlock", b)]
    );
}

/// A worker whose guest leaves while its VM is being suspended is skipped, not a
/// failure of the whole VM (seen on the GPU: a short program's worker ended between
/// the listing and its turn).
#[test]
fn a_worker_that_ends_meanwhile_is_skipped() {
    let mut vm = Vm::new("leaves", 1000, 0);
    let [a, b] = vm.pids()[..] else {
        unreachable!()
    };
    let leaving = std::sync::Mutex::new(Some(vm.workers.remove(1)));
    let cp = Recorder {
        before_lock: Some(Box::new(move |pid| {
            if pid == a {
                if let Some(mut child) = leaving.lock().unwrap().take() {
                    child.kill().unwrap();
                    child.wait().unwrap();
                }
            }
        })),
        ..Default::default()
    };
    let report = suspend_vm(&vm.dir, "vm", u64::MAX, &cp, SECOND).unwrap();
    assert_eq!(report.workers.len(), 1);
    assert_eq!(report.workers[0].pid, a);
    assert!(!cp.calls.borrow().iter().any(|&(_, pid)| pid == b));
    assert_eq!(vm.suspended(), vec![1000]);
}

/// The double's lock holds a worker's next request before it runs, waits for the one
/// running, and lets it go on unlock.
#[test]
fn the_doubles_gate_holds_requests_until_unlocked() {
    let dir = std::env::temp_dir().join(format!("vmcuda-suspend-{}-gate", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let identity = crate::stats::Identity {
        vm: "vm".into(),
        ..Default::default()
    };
    let mut stats = crate::stats::WorkerStats::create(&dir, &identity).unwrap();
    let pid = crate::process::host_pid();
    let cp = GateCheckpointer::new(&dir);
    // A request in flight: the lock waits for it, and gives up at its timeout.
    stats.request_started();
    assert!(matches!(
        cp.lock(pid, Duration::from_millis(30)),
        Err(SuspendError::Step { step: "lock", .. })
    ));
    assert_eq!(
        cp.state(pid).unwrap(),
        ProcessState::Running,
        "released again"
    );
    stats.request_done();
    cp.lock(pid, SECOND).unwrap();
    assert_eq!(cp.state(pid).unwrap(), ProcessState::Checkpointed);
    // The operator, on a thread of its own, looks at the held request, then unlocks.
    let operator_dir = dir.clone();
    let before = WorkerGate::open(&dir, pid).unwrap().unwrap().started();
    let operator = std::thread::spawn(move || {
        let gate = WorkerGate::open(&operator_dir, pid).unwrap().unwrap();
        let deadline = Instant::now() + SECOND;
        // Unlocked in the end whatever is seen, so a failure cannot hang the test.
        while gate.started() == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let began = gate.started() == before + 1;
        std::thread::sleep(Duration::from_millis(50));
        let quiet = gate.quiet();
        GateCheckpointer::new(&operator_dir).unlock(pid).unwrap();
        (began, Instant::now(), quiet)
    });
    stats.request_started();
    let went_on = Instant::now();
    stats.request_done();
    let (began, unlocked, quiet) = operator.join().unwrap();
    assert!(began, "the held request was seen begun");
    assert!(went_on >= unlocked, "the request ran while held");
    assert!(
        quiet,
        "a request waiting on the hold leaves the worker quiet"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// On the GPU the worker's gate holds its requests before the driver is locked, is
/// let go if the driver's lock fails, and is released after the driver's unlock.
#[test]
fn the_gpus_checkpointer_holds_the_gate_around_the_drivers_lock() {
    let dir = std::env::temp_dir().join(format!("vmcuda-suspend-{}-gated", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let identity = crate::stats::Identity {
        vm: "vm".into(),
        ..Default::default()
    };
    let _stats = crate::stats::WorkerStats::create(&dir, &identity).unwrap();
    let pid = crate::process::host_pid();
    let gate = WorkerGate::open(&dir, pid).unwrap().unwrap();
    let failing = GatedCheckpointer::new(
        &dir,
        Recorder {
            fail: Some(("lock", pid)),
            ..Default::default()
        },
    );
    assert!(failing.lock(pid, SECOND).is_err());
    assert!(!gate.held(), "a failed driver lock lets the gate go");
    let cp = GatedCheckpointer::new(&dir, Recorder::default());
    cp.lock(pid, SECOND).unwrap();
    assert!(gate.held());
    cp.checkpoint(pid).unwrap();
    assert_eq!(cp.state(pid).unwrap(), ProcessState::Checkpointed);
    cp.restore(pid).unwrap();
    assert!(gate.held(), "held until unlocked");
    cp.unlock(pid).unwrap();
    assert!(!gate.held());
    assert_eq!(cp.state(pid).unwrap(), ProcessState::Running);
    // Held by the gate alone (cut short): locked, and an unlock lets it go.
    gate.hold();
    assert_eq!(cp.state(pid).unwrap(), ProcessState::Locked);
    cp.unlock(pid).unwrap();
    assert!(!gate.held());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_is_not_restored_without_room_and_is_once_there_is() {
    let vm = Vm::new("room", 1000, 100);
    let mut cp = Recorder::default();
    suspend_vm(&vm.dir, "vm", 1 << 40, &cp, SECOND).unwrap();
    cp.free = Some(999);
    match resume_vm(&vm.dir, "vm", &cp) {
        Err(SuspendError::NoRoom { need, free, .. }) => assert_eq!((need, free), (1000, 999)),
        other => panic!("{other:?}"),
    }
    // No restore was tried: the workers stay checkpointed, their memory counted.
    assert!(!cp.calls.borrow().iter().any(|(step, _)| *step == "restore"));
    assert_eq!(vm.suspended(), vec![1000, 1000]);
    cp.free = Some(1000);
    resume_vm(&vm.dir, "vm", &cp).expect("room now");
    assert_eq!(vm.suspended(), vec![0, 0]);
    assert!(vm.pids().iter().all(|p| cp.of(*p) == ProcessState::Running));
}
