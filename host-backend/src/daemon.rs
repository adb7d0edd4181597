//! The listening daemon: accepts guest connections on Unix sockets, TCP, AF_VSOCK (a
//! kernel vhost-vsock host: QEMU/KVM with `vhost-vsock-pci`) and hybrid vsock (the
//! `PATH_PORT` Unix socket that Firecracker and cloud-hypervisor connect to for a guest
//! connection on PORT), and hands each to a fresh worker process (this same binary, `vmcuda-host worker`), with the
//! connection as the worker's stdin. A worker that crashes ends only its own guest's
//! session; the daemon logs it and goes on accepting.

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use tracing::{error, info, warn};

use crate::metrics::DAEMON;
use crate::policy::Caller;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorChoice {
    /// The CUDA executor when a GPU and driver are present, else the host-memory one.
    Auto,
    Cuda,
    HostMemory,
}

impl ExecutorChoice {
    pub fn as_arg(self) -> &'static str {
        match self {
            ExecutorChoice::Auto => "auto",
            ExecutorChoice::Cuda => "cuda",
            ExecutorChoice::HostMemory => "host-memory",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportKind {
    Unix,
    Tcp,
    Vsock,
}

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
}

impl WorkerTemplate {
    fn spawn(&self, conn: OwnedFd, transport: TransportKind, id: u64, caller: Caller) {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .arg("--executor")
            .arg(self.executor.as_arg())
            .arg("--transport")
            .arg(match transport {
                TransportKind::Unix => "unix",
                TransportKind::Tcp => "tcp",
                TransportKind::Vsock => "vsock",
            })
            .arg("--connection-id")
            .arg(id.to_string())
            .arg("--host-memory-bytes")
            .arg(self.host_memory_bytes.to_string())
            .arg("--host-memory-devices")
            .arg(self.host_memory_devices.to_string())
            .arg("--caller")
            .arg(caller.to_arg());
        if let Some(log) = &self.launch_log {
            cmd.arg("--launch-log").arg(log);
        }
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        if let Some(dir) = &self.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        if self.tls && transport == TransportKind::Tcp {
            cmd.arg("--tls");
        }
        let peer = caller;
        cmd.stdin(Stdio::from(conn))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        match cmd.spawn() {
            Ok(mut child) => {
                let pid = child.id();
                info!(connection = id, %peer, pid, "worker started");
                DAEMON.started.fetch_add(1, Ordering::Relaxed);
                DAEMON.running.fetch_add(1, Ordering::Relaxed);
                thread::spawn(move || {
                    match child.wait() {
                        Ok(status) if status.success() => {
                            info!(connection = id, pid, "worker finished")
                        }
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

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// Accept on a Unix socket forever (replacing a stale socket file).
/// Guests on it are `caller` when given (a VM's own hybrid-vsock socket), else local
/// programs.
pub fn listen_unix(
    path: &Path,
    template: Arc<WorkerTemplate>,
    caller: Option<Caller>,
) -> std::io::Result<thread::JoinHandle<()>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener = vmcuda_wire::transport::bind_unix_listener(path)?;
    info!(path = %path.display(), "listening on unix socket");
    Ok(thread::spawn(move || {
        for conn in listener.incoming() {
            match conn {
                Ok(stream) => {
                    let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                    let who = caller.clone().unwrap_or(Caller::Local {
                        pid: peer_pid(&stream),
                    });
                    template.spawn(OwnedFd::from(stream), TransportKind::Unix, id, who);
                }
                Err(e) => warn!("accept failed: {e}"),
            }
        }
    }))
}

/// Accept on TCP forever.
pub fn listen_tcp(
    addr: &str,
    template: Arc<WorkerTemplate>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)?;
    info!(addr = %listener.local_addr()?, tls = template.tls, "listening on tcp");
    Ok(thread::spawn(move || {
        for conn in listener.incoming() {
            match conn {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                    let peer = stream.peer_addr().map_or("?".into(), |a| a.to_string());
                    template.spawn(
                        OwnedFd::from(stream),
                        TransportKind::Tcp,
                        id,
                        Caller::Tcp(peer),
                    );
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
    Ok(thread::spawn(move || loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
                let caller = Caller::VsockCid(peer.cid());
                template.spawn(OwnedFd::from(stream), TransportKind::Vsock, id, caller);
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

fn peer_pid(stream: &std::os::unix::net::UnixStream) -> Option<i32> {
    use std::os::fd::AsRawFd;
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
    (rc == 0).then_some(cred.pid)
}
