//! Who may use this host's GPUs, and how much of them: the host configuration file
//! (`/etc/vmcuda/host.toml`, documented in `docs/configuration.md`).
//!
//! Every guest connection names a [`Caller`] (known from the transport, never from the
//! guest's own word) and, over TCP, a token from its hello. [`Policy::admit`] turns
//! that into a [`Grant`] (the GPUs it sees, its quota and limits) or a [`Refusal`]
//! whose reason goes to both the host log and the guest. Without a configuration file
//! the built-in default admits programs on the host itself (the Unix socket, guarded by
//! its file permissions) and refuses every VM and every TCP caller.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use subtle::ConstantTimeEq;
use thiserror::Error;
use vmcuda_wire::tls;
use vmcuda_wire::CudaStatus;

use crate::tls::TlsServer;

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
}

/// The configuration file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where workers keep what a VM's connections share (the quota ledger).
    pub state_dir: Option<PathBuf>,
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
    /// The VMs allowed in, one `[[vm]]` table each.
    #[serde(default, rename = "vm")]
    pub vms: Vec<Vm>,
    /// How workers are confined once their guest is admitted (see `jail`).
    #[serde(default)]
    pub jail: crate::jail::JailConfig,
}

/// Limits; in `[defaults]`, `[local]` and each `[[vm]]`, where unset ones inherit.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The GPUs the guest sees, in its own device order: `"all"`, or a list of host
    /// device ordinals (as nvidia-smi numbers them) and `GPU-...` UUIDs.
    pub gpus: Option<Gpus>,
    /// GPU memory the guest may hold at once, in bytes or with a unit ("16GiB").
    pub memory_quota: Option<ByteSize>,
    pub max_streams: Option<u32>,
    pub max_events: Option<u32>,
    pub max_modules: Option<u32>,
    /// Connections (guest processes) the VM may have open at once.
    pub max_connections: Option<u32>,
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
    /// The token this VM presents over TCP (inline), ...
    pub token: Option<String>,
    /// ... or the file holding it (first line), which keeps secrets out of this file.
    pub token_file: Option<PathBuf>,
    /// Whether the VM may connect over TCP (with its token).
    #[serde(default)]
    pub tcp: bool,
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
fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read token file: {e}"))?;
    let t = text.lines().next().unwrap_or("").trim().to_string();
    if t.len() >= MIN_TOKEN_LEN {
        Ok(t)
    } else {
        Err(format!(
            "token file holds no usable token (at least {MIN_TOKEN_LEN} characters)"
        ))
    }
}

/// A list of GPUs or all of them.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Gpus {
    Named(String),
    List(Vec<GpuId>),
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum GpuId {
    Ordinal(u32),
    Uuid(String),
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuId::Ordinal(n) => write!(f, "{n}"),
            GpuId::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which host GPUs a guest sees, in its order; `None` is all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSelection(pub Option<Vec<GpuId>>);

impl GpuSelection {
    pub fn all() -> Self {
        GpuSelection(None)
    }

    /// The command-line form: "all" or a comma-separated list.
    pub fn to_arg(&self) -> String {
        match &self.0 {
            None => "all".into(),
            Some(ids) => ids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    pub fn from_arg(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(GpuSelection::all());
        }
        s.split(',')
            .map(|p| match p.parse::<u32>() {
                Ok(n) => Ok(GpuId::Ordinal(n)),
                Err(_) if p.starts_with("GPU-") => Ok(GpuId::Uuid(p.to_string())),
                Err(_) => Err(format!("not a GPU ordinal or GPU-UUID: {p:?}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| GpuSelection(Some(v)))
    }

    /// Pick the granted devices from `available` (host ordinal order, with UUIDs), in
    /// the grant's order: the guest's device i is the host's `result[i]`.
    pub fn resolve(&self, uuids: &[String]) -> Result<Vec<usize>, String> {
        let Some(ids) = &self.0 else {
            return Ok((0..uuids.len()).collect());
        };
        let picked = ids
            .iter()
            .map(|id| match id {
                GpuId::Ordinal(n) if (*n as usize) < uuids.len() => Ok(*n as usize),
                GpuId::Ordinal(n) => Err(format!(
                    "GPU {n} is granted but this host has {} GPU(s)",
                    uuids.len()
                )),
                GpuId::Uuid(u) => uuids
                    .iter()
                    .position(|have| have.eq_ignore_ascii_case(u))
                    .ok_or_else(|| format!("GPU {u} is granted but not present on this host")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, d) in picked.iter().enumerate() {
            if picked[..i].contains(d) {
                return Err(format!("GPU {d} is granted twice ({})", self.to_arg()));
            }
        }
        Ok(picked)
    }
}

/// A byte count written as a number or with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => parse_size(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a size: {s:?} (write e.g. 16GiB)"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Who is on the other end of a connection, as the transport (not the guest) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A program on the host, through the daemon's Unix socket.
    Local { pid: Option<i32> },
    /// A guest through the kernel's vhost-vsock, by its context id.
    VsockCid(u32),
    /// A VM named by its own listener: a hybrid-vsock socket or the vhost-user device.
    Vm(String),
    /// A hybrid-vsock socket given on the command line that no `[[vm]]` claims.
    UnclaimedSocket(PathBuf),
    /// Anyone over TCP; admitted only by token.
    Tcp(String),
}

impl Caller {
    /// The worker's `--caller` argument.
    pub fn to_arg(&self) -> String {
        match self {
            Caller::Local { pid: Some(p) } => format!("local:{p}"),
            Caller::Local { pid: None } => "local".into(),
            Caller::VsockCid(cid) => format!("vsock:{cid}"),
            Caller::Vm(name) => format!("vm:{name}"),
            Caller::UnclaimedSocket(p) => format!("socket:{}", p.display()),
            Caller::Tcp(peer) => format!("tcp:{peer}"),
        }
    }

    pub fn from_arg(s: &str) -> Result<Caller, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "local" if rest.is_empty() => Ok(Caller::Local { pid: None }),
            "local" => rest
                .parse()
                .map(|p| Caller::Local { pid: Some(p) })
                .map_err(|_| format!("bad pid in {s:?}")),
            "vsock" => rest
                .parse()
                .map(Caller::VsockCid)
                .map_err(|_| format!("bad cid in {s:?}")),
            "vm" if !rest.is_empty() => Ok(Caller::Vm(rest.into())),
            "socket" if !rest.is_empty() => Ok(Caller::UnclaimedSocket(rest.into())),
            "tcp" => Ok(Caller::Tcp(rest.into())),
            _ => Err(format!(
                "not a caller: {s:?} (local[:PID], vsock:CID, vm:NAME, tcp:PEER)"
            )),
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Local { pid: Some(p) } => write!(f, "local process {p}"),
            Caller::Local { pid: None } => f.write_str("local process"),
            Caller::VsockCid(cid) => write!(f, "vsock cid {cid}"),
            Caller::Vm(name) => write!(f, "VM {name:?}"),
            Caller::UnclaimedSocket(p) => write!(f, "hybrid-vsock socket {}", p.display()),
            Caller::Tcp(peer) => write!(f, "tcp peer {peer}"),
        }
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

/// A loaded, checked configuration.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub config: Config,
    /// Where it came from, for messages ("built-in default" when nowhere).
    pub source: String,
}

impl Policy {
    /// The built-in default: local programs yes, VMs and TCP no.
    pub fn builtin() -> Policy {
        Policy {
            config: Config::default(),
            source: "the built-in default (no configuration file)".into(),
        }
    }

    /// Load `path`, or the default path when it exists, or the built-in default.
    pub fn load(path: Option<&Path>) -> Result<Policy, ConfigError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => DEFAULT_CONFIG_PATH.into(),
            None => return Ok(Policy::builtin()),
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        Policy::parse(&text, &path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Policy, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        let invalid = |msg: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        let mut seen_names = std::collections::HashSet::new();
        let mut seen_cids = std::collections::HashSet::new();
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
            if vm.token.is_some() && vm.token_file.is_some() {
                return Err(invalid(format!(
                    "VM {:?}: give token or token_file, not both",
                    vm.name
                )));
            }
            if let Some(t) = &vm.token {
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
        Ok(Policy {
            config,
            source: path.display().to_string(),
        })
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

    fn token_of(&self, vm: &Vm) -> Option<String> {
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
        }
    }

    /// Where the VMs' ledgers live.
    pub fn state_dir(&self) -> &Path {
        self.config
            .state_dir
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_STATE_DIR))
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
                "refusing to serve metrics on {addr}: they are served on loopback only \
                 unless [metrics] allow_non_loopback = true is set in {}",
                self.source
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
                "refusing to listen on {addr}: TCP listens on loopback only unless \
                 [tcp] allow_non_loopback = true is set in {}",
                self.source
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-vm1";

    fn policy(text: &str) -> Policy {
        Policy::parse(text, Path::new("test.toml")).unwrap()
    }

    fn sample() -> Policy {
        policy(&format!(
            r#"
            [defaults]
            memory_quota = "8GiB"
            max_streams = 64

            [local]
            allow = true
            gpus = [0]

            [[vm]]
            name = "vm1"
            cid = 5
            token = "{TOKEN}"
            tcp = true
            gpus = [1, "GPU-abc"]
            memory_quota = 1048576
            max_events = 10

            [[vm]]
            name = "fc"
            hybrid_vsock = "/run/fc.vsock"
            token = "fedcba9876543210-fc"
            "#
        ))
    }

    #[test]
    fn the_builtin_default_admits_local_programs_and_refuses_everyone_else() {
        let p = Policy::builtin();
        let g = p.admit(&Caller::Local { pid: Some(1) }, b"").unwrap();
        assert_eq!(
            p.admit(&Caller::VsockCid(1), b""),
            Ok(g.clone()),
            "vsock loopback is local"
        );
        assert_eq!(g.gpus, GpuSelection::all());
        assert_eq!(g.memory_quota, None);
        for caller in [
            Caller::VsockCid(3),
            Caller::Vm("x".into()),
            Caller::Tcp("1.2.3.4:5".into()),
            Caller::UnclaimedSocket("/run/x.vsock".into()),
        ] {
            let r = p.admit(&caller, TOKEN.as_bytes()).unwrap_err();
            assert_eq!(r.status, CudaStatus::ErrorNotPermitted);
            assert!(!r.guest.is_empty() && !r.host.is_empty());
        }
        assert!(p.check_tcp_listen("127.0.0.1:7731").is_ok());
        assert!(p.check_tcp_listen("[::1]:7731").is_ok());
        assert!(p.check_tcp_listen("0.0.0.0:7731").is_err());
    }

    #[test]
    fn vms_are_found_by_cid_name_and_token_and_inherit_defaults() {
        let p = sample();
        let by_cid = p.admit(&Caller::VsockCid(5), b"").unwrap();
        let by_name = p.admit(&Caller::Vm("vm1".into()), b"").unwrap();
        let by_token = p
            .admit(&Caller::Tcp("10.0.0.1:4000".into()), TOKEN.as_bytes())
            .unwrap();
        assert_eq!(by_cid, by_name);
        assert_eq!(by_cid, by_token);
        assert_eq!(by_cid.name, "vm1");
        assert_eq!(by_cid.memory_quota, Some(1 << 20));
        assert_eq!(by_cid.max_streams, 64, "from [defaults]");
        assert_eq!(by_cid.max_events, 10);
        assert_eq!(by_cid.max_modules, DEFAULT_MAX_MODULES);
        assert_eq!(by_cid.gpus.to_arg(), "1,GPU-abc");
        let fc = p.admit(&Caller::Vm("fc".into()), b"").unwrap();
        assert_eq!(fc.memory_quota, Some(8 << 30));
        assert_eq!(
            p.vm_for_hybrid_socket(Path::new("/run/fc.vsock")),
            Some("fc")
        );
        let local = p.admit(&Caller::Local { pid: None }, b"").unwrap();
        assert_eq!(local.gpus.to_arg(), "0");
    }

    #[test]
    fn tcp_needs_the_right_token_of_a_vm_that_may_use_tcp() {
        let p = sample();
        let tcp = Caller::Tcp("10.0.0.1:4000".into());
        assert!(p.admit(&tcp, b"").unwrap_err().guest.contains("token"));
        assert!(p.admit(&tcp, b"0123456789abcdef-vm2").is_err());
        assert!(p.admit(&tcp, &TOKEN.as_bytes()[..10]).is_err());
        let r = p.admit(&tcp, b"fedcba9876543210-fc").unwrap_err();
        assert!(r.host.contains("tcp = false"), "{}", r.host);
        // The guest is told nothing about the host's configuration.
        assert!(!r.guest.contains("fc"));
    }

    #[test]
    fn token_files_are_read_at_admission() {
        let dir = std::env::temp_dir().join(format!("vmcuda-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("vm.token");
        std::fs::write(&file, "a-token-from-a-file-0001\n").unwrap();
        let p = policy(&format!(
            "[[vm]]\nname = \"f\"\ntcp = true\ntoken_file = \"{}\"\n",
            file.display()
        ));
        let tcp = Caller::Tcp("h:1".into());
        assert!(p.admit(&tcp, b"a-token-from-a-file-0001").is_ok());
        std::fs::write(&file, "short\n").unwrap();
        assert!(p.admit(&tcp, b"short").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn token_file_problems_name_the_vm_and_the_reason() {
        let dir = std::env::temp_dir().join(format!("vmcuda-policy-tf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.token");
        let short = dir.join("short.token");
        std::fs::write(&good, "a-token-from-a-file-0001\n").unwrap();
        std::fs::write(&short, "short\n").unwrap();
        let p = policy(&format!(
            "[[vm]]\nname = \"good\"\ntcp = true\ntoken_file = \"{}\"\n\
             [[vm]]\nname = \"short\"\ntcp = true\ntoken_file = \"{}\"\n\
             [[vm]]\nname = \"gone\"\ntcp = true\ntoken_file = \"{}\"\n\
             [[vm]]\nname = \"inline\"\ntcp = true\ntoken = \"{TOKEN}\"\n",
            good.display(),
            short.display(),
            dir.join("missing.token").display()
        ));
        let problems = p.token_file_problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("VM \"short\"") && problems[0].contains("no usable token"));
        assert!(problems[1].starts_with("VM \"gone\"") && problems[1].contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_shipped_configuration_is_the_safe_default() {
        let shipped = Policy::parse(
            include_str!("../etc/host.toml"),
            Path::new("host-backend/etc/host.toml"),
        )
        .unwrap();
        let builtin = Policy::builtin();
        for caller in [
            Caller::Local { pid: None },
            Caller::VsockCid(3),
            Caller::Vm("vm1".into()),
            Caller::Tcp("10.0.0.2:1".into()),
        ] {
            assert_eq!(
                shipped.admit(&caller, TOKEN.as_bytes()).is_ok(),
                builtin.admit(&caller, TOKEN.as_bytes()).is_ok(),
                "{caller}"
            );
        }
        assert!(shipped.admit(&Caller::Local { pid: None }, b"").is_ok());
        assert!(shipped.check_tcp_listen("0.0.0.0:7731").is_err());
    }

    #[test]
    fn local_programs_can_be_refused() {
        let p = policy("[local]\nallow = false\n");
        let r = p.admit(&Caller::Local { pid: None }, b"").unwrap_err();
        assert!(r.host.contains("allow = false"));
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        for (text, why) in [
            ("[[vm]]\nname = \"a\"\ntoken = \"short\"\n", "shorter"),
            ("[[vm]]\nname = \"a\"\ntcp = true\n", "needs a token"),
            ("[[vm]]\nname = \"a\"\ncid = 2\n", "reserved"),
            (
                "[[vm]]\nname = \"a\"\ncid = 3\n[[vm]]\nname = \"b\"\ncid = 3\n",
                "cid 3",
            ),
            ("[[vm]]\nname = \"a\"\n[[vm]]\nname = \"a\"\n", "named"),
            ("[defaults]\ngpus = \"some\"\n", "all"),
            ("[defaults]\nmemory_quota = \"12 parsecs\"\n", "unit"),
            ("[defaults]\nmemory_kuota = 1\n", "unknown field"),
        ] {
            let e = Policy::parse(text, Path::new("t.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn the_metrics_endpoint_stays_on_loopback_unless_allowed() {
        let p = policy("[metrics]\nlisten = \"127.0.0.1:9731\"\n");
        assert_eq!(p.config.metrics.listen.as_deref(), Some("127.0.0.1:9731"));
        assert!(p.check_metrics_listen("127.0.0.1:9731").is_ok());
        assert!(p.check_metrics_listen("[::1]:0").is_ok());
        let e = p.check_metrics_listen("0.0.0.0:9731").unwrap_err();
        assert!(e.contains("allow_non_loopback"), "{e}");
        assert!(p.check_metrics_listen("localhost:9731").is_err());
        let open = policy("[metrics]\nallow_non_loopback = true\n");
        assert!(open.check_metrics_listen("0.0.0.0:9731").is_ok());
        assert!(Policy::parse("[metrics]\nport = 1\n", Path::new("t.toml")).is_err());
    }

    #[test]
    fn tls_settings_are_checked_and_loaded() {
        use vmcuda_wire::tls::testing::TestPki;
        let dir = std::env::temp_dir().join(format!("vmcuda-policy-tls-{}", std::process::id()));
        let pki = TestPki::new(&dir.join("a"), &["localhost"]);
        let other = TestPki::new(&dir.join("b"), &["localhost"]);
        let tcp = |cert: &Path, key: &Path, extra: &str| {
            format!(
                "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}",
                cert.display(),
                key.display()
            )
        };

        assert!(Policy::builtin().tls_server().unwrap().is_none());
        let on = policy(&tcp(&pki.cert, &pki.key, "")).tls_server().unwrap();
        assert!(on.unwrap().required, "a certificate means TLS is required");
        let optional = policy(&tcp(&pki.cert, &pki.key, "require_tls = false"));
        assert!(!optional.tls_server().unwrap().unwrap().required);

        // Parsed, but unusable: found when the daemon starts (or a TLS guest connects).
        let missing = dir.join("missing.pem");
        for (text, why) in [
            (tcp(&missing, &pki.key, ""), "missing.pem"),
            (tcp(&pki.cert, &other.key, ""), "is not the private key"),
            (tcp(&pki.key, &pki.key, ""), "no PEM certificate"),
        ] {
            let e = policy(&text).tls_server().unwrap_err().to_string();
            assert!(
                e.contains("tls_cert and tls_key are not usable") && e.contains(why),
                "{text}: {e}"
            );
        }

        // Incomplete settings are refused at parse time.
        for (text, why) in [
            (
                format!("[tcp]\ntls_cert = \"{}\"\n", pki.cert.display()),
                "go together",
            ),
            ("[tcp]\nrequire_tls = true\n".into(), "needs tls_cert"),
        ] {
            let e = Policy::parse(&text, Path::new("t.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        // Asking for no TLS without a certificate is fine.
        assert!(policy("[tcp]\nrequire_tls = false\n")
            .tls_server()
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_and_selections_parse() {
        assert_eq!(parse_size("16GiB"), Ok(16 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("3GB"), Ok(3_000_000_000));
        assert_eq!(parse_size("77"), Ok(77));
        assert!(parse_size("99999999999TiB").is_err());
        let s = GpuSelection::from_arg("2,GPU-a").unwrap();
        assert_eq!(
            s.resolve(&["GPU-A".into(), "GPU-b".into(), "GPU-c".into()]),
            Ok(vec![2, 0])
        );
        let twice = GpuSelection::from_arg("2,0,GPU-c").unwrap();
        assert!(twice
            .resolve(&["GPU-a".into(), "GPU-b".into(), "GPU-c".into()])
            .is_err());
        assert!(s.resolve(&["GPU-a".into()]).is_err());
        assert_eq!(GpuSelection::from_arg(&s.to_arg()), Ok(s));
        assert_eq!(
            GpuSelection::all().resolve(&["a".into(), "b".into()]),
            Ok(vec![0, 1])
        );
        assert!(GpuSelection::from_arg("zero").is_err());
    }

    #[test]
    fn callers_round_trip_through_the_worker_argument() {
        for c in [
            Caller::Local { pid: Some(42) },
            Caller::Local { pid: None },
            Caller::VsockCid(7),
            Caller::Vm("my vm".into()),
            Caller::UnclaimedSocket("/run/a.vsock".into()),
            Caller::Tcp("[::1]:99".into()),
        ] {
            assert_eq!(Caller::from_arg(&c.to_arg()), Ok(c));
        }
        assert!(Caller::from_arg("martian:1").is_err());
    }
}
