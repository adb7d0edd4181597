//! The listening daemon: accepts guest connections on Unix sockets, TCP, AF_VSOCK (a
//! kernel vhost-vsock host: QEMU/KVM with `vhost-vsock-pci`) and hybrid vsock (the
//! `PATH_PORT` Unix socket that Firecracker and cloud-hypervisor connect to for a guest
//! connection on PORT), and hands each to a fresh worker process (this same binary, `vmcuda-host worker`), with the
//! connection as the worker's stdin. A worker that crashes ends only its own guest's
//! session; the daemon logs it and goes on accepting.
//!
//! Until its guest is admitted, a connection counts against its listener's
//! `[admission] max_pending`, and its source's share of it (`max_pending_per_source`:
//! a VM's CID, a TCP address, a Unix peer's uid), and must say hello within `hello_timeout_ms` (see
//! [`crate::admission`]); the worker reports both over a pipe.

use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::sys::socket;
use tracing::{error, info, warn};

use crate::admission::{self, NoPlace, Outcome, Pending, PendingSlot, CHANNEL_FD};
use crate::ipc::{Registry, REGISTRY_FD};
use crate::jail;
use crate::metrics::DAEMON;
use crate::peer::{Broker, BROKER_FD};
use crate::policy::Caller;
use crate::pre_admission;
use crate::socket_files;
use crate::source_log::Source;
use crate::spawn::{self, Started, Whose, WorkerLogs};
pub use crate::spawn::{ExecutorChoice, TransportKind};

/// What every worker is started with.
#[derive(Clone, Debug)]
pub struct WorkerTemplate {
    pub exe: PathBuf,
    pub executor: ExecutorChoice,
    pub launch_log: Option<PathBuf>,
    pub host_memory_bytes: u64,
    pub host_memory_devices: usize,
    /// The configuration file workers admit guests by (`None`: the default).
    pub config: Option<PathBuf>,
    /// Overrides the configuration's state directory.
    pub state_dir: Option<PathBuf>,
    /// TCP listeners speak TLS (`[tcp] tls_cert`): their workers handshake first, with
    /// the certificate the configuration names then. Fixed when the daemon starts, so
    /// an edited configuration cannot quietly turn a TLS listener into a plain one.
    pub tls: bool,
    /// Each listener's limits on connections not admitted yet (the daemon's only).
    pub pre_admission: PreAdmission,
    /// Start each worker in a pid namespace of its own (the jail's, decided when the
    /// daemon starts; see [`crate::jail`]).
    pub pid_namespace: bool,
    /// The peer link (`[peers]`, read when the daemon starts): each worker gets a
    /// socket to it at [`BROKER_FD`].
    pub broker: Option<Arc<Broker>>,
    /// The registry of CUDA IPC exports (`[ipc]`): each worker gets a socket to it
    /// at [`REGISTRY_FD`].
    pub ipc: Option<Arc<Registry>>,
}

/// `[admission]` as the daemon started with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreAdmission {
    pub max_pending: u32,
    pub max_pending_per_source: u32,
    pub hello_timeout: Duration,
}

impl PreAdmission {
    /// A listener's pending places.
    fn places(&self) -> Pending {
        Pending::new(self.max_pending, self.max_pending_per_source)
    }
}

impl Default for PreAdmission {
    fn default() -> Self {
        PreAdmission {
            max_pending: admission::DEFAULT_MAX_PENDING,
            max_pending_per_source: admission::default_max_pending_per_source(
                admission::DEFAULT_MAX_PENDING,
            ),
            hello_timeout: admission::DEFAULT_HELLO_TIMEOUT,
        }
    }
}

impl WorkerTemplate {
    /// Start a worker for `conn`, which holds `slot` of its listener's pending places
    /// until the guest is admitted.
    fn spawn(
        &self,
        conn: OwnedFd,
        transport: TransportKind,
        id: u64,
        caller: Caller,
        slot: PendingSlot,
    ) {
        let mut cmd = spawn::WorkerLaunch {
            exe: &self.exe,
            executor: self.executor,
            transport,
            connection_id: id,
            caller: &caller,
            launch_log: self.launch_log.as_deref(),
            config: self.config.as_deref(),
        }
        .command();
        cmd.arg("--host-memory-bytes")
            .arg(self.host_memory_bytes.to_string())
            .arg("--host-memory-devices")
            .arg(self.host_memory_devices.to_string())
            .arg("--admission-channel");
        if let Some(dir) = &self.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        if self.tls && transport == TransportKind::Tcp {
            cmd.arg("--tls");
        }
        // The admission channel: both ends close-on-exec, the write end given to the
        // worker alone as CHANNEL_FD, so no other worker started meanwhile holds it.
        let (read, write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => {
                error!(connection = id, "cannot start worker: no pipe: {e}");
                return;
            }
        };
        let write_fd = write.as_raw_fd();
        // The peer link: a socket pair, both ends close-on-exec, the worker's given to
        // it alone as BROKER_FD, the other served by the broker.
        let link = match &self.broker {
            Some(broker) => match socket::socketpair(
                socket::AddressFamily::Unix,
                socket::SockType::Stream,
                None,
                socket::SockFlag::SOCK_CLOEXEC,
            ) {
                Ok((ours, theirs)) => Some((broker.clone(), ours, theirs)),
                Err(e) => {
                    warn!(connection = id, "no peer link for this worker: {e}");
                    None
                }
            },
            None => None,
        };
        let link_fd = link.as_ref().map(|(_, _, theirs)| theirs.as_raw_fd());
        if link_fd.is_some() {
            cmd.arg("--peer-broker");
        }
        // The IPC registry: a socket pair of records (a message never arrives in
        // pieces, and descriptors ride with it), handed over like the broker's.
        let registry = match &self.ipc {
            Some(registry) => match socket::socketpair(
                socket::AddressFamily::Unix,
                socket::SockType::SeqPacket,
                None,
                socket::SockFlag::SOCK_CLOEXEC,
            ) {
                Ok((ours, theirs)) => Some((registry.clone(), ours, theirs)),
                Err(e) => {
                    warn!(connection = id, "no CUDA IPC for this worker: {e}");
                    None
                }
            },
            None => None,
        };
        let registry_fd = registry.as_ref().map(|(_, _, theirs)| theirs.as_raw_fd());
        if registry_fd.is_some() {
            cmd.arg("--ipc-registry").arg(REGISTRY_FD.to_string());
        }
        // SAFETY: between fork and exec only dup2, which is async-signal-safe, runs; it
        // reads no memory of ours. The duplicates it makes are not close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(write_fd, CHANNEL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = link_fd {
                    if libc::dup2(fd, BROKER_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(fd) = registry_fd {
                    if libc::dup2(fd, REGISTRY_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let peer = caller;
        // The worker's log comes through the daemon, under its VM's limit once the
        // worker names it, under its source's before.
        let pid_namespace = self.pid_namespace;
        let source = slot.source().clone();
        let whose = Whose::Source(source.clone());
        let spawned = spawn::start(&mut cmd, conn, &WorkerLogs::host(), whose, |cmd| {
            if pid_namespace {
                jail::spawn_in_new_namespace(cmd)
            } else {
                cmd.spawn()
            }
        });
        drop(write);
        if let (Ok(_), Some((broker, ours, theirs))) = (&spawned, link) {
            drop(theirs);
            thread::spawn(move || broker.serve_worker(UnixStream::from(ours), id));
        }
        if let (Ok(started), Some((registry, ours, theirs))) = (&spawned, registry) {
            drop(theirs);
            // The worker's VM as it reported it before admission: its exports and
            // imports are that VM's.
            let vm = started.vm.clone();
            thread::spawn(move || registry.serve_worker(UnixStream::from(ours), id, vm));
        }
        match spawned {
            Ok(Started { mut child, vm }) => {
                let pid = child.id();
                pre_admission!(&source, info, connection = id, %peer, pid, "worker started");
                DAEMON.started.fetch_add(1, Ordering::Relaxed);
                DAEMON.running.fetch_add(1, Ordering::Relaxed);
                let hello_timeout = self.pre_admission.hello_timeout;
                thread::spawn(move || {
                    let mut slot = Some(slot);
                    let outcome = admission::watch(read, hello_timeout, &vm, &mut slot, |line| {
                        pre_admission!(&source, warn, connection = id, pid, "{line}");
                    });
                    if outcome == Outcome::TimedOut {
                        // Killed, not asked: it may be stuck in a handshake.
                        let _ = child.kill();
                        DAEMON.hello_timeouts.fetch_add(1, Ordering::Relaxed);
                        pre_admission!(
                            &source,
                            info,
                            connection = id,
                            pid,
                            "no hello within {} ms; connection dropped",
                            hello_timeout.as_millis()
                        );
                    }
                    drop(slot);
                    let admitted = outcome == Outcome::Admitted;
                    match child.wait() {
                        Ok(status) if status.success() && admitted => {
                            info!(connection = id, pid, "worker finished")
                        }
                        Ok(status) if status.success() => {
                            pre_admission!(&source, info, connection = id, pid, "worker finished")
                        }
                        Ok(_) if outcome == Outcome::TimedOut => {}
                        Ok(status) => {
                            DAEMON.failed.fetch_add(1, Ordering::Relaxed);
                            warn!(connection = id, pid, %status, "worker ended abnormally; only its guest is affected")
                        }
                        Err(e) => error!(connection = id, pid, "cannot wait for worker: {e}"),
                    }
                    DAEMON.running.fetch_sub(1, Ordering::Relaxed);
                });
            }
            Err(e) => error!(connection = id, %peer, "cannot start worker: {e}"),
        }
    }
}

/// A connection its listener has no pending place for: closed at once.
fn turn_away(
    conn: impl Into<OwnedFd>,
    pending: &Pending,
    why: NoPlace,
    source: &Source,
    who: &dyn std::fmt::Display,
) {
    drop(conn.into());
    DAEMON.refused_pending.fetch_add(1, Ordering::Relaxed);
    match why {
        NoPlace::Listener => pre_admission!(source, warn, caller = %who, pending = pending.now(),
            "connection closed: this listener has [admission] max_pending connections waiting for admission"),
        NoPlace::Source => pre_admission!(source, warn, caller = %who, %source,
            "connection closed: its source has [admission] max_pending_per_source connections waiting for admission"),
    }
}

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// Accept on a Unix socket forever (replacing a stale socket file, refusing one a live
/// daemon listens on: see [`socket_files`]). Guests on it are `caller` when given (a
/// VM's own hybrid-vsock socket), else local programs. Returns the file bound, for the
/// daemon to remove when it stops.
pub fn listen_unix(
    path: &Path,
    template: Arc<WorkerTemplate>,
    caller: Option<Caller>,
) -> std::io::Result<(thread::JoinHandle<()>, socket_files::Owned)> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    socket_files::check_free(path)?;
    let listener = vmcuda_wire::transport::bind_unix_listener(path)?;
    let owned = socket_files::Owned::record(path)?;
    // At once: a stop signal from now on removes it.
    if !socket_files::remove_on_stop(&owned) {
        warn!(path = %path.display(), "too many sockets: a stop signal leaves this one behind");
    }
    info!(path = %path.display(), "listening on unix socket");
    let pending = template.pre_admission.places();
    let handle = thread::spawn(move || {
        for conn in listener.incoming() {
            match conn {
                Ok(stream) => {
                    let cred = peer_cred(&stream);
                    let who = caller.clone().unwrap_or(Caller::Local {
                        pid: cred.map(|c| c.pid),
                    });
                    let source = cred.map_or(Source::Unknown, |c| Source::Uid(c.uid));
                    let slot = match pending.enter(source.clone()) {
                        Ok(slot) => slot,
                        Err(why) => {
                            turn_away(stream, &pending, why, &source, &who);
                            continue;
                        }
                    };
                    let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                    template.spawn(OwnedFd::from(stream), TransportKind::Unix, id, who, slot);
                }
                Err(e) => warn!("accept failed: {e}"),
            }
        }
    });
    Ok((handle, owned))
}

/// Accept on TCP forever.
pub fn listen_tcp(
    addr: &str,
    template: Arc<WorkerTemplate>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)?;
    info!(addr = %listener.local_addr()?, tls = template.tls, "listening on tcp");
    let pending = template.pre_admission.places();
    Ok(thread::spawn(move || {
        for conn in listener.incoming() {
            match conn {
                Ok(stream) => {
                    let peer = stream.peer_addr().ok();
                    let source = peer.map_or(Source::Unknown, |a| Source::of_ip(a.ip()));
                    let who = Caller::Tcp(peer.map_or("?".into(), |a| a.to_string()));
                    let slot = match pending.enter(source.clone()) {
                        Ok(slot) => slot,
                        Err(why) => {
                            turn_away(stream, &pending, why, &source, &who);
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                    template.spawn(OwnedFd::from(stream), TransportKind::Tcp, id, who, slot);
                }
                Err(e) => warn!("accept failed: {e}"),
            }
        }
    }))
}

/// Accept AF_VSOCK connections on `port` forever; the caller's CID names its VM.
pub fn listen_vsock(
    port: u32,
    template: Arc<WorkerTemplate>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let listener = vsock::VsockListener::bind_with_cid_port(vsock::VMADDR_CID_ANY, port)?;
    info!(port, "listening on vsock");
    let pending = template.pre_admission.places();
    Ok(thread::spawn(move || loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                let caller = Caller::VsockCid(peer.cid());
                let source = Source::Cid(peer.cid());
                let slot = match pending.enter(source.clone()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        turn_away(stream, &pending, why, &source, &caller);
                        continue;
                    }
                };
                let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                template.spawn(
                    OwnedFd::from(stream),
                    TransportKind::Vsock,
                    id,
                    caller,
                    slot,
                );
            }
            Err(e) => {
                warn!("vsock accept failed: {e}");
                thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }))
}

/// The Unix socket a hybrid-vsock VMM connects to for guest connections on `port`:
/// `PATH_PORT`, next to the VMM's own vsock socket `PATH`.
pub fn hybrid_vsock_path(vmm_socket: &Path, port: u32) -> PathBuf {
    let mut name = vmm_socket.as_os_str().to_os_string();
    name.push(format!("_{port}"));
    PathBuf::from(name)
}

/// The Unix peer's credentials, as the kernel recorded them at its connect.
pub(crate) fn peer_cred(stream: &impl std::os::fd::AsRawFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, which is a ucred.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred)
}
