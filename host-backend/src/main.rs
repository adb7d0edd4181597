//! `vmcuda-host`: the host daemon (`serve`) and its per-connection worker (`worker`).

use std::cell::Cell;
use std::fs::File;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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
use vmcuda_host::guest_ram::GuestRam;
use vmcuda_host::jail;
use vmcuda_host::ledger::{Ledger, LedgerError};
use vmcuda_host::metrics;
use vmcuda_host::policy::{Caller, ConfigError, GpuSelection, Grant, Policy, Refusal};
use vmcuda_host::session::Session;
use vmcuda_host::stats::{self, Identity, WorkerStats};
use vmcuda_host::tls::{self, Accepted, TlsServer};
use vmcuda_host::worker::{self, Ended};
use vmcuda_wire::op::Hello;
use vmcuda_wire::polling::PollingReader;
use vmcuda_wire::tls::TlsError;
use vmcuda_wire::transport::{FdReader, DEFAULT_UNIX_PATH};
use vmcuda_wire::{CudaStatus, FrameError};

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
        /// TCP address to listen on, e.g. 127.0.0.1:7731 (repeatable). It speaks TLS when
        /// the configuration's [tcp] table sets tls_cert and tls_key.
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
        #[command(flatten)]
        workers: WorkerArgs,
        /// Serve Prometheus metrics (per-VM memory, calls, errors, bytes copied, kernels,
        /// call latency) at http://ADDR/metrics, e.g. 127.0.0.1:9731; port 0 picks a free
        /// port (logged). Overrides the configuration's [metrics] listen. Loopback only
        /// unless [metrics] allow_non_loopback = true.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
    },
    /// List the guests connected now, with their figures (read from the state directory,
    /// so it shows the workers of every daemon and vhost-user device that uses it).
    Status {
        /// The state directory. Default: the configuration's state_dir, else /run/vmcuda.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// The host configuration, for its state_dir. Default: /etc/vmcuda/host.toml
        /// when it exists.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON (one object, its "guests" a list) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a configuration file the way `serve` and its workers read it, and say
    /// what it admits. Exit status 1 when the daemon would refuse to start with it, or
    /// a guest it names could not get in (an unreadable token file). The packaged
    /// service's `systemctl reload` runs this: workers read the file at each
    /// connection, so a valid edit is in force for the next one.
    CheckConfig {
        /// Default: /etc/vmcuda/host.toml when it exists, else the built-in default.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Serve one guest connection passed as stdin (started by `serve`).
    #[command(hide = true)]
    Worker {
        #[command(flatten)]
        workers: WorkerArgs,
        #[arg(long, value_enum)]
        transport: TransportKind,
        #[arg(long, default_value_t = 0)]
        connection_id: u64,
        /// Who is calling, as the transport says (local[:PID], vsock:CID, vm:NAME,
        /// tcp:PEER); admission decides on it and the guest's token.
        #[arg(long, value_parser = Caller::from_arg)]
        caller: Caller,
        /// The TCP connection is to a TLS listener: handshake (configuration `[tcp]`
        /// tls_cert and tls_key) before the protocol.
        #[arg(long)]
        tls: bool,
        /// A guest RAM region this worker inherited from the vhost-user device, as
        /// FD:GPA:LEN:OFFSET (repeated per region); given only for privileged guest
        /// connections (see docs/security.md).
        #[arg(long, value_name = "FD:GPA:LEN:OFFSET")]
        guest_memory: Vec<String>,
    },
}

/// What the daemon and each worker it starts are both given: the daemon passes them
/// on (see `WorkerTemplate::spawn`).
#[derive(clap::Args)]
struct WorkerArgs {
    #[arg(long, value_enum, default_value_t = ExecutorChoice::Auto)]
    executor: ExecutorChoice,
    /// Host-memory executor: append each recorded kernel launch to this file (JSON lines).
    #[arg(long)]
    launch_log: Option<PathBuf>,
    /// Host-memory executor: device memory size it pretends to have.
    #[arg(long, default_value_t = host_memory::DEFAULT_MEMORY)]
    host_memory_bytes: u64,
    /// Host-memory executor: how many GPUs it pretends the host has.
    #[arg(long, default_value_t = 1)]
    host_memory_devices: usize,
    /// The host configuration (who may connect, which GPUs, quotas). Default:
    /// /etc/vmcuda/host.toml when it exists, else the built-in default, which
    /// admits programs on this host and refuses every VM and TCP caller.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where workers keep what a VM's connections share (its quota ledger) and
    /// their figures. Default: the configuration's state_dir, else /run/vmcuda.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

impl WorkerArgs {
    fn template(self, tls: bool) -> WorkerTemplate {
        WorkerTemplate {
            exe: PathBuf::new(),
            executor: self.executor,
            launch_log: self.launch_log,
            host_memory_bytes: self.host_memory_bytes,
            host_memory_devices: self.host_memory_devices,
            config: self.config,
            state_dir: self.state_dir,
            tls,
        }
    }
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
            unix,
            tcp,
            vsock,
            hybrid_vsock,
            port,
            workers,
            metrics,
        } => {
            init_logging(None);
            let policy = match Policy::load(workers.config.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    error!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            info!(config = %policy.source, vms = policy.config.vms.len(), "policy loaded");
            jail::announce(&policy.config.jail);
            // Checked now, so a missing or mismatched certificate stops the daemon.
            let tls = match policy.tls_server() {
                Ok(tls) => tls,
                Err(e) => {
                    error!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let template = workers.template(tls.is_some());
            let listeners = Listeners {
                unix,
                tcp,
                vsock: vsock.then_some(port),
                hybrid_vsock,
                port,
                metrics,
            };
            serve(listeners, &policy, tls.as_ref(), template)
        }
        Cmd::CheckConfig { config } => check_config(config.as_deref()),
        Cmd::Worker {
            workers,
            transport,
            connection_id,
            caller,
            tls,
            guest_memory,
        } => run_worker(
            &workers.template(tls),
            transport,
            connection_id,
            caller,
            &guest_memory,
        ),
        Cmd::Status {
            state_dir,
            config,
            json,
        } => status(state_dir, config.as_deref(), json),
    }
}

/// `vmcuda-host status`.
fn status(state_dir: Option<PathBuf>, config: Option<&Path>, json: bool) -> ExitCode {
    let state_dir = match state_dir {
        Some(dir) => dir,
        None => match Policy::load(config) {
            Ok(policy) => policy.state_dir().to_path_buf(),
            Err(e) => {
                eprintln!("vmcuda-host status: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let mut census = match stats::census(&state_dir, false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vmcuda-host status: {e}");
            return ExitCode::FAILURE;
        }
    };
    metrics::sort_guests(&mut census.guests);
    if json {
        let report = metrics::StatusReport {
            guests: &census.guests,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        print!("{}", metrics::status_table(&census.guests, now_ms));
    }
    ExitCode::SUCCESS
}

/// `check-config`: the checks `serve` makes at start, and the token files admission
/// reads, reported on stdout (errors on stderr).
fn check_config(path: Option<&std::path::Path>) -> ExitCode {
    let policy = match Policy::load(path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vmcuda-host: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut errors = Vec::new();
    let tls = match policy.tls_server() {
        Ok(tls) => tls.map(|t| t.required),
        Err(e) => {
            errors.push(e.to_string());
            None
        }
    };
    for addr in &policy.config.tcp.listen {
        if let Err(msg) = policy.check_tcp_listen(addr) {
            errors.push(msg);
        }
    }
    errors.extend(policy.token_file_problems());

    let c = &policy.config;
    println!("configuration: {}", policy.source);
    println!(
        "local programs: {}",
        if c.local.allow { "admitted" } else { "refused" }
    );
    if c.tcp.listen.is_empty() {
        println!("tcp listen: none in the file");
    } else {
        println!("tcp listen: {}", c.tcp.listen.join(", "));
    }
    let tls = match tls {
        Some(true) => "required on TCP listeners",
        Some(false) => "offered on TCP listeners, plain TCP allowed",
        None => "not configured (TCP listeners are plain)",
    };
    println!("tls: {tls}");
    println!("vms: {}", c.vms.len());
    for vm in &c.vms {
        let mut ways = vec![format!("vhost-user device --vm-name {}", vm.name)];
        if let Some(cid) = vm.cid {
            ways.push(format!("vsock cid {cid}"));
        }
        if let Some(p) = &vm.hybrid_vsock {
            ways.push(format!("hybrid vsock {}", p.display()));
        }
        if vm.tcp {
            ways.push("tcp with its token".into());
        }
        println!("  {}: {}", vm.name, ways.join("; "));
    }
    println!("state dir: {}", policy.state_dir().display());
    if errors.is_empty() {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        for e in &errors {
            eprintln!("vmcuda-host: {e}");
        }
        ExitCode::FAILURE
    }
}

/// Where `serve` listens, as given on the command line.
struct Listeners {
    unix: Vec<PathBuf>,
    tcp: Vec<String>,
    vsock: Option<u32>,
    hybrid_vsock: Vec<PathBuf>,
    port: u32,
    metrics: Option<String>,
}

fn serve(
    mut at: Listeners,
    policy: &Policy,
    tls: Option<&TlsServer>,
    mut template: WorkerTemplate,
) -> ExitCode {
    match worker::request_poll_window().as_micros() {
        0 => info!("workers sleep until each request comes (VMCUDA_POLL_US to poll first)"),
        us => info!("workers poll {us} us for each request before sleeping (VMCUDA_POLL_US)"),
    }
    template.executor = match template.executor {
        ExecutorChoice::Auto => match CudaExecutor::new(&GpuSelection::all()) {
            Ok(cuda) => {
                info!("{}", cuda.banner());
                ExecutorChoice::Cuda
            }
            Err(status) => {
                warn!("no usable GPU ({status}); falling back to the host-memory test executor");
                ExecutorChoice::HostMemory
            }
        },
        ExecutorChoice::Cuda => {
            // Asked for by name (the packaged service does): say now, not only at the
            // first guest, when there is nothing to serve with.
            match CudaExecutor::new(&GpuSelection::all()) {
                Ok(cuda) => info!("{}", cuda.banner()),
                Err(status) => {
                    warn!("no usable GPU ({status}); guests are refused until there is one")
                }
            }
            ExecutorChoice::Cuda
        }
        other => other,
    };
    if template.executor == ExecutorChoice::HostMemory {
        warn!("{}", host_memory::BANNER);
    }
    template.exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            error!("cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The configuration's own listeners join the command line's.
    at.tcp.extend(policy.config.tcp.listen.iter().cloned());
    for vm in &policy.config.vms {
        if let Some(path) = &vm.hybrid_vsock {
            if !at.hybrid_vsock.contains(path) {
                at.hybrid_vsock.push(path.clone());
            }
        }
    }
    // Each hybrid-vsock socket belongs to one VM, which is how its guests are known.
    let mut unix: Vec<(PathBuf, Option<Caller>)> =
        at.unix.iter().map(|p| (p.clone(), None)).collect();
    for path in &at.hybrid_vsock {
        let caller = match policy.vm_for_hybrid_socket(path) {
            Some(name) => Caller::Vm(name.into()),
            None => {
                warn!(socket = %path.display(),
                    "no [[vm]] entry has this hybrid_vsock socket; its guests will be refused");
                Caller::UnclaimedSocket(path.clone())
            }
        };
        unix.push((daemon::hybrid_vsock_path(path, at.port), Some(caller)));
    }
    if unix.is_empty() && at.tcp.is_empty() && at.vsock.is_none() {
        unix.push((DEFAULT_UNIX_PATH.into(), None));
    }
    for addr in &at.tcp {
        if let Err(msg) = policy.check_tcp_listen(addr) {
            error!("{msg}");
            return ExitCode::FAILURE;
        }
        let loopback = addr
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback());
        if !loopback && tls.is_none_or(|t| !t.required) {
            warn!(%addr, "TCP guests here may send their tokens and data unencrypted; \
                configure [tcp] tls_cert and tls_key (and leave require_tls on)");
        }
    }
    let metrics_at = at.metrics.clone().or(policy.config.metrics.listen.clone());
    if let Some(addr) = &metrics_at {
        if let Err(msg) = policy.check_metrics_listen(addr) {
            error!("{msg}");
            return ExitCode::FAILURE;
        }
        let mut known_vms: Vec<String> = policy.config.vms.iter().map(|v| v.name.clone()).collect();
        if policy.config.local.allow {
            known_vms.push("local".into());
        }
        let source = metrics::Source {
            state_dir: template
                .state_dir
                .clone()
                .unwrap_or_else(|| policy.state_dir().to_path_buf()),
            known_vms,
        };
        match metrics::serve(addr, source) {
            Ok((local, _)) => info!("serving metrics at http://{local}/metrics"),
            Err(e) => {
                error!(%addr, "cannot serve metrics: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let template = Arc::new(template);
    let mut listeners = Vec::new();
    for (path, caller) in unix {
        match daemon::listen_unix(&path, template.clone(), caller) {
            Ok(h) => listeners.push(h),
            Err(e) => {
                error!(path = %path.display(), "cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    for addr in &at.tcp {
        match daemon::listen_tcp(addr, template.clone()) {
            Ok(h) => listeners.push(h),
            Err(e) => {
                error!(%addr, "cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(port) = at.vsock {
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
    template: &WorkerTemplate,
    transport: TransportKind,
    connection_id: u64,
    caller: Caller,
    guest_memory: &[String],
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

    // The configuration as it is now: for admission (and a TLS listener's certificate).
    let policy = Policy::load(template.config.as_deref());
    let state_dir = template.state_dir.clone().unwrap_or_else(|| {
        policy
            .as_ref()
            .map_or(Path::new(vmcuda_host::policy::DEFAULT_STATE_DIR), |p| {
                p.state_dir()
            })
            .to_path_buf()
    });
    // The guest's RAM, taken at once so that no descriptor lingers unowned; kept only
    // where the VM's configuration allows copies straight from it.
    let mut guest_ram = match GuestRam::from_inherited(guest_memory) {
        Ok(ram) if ram.is_empty() => None,
        Ok(ram) => Some(ram),
        Err(e) => {
            warn!("{e}; this connection's copies go over the socket");
            None
        }
    };
    if let (Some(_), Caller::Vm(vm)) = (&guest_ram, &caller) {
        if !policy.as_ref().is_ok_and(|p| p.guest_memory_copies(vm)) {
            info!(vm = %vm, "guest_memory_copies is off for this VM; copies go over the socket");
            guest_ram = None;
        }
    } else {
        // Guest RAM only ever comes with a VM's connection.
        guest_ram = None;
    }
    let guest_ram = std::cell::RefCell::new(guest_ram);
    // Set once a TCP guest has done its TLS handshake, for the figures.
    let over_tls = Cell::new(false);
    // Admission, and only then an executor: a refused caller never touches a GPU.
    let open = |hello: &Hello| -> Result<Session, Refusal> {
        let policy = policy.as_ref().map_err(|e| Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: "the host's configuration cannot be read; its administrator can fix it".into(),
            host: format!("refused {caller}: {e}"),
        })?;
        let grant = policy.admit(&caller, &hello.token)?;
        // The VM's quota and connection count span all its connections.
        let ledger = match Ledger::join(&state_dir, &grant.name, grant.max_connections) {
            Ok(ledger) => Some(ledger),
            Err(LedgerError::TooManyConnections(n)) => {
                return Err(Refusal {
                    status: CudaStatus::ErrorDevicesUnavailable,
                    guest: format!("this VM already has {n} connections to the host, its limit"),
                    host: format!(
                        "refused {caller} ({}): it has {n} connections already",
                        grant.name
                    ),
                })
            }
            Err(e) => {
                warn!("{e}; quotas and connection limits hold per connection");
                None
            }
        };
        let exec = make_executor(template, &grant).map_err(|(status, why)| Refusal {
            status,
            guest: format!("the host cannot serve this guest ({status})"),
            host: format!("cannot serve {caller} ({}): {why}", grant.name),
        })?;
        let identity = Identity {
            vm: grant.name.clone(),
            program: hello.client.clone(),
            program_pid: hello.pid,
            caller: caller.to_arg(),
            transport: match transport {
                TransportKind::Unix => "unix",
                TransportKind::Vsock => "vsock",
                TransportKind::Tcp if over_tls.get() => "tls",
                TransportKind::Tcp => "tcp",
            }
            .into(),
            connection_id,
        };
        let mut session = Session::new(exec, grant);
        if let Some(ram) = guest_ram.borrow_mut().take() {
            session = session.with_guest_ram(ram);
        }
        // Monitoring never stands in a guest's way: without a file, it goes unwatched.
        match WorkerStats::create(&state_dir, &identity) {
            Ok(stats) => session = session.with_stats(stats),
            Err(e) => warn!("{e}; this connection's figures are not published"),
        }
        // Admitted, and holding all it needs: from here on the worker reaches only its
        // own VM's ledger and files (docs/security.md, "Worker jail").
        jail::confine_admitted(
            policy,
            &identity.vm,
            &state_dir,
            ledger.as_ref().map(Ledger::path),
        )
        .map_err(|e| e.refusal(&caller, &identity.vm))?;
        Ok(match ledger {
            Some(ledger) => session.with_ledger(ledger),
            None => session,
        })
    };
    let poll_for = worker::request_poll_window();
    let result = match transport {
        TransportKind::Unix => {
            let stream = UnixStream::from(conn);
            match stream.try_clone() {
                Ok(reader) => {
                    // Unix guests may pass memory descriptors along with frames.
                    let (reader, fds) = FdReader::new(reader);
                    let reader = PollingReader::new(reader, Some(stream.as_fd()), poll_for);
                    worker::serve(reader, stream, Some(fds), open, console.as_mut())
                        .map_err(Into::into)
                }
                Err(e) => Err(FrameError::from(e).into()),
            }
        }
        TransportKind::Vsock => {
            let stream = vsock::VsockStream::from(conn);
            match stream.try_clone() {
                Ok(reader) => {
                    let reader = PollingReader::new(reader, Some(stream.as_fd()), poll_for);
                    worker::serve(reader, stream, None, open, console.as_mut()).map_err(Into::into)
                }
                Err(e) => Err(FrameError::from(e).into()),
            }
        }
        TransportKind::Tcp if template.tls => serve_tls_listener(
            TcpStream::from(conn),
            &policy,
            &caller,
            &over_tls,
            open,
            console.as_mut(),
        ),
        TransportKind::Tcp => serve_tcp(TcpStream::from(conn), open, console.as_mut()),
    };
    match result {
        Ok(Ended::Served) => info!(%caller, "guest disconnected"),
        Ok(Ended::Refused(status)) => {
            if let Err(e) = stats::record_refusal(&state_dir, status) {
                warn!("cannot count the refusal: {e}");
            }
        }
        Err(e) => warn!(%caller, "connection ended: {e}"),
    }
    ExitCode::SUCCESS
}

/// Why a worker's connection ended early.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("TLS handshake failed: {0}")]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Setup(String),
}

/// Serve a connection to a TLS listener: a TLS guest after the handshake; a plain one
/// only where `[tcp] require_tls = false`, else it is told to use TLS and turned away.
fn serve_tls_listener(
    stream: TcpStream,
    policy: &Result<Policy, ConfigError>,
    caller: &Caller,
    over_tls: &Cell<bool>,
    open: impl FnOnce(&Hello) -> Result<Session, Refusal>,
    console: Option<&mut ConsoleCapture>,
) -> Result<Ended, ConnectionError> {
    // The certificate as configured now: renewing it needs no restart.
    let unusable = |e: &ConfigError| ConnectionError::Setup(format!("no TLS certificate: {e}"));
    let server = policy
        .as_ref()
        .map_err(unusable)?
        .tls_server()
        .map_err(|e| unusable(&e))?
        .ok_or_else(|| {
            ConnectionError::Setup(
                "this listener speaks TLS, but the configuration no longer has [tcp] tls_cert \
                 and tls_key (restart the daemon to drop TLS)"
                    .into(),
            )
        })?;
    match tls::accept(stream, &server)? {
        Accepted::Tls(stream) => {
            over_tls.set(true);
            worker::serve(stream.clone(), stream, None, open, console).map_err(Into::into)
        }
        Accepted::Plain(stream) => serve_tcp(stream, open, console),
        Accepted::PlainRefused(stream) => {
            // Told in the protocol it speaks, so the program says why it failed.
            let refuse = |hello: &Hello| -> Result<Session, Refusal> {
                let leaked = if hello.token.is_empty() {
                    ""
                } else {
                    "; its token crossed the network unencrypted"
                };
                Err(Refusal {
                    status: CudaStatus::ErrorNotPermitted,
                    guest: "this host takes TCP guests only over TLS: connect with \
                            VMCUDA_SERVER=tls:HOST:PORT"
                        .into(),
                    host: format!(
                        "refused {caller}: plain TCP to a TLS listener ([tcp] require_tls){leaked}"
                    ),
                })
            };
            serve_tcp(stream, refuse, None)
        }
        Accepted::Gone => Ok(Ended::Served),
    }
}

/// Serve a guest on plain TCP.
fn serve_tcp(
    stream: TcpStream,
    open: impl FnOnce(&Hello) -> Result<Session, Refusal>,
    console: Option<&mut ConsoleCapture>,
) -> Result<Ended, ConnectionError> {
    let reader = stream.try_clone().map_err(FrameError::from)?;
    let reader = PollingReader::new(reader, Some(stream.as_fd()), worker::request_poll_window());
    Ok(worker::serve(reader, stream, None, open, console)?)
}

/// The executor a grant gets: only its GPUs, in its order.
fn make_executor(
    template: &WorkerTemplate,
    grant: &Grant,
) -> Result<Box<dyn Executor>, (CudaStatus, String)> {
    let host_memory = || {
        HostMemoryExecutor::new(template.host_memory_bytes, template.launch_log.clone())
            .map_err(|e| {
                (
                    CudaStatus::ErrorUnknown,
                    format!("cannot open launch log: {e}"),
                )
            })?
            .with_devices(template.host_memory_devices, &grant.gpus)
            .map_err(|why| (CudaStatus::ErrorNoDevice, why))
    };
    match template.executor {
        ExecutorChoice::HostMemory => Ok(Box::new(host_memory()?)),
        choice => match CudaExecutor::new(&grant.gpus) {
            Ok(e) => Ok(Box::new(e)),
            Err(status) if choice == ExecutorChoice::Auto => {
                warn!("no usable GPU ({status}); using the host-memory test executor");
                Ok(Box::new(host_memory()?))
            }
            Err(status) => Err((status, "CUDA executor unavailable".into())),
        },
    }
}
