//! A jailed worker's own pid namespace, and the pid the host knows it by.
//!
//! A process enters a new pid namespace only when it is made, so the daemon makes it:
//! [`spawn_in_new_namespace`] starts the worker from a short-lived thread that first
//! unshares `CLONE_NEWPID`. That changes only the namespace of that thread's children
//! (the daemon's own and its other threads' stay as they were), so the worker it then
//! spawns is process 1 of a namespace of its own, and still the daemon's child: the
//! daemon knows it by its host pid, waits for it, and kills it (`SIGKILL` reaches a
//! namespace's first process from outside it) exactly as before.
//!
//! Inside, the worker can name, signal or trace no process but itself. The ledger and
//! the figures files still name it by its host pid ([`host_pid`]): the host's `/proc`
//! (the worker mounts no other) numbers processes as the host does, so that is where
//! it reads its own, and where every worker tells live ones.
//!
//! Process 1 of a namespace ignores every signal it has no handler for, even `SIGTERM`
//! from the host (a service manager stopping the daemon) or `SIGINT` from a terminal;
//! [`worker_started`] gives such a worker handlers that end it as those signals would
//! have, with exit status 128 + the signal.

use std::io;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sched::{unshare, CloneFlags};
use tracing::{debug, warn};

use crate::process::host_pid;

/// The signals that end a process by default and that others send to stop one.
const STOP_SIGNALS: [libc::c_int; 7] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGABRT,
];

/// Spawn `cmd` as the first process of a new pid namespace, or, where the kernel
/// refuses one (no `CAP_SYS_ADMIN`, a container or service that forbids it), as an
/// ordinary child, saying so once.
pub fn spawn_in_new_namespace(cmd: &mut Command) -> io::Result<Child> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // A thread of its own: after the unshare, its children go into the namespace
        // and it may start no more threads (the kernel refuses it), so it does this
        // one spawn and ends.
        let spawner = std::thread::Builder::new()
            .name("spawn-pidns".into())
            .spawn_scoped(scope, || {
                if let Err(e) = unshare(CloneFlags::CLONE_NEWPID) {
                    if !WARNED.swap(true, Ordering::Relaxed) {
                        warn!(
                            "workers get no pid namespace (unshare: {e}); the system call \
                             filter still keeps them from signalling or tracing others"
                        );
                    } else {
                        debug!("no pid namespace for this worker (unshare: {e})");
                    }
                }
                cmd.spawn()
            })?;
        spawner
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked")))
    })
}

/// Whether this process may make pid namespaces (tried on a thread of its own, which
/// then ends, so nothing else is changed).
pub fn namespaces_available() -> bool {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .spawn_scoped(scope, || unshare(CloneFlags::CLONE_NEWPID).is_ok())
            .is_ok_and(|t| t.join().unwrap_or(false))
    })
}

/// Whether this process is the first of a pid namespace (and so ignores signals it has
/// no handler for).
pub fn is_namespace_init() -> bool {
    std::process::id() == 1
}

/// Call first thing in a worker: learns [`host_pid`] while `/proc` is surely the
/// host's, and where the worker is its namespace's process 1, gives it handlers for
/// `STOP_SIGNALS` so that those still end it.
pub fn worker_started() {
    host_pid();
    if !is_namespace_init() {
        return;
    }
    for signal in STOP_SIGNALS {
        // SAFETY: installs a handler that only calls `_exit`, which is async-signal-safe;
        // the action struct is zeroed and then filled in full. sigaction fails only for
        // a signal that cannot be caught, which none of these is.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = end_as_signalled as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// What the default action of a stop signal would do to an ordinary process: end it
/// at once (nothing is flushed or unwound; the ledger drops a dead worker's line).
extern "C" fn end_as_signalled(signal: libc::c_int) {
    // SAFETY: `_exit` ends the process; it touches no state of ours.
    unsafe { libc::_exit(128 + signal) }
}
