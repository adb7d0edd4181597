//! `vmcuda-host serve`: the daemon's start. Picks the executor its workers use, opens
//! the listeners the command line and the configuration name, and the metrics
//! endpoint; [`daemon`] then accepts on each.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use thiserror::Error;
use tracing::{info, warn};
use vmcuda_wire::transport::DEFAULT_UNIX_PATH;
use vmcuda_wire::CudaStatus;

use crate::daemon::{self, ExecutorChoice, PreAdmission, WorkerTemplate};
use crate::executor::cuda::CudaExecutor;
use crate::executor::host_memory;
use crate::executor::Executor;
use crate::metrics;
use crate::peer::{self, Broker, PeerTls};
use crate::policy::{Caller, GpuSelection, Policy};
use crate::socket_files;
use crate::tls::TlsServer;
use crate::worker;

/// Where `serve` listens, as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    pub unix: Vec<PathBuf>,
    pub tcp: Vec<String>,
    /// AF_VSOCK on this port.
    pub vsock: Option<u32>,
    pub hybrid_vsock: Vec<PathBuf>,
    /// The port hybrid-vsock guests connect to.
    pub port: u32,
    pub metrics: Option<String>,
}

/// Why the daemon cannot start.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The configuration forbids what was asked (a non-loopback listener, ...).
    #[error("{0}")]
    Refused(String),
    #[error("cannot find my own executable: {0}")]
    OwnExecutable(#[source] std::io::Error),
    #[error("cannot listen on {at}: {source}")]
    Listen {
        at: String,
        #[source]
        source: std::io::Error,
    },
    /// The CUDA executor was asked for (the default) and cannot start here.
    #[error(
        "no usable GPU: {}. Fix: install or check the NVIDIA driver (R580 or newer, for \
         CUDA 13): `nvidia-smi` must list the GPU. For tests without a GPU only, pass \
         --executor host-memory (a test double: kernels do not run, results are not computed)",
        no_gpu_reason(*.0)
    )]
    NoGpu(CudaStatus),
    #[error("cannot serve metrics at {at}: {source}")]
    Metrics {
        at: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why the CUDA executor could not start, in words (the log has the details).
fn no_gpu_reason(status: CudaStatus) -> String {
    let why = match status {
        CudaStatus::ErrorInsufficientDriver => {
            "the NVIDIA driver is too old for CUDA 13 or lacks entry points vmcuda needs"
        }
        CudaStatus::ErrorNoDevice => {
            "no NVIDIA driver library (libcuda.so.1), or it sees no GPU (or the library found \
             is vmcuda's own guest driver)"
        }
        _ => "the NVIDIA driver failed to start",
    };
    format!("{why} ({status})")
}

/// What `--executor auto` prints when it falls back to the test double.
fn auto_fallback_notice(status: CudaStatus) -> String {
    format!(
        "vmcuda-host: WARNING: {}.\n\
         vmcuda-host: WARNING: --executor auto serves the HOST-MEMORY TEST DOUBLE instead: \
         kernels do not run, results are not computed.\n\
         vmcuda-host: WARNING: for real work, fix the driver and serve with --executor cuda \
         (the default).",
        no_gpu_reason(status)
    )
}

/// A started daemon: its accepting threads.
pub struct Running {
    /// Where the Unix listeners (including hybrid-vsock ones) are.
    pub unix: Vec<PathBuf>,
    /// The metrics endpoint's address, when there is one.
    pub metrics: Option<std::net::SocketAddr>,
    /// The admin socket, when it is open.
    pub admin: Option<PathBuf>,
    listeners: Vec<JoinHandle<()>>,
    sockets: Sockets,
}

impl Running {
    /// Accept until the process ends. SIGTERM and SIGINT end it after removing its
    /// socket files; so does the end of every listener.
    pub fn join(self) {
        for h in self.listeners {
            let _ = h.join();
        }
        drop(self.sockets);
    }
}

/// Start listening as `at` and `policy` say, with workers made from `template`. An
/// empty `template.exe` is this process's own executable.
pub fn start(
    mut at: Listeners,
    policy: &Policy,
    tls: Option<&TlsServer>,
    peers: Option<PeerTls>,
    mut template: WorkerTemplate,
) -> Result<Running, ServeError> {
    // The pre-admission log's summary thread, started now rather than at the first
    // stranger's line: the daemon's threads are what they will be from the start.
    std::sync::LazyLock::force(&crate::admission::PRE_ADMISSION_LOG);
    match worker::request_poll_window().as_micros() {
        0 => info!("workers sleep until each request comes (VMCUDA_POLL_US to poll first)"),
        us => info!("workers poll {us} us for each request before sleeping (VMCUDA_POLL_US)"),
    }
    // This host's GPUs and their memory, for the admin API's check of grants.
    let mut gpus = Vec::new();
    template.executor = match template.executor {
        ExecutorChoice::Cuda => match CudaExecutor::new(&GpuSelection::all()) {
            Ok(mut cuda) => {
                info!("{}", cuda.banner());
                gpus = gpu_capacities(&mut cuda);
                ExecutorChoice::Cuda
            }
            // Never a test double in its place: a guest would get uncomputed results.
            Err(status) => return Err(ServeError::NoGpu(status)),
        },
        ExecutorChoice::Auto => match CudaExecutor::new(&GpuSelection::all()) {
            Ok(mut cuda) => {
                info!("{}", cuda.banner());
                gpus = gpu_capacities(&mut cuda);
                ExecutorChoice::Cuda
            }
            Err(status) => {
                warn!("no usable GPU ({status}); --executor auto falls back to the host-memory test executor");
                // On stderr whatever the log filter: this daemon now computes nothing.
                eprintln!("{}", auto_fallback_notice(status));
                ExecutorChoice::HostMemory
            }
        },
        other => other,
    };
    if template.executor == ExecutorChoice::HostMemory {
        warn!("{}", host_memory::BANNER);
        if let Ok(Ok(mut exec)) =
            host_memory::HostMemoryExecutor::new(template.host_memory_bytes, None)
                .map(|e| e.with_devices(template.host_memory_devices, &GpuSelection::all()))
        {
            gpus = gpu_capacities(&mut exec);
        }
    }
    // The jail's namespaces include a pid namespace for each worker, which the daemon
    // makes as it starts the worker. Not for workers on the GPU: NVIDIA's driver does
    // not start in a pid namespace that sees the host's /proc (measured on the H100,
    // driver 580: cuInit fails in every worker), and a private /proc would hide the
    // other workers the ledger tells live by their host pids.
    let jail = &policy.config.jail;
    template.pid_namespace = jail.enabled()
        && jail.namespaces.unwrap_or(true)
        && template.executor == ExecutorChoice::HostMemory;
    if jail.enabled() && jail.namespaces.unwrap_or(true) && !template.pid_namespace {
        info!("GPU workers get no pid namespace (NVIDIA's driver needs the host's /proc to match its pid)");
    }
    template.pre_admission = PreAdmission {
        max_pending: policy.config.admission.max_pending(),
        max_pending_per_source: policy.config.admission.max_pending_per_source(),
        hello_timeout: policy.config.admission.hello_timeout(),
    };
    if template.exe.as_os_str().is_empty() {
        template.exe = std::env::current_exe().map_err(ServeError::OwnExecutable)?;
    }
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
        policy.check_tcp_listen(addr).map_err(ServeError::Refused)?;
        let loopback = addr
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback());
        if !loopback && tls.is_none_or(|t| !t.required) {
            warn!(%addr, "TCP guests here may send their tokens and data unencrypted; \
                configure [tcp] tls_cert and tls_key (and leave require_tls on)");
        }
    }
    if let Some(idle_after) = policy.config.suspend.idle_after_ms.filter(|&ms| ms > 0) {
        let state_dir = template
            .state_dir
            .clone()
            .unwrap_or_else(|| policy.state_dir().to_path_buf());
        crate::suspend::idle::IdlePolicy {
            operator: std::sync::Arc::new(crate::suspend::idle::Commands {
                exe: template.exe.clone(),
                state_dir: state_dir.clone(),
                config: template.config.clone(),
                executor: template.executor.as_arg(),
                lock_timeout: std::time::Duration::from_millis(
                    policy.config.suspend.lock_timeout_ms.unwrap_or(1000),
                ),
            }),
            state_dir,
            idle_after: std::time::Duration::from_millis(idle_after),
            keep_free: policy.config.suspend.keep_free.map_or(0, |b| b.0),
        }
        .spawn()
        .map_err(|e| ServeError::Refused(format!("the idle policy's thread: {e}")))?;
    }
    let mut metrics_local = None;
    let metrics_at = at.metrics.clone().or(policy.config.metrics.listen.clone());
    if let Some(addr) = &metrics_at {
        policy
            .check_metrics_listen(addr)
            .map_err(ServeError::Refused)?;
        let mut known_vms: Vec<metrics::KnownVm> = policy
            .config
            .vms
            .iter()
            .map(|v| metrics::KnownVm {
                name: v.name.clone(),
                host_memory: policy.host_memory_of(&v.name),
            })
            .collect();
        if policy.config.local.allow {
            known_vms.push(metrics::KnownVm {
                name: "local".into(),
                host_memory: policy.host_memory_of("local"),
            });
        }
        let source = metrics::Source {
            state_dir: template
                .state_dir
                .clone()
                .unwrap_or_else(|| policy.state_dir().to_path_buf()),
            known_vms,
            grants_over: policy
                .config
                .admin
                .enabled()
                .then(|| template.config.clone()),
        };
        let (local, _) = metrics::serve(addr, source).map_err(|source| ServeError::Metrics {
            at: addr.clone(),
            source,
        })?;
        info!("serving metrics at http://{local}/metrics");
        metrics_local = Some(local);
    }
    let mut listeners = Vec::new();
    if let (Some(config), Some(tls)) = (&policy.config.peers, peers) {
        let broker = Arc::new(Broker::new(
            config.advertise().to_string(),
            config.allow.clone(),
            tls.client,
        ));
        let (_, h) =
            peer::broker::listen(broker.clone(), &config.listen, tls.server).map_err(|source| {
                ServeError::Listen {
                    at: format!("[peers] listen {}", config.listen),
                    source,
                }
            })?;
        listeners.push(h);
        template.broker = Some(broker);
    } else {
        info!("no [peers]: copies between this host's GPUs and other hosts' go through the guest");
    }
    let max_exports = policy.config.ipc.max_exports();
    if max_exports > 0 {
        template.ipc = Some(Arc::new(crate::ipc::Registry::new(max_exports)));
    } else {
        info!("[ipc] max_exports = 0: CUDA IPC between a VM's processes is off");
    }
    // Workers' log lines pass through this daemon, under their VMs' limits.
    crate::spawn::WorkerLogs::host();
    let template = Arc::new(template);
    let listen_error = |at: String| move |source| ServeError::Listen { at, source };
    // Bound so far: removed again when a later listener cannot start, or the daemon
    // stops (a stop signal's handler removes them too, from the first one on).
    socket_files::install_stop_handlers();
    let mut sockets = Sockets(Vec::new());
    for (path, caller) in unix {
        let (h, owned) = daemon::listen_unix(&path, template.clone(), caller)
            .map_err(listen_error(path.display().to_string()))?;
        listeners.push(h);
        sockets.0.push(owned);
    }
    for addr in &at.tcp {
        let h = daemon::listen_tcp(addr, template.clone()).map_err(listen_error(addr.clone()))?;
        listeners.push(h);
    }
    if let Some(port) = at.vsock {
        let h = daemon::listen_vsock(port, template.clone()).map_err(listen_error(format!(
            "vsock port {port} (is the vhost_vsock module loaded?)"
        )))?;
        listeners.push(h);
    }
    // Last: a daemon that cannot have its guests' sockets (another daemon has them)
    // says so, rather than that its admin socket is taken.
    let mut admin_socket = None;
    if policy.config.admin.enabled() {
        let state_dir = template
            .state_dir
            .clone()
            .unwrap_or_else(|| policy.state_dir().to_path_buf());
        let started = start_admin(policy, template.config.as_deref(), &state_dir, gpus)?;
        listeners.push(started.thread);
        sockets.0.push(started.owned);
        admin_socket = Some(started.path);
    } else {
        info!("[admin] enable = false: no admin socket, no run-time grants");
    }
    Ok(Running {
        unix: sockets
            .0
            .iter()
            .map(|o| o.path().to_path_buf())
            .filter(|p| Some(p) != admin_socket.as_ref())
            .collect(),
        admin: admin_socket,
        metrics: metrics_local,
        listeners,
        sockets,
    })
}

/// The admin socket (`crate::admin`), its grants not asked to persist dropped first.
fn start_admin(
    policy: &Policy,
    config: Option<&std::path::Path>,
    state_dir: &std::path::Path,
    gpus: Vec<crate::admin::server::Gpu>,
) -> Result<crate::admin::server::Started, ServeError> {
    use crate::admin::{auth, server};
    let group = match &policy.config.admin.group {
        Some(name) => Some((
            name.clone(),
            auth::resolve_group(name).map_err(ServeError::Refused)?,
        )),
        None => None,
    };
    let allowed = auth::Allowed {
        daemon_uid: nix::unistd::getuid().as_raw(),
        group,
    };
    let mut admin = server::Admin::new(config, state_dir, allowed);
    if policy.config.admin.overcommit == Some(true) {
        info!(
            "[admin] overcommit = true: run-time grants may promise more GPU memory than there is"
        );
    } else {
        if gpus.is_empty() {
            warn!("the GPUs' memory is unknown: run-time grants are not checked against it");
        }
        admin = admin.with_capacity(gpus);
    }
    admin
        .drop_transient()
        .map_err(|e| ServeError::Refused(format!("run-time grants: {e}")))?;
    admin
        .listen(&policy.config.admin.socket(state_dir))
        .map_err(ServeError::Refused)
}

/// Each GPU `exec` has, with its memory.
fn gpu_capacities(exec: &mut dyn Executor) -> Vec<crate::admin::server::Gpu> {
    (0..exec.device_count())
        .filter_map(|d| {
            let p = exec.device_properties(d).ok()?;
            Some(crate::admin::server::Gpu {
                uuid: crate::executor::cuda::format_uuid(&p.uuid),
                memory: p.total_global_mem,
            })
        })
        .collect()
}

/// The socket files a daemon bound, removed when it is dropped (only those still
/// its own: see [`socket_files`]).
struct Sockets(Vec<socket_files::Owned>);

impl Drop for Sockets {
    fn drop(&mut self) {
        socket_files::remove(&self.0);
    }
}
