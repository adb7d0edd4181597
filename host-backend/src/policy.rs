//! Who may use this host's GPUs, and how much of them: the host configuration file
//! (`/etc/vmcuda/host.toml`, documented in `docs/configuration.md`).
//!
//! Every guest connection names a [`Caller`] (known from the transport, never from the
//! guest's own word) and, over TCP, a token from its hello. [`Policy::admit`] turns
//! that into a [`Grant`] (the GPUs it sees, its quota and limits) or a [`Refusal`]
//! whose reason goes to both the host log and the guest. Without a configuration file
//! the built-in default admits programs on the host itself (the Unix socket, guarded by
//! its file permissions) and refuses every VM and every TCP caller.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use thiserror::Error;
use vmcuda_wire::tls;
use vmcuda_wire::CudaStatus;

use crate::tls::TlsServer;

mod ids;
mod secret;
pub use ids::{parse_size, ByteSize, Caller, GpuId, GpuSelection, Gpus};
pub use secret::Secret;

/// Where the daemon looks for its configuration when none is named.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/vmcuda/host.toml";

/// Tokens shorter than this are refused when the configuration is loaded: a guessable
/// token is no authentication.
pub const MIN_TOKEN_LEN: usize = 16;

/// `VMADDR_CID_LOCAL`: the vsock address of this machine itself.
const VSOCK_LOOPBACK_CID: u32 = 1;

/// Default limits: generous for real programs (PyTorch uses tens of streams and a few
/// thousand events and modules), small enough that one guest cannot exhaust the host.
const DEFAULT_MAX_STREAMS: u32 = 1024;
const DEFAULT_MAX_EVENTS: u32 = 65536;
const DEFAULT_MAX_MODULES: u32 = 8192;
/// Each connection costs a worker process and a CUDA context (hundreds of MiB of GPU
/// memory the quota does not see), so a VM may not open them without bound.
const DEFAULT_MAX_CONNECTIONS: u32 = 128;
/// Frame buffers of a VM's workers: room for many connections' 4 MiB copy chunks and
/// a few large module images at once.
const DEFAULT_BUFFER_MEMORY: u64 = 1 << 30;
/// Host memory a VM's workers keep for it (graphs and their nodes' parameters, module
/// images, frame buffers, handle tables): a hundred thousand captured launches with
/// kilobytes of parameters each, far more than real programs keep, and small enough
/// that a few hostile VMs cannot push a host of ordinary size into its OOM killer.
const DEFAULT_HOST_MEMORY: u64 = 4 << 30;
/// Page-locked guest memory: without a quota, nothing else bounds what the driver is
/// asked to pin for one connection.
const DEFAULT_MAX_REGISTRATIONS: u32 = 4096;
const DEFAULT_REGISTERED_MEMORY: u64 = 64 << 30;

/// Where workers keep state shared between a VM's connections (its ledger).
pub const DEFAULT_STATE_DIR: &str = "/run/vmcuda";

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    #[error("{path}: [tcp] tls_cert and tls_key are not usable: {source}")]
    Tls {
        path: PathBuf,
        source: vmcuda_wire::tls::TlsError,
    },
    #[error("{path}: [peers] tls_cert, tls_key and ca are not usable: {source}")]
    PeerTls {
        path: PathBuf,
        source: vmcuda_wire::tls::TlsError,
    },
}

/// The configuration file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where workers keep what a VM's connections share (the quota ledger).
    pub state_dir: Option<PathBuf>,
    /// Where the VMs' module caches live, one directory each (see `module_cache`).
    /// Default: `modules/` in the state directory.
    pub module_cache_dir: Option<PathBuf>,
    /// Limits for every guest that its own entry does not override.
    #[serde(default)]
    pub defaults: Limits,
    /// Programs on the host itself, through the daemon's Unix socket.
    #[serde(default)]
    pub local: Local,
    #[serde(default)]
    pub tcp: Tcp,
    /// The daemon's Prometheus endpoint.
    #[serde(default)]
    pub metrics: Metrics,
    /// Connections not admitted yet.
    #[serde(default)]
    pub admission: Admission,
    /// The VMs allowed in, one `[[vm]]` table each.
    #[serde(default, rename = "vm")]
    pub vms: Vec<Vm>,
    /// How workers are confined once their guest is admitted (see `jail`).
    #[serde(default)]
    pub jail: crate::jail::JailConfig,
    /// The link to other daemons for copies between their GPUs (see `peer`). None:
    /// such copies go through the guest.
    pub peers: Option<Peers>,
    /// CUDA IPC between one VM's processes (see `ipc`).
    #[serde(default)]
    pub ipc: Ipc,
    #[serde(default)]
    pub suspend: SuspendPolicy,
    #[serde(default)]
    pub reconnect: ReconnectPolicy,
    /// The daemon's admin socket, through which grants are made at run time (see
    /// `crate::admin`). Read when the daemon starts.
    #[serde(default)]
    pub admin: Admin,
    /// VMs' turns on the GPU: shares, priorities, caps (see `crate::compute`).
    #[serde(default)]
    pub compute: crate::compute::ComputeConfig,
}

/// `[reconnect]`: how long a worker holds its session after its connection drops, for
/// its guest to come back to ([`crate::resume`]). Read by each worker at admission.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconnectPolicy {
    /// Milliseconds; 0 turns reconnecting off (a dropped connection ends its session at
    /// once). Default [`crate::resume::DEFAULT_HOLD`].
    pub hold_ms: Option<u64>,
}

impl ReconnectPolicy {
    pub fn hold(&self) -> std::time::Duration {
        self.hold_ms.map_or(
            crate::resume::DEFAULT_HOLD,
            std::time::Duration::from_millis,
        )
    }
}

/// `[admin]`: the daemon's control socket for run-time grants (docs/admin-api.md).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// Whether the daemon opens the admin socket. Default true.
    pub enable: Option<bool>,
    /// Where the socket is. Default `admin.sock` in the state directory.
    pub socket: Option<PathBuf>,
    /// A group whose members may use the socket besides root (and the daemon's own
    /// user). Default: none.
    pub group: Option<String>,
    /// Whether run-time grants may promise a GPU more memory than it has. Default
    /// false: the memory quotas of the grants that see a GPU must fit in its memory,
    /// and a grant without a quota takes the whole of every GPU it sees.
    pub overcommit: Option<bool>,
}

impl Admin {
    pub fn enabled(&self) -> bool {
        self.enable.unwrap_or(true)
    }

    /// The socket's path, with `state_dir` the state directory in use.
    pub fn socket(&self, state_dir: &Path) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| state_dir.join(crate::admin::SOCKET_NAME))
    }
}

/// `[suspend]`: VMs the daemon suspends by itself ([`crate::suspend`]). Read when the
/// daemon starts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuspendPolicy {
    /// Suspend a VM whose workers have run no request for this long (milliseconds),
    /// and resume it when its guest calls again. 0 or absent: never.
    pub idle_after_ms: Option<u64>,
    /// How long a policy suspend waits for a worker's CUDA calls in flight (it then
    /// leaves the VM running and tries again after another idle period). Default 1000.
    pub lock_timeout_ms: Option<u64>,
    /// GPU memory kept free for new guests' first allocations: while less is free
    /// (NVML's figure, CUDA executor only), the VM idle longest gives way. Default 0.
    pub keep_free: Option<ByteSize>,
}

impl SuspendPolicy {
    /// How long an allocation the GPU has no room for waits while the idle policy
    /// makes room: [`ROOM_WAIT`] where the policy keeps memory free, else nothing.
    pub fn room_wait(&self) -> std::time::Duration {
        let keeps_free =
            self.idle_after_ms.is_some_and(|ms| ms > 0) && self.keep_free.is_some_and(|b| b.0 > 0);
        if keeps_free {
            ROOM_WAIT
        } else {
            std::time::Duration::ZERO
        }
    }
}

/// How long an allocation waits for room on a host that keeps GPU memory free.
pub const ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `[ipc]`: what the daemon's registry of CUDA IPC exports allows. Read when the daemon
/// starts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ipc {
    /// Exports (memory and events) one VM's connections may hold at once; more are
    /// refused. Default [`crate::ipc::DEFAULT_MAX_EXPORTS`]; 0 turns CUDA IPC off.
    pub max_exports: Option<u32>,
}

impl Ipc {
    pub fn max_exports(&self) -> u32 {
        self.max_exports.unwrap_or(crate::ipc::DEFAULT_MAX_EXPORTS)
    }
}

/// `[peers]`: this daemon's mutual-TLS link to other daemons, over which a guest's
/// copies between devices of two hosts go host to host. Read when the daemon starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peers {
    /// Where this daemon listens for other daemons, e.g. "10.0.0.5:7732".
    pub listen: String,
    /// The endpoint other daemons reach this one at (HOST:PORT; HOST must be a name
    /// or address the certificate is for). Default: `listen`.
    pub advertise: Option<String>,
    /// This daemon's certificate (PEM, leaf first), presented as server and as client.
    pub tls_cert: PathBuf,
    /// Its private key.
    pub tls_key: PathBuf,
    /// The CA whose certificates other daemons must present, both ways.
    pub ca: PathBuf,
    /// The only endpoints (HOST:PORT, as other daemons advertise them) this daemon
    /// ever connects to for a guest.
    #[serde(default)]
    pub allow: Vec<String>,
}

impl Peers {
    /// The endpoint this daemon names for itself.
    pub fn advertise(&self) -> &str {
        self.advertise.as_deref().unwrap_or(&self.listen)
    }
}

/// Limits; in `[defaults]`, `[local]` and each `[[vm]]`, where unset ones inherit.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The GPUs the guest sees, in its own device order: `"all"`, or a list of host
    /// device ordinals (as nvidia-smi numbers them) and `GPU-...` UUIDs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Gpus>,
    /// GPU memory the guest may hold at once, in bytes or with a unit ("16GiB").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_quota: Option<ByteSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_events: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_modules: Option<u32>,
    /// Connections (guest processes) the VM may have open at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Host memory the VM's workers may hold in frame buffers, all its connections
    /// together (bytes or with a unit). A frame that would need more is refused with
    /// cudaErrorMemoryAllocation. Default 1 GiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer_memory: Option<ByteSize>,
    /// Host memory the VM's workers may keep for it, all its connections together
    /// (bytes or with a unit): graph nodes and their parameters, module images, frame
    /// buffers, handle tables (see docs/security.md, "Host memory"). What would go
    /// over is refused with cudaErrorMemoryAllocation. Default 4 GiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<ByteSize>,
    /// Host memory registrations (pinned or shared guest memory, not counting the guest
    /// library's staging area) a connection may hold at once. Default 4096.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_registrations: Option<u32>,
    /// Bytes those registrations may span together, per connection, whether or not a
    /// memory_quota is set. Default 64 GiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered_memory: Option<ByteSize>,
    /// The VM's module cache on this host's disk (under the state directory): bytes of
    /// module and library images its processes loaded, kept by SHA-256 so that they
    /// cross the connection once (see `module_cache`). `0` turns it off. Default 1 GiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module_cache: Option<ByteSize>,
    /// The VM's share of the GPUs' time: a weight (active VMs get time in proportion
    /// to their shares). Default 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_share: Option<u32>,
    /// `batch`, `normal` (the default) or `latency`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_priority: Option<crate::compute::Priority>,
    /// At most this percent of the GPUs' time, even when nobody else wants it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_cap: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Local {
    /// Whether programs on the host may connect through the Unix socket.
    #[serde(default = "yes")]
    pub allow: bool,
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for Local {
    fn default() -> Self {
        Local {
            allow: true,
            limits: Limits::default(),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcp {
    /// Addresses to listen on, e.g. "127.0.0.1:7731".
    #[serde(default)]
    pub listen: Vec<String>,
    /// Listening anywhere but loopback must be asked for by name.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// The host's TLS certificate (PEM; the chain, leaf first). With `tls_key` it turns
    /// every TCP listener, these and `--tcp` ones, into a TLS listener, which guests
    /// reach as `tls:HOST:PORT`. Read and checked when the configuration loads, and
    /// again by each connection's worker, so a renewed certificate needs no restart.
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1); it must belong to
    /// `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Whether TLS listeners turn plain-TCP guests away (telling them to use `tls:`).
    /// Default: true when a certificate is configured; `false` lets plain and TLS
    /// guests share the listeners while guests move over. Tokens are needed either way.
    pub require_tls: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// Where the daemon serves `GET /metrics`, e.g. "127.0.0.1:9731" (`--metrics`
    /// overrides it). None: no endpoint.
    pub listen: Option<String>,
    /// Serving it anywhere but loopback must be asked for by name: it names the VMs and
    /// what they do.
    #[serde(default)]
    pub allow_non_loopback: bool,
}

/// What a connection may cost before its guest is admitted (see
/// [`crate::admission`]). Read when the daemon starts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    /// Connections per listener that may wait for admission at once; more are closed
    /// as they arrive. Default [`crate::admission::DEFAULT_MAX_PENDING`].
    pub max_pending: Option<u32>,
    /// Of those, how many may come from one source (a vsock CID, a TCP address, a Unix
    /// peer's uid). Default a quarter of `max_pending`.
    pub max_pending_per_source: Option<u32>,
    /// How long a new connection has to send its hello (a TLS handshake included)
    /// before it is dropped, in milliseconds. Default 5000.
    pub hello_timeout_ms: Option<u64>,
}

impl Admission {
    pub fn max_pending(&self) -> u32 {
        self.max_pending
            .unwrap_or(crate::admission::DEFAULT_MAX_PENDING)
    }

    pub fn max_pending_per_source(&self) -> u32 {
        self.max_pending_per_source
            .unwrap_or_else(|| crate::admission::default_max_pending_per_source(self.max_pending()))
            .min(self.max_pending())
    }

    pub fn hello_timeout(&self) -> std::time::Duration {
        self.hello_timeout_ms.map_or(
            crate::admission::DEFAULT_HELLO_TIMEOUT,
            std::time::Duration::from_millis,
        )
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    /// The VM's name: what the vhost-user device is started with (`--vm-name`), and
    /// what the host log calls it.
    pub name: String,
    /// Its vsock context id, for connections through the kernel's vhost-vsock.
    pub cid: Option<u32>,
    /// A hybrid-vsock VMM's socket (Firecracker `uds_path`, cloud-hypervisor
    /// `--vsock socket=`): the daemon listens on `PATH_<port>` for this VM.
    pub hybrid_vsock: Option<PathBuf>,
    /// The token this VM presents over TCP (inline), wiped from memory when dropped, ...
    pub token: Option<Secret>,
    /// ... or the file holding it (first line), which keeps secrets out of this file.
    pub token_file: Option<PathBuf>,
    /// Whether the VM may connect over TCP (with its token).
    #[serde(default)]
    pub tcp: bool,
    /// A Unix user on this host whose programs, through the daemon's Unix socket, are
    /// this VM's guests (its quota and limits instead of `[local]`'s).
    pub uid: Option<u32>,
    /// Whether a privileged guest process (one connecting from a reserved vsock port,
    /// so root in the guest) may have its copies made straight from the guest's RAM
    /// through the vhost-user device (see docs/security.md). Default on.
    #[serde(default = "default_true")]
    pub guest_memory_copies: bool,
    #[serde(flatten)]
    pub limits: Limits,
}

fn default_true() -> bool {
    true
}

/// The token in a `token_file`: its first line, trimmed, at least [`MIN_TOKEN_LEN`] long.
/// The file's text is wiped once read, as the token is when dropped.
fn read_token_file(path: &Path) -> Result<Secret, String> {
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path).map_err(|e| format!("cannot read token file: {e}"))?,
    );
    let t = Secret::new(text.lines().next().unwrap_or("").trim().to_string());
    if t.len() >= MIN_TOKEN_LEN {
        Ok(t)
    } else {
        Err(format!(
            "token file holds no usable token (at least {MIN_TOKEN_LEN} characters)"
        ))
    }
}

/// What an admitted guest may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// What the host log calls this guest ("vm1", "local").
    pub name: String,
    pub gpus: GpuSelection,
    pub memory_quota: Option<u64>,
    pub max_streams: u32,
    pub max_events: u32,
    pub max_modules: u32,
    pub max_connections: u32,
    /// Host memory for the VM's workers' frame buffers, all its connections together.
    pub buffer_memory: u64,
    /// Host memory the VM's workers may keep for it, all its connections together.
    pub host_memory: u64,
    /// Host memory registrations besides the staging area, per connection: how many,
    /// and how many bytes together.
    pub registrations: crate::guest_ram::RegistrationLimits,
    /// Bytes of the VM's module cache (0: none).
    pub module_cache: u64,
    /// Its turns on the GPU.
    pub compute: crate::compute::ComputeShare,
}

impl Grant {
    /// Everything, no quota: for tests and the host-memory executor's own use.
    pub fn unlimited(name: &str) -> Grant {
        Grant {
            name: name.into(),
            gpus: GpuSelection::all(),
            memory_quota: None,
            max_streams: u32::MAX,
            max_events: u32::MAX,
            max_modules: u32::MAX,
            max_connections: u32::MAX,
            buffer_memory: u64::MAX,
            host_memory: u64::MAX,
            registrations: crate::guest_ram::RegistrationLimits::UNLIMITED,
            module_cache: 0,
            compute: Default::default(),
        }
    }
}

/// Why a guest was turned away: `guest` is what the guest is told (nothing about the
/// host's configuration), `host` what the host log says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: CudaStatus,
    pub guest: String,
    pub host: String,
}

impl Refusal {
    fn not_permitted(guest: impl Into<String>, host: impl Into<String>) -> Refusal {
        Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: guest.into(),
            host: host.into(),
        }
    }
}

/// [`Policy::source`] of the built-in default.
const BUILTIN_SOURCE: &str = "the built-in default (no configuration file)";

/// A loaded, checked configuration.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub config: Config,
    /// Where it came from, for messages ("built-in default" when nowhere).
    pub source: String,
    /// The run-time grants file merged over the configuration (see `crate::admin`),
    /// when one was: workers hide it once admitted, as they hide token files.
    pub grants_file: Option<PathBuf>,
    /// The names of the `[[vm]]` entries that run-time grants made or replaced.
    pub granted: Vec<String>,
}

impl Policy {
    /// The built-in default: local programs yes, VMs and TCP no.
    pub fn builtin() -> Policy {
        Policy {
            config: Config::default(),
            source: BUILTIN_SOURCE.into(),
            ..Policy::default()
        }
    }

    /// Where a setting named in a message goes: the file in use, or, with none, the
    /// default path and how to start one.
    fn file_to_edit(&self) -> String {
        if self.source.is_empty() || self.source == BUILTIN_SOURCE {
            format!(
                "{DEFAULT_CONFIG_PATH} (no configuration file is read now: create that \
                 one, or name another with --config)"
            )
        } else {
            self.source.clone()
        }
    }

    /// Load `path`, or the default path when it exists, or the built-in default.
    pub fn load(path: Option<&Path>) -> Result<Policy, ConfigError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => DEFAULT_CONFIG_PATH.into(),
            None => return Ok(Policy::builtin()),
        };
        // The text holds every VM's inline token: wiped once parsed.
        let text = zeroize::Zeroizing::new(std::fs::read_to_string(&path).map_err(|source| {
            ConfigError::Read {
                path: path.clone(),
                source,
            }
        })?);
        Policy::parse(&text, &path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Policy, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        check(&config, path)?;
        Ok(Policy {
            config,
            source: path.display().to_string(),
            ..Policy::default()
        })
    }

    /// [`Policy::load`], with the run-time grants of the daemon whose state directory
    /// is `state_dir` (default: the configuration's) merged over it: each grant is a
    /// `[[vm]]` entry, in place of the file's entry of the same name, if it has one.
    /// Grants that no longer agree with the file (a cid or token an entry of the file
    /// took since) are left out, with a warning, rather than refuse every guest.
    pub fn load_with_grants(
        path: Option<&Path>,
        state_dir: Option<&Path>,
    ) -> Result<Policy, ConfigError> {
        let mut policy = Policy::load(path)?;
        let dir = state_dir.unwrap_or(policy.state_dir()).to_path_buf();
        let file = crate::admin::grants_path(&dir);
        match crate::admin::store::load(&file) {
            Ok(grants) if grants.is_empty() => {}
            Ok(grants) => {
                let vms: Vec<Vm> = grants.iter().map(|g| g.to_vm()).collect();
                match policy.with_vms(vms) {
                    Ok(merged) => policy = merged,
                    Err(e) => tracing::warn!("run-time grants in {} left out: {e}", file.display()),
                }
                policy.grants_file = Some(file);
            }
            Err(e) => tracing::warn!("run-time grants left out: {e}"),
        }
        Ok(policy)
    }

    /// This policy with `vms` over its `[[vm]]` entries (each in place of the entry of
    /// its name), checked as a whole as a configuration file is.
    pub fn with_vms(&self, vms: Vec<Vm>) -> Result<Policy, ConfigError> {
        let mut config = self.config.clone();
        let mut granted = self.granted.clone();
        for vm in vms {
            config.vms.retain(|v| v.name != vm.name);
            if !granted.contains(&vm.name) {
                granted.push(vm.name.clone());
            }
            config.vms.push(vm);
        }
        check(&config, Path::new(&self.source))?;
        Ok(Policy {
            config,
            source: self.source.clone(),
            grants_file: self.grants_file.clone(),
            granted,
        })
    }
}

/// The checks a configuration passes before anything is admitted under it.
fn check(config: &Config, path: &Path) -> Result<(), ConfigError> {
    {
        let invalid = |msg: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        let mut seen_names = std::collections::HashSet::new();
        let mut seen_cids = std::collections::HashSet::new();
        let mut seen_uids = std::collections::HashSet::new();
        let mut seen_tokens = std::collections::HashSet::new();
        for vm in &config.vms {
            if vm.name.is_empty() || vm.name.contains(|c: char| c.is_control()) {
                return Err(invalid(format!("[[vm]] name {:?} is not usable", vm.name)));
            }
            if !seen_names.insert(vm.name.as_str()) {
                return Err(invalid(format!(
                    "two [[vm]] entries are named {:?}",
                    vm.name
                )));
            }
            if let Some(cid) = vm.cid {
                if cid <= 2 {
                    return Err(invalid(format!(
                        "VM {:?}: cid {cid} is reserved (guests have cid 3 or more)",
                        vm.name
                    )));
                }
                if !seen_cids.insert(cid) {
                    return Err(invalid(format!("two [[vm]] entries have cid {cid}")));
                }
            }
            if let Some(uid) = vm.uid {
                if !seen_uids.insert(uid) {
                    return Err(invalid(format!("two [[vm]] entries have uid {uid}")));
                }
            }
            if vm.token.is_some() && vm.token_file.is_some() {
                return Err(invalid(format!(
                    "VM {:?}: give token or token_file, not both",
                    vm.name
                )));
            }
            if let Some(t) = &vm.token {
                if !seen_tokens.insert(t.as_bytes()) {
                    return Err(invalid(format!(
                        "VM {:?}: its token is another VM's too",
                        vm.name
                    )));
                }
                if t.len() < MIN_TOKEN_LEN {
                    return Err(invalid(format!(
                        "VM {:?}: the token is shorter than {MIN_TOKEN_LEN} characters",
                        vm.name
                    )));
                }
            }
            if vm.tcp && vm.token.is_none() && vm.token_file.is_none() {
                return Err(invalid(format!(
                    "VM {:?}: tcp = true needs a token or token_file",
                    vm.name
                )));
            }
        }
        for limits in std::iter::once(&config.defaults)
            .chain(std::iter::once(&config.local.limits))
            .chain(config.vms.iter().map(|v| &v.limits))
        {
            if let Some(Gpus::Named(n)) = &limits.gpus {
                if n != "all" {
                    return Err(invalid(format!(
                        "gpus = {n:?}: write \"all\" or a list like [0, 1]"
                    )));
                }
            }
        }
        let admission = &config.admission;
        if admission.max_pending == Some(0)
            || admission.max_pending_per_source == Some(0)
            || admission.hello_timeout_ms == Some(0)
        {
            return Err(invalid(
                "[admission] max_pending, max_pending_per_source and hello_timeout_ms must be at least 1".into(),
            ));
        }
        let tcp = &config.tcp;
        if tcp.tls_cert.is_some() != tcp.tls_key.is_some() {
            return Err(invalid(
                "[tcp] tls_cert and tls_key go together: give both or neither".into(),
            ));
        }
        if tcp.require_tls == Some(true) && tcp.tls_cert.is_none() {
            return Err(invalid(
                "[tcp] require_tls = true needs tls_cert and tls_key".into(),
            ));
        }
        if let Some(peers) = &config.peers {
            for endpoint in std::iter::once(&peers.listen)
                .chain(peers.advertise.iter())
                .chain(peers.allow.iter())
            {
                if !endpoint.contains(':') || tls::host_of(endpoint).is_empty() {
                    return Err(invalid(format!("[peers] {endpoint:?} is not HOST:PORT")));
                }
            }
        }
        Ok(())
    }
}

impl Policy {
    /// The mutual-TLS configurations of `[peers]`, when it is there: certificate, key
    /// and CA read and checked now, so a daemon with unusable ones does not start.
    pub fn peer_tls(&self) -> Result<Option<crate::peer::PeerTls>, ConfigError> {
        let Some(peers) = &self.config.peers else {
            return Ok(None);
        };
        let error = |source| ConfigError::PeerTls {
            path: PathBuf::from(&self.source),
            source,
        };
        let server =
            tls::mutual_server_config(&peers.tls_cert, &peers.tls_key, &peers.ca).map_err(error)?;
        let client =
            tls::mutual_client_config(&peers.ca, &peers.tls_cert, &peers.tls_key).map_err(error)?;
        Ok(Some(crate::peer::PeerTls { server, client }))
    }

    /// TLS for TCP listeners, when `[tcp]` configures it: the certificate and key read
    /// and checked against each other. Kept apart from [`Policy::load`] so that only
    /// TLS connections (and the daemon, at start) read them: a bad certificate renewal
    /// stops TLS guests, not every guest.
    pub fn tls_server(&self) -> Result<Option<TlsServer>, ConfigError> {
        let tcp = &self.config.tcp;
        let (Some(cert), Some(key)) = (&tcp.tls_cert, &tcp.tls_key) else {
            return Ok(None);
        };
        let config = tls::server_config(cert, key).map_err(|source| ConfigError::Tls {
            path: PathBuf::from(&self.source),
            source,
        })?;
        Ok(Some(TlsServer {
            config,
            required: tcp.require_tls.unwrap_or(true),
        }))
    }

    /// The VM entry for a caller named by its transport.
    fn vm_for(&self, caller: &Caller) -> Option<&Vm> {
        match caller {
            Caller::VsockCid(cid) => self.config.vms.iter().find(|v| v.cid == Some(*cid)),
            Caller::Vm(name) => self.config.vms.iter().find(|v| &v.name == name),
            _ => None,
        }
    }

    /// The name of the VM whose hybrid-vsock socket is `path`, if one claims it.
    pub fn vm_for_hybrid_socket(&self, path: &Path) -> Option<&str> {
        self.config
            .vms
            .iter()
            .find(|v| v.hybrid_vsock.as_deref() == Some(path))
            .map(|v| v.name.as_str())
    }

    /// Decide on a caller presenting `token` (from its hello).
    pub fn admit(&self, caller: &Caller, token: &[u8]) -> Result<Grant, Refusal> {
        self.admit_as(caller, token, None)
    }

    /// [`Policy::admit`] for a caller whose Unix user the transport tells
    /// (`local_uid`, from the Unix socket's peer credentials): a program on the host
    /// run by a `[[vm]]` entry's `uid` is that VM's guest.
    pub fn admit_as(
        &self,
        caller: &Caller,
        token: &[u8],
        local_uid: Option<u32>,
    ) -> Result<Grant, Refusal> {
        if let (Caller::Local { .. }, Some(uid)) = (caller, local_uid) {
            if let Some(vm) = self.config.vms.iter().find(|v| v.uid == Some(uid)) {
                return Ok(self.grant(&vm.name, &vm.limits));
            }
        }
        match caller {
            // CID 1 is vsock loopback: a program on this machine, not a VM.
            Caller::Local { .. } | Caller::VsockCid(VSOCK_LOOPBACK_CID) => {
                if !self.config.local.allow {
                    return Err(Refusal::not_permitted(
                        "programs on the host are not allowed to use this host's GPUs",
                        format!("refused {caller}: [local] allow = false in {}", self.source),
                    ));
                }
                Ok(self.grant("local", &self.config.local.limits))
            }
            Caller::VsockCid(_) | Caller::Vm(_) => match self.vm_for(caller) {
                Some(vm) => Ok(self.grant(&vm.name, &vm.limits)),
                None => Err(Refusal::not_permitted(
                    "this VM is not allowed to use the host's GPUs (refused by the host's \
                     policy; its administrator can allow it)",
                    format!(
                        "refused {caller}: no [[vm]] entry for it in {}",
                        self.source
                    ),
                )),
            },
            Caller::UnclaimedSocket(path) => Err(Refusal::not_permitted(
                "this VM is not allowed to use the host's GPUs (refused by the host's policy; \
                 its administrator can allow it)",
                format!(
                    "refused a guest on {}: no [[vm]] entry has hybrid_vsock = {:?} in {}",
                    path.display(),
                    path.display().to_string(),
                    self.source
                ),
            )),
            Caller::Tcp(_) => self.admit_tcp(caller, token),
        }
    }

    fn admit_tcp(&self, caller: &Caller, token: &[u8]) -> Result<Grant, Refusal> {
        if token.is_empty() {
            return Err(Refusal::not_permitted(
                "connections over TCP need a token: set VMCUDA_TOKEN or VMCUDA_TOKEN_FILE \
                 in the guest",
                format!("refused {caller}: no token"),
            ));
        }
        // Compare against every entry, in constant time per comparison, so the answer
        // time says nothing about how close a guess was or which entry it hit.
        let mut matched: Option<&Vm> = None;
        for vm in &self.config.vms {
            let Some(expected) = self.token_of(vm) else {
                continue;
            };
            if bool::from(expected.as_bytes().ct_eq(token)) && matched.is_none() {
                matched = Some(vm);
            }
        }
        match matched {
            Some(vm) if vm.tcp => Ok(self.grant(&vm.name, &vm.limits)),
            Some(vm) => Err(Refusal::not_permitted(
                "this VM may not connect over TCP (refused by the host's policy)",
                format!(
                    "refused {caller}: token of VM {:?}, which has tcp = false",
                    vm.name
                ),
            )),
            None => Err(Refusal::not_permitted(
                "the token was not accepted (refused by the host's policy)",
                format!("refused {caller}: unknown token"),
            )),
        }
    }

    fn token_of(&self, vm: &Vm) -> Option<Secret> {
        if let Some(t) = &vm.token {
            return Some(t.clone());
        }
        let path = vm.token_file.as_ref()?;
        match read_token_file(path) {
            Ok(t) => Some(t),
            Err(why) => {
                tracing::warn!(vm = %vm.name, path = %path.display(), "{why}; VM cannot use TCP");
                None
            }
        }
    }

    /// The `token_file`s that cannot be read now, or hold no usable token: one line per
    /// VM. Loading does not read them (admission does, per connection), so a check of
    /// the whole configuration asks here.
    pub fn token_file_problems(&self) -> Vec<String> {
        self.config
            .vms
            .iter()
            .filter_map(|vm| {
                let path = vm.token_file.as_ref()?;
                let why = read_token_file(path).err()?;
                Some(format!("VM {:?}: {} ({why})", vm.name, path.display()))
            })
            .collect()
    }

    /// `limits` over `[defaults]` over the built-in defaults.
    /// Whether the VM named `vm` lets its privileged guest processes copy straight from
    /// guest RAM (`[[vm]] guest_memory_copies`); false for any other caller.
    pub fn guest_memory_copies(&self, vm: &str) -> bool {
        self.config
            .vms
            .iter()
            .any(|v| v.name == vm && v.guest_memory_copies)
    }

    /// What the `[[vm]]` entry named `name` grants its guests, with `[defaults]`.
    pub fn grant_of(&self, name: &str) -> Option<Grant> {
        let vm = self.config.vms.iter().find(|v| v.name == name)?;
        Some(self.grant(&vm.name, &vm.limits))
    }

    /// The `host_memory` granted to the guests of `name`: a `[[vm]]` name, else
    /// programs on the host (`[local]`).
    pub fn host_memory_of(&self, name: &str) -> u64 {
        let limits = match self.config.vms.iter().find(|v| v.name == name) {
            Some(vm) => &vm.limits,
            None => &self.config.local.limits,
        };
        self.grant(name, limits).host_memory
    }

    /// The compute policy granted to the guests of `name` (as [`Policy::host_memory_of`]).
    pub fn compute_of(&self, name: &str) -> crate::compute::ComputeShare {
        let limits = match self.config.vms.iter().find(|v| v.name == name) {
            Some(vm) => &vm.limits,
            None => &self.config.local.limits,
        };
        self.grant(name, limits).compute
    }

    fn grant(&self, name: &str, limits: &Limits) -> Grant {
        let d = &self.config.defaults;
        let gpus = match limits.gpus.as_ref().or(d.gpus.as_ref()) {
            None | Some(Gpus::Named(_)) => GpuSelection::all(),
            Some(Gpus::List(ids)) => GpuSelection(Some(ids.clone())),
        };
        Grant {
            name: name.into(),
            gpus,
            memory_quota: limits.memory_quota.or(d.memory_quota).map(|b| b.0),
            max_streams: limits
                .max_streams
                .or(d.max_streams)
                .unwrap_or(DEFAULT_MAX_STREAMS),
            max_events: limits
                .max_events
                .or(d.max_events)
                .unwrap_or(DEFAULT_MAX_EVENTS),
            max_modules: limits
                .max_modules
                .or(d.max_modules)
                .unwrap_or(DEFAULT_MAX_MODULES),
            max_connections: limits
                .max_connections
                .or(d.max_connections)
                .unwrap_or(DEFAULT_MAX_CONNECTIONS),
            buffer_memory: limits
                .buffer_memory
                .or(d.buffer_memory)
                .map_or(DEFAULT_BUFFER_MEMORY, |b| b.0),
            host_memory: limits
                .host_memory
                .or(d.host_memory)
                .map_or(DEFAULT_HOST_MEMORY, |b| b.0),
            registrations: crate::guest_ram::RegistrationLimits {
                max_count: limits
                    .max_registrations
                    .or(d.max_registrations)
                    .unwrap_or(DEFAULT_MAX_REGISTRATIONS),
                max_bytes: limits
                    .registered_memory
                    .or(d.registered_memory)
                    .map_or(DEFAULT_REGISTERED_MEMORY, |b| b.0),
            },
            module_cache: limits
                .module_cache
                .or(d.module_cache)
                .map_or(crate::module_cache::DEFAULT_MODULE_CACHE, |b| b.0),
            compute: crate::compute::ComputeShare {
                share: limits
                    .compute_share
                    .or(d.compute_share)
                    .unwrap_or(100)
                    .clamp(1, 10_000),
                priority: limits
                    .compute_priority
                    .or(d.compute_priority)
                    .unwrap_or_default(),
                cap: limits
                    .compute_cap
                    .or(d.compute_cap)
                    .map(|c| c.clamp(1, 100)),
            },
        }
    }

    /// Where the VMs' ledgers live.
    pub fn state_dir(&self) -> &Path {
        self.config
            .state_dir
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_STATE_DIR))
    }

    /// Where the VMs' module caches live, with `state_dir` the state directory in use.
    pub fn module_cache_dir(&self, state_dir: &Path) -> PathBuf {
        self.config
            .module_cache_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("modules"))
    }

    /// Check the metrics endpoint's address against `[metrics] allow_non_loopback`.
    pub fn check_metrics_listen(&self, addr: &str) -> Result<(), String> {
        let parsed: SocketAddr = addr
            .parse()
            .map_err(|_| format!("metrics: not an IP address and port: {addr:?}"))?;
        if parsed.ip().is_loopback() || self.config.metrics.allow_non_loopback {
            Ok(())
        } else {
            Err(format!(
                "refusing to serve metrics on {addr}: they are served on loopback only; \
                 to serve them there, write `allow_non_loopback = true` under `[metrics]` \
                 in {}",
                self.file_to_edit()
            ))
        }
    }

    /// Check a TCP listen address against `[tcp] allow_non_loopback`.
    pub fn check_tcp_listen(&self, addr: &str) -> Result<(), String> {
        let parsed: SocketAddr = addr
            .parse()
            .map_err(|_| format!("not an IP address and port: {addr:?}"))?;
        if parsed.ip().is_loopback() || self.config.tcp.allow_non_loopback {
            Ok(())
        } else {
            Err(format!(
                "refusing to listen on {addr}: TCP listens on loopback only; to listen \
                 there, write `allow_non_loopback = true` under `[tcp]` in {}, and give \
                 TCP guests TLS (`tls_cert` and `tls_key` in the same table)",
                self.file_to_edit()
            ))
        }
    }
}

#[cfg(test)]
mod tests;
