//! Managed (unified) memory: one address that the program's CPU and the device both
//! use, across the VM boundary.
//!
//! The model is CUDA's on devices without concurrent managed access (what the guest's
//! devices report, `cudaDevAttrConcurrentManagedAccess` = 0): a managed allocation is
//! device memory on the host, and guest pages mapped at the same addresses. Each page
//! is in one of three states:
//! - [`State::Device`]: only the device's copy is current; the guest page is
//!   `PROT_NONE`, so the CPU's first touch faults;
//! - [`State::Clean`]: both copies agree; the guest page is read-only, so a write
//!   faults;
//! - [`State::Dirty`]: the CPU wrote the guest page; it is read-write.
//!
//! A new allocation's pages start `Dirty` (the device's copy is zeros, and what the
//! program never touches stays zeros on the guest too, so only the resident pages
//! travel): the program fills it, with its own writes or `read(2)`, without a fault.
//!
//! Before any work that may reach device memory (a launch, copy, memset, library call
//! or graph launch; [`before_op`]) every dirty page travels to the device and every
//! page returns to `Device`, since the work may write any of them. A fault on a
//! `Device` page fetches its 2 MiB window from the device (one synchronous copy on the
//! legacy stream, so it follows the blocking streams' work) and maps it read-only; a
//! write makes its 64 KiB block dirty. A touch right after pages already on the guest
//! is taken for a sequential pass: a read fetches 8 MiB, a write dirties the rest of
//! its window. A prefetch to the device sends the range's dirty
//! pages at once; one to the CPU fetches the range after its stream's work.
//!
//! A region's pages are a memfd mapped twice: the program's view, protected as above,
//! and a writable view that every move reads or writes, so fetched bytes are all in
//! place before the program's view lets any thread see them. Moves go through the
//! [`Mover`] (the GPU's DMA to the writable view where the host maps it, else the
//! guest's usual copy paths), so the model is the same on every data path.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use vmcuda_wire::CudaStatus;

pub type Result<T> = std::result::Result<T, CudaStatus>;

/// The guest's page size; managed addresses are mapped page by page.
pub const PAGE: usize = 4096;
/// What a fault on a page only the device holds brings back at once.
const WINDOW: usize = 2 << 20;
/// What a write fault makes dirty at once; a write right after dirty pages makes the
/// rest of its window dirty.
const WRITE_BLOCK: usize = 64 << 10;
/// What a fault right after pages already on the guest fetches (a sequential reader).
const READ_AHEAD: usize = 4 * WINDOW;

/// Where a managed page's current contents are (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Device,
    Clean,
    Dirty,
}

impl State {
    fn protection(self) -> i32 {
        match self {
            State::Device => libc::PROT_NONE,
            State::Clean => libc::PROT_READ,
            State::Dirty => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A place for memory: a device, the CPU, or none (`cudaInvalidDeviceId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Invalid,
    Cpu,
    Device(i32),
}

impl Location {
    /// From a `cudaMemLocation` (`type`, `id`): host NUMA nodes are the CPU.
    pub fn from_mem_location(kind: u32, id: i32) -> Result<Location> {
        match kind {
            1 if id >= 0 => Ok(Location::Device(id)),
            2..=4 => Ok(Location::Cpu),
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    /// From a device ordinal where `cudaCpuDeviceId` (-1) means the CPU.
    pub fn from_device_id(id: i32) -> Result<Location> {
        match id {
            -1 => Ok(Location::Cpu),
            d if d >= 0 => Ok(Location::Device(d)),
            _ => Err(CudaStatus::ErrorInvalidDevice),
        }
    }

    /// As a device ordinal: `cudaCpuDeviceId` for the CPU, `cudaInvalidDeviceId` for none.
    pub fn device_id(self) -> i32 {
        match self {
            Location::Invalid => -2,
            Location::Cpu => -1,
            Location::Device(d) => d,
        }
    }

    /// As a `cudaMemLocation` (`type`, `id`).
    pub fn mem_location(self) -> (i32, i32) {
        match self {
            Location::Invalid => (0, 0),
            Location::Cpu => (2, 0),
            Location::Device(d) => (1, d),
        }
    }
}

/// What the program advised for a page, and where it last prefetched it.
#[derive(Clone, Copy, Debug)]
struct Page {
    state: State,
    read_mostly: bool,
    preferred: Location,
    last_prefetch: Location,
    /// Devices (bit = ordinal, up to 63) and the CPU (bit 63) set as accessing it.
    accessed_by: u64,
}

const CPU_BIT: u64 = 1 << 63;

/// How a region's bytes move between the guest's pages and the device's copy. The
/// guest side of every move is the region's second, always writable view of the same
/// pages (`via`), so the program's view keeps its protection meanwhile.
pub trait Mover: Sync {
    /// Copy `len` bytes of guest memory at `via` to device address `addr` on `device`.
    fn to_device(
        &self,
        device: i32,
        addr: usize,
        via: usize,
        len: usize,
        shared: bool,
    ) -> Result<()>;
    /// Copy `len` bytes at device address `addr` into guest memory at `via`.
    fn to_host(&self, device: i32, addr: usize, via: usize, len: usize, shared: bool)
        -> Result<()>;
    /// Offer the host the writable view (`fd` mapped at `via`): true if its copies
    /// to and from there are now the GPU's own (`shared` above).
    fn share(&self, _fd: &std::os::fd::OwnedFd, _via: usize, _len: usize) -> bool {
        false
    }
    /// Take back what `share` offered.
    fn unshare(&self, _via: usize, _len: usize) {}
}

/// What a region mirrors: an allocation the program made (freed with it), or a
/// module's `__managed__` variable (lives as long as the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The size and flags the program asked for.
    Allocation {
        size: usize,
        flags: u32,
    },
    Variable,
}

/// Guest pages mirroring one piece of device memory.
struct Region {
    len: usize,
    device: i32,
    /// Untouched since it was made: pages in `Device` state hold zeros on both sides,
    /// so a fault needs no copy. Cleared by the first device work.
    fresh: bool,
    origin: Origin,
    pages: Vec<Page>,
    mover: &'static dyn Mover,
    /// For variables, the bytes that are variables (`[start, start + len)` each): the
    /// rest of their pages is not the program's, and the host refuses it.
    pieces: Option<Vec<(usize, usize)>>,
    /// The same pages (a memfd) mapped a second time, always writable: where fetched
    /// bytes land while the program's view is still `PROT_NONE`, so no thread sees a
    /// half-copied page; and, shared with the host, what its DMA reads and writes.
    via: usize,
    /// Whether the host maps `via` (copies are the GPU's DMA, no byte on the socket).
    shared: bool,
    /// Pages not in `Device` state: a region with none has nothing to settle, and is
    /// not walked page by page before device work.
    host_pages: usize,
    _fd: std::os::fd::OwnedFd,
}

#[derive(Default)]
struct Regions {
    map: BTreeMap<usize, Region>,
    /// Pages not in `Device` state, all regions together.
    on_host: usize,
}

static REGIONS: Mutex<Regions> = Mutex::new(Regions {
    map: BTreeMap::new(),
    on_host: 0,
});

/// Set while some page is on the guest or some region is fresh: device work must
/// settle managed memory first. The fast path of every call reads only this.
static PENDING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread moves managed pages: its own copies must not settle
    /// managed memory again, and a fault on managed memory is then a bug, not a touch.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

fn regions() -> MutexGuard<'static, Regions> {
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` with this thread marked busy moving managed pages.
fn busy<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(self.0));
        }
    }
    let _reset = Reset(BUSY.with(|b| b.replace(true)));
    f()
}

impl Region {
    /// What of `[addr, addr + len)` may move: all of it, or a variable's bytes.
    fn spans(&self, addr: usize, len: usize) -> Vec<(usize, usize)> {
        match &self.pieces {
            None => vec![(addr, len)],
            Some(pieces) => pieces
                .iter()
                .filter_map(|(s, n)| {
                    let lo = (*s).max(addr);
                    let hi = (s + n).min(addr + len);
                    (lo < hi).then_some((lo, hi - lo))
                })
                .collect(),
        }
    }

    fn set(&mut self, range: std::ops::Range<usize>, state: State, on_host: &mut usize) {
        for p in &mut self.pages[range] {
            match (p.state == State::Device, state == State::Device) {
                (true, false) => {
                    *on_host += 1;
                    self.host_pages += 1;
                }
                (false, true) => {
                    *on_host -= 1;
                    self.host_pages -= 1;
                }
                _ => {}
            }
            p.state = state;
        }
    }

    /// Send the dirty pages of `range` to the device and leave every page of it in
    /// `Device` state.
    fn settle(
        &mut self,
        start: usize,
        range: std::ops::Range<usize>,
        on_host: &mut usize,
    ) -> Result<()> {
        for run in runs(&self.pages, range.clone(), |p| p.state == State::Dirty) {
            let (addr, len) = (start + run.start * PAGE, run.len() * PAGE);
            // Read-only first: a write during the copy faults and waits for it.
            protect(addr, len, libc::PROT_READ)?;
            // A fresh region's pages never touched are zeros on both sides.
            let touched = if self.fresh {
                resident(addr, len)
            } else {
                vec![(addr, len)]
            };
            let sent = touched
                .into_iter()
                .flat_map(|(a, n)| self.spans(a, n))
                .try_for_each(|(at, n)| {
                    let via = self.via + (at - start);
                    self.mover.to_device(self.device, at, via, n, self.shared)
                });
            if let Err(e) = sent {
                let _ = protect(addr, len, State::Dirty.protection());
                return Err(e);
            }
            self.set(run, State::Clean, on_host);
        }
        for run in runs(&self.pages, range, |p| p.state != State::Device) {
            protect(start + run.start * PAGE, run.len() * PAGE, libc::PROT_NONE)?;
            self.set(run, State::Device, on_host);
        }
        Ok(())
    }

    /// Bring the pages of `range` to at least `state` (`Clean` or `Dirty`) on the
    /// guest: `Device` pages are fetched (or, fresh, only unprotected), clean ones
    /// made writable for `Dirty`.
    fn bring(
        &mut self,
        start: usize,
        range: std::ops::Range<usize>,
        state: State,
        on_host: &mut usize,
    ) -> Result<()> {
        for run in runs(&self.pages, range.clone(), |p| p.state == State::Device) {
            let (addr, len) = (start + run.start * PAGE, run.len() * PAGE);
            if !self.fresh {
                // Into the writable view while the program's still faults: the bytes
                // are all there before any thread can read them.
                for (at, n) in self.spans(addr, len) {
                    let via = self.via + (at - start);
                    self.mover.to_host(self.device, at, via, n, self.shared)?;
                }
            }
            protect(addr, len, state.protection())?;
            self.set(run, state, on_host);
        }
        if state == State::Dirty {
            for run in runs(&self.pages, range, |p| p.state == State::Clean) {
                protect(
                    start + run.start * PAGE,
                    run.len() * PAGE,
                    state.protection(),
                )?;
                self.set(run, State::Dirty, on_host);
            }
        }
        Ok(())
    }

    /// Page indexes of `[addr, addr + len)` (already clipped to this region, which
    /// starts at `start`).
    fn pages_of(&self, start: usize, addr: usize, len: usize) -> std::ops::Range<usize> {
        let first = (page_floor(addr).max(start) - start) / PAGE;
        let end = ((page_ceil(addr.saturating_add(len)) - start) / PAGE).min(self.pages.len());
        first..end
    }
}

impl Regions {
    /// The region containing `addr`, with its start.
    fn find(&mut self, addr: usize) -> Option<(usize, &mut Region)> {
        let (start, r) = self.map.range_mut(..=addr).next_back()?;
        (addr < start + r.len).then_some((*start, r))
    }

    fn update_pending(&self) {
        let pending = self.on_host > 0 || self.map.values().any(|r| r.fresh);
        if pending {
            crate::client::set_before_send(before_op);
        }
        PENDING.store(pending, Ordering::Release);
    }

    /// Everything back to the device (see the module documentation).
    fn settle_all(&mut self) -> Result<()> {
        let mut on_host = self.on_host;
        let mut result = Ok(());
        for (start, r) in self.map.iter_mut() {
            if result.is_ok() && r.host_pages > 0 {
                let n = r.pages.len();
                result = r.settle(*start, 0..n, &mut on_host);
            }
            // The work that follows may write any page.
            r.fresh = false;
        }
        self.on_host = on_host;
        self.update_pending();
        result
    }

    fn fault(&mut self, addr: usize, write: bool) -> Option<Result<()>> {
        let mut on_host = self.on_host;
        let (start, r) = self.find(addr)?;
        let index = (addr - start) / PAGE;
        let end = start + r.len;
        let window = move |size: usize| {
            let lo = (addr & !(size - 1)).max(start);
            let hi = ((addr & !(size - 1)) + size).min(end);
            (lo, hi - lo)
        };
        // The state of the page just before `at`, if it is in this region: a touch
        // right after pages already on the guest is taken for a sequential pass.
        let before =
            |r: &Region, at: usize| (at > start).then(|| r.pages[(at - start) / PAGE - 1].state);
        let result = (|| {
            let state = r.pages[index].state;
            if state == State::Device {
                let (lo, mut len) = window(WINDOW);
                if before(r, lo).is_some_and(|s| s != State::Device) {
                    // A sequential reader: several windows at once.
                    len = (READ_AHEAD).min(end - lo);
                }
                let range = r.pages_of(start, lo, len);
                r.bring(start, range, State::Clean, &mut on_host)?;
            }
            if write {
                let (lo, mut len) = window(WRITE_BLOCK);
                if before(r, lo) == Some(State::Dirty) {
                    // A sequential writer: the rest of its window.
                    let (wlo, wlen) = window(WINDOW);
                    len = wlo + wlen - lo;
                }
                let range = r.pages_of(start, lo, len);
                r.bring(start, range, State::Dirty, &mut on_host)?;
            } else if state != State::Device {
                // Already readable by its state: the mapping disagrees, so say again
                // what it should be rather than fault forever.
                let page = start + index * PAGE;
                protect(page, PAGE, state.protection())?;
            }
            Ok(())
        })();
        self.on_host = on_host;
        self.update_pending();
        Some(result)
    }
}

// --- what the API uses ---------------------------------------------------------------

/// Start mirroring device memory at `[addr, addr + len)` (page-aligned, inside
/// addresses this process reserved for device memory): pages mapped `PROT_NONE`, in
/// `Device` state; `fresh` if the device's copy is known to be zeros.
pub fn add_region(
    addr: usize,
    len: usize,
    device: i32,
    fresh: bool,
    origin: Origin,
    mover: &'static dyn Mover,
) -> Result<()> {
    insert_region(addr, len, device, fresh, origin, mover, None)
}

fn insert_region(
    addr: usize,
    len: usize,
    device: i32,
    fresh: bool,
    origin: Origin,
    mover: &'static dyn Mover,
    pieces: Option<Vec<(usize, usize)>>,
) -> Result<()> {
    debug_assert!(addr.is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && len > 0);
    install_fault_handler();
    if PREVIOUS.get().is_none() {
        return Err(CudaStatus::ErrorNotSupported);
    }
    // A fresh allocation starts writable on the guest: the program's first writes (or
    // a `read(2)` into it, which takes no fault) need nothing, and what it touched
    // goes to the device at the first device work (see `resident`).
    let state = if fresh { State::Dirty } else { State::Device };
    let fd = crate::pages::memfd(len)?;
    map_shared(&fd, Some(addr), len, state.protection())?;
    let via = match map_shared(&fd, None, len, libc::PROT_READ | libc::PROT_WRITE) {
        Ok(via) => via,
        Err(e) => {
            let _ = map_fixed(addr, len, libc::PROT_NONE, true);
            return Err(e);
        }
    };
    let shared = mover.share(&fd, via, len);
    let page = Page {
        state,
        read_mostly: false,
        preferred: Location::Invalid,
        last_prefetch: Location::Invalid,
        accessed_by: 0,
    };
    note_regions();
    let mut all = regions();
    if fresh {
        all.on_host += len / PAGE;
    }
    all.map.insert(
        addr,
        Region {
            len,
            device,
            fresh,
            origin,
            pages: vec![page; len / PAGE],
            mover,
            pieces,
            via,
            shared,
            host_pages: if fresh { len / PAGE } else { 0 },
            _fd: fd,
        },
    );
    all.update_pending();
    Ok(())
}

/// Mirror a module's `__managed__` variable at `[addr, addr + size)`: its pages that
/// no region mirrors yet (variables share pages) become regions of their own. The
/// pages must lie in addresses this process reserved for device memory.
pub fn add_variable(
    addr: usize,
    size: usize,
    device: i32,
    mover: &'static dyn Mover,
) -> Result<()> {
    let (lo, hi) = (page_floor(addr), page_ceil(addr + size.max(1)));
    let piece = (addr, size.max(1));
    let mut free_runs = Vec::new();
    {
        let mut all = regions();
        let mut page = lo;
        while page < hi {
            match all.find(page) {
                Some((s, r)) => {
                    // A page shared with another variable: this one's bytes move too.
                    let pieces = r.pieces.get_or_insert_with(Vec::new);
                    if !pieces.contains(&piece) {
                        pieces.push(piece);
                    }
                    page = (s + r.len).min(hi).max(page + PAGE);
                }
                None => {
                    let start = page;
                    while page < hi && all.find(page).is_none() {
                        page += PAGE;
                    }
                    free_runs.push((start, page - start));
                }
            }
        }
    }
    for (start, len) in free_runs {
        insert_region(
            start,
            len,
            device,
            false,
            Origin::Variable,
            mover,
            Some(vec![piece]),
        )?;
    }
    Ok(())
}

/// Stop mirroring the allocation at `ptr`: its pages go back to being reserved
/// addresses. Returns its origin, or None if no region starts there.
pub fn remove_region(ptr: usize) -> Option<Origin> {
    let mut all = regions();
    let region = all.map.remove(&ptr)?;
    all.on_host -= region.host_pages;
    all.update_pending();
    if region.shared {
        region.mover.unshare(region.via, region.len);
    }
    // SAFETY: the region's writable view, which nothing uses any more.
    unsafe { libc::munmap(region.via as *mut c_void, region.len) };
    // Back to an unbacked reservation, as `device_addresses::reserve` left it.
    let _ = map_fixed(ptr, region.len, libc::PROT_NONE, true);
    drop(all);
    // Its buffer id goes with it: an allocation made again here gets a new one.
    crate::state::registry().forget_buffer_id(ptr as u64);
    Some(region.origin)
}

/// The managed allocation or variable pages containing `ptr`: (region start, length,
/// device, origin).
pub fn region_of(ptr: usize) -> Option<(usize, usize, i32, Origin)> {
    let mut all = regions();
    all.find(ptr).map(|(s, r)| (s, r.len, r.device, r.origin))
}

/// Whether `ptr` is managed memory.
pub fn is_managed(ptr: usize) -> bool {
    PENDING_REGIONS.load(Ordering::Acquire) && region_of(ptr).is_some()
}

/// Whether any region exists, so that pointer checks cost nothing without managed
/// memory.
static PENDING_REGIONS: AtomicBool = AtomicBool::new(false);

/// Note that regions exist (set at the first allocation; never cleared).
fn note_regions() {
    PENDING_REGIONS.store(true, Ordering::Release);
}

/// Ops that may read or write device memory: before any of them, managed memory is
/// settled on the device.
fn reaches_memory(op: vmcuda_wire::op::Op) -> bool {
    use vmcuda_wire::op::Op::*;
    matches!(
        op,
        MemcpyHtoD
            | MemcpyDtoH
            | MemcpyDtoD
            | Memcpy2DHtoD
            | Memcpy2DDtoH
            | Memcpy2DDtoD
            | Memset
            | Memset2D
            | MemcpyPeer
            | MemcpyShared
            | MemsetElements
            | PeerSend
            | PeerReceive
            | LaunchKernel
            | StreamWriteValue32
            | StreamWriteValue64
            | StreamWaitValue
            | GraphLaunch
    )
}

/// Called before every request: settles managed memory before work that may reach it.
pub fn before_op(op: vmcuda_wire::op::Op) -> Result<()> {
    // This crate's unit tests run other tests' requests in the same process as the
    // page model's, whose fake regions they must not move (tests/tests/managed.rs
    // covers this path end to end).
    if cfg!(test) {
        return Ok(());
    }
    if !PENDING.load(Ordering::Acquire) || !reaches_memory(op) || BUSY.with(|b| b.get()) {
        return Ok(());
    }
    // While a stream captures, its work is recorded, not run (the graph's launch
    // settles); and the synchronous copies that settling makes would break a capture
    // in global mode. Other streams' work meanwhile finds the pages as they were.
    if crate::capture::any() {
        return Ok(());
    }
    settle_all()
}

/// Every managed page back to the device (see the module documentation).
pub fn settle_all() -> Result<()> {
    busy(|| regions().settle_all())
}

/// `[ptr, ptr + len)` must lie in managed memory; the regions it spans, with the
/// part of the range in each.
fn spans(all: &mut Regions, ptr: usize, len: usize) -> Result<Vec<(usize, usize, usize)>> {
    if len == 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let end = ptr.checked_add(len).ok_or(CudaStatus::ErrorInvalidValue)?;
    let mut out = Vec::new();
    let mut at = ptr;
    while at < end {
        let (start, r) = all.find(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        let stop = (start + r.len).min(end);
        out.push((start, at, stop - at));
        at = stop;
    }
    Ok(out)
}

/// Prefetch `[ptr, ptr + len)` to `location`: to a device, its dirty pages go now;
/// to the CPU, its pages come back (the caller has waited for the stream's work).
pub fn prefetch(ptr: usize, len: usize, location: Location) -> Result<()> {
    busy(|| {
        let mut all = regions();
        let mut on_host = all.on_host;
        let mut result = Ok(());
        for (start, at, n) in spans(&mut all, ptr, len)? {
            let r = all.map.get_mut(&start).expect("span of a region");
            let range = r.pages_of(start, at, n);
            for p in &mut r.pages[range.clone()] {
                p.last_prefetch = location;
            }
            result = match location {
                Location::Cpu => r.bring(start, range, State::Clean, &mut on_host),
                _ => r.settle(start, range, &mut on_host),
            };
            if result.is_err() {
                break;
            }
        }
        all.on_host = on_host;
        all.update_pending();
        result
    })
}

/// Drop the guest's copy of `[ptr, ptr + len)` without sending it: its contents may
/// be anything afterwards (`cudaMemDiscardBatchAsync`).
pub fn discard(ptr: usize, len: usize) -> Result<()> {
    let mut all = regions();
    let mut on_host = all.on_host;
    for (start, at, n) in spans(&mut all, ptr, len)? {
        let r = all.map.get_mut(&start).expect("span of a region");
        let range = r.pages_of(start, at, n);
        for run in runs(&r.pages, range, |p| p.state != State::Device) {
            protect(start + run.start * PAGE, run.len() * PAGE, libc::PROT_NONE)?;
            r.set(run, State::Device, &mut on_host);
        }
    }
    all.on_host = on_host;
    all.update_pending();
    Ok(())
}

mod advice;
mod fault;
mod pages;
pub use advice::*;
pub use fault::FAULTS;
use fault::{install_fault_handler, PREVIOUS};
use pages::*;

#[cfg(test)]
mod tests;
