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

fn page_floor(addr: usize) -> usize {
    addr & !(PAGE - 1)
}

fn page_ceil(addr: usize) -> usize {
    addr.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// Change the protection of guest pages this module mapped.
fn protect(addr: usize, len: usize, prot: i32) -> Result<()> {
    // SAFETY: `[addr, addr + len)` lies in a region this module mapped; changing its
    // protection touches no other memory.
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } != 0 {
        eprintln!(
            "vmcuda: managed memory: mprotect at {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorUnknown);
    }
    Ok(())
}

/// Map fresh anonymous pages at `[addr, addr + len)`, replacing what is there: the
/// addresses are this process's reservation for device memory (see
/// [`crate::shared::reserve`]) or a region of this module.
fn map_fixed(addr: usize, len: usize, prot: i32, reserve_only: bool) -> Result<()> {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | libc::MAP_FIXED
        | if reserve_only { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: MAP_FIXED replaces only `[addr, addr + len)`, which the caller holds
    // (reserved device addresses, or its own region's pages).
    let p = unsafe { libc::mmap(addr as *mut c_void, len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED || p as usize != addr {
        eprintln!(
            "vmcuda: managed memory: cannot map {len} bytes at {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok(())
}

/// The runs of `[addr, addr + len)` whose pages are resident: in an anonymous mapping,
/// the others were never touched and read as zeros. Unknown (mincore failed): all.
fn resident(addr: usize, len: usize) -> Vec<(usize, usize)> {
    let mut present = vec![0u8; len / PAGE];
    // SAFETY: `present` has one byte per page of `[addr, addr + len)`, a mapping of
    // this module.
    if unsafe { libc::mincore(addr as *mut c_void, len, present.as_mut_ptr()) } != 0 {
        return vec![(addr, len)];
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, p) in present.iter().enumerate() {
        if p & 1 == 0 {
            continue;
        }
        let at = addr + i * PAGE;
        match out.last_mut() {
            Some((s, n)) if *s + *n == at => *n += PAGE,
            _ => out.push((at, PAGE)),
        }
    }
    out
}

/// Map `len` bytes of `fd` at `at` (replacing what is there: a region's reserved
/// addresses) or where the kernel chooses; the address.
fn map_shared(
    fd: &std::os::fd::OwnedFd,
    at: Option<usize>,
    len: usize,
    prot: i32,
) -> Result<usize> {
    use std::os::fd::AsRawFd;
    let flags = libc::MAP_SHARED | if at.is_some() { libc::MAP_FIXED } else { 0 };
    let want = at.unwrap_or(0);
    // SAFETY: maps our own memfd; with MAP_FIXED only `[at, at + len)`, addresses the
    // caller holds (reserved for device memory), are replaced.
    let p = unsafe { libc::mmap(want as *mut c_void, len, prot, flags, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED || (at.is_some() && p as usize != want) {
        eprintln!(
            "vmcuda: managed memory: cannot map {len} bytes: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok(p as usize)
}

/// Runs of consecutive pages of `pages[range]` for which `pick` holds, as page index
/// ranges.
fn runs(
    pages: &[Page],
    range: std::ops::Range<usize>,
    pick: impl Fn(&Page) -> bool,
) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for i in range.clone() {
        match (pick(&pages[i]), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(s..range.end);
    }
    out
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

// --- the fault handler -------------------------------------------------------------

/// The SIGSEGV action that was installed before ours, for faults not on managed pages.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Once = Once::new();

fn install_fault_handler() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill; `on_fault` has the
        // SA_SIGINFO signature, and the previous action is kept to chain to.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, &action, &mut previous) != 0 {
                eprintln!("vmcuda: managed memory: no SIGSEGV handler; the CPU cannot touch managed memory");
                return;
            }
            let _ = PREVIOUS.set(previous);
        }
    });
}

/// Whether a fault was a write, where the machine says so (x86-64's page-fault error
/// code); elsewhere every fault is taken as a write, which is only slower.
///
/// # Safety
/// `context` is the `ucontext_t` the kernel passed to a SA_SIGINFO handler.
unsafe fn write_fault(context: *mut c_void) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let uc = context.cast::<libc::ucontext_t>();
        // SAFETY: as the caller promised, `uc` is the handler's context.
        let err = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] };
        err & 2 != 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = context;
        true
    }
}

extern "C" fn on_fault(signal: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: `context` is this handler's context.
    let write = unsafe { write_fault(context) };
    let handled = std::panic::catch_unwind(|| handle_fault(addr, write)).unwrap_or(false);
    if !handled {
        chain(signal, info, context);
    }
}

/// Faults resolved, since the process started.
pub static FAULTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Resolve a fault on managed memory; false if it was not on managed memory, or the
/// pages could not be brought back (the program then gets the fault it would have).
fn handle_fault(addr: usize, write: bool) -> bool {
    FAULTS.fetch_add(1, Ordering::Relaxed);
    if BUSY.with(|b| b.get()) {
        // This thread was moving managed pages itself: a bug, reported as the fault.
        return false;
    }
    busy(|| match regions().fault(addr, write) {
        None => false,
        Some(Ok(())) => true,
        Some(Err(e)) => {
            eprintln!("vmcuda: managed memory at {addr:#x} could not be brought back from the device ({e}); the access faults");
            false
        }
    })
}

/// Hand a fault that is not ours to the action installed before: its handler, or the
/// default (the fault repeats once the handler returns, and kills the process).
fn chain(signal: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = PREVIOUS.get().copied();
    match previous {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action's handler, with the SA_SIGINFO signature
                // its flags declare.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(signal, info, context);
            } else {
                // SAFETY: the previous action's plain handler.
                let f: extern "C" fn(i32) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(signal);
            }
        }
        _ => {
            // SAFETY: a zeroed sigaction with SIG_DFL restores the default action.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
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
    let fd = crate::shared::memfd(len)?;
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
    // Back to an unbacked reservation, as `shared::reserve` left it.
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

/// `cudaMemoryAdvise` values.
pub const ADVISE_SET_READ_MOSTLY: u32 = 1;
pub const ADVISE_UNSET_READ_MOSTLY: u32 = 2;
pub const ADVISE_SET_PREFERRED_LOCATION: u32 = 3;
pub const ADVISE_UNSET_PREFERRED_LOCATION: u32 = 4;
pub const ADVISE_SET_ACCESSED_BY: u32 = 5;
pub const ADVISE_UNSET_ACCESSED_BY: u32 = 6;

/// Record advice for `[ptr, ptr + len)`. It changes no behaviour here (every page
/// moves as the model says), but `cudaMemRangeGetAttribute` answers it back.
pub fn advise(ptr: usize, len: usize, advice: u32, location: Location) -> Result<()> {
    let bit = match location {
        Location::Cpu => CPU_BIT,
        Location::Device(d) if (0..63).contains(&d) => 1u64 << d,
        _ => 0,
    };
    let needs_location = matches!(
        advice,
        ADVISE_SET_PREFERRED_LOCATION | ADVISE_SET_ACCESSED_BY | ADVISE_UNSET_ACCESSED_BY
    );
    if needs_location && location == Location::Invalid {
        return Err(CudaStatus::ErrorInvalidDevice);
    }
    let apply: Box<dyn Fn(&mut Page)> = match advice {
        ADVISE_SET_READ_MOSTLY => Box::new(|p| p.read_mostly = true),
        ADVISE_UNSET_READ_MOSTLY => Box::new(|p| p.read_mostly = false),
        ADVISE_SET_PREFERRED_LOCATION => Box::new(move |p| p.preferred = location),
        ADVISE_UNSET_PREFERRED_LOCATION => Box::new(|p| p.preferred = Location::Invalid),
        ADVISE_SET_ACCESSED_BY => Box::new(move |p| p.accessed_by |= bit),
        ADVISE_UNSET_ACCESSED_BY => Box::new(move |p| p.accessed_by &= !bit),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    };
    let mut all = regions();
    for (start, at, n) in spans(&mut all, ptr, len)? {
        let r = all.map.get_mut(&start).expect("span of a region");
        let range = r.pages_of(start, at, n);
        r.pages[range].iter_mut().for_each(&apply);
    }
    Ok(())
}

/// `cudaMemRangeAttribute` values.
pub const RANGE_READ_MOSTLY: u32 = 1;
pub const RANGE_PREFERRED_LOCATION: u32 = 2;
pub const RANGE_ACCESSED_BY: u32 = 3;
pub const RANGE_LAST_PREFETCH_LOCATION: u32 = 4;
pub const RANGE_PREFERRED_LOCATION_TYPE: u32 = 5;
pub const RANGE_PREFERRED_LOCATION_ID: u32 = 6;
pub const RANGE_LAST_PREFETCH_LOCATION_TYPE: u32 = 7;
pub const RANGE_LAST_PREFETCH_LOCATION_ID: u32 = 8;

/// One range attribute of `[ptr, ptr + len)` as the 32-bit values CUDA writes:
/// `slots` values for `RANGE_ACCESSED_BY` (unused ones `cudaInvalidDeviceId`), one for
/// the others. A location that differs across the range is none.
pub fn range_attribute(ptr: usize, len: usize, attribute: u32, slots: usize) -> Result<Vec<i32>> {
    let mut all = regions();
    let mut pages = Vec::new();
    for (start, at, n) in spans(&mut all, ptr, len)? {
        let r = &all.map[&start];
        pages.extend_from_slice(&r.pages[r.pages_of(start, at, n)]);
    }
    let uniform = |f: fn(&Page) -> Location| {
        let first = f(&pages[0]);
        if pages.iter().all(|p| f(p) == first) {
            first
        } else {
            Location::Invalid
        }
    };
    Ok(match attribute {
        RANGE_READ_MOSTLY => vec![i32::from(pages.iter().all(|p| p.read_mostly))],
        RANGE_PREFERRED_LOCATION => vec![uniform(|p| p.preferred).device_id()],
        RANGE_LAST_PREFETCH_LOCATION => vec![uniform(|p| p.last_prefetch).device_id()],
        RANGE_PREFERRED_LOCATION_TYPE => vec![uniform(|p| p.preferred).mem_location().0],
        RANGE_PREFERRED_LOCATION_ID => vec![uniform(|p| p.preferred).mem_location().1],
        RANGE_LAST_PREFETCH_LOCATION_TYPE => vec![uniform(|p| p.last_prefetch).mem_location().0],
        RANGE_LAST_PREFETCH_LOCATION_ID => vec![uniform(|p| p.last_prefetch).mem_location().1],
        RANGE_ACCESSED_BY => {
            let common = pages.iter().fold(u64::MAX, |m, p| m & p.accessed_by);
            let mut out: Vec<i32> = (0..63).filter(|d| common & (1 << d) != 0).collect();
            if common & CPU_BIT != 0 {
                out.push(-1);
            }
            out.resize(slots.max(out.len()), -2);
            out.truncate(slots);
            out
        }
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// The guest's devices as this model provides them: managed memory, but no
/// concurrent access and no pageable memory access from the device.
pub fn guest_view(props: &mut vmcuda_wire::device::DeviceProperties) {
    const MANAGED_MEMORY: u32 = 83;
    const PAGEABLE_MEMORY_ACCESS: u32 = 88;
    const CONCURRENT_MANAGED_ACCESS: u32 = 89;
    const PAGEABLE_USES_HOST_PAGE_TABLES: u32 = 100;
    const DIRECT_MANAGED_FROM_HOST: u32 = 101;
    for (attr, value) in &mut props.attributes {
        *value = match *attr {
            MANAGED_MEMORY => 1,
            PAGEABLE_MEMORY_ACCESS
            | CONCURRENT_MANAGED_ACCESS
            | PAGEABLE_USES_HOST_PAGE_TABLES
            | DIRECT_MANAGED_FROM_HOST => 0,
            _ => *value,
        };
    }
}

#[cfg(test)]
mod tests;
