//! `vmcuda-host`: the host daemon (`serve`) and its per-connection worker (`worker`).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod admin_cmd;

use clap::{Parser, Subcommand};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;
use vmcuda_host::admission;
use vmcuda_host::connection::{self, Connection};
use vmcuda_host::console::ConsoleCapture;
use vmcuda_host::daemon::{ExecutorChoice, TransportKind, WorkerTemplate};
use vmcuda_host::executor::host_memory;
use vmcuda_host::guest_log;
use vmcuda_host::jail;
use vmcuda_host::metrics;
use vmcuda_host::peer::PeerLink;
use vmcuda_host::policy::{Caller, Policy};
use vmcuda_host::serve::{self, Listeners};
use vmcuda_host::stats;

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
        /// The file to check (the same as --config). Default: /etc/vmcuda/host.toml
        /// when it exists, else the built-in default.
        #[arg(value_name = "FILE", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The file to check, as `serve --config` names it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Suspend a VM's GPU work: every worker of VM (whichever daemon or vhost-user
    /// device started it) is locked once its calls in flight finish, and its GPU
    /// memory moved to host memory, counted against the VM's host_memory. The guest's
    /// programs see a pause. For a VMM's or libvirt's pause hook.
    Suspend {
        /// The VM, as the configuration names it ("local" for programs on this host).
        vm: String,
        #[command(flatten)]
        target: SuspendArgs,
        /// How long to wait for a worker's CUDA calls in flight before giving up (the
        /// VM is then left running).
        #[arg(long, default_value_t = 10_000)]
        lock_timeout_ms: u64,
    },
    /// Resume a VM suspended with `suspend`: its GPU memory comes back at the same
    /// addresses and its programs carry on.
    Resume {
        vm: String,
        #[command(flatten)]
        target: SuspendArgs,
    },
    /// Grant, change, list and revoke guests' policies at run time, through the
    /// daemon's admin socket (root, the daemon's user and [admin] group only; see
    /// docs/admin-api.md).
    Admin {
        #[command(flatten)]
        at: admin_cmd::AdminAt,
        #[command(subcommand)]
        command: admin_cmd::AdminCmd,
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
        /// The daemon's admission channel is open as descriptor 3 (see
        /// vmcuda_host::admission).
        #[arg(long)]
        admission_channel: bool,
        /// A socket to the daemon's peer broker is open as descriptor 4 (see
        /// vmcuda_host::peer).
        #[arg(long)]
        peer_broker: bool,
        /// A socket to a CUDA IPC registry (the daemon's, or the vhost-user device's
        /// for its VM) is open as this descriptor (see vmcuda_host::ipc).
        #[arg(long, value_name = "FD")]
        ipc_registry: Option<i32>,
    },
}

/// Where `suspend` and `resume` find a VM's workers, and how they pause them.
#[derive(clap::Args)]
struct SuspendArgs {
    /// The state directory. Default: the configuration's state_dir, else /run/vmcuda.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The host configuration, for its state_dir and the VM's host_memory. Default:
    /// /etc/vmcuda/host.toml when it exists.
    #[arg(long)]
    config: Option<PathBuf>,
    /// What the workers run on, as given to `serve`: cuda (the driver's process
    /// checkpoint) or host-memory (the TEST DOUBLE's workers, whose requests are only
    /// held and let go).
    #[arg(long, value_enum, default_value_t = ExecutorChoice::Cuda)]
    executor: ExecutorChoice,
}

/// What the daemon and each worker it starts are both given: the daemon passes them
/// on (see `WorkerTemplate::spawn`).
#[derive(clap::Args)]
struct WorkerArgs {
    /// What runs the guests' work. cuda (the default): this host's GPUs; `serve` refuses
    /// to start without a usable GPU and driver. host-memory: a TEST DOUBLE for machines
    /// without a GPU, which runs no kernel (results are not computed), and every guest
    /// program says so. auto: cuda when it can start, else the test double, with a
    /// warning.
    #[arg(long, value_enum, default_value_t = ExecutorChoice::Cuda)]
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
            pre_admission: Default::default(),
            pid_namespace: false,
            broker: None,
            ipc: None,
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

/// A worker's log: every line its guest can cause, so under the worker's rate limit
/// ([`guest_log`]).
fn init_worker_logging(writer: Option<File>) {
    let filter = EnvFilter::try_from_env("VMCUDA_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let (ansi, out): (bool, Box<dyn std::io::Write + Send>) = match writer {
        Some(file) => (file.is_terminal(), Box::new(file)),
        None => (std::io::stderr().is_terminal(), Box::new(std::io::stderr())),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(guest_log::install(out))
        .init()
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
            let peers = match policy.peer_tls() {
                Ok(peers) => peers,
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
            match serve::start(listeners, &policy, tls.as_ref(), peers, template) {
                Ok(running) => {
                    running.join();
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    // Plain on stderr whatever the log filter says: why it did not start.
                    eprintln!("vmcuda-host serve: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::CheckConfig { file, config } => check_config(file.or(config).as_deref()),
        Cmd::Worker {
            workers,
            transport,
            connection_id,
            caller,
            tls,
            guest_memory,
            admission_channel,
            peer_broker,
            ipc_registry,
        } => {
            // First: a worker that is its pid namespace's first process handles the
            // signals that stop it, and learns its host pid while /proc is the host's.
            jail::worker_started();
            if admission_channel {
                admission::take_inherited_channel();
            }
            let peer_link = peer_broker.then(PeerLink::take_inherited).flatten();
            let ipc_link = ipc_registry.and_then(vmcuda_host::ipc::IpcLink::take_inherited);
            // The connection arrives as stdin.
            let conn: OwnedFd = match std::io::stdin().as_fd().try_clone_to_owned() {
                Ok(fd) => fd,
                Err(e) => {
                    eprintln!("vmcuda-host worker: no connection on stdin: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let (console, log) = match ConsoleCapture::install() {
                Ok((c, log)) => (Some(c), Some(log)),
                Err(e) => {
                    eprintln!("vmcuda-host worker: console capture unavailable ({e}); kernel output stays in the host log");
                    (None, None)
                }
            };
            guest_log::set_connection(connection_id);
            init_worker_logging(log);
            // The console capture takes stderr, where a panic's message would go: the
            // host log gets it instead (a panic that cannot unwind aborts the worker,
            // and the capture with it).
            let default_hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                error!("worker panicked: {info}");
                default_hook(info);
            }));
            let c = Connection {
                conn,
                transport,
                connection_id,
                caller,
                guest_memory,
                peer_link,
                ipc_link,
            };
            connection::run(&workers.template(tls), c, console);
            // What the log's limit dropped at the end is summed up too.
            guest_log::flush();
            ExitCode::SUCCESS
        }
        Cmd::Status {
            state_dir,
            config,
            json,
        } => status(state_dir, config.as_deref(), json),
        Cmd::Suspend {
            vm,
            target,
            lock_timeout_ms,
        } => suspend(&vm, &target, Some(Duration::from_millis(lock_timeout_ms))),
        Cmd::Resume { vm, target } => suspend(&vm, &target, None),
        Cmd::Admin { at, command } => admin_cmd::run(at, command),
    }
}

/// `suspend` (with its lock timeout) and `resume` (without).
fn suspend(vm: &str, args: &SuspendArgs, lock_timeout: Option<Duration>) -> ExitCode {
    use vmcuda_host::suspend::{self, Checkpointer, GateCheckpointer};
    let name = if lock_timeout.is_some() {
        "suspend"
    } else {
        "resume"
    };
    // With the run-time grants: a granted VM's host_memory is its grant's.
    let policy = match Policy::load_with_grants(args.config.as_deref(), args.state_dir.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vmcuda-host {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| policy.state_dir().to_path_buf());
    let checkpointer: Box<dyn Checkpointer> = match args.executor {
        ExecutorChoice::HostMemory => Box::new(GateCheckpointer::new(&state_dir)),
        ExecutorChoice::Cuda | ExecutorChoice::Auto => {
            match vmcuda_host::suspend::driver::DriverCheckpointer::new() {
                Ok(c) => Box::new(suspend::GatedCheckpointer::new(&state_dir, c)),
                Err(e) if args.executor == ExecutorChoice::Auto => {
                    eprintln!(
                        "vmcuda-host {name}: {e}; the workers are taken for the test double's"
                    );
                    Box::new(GateCheckpointer::new(&state_dir))
                }
                Err(e) => {
                    eprintln!("vmcuda-host {name}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let result = match lock_timeout {
        Some(timeout) => suspend::suspend_vm(
            &state_dir,
            vm,
            policy.host_memory_of(vm),
            checkpointer.as_ref(),
            timeout,
        ),
        None => suspend::resume_vm(&state_dir, vm, checkpointer.as_ref()),
    };
    match result {
        Ok(report) => {
            let what = if lock_timeout.is_some() {
                "suspended"
            } else {
                "resumed"
            };
            println!("{}", report.summary(vm, what));
            for w in &report.workers {
                println!(
                    "  worker {}: {} bytes, {:.3} s, its resident memory grew by {} bytes",
                    w.pid,
                    w.bytes,
                    w.elapsed.as_secs_f64(),
                    w.resident_growth
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vmcuda-host {name}: {e}");
            ExitCode::FAILURE
        }
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
            vms: metrics::vm_status(&census.guests),
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
    if let Err(e) = policy.peer_tls() {
        errors.push(e.to_string());
    }
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
    match &c.peers {
        Some(p) => println!(
            "peers: listen {}, advertised as {}, may connect to: {}",
            p.listen,
            p.advertise(),
            if p.allow.is_empty() {
                "none".into()
            } else {
                p.allow.join(", ")
            }
        ),
        None => println!("peers: none (copies between hosts go through the guest)"),
    }
    match c.ipc.max_exports() {
        0 => println!("cuda ipc: off ([ipc] max_exports = 0)"),
        n => println!("cuda ipc: between each VM's processes, at most {n} exports per VM"),
    }
    match c.suspend.idle_after_ms.filter(|&ms| ms > 0) {
        Some(ms) => {
            println!("idle vms: suspended after {ms} ms without a call, resumed at their next")
        }
        None => println!("idle vms: never suspended by the daemon ([suspend] idle_after_ms)"),
    }
    if c.admin.enabled() {
        println!(
            "admin socket: {} (root, the daemon's user{}; grants in {})",
            c.admin.socket(policy.state_dir()).display(),
            c.admin
                .group
                .as_ref()
                .map_or(String::new(), |g| format!(" and group {g}")),
            vmcuda_host::admin::grants_path(policy.state_dir()).display()
        );
        if let Some(group) = &c.admin.group {
            if let Err(e) = vmcuda_host::admin::auth::resolve_group(group) {
                errors.push(e);
            }
        }
    } else {
        println!("admin socket: off ([admin] enable = false)");
    }
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
        if let Some(uid) = vm.uid {
            ways.push(format!("programs of uid {uid} on this host"));
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
