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

mod config;
pub mod grants;
mod ids;
mod secret;
use config::read_token_file;
pub use config::*;
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
        let file = grants::grants_path(&dir);
        match grants::load(&file) {
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
