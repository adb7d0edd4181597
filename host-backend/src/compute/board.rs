//! The compute board: one small file per state directory, mapped by every worker (and
//! read by the daemon), on which workers take turns on the GPU.
//!
//! Layout: a header of 64-bit words, then [`SLOTS`] slots of [`SLOT_WORDS`] words. A
//! worker claims a free slot when its guest is admitted (its host pid, compare and
//! swap), publishes its VM's share and priority there, and frees it when it ends. A
//! slot whose worker died is known by its heartbeat, which its keeper thread renews.
//! Every field is an atomic, so any bytes are a valid board; the worst a damaged board
//! can do is schedule badly, never touch memory outside it.

use std::fs::OpenOptions;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

/// Workers that can be scheduled at once on one host.
pub const SLOTS: usize = 1024;
/// Words per slot (128 bytes: no two slots share a cache line pair).
const SLOT_WORDS: usize = 16;
const HEADER_WORDS: usize = 64;
pub const FILE_LEN: usize = (HEADER_WORDS + SLOTS * SLOT_WORDS) * 8;
const MAGIC: u64 = u64::from_le_bytes(*b"VMCUTURN");
/// Bumped whenever a field moves: a board of another layout is made anew.
const VERSION: u64 = 1;

/// The header's words.
mod head {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    /// The slot holding the turn, plus one (0: nobody).
    pub const TURN: usize = 2;
    /// When the turn was given (monotonic ns).
    pub const TURN_SINCE: usize = 3;
    /// Futex word (low half): bumped whenever the turn changes hands.
    pub const EPOCH: usize = 4;
    /// Futex word (low half): bumped whenever a worker starts waiting.
    pub const ARRIVALS: usize = 5;
    /// Workers waiting, by priority (3 words).
    pub const WAITING: usize = 8;
    /// When a worker of each priority last began a request (3 words, monotonic ns).
    pub const ACTIVE_AT: usize = 12;
}

/// A slot's words.
pub(super) mod slot {
    /// The worker's host pid (0: free).
    pub const PID: usize = 0;
    /// Renewed by the worker's keeper (monotonic ns).
    pub const HEARTBEAT: usize = 1;
    /// A hash of the VM's name (never 0 in a claimed slot).
    pub const VM: usize = 2;
    /// The VM's share (a weight), its priority, its cap in percent (0: none).
    pub const SHARE: usize = 3;
    pub const PRIORITY: usize = 4;
    pub const CAP: usize = 5;
    /// When the worker began to wait for a turn (0: it does not wait).
    pub const WAITING_SINCE: usize = 6;
    /// The worker's virtual time: its turns' time divided by its weight.
    pub const VTIME: usize = 7;
    /// Nanoseconds of turns taken, and of requests held waiting for one.
    pub const USED: usize = 8;
    pub const THROTTLED: usize = 9;
    /// When a request last ran or ended (monotonic ns): the slot counts as active
    /// for a while after.
    pub const ACTIVE_AT: usize = 10;
    /// 0 while a request runs; else when the last one ended (monotonic ns).
    pub const IDLE_SINCE: usize = 11;
    /// Up to when the slot's turn time has been counted.
    pub const CHARGED_TO: usize = 12;
    /// For the cap: credit in ns (signed), and when it was last refilled.
    pub const CREDIT: usize = 13;
    pub const CREDIT_AT: usize = 14;
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct BoardError {
    path: PathBuf,
    source: std::io::Error,
}

/// The board mapped into this process.
pub struct Board {
    ptr: NonNull<AtomicU64>,
}

// SAFETY: the mapping is shared memory touched only through atomics; the pointer is
// valid for the value's life wherever it is used.
unsafe impl Send for Board {}
// SAFETY: as above: every access is an atomic operation.
unsafe impl Sync for Board {}

/// Where the board lives under a state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("compute.board")
}

impl Board {
    /// Open (making it when missing or of another layout) the board of `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Board, BoardError> {
        let path = path(state_dir);
        let err = |source| BoardError {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(err)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(err)?;
        // Made and checked under a lock, so two first workers do not both lay it out.
        let file = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| err(e.into()))?;
        if file.metadata().map_err(err)?.len() != FILE_LEN as u64 {
            file.set_len(0).map_err(err)?;
            file.set_len(FILE_LEN as u64).map_err(err)?;
        }
        let board = Board::map(&file).map_err(err)?;
        if board.head(head::MAGIC).load(SeqCst) != MAGIC
            || board.head(head::VERSION).load(SeqCst) != VERSION
        {
            for i in 0..FILE_LEN / 8 {
                board.word(i).store(0, SeqCst);
            }
            board.head(head::VERSION).store(VERSION, SeqCst);
            board.head(head::MAGIC).store(MAGIC, SeqCst);
        }
        Ok(board)
    }

    /// Open an existing board only (for readers: status, the admin API).
    pub fn open_existing(state_dir: &Path) -> Option<Board> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path(state_dir))
            .ok()?;
        if file.metadata().ok()?.len() != FILE_LEN as u64 {
            return None;
        }
        let board = Board::map(&file).ok()?;
        (board.head(head::MAGIC).load(SeqCst) == MAGIC).then_some(board)
    }

    fn map(file: &std::fs::File) -> std::io::Result<Board> {
        use nix::sys::mman::{MapFlags, ProtFlags};
        // SAFETY: a fresh shared mapping of a file FILE_LEN long, placed by the kernel
        // where nothing else is; unmapped only by Drop. The file is never shortened
        // while mapped once laid out (only a board of another layout is, under the lock,
        // before anyone maps it).
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                NonZeroUsize::new(FILE_LEN).expect("not zero"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                file,
                0,
            )
        }?;
        Ok(Board { ptr: ptr.cast() })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < FILE_LEN / 8);
        // SAFETY: in bounds (checked), 8-aligned (the mapping is page-aligned), and any
        // bits are a valid AtomicU64; other processes use it only atomically.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }

    fn head(&self, i: usize) -> &AtomicU64 {
        self.word(i)
    }

    /// A word of slot `s`.
    pub(super) fn slot(&self, s: usize, field: usize) -> &AtomicU64 {
        self.word(HEADER_WORDS + s * SLOT_WORDS + field)
    }

    /// The low half of a header word, as a futex word.
    fn futex_word(&self, i: usize) -> &AtomicU32 {
        let w = self.head(i);
        // SAFETY: the low 4 bytes of an aligned 8-byte atomic (little-endian on every
        // target this runs on), used only atomically.
        unsafe { &*(w as *const AtomicU64).cast::<AtomicU32>() }
    }

    /// The slot holding the turn.
    pub fn turn(&self) -> Option<usize> {
        let t = self.head(head::TURN).load(SeqCst) as usize;
        (1..=SLOTS).contains(&t).then(|| t - 1)
    }

    pub(super) fn turn_since(&self) -> u64 {
        self.head(head::TURN_SINCE).load(SeqCst)
    }

    /// Give the turn from `from` to `to` (None: nobody), if `from` still holds it.
    pub(super) fn hand(&self, from: Option<usize>, to: Option<usize>, now: u64) -> bool {
        let enc = |s: Option<usize>| s.map_or(0, |s| s as u64 + 1);
        let ok = self
            .head(head::TURN)
            .compare_exchange(enc(from), enc(to), SeqCst, SeqCst)
            .is_ok();
        if ok {
            self.head(head::TURN_SINCE).store(now, SeqCst);
            if let Some(to) = to {
                self.slot(to, slot::CHARGED_TO).store(now, SeqCst);
            }
            self.futex_word(head::EPOCH).fetch_add(1, SeqCst);
            futex_wake(self.futex_word(head::EPOCH));
        }
        ok
    }

    /// Start a new quantum for holder `s`.
    pub(super) fn renew(&self, s: usize, now: u64) {
        if self.turn() == Some(s) {
            self.head(head::TURN_SINCE).store(now, SeqCst);
        }
    }

    pub(super) fn epoch(&self) -> u32 {
        self.futex_word(head::EPOCH).load(SeqCst)
    }

    pub(super) fn arrivals(&self) -> u32 {
        self.futex_word(head::ARRIVALS).load(SeqCst)
    }

    /// Wait until the turn changes hands after `seen`, or `timeout`.
    pub(super) fn wait_epoch(&self, seen: u32, timeout: Duration) {
        futex_wait(self.futex_word(head::EPOCH), seen, timeout);
    }

    /// Wait until a worker starts waiting after `seen`, or `timeout`.
    pub(super) fn wait_arrival(&self, seen: u32, timeout: Duration) {
        futex_wait(self.futex_word(head::ARRIVALS), seen, timeout);
    }

    /// Slot `s` starts waiting at `priority`.
    pub(super) fn arrive(&self, s: usize, priority: usize, now: u64) {
        self.slot(s, slot::WAITING_SINCE).store(now.max(1), SeqCst);
        self.head(head::WAITING + priority.min(2))
            .fetch_add(1, SeqCst);
        self.futex_word(head::ARRIVALS).fetch_add(1, SeqCst);
        futex_wake(self.futex_word(head::ARRIVALS));
    }

    /// Slot `s` stops waiting.
    pub(super) fn leave(&self, s: usize, priority: usize) {
        if self.slot(s, slot::WAITING_SINCE).swap(0, SeqCst) != 0 {
            let w = self.head(head::WAITING + priority.min(2));
            let _ = w.fetch_update(SeqCst, SeqCst, |n| Some(n.saturating_sub(1)));
        }
    }

    /// Workers waiting at `priority`.
    pub(super) fn waiting(&self, priority: usize) -> u64 {
        self.head(head::WAITING + priority.min(2)).load(SeqCst)
    }

    /// Whether anyone waits for a turn.
    pub(super) fn any_waiting(&self) -> bool {
        (0..3).any(|p| self.waiting(p) > 0)
    }

    /// Wake the keepers waiting for arrivals (to look at their holder again).
    pub(super) fn wake_keepers(&self) {
        futex_wake(self.futex_word(head::ARRIVALS));
    }

    /// Wake every keeper and waiter, to look at the board again.
    pub(super) fn wake_all(&self) {
        futex_wake(self.futex_word(head::ARRIVALS));
        futex_wake(self.futex_word(head::EPOCH));
    }

    /// A worker of `priority` begins a request at `now`.
    pub(super) fn mark_active(&self, priority: usize, now: u64) {
        self.head(head::ACTIVE_AT + priority.min(2))
            .fetch_max(now, SeqCst);
    }

    /// Whether a worker of a priority above `priority` began a request within `window`.
    pub(super) fn higher_active(&self, priority: usize, now: u64, window: u64) -> bool {
        (priority + 1..3)
            .any(|q| now.saturating_sub(self.head(head::ACTIVE_AT + q).load(SeqCst)) <= window)
    }

    /// Claim a free slot (or one whose worker's heartbeat is older than `stale`) for
    /// `pid`.
    pub(super) fn claim(&self, pid: u32, now: u64, stale: u64) -> Option<usize> {
        (0..SLOTS).find(|&s| {
            let p = self.slot(s, slot::PID);
            let old = p.load(SeqCst);
            let dead = old != 0
                && self.turn() != Some(s)
                && now.saturating_sub(self.slot(s, slot::HEARTBEAT).load(SeqCst)) > stale;
            if old != 0 && !dead {
                return false;
            }
            if p.compare_exchange(old, u64::from(pid), SeqCst, SeqCst)
                .is_err()
            {
                return false;
            }
            if dead {
                self.leave(s, self.slot(s, slot::PRIORITY).load(SeqCst) as usize);
            }
            for f in 1..SLOT_WORDS {
                self.slot(s, f).store(0, SeqCst);
            }
            self.slot(s, slot::HEARTBEAT).store(now, SeqCst);
            true
        })
    }

    pub(super) fn free(&self, s: usize) {
        self.leave(s, self.slot(s, slot::PRIORITY).load(SeqCst) as usize);
        self.slot(s, slot::PID).store(0, SeqCst);
    }

    /// The slots claimed now, with a copy of their fields.
    pub fn slots(&self) -> Vec<SlotView> {
        (0..SLOTS)
            .filter_map(|s| {
                let pid = self.slot(s, slot::PID).load(SeqCst);
                (pid != 0).then(|| SlotView {
                    index: s,
                    pid: pid as u32,
                    vm: self.slot(s, slot::VM).load(SeqCst),
                    share: self.slot(s, slot::SHARE).load(SeqCst),
                    priority: self.slot(s, slot::PRIORITY).load(SeqCst),
                    cap: self.slot(s, slot::CAP).load(SeqCst),
                    heartbeat: self.slot(s, slot::HEARTBEAT).load(SeqCst),
                    waiting_since: self.slot(s, slot::WAITING_SINCE).load(SeqCst),
                    vtime: self.slot(s, slot::VTIME).load(SeqCst),
                    used_ns: self.slot(s, slot::USED).load(SeqCst),
                    throttled_ns: self.slot(s, slot::THROTTLED).load(SeqCst),
                    active_at: self.slot(s, slot::ACTIVE_AT).load(SeqCst),
                })
            })
            .collect()
    }

    /// Set the share, priority and cap of every slot of VM `vm` (a run-time change).
    pub fn set_vm_policy(&self, vm: &str, share: u64, priority: u64, cap: u64) -> usize {
        let key = vm_key(vm);
        let mut n = 0;
        for s in 0..SLOTS {
            if self.slot(s, slot::PID).load(SeqCst) != 0
                && self.slot(s, slot::VM).load(SeqCst) == key
            {
                self.slot(s, slot::SHARE).store(share.max(1), SeqCst);
                self.slot(s, slot::CAP).store(cap, SeqCst);
                let old = self.slot(s, slot::PRIORITY).swap(priority, SeqCst);
                if old != priority && self.slot(s, slot::WAITING_SINCE).load(SeqCst) != 0 {
                    // Move its place in the waiting counts with it.
                    let w = self.head(head::WAITING + (old as usize).min(2));
                    let _ = w.fetch_update(SeqCst, SeqCst, |n| Some(n.saturating_sub(1)));
                    self.head(head::WAITING + (priority as usize).min(2))
                        .fetch_add(1, SeqCst);
                }
                n += 1;
            }
        }
        n
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no reference into it outlives
        // `self` (every accessor borrows `self`).
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), FILE_LEN) };
    }
}

/// A slot as read at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotView {
    pub index: usize,
    pub pid: u32,
    pub vm: u64,
    pub share: u64,
    pub priority: u64,
    pub cap: u64,
    pub heartbeat: u64,
    pub waiting_since: u64,
    pub vtime: u64,
    pub used_ns: u64,
    pub throttled_ns: u64,
    pub active_at: u64,
}

/// The key of a VM's name on the board (FNV-1a; never 0).
pub fn vm_key(vm: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in vm.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// The monotonic clock in ns, the same in every process of the host.
pub fn now_ns() -> u64 {
    let t =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("the monotonic clock");
    (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64
}

fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared, the word is in a shared mapping) on a valid, aligned
    // 4-byte word, with a valid relative timeout; it only sleeps, and returns at once
    // when the word no longer holds `seen`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned 4-byte word; it only wakes waiters.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
