//! The real host side of a guest connection: one `vmcuda-host worker` process per
//! connection, started the daemon's way (`vmcuda_host::spawn`, shared with the
//! daemon's listeners): one end of a fresh `UnixStream::pair()` is the worker's stdin,
//! stdout is null, and its stderr comes back to us on a pipe, passed on to our log
//! under the VM's limit, all its connections together (the same limit as the daemon's
//! per VM, `vmcuda_host::spawn::WorkerLogs`). We keep the other end of the socket,
//! non-blocking, registered edge-triggered with the device's stream epoll under the
//! connection id. The worker itself takes its limits from the configuration, as any
//! worker does: at admission its VM's `host_memory`, counted in the session and, as
//! the kernel's cap, its data segment (`RLIMIT_DATA`).
//!
//! Closing our end is how a connection ends: the worker reads end of input, frees what
//! the guest held (GPU memory included) and exits. Every worker is waited for by a small
//! reaper thread, so none is left a zombie; [`ChildTracker::wait_all`] lets `main` wait
//! for the last ones on the way out.
//!
//! A connection from a privileged guest source port (below 1024: only root in the guest
//! can bind one) is also given the guest's RAM regions, explicitly: each region's file
//! as descriptor 3, 4, ... and `--guest-memory FD:GPA:LEN:OFFSET` naming it, so that the
//! worker can copy straight between the GPU and guest pages the guest names by
//! guest-physical address (see docs/security.md). Other connections get none. Every
//! worker also gets a socket to this device's CUDA IPC registry (the device serves one
//! VM: its workers share one registry, docs/ipc.md), as the next descriptor, named by
//! `--ipc-registry N`.
//!
//! The worker inherits nothing else of ours. This matters here: the vhost-user library
//! receives guest RAM and eventfds as file descriptors without close-on-exec, and a
//! worker must not hold (or be able to map) the whole guest's memory by accident. So the
//! child marks every descriptor above stderr close-on-exec just before `exec`.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tracing::{error, info, warn, Span};
use vmcuda_host::daemon::TransportKind;
use vmcuda_host::ipc::Registry;
use vmcuda_host::policy::{Caller, Policy};
use vmcuda_host::spawn::{self, WorkerLaunch, WorkerLogs};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use crate::muxer::{ConnId, Connector, GuestRamRegion, HostStream, FIRST_UNPRIVILEGED_PORT};

/// Which executor the workers use (`vmcuda-host worker --executor`).
pub use vmcuda_host::daemon::ExecutorChoice;

/// How to start a worker.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    pub host_bin: PathBuf,
    pub executor: ExecutorChoice,
    pub launch_log: Option<PathBuf>,
    /// The VM's name: workers admit its guests by it (`--caller vm:NAME`).
    pub vm_name: String,
    /// The host configuration workers admit by (`None`: vmcuda-host's default).
    pub config: Option<PathBuf>,
}

impl WorkerCommand {
    /// `<host-bin> worker --executor <e> --transport unix --connection-id <id>
    /// --caller vm:<name> [--launch-log <path>] [--config <path>]`, as the daemon's
    /// workers start (`vmcuda_host::spawn::WorkerLaunch`). The VM is named by this
    /// device, which only its VMM can reach, never by the guest.
    pub fn command(&self, id: ConnId) -> Command {
        WorkerLaunch {
            exe: &self.host_bin,
            executor: self.executor,
            transport: TransportKind::Unix,
            connection_id: id,
            caller: &Caller::Vm(self.vm_name.clone()),
            launch_log: self.launch_log.as_deref(),
            config: self.config.as_deref(),
        }
        .command()
    }
}

/// Spawn `cmd` the daemon's way (`vmcuda_host::spawn::start`): `conn` as its stdin,
/// stdout null, stderr passed on to `logs` under the limit of the VM `vm`; and
/// `give[i]` as descriptor `3 + i`, and no other descriptor of ours. The caller's copy
/// of `conn` is gone once `cmd` is dropped.
pub fn spawn_on_socket(
    cmd: &mut Command,
    conn: OwnedFd,
    give: &[BorrowedFd<'_>],
    logs: &Arc<WorkerLogs>,
    vm: &str,
) -> io::Result<Child> {
    // Copies numbered above every target (3 + i), so that placing one never overwrites
    // another; close-on-exec, so they never reach the worker themselves.
    let first_free = 3 + give.len() as RawFd;
    let copies = give
        .iter()
        .map(|fd| {
            // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we hold; the new one is
            // owned by the OwnedFd made from it.
            let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, first_free) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor nobody else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(raw) })
        })
        .collect::<io::Result<Vec<OwnedFd>>>()?;
    let sources: Vec<RawFd> = copies.iter().map(|c| c.as_raw_fd()).collect();
    let started = spawn::start(cmd, conn, logs, spawn::Whose::Vm(vm), |cmd| {
        // SAFETY: the hook runs in the forked child before exec (after its stdio is
        // in place) and only makes raw close_range/fcntl/dup2 system calls, which are
        // async-signal-safe, allocate nothing and touch no state shared with the
        // parent (`sources` is only read).
        unsafe {
            cmd.pre_exec(move || {
                close_inherited_fds_on_exec()?;
                for (i, src) in sources.iter().enumerate() {
                    // dup2 leaves the new descriptor inheritable.
                    if libc::dup2(*src, 3 + i as RawFd) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        cmd.spawn()
    });
    drop(copies);
    started.map(|s| s.child)
}

/// Mark every descriptor above stderr close-on-exec (runs in the child, before exec).
fn close_inherited_fds_on_exec() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes descriptor flags of this
    // (child) process; it takes plain integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // Kernels before 5.11: walk the descriptor table instead.
    for fd in 3..65536 {
        // SAFETY: F_GETFD/F_SETFD on an integer descriptor only reads and sets its
        // flags; a descriptor that is not open answers EBADF, which is ignored.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// Counts live workers and waits for them, one small thread each.
#[derive(Clone, Default)]
pub struct ChildTracker {
    live: Arc<(Mutex<usize>, Condvar)>,
    /// Children whose reaper thread could not be started, reaped by polling.
    stragglers: Arc<Mutex<Vec<Child>>>,
}

impl ChildTracker {
    pub fn new() -> ChildTracker {
        ChildTracker::default()
    }

    /// Workers started and not yet reaped.
    pub fn live(&self) -> usize {
        *lock(&self.live.0)
    }

    /// Reap `child` when it exits, logging how it ended.
    pub fn watch(&self, child: Child, id: ConnId, span: Span) {
        self.poll_stragglers();
        *lock(&self.live.0) += 1;
        let slot = Arc::new(Mutex::new(Some(child)));
        let thread_slot = slot.clone();
        let live = self.live.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("reap-{id}"))
            .stack_size(128 * 1024)
            .spawn(move || {
                let Some(mut child) = lock(&thread_slot).take() else {
                    return;
                };
                let pid = child.id();
                let status = child.wait();
                span.in_scope(|| match status {
                    Ok(s) if s.success() => info!(connection = id, pid, "worker finished"),
                    Ok(s) => warn!(connection = id, pid, status = %s, "worker ended abnormally; only its connection is affected"),
                    Err(e) => error!(connection = id, pid, "cannot wait for worker: {e}"),
                });
                let (count, cv) = &*live;
                *lock(count) -= 1;
                cv.notify_all();
            });
        if let Err(e) = spawned {
            warn!(
                connection = id,
                "no reaper thread ({e}); will poll for the worker"
            );
            if let Some(child) = lock(&slot).take() {
                lock(&self.stragglers).push(child);
            }
        }
    }

    fn poll_stragglers(&self) {
        let mut stragglers = lock(&self.stragglers);
        let before = stragglers.len();
        stragglers.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
        let reaped = before - stragglers.len();
        if reaped > 0 {
            let (count, cv) = &*self.live;
            let mut n = lock(count);
            *n = n.saturating_sub(reaped);
            cv.notify_all();
        }
    }

    /// Wait up to `timeout` for every worker to exit; returns how many are left.
    pub fn wait_all(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_stragglers();
            let (count, cv) = &*self.live;
            let n = lock(count);
            let now = Instant::now();
            if *n == 0 || now >= deadline {
                return *n;
            }
            // Short waits so stragglers get polled too.
            let step = (deadline - now).min(Duration::from_millis(100));
            drop(cv.wait_timeout(n, step).unwrap_or_else(|e| e.into_inner()));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a worker for every accepted connection.
pub struct WorkerConnector {
    cmd: WorkerCommand,
    epoll: Arc<Epoll>,
    children: ChildTracker,
    span: Span,
    /// The guest's RAM, for privileged guest connections.
    guest_ram: Vec<GuestRamRegion>,
    /// Where the workers' log lines go, under the VM's limit.
    logs: Arc<WorkerLogs>,
    /// The VM's registry of CUDA IPC exports: this device serves one VM, so its
    /// workers share one (vmcuda_host::ipc); None with `[ipc] max_exports = 0`.
    ipc: Option<Arc<Registry>>,
}

impl WorkerConnector {
    /// `epoll` is the device's stream epoll; `span` carries the VM's name and CID into
    /// the reaper threads' logs.
    pub fn new(
        cmd: WorkerCommand,
        epoll: Arc<Epoll>,
        children: ChildTracker,
        span: Span,
    ) -> WorkerConnector {
        let max_exports = Policy::load(cmd.config.as_deref())
            .map_or(vmcuda_host::ipc::DEFAULT_MAX_EXPORTS, |p| {
                p.config.ipc.max_exports()
            });
        WorkerConnector {
            cmd,
            epoll,
            children,
            span,
            guest_ram: Vec::new(),
            logs: WorkerLogs::host(),
            ipc: (max_exports > 0).then(|| Arc::new(Registry::new(max_exports))),
        }
    }

    /// Pass the workers' log lines on to `logs` instead of this process's stderr.
    pub fn with_logs(mut self, logs: Arc<WorkerLogs>) -> WorkerConnector {
        self.logs = logs;
        self
    }

    /// The guest RAM a worker for a connection from `guest_port` is given: all of it
    /// for a privileged port, none otherwise.
    fn guest_ram_for(&self, guest_port: u32) -> &[GuestRamRegion] {
        if guest_port < FIRST_UNPRIVILEGED_PORT {
            &self.guest_ram
        } else {
            &[]
        }
    }
}

impl Connector for WorkerConnector {
    type Stream = WorkerStream;

    fn guest_memory_changed(&mut self, regions: Vec<GuestRamRegion>) {
        self.guest_ram = regions;
    }

    fn connect(&mut self, id: ConnId, guest_port: u32) -> io::Result<WorkerStream> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let ram = self.guest_ram_for(guest_port);
        let child = {
            let mut cmd = self.cmd.command(id);
            for (i, r) in ram.iter().enumerate() {
                cmd.arg("--guest-memory").arg(format!(
                    "{}:{:#x}:{:#x}:{:#x}",
                    3 + i,
                    r.gpa,
                    r.len,
                    r.offset
                ));
            }
            let mut give: Vec<BorrowedFd<'_>> = ram.iter().map(|r| r.file.as_fd()).collect();
            // The IPC registry's socket after the guest RAM, named on the command line.
            let registry = match &self.ipc {
                Some(_) => Some(registry_pair()?),
                None => None,
            };
            if let Some((_, worker_end)) = &registry {
                cmd.arg("--ipc-registry").arg((3 + give.len()).to_string());
                give.push(worker_end.as_fd());
            }
            let child = spawn_on_socket(
                &mut cmd,
                OwnedFd::from(theirs),
                &give,
                &self.logs,
                &self.cmd.vm_name,
            )?;
            if let (Some(registry), Some((ours, _))) = (&self.ipc, registry) {
                let (registry, vm) = (registry.clone(), Arc::new(std::sync::OnceLock::new()));
                // Named by this device, which only the VM's own VMM reaches.
                let _ = vm.set(self.cmd.vm_name.clone());
                std::thread::spawn(move || registry.serve_worker(UnixStream::from(ours), id, vm));
            }
            child
            // `cmd` drops here with our copy of the worker's end.
        };
        info!(
            connection = id,
            guest_port,
            pid = child.id(),
            guest_memory = !ram.is_empty(),
            "worker started"
        );
        self.children.watch(child, id, self.span.clone());
        let interest =
            EventSet::IN | EventSet::OUT | EventSet::READ_HANG_UP | EventSet::EDGE_TRIGGERED;
        // On failure `ours` drops: the worker sees end of input and exits.
        self.epoll.ctl(
            ControlOperation::Add,
            ours.as_raw_fd(),
            EpollEvent::new(interest, id),
        )?;
        Ok(WorkerStream {
            sock: ours,
            epoll: self.epoll.clone(),
        })
    }
}

/// A socket pair of records for a worker's IPC registry link: (ours, the worker's).
fn registry_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two fresh descriptors into the array, a local.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made for us and nobody else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Our end of a worker's stdin socket.
pub struct WorkerStream {
    sock: UnixStream,
    epoll: Arc<Epoll>,
}

impl HostStream for WorkerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.sock).read(buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&self.sock).write(buf)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.sock.shutdown(Shutdown::Write)
    }
}

impl Drop for WorkerStream {
    fn drop(&mut self) {
        let _ = self.epoll.ctl(
            ControlOperation::Delete,
            self.sock.as_raw_fd(),
            EpollEvent::default(),
        );
        // The socket closes right after: the worker sees end of input.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd};

    #[test]
    fn worker_command_line_matches_the_hidden_subcommand() {
        let cmd = WorkerCommand {
            host_bin: "/opt/vmcuda-host".into(),
            executor: ExecutorChoice::HostMemory,
            launch_log: Some("/tmp/launches.jsonl".into()),
            vm_name: "vm7".into(),
            config: Some("/etc/vmcuda/host.toml".into()),
        }
        .command(42);
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(cmd.get_program(), "/opt/vmcuda-host");
        assert_eq!(
            args,
            [
                "worker",
                "--executor",
                "host-memory",
                "--transport",
                "unix",
                "--connection-id",
                "42",
                "--caller",
                "vm:vm7",
                "--launch-log",
                "/tmp/launches.jsonl",
                "--config",
                "/etc/vmcuda/host.toml"
            ]
        );
    }

    /// A descriptor we hold without close-on-exec (as the vhost-user library holds guest
    /// RAM) must not reach the worker; its socket must arrive as stdin.
    #[test]
    fn worker_gets_the_socket_as_stdin_and_nothing_else() {
        let probe = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: duplicating a valid descriptor (to a high number, clear of anything the
        // shell opens); the result is owned by `leaky` below.
        let raw = unsafe { libc::fcntl(probe.as_fd().as_raw_fd(), libc::F_DUPFD, 900) };
        assert!(raw >= 900);
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let leaky = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fcntl on a descriptor we own, reading its flags.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, 0, "the probe is inheritable");

        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "if [ -e /proc/self/fd/{raw} ]; then echo leaked >&0; else echo clean >&0; fi"
        ));
        let mut child = spawn_on_socket(
            &mut cmd,
            OwnedFd::from(theirs),
            &[],
            &WorkerLogs::host(),
            "t",
        )
        .unwrap();
        drop(cmd);
        let mut out = String::new();
        ours.read_to_string(&mut out).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(out.trim(), "clean");
        drop(leaky);
    }

    /// A directory of the test's own, and in it a stand-in for `vmcuda-host` that
    /// runs `body` (a shell script; `{d}` is the directory).
    fn fake_host(name: &str, body: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("vmcuda-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("fake-host");
        let body = body.replace("{d}", &dir.display().to_string());
        std::fs::write(&script, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        (dir, script)
    }

    /// A connector for VM `vm` whose workers are `script`.
    fn connector(
        script: PathBuf,
        vm: &str,
        epoll: Arc<Epoll>,
        children: &ChildTracker,
    ) -> WorkerConnector {
        WorkerConnector::new(
            WorkerCommand {
                host_bin: script,
                executor: ExecutorChoice::Auto,
                vm_name: vm.into(),
                config: None,
                launch_log: None,
            },
            epoll,
            children.clone(),
            Span::none(),
        )
    }

    /// Each worker gets a socket to the device's IPC registry after its guest RAM (none
    /// here: an unprivileged port), named on its command line.
    #[test]
    fn workers_get_a_registry_socket_named_on_their_command_line() {
        let (dir, script) = fake_host(
            "worker-ipc",
            "echo \"$@\" > {d}/args\n[ -S /proc/self/fd/3 ] && echo socket > {d}/fd3\nexec cat >&0\n",
        );
        let epoll = Arc::new(Epoll::new().unwrap());
        let children = ChildTracker::new();
        let mut conn = connector(script, "t", epoll, &children);
        let s = conn.connect(9, 1234).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("args").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let args = std::fs::read_to_string(dir.join("args")).unwrap();
        assert!(args.contains("--ipc-registry 3"), "{args}");
        let fd3 = std::fs::read_to_string(dir.join("fd3")).unwrap_or_default();
        assert_eq!(fd3.trim(), "socket");
        drop(s);
        children.wait_all(Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn connector_spawns_reaps_and_closing_ends_the_worker() {
        // Echo stdin back into the socket, note the arguments.
        let (dir, script) = fake_host("worker-test", "echo \"$@\" > {d}/args\nexec cat >&0\n");
        let epoll = Arc::new(Epoll::new().unwrap());
        let children = ChildTracker::new();
        let mut conn = connector(script, "t", epoll.clone(), &children);
        let mut s = conn.connect(7, 1234).unwrap();
        assert_eq!(children.live(), 1);
        let mut written = 0;
        while written < 5 {
            match s.write(&b"hello"[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        // The echo arrives and the epoll reports it under the connection id.
        let mut events = [EpollEvent::default(); 4];
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 5 && Instant::now() < deadline {
            let n = epoll.wait(100, &mut events).unwrap();
            assert!(events[..n].iter().all(|e| e.data() == 7));
            let mut buf = [0u8; 16];
            match s.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"hello");
        let args = std::fs::read_to_string(dir.join("args")).unwrap();
        assert_eq!(
            args.trim(),
            "worker --executor auto --transport unix --connection-id 7 --caller vm:t \
             --ipc-registry 3"
        );
        drop(s);
        assert_eq!(
            children.wait_all(Duration::from_secs(10)),
            0,
            "worker exited and was reaped"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The device's workers log through it, under their VM's limit, all its
    /// connections together, as the daemon's workers do: three workers flooding 300
    /// lines each get the VM's burst through, and a summary of the rest.
    #[test]
    fn the_vms_workers_log_under_one_limit() {
        let (dir, script) = fake_host(
            "worker-log",
            "i=0\nwhile [ $i -lt 300 ]; do echo \"flood $i\" >&2; i=$((i+1)); done\n",
        );
        let capture = spawn::LogCapture::default();
        let children = ChildTracker::new();
        let epoll = Arc::new(Epoll::new().unwrap());
        let mut conn = connector(script, "vm9", epoll, &children).with_logs(capture.logs());
        let streams: Vec<WorkerStream> = (1..=3)
            .map(|id| conn.connect(id, 40000 + id as u32).unwrap())
            .collect();
        assert_eq!(children.wait_all(Duration::from_secs(10)), 0);
        drop(streams);
        let summary = "lines from vm vm9 (all its connections)";
        let deadline = Instant::now() + Duration::from_secs(10);
        while !capture.text().contains(summary) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let text = capture.text();
        assert!(text.contains(summary), "{text}");
        let flood = text.lines().filter(|l| l.starts_with("flood ")).count() as u32;
        assert!(flood >= spawn::VM_LOG_BURST, "{flood} lines: {text}");
        assert!(
            flood <= spawn::VM_LOG_BURST + 15 * spawn::VM_LOG_PER_SECOND,
            "{flood} of 900 lines let through"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Only a connection from a privileged guest port (root in the guest) is given the
    /// guest's RAM, as descriptor 3 named by `--guest-memory`; any other gets none of it.
    #[test]
    fn only_privileged_guest_ports_get_the_guest_ram() {
        let (dir, script) = fake_host(
            "worker-ram",
            "echo \"$@\" >> {d}/args\nif [ -f /proc/self/fd/3 ]; then head -c 3 /proc/self/fd/3 >> {d}/ram; fi\n",
        );
        let ram =
            nix::sys::memfd::memfd_create(c"ram", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let file = std::fs::File::from(ram);
        (&file).write_all(b"RAM").unwrap();
        let epoll = Arc::new(Epoll::new().unwrap());
        let children = ChildTracker::new();
        let mut conn = connector(script, "t", epoll, &children);
        conn.guest_memory_changed(vec![GuestRamRegion {
            gpa: 0,
            len: 4096,
            file: Arc::new(file),
            offset: 0,
        }]);
        let unprivileged = conn.connect(1, 40000).unwrap();
        assert_eq!(children.wait_all(Duration::from_secs(10)), 0);
        let privileged = conn.connect(2, 1023).unwrap();
        assert_eq!(children.wait_all(Duration::from_secs(10)), 0);
        drop((unprivileged, privileged));
        let args = std::fs::read_to_string(dir.join("args")).unwrap();
        let lines: Vec<&str> = args.lines().collect();
        assert_eq!(lines.len(), 2, "{args}");
        assert!(!lines[0].contains("--guest-memory"), "{args}");
        assert!(
            lines[1].ends_with("--guest-memory 3:0x0:0x1000:0x0 --ipc-registry 4"),
            "{args}"
        );
        // The IPC registry's socket follows the guest RAM, if any.
        assert!(lines[0].ends_with("--ipc-registry 3"), "{args}");
        // The privileged worker could read the guest's RAM as descriptor 3; only it.
        assert_eq!(std::fs::read_to_string(dir.join("ram")).unwrap(), "RAM");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
