//! Compute shares: VMs take turns on the GPU, in proportion to their shares, with
//! priorities and caps.
//!
//! Each worker is its own CUDA context, and contexts time-slice the GPU as the driver
//! pleases: nothing there gives a VM a share, nor keeps a batch VM from stretching an
//! inference VM's latency. So the workers take turns themselves, on a board they all
//! map ([`board`]): one worker holds the turn, and only it lets its guest's requests
//! run; the others' requests wait before they run. Contexts never run on the GPU at
//! the same moment anyway (without MPS, which would let one VM's fault end another's
//! work), so the turns cost the GPU little: only the handover.
//!
//! - **Who is next**: the waiting worker of the highest priority, then of the least
//!   virtual time: the time of its turns divided by its weight (its VM's share over
//!   its VM's active workers). A VM idle for a while starts again at the least virtual
//!   time of those active, so idleness is not saved up.
//! - **When the turn passes**: at a request's start or end, when a worker of a higher
//!   priority waits, or when the turn is `quantum` old and one of the same priority
//!   waits. The holder first waits for its own GPU work to finish, so the time it is
//!   charged is the GPU's time it took. A holder whose guest sends nothing for `linger`
//!   gives the turn up to any waiting worker (its keeper thread sees to it).
//! - **The keeper drains too**: a guest that synchronizes posts a request that has the
//!   GPU write a done word, then waits for the word sending nothing, so a holder goes
//!   quiet with its work still queued on the GPU. The keeper that hands such a turn on
//!   first waits for that work (a [`Drainer`] the executor gives, which another thread
//!   may call), so the holder is charged for it and the next holder's kernels do not
//!   queue behind it. Without this, on an asynchronous GPU the work done follows
//!   whoever queues, not the shares (measured: 33/33/33 for shares 50/25/25). Once
//!   that work is done the guest's synchronize returns and it likely asks again at
//!   once: a holder with less virtual time than the next of its priority lingers once
//!   more instead (else a guest that synchronizes could never take two turns running,
//!   nor more than half of the GPU beside others).
//! - **Priorities**: a `latency` VM takes the turn from lower ones at their next
//!   request, and while it is active they wait for their work after every request, so
//!   what it waits for at most is one request of theirs.
//! - **The latency lease**: a `latency` holder lingers long between its tokens (so a
//!   token's requests are not split by a neighbour's), but a decoder whose tokens come
//!   more often than that would keep the turn for good. So once it has held the turn
//!   for `latency_lease` while others wait, it lingers only as long as the others do,
//!   and the gap it leaves goes to them: a lower priority gets about one gap of the
//!   decoder in every lease, and only the token after that gap waits (for one request
//!   of theirs), so the decoder's median token is untouched.
//! - **Caps**: a VM with a cap takes no turn once its turns exceed the cap's part of
//!   the time that passed (a credit refilled at the cap's rate).
//!
//! Accounting relies on the workers, which are the host's code; a worker taken over by
//! its guest could lie about its own time, as it could run the GPU anyway.

pub mod board;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::warn;

use board::{now_ns, slot, Board, SlotView};

/// How long a slot counts as active after its last request.
const ACTIVE_NS: u64 = 200_000_000;
/// A worker whose heartbeat is this old is gone.
const STALE_NS: u64 = 2_000_000_000;
/// A holder with nobody waiting gives the turn back after this much idleness.
const IDLE_RELEASE_NS: u64 = 50_000_000;
/// What a cap's credit may save up, as time at full rate.
const CAP_BURST_NS: u64 = 100_000_000;
/// `IDLE_SINCE` while the keeper hands the turn of its idle holder on: the request
/// thread waits for it to finish before its request runs.
const HANDING: u64 = u64::MAX;

/// Waits for a worker's GPU work from a thread other than the one making its requests
/// (the keeper, while that one is idle); see the module documentation.
pub type Drainer = Arc<dyn Fn() + Send + Sync>;

/// A VM's priority on the GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Runs when nothing of a higher priority wants the GPU.
    Batch = 0,
    #[default]
    Normal = 1,
    /// Inference: takes the GPU from the others as soon as it wants it.
    Latency = 2,
}

impl Priority {
    pub fn from_word(w: u64) -> Priority {
        match w {
            0 => Priority::Batch,
            2 => Priority::Latency,
            _ => Priority::Normal,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Priority::Batch => "batch",
            Priority::Normal => "normal",
            Priority::Latency => "latency",
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Priority, String> {
        match s {
            "batch" => Ok(Priority::Batch),
            "normal" => Ok(Priority::Normal),
            "latency" => Ok(Priority::Latency),
            _ => Err(format!(
                "{s:?} is not a priority (batch, normal or latency)"
            )),
        }
    }
}

/// `[compute]` in host.toml: whether VMs take turns, and the turns' timing.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    /// Whether workers take turns on the GPU (default: no, until measured on the GPU
    /// machine as the better default).
    pub enable: Option<bool>,
    /// How long a turn lasts when others of the same priority wait (default 10 ms).
    pub quantum_ms: Option<u64>,
    /// How long a holder whose guest sends nothing keeps the turn while others wait,
    /// by priority (defaults: batch and normal 500 µs, latency 3 ms).
    pub linger_us: Option<u64>,
    pub latency_linger_us: Option<u64>,
    /// How long a latency holder keeps its longer linger while others wait; after
    /// that it lingers as a normal holder does (default 10 ms).
    pub latency_lease_ms: Option<u64>,
}

impl ComputeConfig {
    pub fn enabled(&self) -> bool {
        self.enable.unwrap_or(false)
    }

    pub fn timing(&self) -> Timing {
        let us = 1_000;
        Timing {
            quantum_ns: self.quantum_ms.unwrap_or(10).max(1) * 1_000_000,
            linger_ns: [
                self.linger_us.unwrap_or(500) * us,
                self.linger_us.unwrap_or(500) * us,
                self.latency_linger_us.unwrap_or(3_000) * us,
            ],
            latency_lease_ns: self.latency_lease_ms.unwrap_or(10) * 1_000_000,
        }
    }
}

/// The turns' timing, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub quantum_ns: u64,
    /// By priority.
    pub linger_ns: [u64; 3],
    /// How long a holder keeps a linger longer than a normal one's while others wait.
    pub latency_lease_ns: u64,
}

impl Timing {
    /// How long the holder of priority `p`, which had held the turn for `held` when
    /// its guest went quiet, lingers while others wait.
    fn linger(&self, p: Priority, held: u64) -> u64 {
        let own = self.linger_ns[p as usize];
        if held >= self.latency_lease_ns {
            own.min(self.linger_ns[Priority::Normal as usize])
        } else {
            own
        }
    }
}

/// A VM's compute policy, as its grant carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComputeShare {
    /// A weight: active VMs get the GPU's time in proportion to their shares (so
    /// shares of 50, 25 and 25 are halves and quarters). Default 100.
    pub share: u32,
    pub priority: Priority,
    /// At most this percent of the GPU's time, even when nobody else wants it.
    pub cap: Option<u32>,
}

impl Default for ComputeShare {
    fn default() -> ComputeShare {
        ComputeShare {
            share: 100,
            priority: Priority::Normal,
            cap: None,
        }
    }
}

/// The waiting slot that gets the turn next: the highest priority, then the least
/// virtual time, then the longest wait. Slots gone stale are not candidates.
pub fn next_in_line(slots: &[SlotView], except: usize, now: u64) -> Option<usize> {
    slots
        .iter()
        .filter(|v| {
            v.index != except && v.waiting_since != 0 && now.saturating_sub(v.heartbeat) <= STALE_NS
        })
        .min_by_key(|v| (std::cmp::Reverse(v.priority), v.vtime, v.waiting_since))
        .map(|v| v.index)
}

/// The least virtual time among the active slots other than `except`.
fn least_active_vtime(
    slots: &[SlotView],
    except: usize,
    turn: Option<usize>,
    now: u64,
) -> Option<u64> {
    slots
        .iter()
        .filter(|v| v.index != except && is_active(v, turn, now))
        .map(|v| v.vtime)
        .min()
}

fn is_active(v: &SlotView, turn: Option<usize>, now: u64) -> bool {
    v.waiting_since != 0 || turn == Some(v.index) || now.saturating_sub(v.active_at) <= ACTIVE_NS
}

/// Virtual time for `ns` of turns of a slot whose VM has `share` and `active` active
/// workers (at least one: itself).
pub fn virtual_ns(ns: u64, share: u64, active: u64) -> u64 {
    let w = u128::from(ns) * u128::from(active.max(1)) * 100 / u128::from(share.max(1));
    u64::try_from(w).unwrap_or(u64::MAX)
}

/// A worker's place on the board.
pub struct Turns {
    shared: Arc<Shared>,
    /// Started at the first request, so that it is made inside the worker's jail (its
    /// namespaces are per thread as a process's are made).
    keeper: std::sync::Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    board: Board,
    slot: usize,
    timing: Timing,
    stop: AtomicBool,
    /// For the keeper, to wait for the worker's GPU work before it hands an idle
    /// holder's turn on; None: the executor cannot, and the next holder may find that
    /// work still running (and be charged for it).
    drainer: Option<Drainer>,
}

/// Why [`Turns::join`] could not place the worker.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Board(#[from] board::BoardError),
    #[error(
        "the compute board has no free slot ({} workers are scheduled)",
        board::SLOTS
    )]
    Full,
    #[error("cannot start the worker's turn keeper: {0}")]
    Thread(std::io::Error),
}

impl Turns {
    /// Place this worker (host pid `pid`, of VM `vm`) on the board of `state_dir`;
    /// `drainer` waits for its GPU work from the keeper's thread.
    pub fn join(
        state_dir: &Path,
        pid: u32,
        vm: &str,
        share: ComputeShare,
        timing: Timing,
        drainer: Option<Drainer>,
    ) -> Result<Turns, JoinError> {
        let board = Board::open(state_dir)?;
        let now = now_ns();
        let s = board.claim(pid, now, STALE_NS).ok_or(JoinError::Full)?;
        board.slot(s, slot::VM).store(board::vm_key(vm), SeqCst);
        board
            .slot(s, slot::SHARE)
            .store(u64::from(share.share.max(1)), SeqCst);
        board
            .slot(s, slot::PRIORITY)
            .store(share.priority as u64, SeqCst);
        board
            .slot(s, slot::CAP)
            .store(u64::from(share.cap.unwrap_or(0).min(100)), SeqCst);
        board.slot(s, slot::IDLE_SINCE).store(now, SeqCst);
        board.slot(s, slot::CREDIT_AT).store(now, SeqCst);
        board.slot(s, slot::CREDIT).store(CAP_BURST_NS / 10, SeqCst);
        let shared = Arc::new(Shared {
            board,
            slot: s,
            timing,
            stop: AtomicBool::new(false),
            drainer,
        });
        Ok(Turns {
            shared,
            keeper: std::sync::Mutex::new(None),
        })
    }

    /// Start the keeper thread if it is not running yet.
    fn keeper_started(&self) -> Result<(), JoinError> {
        let mut k = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        if k.is_none() {
            let shared = Arc::clone(&self.shared);
            *k = Some(
                std::thread::Builder::new()
                    .name("turn-keeper".into())
                    .spawn(move || shared.keep())
                    .map_err(JoinError::Thread)?,
            );
        }
        Ok(())
    }

    /// Wait for this worker's turn before a request runs; `drain` waits for the
    /// worker's GPU work (called before the turn is handed on). Returns the ns waited.
    pub fn request_begins(&self, drain: &mut dyn FnMut()) -> u64 {
        if let Err(e) = self.keeper_started() {
            // Without a keeper an idle holder keeps the turn until its next request
            // (waiters take it once its heartbeat is stale): worse turns, not wrong ones.
            warn!("{e}");
        }
        self.shared.begin(drain)
    }

    /// A request ended: hand the turn on if it is due, and under a higher priority's
    /// activity wait for the request's GPU work.
    pub fn request_ends(&self, drain: &mut dyn FnMut()) {
        self.shared.end(drain)
    }

    /// Turn time and waiting time so far, ns.
    pub fn used_ns(&self) -> u64 {
        self.shared.get(slot::USED)
    }

    pub fn throttled_ns(&self) -> u64 {
        self.shared.get(slot::THROTTLED)
    }

    /// The share, priority and cap in force now (changed at run time by the admin API).
    pub fn share(&self) -> ComputeShare {
        let cap = self.shared.get(slot::CAP);
        ComputeShare {
            share: self.shared.get(slot::SHARE) as u32,
            priority: self.shared.priority(),
            cap: (cap != 0).then_some(cap as u32),
        }
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.shared.board.wake_all();
        let keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(k) = keeper {
            let _ = k.join();
        }
        let sh = &self.shared;
        if sh.board.turn() == Some(sh.slot) {
            let now = now_ns();
            let next = next_in_line(&sh.board.slots(), sh.slot, now);
            sh.board.hand(Some(sh.slot), next, now);
        }
        sh.board.free(sh.slot);
    }
}

impl Shared {
    fn get(&self, field: usize) -> u64 {
        self.board.slot(self.slot, field).load(SeqCst)
    }

    fn set(&self, field: usize, v: u64) {
        self.board.slot(self.slot, field).store(v, SeqCst);
    }

    fn priority(&self) -> Priority {
        Priority::from_word(self.get(slot::PRIORITY))
    }

    fn holds(&self) -> bool {
        self.board.turn() == Some(self.slot)
    }

    /// Count the turn's time up to `now`.
    fn charge(&self, now: u64) {
        let from = self
            .board
            .slot(self.slot, slot::CHARGED_TO)
            .swap(now, SeqCst);
        if from == 0 || from >= now {
            return;
        }
        let d = now - from;
        let slots = self.board.slots();
        let vm = self.get(slot::VM);
        let turn = self.board.turn();
        let active = slots
            .iter()
            .filter(|v| v.vm == vm && (v.index == self.slot || is_active(v, turn, now)))
            .count() as u64;
        self.board.slot(self.slot, slot::USED).fetch_add(d, SeqCst);
        self.board
            .slot(self.slot, slot::VTIME)
            .fetch_add(virtual_ns(d, self.get(slot::SHARE), active), SeqCst);
        if self.get(slot::CAP) != 0 {
            let c = self.board.slot(self.slot, slot::CREDIT);
            let _ = c.fetch_update(SeqCst, SeqCst, |c| {
                Some((c as i64).saturating_sub(d as i64) as u64)
            });
        }
    }

    /// The cap's credit after refilling it to `now` (always positive without a cap).
    fn credit(&self, now: u64) -> i64 {
        let cap = self.get(slot::CAP);
        if cap == 0 {
            return i64::MAX;
        }
        let at = self
            .board
            .slot(self.slot, slot::CREDIT_AT)
            .swap(now, SeqCst);
        let add = (now.saturating_sub(at) as u128 * u128::from(cap) / 100) as i64;
        let max = (CAP_BURST_NS * cap / 100) as i64;
        let c = self.board.slot(self.slot, slot::CREDIT);
        let new = (c.load(SeqCst) as i64).saturating_add(add).min(max);
        c.store(new as u64, SeqCst);
        new
    }

    /// Whether the holder should hand the turn on now.
    fn due(&self, now: u64) -> bool {
        let p = self.priority() as usize;
        if (p + 1..3).any(|q| self.board.waiting(q) > 0) {
            return true;
        }
        if self.board.waiting(p) > 0
            && now.saturating_sub(self.board.turn_since()) >= self.timing.quantum_ns
        {
            return true;
        }
        self.credit(now) <= 0
    }

    /// Hand the turn to the next in line (or to nobody); `to_lower` lets it go to a
    /// lower priority (the holder is idle or capped).
    fn hand_on(&self, to_lower: bool) {
        let now = now_ns();
        self.charge(now);
        let slots = self.board.slots();
        let p = self.priority() as u64;
        let mine = self.get(slot::VTIME);
        let capped = self.credit(now) <= 0;
        let next = next_in_line(&slots, self.slot, now).filter(|&n| {
            let Some(v) = slots.iter().find(|v| v.index == n) else {
                return false;
            };
            // A higher priority always; the same one once this holder has had more
            // than its share (less virtual time waits); a lower one when idle.
            v.priority > p || (v.priority == p && (v.vtime < mine || capped)) || to_lower
        });
        if next.is_some() || capped || to_lower {
            self.board.hand(Some(self.slot), next, now);
        } else {
            // Still this holder's to keep: a new quantum before it asks again.
            self.board.renew(self.slot, now);
        }
    }

    /// Whether the next in line is of this holder's priority and has had more than
    /// its share (more virtual time than this holder, counted up to `now`).
    fn owed(&self, now: u64) -> bool {
        self.charge(now);
        if self.credit(now) <= 0 {
            return false;
        }
        let slots = self.board.slots();
        let mine = self.get(slot::VTIME);
        let p = self.priority() as u64;
        next_in_line(&slots, self.slot, now)
            .and_then(|n| slots.iter().find(|v| v.index == n))
            .is_some_and(|v| v.priority == p && v.vtime > mine)
    }

    fn begin(&self, drain: &mut dyn FnMut()) -> u64 {
        let start = now_ns();
        let returning = start.saturating_sub(self.get(slot::ACTIVE_AT)) > ACTIVE_NS;
        self.board.mark_active(self.priority() as usize, start);
        self.set(slot::ACTIVE_AT, start);
        self.enter();
        if self.holds() && !self.due(start) {
            return 0;
        }
        if self.holds() {
            drain();
            self.hand_on(false);
        }
        let mut arrived: Option<usize> = None;
        loop {
            let now = now_ns();
            match self.board.turn() {
                Some(s) if s == self.slot => {
                    if self.credit(now) > 0 {
                        break;
                    }
                    // Over its cap: the turn goes, and this worker waits for credit.
                    self.hand_on(true);
                }
                None => {
                    let c = self.credit(now);
                    if c <= 0 {
                        let cap = self.get(slot::CAP).max(1);
                        let ns = (-c) as u64 * 100 / cap;
                        std::thread::sleep(Duration::from_nanos(ns.clamp(100_000, 50_000_000)));
                        continue;
                    }
                    if self.board.hand(None, Some(self.slot), now) {
                        break;
                    }
                }
                Some(holder) => {
                    let gone = self.board.slot(holder, slot::PID).load(SeqCst) == 0
                        || now
                            .saturating_sub(self.board.slot(holder, slot::HEARTBEAT).load(SeqCst))
                            > STALE_NS;
                    if gone {
                        self.board.hand(Some(holder), None, now);
                        continue;
                    }
                    if arrived.is_none() {
                        if returning {
                            // Back from idleness: no credit for the time away.
                            let slots = self.board.slots();
                            if let Some(least) =
                                least_active_vtime(&slots, self.slot, self.board.turn(), now)
                            {
                                let v = self.board.slot(self.slot, slot::VTIME);
                                let _ = v.fetch_max(least, SeqCst);
                            }
                        }
                        let p = self.priority() as usize;
                        self.board.arrive(self.slot, p, now);
                        arrived = Some(p);
                    }
                    let e = self.board.epoch();
                    if self.board.turn() == Some(holder) {
                        self.board.wait_epoch(e, Duration::from_millis(2));
                    }
                }
            }
        }
        if let Some(p) = arrived {
            self.board.leave(self.slot, p);
        }
        let waited = now_ns().saturating_sub(start);
        self.board
            .slot(self.slot, slot::THROTTLED)
            .fetch_add(waited, SeqCst);
        waited
    }

    /// A request is about to run: from now on the keeper leaves the turn alone (it
    /// may be handing it on this moment: then wait for that to end).
    fn enter(&self) {
        let w = self.board.slot(self.slot, slot::IDLE_SINCE);
        loop {
            let v = w.load(SeqCst);
            if v == HANDING {
                // The keeper may be waiting for the GPU's work (milliseconds): sleep,
                // not spin, which would take a core from the other workers.
                std::thread::sleep(Duration::from_micros(20));
                continue;
            }
            if v == 0 || w.compare_exchange(v, 0, SeqCst, SeqCst).is_ok() {
                return;
            }
        }
    }

    fn end(&self, drain: &mut dyn FnMut()) {
        let now = now_ns();
        let p = self.priority() as usize;
        let leashed = self.board.higher_active(p, now, ACTIVE_NS);
        if leashed {
            drain();
        }
        let now = now_ns();
        self.set(slot::ACTIVE_AT, now);
        if self.holds() && self.due(now) {
            if !leashed {
                drain();
            }
            self.hand_on(false);
        }
        self.set(slot::IDLE_SINCE, now);
        if self.holds() && self.board.any_waiting() {
            // The keeper hands the turn on if the guest stays quiet for `linger`.
            self.board.wake_keepers();
        }
    }

    /// The keeper thread: heartbeat, turn time counted while held, and the turn
    /// handed on when the guest is quiet.
    fn keep(&self) {
        // The quiet time (its `IDLE_SINCE`) this keeper last let the holder linger
        // again after a drain: once per quiet time only.
        let mut lingered_again = 0;
        while !self.stop.load(SeqCst) {
            let now = now_ns();
            self.set(slot::HEARTBEAT, now);
            if !self.holds() {
                let e = self.board.epoch();
                self.board.wait_epoch(e, Duration::from_millis(200));
                continue;
            }
            self.charge(now);
            let idle_since = self.get(slot::IDLE_SINCE);
            let waiting = self.board.any_waiting();
            // The lease counts to the start of the guest's quiet time: one spent in
            // the middle of a gap makes the next gap the others', whole.
            let held = idle_since.saturating_sub(self.board.turn_since());
            let linger = self.timing.linger(self.priority(), held);
            let mut timeout = Duration::from_millis(if waiting { 5 } else { 200 });
            if idle_since != 0 && idle_since != HANDING {
                let idle = now.saturating_sub(idle_since);
                let w = self.board.slot(self.slot, slot::IDLE_SINCE);
                let hand = (waiting && idle >= linger) || (!waiting && idle >= IDLE_RELEASE_NS);
                // Claimed first, so no request begins while the turn goes.
                if hand
                    && w.compare_exchange(idle_since, HANDING, SeqCst, SeqCst)
                        .is_ok()
                {
                    // The guest may be waiting for work it queued (a synchronize is a
                    // done word the GPU writes): the turn goes once that work is done,
                    // charged to this holder (`hand_on` counts up to now).
                    if let Some(drain) = &self.drainer {
                        drain();
                    }
                    let now = now_ns();
                    if waiting && idle_since != lingered_again && self.owed(now) {
                        // Its work done, the guest's synchronize returns now and asks
                        // again at once, likely: a holder owed time by the waiters (of
                        // its priority) keeps the turn one more linger. Always handing
                        // on here, a holder whose guest synchronizes could never take
                        // two turns running, so never more than half of the GPU.
                        lingered_again = now.max(1);
                        w.store(lingered_again, SeqCst);
                        continue;
                    }
                    if waiting {
                        self.hand_on(true);
                    } else {
                        self.charge(now);
                        self.board.hand(Some(self.slot), None, now);
                    }
                    w.store(idle_since, SeqCst);
                    continue;
                }
                // Saturating: past its time with the claim lost to a request beginning.
                let left = if waiting {
                    linger.saturating_sub(idle)
                } else {
                    IDLE_RELEASE_NS.saturating_sub(idle)
                };
                timeout = timeout.min(Duration::from_nanos(left.max(50_000)));
            }
            let a = self.board.arrivals();
            self.board.wait_arrival(a, timeout);
        }
    }
}

/// The board's slots, for `status` and the metrics endpoint; None without a board.
pub fn census(state_dir: &Path) -> Option<Vec<SlotView>> {
    Board::open_existing(state_dir).map(|b| b.slots())
}

/// Apply a VM's new compute policy to its live workers; the number changed.
pub fn apply(state_dir: &Path, vm: &str, share: ComputeShare) -> usize {
    match Board::open_existing(state_dir) {
        Some(b) => b.set_vm_policy(
            vm,
            u64::from(share.share),
            share.priority as u64,
            u64::from(share.cap.unwrap_or(0)),
        ),
        None => 0,
    }
}

/// Place a worker on the board if the configuration asks for turns; a worker that
/// cannot be placed runs without them, logged.
pub fn join_if_enabled(
    config: &ComputeConfig,
    state_dir: &Path,
    vm: &str,
    share: ComputeShare,
    drainer: Option<Drainer>,
) -> Option<Turns> {
    if !config.enabled() {
        return None;
    }
    match Turns::join(
        state_dir,
        crate::process::host_pid(),
        vm,
        share,
        config.timing(),
        drainer,
    ) {
        Ok(t) => Some(t),
        Err(e) => {
            warn!("{e}; this connection runs without GPU turns");
            None
        }
    }
}
