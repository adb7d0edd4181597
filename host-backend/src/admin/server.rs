//! The daemon's side of the admin socket: the listener, the changes to the grants
//! file, and the end of a revoked VM's workers.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::auth::{self, Allowed, Peer};
use super::{GrantSpec, GrantView, Request, Response, MAX_MESSAGE};
use crate::ledger::VmLedger;
use crate::policy::grants::{self, RuntimeGrant};
use crate::policy::{Limits, Policy, Secret, MIN_TOKEN_LEN};
use crate::socket_files;

/// How long a revoke waits for the VM's workers to be gone.
const END_TIMEOUT: Duration = Duration::from_secs(10);

/// What the admin socket works on.
pub struct Admin {
    /// The configuration file, re-read for every change (the static base).
    config: Option<PathBuf>,
    state_dir: PathBuf,
    allowed: Allowed,
    /// This host's GPUs (UUID and memory), when grants may not promise more memory
    /// than they have; `None`: `[admin] overcommit = true`.
    capacity: Option<Vec<Gpu>>,
    /// One change at a time.
    lock: Mutex<()>,
}

/// A started admin socket.
pub struct Started {
    pub path: PathBuf,
    pub owned: socket_files::Owned,
    pub thread: JoinHandle<()>,
}

/// One of this host's GPUs, as the executor tells it at the daemon's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub uuid: String,
    pub memory: u64,
}

impl Admin {
    pub fn new(config: Option<&Path>, state_dir: &Path, allowed: Allowed) -> Admin {
        Admin {
            config: config.map(Path::to_path_buf),
            state_dir: state_dir.to_path_buf(),
            allowed,
            capacity: None,
            lock: Mutex::new(()),
        }
    }

    /// Refuse grants whose memory quotas would not fit `gpus` (see [`check_capacity`]).
    pub fn with_capacity(mut self, gpus: Vec<Gpu>) -> Admin {
        self.capacity = Some(gpus);
        self
    }

    fn grants_path(&self) -> PathBuf {
        super::grants_path(&self.state_dir)
    }

    /// As the daemon starts: the grants not asked to persist are dropped (each
    /// logged).
    pub fn drop_transient(&self) -> Result<(), String> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let path = self.grants_path();
        let mut grants = grants::load(&path)?;
        let before = grants.len();
        grants.retain(|g| {
            if !g.persist {
                info!(vm = %g.name, "admin: run-time grant dropped (not persistent) as the daemon starts");
            }
            g.persist
        });
        if grants.len() != before {
            grants::save(&path, &grants)?;
        }
        if !grants.is_empty() {
            info!(
                grants = grants.len(),
                file = %path.display(),
                "admin: persistent run-time grants in force"
            );
        }
        Ok(())
    }

    /// Answer `request` from `peer` (already allowed).
    pub fn handle(&self, peer: &Peer, request: Request) -> Response {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let result = match request {
            Request::Grant {
                name,
                spec,
                persist,
            } => self.grant(peer, name, spec, persist),
            Request::Change {
                name,
                spec,
                persist,
            } => self.change(peer, &name, spec, persist),
            Request::Remove { name } => self.remove(peer, &name, false),
            Request::Revoke { name } => self.remove(peer, &name, true),
            Request::List => self.list(),
        };
        result.unwrap_or_else(|why| {
            warn!(by = %peer, "admin: refused: {why}");
            Response::refused(why)
        })
    }

    /// The configuration file as it is now, with `grants` over it, checked.
    fn check(&self, grants: &[RuntimeGrant]) -> Result<Policy, String> {
        let base = Policy::load(self.config.as_deref()).map_err(|e| e.to_string())?;
        base.with_vms(grants.iter().map(RuntimeGrant::to_vm).collect())
            .map_err(|e| e.to_string())
    }

    /// Check `grants` and write them.
    fn commit(&self, grants: &[RuntimeGrant]) -> Result<(), String> {
        let merged = self.check(grants)?;
        if let Some(gpus) = &self.capacity {
            check_capacity(&merged, grants, gpus)?;
        }
        grants::save(&self.grants_path(), grants)
    }

    fn grant(
        &self,
        peer: &Peer,
        name: String,
        spec: GrantSpec,
        persist: bool,
    ) -> Result<Response, String> {
        if name == "local" {
            return Err(
                "\"local\" is the name of programs on this host ([local]); give the grant \
                 another"
                    .into(),
            );
        }
        let mut grants = grants::load(&self.grants_path())?;
        if grants.iter().any(|g| g.name == name) {
            return Err(format!(
                "VM {name:?} has a run-time grant already (change it, or revoke it first)"
            ));
        }
        let mut grant = RuntimeGrant {
            name: name.clone(),
            cid: None,
            uid: None,
            token: None,
            tcp: false,
            limits: Limits::default(),
            persist,
            changed_by: peer.uid,
            changed_ms: now_ms(),
        };
        let token = apply(&mut grant, spec, true)?;
        grants.push(grant.clone());
        self.commit(&grants)?;
        info!(by = %peer, vm = %name, persist, "admin: granted {}", describe(&grant));
        Ok(Response {
            ok: true,
            message: format!("granted VM {name}: {}", describe(&grant)),
            token,
            ..Response::default()
        })
    }

    fn change(
        &self,
        peer: &Peer,
        name: &str,
        spec: GrantSpec,
        persist: Option<bool>,
    ) -> Result<Response, String> {
        let mut grants = grants::load(&self.grants_path())?;
        let grant = grants
            .iter_mut()
            .find(|g| g.name == name)
            .ok_or_else(|| no_grant(name))?;
        let spec_compute = (spec.limits.compute_share.is_some()
            || spec.limits.compute_priority.is_some()
            || spec.limits.compute_cap.is_some())
        .then_some(());
        let token = apply(grant, spec, false)?;
        if let Some(p) = persist {
            grant.persist = p;
        }
        grant.changed_by = peer.uid;
        grant.changed_ms = now_ms();
        let said = describe(grant);
        let persist = grant.persist;
        let compute_changed = spec_compute.is_some();
        self.commit(&grants)?;
        // Compute shares reach the VM's live workers at once, through the board.
        let retuned = if compute_changed {
            let share = self.check(&grants)?.compute_of(name);
            crate::compute::apply(&self.state_dir, name, share)
        } else {
            0
        };
        info!(by = %peer, vm = %name, persist, retuned, "admin: changed grant: {said}");
        Ok(Response {
            ok: true,
            message: format!(
                "changed VM {name}: {said} (for its new connections; those open keep \
                 their grant{})",
                if retuned > 0 {
                    format!(", but for the compute policy, now that of its {retuned} live workers")
                } else {
                    String::new()
                }
            ),
            token,
            ..Response::default()
        })
    }

    fn remove(&self, peer: &Peer, name: &str, revoke: bool) -> Result<Response, String> {
        let mut grants = grants::load(&self.grants_path())?;
        let before = grants.len();
        grants.retain(|g| g.name != name);
        let had = grants.len() != before;
        // A revoke without a grant still ends the VM's live workers, if it has any:
        // those a grant admitted that is gone since (dropped as the daemon restarted,
        // or removed), or a configuration file entry's.
        let live = revoke
            && !had
            && crate::suspend::live_workers(&self.state_dir, name)
                .is_ok_and(|(_, w)| w.iter().any(|w| is_worker(w.pid)));
        if !had && !live {
            return Err(no_grant(name));
        }
        if had {
            // Unchecked: taking a grant away is always allowed, even where the others
            // no longer agree with the configuration file.
            grants::save(&self.grants_path(), &grants)?;
        }
        if !revoke {
            info!(by = %peer, vm = %name, "admin: grant removed; live workers keep theirs");
            return Ok(Response {
                ok: true,
                message: format!(
                    "removed the grant of VM {name}: new connections are decided without \
                     it; its open connections go on until they end"
                ),
                ..Response::default()
            });
        }
        let ended = end_workers(&self.state_dir, name);
        match ended {
            Ok((pids, bytes)) => {
                let what = if had {
                    "grant revoked, its workers ended"
                } else {
                    "no run-time grant; its live workers ended"
                };
                info!(by = %peer, vm = %name, workers = pids.len(), refunded_bytes = bytes,
                    "admin: {what}");
                Ok(Response {
                    ok: true,
                    message: format!(
                        "{} VM {name}: {} worker(s) ended, {bytes} bytes of GPU memory \
                         given back",
                        if had {
                            "revoked"
                        } else {
                            "no run-time grant for"
                        },
                        pids.len()
                    ),
                    ended: pids,
                    refunded_bytes: bytes,
                    ..Response::default()
                })
            }
            Err(why) => {
                warn!(by = %peer, vm = %name, "admin: grant revoked, but {why}");
                Err(format!("revoked the grant of VM {name}, but {why}"))
            }
        }
    }

    fn list(&self) -> Result<Response, String> {
        let grants = grants::load(&self.grants_path())?;
        let base = Policy::load(self.config.as_deref()).map_err(|e| e.to_string())?;
        let views = grants
            .iter()
            .map(|g| {
                let lines = VmLedger::open(&self.state_dir, &g.name)
                    .ok()
                    .flatten()
                    .and_then(|l| l.workers().ok())
                    .unwrap_or_default();
                GrantView {
                    name: g.name.clone(),
                    cid: g.cid,
                    uid: g.uid,
                    token: g.token.is_some(),
                    tcp: g.tcp,
                    limits: g.limits.clone(),
                    persist: g.persist,
                    replaces_file_entry: base.config.vms.iter().any(|v| v.name == g.name),
                    changed_by: g.changed_by,
                    changed_ms: g.changed_ms,
                    workers: lines.len(),
                    device_bytes: lines.iter().map(|l| l.device_bytes).sum(),
                }
            })
            .collect::<Vec<_>>();
        Ok(Response {
            ok: true,
            message: format!("{} run-time grant(s)", views.len()),
            grants: views,
            ..Response::default()
        })
    }

    /// Open the admin socket at `path` and answer on it, on a thread of its own.
    pub fn listen(self, path: &Path) -> Result<Started, String> {
        let fail = |e: std::io::Error| format!("admin socket {}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        socket_files::check_free(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "another daemon has its admin socket at {} (stop it first, or give this one \
                 another [admin] socket or --state-dir)",
                path.display()
            ),
            _ => fail(e),
        })?;
        // Bound under another name and closed to others before it takes its own:
        // nobody ever finds it open to more than it should be.
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".{}.tmp", std::process::id()));
        let staging = PathBuf::from(staging);
        let _ = std::fs::remove_file(&staging);
        let listener = UnixListener::bind(&staging).map_err(fail)?;
        let mode = match &self.allowed.group {
            Some((_, gid)) => {
                std::os::unix::fs::chown(&staging, None, Some(*gid)).map_err(fail)?;
                0o660
            }
            None => 0o600,
        };
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(mode)).map_err(fail)?;
        if let Err(e) = std::fs::rename(&staging, path) {
            let _ = std::fs::remove_file(&staging);
            return Err(fail(e));
        }
        let owned = socket_files::Owned::record(path).map_err(fail)?;
        if !socket_files::remove_on_stop(&owned) {
            warn!(path = %path.display(), "too many sockets: a stop signal leaves this one behind");
        }
        info!(path = %path.display(), group = ?self.allowed.group.as_ref().map(|g| &g.0),
            "admin socket open (root, the daemon's user and the group may use it)");
        let thread = std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(stream) => self.serve(stream),
                        Err(e) => warn!("admin socket: accept failed: {e}"),
                    }
                }
            })
            .map_err(fail)?;
        Ok(Started {
            path: path.to_path_buf(),
            owned,
            thread,
        })
    }

    /// One connection: who it is, then its one request.
    fn serve(&self, mut stream: UnixStream) {
        let peer = match auth::peer_of(&stream) {
            Ok(p) => p,
            Err(e) => {
                warn!("admin socket: refused a caller whose credentials are unknown: {e}");
                return;
            }
        };
        if let Err(why) = self.allowed.check(&peer) {
            warn!("admin socket: refused {why}");
            answer(
                &mut stream,
                &Response::refused(
                    "not permitted: the admin socket is for root and the [admin] group",
                ),
            );
            return;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        let mut text = zeroize::Zeroizing::new(Vec::new());
        let read = BufReader::new((&stream).take(MAX_MESSAGE)).read_until(b'\n', &mut text);
        let response = match read {
            Ok(_) => match serde_json::from_slice::<Request>(&text) {
                Ok(request) => self.handle(&peer, request),
                Err(e) => {
                    warn!(by = %peer, "admin socket: not a request: {e}");
                    Response::refused(format!("not a request: {e}"))
                }
            },
            Err(e) => {
                warn!(by = %peer, "admin socket: {e}");
                return;
            }
        };
        answer(&mut stream, &response);
    }
}

/// Whether the run-time `grants` (as `merged` resolves them, with `[defaults]`) fit
/// `gpus`: on each GPU, the memory quotas of the grants that see it add up to no more
/// than its memory. A grant's quota counts in full on every GPU it sees (its guests may
/// put all of it on any one), and a grant without a quota counts as the whole GPU.
/// Entries of the configuration file are not counted: they are the operator's own.
pub fn check_capacity(
    merged: &Policy,
    grants: &[RuntimeGrant],
    gpus: &[Gpu],
) -> Result<(), String> {
    let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
    let mut held: Vec<Vec<(&str, u64)>> = vec![Vec::new(); gpus.len()];
    for g in grants {
        let Some(grant) = merged.grant_of(&g.name) else {
            continue;
        };
        let seen = grant
            .gpus
            .resolve(&uuids)
            .map_err(|why| format!("VM {}: {why}", g.name))?;
        for i in seen {
            held[i].push((&g.name, grant.memory_quota.unwrap_or(gpus[i].memory)));
        }
    }
    for (i, (gpu, on)) in gpus.iter().zip(&held).enumerate() {
        let total = on.iter().fold(0u64, |t, (_, b)| t.saturating_add(*b));
        if total > gpu.memory {
            let each: Vec<String> = on.iter().map(|(n, b)| format!("{n} {b}")).collect();
            return Err(format!(
                "GPU {i} ({}) has {} bytes of memory; the run-time grants that see it would \
                 hold {total} together ({}; a grant without a memory_quota holds all of it). \
                 [admin] overcommit = true allows that",
                gpu.uuid,
                gpu.memory,
                each.join(", ")
            ));
        }
    }
    Ok(())
}

fn answer(stream: &mut UnixStream, response: &Response) {
    if let Ok(mut text) = serde_json::to_vec(response) {
        text.push(b'\n');
        let _ = stream.write_all(&text);
        // The generated token, if any, is not left in freed memory.
        zeroize::Zeroize::zeroize(&mut text);
    }
}

fn no_grant(name: &str) -> String {
    format!(
        "VM {name:?} has no run-time grant (`vmcuda-host admin list` shows them; entries of \
         the configuration file are changed there)"
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Set what `spec` gives on `grant` (a new one when `new`); the token made, when one
/// was asked for.
fn apply(grant: &mut RuntimeGrant, spec: GrantSpec, new: bool) -> Result<Option<String>, String> {
    if spec.token.is_some() && spec.generate_token {
        return Err("give a token or ask for one to be made, not both".into());
    }
    if let Some(t) = &spec.token {
        if t.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token is shorter than {MIN_TOKEN_LEN} characters"
            ));
        }
    }
    let made = if spec.generate_token {
        Some(make_token()?)
    } else {
        None
    };
    let had_token = grant.token.is_some();
    if let Some(t) = &made {
        grant.token = Some(Secret::new(t.clone()));
    } else if let Some(t) = spec.token {
        grant.token = Some(t);
    }
    if spec.cid.is_some() {
        grant.cid = spec.cid;
    }
    if spec.uid.is_some() {
        grant.uid = spec.uid;
    }
    match spec.tcp {
        Some(tcp) => grant.tcp = tcp,
        // A token given to a new grant (or to one that had none) is for TCP.
        None if grant.token.is_some() && (new || !had_token) => grant.tcp = true,
        None => {}
    }
    overlay(&mut grant.limits, spec.limits);
    Ok(made)
}

/// `over`'s limits set on `limits`.
fn overlay(limits: &mut Limits, over: Limits) {
    let Limits {
        gpus,
        memory_quota,
        max_streams,
        max_events,
        max_modules,
        max_connections,
        buffer_memory,
        host_memory,
        max_registrations,
        registered_memory,
        module_cache,
        compute_share,
        compute_priority,
        compute_cap,
    } = over;
    macro_rules! set {
        ($($field:ident),*) => {$(
            if $field.is_some() {
                limits.$field = $field;
            }
        )*};
    }
    set!(
        gpus,
        memory_quota,
        max_streams,
        max_events,
        max_modules,
        max_connections,
        buffer_memory,
        host_memory,
        max_registrations,
        registered_memory,
        module_cache,
        compute_share,
        compute_priority,
        compute_cap
    );
}

/// A grant in words for the log (never its token).
fn describe(g: &RuntimeGrant) -> String {
    let mut parts = Vec::new();
    if let Some(cid) = g.cid {
        parts.push(format!("cid {cid}"));
    }
    if let Some(uid) = g.uid {
        parts.push(format!("uid {uid}"));
    }
    if g.token.is_some() {
        parts.push(if g.tcp {
            "tcp with a token".to_string()
        } else {
            "a token (tcp off)".to_string()
        });
    }
    let l = &g.limits;
    if let Some(gpus) = &l.gpus {
        parts.push(format!(
            "gpus {}",
            match gpus {
                crate::policy::Gpus::Named(n) => n.clone(),
                crate::policy::Gpus::List(ids) => ids
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            }
        ));
    }
    if let Some(q) = l.memory_quota {
        parts.push(format!("memory_quota {}", q.0));
    }
    if let Some(h) = l.host_memory {
        parts.push(format!("host_memory {}", h.0));
    }
    if let Some(n) = l.max_connections {
        parts.push(format!("max_connections {n}"));
    }
    if let Some(n) = l.compute_share {
        parts.push(format!("compute_share {n}"));
    }
    if let Some(p) = l.compute_priority {
        parts.push(format!("compute_priority {}", p.name()));
    }
    if let Some(n) = l.compute_cap {
        parts.push(format!("compute_cap {n}%"));
    }
    if g.cid.is_none() && g.uid.is_none() && g.token.is_none() {
        // Only a listener that names its VM itself reaches it: the vhost-user device
        // started with --vm-name for it.
        parts.insert(0, "by name only (vhost-user device --vm-name)".into());
    }
    if g.persist {
        parts.push("persistent".into());
    }
    parts.join(", ")
}

/// 32 random bytes from the kernel, in hex.
fn make_token() -> Result<String, String> {
    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes[..]))
        .map_err(|e| format!("cannot make a token: {e}"))?;
    use std::fmt::Write as _;
    Ok(bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// Whether process `pid` is a `vmcuda-host worker` (so never some other process that
/// took a dead worker's pid before its ledger line was dropped).
fn is_worker(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"worker"))
}

/// End every live worker of VM `vm` (its ledger under `state_dir`) and wait until
/// they are gone and their ledger lines with them; the pids ended and the GPU memory
/// their lines held. Workers a connection admitted just before the grant went are
/// caught by looking again until the ledger stays empty.
pub fn end_workers(state_dir: &Path, vm: &str) -> Result<(Vec<u32>, u64), String> {
    let deadline = Instant::now() + END_TIMEOUT;
    let mut ended: Vec<u32> = Vec::new();
    let mut bytes = 0u64;
    let mut quiet_looks = 0;
    while quiet_looks < 2 {
        let workers = match crate::suspend::live_workers(state_dir, vm) {
            Ok((_, workers)) => workers,
            Err(crate::suspend::SuspendError::NoWorkers(_)) => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        // A line whose pid is no worker (its worker died and the pid went to another
        // process before anyone dropped the line) is not signalled.
        let targets: Vec<_> = workers.iter().filter(|w| is_worker(w.pid)).collect();
        if targets.is_empty() {
            quiet_looks += 1;
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        quiet_looks = 0;
        for w in &targets {
            if !ended.contains(&w.pid) {
                ended.push(w.pid);
                bytes = bytes.saturating_add(w.device_bytes);
            }
            // SAFETY: kill takes a pid and a signal number and touches no memory of
            // ours; the pid is a live vmcuda worker's, as its command line says.
            let rc = unsafe { libc::kill(w.pid as libc::pid_t, libc::SIGKILL) };
            let e = std::io::Error::last_os_error();
            if rc != 0 && e.raw_os_error() == Some(libc::EPERM) {
                return Err(format!(
                    "worker {} of VM {vm} cannot be signalled by this daemon (EPERM): a \
                     jailed worker runs as its VM's user, so a daemon not running as root \
                     needs CAP_KILL to end it (the packaged service has it)",
                    w.pid
                ));
            }
        }
        while targets.iter().any(|w| is_worker(w.pid)) {
            if Instant::now() > deadline {
                return Err(format!(
                    "VM {vm}'s workers {:?} did not end within {} s",
                    targets.iter().map(|w| w.pid).collect::<Vec<_>>(),
                    END_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Gone once their parent (this daemon, or a vhost-user device) reaps them: the
        // ledger counts a process until then.
        let reaped_by = Instant::now() + Duration::from_secs(2);
        while targets.iter().any(|w| crate::ledger::alive(w.pid)) && Instant::now() < reaped_by {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // The lines of the workers ended are dropped by the next look at the ledger, which
    // the loop above made; what they held counts no more.
    Ok((ended, bytes))
}
