//! A VM's memory quota and connection limit across all its connections.
//!
//! Each guest connection has its own worker process, but a quota is the VM's. The
//! workers of one VM therefore keep one ledger file, `<state_dir>/ledger/<vm>.ledger`,
//! with one line per live worker: `<pid> <bytes held>` (the pid as the host numbers it,
//! also for a worker in its own pid namespace: [`crate::process::host_pid`]), then the
//! bytes of its frame buffers (`[[vm]] buffer_memory` bounds their sum) and of the host
//! memory it keeps for its guest (`[[vm]] host_memory` bounds theirs), when it has any
//! (see [`LedgerAccount`]). Every change happens under an exclusive `flock`. A worker that dies without cleaning up (killed, crashed) leaves its line
//! behind; the next worker to take the lock finds its pid gone and drops the line, so
//! what a dead worker held stops counting as soon as anyone asks. The daemon or the
//! vhost-user device may have spawned the workers; neither has to take part.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("ledger {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the VM already has {0} connections, its limit")]
    TooManyConnections(u32),
}

/// One worker's place in its VM's ledger. Dropping it removes the worker's line.
///
/// The file is opened once, when the worker joins, and every later change goes
/// through that descriptor: a jailed worker (docs/security.md) keeps its ledger
/// without being able to open it, or any other VM's, by path.
pub struct Ledger {
    file: Arc<File>,
    path: PathBuf,
    pid: u32,
}

struct Entry {
    pid: u32,
    bytes: u64,
    /// Host memory of the worker's frame buffers.
    buffers: u64,
    /// Host memory the worker keeps for its guest (see `session::host_memory`).
    host: u64,
    /// Host memory the driver holds for the worker's GPU memory while the operator has
    /// it suspended (`crate::suspend`): the VM's as its `host` is, written by the
    /// operator's command and kept as it is by every worker's update.
    suspended: u64,
}

/// Which of a worker's host-memory figures a [`LedgerAccount`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    Buffers,
    HostMemory,
}

impl Entry {
    fn kept(&mut self, which: Kept) -> &mut u64 {
        match which {
            Kept::Buffers => &mut self.buffers,
            Kept::HostMemory => &mut self.host,
        }
    }

    /// What this line counts against the VM's limit of `which`: a suspended worker's
    /// GPU memory, held in host memory then, counts as host memory.
    fn counted(&self, which: Kept) -> u64 {
        match which {
            Kept::Buffers => self.buffers,
            Kept::HostMemory => self.host.saturating_add(self.suspended),
        }
    }
}

/// One of a worker's host-memory figures (its frame buffers, or what it keeps for its
/// guest), counted in its VM's ledger against the VM's limit. Made by
/// [`Ledger::buffers`] and [`Ledger::host_memory`]; it counts only while the [`Ledger`]
/// it came from lives.
pub struct LedgerAccount {
    file: Arc<File>,
    path: PathBuf,
    pid: u32,
    which: Kept,
}

impl LedgerAccount {
    /// Count `bytes` more, unless the VM's workers would then hold more than `limit`
    /// of this kind: `Ok(false)` then, and nothing is counted.
    pub fn charge(&self, bytes: u64, limit: u64) -> Result<bool, LedgerError> {
        update(&self.file, &self.path, self.pid, |entries| {
            let total = entries
                .iter()
                .fold(0u64, |t, e| t.saturating_add(e.counted(self.which)));
            if total.checked_add(bytes).is_none_or(|t| t > limit) {
                return Ok(false);
            }
            if let Some(me) = entries.iter_mut().find(|e| e.pid == self.pid) {
                *me.kept(self.which) += bytes;
            }
            Ok(true)
        })
    }

    /// Give back `bytes`.
    pub fn refund(&self, bytes: u64) -> Result<(), LedgerError> {
        update(&self.file, &self.path, self.pid, |entries| {
            if let Some(me) = entries.iter_mut().find(|e| e.pid == self.pid) {
                let kept = me.kept(self.which);
                *kept = kept.saturating_sub(bytes);
            }
            Ok(())
        })
    }
}

impl Ledger {
    /// Join VM `vm`'s ledger under `state_dir` as this process, unless the VM already
    /// has `max_connections` live workers.
    pub fn join(state_dir: &Path, vm: &str, max_connections: u32) -> Result<Ledger, LedgerError> {
        let dir = state_dir.join("ledger");
        let io = |source| LedgerError::Io {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let path = dir.join(file_name(vm));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| LedgerError::Io {
                path: path.clone(),
                source,
            })?;
        let ledger = Ledger {
            file: Arc::new(file),
            path,
            pid: crate::process::host_pid(),
        };
        ledger.update(|entries| {
            if entries.len() >= max_connections as usize {
                return Err(LedgerError::TooManyConnections(max_connections));
            }
            entries.push(Entry {
                pid: ledger.pid,
                bytes: 0,
                buffers: 0,
                host: 0,
                suspended: 0,
            });
            Ok(())
        })?;
        Ok(ledger)
    }

    /// Make every later change fail as an I/O error would (a descriptor that can be
    /// neither locked, read nor written), for tests of what the accounts do then.
    #[cfg(test)]
    pub(crate) fn break_for_tests(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let path_only = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&self.path)
            .expect("the ledger file exists");
        self.file = Arc::new(path_only);
    }

    /// The ledger file (the worker jail hands it to the VM's group and keeps it visible).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Count `bytes` more against the VM, unless its workers together would then hold
    /// more than `quota`: `Ok(false)` then, and nothing is counted.
    pub fn charge(&self, bytes: u64, quota: u64) -> Result<bool, LedgerError> {
        self.update(|entries| {
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            if total.checked_add(bytes).is_none_or(|t| t > quota) {
                return Ok(false);
            }
            if let Some(me) = entries.iter_mut().find(|e| e.pid == self.pid) {
                me.bytes += bytes;
            }
            Ok(true)
        })
    }

    /// Give back `bytes` this worker held.
    pub fn refund(&self, bytes: u64) -> Result<(), LedgerError> {
        self.update(|entries| {
            if let Some(me) = entries.iter_mut().find(|e| e.pid == self.pid) {
                me.bytes = me.bytes.saturating_sub(bytes);
            }
            Ok(())
        })
    }

    /// What the VM's live workers hold together.
    pub fn total(&self) -> Result<u64, LedgerError> {
        let mut total = 0;
        self.update(|entries| {
            total = entries.iter().map(|e| e.bytes).sum();
            Ok(())
        })?;
        Ok(total)
    }

    /// This worker's frame buffers' account in the same ledger.
    pub fn buffers(&self) -> LedgerAccount {
        self.account(Kept::Buffers)
    }

    /// The account of the host memory this worker keeps for its guest, in the same
    /// ledger.
    pub fn host_memory(&self) -> LedgerAccount {
        self.account(Kept::HostMemory)
    }

    fn account(&self, which: Kept) -> LedgerAccount {
        LedgerAccount {
            file: Arc::clone(&self.file),
            path: self.path.clone(),
            pid: self.pid,
            which,
        }
    }

    fn update<T>(
        &self,
        f: impl FnOnce(&mut Vec<Entry>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        update(&self.file, &self.path, self.pid, f)
    }
}

/// One live worker as its VM's ledger has it, for the operator's commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerLine {
    /// The worker's pid as the host numbers it.
    pub pid: u32,
    /// GPU memory it holds for its guest (the quota's bytes).
    pub device_bytes: u64,
    /// Host memory it keeps for its guest.
    pub host_bytes: u64,
    /// Host memory its suspended GPU memory takes (0 unless it is suspended).
    pub suspended: u64,
}

/// What [`VmLedger::mark_suspended`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Counted,
    /// The VM's host memory has no room for it.
    NoRoom,
    /// The worker has left the ledger (its guest is gone).
    Gone,
}

/// A VM's ledger as the operator's commands (`vmcuda-host suspend`) see it: opened by
/// path, never joined, so it changes only the lines it is asked to.
pub struct VmLedger {
    file: File,
    path: PathBuf,
}

impl VmLedger {
    /// VM `vm`'s ledger under `state_dir`; `None` when no worker of it ever joined.
    pub fn open(state_dir: &Path, vm: &str) -> Result<Option<VmLedger>, LedgerError> {
        let path = state_dir.join("ledger").join(file_name(vm));
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => Ok(Some(VmLedger { file, path })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LedgerError::Io { path, source }),
        }
    }

    /// The VM's live workers.
    pub fn workers(&self) -> Result<Vec<WorkerLine>, LedgerError> {
        let mut lines = Vec::new();
        self.update(|entries| {
            lines = entries.iter().map(WorkerLine::from).collect();
            Ok(())
        })?;
        Ok(lines)
    }

    /// Count `bytes` of worker `pid`'s suspended GPU memory as the VM's host memory,
    /// unless the VM would then keep more than `limit` or the worker is gone (nothing
    /// is counted then).
    pub fn mark_suspended(&self, pid: u32, bytes: u64, limit: u64) -> Result<Mark, LedgerError> {
        self.update(|entries| {
            let total = entries
                .iter()
                .fold(0u64, |t, e| t.saturating_add(e.counted(Kept::HostMemory)));
            let Some(me) = entries.iter_mut().find(|e| e.pid == pid) else {
                return Ok(Mark::Gone);
            };
            let total = total.saturating_sub(me.suspended);
            if total.checked_add(bytes).is_none_or(|t| t > limit) {
                return Ok(Mark::NoRoom);
            }
            me.suspended = bytes;
            Ok(Mark::Counted)
        })
    }

    /// Worker `pid` is running again: its GPU memory no longer counts as host memory.
    pub fn clear_suspended(&self, pid: u32) -> Result<(), LedgerError> {
        self.update(|entries| {
            if let Some(me) = entries.iter_mut().find(|e| e.pid == pid) {
                me.suspended = 0;
            }
            Ok(())
        })
    }

    fn update<T>(
        &self,
        f: impl FnOnce(&mut Vec<Entry>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        // No worker has pid 0: every dead worker's line is dropped.
        update(&self.file, &self.path, 0, f)
    }
}

impl From<&Entry> for WorkerLine {
    fn from(e: &Entry) -> WorkerLine {
        WorkerLine {
            pid: e.pid,
            device_bytes: e.bytes,
            host_bytes: e.host,
            suspended: e.suspended,
        }
    }
}

/// Read the ledger (`file`, opened at `path`) under its lock, drop dead workers' lines
/// (never `pid`'s), let `f` change the rest, and write it back.
fn update<T>(
    file: &File,
    path: &Path,
    pid: u32,
    f: impl FnOnce(&mut Vec<Entry>) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    let io = |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    };
    // The lock is the open file's, shared with every worker of the VM that opened the
    // same file; the offset is shared with this worker's own copies, so read from 0.
    let file = file.try_clone().map_err(io)?;
    let mut file: Flock<File> = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io(std::io::Error::from(errno)))?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    let mut entries: Vec<Entry> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            Some(Entry {
                pid: fields.next()?.parse().ok()?,
                bytes: fields.next()?.parse().ok()?,
                buffers: fields.next().map_or(Some(0), |b| b.parse().ok())?,
                host: fields.next().map_or(Some(0), |b| b.parse().ok())?,
                suspended: fields.next().map_or(Some(0), |b| b.parse().ok())?,
            })
        })
        .filter(|e| e.pid == pid || alive(e.pid))
        .collect();
    let result = f(&mut entries)?;
    let new_text: String = entries
        .iter()
        .map(|e| match (e.buffers, e.host, e.suspended) {
            (0, 0, 0) => format!("{} {}\n", e.pid, e.bytes),
            (b, 0, 0) => format!("{} {} {b}\n", e.pid, e.bytes),
            (b, h, 0) => format!("{} {} {b} {h}\n", e.pid, e.bytes),
            (b, h, s) => format!("{} {} {b} {h} {s}\n", e.pid, e.bytes),
        })
        .collect();
    // A look that changed nothing (a total, a refused charge) writes nothing.
    if new_text == text {
        return Ok(result);
    }
    let text = new_text;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.set_len(0).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    Ok(result)
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let pid = self.pid;
        let _ = self.update(|entries| {
            entries.retain(|e| e.pid != pid);
            Ok(())
        });
    }
}

/// Whether process `pid` still exists (a zombie not yet reaped counts: its memory is
/// released only when the driver lets go of its context, near enough to that).
pub(crate) fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A file name for VM `vm`: inside the ledger directory, and one VM's alone. Letters,
/// digits, `-` and `_` stand for themselves; every other byte is `%XX`, so no two
/// names share a file (`a b` is `a%20b`, `a_b` stays `a_b`) and none is `.`, `..` or
/// holds a `/`. A name too long for a file name is its SHA-256 after a `%`, which no
/// encoded name starts with.
pub fn file_name(vm: &str) -> String {
    use std::fmt::Write;
    let mut name = String::with_capacity(vm.len() + 7);
    for b in vm.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            name.push(b as char);
        } else {
            let _ = write!(name, "%{b:02X}");
        }
    }
    // NAME_MAX is 255 bytes; room is left for the suffix.
    if name.len() > 200 {
        use sha2::{Digest, Sha256};
        name = Sha256::digest(vm.as_bytes())
            .iter()
            .fold(String::from("%sha256-"), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            });
    }
    name + ".ledger"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vmcuda-ledger-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_quota_is_shared_by_all_of_a_vms_workers_and_dead_ones_stop_counting() {
        let d = dir("share");
        let me = Ledger::join(&d, "vm1", 8).unwrap();
        assert!(me.charge(600, 1000).unwrap());
        // A second worker of the same VM (written as another live process would be).
        let path = d.join("ledger/vm1.ledger");
        let other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("{} 300\n", other.id()));
        std::fs::write(&path, text).unwrap();
        assert_eq!(me.total().unwrap(), 900);
        assert!(
            !me.charge(200, 1000).unwrap(),
            "600 + 300 + 200 is over 1000"
        );
        assert!(me.charge(100, 1000).unwrap());
        // The other worker dies without cleaning up: its 300 bytes are free again.
        let mut other = other;
        other.kill().unwrap();
        other.wait().unwrap();
        assert_eq!(me.total().unwrap(), 700);
        assert!(me.charge(300, 1000).unwrap());
        me.refund(1000).unwrap();
        assert_eq!(me.total().unwrap(), 0);
        drop(me);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Host memory kept for guests is the VM's, like its quota: one worker's charge
    /// counts against the others', apart from frame buffers and device memory.
    #[test]
    fn host_memory_is_counted_for_the_whole_vm_apart_from_buffers() {
        let d = dir("host");
        let me = Ledger::join(&d, "vm3", 8).unwrap();
        let (buffers, host) = (me.buffers(), me.host_memory());
        assert!(host.charge(600, 1000).unwrap());
        assert!(buffers.charge(900, 1000).unwrap(), "buffers count apart");
        assert!(me.charge(900, 1000).unwrap(), "so does device memory");
        let path = d.join("ledger/vm3.ledger");
        let other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{} 900 900 600\n", me.pid));
        text.push_str(&format!("{} 0 0 300\n", other.id()));
        std::fs::write(&path, text).unwrap();
        assert!(
            !host.charge(200, 1000).unwrap(),
            "600 + 300 + 200 is over 1000"
        );
        assert!(host.charge(100, 1000).unwrap());
        let mut other = other;
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(
            host.charge(300, 1000).unwrap(),
            "a dead worker's stops counting"
        );
        host.refund(1000).unwrap();
        buffers.refund(900).unwrap();
        me.refund(900).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{} 0\n", me.pid)
        );
        drop(me);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A suspended worker's GPU memory is the VM's host memory: the operator's mark
    /// is refused over the limit, counts against the workers' own charges, survives
    /// their updates, and is given back when cleared.
    #[test]
    fn suspended_gpu_memory_counts_as_the_vms_host_memory() {
        let d = dir("suspend");
        let me = Ledger::join(&d, "vm4", 8).unwrap();
        let host = me.host_memory();
        assert!(host.charge(300, 1000).unwrap());
        assert!(me.charge(5000, u64::MAX).unwrap(), "device memory");
        let operator = VmLedger::open(&d, "vm4")
            .unwrap()
            .expect("the ledger exists");
        assert!(VmLedger::open(&d, "nobody").unwrap().is_none());
        let pid = me.pid;
        assert_eq!(
            operator.mark_suspended(pid, 800, 1000).unwrap(),
            Mark::NoRoom,
            "300 + 800 is over 1000"
        );
        assert_eq!(
            operator.mark_suspended(pid + 1, 10, 1000).unwrap(),
            Mark::Gone
        );
        assert_eq!(
            operator.mark_suspended(pid, 700, 1000).unwrap(),
            Mark::Counted
        );
        assert_eq!(
            operator.workers().unwrap(),
            vec![WorkerLine {
                pid,
                device_bytes: 5000,
                host_bytes: 300,
                suspended: 700
            }]
        );
        assert!(
            !host.charge(1, 1000).unwrap(),
            "the VM's host memory is full"
        );
        // The worker's own changes keep the operator's figure.
        me.refund(1000).unwrap();
        assert_eq!(operator.workers().unwrap()[0].suspended, 700);
        operator.clear_suspended(pid).unwrap();
        assert!(host.charge(700, 1000).unwrap());
        drop(me);
        assert!(operator.workers().unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_vm_cannot_open_more_connections_than_its_limit() {
        let d = dir("limit");
        let path = d.join("ledger/vm2.ledger");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let others: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let text: String = others.iter().map(|c| format!("{} 0\n", c.id())).collect();
        std::fs::write(&path, text).unwrap();
        assert!(matches!(
            Ledger::join(&d, "vm2", 2),
            Err(LedgerError::TooManyConnections(2))
        ));
        assert!(Ledger::join(&d, "vm2", 3).is_ok());
        for mut c in others {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn vm_names_stay_inside_the_ledger_directory() {
        assert_eq!(
            file_name("../../etc/passwd"),
            "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd.ledger"
        );
        assert_eq!(file_name("vm 1"), "vm%201.ledger");
        assert_eq!(file_name(".hidden"), "%2Ehidden.ledger");
        for name in ["..", ".", "/", "a/../b", &"x".repeat(300), "\u{1b}[2J"] {
            let f = file_name(name);
            assert!(!f.contains('/') && !f.starts_with('.'), "{name:?} -> {f:?}");
            assert!(f.len() <= 255, "{name:?} -> {} bytes", f.len());
        }
    }

    /// Two VMs never share a ledger, whatever their names.
    #[test]
    fn different_vm_names_get_different_ledgers() {
        let long = "y".repeat(300);
        let longer = "y".repeat(301);
        let names = [
            "a b",
            "a_b",
            "a%20b",
            "a.b",
            "a-b",
            "a+b",
            "A b",
            "é",
            "%C3%A9",
            &long,
            &longer,
            "%sha256-",
            "vm1",
            "vm1.ledger",
        ];
        let files: std::collections::HashSet<String> = names.iter().map(|n| file_name(n)).collect();
        assert_eq!(files.len(), names.len(), "{files:?}");
    }
}
