//! `vmcuda-vhost-vsock`: the vhost-user vsock device for one VM.
//!
//! Listens on the vhost-user socket, serves one frontend (QEMU) and exits with status 0
//! when it disconnects (the VM is gone; whoever starts the VM starts this again). Every
//! guest connection to the host on `--port` gets its own `vmcuda-host worker`. See the
//! crate docs (`lib.rs`) for the design and `vmm-glue/README.md` for the QEMU command line.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::Parser;
use tracing::{error, info, info_span, warn, Span};
use tracing_subscriber::EnvFilter;
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmcuda_vmm_glue::device::{VsockDevice, BACKEND_EVENT, VIRTIO_ID_VSOCK};
use vmcuda_vmm_glue::muxer::MuxerConfig;
use vmcuda_vmm_glue::worker::{ChildTracker, ExecutorChoice, WorkerCommand, WorkerConnector};
use vmm_sys_util::epoll::{Epoll, EventSet};

/// How long to wait for workers to exit after the VMM disconnected.
const WORKER_EXIT_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(
    name = "vmcuda-vhost-vsock",
    version,
    about = "vhost-user vsock device for one VM: hands each guest connection on the vmcuda port to a vmcuda-host worker"
)]
struct Cli {
    /// vhost-user socket to listen on (QEMU: -chardev socket,id=c,path=PATH
    /// -device vhost-user-vsock-pci,chardev=c).
    #[arg(long)]
    socket: PathBuf,
    /// The guest's CID (3 or more).
    #[arg(long, value_parser = clap::value_parser!(u64).range(3..0xFFFF_FFFF))]
    guest_cid: u64,
    /// Name of the VM: its `[[vm]] name` in the host configuration, by which its
    /// guests are admitted, and what the logs call it.
    #[arg(long)]
    vm_name: String,
    /// The host configuration workers admit guests by. Default: vmcuda-host's
    /// (/etc/vmcuda/host.toml when it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// vsock port on the host (CID 2) that reaches vmcuda.
    #[arg(long, default_value_t = 7731, value_parser = clap::value_parser!(u32).range(1..0xFFFF_FFFF))]
    port: u32,
    /// The vmcuda-host binary. Default: vmcuda-host next to this binary, else on PATH.
    #[arg(long)]
    host_bin: Option<PathBuf>,
    /// What runs the guests' work (vmcuda-host's --executor): cuda (the default) the
    /// GPUs, guests refused without a usable one; host-memory the TEST DOUBLE, which
    /// runs no kernel; auto cuda where it can start, else the test double.
    #[arg(long, value_enum, default_value_t = ExecutorChoice::Cuda)]
    executor: ExecutorChoice,
    /// Host-memory executor: workers append each recorded kernel launch to this file.
    #[arg(long)]
    launch_log: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot find the vmcuda-host binary: {0}")]
    HostBin(String),
    #[error("cannot set up the device: {0}")]
    Setup(#[source] io::Error),
    #[error("cannot listen on {path}: {msg}")]
    Listen { path: PathBuf, msg: String },
    #[error("vhost-user: {0}")]
    VhostUser(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let span = info_span!("vsock", vm = %cli.vm_name, cid = cli.guest_cid);
    let _enter = span.enter();
    match run(cli, span.clone()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_env("VMCUDA_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn run(cli: Cli, span: Span) -> Result<(), Error> {
    let host_bin = resolve_host_bin(cli.host_bin.as_deref())?;
    let streams = Arc::new(Epoll::new().map_err(Error::Setup)?);
    let children = ChildTracker::new();
    let connector = WorkerConnector::new(
        WorkerCommand {
            host_bin: host_bin.clone(),
            executor: cli.executor,
            launch_log: cli.launch_log.clone(),
            vm_name: cli.vm_name.clone(),
            config: cli.config.clone(),
        },
        streams.clone(),
        children.clone(),
        span.clone(),
    );
    let device = VsockDevice::new(
        MuxerConfig::new(cli.guest_cid, cli.port),
        connector,
        streams.clone(),
        span,
    )
    .map_err(Error::Setup)?;
    let exit = device.exit_notifier().map_err(Error::Setup)?;
    let backend = Arc::new(RwLock::new(device));

    let mut daemon = VhostUserDaemon::new(
        "vmcuda-vhost-vsock".into(),
        backend.clone(),
        GuestMemoryAtomic::new(GuestMemoryMmap::new()),
    )
    .map_err(|e| Error::VhostUser(e.to_string()))?;
    // Worker sockets wake the device through one nested epoll.
    let handlers = daemon.get_epoll_handlers();
    let handler = handlers
        .first()
        .ok_or_else(|| Error::VhostUser("no vring worker thread".into()))?;
    handler
        .register_listener(streams.as_raw_fd(), EventSet::IN, u64::from(BACKEND_EVENT))
        .map_err(Error::Setup)?;

    let mut listener = vmcuda_wire::transport::bind_unix_listener(&cli.socket)
        .map(Listener::from)
        .map_err(|e| Error::Listen {
            path: cli.socket.clone(),
            msg: e.to_string(),
        })?;
    info!(
        socket = %cli.socket.display(),
        port = cli.port,
        host_bin = %host_bin.display(),
        executor = cli.executor.as_arg(),
        virtio_id = VIRTIO_ID_VSOCK,
        "waiting for the VMM to connect"
    );
    daemon
        .start(&mut listener)
        .map_err(|e| Error::VhostUser(e.to_string()))?;
    info!("VMM connected");
    let result = daemon.wait();

    // The VMM is gone: stop the vring thread, close every connection (each worker sees
    // end of input and exits), and give the workers a moment to finish.
    let _ = exit.notify();
    let closed = backend
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .close_all();
    let left = children.wait_all(WORKER_EXIT_GRACE);
    if left > 0 {
        warn!(
            workers = left,
            "workers still running after the VMM left; they exit once they notice"
        );
    }
    drop(listener);
    let _ = std::fs::remove_file(&cli.socket);
    match result {
        Ok(())
        | Err(vhost_user_backend::Error::HandleRequest(
            VhostUserError::Disconnected
            | VhostUserError::PartialMessage
            | VhostUserError::SocketBroken(_),
        )) => {
            info!(connections = closed, "VMM disconnected; exiting");
            Ok(())
        }
        Err(e) => Err(Error::VhostUser(e.to_string())),
    }
}

/// `--host-bin`, else `vmcuda-host` next to this binary, else on `PATH`.
fn resolve_host_bin(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(Error::HostBin(format!(
                "{} is not an executable file",
                p.display()
            )))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("vmcuda-host")));
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("vmcuda-host"))
                .collect()
        })
        .unwrap_or_default();
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            Error::HostBin("not next to this binary and not on PATH; pass --host-bin".into())
        })
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
