//! Per-guest figures, shared by the workers with the daemon's metrics endpoint and with
//! `vmcuda-host status`.
//!
//! Workers are separate processes, so each admitted guest's worker keeps its figures in
//! a small file, `<state_dir>/workers/<pid>.stats` (its host pid, also in its own pid
//! namespace: [`crate::process::host_pid`]), mapped into the worker: a fixed
//! layout of 64-bit counters first (updating them costs a call a few plain loads and
//! stores, no system call), then the connection's identity (JSON, written once). The
//! file is complete before it appears under its name (it is written as `.tmp` and
//! renamed), so a reader never sees half an identity. Readers map it read-only.
//!
//! A VM's counters must never go backwards, yet its workers come and go. So when a
//! worker ends, its counters are folded into `<state_dir>/workers/totals.json` (per VM,
//! with the count of refused connections) and its file removed, both under an exclusive
//! `flock` of `<state_dir>/workers/lock`; a reader holding that lock sees a worker
//! either live or folded, never both or neither. A worker that died without doing so
//! (killed, crashed) is folded by whoever next takes the lock to prune: a new worker, or
//! a metrics scrape. A worker is told from a later process with its pid by its start
//! time. Memory in use is a gauge: what a dead worker held simply stops counting.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tracing::{debug, warn};
use vmcuda_wire::CudaStatus;

/// Upper bounds of the call latency histogram's buckets, in nanoseconds: 1 µs to about
/// 1 s in powers of 4 (each is an exact decimal number of seconds, for `le` labels).
pub const LATENCY_BOUNDS_NS: [u64; 11] = [
    1_000,
    4_000,
    16_000,
    64_000,
    256_000,
    1_024_000,
    4_096_000,
    16_384_000,
    65_536_000,
    262_144_000,
    1_048_576_000,
];
/// The bounded buckets and the last one, for calls slower than every bound.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// Distinct CUDA statuses a worker counts errors of one by one; later ones are "other".
const ERROR_SLOTS: usize = 16;
/// The key errors past [`ERROR_SLOTS`] distinct statuses are counted under.
pub const OTHER_ERRORS: &str = "other";

const MAGIC: u64 = u64::from_le_bytes(*b"VMCUSTAT");
/// Bumped whenever a field of [`Block`] moves: readers skip files of another layout.
/// Fields added at its end leave the version as it is (a file of an older worker
/// reads 0 there: the file is made zeroed).
const LAYOUT_VERSION: u64 = 2;
/// The whole file: the counters, then the identity.
const FILE_LEN: usize = 4096;
const IDENTITY_OFFSET: usize = 1024;
const IDENTITY_MAX: usize = FILE_LEN - IDENTITY_OFFSET;
/// Names are cut to this many characters, so that an identity always fits (three of
/// them, each character at most 6 bytes of JSON).
const NAME_MAX: usize = 120;

const _: () = assert!(std::mem::size_of::<Block>() <= IDENTITY_OFFSET);
const _: () = assert!(3 * 6 * NAME_MAX + 512 <= IDENTITY_MAX);

#[derive(Debug, Error)]
pub enum StatsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StatsError + '_ {
    move |source| StatsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which way a copy went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToDevice = 0,
    DeviceToHost = 1,
    DeviceToDevice = 2,
}

/// The counters at the start of a stats file. Every field is a 64-bit atomic, so any
/// bytes are a valid `Block` and the layout has no padding.
#[repr(C)]
struct Block {
    magic: AtomicU64,
    version: AtomicU64,
    worker_pid: AtomicU64,
    /// The worker's start time in clock ticks after boot (`/proc/PID/stat`), which tells
    /// it from a later process given the same pid.
    worker_started: AtomicU64,
    connected_unix_ms: AtomicU64,
    identity_len: AtomicU64,
    calls_ok: AtomicU64,
    calls_error: AtomicU64,
    kernels: AtomicU64,
    /// Bytes copied, by [`Direction`].
    copied: [AtomicU64; 3],
    device_memory: AtomicU64,
    host_memory: AtomicU64,
    latency_sum_ns: AtomicU64,
    /// Calls per latency bucket (not cumulative).
    latency: [AtomicU64; LATENCY_BUCKETS],
    /// The CUDA status each error slot counts (0, success, marks a free slot).
    error_status: [AtomicU64; ERROR_SLOTS],
    error_count: [AtomicU64; ERROR_SLOTS],
    error_other: AtomicU64,
    /// Host memory the worker keeps for its guest, as the session counts it against
    /// the VM's `host_memory` (`session/host_memory.rs`), and that limit.
    host_kept: AtomicU64,
    host_limit: AtomicU64,
    /// Module images loaded from the VM's module cache, and their bytes.
    module_cache_hits: AtomicU64,
    module_cache_bytes: AtomicU64,
    /// Images named by hash that the cache did not have (the guest then sent them).
    module_cache_misses: AtomicU64,
    /// Bytes of module images that crossed the connection.
    module_bytes_received: AtomicU64,
    /// Requests the worker has begun and finished (every one, recorded or not): the
    /// idle policy's and the suspend gate's view of its work ([`WorkerGate`]).
    requests_started: AtomicU64,
    requests_done: AtomicU64,
    /// Set by the operator ([`WorkerGate::hold`]): requests wait before they run.
    /// The only field written from outside the worker.
    hold: AtomicU64,
    /// 1 while a request of the worker waits on `hold`.
    parked: AtomicU64,
    /// Its turns on the GPU ([`crate::compute`]): ns of turns held, ns its requests
    /// waited for one; the share, the priority plus one (0: it takes no turns) and
    /// the cap in force.
    gpu_time_ns: AtomicU64,
    throttled_ns: AtomicU64,
    compute_share: AtomicU64,
    compute_priority: AtomicU64,
    compute_cap: AtomicU64,
}

/// Who a worker serves: written once, when the guest is admitted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The VM it was admitted as (the grant's name: a `[[vm]]` name, or "local").
    pub vm: String,
    /// The guest program's name and pid, as its hello says (the guest's word).
    pub program: String,
    pub program_pid: u32,
    /// Who connected, as the transport says (`local:PID`, `vsock:CID`, `vm:NAME`,
    /// `tcp:PEER`).
    pub caller: String,
    /// unix, vsock, tcp or tls.
    pub transport: String,
    /// The daemon's number for the connection (0 when another spawner started it).
    pub connection_id: u64,
}

/// Counters that add up: a worker's, or a VM's over many workers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counts {
    pub calls_ok: u64,
    pub calls_error: u64,
    pub kernels: u64,
    pub copied_htod: u64,
    pub copied_dtoh: u64,
    pub copied_dtod: u64,
    pub latency_sum_ns: u64,
    /// Calls per latency bucket ([`LATENCY_BOUNDS_NS`], then the rest); not cumulative.
    pub latency_buckets: [u64; LATENCY_BUCKETS],
    /// Failed calls by CUDA status name ([`OTHER_ERRORS`] past the distinct statuses a
    /// worker keeps apart).
    pub errors: BTreeMap<String, u64>,
    /// Module images served from the VM's module cache, and their bytes (which did not
    /// cross the connection).
    pub module_cache_hits: u64,
    pub module_cache_bytes: u64,
    /// Images named by hash that the VM's cache lacked.
    pub module_cache_misses: u64,
    /// Bytes of module images that did cross the connection.
    pub module_bytes_received: u64,
    /// Time of its turns on the GPU, and time its requests waited for a turn
    /// ([`crate::compute`]).
    pub gpu_time_ns: u64,
    pub throttled_ns: u64,
}

impl Counts {
    pub fn calls(&self) -> u64 {
        self.calls_ok + self.calls_error
    }

    pub fn copied(&self) -> u64 {
        self.copied_htod + self.copied_dtoh + self.copied_dtod
    }

    pub fn add(&mut self, other: &Counts) {
        self.calls_ok += other.calls_ok;
        self.calls_error += other.calls_error;
        self.kernels += other.kernels;
        self.copied_htod += other.copied_htod;
        self.copied_dtoh += other.copied_dtoh;
        self.copied_dtod += other.copied_dtod;
        self.latency_sum_ns += other.latency_sum_ns;
        for (mine, theirs) in self.latency_buckets.iter_mut().zip(other.latency_buckets) {
            *mine += theirs;
        }
        for (status, n) in &other.errors {
            *self.errors.entry(status.clone()).or_default() += n;
        }
        self.module_cache_hits += other.module_cache_hits;
        self.module_cache_bytes += other.module_cache_bytes;
        self.module_cache_misses += other.module_cache_misses;
        self.module_bytes_received += other.module_bytes_received;
        self.gpu_time_ns += other.gpu_time_ns;
        self.throttled_ns += other.throttled_ns;
    }
}

/// A connected guest, as its worker's file says now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Guest {
    pub worker_pid: u32,
    #[serde(flatten)]
    pub identity: Identity,
    pub connected_unix_ms: u64,
    /// Device memory the guest holds (its allocations).
    pub device_memory_bytes: u64,
    /// Page-locked host memory it shares with the host (counted against its quota too).
    pub host_memory_bytes: u64,
    /// Host memory its worker keeps for it (graphs, module images, frame buffers,
    /// handle tables), as counted against its VM's `host_memory`.
    pub host_memory_used_bytes: u64,
    /// Its VM's `host_memory` (`u64::MAX`: unbounded; 0: not said, a worker older
    /// than this figure).
    pub host_memory_limit_bytes: u64,
    /// Its VM's compute policy as its worker runs under it; None when it takes no
    /// turns on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute: Option<ComputeView>,
    #[serde(flatten)]
    pub counts: Counts,
}

/// A worker's compute policy, as its stats file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ComputeView {
    pub share: u32,
    pub priority: crate::compute::Priority,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
}

/// What the workers of ended connections left, kept in `totals.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Counters of ended workers, by VM.
    pub vms: BTreeMap<String, Counts>,
    /// Connections turned away before a session began, by the CUDA status they got.
    pub refused: BTreeMap<String, u64>,
}

/// Everything the state directory says: the guests connected now and what ended ones
/// left behind.
#[derive(Clone, Debug, Default)]
pub struct Census {
    pub guests: Vec<Guest>,
    pub totals: Totals,
}

/// The name errors of `status` are counted under.
pub fn status_key(status: CudaStatus) -> String {
    match status.name() {
        vmcuda_wire::status::UNRECOGNIZED => status.0.to_string(),
        name => name.to_string(),
    }
}

/// The latency bucket a call of `ns` nanoseconds falls in.
fn bucket(ns: u64) -> usize {
    LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// A stats file mapped into this process.
struct Mapping {
    ptr: NonNull<libc::c_void>,
}

impl Mapping {
    /// Map the first [`FILE_LEN`] bytes of `file`, which must be at least that long.
    fn new(file: &File, writable: bool) -> std::io::Result<Mapping> {
        use nix::sys::mman::{MapFlags, ProtFlags};
        let len = file.metadata()?.len();
        if len < FILE_LEN as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{len} bytes, not {FILE_LEN}"),
            ));
        }
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a file, placed by the kernel where nothing
        // else is; it is unmapped only by this value's Drop. The file is never shortened
        // while mapped (workers publish it at its full length and only remove it), so
        // touching it cannot fault.
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                NonZeroUsize::new(FILE_LEN).expect("not zero"),
                prot,
                MapFlags::MAP_SHARED,
                file,
                0,
            )
        }?;
        Ok(Mapping { ptr })
    }

    fn block(&self) -> &Block {
        // SAFETY: the mapping is FILE_LEN bytes, page-aligned, and lives as long as
        // `self`; Block is smaller, needs 8-byte alignment, and every bit pattern is a
        // valid Block. Other processes change it only through 64-bit atomics, which is
        // all a shared reference allows here too. Relaxed 64-bit atomic loads on a
        // read-only mapping are plain loads on every target this runs on.
        unsafe { self.ptr.cast::<Block>().as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no reference into it outlives
        // `self` (`block` borrows `self`).
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, FILE_LEN) };
    }
}

/// A worker's requests as another process sees and holds them (the suspend command
/// and the idle policy, [`crate::suspend`]), through the worker's stats file.
pub struct WorkerGate {
    map: Mapping,
}

impl WorkerGate {
    /// The gate of worker `pid` under `state_dir`; `None` when it publishes no figures
    /// (it ended, or it is not a worker of this state directory).
    pub fn open(state_dir: &Path, pid: u32) -> Result<Option<WorkerGate>, StatsError> {
        let path = state_dir.join("workers").join(format!("{pid}.stats"));
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let map = Mapping::new(&file, true).map_err(io_error(&path))?;
        let b = map.block();
        if b.magic.load(Relaxed) != MAGIC
            || b.version.load(Relaxed) != LAYOUT_VERSION
            || b.worker_pid.load(Relaxed) != u64::from(pid)
        {
            return Ok(None);
        }
        Ok(Some(WorkerGate { map }))
    }

    /// Requests begun so far.
    pub fn started(&self) -> u64 {
        self.map.block().requests_started.load(SeqCst)
    }

    /// Whether no request runs now: none begun and not done, or the one begun waits
    /// on the hold.
    pub fn quiet(&self) -> bool {
        let b = self.map.block();
        b.parked.load(SeqCst) == 1
            || b.requests_started.load(SeqCst) == b.requests_done.load(SeqCst)
    }

    /// Hold the worker's next requests before they run.
    pub fn hold(&self) {
        self.map.block().hold.store(1, SeqCst);
    }

    pub fn release(&self) {
        self.map.block().hold.store(0, SeqCst);
    }

    pub fn held(&self) -> bool {
        self.map.block().hold.load(SeqCst) != 0
    }
}

/// This worker's figures. One writer (the worker's thread, through `&mut self`), so
/// updates are plain relaxed loads and stores: no locked instructions, no system calls.
pub struct WorkerStats {
    inner: Inner,
}

enum Inner {
    /// Published in the state directory.
    Shared {
        map: Mapping,
        path: PathBuf,
        dir: PathBuf,
        vm: String,
    },
    /// Nowhere to publish (no file could be made, or a test): counted and forgotten.
    Private(Box<Block>),
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

impl WorkerStats {
    /// Figures kept by this process only.
    pub fn private() -> WorkerStats {
        // An all-zero Block, built field by field (no unsafe zeroing).
        let zero = || AtomicU64::new(0);
        WorkerStats {
            inner: Inner::Private(Box::new(Block {
                magic: zero(),
                version: zero(),
                worker_pid: zero(),
                worker_started: zero(),
                connected_unix_ms: zero(),
                identity_len: zero(),
                calls_ok: zero(),
                calls_error: zero(),
                kernels: zero(),
                copied: std::array::from_fn(|_| zero()),
                device_memory: zero(),
                host_memory: zero(),
                latency_sum_ns: zero(),
                latency: std::array::from_fn(|_| zero()),
                error_status: std::array::from_fn(|_| zero()),
                error_count: std::array::from_fn(|_| zero()),
                error_other: zero(),
                host_kept: zero(),
                host_limit: zero(),
                module_cache_hits: zero(),
                module_cache_bytes: zero(),
                module_cache_misses: zero(),
                module_bytes_received: zero(),
                requests_started: zero(),
                requests_done: zero(),
                hold: zero(),
                parked: zero(),
                gpu_time_ns: zero(),
                throttled_ns: zero(),
                compute_share: zero(),
                compute_priority: zero(),
                compute_cap: zero(),
            })),
        }
    }

    /// Publish this worker's figures under `state_dir`, pruning what dead workers left.
    pub fn create(state_dir: &Path, identity: &Identity) -> Result<WorkerStats, StatsError> {
        let dir = state_dir.join("workers");
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        let _lock = lock(&dir, true)?;
        prune(&dir)?;
        let pid = crate::process::host_pid();
        let path = dir.join(format!("{pid}.stats"));
        let tmp = dir.join(format!("{pid}.stats.tmp"));
        let mut identity = identity.clone();
        for name in [
            &mut identity.vm,
            &mut identity.program,
            &mut identity.caller,
        ] {
            if let Some((cut, _)) = name.char_indices().nth(NAME_MAX) {
                name.truncate(cut);
            }
        }
        let json = serde_json::to_vec(&identity).expect("an identity serializes");
        if json.len() > IDENTITY_MAX {
            return Err(StatsError::Format {
                path,
                msg: "identity too long".into(),
            });
        }
        let _ = std::fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_error(&tmp))?;
        file.set_len(FILE_LEN as u64).map_err(io_error(&tmp))?;
        file.write_all_at(&json, IDENTITY_OFFSET as u64)
            .map_err(io_error(&tmp))?;
        let map = Mapping::new(&file, true).map_err(io_error(&tmp))?;
        let b = map.block();
        b.version.store(LAYOUT_VERSION, Relaxed);
        b.worker_pid.store(pid.into(), Relaxed);
        b.worker_started
            .store(started_ticks(pid).unwrap_or(0), Relaxed);
        b.connected_unix_ms.store(unix_ms(), Relaxed);
        b.identity_len.store(json.len() as u64, Relaxed);
        b.magic.store(MAGIC, Relaxed);
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_error(&path)(e)
        })?;
        Ok(WorkerStats {
            inner: Inner::Shared {
                map,
                path,
                dir,
                vm: identity.vm,
            },
        })
    }

    fn block(&self) -> &Block {
        match &self.inner {
            Inner::Shared { map, .. } => map.block(),
            Inner::Private(b) => b,
        }
    }

    /// Where the figures are published, if they are.
    pub fn path(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Shared { path, .. } => Some(path),
            Inner::Private(_) => None,
        }
    }

    /// A request begins: counted, then held while the operator holds the worker
    /// ([`WorkerGate::hold`]). SeqCst on both sides: either the operator sees this
    /// request begun, or this request sees the hold.
    pub fn request_started(&mut self) {
        let b = self.block();
        b.requests_started
            .store(b.requests_started.load(Relaxed).wrapping_add(1), SeqCst);
        if b.hold.load(SeqCst) == 0 {
            return;
        }
        b.parked.store(1, SeqCst);
        while b.hold.load(SeqCst) != 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        b.parked.store(0, SeqCst);
    }

    /// The request begun last is done.
    #[inline]
    pub fn request_done(&mut self) {
        let b = self.block();
        b.requests_done
            .store(b.requests_done.load(Relaxed).wrapping_add(1), SeqCst);
    }

    /// One call done: how long it took, and how it ended.
    #[inline]
    pub fn record_call(&mut self, elapsed_ns: u64, result: Result<(), CudaStatus>) {
        let b = self.block();
        bump(&b.latency[bucket(elapsed_ns)], 1);
        bump(&b.latency_sum_ns, elapsed_ns);
        match result {
            Ok(()) => bump(&b.calls_ok, 1),
            Err(status) => {
                bump(&b.calls_error, 1);
                self.count_error(status);
            }
        }
    }

    fn count_error(&self, status: CudaStatus) {
        let b = self.block();
        let code = u64::from(status.0);
        for (slot, count) in b.error_status.iter().zip(&b.error_count) {
            match slot.load(Relaxed) {
                c if c == code => return bump(count, 1),
                0 => {
                    // The count is zero until the slot is claimed, so a reader never
                    // sees a count under no status.
                    slot.store(code, Relaxed);
                    return bump(count, 1);
                }
                _ => {}
            }
        }
        bump(&b.error_other, 1);
    }

    #[inline]
    pub fn kernel_launched(&mut self) {
        bump(&self.block().kernels, 1);
    }

    #[inline]
    pub fn copied(&mut self, direction: Direction, bytes: u64) {
        bump(&self.block().copied[direction as usize], bytes);
    }

    /// A module image loaded from the VM's module cache: `bytes` that did not cross.
    pub fn module_cache_hit(&mut self, bytes: u64) {
        let b = self.block();
        bump(&b.module_cache_hits, 1);
        bump(&b.module_cache_bytes, bytes);
    }

    /// An image named by hash that the VM's cache lacked.
    pub fn module_cache_miss(&mut self) {
        bump(&self.block().module_cache_misses, 1);
    }

    /// `bytes` of a module image that crossed the connection.
    pub fn module_received(&mut self, bytes: u64) {
        bump(&self.block().module_bytes_received, bytes);
    }

    /// Device memory the guest holds, after an allocation or a free.
    pub fn set_device_memory(&mut self, bytes: u64) {
        self.block().device_memory.store(bytes, Relaxed);
    }

    /// Page-locked host memory the guest shares, after it changed.
    pub fn set_host_memory(&mut self, bytes: u64) {
        self.block().host_memory.store(bytes, Relaxed);
    }

    /// Host memory kept for the guest against its VM's `host_memory`, after a call.
    pub fn set_host_memory_used(&mut self, bytes: u64) {
        self.block().host_kept.store(bytes, Relaxed);
    }

    /// Its turns on the GPU so far, and the policy in force.
    pub fn set_compute(
        &mut self,
        used_ns: u64,
        throttled_ns: u64,
        share: crate::compute::ComputeShare,
    ) {
        let b = self.block();
        b.gpu_time_ns.store(used_ns, Relaxed);
        b.throttled_ns.store(throttled_ns, Relaxed);
        b.compute_share.store(u64::from(share.share), Relaxed);
        b.compute_priority.store(share.priority as u64 + 1, Relaxed);
        b.compute_cap
            .store(u64::from(share.cap.unwrap_or(0)), Relaxed);
    }

    /// The VM's `host_memory`, once the session has its grant.
    pub fn set_host_memory_limit(&mut self, bytes: u64) {
        self.block().host_limit.store(bytes, Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> Counts {
        counts(self.block())
    }
}

impl Drop for WorkerStats {
    fn drop(&mut self) {
        let Inner::Shared { path, dir, vm, .. } = &self.inner else {
            return;
        };
        // Fold, then remove, under the lock: readers see this worker once, either way.
        let retire = || -> Result<(), StatsError> {
            let _lock = lock(dir, true)?;
            let mut totals = read_totals(dir)?;
            totals
                .vms
                .entry(vm.clone())
                .or_default()
                .add(&counts(self.block()));
            write_totals(dir, &totals)?;
            std::fs::remove_file(path).map_err(io_error(path))
        };
        match retire() {
            Ok(()) => {}
            // A jailed worker may not write the shared directory (docs/security.md):
            // expected, and the next unjailed reader folds its figures.
            Err(StatsError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                debug!("this connection's figures are left for the daemon to fold ({source})");
            }
            Err(e) => {
                warn!(
                    "cannot retire this connection's figures ({e}); the next worker or scrape will"
                );
            }
        }
    }
}

mod census;
pub use census::*;

#[cfg(test)]
mod tests;
