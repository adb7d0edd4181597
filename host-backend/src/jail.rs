//! The worker jail: what a worker gives up once its guest is admitted.
//!
//! To admit a guest a worker reads the whole configuration (every VM's token), and to
//! serve it the worker parses guest data and drives a GPU driver that is not memory
//! safe. So right after admission ([`confine_admitted`], from the worker's admission
//! step) it confines itself, so that a bug exploited in it reaches its own VM only:
//!
//! 1. **Mount namespace** (where the kernel lets it make one): a private copy of the
//!    host's mounts in which the configuration, every `token_file`, the TLS key and
//!    certificate and the peer link's key, certificate and CA read as empty (`/dev/null` bound over them), and the ledger directory is an
//!    empty read-only tmpfs holding only this VM's ledger, bound in (the module cache
//!    directory likewise holds only this VM's cache). The worker has
//!    already opened everything else it needs (its executor, its figures file).
//! 2. **Resource limits**: no core dumps (they would hold guest data and the token),
//!    bounded open files, threads, file size, and optionally address space.
//! 3. **Its VM's own user and group** (`[jail] id_base` plus a number from the VM's
//!    name, or `[jail.ids]`), with no supplementary groups and no capabilities left in
//!    any thread. Its own ledger is handed to that group first; other VMs' ledgers and
//!    the token files stay unreadable to it even where there is no namespace.
//! 4. **No new privileges** (`PR_SET_NO_NEW_PRIVS`).
//! 5. **A system call filter** (seccomp, all threads): only what serving a session
//!    takes; the rest fails with `EPERM` (or, by `[jail] on_denied`, kills the worker
//!    or is only logged). See [`allowed_syscalls`] and docs/security.md.
//!
//! Before all this, the worker started in a **pid namespace** of its own, where the
//! kernel allows one: the daemon makes it as it starts the worker (a process enters a
//! new pid namespace only when it is made), so that the worker can name no other
//! process at all; see [`spawn_in_new_namespace`]. The ledger and the figures files
//! still name it by its host pid ([`crate::process::host_pid`]), which the host's `/proc` gives it and
//! by which every worker tells live ones. The filter, for its part, keeps a worker
//! from signalling, tracing or starting processes with or without that namespace.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
use thiserror::Error;
use tracing::{debug, info, warn};
use vmcuda_wire::CudaStatus;

use crate::policy::{Caller, Policy, Refusal};
pub use crate::policy::{JailConfig, OnDenied};

/// Where VM ids start by default: far above ordinary users, system users and the
/// ranges `useradd` hands out for containers' subordinate ids.
pub const DEFAULT_ID_BASE: u32 = 2_100_000_000;
/// How many ids a VM's name can map to, from `id_base`.
pub const ID_RANGE: u32 = 65_536;
const DEFAULT_MAX_OPEN_FILES: u64 = 4096;
const DEFAULT_MAX_THREADS: u64 = 1024;
const DEFAULT_MAX_FILE_SIZE: u64 = 1 << 30;

/// The user and group a VM's workers run as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Resource limits of a jailed worker (core dumps are always off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub address_space: Option<u64>,
    pub open_files: u64,
    pub threads: u64,
    pub file_size: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            address_space: None,
            open_files: DEFAULT_MAX_OPEN_FILES,
            threads: DEFAULT_MAX_THREADS,
            file_size: Some(DEFAULT_MAX_FILE_SIZE),
        }
    }
}

/// Everything [`confine`] does, decided beforehand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JailSpec {
    /// Whom to become; `None` keeps the user (for tests without root).
    pub ids: Option<Ids>,
    /// Make a mount namespace and hide files in it.
    pub mount_namespace: bool,
    /// Files that read as empty in the namespace (configuration, tokens, TLS key).
    pub mask: Vec<PathBuf>,
    /// The ledger directory, replaced in the namespace by one holding `own_ledger` only.
    pub ledger_dir: Option<PathBuf>,
    /// This VM's ledger file: handed to `ids` and kept visible.
    pub own_ledger: Option<PathBuf>,
    /// The module cache directory (`module_cache_dir`), replaced in the namespace
    /// by one holding `own_module_cache` only.
    pub module_cache_dir: Option<PathBuf>,
    /// This VM's module cache (see [`crate::module_cache`]): handed to `ids` and kept
    /// visible, read-write.
    pub own_module_cache: Option<PathBuf>,
    /// The admin directory (the run-time grants file, which holds tokens: see
    /// `crate::admin`), covered in the namespace by an empty one.
    pub admin_dir: Option<PathBuf>,
    pub limits: Limits,
    /// The system call filter, and what a denied call gets; `None`: no filter.
    pub seccomp: Option<OnDenied>,
}

#[derive(Debug, Error)]
pub enum JailError {
    #[error("[jail] VMs {0:?} and {1:?} would run as the same user {2}; give one its own id in [jail.ids]")]
    SameId(String, String, u32),
    #[error("[jail] id {0} for {1:?} is not usable (root's, or the daemon's own)")]
    BadId(u32, String),
    #[error("[jail] id_base {0} leaves no room for {ID_RANGE} ids")]
    BadBase(u32),
    #[error("jail: {what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: Errno,
    },
    #[error("jail: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("jail: system call filter: {0}")]
    Seccomp(#[from] seccompiler::Error),
    #[error("jail: thread {tid} kept {what} after the switch")]
    NotDropped { tid: String, what: String },
}

impl From<seccompiler::BackendError> for JailError {
    fn from(e: seccompiler::BackendError) -> Self {
        JailError::Seccomp(e.into())
    }
}

impl JailError {
    /// What the guest is told, and the host logs, when its worker cannot be jailed:
    /// the guest is refused rather than served unconfined.
    pub fn refusal(&self, caller: &Caller, vm: &str) -> Refusal {
        Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: "the host could not isolate this connection; its administrator can see \
                    why in the host's log"
                .into(),
            host: format!("refused {caller} ({vm}): {self}"),
        }
    }
}

fn sys(what: impl Into<String>) -> impl FnOnce(Errno) -> JailError {
    let what = what.into();
    move |source| JailError::Sys { what, source }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> JailError {
    let what = what.into();
    move |source| JailError::Io { what, source }
}

/// 32-bit FNV-1a: a VM's id must not change between releases, so no std hasher.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl JailConfig {
    /// Whether workers are jailed under this configuration, on this host.
    pub fn enabled(&self) -> bool {
        self.enable.unwrap_or_else(can_switch_user)
    }

    fn id_base(&self) -> Result<u32, JailError> {
        let base = self.id_base.unwrap_or(DEFAULT_ID_BASE);
        match base.checked_add(ID_RANGE) {
            Some(end) if base > 0 && end < u32::MAX => Ok(base),
            _ => Err(JailError::BadBase(base)),
        }
    }

    fn raw_id(&self, name: &str, base: u32) -> u32 {
        self.ids
            .get(name)
            .copied()
            .unwrap_or_else(|| base + fnv1a(name.as_bytes()) % ID_RANGE)
    }

    /// The uid (and gid) of `name`'s workers; `others` are every name the
    /// configuration admits, none of which may share it.
    pub fn id_for<'a>(
        &self,
        name: &str,
        others: impl IntoIterator<Item = &'a str>,
    ) -> Result<u32, JailError> {
        let base = self.id_base()?;
        let id = self.raw_id(name, base);
        if id == 0 || id == u32::MAX || id == Uid::current().as_raw() {
            return Err(JailError::BadId(id, name.into()));
        }
        for other in others {
            if other != name && self.raw_id(other, base) == id {
                return Err(JailError::SameId(name.into(), other.into(), id));
            }
        }
        Ok(id)
    }
}

/// Whether this process may change its user and group (effective CAP_SETUID and
/// CAP_SETGID, which root has).
pub fn can_switch_user() -> bool {
    const CAP_SETGID: u32 = 6;
    const CAP_SETUID: u32 = 7;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|eff| eff & (1 << CAP_SETUID) != 0 && eff & (1 << CAP_SETGID) != 0)
}

/// The daemon's one line at start on whether its workers will be jailed.
pub fn announce(config: &JailConfig) {
    match config.enable {
        Some(false) => info!("workers are not jailed ([jail] enable = false)"),
        None if !can_switch_user() => info!(
            "workers are not jailed: this daemon cannot change users (run it as root or \
             with CAP_SETUID and CAP_SETGID, or set [jail] enable); docs/security.md"
        ),
        _ => info!(
            namespaces = config.namespaces.unwrap_or(true),
            "workers are jailed: each VM's under its own user, with a system call filter"
        ),
    }
}

/// What jailing `vm`'s worker means under `policy`; `None` when the jail is off.
pub fn spec_for(
    policy: &Policy,
    vm: &str,
    state_dir: &Path,
    own_ledger: Option<&Path>,
    own_module_cache: Option<&Path>,
) -> Result<Option<JailSpec>, JailError> {
    let config = &policy.config.jail;
    if !config.enabled() {
        debug!("not jailed");
        return Ok(None);
    }
    let names = policy
        .config
        .vms
        .iter()
        .map(|v| v.name.as_str())
        .chain(std::iter::once("local"));
    let id = config.id_for(vm, names)?;
    let c = &policy.config;
    let mask = std::iter::once(PathBuf::from(&policy.source))
        .chain(c.vms.iter().filter_map(|v| v.token_file.clone()))
        // The run-time grants merged in (tokens): its directory is covered below, as
        // a rename of a new version over a masked file would unmask it.
        .chain(policy.grants_file.clone())
        .chain(c.tcp.tls_key.clone())
        .chain(c.tcp.tls_cert.clone())
        // The peer link's TLS files: the daemon read them when it started, and a
        // worker only talks to its broker, never TLS.
        .chain(
            c.peers
                .iter()
                .flat_map(|p| [p.tls_key.clone(), p.tls_cert.clone(), p.ca.clone()]),
        )
        .filter(|p| p.is_file())
        .collect();
    Ok(Some(JailSpec {
        ids: Some(Ids { uid: id, gid: id }),
        mount_namespace: config.namespaces.unwrap_or(true),
        mask,
        ledger_dir: Some(state_dir.join("ledger")),
        own_ledger: own_ledger.map(Path::to_path_buf),
        module_cache_dir: Some(policy.module_cache_dir(state_dir)),
        own_module_cache: own_module_cache.map(Path::to_path_buf),
        admin_dir: crate::policy::grants::grants_path(state_dir)
            .parent()
            .map(Path::to_path_buf),
        limits: Limits {
            address_space: config.address_space.map(|b| b.0),
            open_files: config.max_open_files.unwrap_or(DEFAULT_MAX_OPEN_FILES),
            threads: config.max_threads.unwrap_or(DEFAULT_MAX_THREADS),
            file_size: Some(config.max_file_size.map_or(DEFAULT_MAX_FILE_SIZE, |b| b.0)),
        },
        seccomp: Some(config.on_denied),
    }))
}

/// Jail this worker, whose guest was just admitted as `vm`, as `policy` says (nothing
/// when the jail is off). Called once the worker holds what it needs: its executor,
/// its ledger (`own_ledger`), its module cache (`own_module_cache`, the directory it
/// opened) and its figures file.
pub fn confine_admitted(
    policy: &Policy,
    vm: &str,
    state_dir: &Path,
    own_ledger: Option<&Path>,
    own_module_cache: Option<&Path>,
) -> Result<(), JailError> {
    match spec_for(policy, vm, state_dir, own_ledger, own_module_cache)? {
        Some(spec) => confine(&spec),
        None => Ok(()),
    }
}

/// Apply `spec` to this process, in order: mount namespace, resource limits, user and
/// group, no new privileges, system call filter. Irreversible.
pub fn confine(spec: &JailSpec) -> Result<(), JailError> {
    if let Some(ids) = spec.ids {
        hand_over_ledger(spec, ids)?;
        hand_over_module_cache(spec, ids)?;
    }
    if spec.mount_namespace {
        match unshare(CloneFlags::CLONE_NEWNS) {
            Ok(()) => hide(spec)?,
            Err(e) => warn!(
                "no mount namespace for this worker (unshare: {e}); other VMs' files are \
                 kept from it by their owners and modes only"
            ),
        }
    }
    set_limits(&spec.limits)?;
    if let Some(ids) = spec.ids {
        become_user(ids)?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(sys("PR_SET_NO_NEW_PRIVS"))?;
    if let Some(on_denied) = spec.seccomp {
        // One filter; it answers clone3 with ENOSYS, so the C library uses clone, whose
        // flags it checks.
        // The pid the worker itself calls its own (1 in its own pid namespace): the one
        // the C library passes to kill and tgkill.
        seccompiler::apply_filter_all_threads(&filter(on_denied, std::process::id())?)?;
    }
    debug!(?spec.ids, "jailed");
    Ok(())
}

/// Make this VM's ledger writable by its workers' group (and by the daemon's user, who
/// owns it and whose next worker joins it before it is jailed), and by no one else.
fn hand_over_ledger(spec: &JailSpec, ids: Ids) -> Result<(), JailError> {
    let Some(ledger) = &spec.own_ledger else {
        return Ok(());
    };
    let what = || format!("giving {} to gid {}", ledger.display(), ids.gid);
    std::os::unix::fs::chown(ledger, None, Some(ids.gid)).map_err(io(what()))?;
    std::fs::set_permissions(ledger, std::fs::Permissions::from_mode(0o660)).map_err(io(what()))?;
    // The directory is the daemon's: others may pass through it (to their own ledger)
    // but not list it, and no ledger in it (say, one written before the jail was on)
    // is open to others.
    if let Some(dir) = ledger.parent() {
        for entry in std::fs::read_dir(dir).map_err(io(what()))?.flatten() {
            if let Ok(meta) = entry.metadata() {
                let mode = meta.permissions().mode();
                if meta.is_file() && mode & 0o007 != 0 {
                    std::fs::set_permissions(
                        entry.path(),
                        std::fs::Permissions::from_mode(mode & 0o770),
                    )
                    .map_err(io(what()))?;
                }
            }
        }
        let mode = std::fs::metadata(dir)
            .map_err(io(what()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(
                dir,
                std::fs::Permissions::from_mode((mode & 0o7770) | 0o001),
            )
            .map_err(io(what()))?;
        }
    }
    Ok(())
}

/// Make this VM's module cache, and every file in it, its workers' group's (the
/// daemon's user keeps it too), and no one else's. The directory above is the
/// daemon's; the worker reaches its own through the descriptor it opened before.
fn hand_over_module_cache(spec: &JailSpec, ids: Ids) -> Result<(), JailError> {
    let Some(dir) = &spec.own_module_cache else {
        return Ok(());
    };
    let what = || format!("giving {} to gid {}", dir.display(), ids.gid);
    let give = |path: &Path, mode: u32| -> Result<(), JailError> {
        std::os::unix::fs::chown(path, None, Some(ids.gid)).map_err(io(what()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(what()))
    };
    give(dir, 0o770)?;
    for entry in std::fs::read_dir(dir).map_err(io(what()))?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            give(&entry.path(), 0o660)?;
        }
    }
    Ok(())
}

/// In the new mount namespace: mask the files, swap the ledger and module cache
/// directories for ones holding only this VM's.
fn hide(spec: &JailSpec) -> Result<(), JailError> {
    let none: Option<&str> = None;
    // Nothing done here may reach the host's namespace.
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(sys("making mounts private"))?;
    for path in &spec.mask {
        mount(Some("/dev/null"), path, none, MsFlags::MS_BIND, none)
            .map_err(sys(format!("masking {}", path.display())))?;
    }
    if let Some(dir) = &spec.module_cache_dir {
        cover(dir, spec.own_module_cache.as_deref(), "mode=0711,size=64k")?;
    }
    if let Some(dir) = &spec.ledger_dir {
        cover(dir, spec.own_ledger.as_deref(), "mode=0755,size=64k")?;
    }
    if let Some(dir) = &spec.admin_dir {
        cover(dir, None, "mode=0700,size=4k")?;
    }
    Ok(())
}

/// Cover `dir` (where it is a directory) with an empty read-only tmpfs of `options`
/// and bind `own`, a file or directory in it, back in: nothing else in `dir` can be
/// named, and `..` from inside a bound directory leads to the tmpfs, not to the rest.
fn cover(dir: &Path, own: Option<&Path>, options: &str) -> Result<(), JailError> {
    if !dir.is_dir() {
        return Ok(());
    }
    let none: Option<&str> = None;
    // Held by a path-only descriptor, to be bound back in once the directory is covered.
    let own = match own {
        Some(p) => {
            let name = p.file_name().map(ToOwned::to_owned);
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(p)
                .map_err(io(format!("opening {}", p.display())))?;
            name.map(|n| (p.is_dir(), file, n))
        }
        None => None,
    };
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("tmpfs"), dir, Some("tmpfs"), quiet, Some(options))
        .map_err(sys(format!("covering {}", dir.display())))?;
    if let Some((is_dir, file, name)) = own {
        let target = dir.join(name);
        let made = if is_dir {
            std::fs::create_dir(&target)
        } else {
            File::create(&target).map(drop)
        };
        made.map_err(io(format!("making {}", target.display())))?;
        let source = format!("/proc/self/fd/{}", file.as_raw_fd());
        mount(Some(source.as_str()), &target, none, MsFlags::MS_BIND, none)
            .map_err(sys(format!("binding {}", target.display())))?;
    }
    mount(
        none,
        dir,
        none,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | quiet,
        none,
    )
    .map_err(sys(format!("making {} read-only", dir.display())))?;
    Ok(())
}

fn set_limits(limits: &Limits) -> Result<(), JailError> {
    let lower = |resource: Resource, value: u64| -> Result<(), JailError> {
        let (_, hard) = getrlimit(resource).map_err(sys(format!("reading {resource:?}")))?;
        // Only ever lowered: raising a hard limit is not this code's to do.
        let value = value.min(hard);
        setrlimit(resource, value, value).map_err(sys(format!("setting {resource:?}")))
    };
    lower(Resource::RLIMIT_CORE, 0)?;
    lower(Resource::RLIMIT_NOFILE, limits.open_files)?;
    lower(Resource::RLIMIT_NPROC, limits.threads)?;
    if let Some(size) = limits.file_size {
        lower(Resource::RLIMIT_FSIZE, size)?;
    }
    if let Some(size) = limits.address_space {
        lower(Resource::RLIMIT_AS, size)?;
    }
    Ok(())
}

/// Become `ids` in every thread, with no capability left anywhere.
fn become_user(ids: Ids) -> Result<(), JailError> {
    let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
    // The C library changes ids in every thread (the driver's too). Going through root
    // first makes the kernel clear every thread's capabilities at the switch below,
    // also those of a daemon started as another user with ambient capabilities.
    if !Uid::effective().is_root() || !Uid::current().is_root() {
        setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .map_err(sys("taking uid 0 to drop capabilities"))?;
    }
    setgroups(&[]).map_err(sys("dropping supplementary groups"))?;
    setresgid(gid, gid, gid).map_err(sys(format!("switching to gid {gid}")))?;
    setresuid(uid, uid, uid).map_err(sys(format!("switching to uid {uid}")))?;
    nix::sys::prctl::set_dumpable(false).map_err(sys("PR_SET_DUMPABLE"))?;
    check_every_thread(ids)
}

/// Read back what every thread is now: the jail must not be partial.
fn check_every_thread(ids: Ids) -> Result<(), JailError> {
    let tasks = std::fs::read_dir("/proc/self/task").map_err(io("listing my threads"))?;
    for task in tasks {
        let task = task.map_err(io("listing my threads"))?;
        let tid = task.file_name().to_string_lossy().into_owned();
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // a thread that has just ended
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let all =
            |v: Vec<&str>, want: u32| v.len() == 4 && v.iter().all(|x| *x == want.to_string());
        let zero =
            |v: Vec<&str>| v.first().and_then(|x| u64::from_str_radix(x, 16).ok()) == Some(0);
        let bad = if !all(field("Uid:"), ids.uid) {
            Some("another uid")
        } else if !all(field("Gid:"), ids.gid) {
            Some("another gid")
        } else if !field("Groups:").is_empty() {
            Some("supplementary groups")
        } else if !zero(field("CapEff:")) || !zero(field("CapPrm:")) || !zero(field("CapAmb:")) {
            Some("capabilities")
        } else {
            None
        };
        if let Some(what) = bad {
            return Err(JailError::NotDropped {
                tid,
                what: what.into(),
            });
        }
    }
    Ok(())
}

mod pid;
mod seccomp;
pub use pid::{
    is_namespace_init, namespaces_available as pid_namespaces_available, spawn_in_new_namespace,
    worker_started,
};
pub use seccomp::{allowed_syscalls, filter};

#[cfg(test)]
mod syscall_cost;
#[cfg(test)]
mod tests;
