//! The host configuration file's sections, as read (serde): every table of
//! `host.toml`, its defaults, and the errors reading it can give.

use super::*;

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
    pub jail: JailConfig,
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

/// How long a dropped session waits for its guest by default.
pub const DEFAULT_HOLD: std::time::Duration = std::time::Duration::from_secs(30);

/// `[reconnect]`: how long a worker holds its session after its connection drops, for
/// its guest to come back to ([`crate::resume`]). Read by each worker at admission.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconnectPolicy {
    /// Milliseconds; 0 turns reconnecting off (a dropped connection ends its session at
    /// once). Default [`DEFAULT_HOLD`].
    pub hold_ms: Option<u64>,
}

impl ReconnectPolicy {
    pub fn hold(&self) -> std::time::Duration {
        self.hold_ms
            .map_or(DEFAULT_HOLD, std::time::Duration::from_millis)
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
            .unwrap_or_else(|| state_dir.join(super::grants::SOCKET_NAME))
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
pub(super) fn read_token_file(path: &Path) -> Result<Secret, String> {
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

/// `[jail]` in the host configuration.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JailConfig {
    /// Unset: on when workers can change user (the daemon runs as root, or holds
    /// CAP_SETUID and CAP_SETGID), else off. `true` refuses guests rather than serve
    /// them unjailed.
    pub enable: Option<bool>,
    /// A VM's workers run as uid = gid = `id_base` + a number (below 65536) derived
    /// from its name, unless `[jail.ids]` gives one.
    pub id_base: Option<u32>,
    /// Explicit ids by VM name (`local` for programs on the host).
    #[serde(default)]
    pub ids: std::collections::BTreeMap<String, u32>,
    /// A mount namespace and a pid namespace per worker (default on; each is skipped,
    /// with a warning, where the host forbids it). The pid namespace is the daemon's
    /// to make, as it starts the worker, so for it this is read when the daemon starts.
    pub namespaces: Option<bool>,
    /// RLIMIT_NOFILE (default 4096).
    pub max_open_files: Option<u64>,
    /// RLIMIT_NPROC: threads of all of one VM's workers together (default 1024).
    pub max_threads: Option<u64>,
    /// RLIMIT_FSIZE: the largest file a worker may write (default 1 GiB).
    pub max_file_size: Option<ByteSize>,
    /// RLIMIT_AS (default none: the CUDA driver reserves address space for every
    /// GPU's memory up front, far more than it uses).
    pub address_space: Option<ByteSize>,
    /// What a system call outside the filter gets.
    #[serde(default)]
    pub on_denied: OnDenied,
}

/// What a denied system call gets.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnDenied {
    /// It fails with EPERM: code that probes for a feature goes on without it, and the
    /// worker reports the failure to its guest like any other.
    #[default]
    Eperm,
    /// The worker is killed (SIGSYS): only its own guest is affected.
    Kill,
    /// It is allowed and logged by the kernel (audit): for finding what a new driver
    /// needs, never for service.
    Log,
}
