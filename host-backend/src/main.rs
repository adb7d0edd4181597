//! `vmcuda-host`: the host daemon (`serve`) and its per-connection worker (`worker`).

use std::fs::File;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;
use vmcuda_host::console::ConsoleCapture;
use vmcuda_host::daemon::{self, ExecutorChoice, TransportKind, WorkerTemplate};
use vmcuda_host::executor::cuda::CudaExecutor;
use vmcuda_host::executor::host_memory::{self, HostMemoryExecutor};
use vmcuda_host::executor::Executor;
use vmcuda_host::session::Session;
use vmcuda_host::worker;
use vmcuda_wire::transport::{FdReader, DEFAULT_UNIX_PATH};

#[derive(Parser)]
#[command(
    name = "vmcuda-host",
    version,
    about = "vmcuda host backend: runs guests' CUDA calls on this machine's GPUs"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Listen for guests.
    Serve {
        /// Unix socket to listen on (repeatable). Default when no listener is given:
        /// /run/vmcuda/vmcuda.sock.
        #[arg(long)]
        unix: Vec<PathBuf>,
        /// TCP address to listen on, e.g. 127.0.0.1:7731 (repeatable).
        #[arg(long)]
        tcp: Vec<String>,
        /// Listen on AF_VSOCK at --port (kernel vhost-vsock hosts: QEMU/KVM with
        /// vhost-vsock-pci; guests reach it as vsock:2:PORT).
        #[arg(long)]
        vsock: bool,
        /// A hybrid-vsock VMM's socket (Firecracker `uds_path`, cloud-hypervisor
        /// `--vsock socket=`): listen on PATH_<port> for the guest's connections
        /// (repeatable, one per VM).
        #[arg(long)]
        hybrid_vsock: Vec<PathBuf>,
        /// The port guests connect to over --vsock and --hybrid-vsock.
        #[arg(long, default_value_t = vmcuda_wire::handshake::WELL_KNOWN_PORT as u32)]
        port: u32,
        #[arg(long, value_enum, default_value_t = ExecutorChoice::Auto)]
        executor: ExecutorChoice,
        /// Host-memory executor: append each recorded kernel launch to this file (JSON lines).
        #[arg(long)]
        launch_log: Option<PathBuf>,
        /// Host-memory executor: device memory size it pretends to have.
        #[arg(long, default_value_t = host_memory::DEFAULT_MEMORY)]
        host_memory_bytes: u64,
    },
    /// Serve one guest connection passed as stdin (started by `serve`).
    #[command(hide = true)]
    Worker {
        #[arg(long, value_enum)]
        executor: ExecutorChoice,
        #[arg(long, value_enum)]
        transport: TransportKind,
        #[arg(long, default_value_t = 0)]
        connection_id: u64,
        #[arg(long)]
        launch_log: Option<PathBuf>,
        #[arg(long, default_value_t = host_memory::DEFAULT_MEMORY)]
        host_memory_bytes: u64,
    },
}

fn init_logging(writer: Option<File>) {
    let filter = EnvFilter::try_from_env("VMCUDA_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match writer {
        Some(file) => {
            let ansi = file.is_terminal();
            builder
                .with_ansi(ansi)
                .with_writer(std::sync::Mutex::new(file))
                .init()
        }
        None => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init(),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Serve {
            mut unix,
            tcp,
            vsock,
            hybrid_vsock,
            port,
            executor,
            launch_log,
            host_memory_bytes,
        } => {
            init_logging(None);
            unix.extend(
                hybrid_vsock
                    .iter()
                    .map(|p| daemon::hybrid_vsock_path(p, port)),
            );
            serve(
                unix,
                tcp,
                vsock.then_some(port),
                executor,
                launch_log,
                host_memory_bytes,
            )
        }
        Cmd::Worker {
            executor,
            transport,
            connection_id,
            launch_log,
            host_memory_bytes,
        } => run_worker(
            executor,
            transport,
            connection_id,
            launch_log,
            host_memory_bytes,
        ),
    }
}

fn serve(
    mut unix: Vec<PathBuf>,
    tcp: Vec<String>,
    vsock: Option<u32>,
    choice: ExecutorChoice,
    launch_log: Option<PathBuf>,
    host_memory_bytes: u64,
) -> ExitCode {
    let executor = match choice {
        ExecutorChoice::Auto => match CudaExecutor::new() {
            Ok(cuda) => {
                info!("{}", cuda.banner());
                ExecutorChoice::Cuda
            }
            Err(status) => {
                warn!("no usable GPU ({status}); falling back to the host-memory test executor");
                ExecutorChoice::HostMemory
            }
        },
        other => other,
    };
    if executor == ExecutorChoice::HostMemory {
        warn!("{}", host_memory::BANNER);
    }
    if unix.is_empty() && tcp.is_empty() && vsock.is_none() {
        unix.push(DEFAULT_UNIX_PATH.into());
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            error!("cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let template = Arc::new(WorkerTemplate {
        exe,
        executor,
        launch_log,
        host_memory_bytes,
    });
    let mut listeners = Vec::new();
    for path in &unix {
        match daemon::listen_unix(path, template.clone()) {
            Ok(h) => listeners.push(h),
            Err(e) => {
                error!(path = %path.display(), "cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    for addr in &tcp {
        match daemon::listen_tcp(addr, template.clone()) {
            Ok(h) => listeners.push(h),
            Err(e) => {
                error!(%addr, "cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(port) = vsock {
        match daemon::listen_vsock(port, template.clone()) {
            Ok(h) => listeners.push(h),
            Err(e) => {
                error!(
                    port,
                    "cannot listen on vsock (is the vhost_vsock module loaded?): {e}"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    for h in listeners {
        let _ = h.join();
    }
    ExitCode::SUCCESS
}

fn run_worker(
    choice: ExecutorChoice,
    transport: TransportKind,
    connection_id: u64,
    launch_log: Option<PathBuf>,
    host_memory_bytes: u64,
) -> ExitCode {
    // The connection arrives as stdin.
    let conn: OwnedFd = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("vmcuda-host worker: no connection on stdin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut console, log) = match ConsoleCapture::install() {
        Ok((c, log)) => (Some(c), Some(log)),
        Err(e) => {
            eprintln!("vmcuda-host worker: console capture unavailable ({e}); kernel output stays in the host log");
            (None, None)
        }
    };
    init_logging(log);
    let span = tracing::info_span!("worker", connection = connection_id);
    let _enter = span.enter();

    let exec: Box<dyn Executor> = match choice {
        ExecutorChoice::Cuda | ExecutorChoice::Auto => match CudaExecutor::new() {
            Ok(e) => Box::new(e),
            Err(status) if choice == ExecutorChoice::Auto => {
                warn!("no usable GPU ({status}); using the host-memory test executor");
                match HostMemoryExecutor::new(host_memory_bytes, launch_log) {
                    Ok(e) => Box::new(e),
                    Err(e) => {
                        error!("cannot open launch log: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            Err(status) => {
                error!("CUDA executor unavailable: {status}");
                return ExitCode::FAILURE;
            }
        },
        ExecutorChoice::HostMemory => {
            match HostMemoryExecutor::new(host_memory_bytes, launch_log) {
                Ok(e) => Box::new(e),
                Err(e) => {
                    error!("cannot open launch log: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let mut session = Session::new(exec);
    let result = match transport {
        TransportKind::Unix => {
            let stream = UnixStream::from(conn);
            match stream.try_clone() {
                Ok(reader) => {
                    // Unix guests may pass memory descriptors along with frames.
                    let (reader, fds) = FdReader::new(reader);
                    worker::serve(reader, stream, Some(fds), &mut session, console.as_mut())
                }
                Err(e) => Err(e.into()),
            }
        }
        TransportKind::Vsock => {
            let stream = vsock::VsockStream::from(conn);
            match stream.try_clone() {
                Ok(reader) => worker::serve(reader, stream, None, &mut session, console.as_mut()),
                Err(e) => Err(e.into()),
            }
        }
        TransportKind::Tcp => {
            let stream = TcpStream::from(conn);
            match stream.try_clone() {
                Ok(reader) => worker::serve(reader, stream, None, &mut session, console.as_mut()),
                Err(e) => Err(e.into()),
            }
        }
    };
    match result {
        Ok(()) => {
            info!(client = %session.client(), "guest disconnected");
            ExitCode::SUCCESS
        }
        Err(e) => {
            warn!(client = %session.client(), "connection ended: {e}");
            ExitCode::SUCCESS
        }
    }
}
