//! One guest connection's state: the handshake, the guest's handles and the
//! allocations it owns, all checked before the executor sees them.
//!
//! Streams and events are named by the guest (no round trip to create one); modules
//! and functions are named here. Host objects never travel as raw host pointers:
//! every handle is looked up in this session's own tables, so a guest can only ever
//! name what it made itself. Dropping the session releases everything it owns.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use tracing::{debug, info, warn};
use vmcuda_wire::blas::{BlasCreate, BlasDestroy, BlasGemm, BlasSetWorkspace};
use vmcuda_wire::blas_table::{BlasCall, BlasCallWaited, BlasOutputs};
use vmcuda_wire::blaslt::{LtCreate, LtDestroy, LtHeuristic, LtHeuristicReply, LtMatmul};
use vmcuda_wire::driver::*;
use vmcuda_wire::graph::*;
use vmcuda_wire::handshake::{self, caps, PROTOCOL_VERSION};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod blas;
mod blas_call;
mod blaslt;
mod driver;
mod graph;

use crate::executor::{
    ExecEvent, ExecFunction, ExecModule, ExecStream, Executor, LaunchConfig, Pitched,
    LEGACY_STREAM, PER_THREAD_STREAM,
};
use crate::guest_ram::GuestRam;
use crate::ledger::Ledger;
use crate::pinned::PageBuffer;
use crate::policy::Grant;
use crate::stats::{Direction, WorkerStats};

/// Launch attribute values are a 64-byte union in CUDA.
const LAUNCH_ATTRIBUTE_VALUE_LEN: usize = 64;

pub struct Session {
    exec: Box<dyn Executor>,
    /// What this guest was admitted with: its quota and limits.
    grant: Grant,
    greeted: bool,
    client: String,
    streams: HashMap<StreamHandle, ExecStream>,
    events: HashMap<EventHandle, ExecEvent>,
    modules: HashMap<ModuleHandle, ExecModule>,
    functions: HashMap<FunctionHandle, ExecFunction>,
    /// The guest's device allocations: start -> bytes.
    allocations: BTreeMap<DevicePtr, u64>,
    /// Module variables the guest has asked for: start -> bytes.
    globals: BTreeMap<DevicePtr, u64>,
    /// Bytes counted against the quota: allocations and shared host memory.
    used: u64,
    /// The parts of `used` that are device allocations and shared host memory, for the
    /// figures.
    device_bytes: u64,
    shared_bytes: u64,
    /// The figures the host's monitoring reads.
    stats: WorkerStats,
    /// The VM's ledger, shared with its other connections' workers: the quota is the
    /// VM's, not one connection's. Without one, the quota holds per connection.
    ledger: Option<Ledger>,
    next_handle: u64,
    /// Descriptors the guest passed along with its frames, oldest first.
    pub incoming_fds: VecDeque<OwnedFd>,
    /// Guest memory shared with this process and registered with the GPU, by the
    /// guest's address.
    shared: BTreeMap<u64, SharedMapping>,
    /// The VM's RAM, for guest-physical registrations (vhost-user device workers of
    /// privileged guest connections only).
    guest_ram: Option<GuestRam>,
    /// The last reply's data buffer, reused so bulk copies do not fault in fresh memory
    /// for every chunk.
    spare: Vec<u8>,
    /// The worker's bulk buffers page-locked with the executor, so the GPU copies
    /// straight from them: (start, length) per slot.
    pinned: [Option<(u64, u64)>; 3],
    /// Page-locked memory large device-to-host reads land in, sent from there.
    reply_area: Option<PageBuffer>,
    /// Set by a handler that left its reply data in `reply_area`: the length.
    reply_in_area: Option<usize>,
    /// The guest's cuBLAS handles (see `blas`).
    blas: blas::BlasHandles,
    /// The guest's cuBLASLt handles and the algorithms it was given (see `blaslt`).
    lt: blaslt::LtState,
    /// The guest's graphs, executable graphs and graph nodes (see `graph`).
    graph_tables: graph::GraphTables,
    /// A synchronous copy queued from a receive buffer (that buffer), waited for
    /// before the next reply.
    owed_copy: Option<usize>,
    /// The guest's address reservations, physical allocations and mappings (see
    /// `driver`).
    vmm: driver::Vmm,
}

/// The slots of [`Session::pin_buffer`]: the worker's receive buffers, the reply area.
pub const RECEIVE_BUFFER: usize = 0;
const REPLY_AREA: usize = 1;
pub const RECEIVE_BUFFER_2: usize = 2;
const RECEIVE_BUFFERS: [usize; 2] = [RECEIVE_BUFFER, RECEIVE_BUFFER_2];
/// Reads at most this large use ordinary reply buffers (the driver's own path is as
/// fast for them).
const REPLY_AREA_MIN: usize = 256 << 10;

/// Guest memory mapped into this process: at the guest's own address (a same-host
/// guest's memfd), or elsewhere (guest pages of a VM, named by guest-physical address).
struct SharedMapping {
    /// Where it is mapped here.
    addr: NonNull<libc::c_void>,
    len: usize,
    /// Where the device sees it (the same address wherever addressing is unified);
    /// `None` for guest pages mapped away from the guest's address: the guest's
    /// address means nothing here, so only [`MemcpyShared`] may reach them.
    device_ptr: Option<DevicePtr>,
    /// The guest library's staging area ([`SHARED_STAGING`]): not the program's memory,
    /// not counted against the quota.
    staging: bool,
}

impl SharedMapping {
    /// Map `len` bytes of `fd` at exactly `addr`, never over anything already there.
    fn map(fd: &OwnedFd, addr: u64, len: u64) -> Result<SharedMapping, CudaStatus> {
        // A mapping longer than its file would fault (SIGBUS) when the GPU touches it.
        let file_len = nix::sys::stat::fstat(fd)
            .map_err(|_| CudaStatus::ErrorInvalidValue)?
            .st_size as u64;
        // A guest that could shrink the file would cut pages from under the mapping,
        // and this process would fault touching them: only sealed files are mapped.
        let sealed = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GET_SEALS).is_ok_and(|seals| {
            nix::fcntl::SealFlag::from_bits_truncate(seals)
                .contains(nix::fcntl::SealFlag::F_SEAL_SHRINK)
        });
        if !sealed {
            warn!(
                addr,
                len, "refused shared memory that could shrink (no F_SEAL_SHRINK)"
            );
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let page = 4096u64;
        if addr == 0
            || addr & (page - 1) != 0
            || len == 0
            || len & (page - 1) != 0
            || len > file_len
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let want = NonZeroUsize::new(addr as usize).ok_or(CudaStatus::ErrorInvalidValue)?;
        let length = NonZeroUsize::new(len as usize).ok_or(CudaStatus::ErrorInvalidValue)?;
        use nix::sys::mman::{MapFlags, ProtFlags};
        let map_at = |at: Option<NonZeroUsize>, flags: MapFlags| {
            // SAFETY: with a hint, MAP_FIXED_NOREPLACE never replaces an existing
            // mapping of this process; without one the kernel picks free addresses. The
            // new mapping is owned by the returned value, which unmaps it.
            unsafe {
                nix::sys::mman::mmap(
                    at,
                    length,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_SHARED | flags,
                    fd,
                    0,
                )
            }
        };
        let got = match map_at(Some(want), MapFlags::MAP_FIXED_NOREPLACE) {
            Ok(got) if got.as_ptr() as u64 == addr => got,
            other => {
                if let Ok(elsewhere) = other {
                    // Old kernels treat NOREPLACE as a hint.
                    // SAFETY: unmapping the mapping just made, which nothing uses.
                    let _ = unsafe { nix::sys::mman::munmap(elsewhere, len as usize) };
                }
                // This process already uses the guest's addresses (the driver's own
                // reservations, most often): map the pages elsewhere. Copies reach them
                // all the same; only their device pointer differs from the guest's
                // pointer, which programs passing pinned pointers straight to kernels
                // would notice.
                let got = map_at(None, MapFlags::empty()).map_err(|e| {
                    warn!(addr, len, "cannot map shared guest memory: {e}");
                    CudaStatus::ErrorNotSupported
                })?;
                info!(
                    addr,
                    len, "shared guest memory mapped away from the guest's address, taken here"
                );
                got
            }
        };
        let mapping = SharedMapping {
            addr: got,
            len: len as usize,
            device_ptr: Some(addr),
            staging: false,
        };
        Ok(mapping)
    }
}

impl SharedMapping {
    fn host_addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range this value mapped.
        let _ = unsafe { nix::sys::mman::munmap(self.addr, self.len) };
    }
}

impl Session {
    pub fn new(exec: Box<dyn Executor>, grant: Grant) -> Self {
        Session {
            exec,
            grant,
            greeted: false,
            client: String::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            allocations: BTreeMap::new(),
            globals: BTreeMap::new(),
            used: 0,
            device_bytes: 0,
            shared_bytes: 0,
            stats: WorkerStats::private(),
            ledger: None,
            next_handle: 0,
            incoming_fds: VecDeque::new(),
            shared: BTreeMap::new(),
            guest_ram: None,
            spare: Vec::new(),
            pinned: [None; 3],
            reply_area: None,
            reply_in_area: None,
            blas: Default::default(),
            lt: Default::default(),
            graph_tables: Default::default(),
            owed_copy: None,
            vmm: Default::default(),
        }
    }

    /// Account this guest's memory in its VM's ledger, with the VM's other connections.
    pub fn with_ledger(mut self, ledger: Ledger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Let this guest register its pages by guest-physical address (see
    /// [`crate::guest_ram`]).
    pub fn with_guest_ram(mut self, ram: GuestRam) -> Self {
        self.guest_ram = Some(ram);
        self
    }

    /// Publish this guest's figures through `stats` (see [`crate::stats`]).
    pub fn with_stats(mut self, stats: WorkerStats) -> Self {
        self.stats = stats;
        self
    }

    /// The guest's figures, for the worker to count its calls in.
    pub fn stats_mut(&mut self) -> &mut WorkerStats {
        &mut self.stats
    }

    fn set_device_bytes(&mut self, bytes: u64) {
        self.device_bytes = bytes;
        self.stats.set_device_memory(bytes);
    }

    fn set_shared_bytes(&mut self, bytes: u64) {
        self.shared_bytes = bytes;
        self.stats.set_host_memory(bytes);
    }

    /// What counts against the quota now: the whole VM's when there is a ledger.
    fn quota_used(&self) -> u64 {
        match &self.ledger {
            Some(ledger) => ledger.total().unwrap_or(self.used),
            None => self.used,
        }
    }

    /// A reply buffer of exactly `len` bytes, reusing the last one's memory.
    fn reply_buffer(&mut self, len: usize) -> Result<Vec<u8>, CudaStatus> {
        let mut v = std::mem::take(&mut self.spare);
        if v.len() < len {
            v.try_reserve_exact(len - v.len())
                .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
            v.resize(len, 0);
        }
        v.truncate(len);
        Ok(v)
    }

    /// Page-lock `[start, start + len)`, whole pages of a bulk buffer that lives on (see
    /// `pinned`). The range must lie inside one allocation of the caller's: the driver
    /// refuses copies that straddle the edge of a registered range, so registering a
    /// neighbour's bytes would break the neighbour's copies. Best effort: when the
    /// executor cannot, copies are staged as before.
    pub fn pin_buffer(&mut self, slot: usize, start: u64, len: u64) {
        self.unpin_buffer(slot);
        if len == 0 {
            return;
        }
        match self.exec.host_register(start, len) {
            Ok(_) => self.pinned[slot] = Some((start, len)),
            Err(e) => debug!("bulk buffer not page-locked ({e}); copies are staged"),
        }
    }

    /// One staging area per connection, of at most [`MAX_STAGING_LEN`] bytes.
    fn check_staging(&self, staging: bool, size: u64) -> Result<(), CudaStatus> {
        if staging && (size > MAX_STAGING_LEN || self.shared.values().any(|m| m.staging)) {
            warn!(client = %self.client, size, "refused a second or oversized staging area");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    /// Register guest memory mapped here with the executor and remember it under the
    /// guest's address `guest_addr`; its device pointer. Page-locked host memory is
    /// counted against the quota like device memory; the library's bounded staging
    /// area is the connection's, like the worker's buffers.
    fn register_mapping(
        &mut self,
        guest_addr: u64,
        mut mapping: SharedMapping,
        staging: bool,
    ) -> Result<DevicePtr, CudaStatus> {
        let len = mapping.len as u64;
        let charged = if staging { 0 } else { len };
        if !staging {
            let others = self.shared.values().filter(|m| !m.staging);
            let bytes = others.clone().map(|m| m.len as u64).sum();
            self.grant.registrations.check(others.count(), bytes, len)?;
        }
        self.charge(charged)?;
        let device_ptr = match self.exec.host_register(mapping.host_addr(), len) {
            Ok(p) => p,
            Err(e) => {
                self.refund(charged);
                return Err(e);
            }
        };
        if mapping.device_ptr.is_some() {
            mapping.device_ptr = Some(device_ptr);
        }
        mapping.staging = staging;
        if staging {
            info!(client = %self.client, bytes = len,
                guest_pages = mapping.device_ptr.is_none(),
                "copies use the shared-memory data path");
        }
        self.shared.insert(guest_addr, mapping);
        self.set_shared_bytes(self.shared_bytes.saturating_add(charged));
        Ok(device_ptr)
    }

    /// Undo [`Session::pin_buffer`] before the buffer is freed or moved.
    pub fn unpin_buffer(&mut self, slot: usize) {
        // No copy may still be using the pages.
        let _ = self.release_buffer(slot);
        if slot == REPLY_AREA {
            let _ = self.exec.dtoh_landed(usize::MAX);
        }
        if let Some((start, _)) = self.pinned[slot].take() {
            let _ = self.exec.host_unregister(start);
        }
    }

    /// Make the page-locked reply area hold at least `len` bytes; false when it cannot
    /// be (the caller then uses an ordinary reply buffer).
    fn ensure_reply_area(&mut self, len: usize) -> bool {
        if self.reply_area.as_ref().is_some_and(|a| a.len() >= len) {
            return true;
        }
        self.unpin_buffer(REPLY_AREA);
        self.reply_area = None;
        match PageBuffer::new(len) {
            Ok(area) => {
                self.pin_buffer(REPLY_AREA, area.start(), area.len() as u64);
                let pinned = self.pinned[REPLY_AREA].is_some();
                self.reply_area = Some(area);
                pinned
            }
            Err(e) => {
                debug!("no reply area ({e}); replies use ordinary buffers");
                false
            }
        }
    }

    /// The page-locked receive buffer `data` lies in, if it does.
    fn receive_buffer_of(&self, data: &[u8]) -> Option<usize> {
        let (start, end) = (
            data.as_ptr() as u64,
            data.as_ptr() as u64 + data.len() as u64,
        );
        RECEIVE_BUFFERS
            .into_iter()
            .find(|&slot| self.pinned[slot].is_some_and(|(s, len)| start >= s && end <= s + len))
    }

    /// Wait until no queued copy reads buffer `slot`, before the worker writes into it.
    pub fn release_buffer(&mut self, slot: usize) -> Result<(), CudaStatus> {
        if self.owed_copy == Some(slot) {
            self.owed_copy = None;
        }
        self.exec.release_buffer(slot)
    }

    /// Before a reply: wait for the synchronous copy queued by a request, if one is
    /// owed (its bytes must be in place when the guest's `cudaMemcpy` returns).
    pub fn finish_owed_copy(&mut self) -> Result<(), CudaStatus> {
        match self.owed_copy.take() {
            Some(slot) => self.exec.release_buffer(slot),
            None => Ok(()),
        }
    }

    /// The length of the reply the last handler is leaving in the reply area, if it is
    /// (see [`Session::area_piece`]); the area is the reply's until the next request.
    pub fn take_area_len(&mut self) -> Option<usize> {
        self.reply_in_area.take()
    }

    /// Bytes `[start, end)` of the reply area (within the length
    /// [`Session::take_area_len`] gave), after waiting for the copy to put them there:
    /// the wait's outcome, and the bytes, which are sent even when it failed (the
    /// guest expects that many).
    pub fn area_piece(&mut self, start: usize, end: usize) -> (Result<(), CudaStatus>, &[u8]) {
        let landed = self.exec.dtoh_landed(end);
        let bytes = self
            .reply_area
            .as_ref()
            .and_then(|a| a.as_slice().get(start..end))
            .unwrap_or_default();
        (landed, bytes)
    }

    /// Let go of reply buffers larger than `keep` bytes (the reply area unpinned first),
    /// so that one large read does not hold its memory for the connection's life.
    pub fn trim_reply_buffers(&mut self, keep: usize) {
        if self.reply_area.as_ref().is_some_and(|a| a.len() > keep) {
            self.unpin_buffer(REPLY_AREA);
            self.reply_area = None;
        }
        if self.spare.capacity() > keep {
            self.spare = Vec::new();
        }
    }

    /// Hand a written reply's buffer back for the next reply.
    pub fn recycle(&mut self, data: Vec<u8>) {
        if data.capacity() > self.spare.capacity() {
            self.spare = data;
        }
    }

    pub fn greeted(&self) -> bool {
        self.greeted
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    fn fresh_handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    fn stream(&self, s: StreamHandle) -> Result<ExecStream, CudaStatus> {
        if s == StreamHandle::LEGACY {
            return Ok(LEGACY_STREAM);
        }
        if s == StreamHandle::PER_THREAD {
            return Ok(PER_THREAD_STREAM);
        }
        self.streams
            .get(&s)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn event(&self, e: EventHandle) -> Result<ExecEvent, CudaStatus> {
        self.events
            .get(&e)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn module(&self, m: ModuleHandle) -> Result<ExecModule, CudaStatus> {
        self.modules
            .get(&m)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn function(&self, f: FunctionHandle) -> Result<ExecFunction, CudaStatus> {
        self.functions
            .get(&f)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }

    /// Whether `[ptr, ptr + len)` lies wholly inside memory this guest owns: one of its
    /// device allocations, a module variable it looked up, or its shared host memory.
    fn owns(&self, ptr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = ptr.checked_add(len) else {
            return false;
        };
        let inside = |start: u64, size: u64| ptr >= start && end <= start.saturating_add(size);
        let in_map = |map: &BTreeMap<u64, u64>| {
            map.range(..=ptr)
                .next_back()
                .is_some_and(|(s, l)| inside(*s, *l))
        };
        in_map(&self.allocations)
            || in_map(&self.globals)
            || self.vmm.covers(ptr, end)
            || self.shared.range(..=ptr).next_back().is_some_and(|(s, m)| {
                m.device_ptr.is_some() && m.host_addr() == *s && inside(*s, m.len as u64)
            })
            || self.shared.values().any(|m| {
                m.device_ptr
                    .is_some_and(|d| d != m.host_addr() && inside(d, m.len as u64))
            })
    }

    /// Refuse, as the driver would for a pointer it does not know, a copy or memset
    /// reaching outside this guest's own memory; it is never executed.
    fn check_range(&self, ptr: u64, len: u64) -> Result<(), CudaStatus> {
        if self.owns(ptr, len) {
            return Ok(());
        }
        warn!(client = %self.client, ptr = format_args!("{ptr:#x}"), len,
            "refused an access outside the guest's own memory");
        Err(CudaStatus::ErrorInvalidValue)
    }

    /// [`Session::check_range`] for `height` rows of `width` bytes, `pitch` apart.
    fn check_pitched(
        &self,
        ptr: u64,
        pitch: u64,
        width: u64,
        height: u64,
    ) -> Result<(), CudaStatus> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let extent = pitch
            .checked_mul(height - 1)
            .and_then(|rows| rows.checked_add(width))
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.check_range(ptr, extent)
    }

    /// Refuse `bytes` more when they would take the guest over its memory quota.
    fn within_quota(&self, bytes: u64) -> Result<(), CudaStatus> {
        let Some(quota) = self.grant.memory_quota else {
            return Ok(());
        };
        let used = self.quota_used();
        if used.checked_add(bytes).is_none_or(|u| u > quota) {
            self.over_quota(bytes, used, quota);
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok(())
    }

    fn over_quota(&self, bytes: u64, used: u64, quota: u64) {
        info!(client = %self.client, guest = %self.grant.name, bytes, used, quota,
            "allocation refused: over the guest's memory quota");
    }

    /// Count `bytes` against the guest's memory quota, or refuse them.
    fn charge(&mut self, bytes: u64) -> Result<(), CudaStatus> {
        match (&self.ledger, self.grant.memory_quota) {
            (Some(ledger), Some(quota)) => match ledger.charge(bytes, quota) {
                Ok(true) => {}
                Ok(false) => {
                    self.over_quota(bytes, self.quota_used(), quota);
                    return Err(CudaStatus::ErrorMemoryAllocation);
                }
                // Fail closed: an unreadable ledger cannot show the VM within its quota.
                Err(e) => {
                    warn!(client = %self.client, bytes, "{e}; refused: the VM's quota cannot be checked");
                    return Err(CudaStatus::ErrorMemoryAllocation);
                }
            },
            _ => self.within_quota(bytes)?,
        }
        self.used = self.used.saturating_add(bytes);
        Ok(())
    }

    fn refund(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
        if let Some(ledger) = &self.ledger {
            if let Err(e) = ledger.refund(bytes) {
                warn!(client = %self.client, "{e}");
            }
        }
    }

    /// Refuse a new object once the guest holds `limit` of its kind.
    fn check_count(&self, what: &str, have: usize, limit: u32) -> Result<(), CudaStatus> {
        if have < limit as usize {
            return Ok(());
        }
        warn!(client = %self.client, limit, "refused another {what}: the guest's limit is reached");
        Err(CudaStatus::ErrorMemoryAllocation)
    }

    /// Make a device allocation of at least `reserved` bytes with `alloc`, which
    /// returns the pointer and the bytes it really took. The quota is taken before the
    /// driver is asked, so a guest over it never holds the memory even for a moment, and
    /// given back if anything fails. The memory is zeroed, so nothing another guest left
    /// in it can be read, then counted as the guest's.
    fn allocate(
        &mut self,
        reserved: u64,
        alloc: impl FnOnce(&mut dyn Executor) -> Result<(DevicePtr, u64), CudaStatus>,
    ) -> Result<DevicePtr, CudaStatus> {
        self.charge(reserved)?;
        let (ptr, bytes) = match alloc(self.exec.as_mut()) {
            Ok(made) => made,
            Err(e) => {
                self.refund(reserved);
                return Err(e);
            }
        };
        if ptr == 0 {
            self.refund(reserved);
            return Ok(0);
        }
        let extra = bytes.saturating_sub(reserved);
        if let Err(e) = self
            .charge(extra)
            .and_then(|()| self.exec.zero_fill(ptr, bytes))
        {
            let _ = self.exec.free(ptr);
            self.refund(reserved);
            return Err(e);
        }
        self.allocations.insert(ptr, bytes);
        self.set_device_bytes(self.device_bytes.saturating_add(bytes));
        Ok(ptr)
    }

    /// Make the guest thread's device current; every op but the handshake runs under it.
    pub fn enter(&mut self, ctx: &CallContext) -> Result<(), CudaStatus> {
        self.exec.set_device(ctx.device)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.unpin_buffer(RECEIVE_BUFFER);
        self.unpin_buffer(REPLY_AREA);
        // Free what the guest left behind; the executor's own Drop releases contexts.
        self.lt_drop_all();
        self.blas_drop_all();
        self.vmm_drop_all();
        self.graphs_drop_all();
        for (_, e) in self.events.drain() {
            let _ = self.exec.event_destroy(e);
        }
        for (_, s) in self.streams.drain() {
            let _ = self.exec.stream_destroy(s);
        }
        for (_, mapping) in std::mem::take(&mut self.shared) {
            let _ = self.exec.host_unregister(mapping.host_addr());
            drop(mapping);
        }
        let leaked = self.allocations.len();
        for (ptr, _) in std::mem::take(&mut self.allocations) {
            let _ = self.exec.free(ptr);
        }
        if leaked > 0 {
            info!(client = %self.client, leaked, "freed allocations the guest left behind");
        }
    }
}

fn nothing() -> HandlerResult<()> {
    Ok(((), Vec::new()))
}

impl Handler for Session {
    fn hello(&mut self, _ctx: &CallContext, req: Hello, _data: &[u8]) -> HandlerResult<HelloReply> {
        handshake::check_hello(&req).inspect_err(|_| {
            warn!(client = %req.client, protocol = req.protocol, runtime = req.runtime_version,
                "refusing guest: protocol or runtime version not spoken here");
        })?;
        self.greeted = true;
        self.client = format!("{}[{}]", req.client, req.pid);
        info!(client = %self.client, guest = %self.grant.name, executor = ?self.exec.kind(),
            gpus = %self.grant.gpus.to_arg(), quota = ?self.grant.memory_quota, "guest connected");
        Ok((
            HelloReply {
                protocol: PROTOCOL_VERSION,
                driver_version: self.exec.driver_version(),
                device_count: self.exec.device_count(),
                executor: self.exec.kind(),
                capabilities: caps::CONSOLE | caps::ASYNC_REQUESTS,
                banner: self.exec.banner(),
            },
            Vec::new(),
        ))
    }

    fn device_get_properties(
        &mut self,
        _: &CallContext,
        req: DeviceGetProperties,
        _: &[u8],
    ) -> HandlerResult<DeviceProperties> {
        Ok((self.exec.device_properties(req.device)?, Vec::new()))
    }
    fn device_synchronize(
        &mut self,
        _: &CallContext,
        _: DeviceSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.synchronize()?;
        nothing()
    }
    fn device_reset(&mut self, _: &CallContext, _: DeviceReset, _: &[u8]) -> HandlerResult<()> {
        // Everything the guest made is gone with the device's state.
        self.lt_reset();
        self.blas_reset();
        self.vmm_reset();
        self.graphs_reset();
        self.streams.clear();
        self.events.clear();
        let freed: u64 = self.allocations.values().sum();
        self.allocations.clear();
        self.globals.clear();
        self.refund(freed);
        self.set_device_bytes(0);
        self.exec.device_reset()?;
        nothing()
    }
    fn device_get_limit(
        &mut self,
        _: &CallContext,
        req: DeviceGetLimit,
        _: &[u8],
    ) -> HandlerResult<LimitValue> {
        Ok((
            LimitValue {
                value: self.exec.get_limit(req.limit)?,
            },
            Vec::new(),
        ))
    }
    fn device_set_limit(
        &mut self,
        _: &CallContext,
        req: DeviceSetLimit,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.set_limit(req.limit, req.value)?;
        nothing()
    }
    fn device_get_cache_config(
        &mut self,
        _: &CallContext,
        _: DeviceGetCacheConfig,
        _: &[u8],
    ) -> HandlerResult<CacheConfig> {
        Ok((
            CacheConfig {
                config: self.exec.get_cache_config()?,
            },
            Vec::new(),
        ))
    }
    fn device_set_cache_config(
        &mut self,
        _: &CallContext,
        req: CacheConfig,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.set_cache_config(req.config)?;
        nothing()
    }
    fn device_get_stream_priority_range(
        &mut self,
        _: &CallContext,
        _: DeviceGetStreamPriorityRange,
        _: &[u8],
    ) -> HandlerResult<PriorityRange> {
        let (least, greatest) = self.exec.stream_priority_range()?;
        Ok((PriorityRange { least, greatest }, Vec::new()))
    }
    fn device_can_access_peer(
        &mut self,
        ctx: &CallContext,
        req: DeviceCanAccessPeer,
        _: &[u8],
    ) -> HandlerResult<CanAccessPeer> {
        let can_access = self.exec.can_access_peer(req.device, req.peer)?;
        self.exec.set_device(ctx.device)?;
        Ok((CanAccessPeer { can_access }, Vec::new()))
    }
    fn device_enable_peer_access(
        &mut self,
        _: &CallContext,
        req: DeviceEnablePeerAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.enable_peer_access(req.peer, req.flags)?;
        nothing()
    }
    fn device_disable_peer_access(
        &mut self,
        _: &CallContext,
        req: DeviceDisablePeerAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.disable_peer_access(req.peer)?;
        nothing()
    }
    fn mem_get_info(&mut self, _: &CallContext, _: MemGetInfo, _: &[u8]) -> HandlerResult<MemInfo> {
        let (free, total) = self.exec.mem_info()?;
        // A guest with a quota sees the quota as its device's memory.
        let (free, total) = match self.grant.memory_quota {
            Some(quota) => (
                free.min(quota.saturating_sub(self.quota_used())),
                total.min(quota),
            ),
            None => (free, total),
        };
        Ok((MemInfo { free, total }, Vec::new()))
    }

    fn mem_alloc(&mut self, _: &CallContext, req: MemAlloc, _: &[u8]) -> HandlerResult<Allocated> {
        let size = req.size;
        let ptr = self.allocate(size, |exec| Ok((exec.alloc(size)?, size)))?;
        Ok((Allocated { ptr }, Vec::new()))
    }
    fn mem_free(&mut self, _: &CallContext, req: MemFree, _: &[u8]) -> HandlerResult<()> {
        if req.ptr == 0 {
            return nothing();
        }
        // Only what this guest allocated may be freed by it.
        let Some(&bytes) = self.allocations.get(&req.ptr) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        self.exec.free(req.ptr)?;
        self.allocations.remove(&req.ptr);
        self.refund(bytes);
        self.set_device_bytes(self.device_bytes.saturating_sub(bytes));
        nothing()
    }
    fn mem_alloc_pitch(
        &mut self,
        _: &CallContext,
        req: MemAllocPitch,
        _: &[u8],
    ) -> HandlerResult<AllocatedPitch> {
        let (width, height) = (req.width, req.height);
        let mut pitch = 0;
        let ptr = self.allocate(width.saturating_mul(height), |exec| {
            let (ptr, p) = exec.alloc_pitch(width, height)?;
            pitch = p;
            match p.checked_mul(height) {
                Some(bytes) => Ok((ptr, bytes)),
                None => {
                    let _ = exec.free(ptr);
                    Err(CudaStatus::ErrorMemoryAllocation)
                }
            }
        })?;
        Ok((AllocatedPitch { ptr, pitch }, Vec::new()))
    }
    fn memcpy_htod(&mut self, _: &CallContext, req: MemcpyHtoD, data: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        self.check_range(req.dst, data.len() as u64)?;
        match self.receive_buffer_of(data) {
            // Straight from the worker's page-locked buffer, which the worker leaves
            // alone until the copy is done: it reads the next request meanwhile.
            Some(slot) => {
                self.exec
                    .copy_htod_queued(req.dst, data, s, req.is_async, slot)?;
                if !req.is_async {
                    self.owed_copy = Some(slot);
                }
            }
            None => self.exec.copy_htod(req.dst, data, s, req.is_async)?,
        }
        self.stats
            .copied(Direction::HostToDevice, data.len() as u64);
        nothing()
    }
    fn memcpy_dtoh(&mut self, _: &CallContext, req: MemcpyDtoH, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        if req.size > vmcuda_wire::frame::MAX_DATA_LEN {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_range(req.src, req.size)?;
        let size = req.size as usize;
        if size > REPLY_AREA_MIN {
            // Large reads land in the page-locked reply area by DMA, and the worker
            // sends them from there: no staging copy, no reply buffer.
            if self.ensure_reply_area(size) {
                let area = self.reply_area.as_mut().expect("ensured above");
                // The worker sends the first bytes while the rest are still arriving.
                self.exec.copy_dtoh_queued(
                    &mut area.as_mut_slice()[..size],
                    req.src,
                    s,
                    req.is_async,
                )?;
                self.reply_in_area = Some(size);
                self.stats.copied(Direction::DeviceToHost, req.size);
                return nothing();
            }
        }
        let mut out = self.reply_buffer(size)?;
        if let Err(e) = self.exec.copy_dtoh(&mut out, req.src, s, req.is_async) {
            self.recycle(out);
            return Err(e);
        }
        self.stats.copied(Direction::DeviceToHost, req.size);
        Ok(((), out))
    }
    fn memcpy_dtod(&mut self, _: &CallContext, req: MemcpyDtoD, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.check_range(req.dst, req.size)?;
        self.check_range(req.src, req.size)?;
        self.exec
            .copy_dtod(req.dst, req.src, req.size, s, req.is_async)?;
        self.stats.copied(Direction::DeviceToDevice, req.size);
        nothing()
    }
    fn memcpy_2d_htod(
        &mut self,
        _: &CallContext,
        req: Memcpy2DHtoD,
        data: &[u8],
    ) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        if req.width.checked_mul(req.height) != Some(data.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_pitched(req.dst, req.dpitch, req.width, req.height)?;
        let dst = Pitched {
            ptr: req.dst,
            pitch: req.dpitch,
        };
        self.exec
            .copy_2d_htod(dst, data, req.width, req.height, s, req.is_async)?;
        self.stats
            .copied(Direction::HostToDevice, data.len() as u64);
        nothing()
    }
    fn memcpy_2d_dtoh(
        &mut self,
        _: &CallContext,
        req: Memcpy2DDtoH,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        let len = req
            .width
            .checked_mul(req.height)
            .filter(|l| *l <= vmcuda_wire::frame::MAX_DATA_LEN)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.check_pitched(req.src, req.spitch, req.width, req.height)?;
        let mut out = self.reply_buffer(len as usize)?;
        let src = Pitched {
            ptr: req.src,
            pitch: req.spitch,
        };
        let r = self
            .exec
            .copy_2d_dtoh(&mut out, src, req.width, req.height, s, req.is_async);
        if let Err(e) = r {
            self.recycle(out);
            return Err(e);
        }
        self.stats.copied(Direction::DeviceToHost, len);
        Ok(((), out))
    }
    fn memcpy_2d_dtod(
        &mut self,
        _: &CallContext,
        req: Memcpy2DDtoD,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        let dst = Pitched {
            ptr: req.dst,
            pitch: req.dpitch,
        };
        let src = Pitched {
            ptr: req.src,
            pitch: req.spitch,
        };
        self.check_pitched(req.dst, req.dpitch, req.width, req.height)?;
        self.check_pitched(req.src, req.spitch, req.width, req.height)?;
        self.exec
            .copy_2d_dtod(dst, src, req.width, req.height, s, req.is_async)?;
        self.stats.copied(
            Direction::DeviceToDevice,
            req.width.saturating_mul(req.height),
        );
        nothing()
    }
    fn memset(&mut self, _: &CallContext, req: Memset, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.check_range(req.dst, req.size)?;
        self.exec
            .memset(req.dst, req.value, req.size, s, req.is_async)?;
        nothing()
    }
    fn memset_2d(&mut self, _: &CallContext, req: Memset2D, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.check_pitched(req.dst, req.pitch, req.width, req.height)?;
        let dst = Pitched {
            ptr: req.dst,
            pitch: req.pitch,
        };
        self.exec
            .memset_2d(dst, req.value, req.width, req.height, s, req.is_async)?;
        nothing()
    }
    fn memcpy_peer(&mut self, ctx: &CallContext, req: MemcpyPeer, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.check_range(req.dst, req.size)?;
        self.check_range(req.src, req.size)?;
        let r = self.exec.copy_peer(
            req.dst,
            req.dst_device,
            req.src,
            req.src_device,
            req.size,
            s,
            req.is_async,
        );
        self.exec.set_device(ctx.device)?;
        r?;
        self.stats.copied(Direction::DeviceToDevice, req.size);
        nothing()
    }
    fn pointer_get_attributes(
        &mut self,
        _: &CallContext,
        req: PointerGetAttributes,
        _: &[u8],
    ) -> HandlerResult<PointerAttributes> {
        // Memory the guest does not own is, to it, memory CUDA knows nothing of: the
        // driver is not asked, so nothing of the worker's own address space shows.
        if !self.owns(req.ptr, 1) {
            let unregistered = PointerAttributes {
                memory_type: 0,
                device: -2,
                device_pointer: 0,
            };
            return Ok((unregistered, Vec::new()));
        }
        Ok((self.exec.pointer_attributes(req.ptr)?, Vec::new()))
    }

    fn host_register_shared(
        &mut self,
        _: &CallContext,
        req: HostRegisterShared,
        _: &[u8],
    ) -> HandlerResult<SharedHostMemory> {
        let fd = self.incoming_fds.pop_front().ok_or_else(|| {
            warn!(client = %self.client, "shared-memory request without a descriptor");
            CudaStatus::ErrorNotSupported
        })?;
        if self.shared.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        let staging = req.flags & SHARED_STAGING != 0;
        self.check_staging(staging, req.size)?;
        let mapping = SharedMapping::map(&fd, req.addr, req.size)?;
        let device_ptr = self.register_mapping(req.addr, mapping, staging)?;
        Ok((SharedHostMemory { device_ptr }, Vec::new()))
    }

    fn host_register_guest_pages(
        &mut self,
        _: &CallContext,
        req: HostRegisterGuestPages,
        _: &[u8],
    ) -> HandlerResult<SharedHostMemory> {
        let Some(ram) = &self.guest_ram else {
            // Not a vhost-user device worker, an unprivileged guest source port, or the
            // VM's configuration says no: the guest copies over the socket.
            info!(client = %self.client,
                "guest-physical registration refused: this connection has no access to the guest's RAM (not from a privileged guest port through the vhost-user device, or guest_memory_copies = false); copies go over the socket");
            return Err(CudaStatus::ErrorNotSupported);
        };
        let staging = req.flags & SHARED_STAGING != 0;
        let size = req.page_size.checked_mul(req.pages.len() as u64);
        if size != Some(req.size)
            || req.addr == 0
            || !req.addr.is_multiple_of(4096)
            || req.addr.checked_add(req.size).is_none()
            || (staging && req.size > MAX_STAGING_LEN)
            || self.check_staging(staging, req.size).is_err()
        {
            warn!(client = %self.client, size = req.size, pages = req.pages.len(),
                "refused guest pages: sizes disagree, bad address, or a second or oversized staging area");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if self.shared.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        let addr = ram.map_pages(req.page_size, &req.pages)?;
        let mapping = SharedMapping {
            addr,
            len: req.size as usize,
            device_ptr: None,
            staging: false,
        };
        self.register_mapping(req.addr, mapping, staging)?;
        // Kernels cannot reach these pages: there is no device pointer to give.
        Ok((SharedHostMemory { device_ptr: 0 }, Vec::new()))
    }

    fn host_unregister_shared(
        &mut self,
        _: &CallContext,
        req: HostUnregisterShared,
        _: &[u8],
    ) -> HandlerResult<()> {
        if !self.shared.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryNotRegistered);
        }
        // Copies may still be running on these pages (cudaFreeHost waits for the device
        // natively): they finish before the pages go. Their errors stay the device's.
        let _ = self.exec.synchronize();
        let mapping = self.shared.remove(&req.addr).expect("checked above");
        let r = self.exec.host_unregister(mapping.host_addr());
        let charged = if mapping.staging {
            0
        } else {
            mapping.len as u64
        };
        self.refund(charged);
        self.set_shared_bytes(self.shared_bytes.saturating_sub(charged));
        drop(mapping);
        r?;
        nothing()
    }

    fn memcpy_shared(&mut self, _: &CallContext, req: MemcpyShared, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        // The host side must be shared guest memory mapped here, the device side the
        // guest's own memory: a copy naming anything else is never executed.
        let end = req.host.checked_add(req.size);
        // The guest's address, translated to where the mapping is here.
        let here = self
            .shared
            .range(..=req.host)
            .next_back()
            .filter(|(start, m)| end.is_some_and(|end| end <= *start + m.len as u64))
            .map(|(start, m)| m.host_addr() + (req.host - start));
        let Some(here) = here else {
            warn!(client = %self.client, host = format_args!("{:#x}", req.host), size = req.size,
                "refused a shared-memory copy outside the guest's shared memory");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        self.check_range(req.device, req.size)?;
        self.exec
            .copy_registered(req.device, here, req.size, req.to_device, s, req.is_async)?;
        let direction = if req.to_device {
            Direction::HostToDevice
        } else {
            Direction::DeviceToHost
        };
        self.stats.copied(direction, req.size);
        nothing()
    }

    fn module_load(
        &mut self,
        _: &CallContext,
        _: ModuleLoad,
        image: &[u8],
    ) -> HandlerResult<ModuleLoaded> {
        self.check_count("module", self.modules.len(), self.grant.max_modules)?;
        let m = self.exec.load_module(image)?;
        if let Some((h, _)) = self.modules.iter().find(|(_, v)| **v == m) {
            return Ok((ModuleLoaded { module: *h }, Vec::new()));
        }
        let module = ModuleHandle(self.fresh_handle());
        self.modules.insert(module, m);
        Ok((ModuleLoaded { module }, Vec::new()))
    }
    fn module_get_function(
        &mut self,
        _: &CallContext,
        req: ModuleGetFunction,
        _: &[u8],
    ) -> HandlerResult<FunctionInfo> {
        let m = self.module(req.module)?;
        let (f, params) = self.exec.get_function(m, &req.name)?;
        let function = match self.functions.iter().find(|(_, v)| **v == f) {
            Some((h, _)) => *h,
            None => {
                let h = FunctionHandle(self.fresh_handle());
                self.functions.insert(h, f);
                h
            }
        };
        Ok((FunctionInfo { function, params }, Vec::new()))
    }
    fn module_get_global(
        &mut self,
        _: &CallContext,
        req: ModuleGetGlobal,
        _: &[u8],
    ) -> HandlerResult<GlobalInfo> {
        let m = self.module(req.module)?;
        let (ptr, size) = self.exec.get_global(m, &req.name)?;
        // The guest may now copy to and from this variable.
        if ptr != 0 {
            self.globals.insert(ptr, size);
        }
        Ok((GlobalInfo { ptr, size }, Vec::new()))
    }
    fn func_get_attributes(
        &mut self,
        _: &CallContext,
        req: FuncGetAttributes,
        _: &[u8],
    ) -> HandlerResult<FuncAttributes> {
        let f = self.function(req.function)?;
        Ok((self.exec.func_attributes(f)?, Vec::new()))
    }
    fn func_set_attribute(
        &mut self,
        _: &CallContext,
        req: FuncSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        let f = self.function(req.function)?;
        self.exec.func_set_attribute(f, req.attribute, req.value)?;
        nothing()
    }
    fn func_set_cache_config(
        &mut self,
        _: &CallContext,
        req: FuncSetCacheConfig,
        _: &[u8],
    ) -> HandlerResult<()> {
        let f = self.function(req.function)?;
        self.exec.func_set_cache_config(f, req.config)?;
        nothing()
    }
    fn launch_kernel(
        &mut self,
        _: &CallContext,
        req: LaunchKernel,
        params: &[u8],
    ) -> HandlerResult<()> {
        let f = self.function(req.function)?;
        let stream = self.stream(req.stream)?;
        if req
            .attributes
            .iter()
            .any(|a| a.value.len() > LAUNCH_ATTRIBUTE_VALUE_LEN)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let config = LaunchConfig {
            grid: req.grid,
            block: req.block,
            shared_mem: req.shared_mem,
            stream,
            attributes: &req.attributes,
        };
        self.exec.launch(f, &config, params)?;
        self.stats.kernel_launched();
        nothing()
    }
    fn occupancy_max_active_blocks(
        &mut self,
        _: &CallContext,
        req: OccupancyMaxActiveBlocks,
        _: &[u8],
    ) -> HandlerResult<BlockCount> {
        let f = self.function(req.function)?;
        let blocks = self.exec.occupancy_max_active_blocks(
            f,
            req.block_size,
            req.dynamic_smem,
            req.flags,
        )?;
        Ok((BlockCount { blocks }, Vec::new()))
    }
    fn occupancy_available_dynamic_smem(
        &mut self,
        _: &CallContext,
        req: OccupancyAvailableDynamicSmem,
        _: &[u8],
    ) -> HandlerResult<SmemBytes> {
        let f = self.function(req.function)?;
        let bytes =
            self.exec
                .occupancy_available_dynamic_smem(f, req.num_blocks, req.block_size)?;
        Ok((SmemBytes { bytes }, Vec::new()))
    }

    fn stream_create(&mut self, _: &CallContext, req: StreamCreate, _: &[u8]) -> HandlerResult<()> {
        if req.stream.is_default() || req.stream.0 == 1 || self.streams.contains_key(&req.stream) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.check_count("stream", self.streams.len(), self.grant.max_streams)?;
        let s = self.exec.stream_create(req.flags, req.priority)?;
        self.streams.insert(req.stream, s);
        nothing()
    }
    fn stream_destroy(
        &mut self,
        _: &CallContext,
        req: StreamDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self
            .streams
            .remove(&req.stream)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        self.exec.stream_destroy(s)?;
        nothing()
    }
    fn stream_synchronize(
        &mut self,
        _: &CallContext,
        req: StreamSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.exec.stream_synchronize(s)?;
        nothing()
    }
    fn stream_query(&mut self, _: &CallContext, req: StreamQuery, _: &[u8]) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        self.exec.stream_query(s)?;
        nothing()
    }
    fn stream_wait_event(
        &mut self,
        _: &CallContext,
        req: StreamWaitEvent,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.stream(req.stream)?;
        let e = self.event(req.event)?;
        self.exec.stream_wait_event(s, e, req.flags)?;
        nothing()
    }
    fn event_create(&mut self, _: &CallContext, req: EventCreate, _: &[u8]) -> HandlerResult<()> {
        if req.event.0 == 0 || self.events.contains_key(&req.event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.check_count("event", self.events.len(), self.grant.max_events)?;
        let e = self.exec.event_create(req.flags)?;
        self.events.insert(req.event, e);
        nothing()
    }
    fn event_destroy(&mut self, _: &CallContext, req: EventDestroy, _: &[u8]) -> HandlerResult<()> {
        let e = self
            .events
            .remove(&req.event)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        self.exec.event_destroy(e)?;
        nothing()
    }
    fn event_record(&mut self, _: &CallContext, req: EventRecord, _: &[u8]) -> HandlerResult<()> {
        let e = self.event(req.event)?;
        let s = self.stream(req.stream)?;
        self.exec.event_record(e, s, req.flags)?;
        nothing()
    }
    fn event_synchronize(
        &mut self,
        _: &CallContext,
        req: EventSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        let e = self.event(req.event)?;
        self.exec.event_synchronize(e)?;
        nothing()
    }
    fn event_query(&mut self, _: &CallContext, req: EventQuery, _: &[u8]) -> HandlerResult<()> {
        let e = self.event(req.event)?;
        self.exec.event_query(e)?;
        nothing()
    }
    fn blas_create(&mut self, _: &CallContext, req: BlasCreate, _: &[u8]) -> HandlerResult<()> {
        self.handle_blas_create(req)
    }
    fn blas_destroy(&mut self, _: &CallContext, req: BlasDestroy, _: &[u8]) -> HandlerResult<()> {
        self.handle_blas_destroy(req)
    }
    fn blas_set_workspace(
        &mut self,
        _: &CallContext,
        req: BlasSetWorkspace,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_blas_set_workspace(req)
    }
    fn blas_gemm(&mut self, _: &CallContext, req: BlasGemm, _: &[u8]) -> HandlerResult<()> {
        self.handle_blas_gemm(req)
    }
    fn memset_elements(
        &mut self,
        _: &CallContext,
        req: MemsetElements,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_memset_elements(req)
    }
    fn stream_write_value32(
        &mut self,
        _: &CallContext,
        req: StreamWriteValue32,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_stream_write_value32(req)
    }
    fn mem_address_reserve(
        &mut self,
        _: &CallContext,
        req: MemAddressReserve,
        _: &[u8],
    ) -> HandlerResult<Reserved> {
        self.handle_mem_address_reserve(req)
    }
    fn mem_address_free(
        &mut self,
        _: &CallContext,
        req: MemAddressFree,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_mem_address_free(req)
    }
    fn mem_create(
        &mut self,
        _: &CallContext,
        req: MemCreate,
        _: &[u8],
    ) -> HandlerResult<MemCreated> {
        self.handle_mem_create(req)
    }
    fn mem_release(&mut self, _: &CallContext, req: MemRelease, _: &[u8]) -> HandlerResult<()> {
        self.handle_mem_release(req)
    }
    fn mem_map(&mut self, _: &CallContext, req: MemMap, _: &[u8]) -> HandlerResult<()> {
        self.handle_mem_map(req)
    }
    fn mem_unmap(&mut self, _: &CallContext, req: MemUnmap, _: &[u8]) -> HandlerResult<()> {
        self.handle_mem_unmap(req)
    }
    fn mem_set_access(
        &mut self,
        _: &CallContext,
        req: MemSetAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_mem_set_access(req)
    }
    fn mem_get_allocation_granularity(
        &mut self,
        _: &CallContext,
        req: MemGetAllocationGranularity,
        _: &[u8],
    ) -> HandlerResult<Granularity> {
        self.handle_mem_get_allocation_granularity(req)
    }
    fn mem_retain_allocation_handle(
        &mut self,
        _: &CallContext,
        req: MemRetainAllocationHandle,
        _: &[u8],
    ) -> HandlerResult<MemCreated> {
        self.handle_mem_retain_allocation_handle(req)
    }
    fn mem_get_allocation_properties(
        &mut self,
        _: &CallContext,
        req: MemGetAllocationProperties,
        _: &[u8],
    ) -> HandlerResult<AllocationProp> {
        self.handle_mem_get_allocation_properties(req)
    }
    fn tensor_map_encode_tiled(
        &mut self,
        _: &CallContext,
        req: TensorMapEncodeTiled,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_tensor_map_encode_tiled(req)
    }
    fn link(&mut self, _: &CallContext, req: Link, data: &[u8]) -> HandlerResult<Linked> {
        self.handle_link(req, data)
    }
    fn lt_create(&mut self, _: &CallContext, req: LtCreate, _: &[u8]) -> HandlerResult<()> {
        self.handle_lt_create(req)
    }
    fn lt_destroy(&mut self, _: &CallContext, req: LtDestroy, _: &[u8]) -> HandlerResult<()> {
        self.handle_lt_destroy(req)
    }
    fn lt_heuristic(
        &mut self,
        _: &CallContext,
        req: LtHeuristic,
        _: &[u8],
    ) -> HandlerResult<LtHeuristicReply> {
        self.handle_lt_heuristic(req)
    }
    fn lt_matmul(&mut self, _: &CallContext, req: LtMatmul, _: &[u8]) -> HandlerResult<()> {
        self.handle_lt_matmul(req)
    }
    fn stream_begin_capture(
        &mut self,
        _: &CallContext,
        req: StreamBeginCapture,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_begin_capture(req)
    }
    fn stream_end_capture(
        &mut self,
        _: &CallContext,
        req: StreamEndCapture,
        _: &[u8],
    ) -> HandlerResult<GraphMade> {
        self.handle_end_capture(req)
    }
    fn stream_get_capture_graph(
        &mut self,
        _: &CallContext,
        req: StreamGetCaptureGraph,
        _: &[u8],
    ) -> HandlerResult<CaptureGraph> {
        self.handle_capture_graph(req)
    }
    fn graph_instantiate(
        &mut self,
        _: &CallContext,
        req: GraphInstantiate,
        _: &[u8],
    ) -> HandlerResult<GraphExecMade> {
        self.handle_graph_instantiate(req)
    }
    fn graph_launch(&mut self, _: &CallContext, req: GraphLaunch, _: &[u8]) -> HandlerResult<()> {
        self.handle_graph_launch(req)
    }
    fn graph_destroy(&mut self, _: &CallContext, req: GraphDestroy, _: &[u8]) -> HandlerResult<()> {
        self.handle_graph_destroy(req)
    }
    fn graph_exec_destroy(
        &mut self,
        _: &CallContext,
        req: GraphExecDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_graph_exec_destroy(req)
    }
    fn graph_get_nodes(
        &mut self,
        _: &CallContext,
        req: GraphGetNodes,
        _: &[u8],
    ) -> HandlerResult<GraphNodes> {
        self.handle_graph_get_nodes(req)
    }
    fn graph_node_get_dependencies(
        &mut self,
        _: &CallContext,
        req: GraphNodeGetDependencies,
        _: &[u8],
    ) -> HandlerResult<GraphNodes> {
        self.handle_node_dependencies(req)
    }
    fn graph_debug_dot(
        &mut self,
        _: &CallContext,
        req: GraphDebugDot,
        _: &[u8],
    ) -> HandlerResult<DotText> {
        self.handle_graph_debug_dot(req)
    }
    fn mem_alloc_async(
        &mut self,
        _: &CallContext,
        req: MemAllocAsync,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        self.handle_alloc_async(req)
    }
    fn mem_free_async(
        &mut self,
        _: &CallContext,
        req: MemFreeAsync,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_free_async(req)
    }
    fn mem_pool_get_attribute(
        &mut self,
        ctx: &CallContext,
        req: MemPoolGetAttribute,
        _: &[u8],
    ) -> HandlerResult<PoolAttributeValue> {
        self.handle_pool_get_attribute(ctx, req)
    }
    fn mem_pool_set_attribute(
        &mut self,
        ctx: &CallContext,
        req: MemPoolSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_pool_set_attribute(ctx, req)
    }
    fn mem_pool_trim_to(
        &mut self,
        ctx: &CallContext,
        req: MemPoolTrimTo,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_pool_trim_to(ctx, req)
    }
    fn mem_pool_set_access(
        &mut self,
        ctx: &CallContext,
        req: MemPoolSetAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.handle_pool_set_access(ctx, req)
    }
    fn blas_call(&mut self, _: &CallContext, req: BlasCall, _: &[u8]) -> HandlerResult<()> {
        self.handle_blas_call(req).map(|_| ((), Vec::new()))
    }
    fn blas_call_waited(
        &mut self,
        _: &CallContext,
        req: BlasCallWaited,
        _: &[u8],
    ) -> HandlerResult<BlasOutputs> {
        self.handle_blas_call(req.0)
    }
    fn event_elapsed_time(
        &mut self,
        _: &CallContext,
        req: EventElapsedTime,
        _: &[u8],
    ) -> HandlerResult<ElapsedTime> {
        let a = self.event(req.start)?;
        let b = self.event(req.end)?;
        Ok((
            ElapsedTime {
                ms: self.exec.event_elapsed_ms(a, b)?,
            },
            Vec::new(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::host_memory::HostMemoryExecutor;

    const CTX: CallContext = CallContext { device: 0 };

    fn session(quota: Option<u64>) -> Session {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let mut grant = Grant::unlimited("test");
        grant.memory_quota = quota;
        Session::new(Box::new(exec), grant)
    }

    /// A memfd of `len` bytes and an address in this process where nothing is mapped
    /// (the session maps it there, as it would at a guest's address).
    fn region(len: usize, sealed: bool) -> (OwnedFd, u64) {
        let fd =
            nix::sys::memfd::memfd_create(c"test", nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING)
                .unwrap();
        nix::unistd::ftruncate(&fd, len as i64).unwrap();
        if sealed {
            let seal = nix::fcntl::SealFlag::F_SEAL_SHRINK;
            nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_ADD_SEALS(seal)).unwrap();
        }
        let probe = crate::pinned::PageBuffer::new(len).unwrap();
        let addr = probe.start();
        drop(probe);
        (fd, addr)
    }

    fn register(s: &mut Session, len: usize, flags: u32) -> Result<u64, CudaStatus> {
        register_fd(s, region(len, true), len, flags)
    }

    fn register_fd(
        s: &mut Session,
        (fd, addr): (OwnedFd, u64),
        len: usize,
        flags: u32,
    ) -> Result<u64, CudaStatus> {
        s.incoming_fds.push_back(fd);
        let req = HostRegisterShared {
            addr,
            size: len as u64,
            flags,
        };
        s.host_register_shared(&CTX, req, &[]).map(|_| addr)
    }

    fn copy(
        s: &mut Session,
        device: u64,
        host: u64,
        size: u64,
        to_device: bool,
    ) -> HandlerResult<()> {
        let req = MemcpyShared {
            device,
            host,
            size,
            to_device,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        s.memcpy_shared(&CTX, req, &[])
    }

    #[test]
    fn shared_copies_move_bytes_without_the_socket_and_stay_inside_the_guest() {
        let mut s = session(Some(1 << 20));
        let staging = register(&mut s, 1 << 20, SHARED_STAGING).unwrap();
        // The staging area is not the program's memory: the quota is untouched.
        assert_eq!(
            s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
            1 << 20
        );
        let dev = s
            .mem_alloc(&CTX, MemAlloc { size: 8192 }, &[])
            .unwrap()
            .0
            .ptr;
        // SAFETY: the session mapped the staging memfd at `staging`, 1 MiB long.
        let area = unsafe { std::slice::from_raw_parts_mut(staging as *mut u8, 1 << 20) };
        for (i, b) in area[..8192].iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        copy(&mut s, dev, staging, 8192, true).unwrap();
        copy(&mut s, dev + 4096, staging + 100_000, 4096, false).unwrap();
        assert!(area[100_000..104_096]
            .iter()
            .enumerate()
            .all(|(i, b)| *b == ((i + 4096) * 31 % 251) as u8));

        // Outside the shared memory, outside the allocation, or overflowing: refused.
        let refused = CudaStatus::ErrorInvalidValue;
        assert_eq!(
            copy(&mut s, dev, staging + (1 << 20) - 10, 20, true).unwrap_err(),
            refused
        );
        assert_eq!(
            copy(&mut s, dev, area.as_ptr() as u64 - 4096, 16, true).unwrap_err(),
            refused
        );
        assert_eq!(
            copy(&mut s, dev + 8000, staging, 400, false).unwrap_err(),
            refused
        );
        assert_eq!(
            copy(&mut s, dev, u64::MAX - 8, 16, true).unwrap_err(),
            refused
        );

        // Where this process already uses the guest's addresses, the pages are mapped
        // elsewhere: copies still reach them, through the guest's own address.
        let occupied = crate::pinned::PageBuffer::new(8192).unwrap();
        let (fd, _) = region(8192, true);
        let guest_addr = register_fd(&mut s, (fd, occupied.start()), 8192, 0).unwrap();
        assert_eq!(guest_addr, occupied.start());
        copy(&mut s, dev, guest_addr, 4096, false).unwrap();
        assert_eq!(
            occupied.as_slice()[0],
            0,
            "the worker's own pages are untouched"
        );
        let unregister = HostUnregisterShared { addr: guest_addr };
        s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
        drop(occupied);

        // A file the guest could shrink under the mapping is refused.
        let unsealed = region(4096, false);
        assert_eq!(register_fd(&mut s, unsealed, 4096, 0).unwrap_err(), refused);
        // One staging area per connection, and never an oversized one.
        assert_eq!(register(&mut s, 4096, SHARED_STAGING).unwrap_err(), refused);
        let mut t = session(None);
        let huge = (MAX_STAGING_LEN + 4096) as usize;
        assert_eq!(register(&mut t, huge, SHARED_STAGING).unwrap_err(), refused);
        // Program memory shared the same way is charged.
        let pinned = register(&mut s, 256 << 10, 0).unwrap();
        assert_eq!(
            s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
            (1 << 20) - 8192 - (256 << 10)
        );
        let unregister = HostUnregisterShared { addr: pinned };
        s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
        let unregister = HostUnregisterShared { addr: staging };
        s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
        assert_eq!(
            s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
            (1 << 20) - 8192
        );
    }

    /// A session whose guest has 4 MiB of RAM at guest-physical 0 (a memfd, as QEMU
    /// gives the device), and that memfd.
    fn session_with_guest_ram() -> (Session, std::fs::File) {
        let fd = nix::sys::memfd::memfd_create(c"ram", nix::sys::memfd::MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, 4 << 20).unwrap();
        let mut ram = GuestRam::default();
        ram.add(fd.try_clone().unwrap(), 0, 4 << 20, 0).unwrap();
        (session(None).with_guest_ram(ram), std::fs::File::from(fd))
    }

    fn guest_pages(addr: u64, pages: Vec<u64>, flags: u32) -> HostRegisterGuestPages {
        HostRegisterGuestPages {
            addr,
            size: pages.len() as u64 * 4096,
            page_size: 4096,
            pages,
            flags,
        }
    }

    #[test]
    fn guest_pages_are_copied_at_their_guest_physical_place_and_never_by_guest_address() {
        use std::os::unix::fs::FileExt;
        let (mut s, ram) = session_with_guest_ram();
        // The guest's staging area: guest address 0x7000_0000, its two pages at
        // guest-physical 0x3000 and 0x1000 (in that order).
        let guest = 0x7000_0000u64;
        let reply = s
            .host_register_guest_pages(
                &CTX,
                guest_pages(guest, vec![0x3000, 0x1000], SHARED_STAGING),
                &[],
            )
            .unwrap();
        assert_eq!(reply.0.device_ptr, 0, "no device pointer for guest pages");
        let dev = s
            .mem_alloc(&CTX, MemAlloc { size: 8192 }, &[])
            .unwrap()
            .0
            .ptr;
        ram.write_all_at(&[7u8; 4096], 0x3000).unwrap();
        ram.write_all_at(&[9u8; 4096], 0x1000).unwrap();
        copy(&mut s, dev, guest, 8192, true).unwrap();
        // Back into the second page only: lands in guest-physical 0x1000.
        ram.write_all_at(&[0u8; 4096], 0x1000).unwrap();
        copy(&mut s, dev + 4096, guest + 4096, 4096, false).unwrap();
        let mut back = vec![0u8; 4096];
        ram.read_exact_at(&mut back, 0x1000).unwrap();
        assert!(back.iter().all(|b| *b == 9));
        // The guest's address is not memory of this process: never a device-side
        // pointer, never an attribute lookup.
        let refused = CudaStatus::ErrorInvalidValue;
        let dtod = MemcpyDtoD {
            dst: dev,
            src: guest,
            size: 16,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        assert_eq!(s.memcpy_dtod(&CTX, dtod, &[]).unwrap_err(), refused);
        assert_eq!(
            copy(&mut s, dev, guest + 8192, 1, true).unwrap_err(),
            refused
        );
        // A second staging area, pages outside guest RAM, sizes that disagree: refused.
        let again = guest_pages(guest + (1 << 20), vec![0x2000], SHARED_STAGING);
        assert_eq!(
            s.host_register_guest_pages(&CTX, again, &[]).unwrap_err(),
            refused
        );
        let outside = guest_pages(guest + (1 << 20), vec![4 << 20], 0);
        assert_eq!(
            s.host_register_guest_pages(&CTX, outside, &[]).unwrap_err(),
            refused
        );
        let mut lying = guest_pages(guest + (1 << 20), vec![0x2000], 0);
        lying.size = 1 << 20;
        assert_eq!(
            s.host_register_guest_pages(&CTX, lying, &[]).unwrap_err(),
            refused
        );
        let unregister = HostUnregisterShared { addr: guest };
        s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
        assert_eq!(copy(&mut s, dev, guest, 16, true).unwrap_err(), refused);
    }

    #[test]
    fn guest_pages_are_refused_without_the_guests_ram() {
        // A worker not given guest RAM (a Unix or TCP guest, an unprivileged guest port,
        // or guest_memory_copies = false) turns every guest-physical request away.
        let mut s = session(None);
        let req = guest_pages(0x7000_0000, vec![0x1000], SHARED_STAGING);
        assert_eq!(
            s.host_register_guest_pages(&CTX, req, &[]).unwrap_err(),
            CudaStatus::ErrorNotSupported
        );
    }
}
