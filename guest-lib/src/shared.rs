//! Host memory shared with the backend (same-host guests on a Unix socket).
//!
//! Pinned memory is placed in memfds: the descriptor goes to the worker with the
//! request, the worker maps it at the same address and registers it with the GPU, so
//! the device pointer equals the host pointer as under native UVA, and kernels read
//! and write the guest's own pages (zero-copy mapped memory). `cudaHostRegister` moves
//! the program's existing pages onto a memfd in place, contents preserved. Where
//! descriptors cannot travel (TCP) or the worker cannot map the address, pinned memory
//! stays private to the guest and copies go over the socket, as before.

use std::io::Write;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use vmcuda_wire::op::{HostRegisterShared, HostUnregisterShared};
use vmcuda_wire::CudaStatus;

use crate::{client, state};

pub const PAGE: usize = 4096;

/// A shared region: page-aligned start and length, and its device pointer.
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    pub start: usize,
    pub len: usize,
    pub device_ptr: u64,
}

pub(crate) fn enabled() -> bool {
    std::env::var("VMCUDA_SHARED_MEMORY").map_or(true, |v| v != "0")
}

/// A memfd of `len` bytes that can never shrink: the host maps it, and pages cut off
/// under its mapping would fault in the host's worker (the host refuses unsealed ones).
pub(crate) fn memfd(len: usize) -> Result<OwnedFd, CudaStatus> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::MFdFlags;
    let fd = nix::sys::memfd::memfd_create(
        c"vmcuda-pinned",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
    nix::unistd::ftruncate(&fd, len as i64).map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))
        .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
    Ok(fd)
}

/// Hand the region to the host; its device pointer on success.
fn register(fd: &OwnedFd, start: usize, len: usize, flags: u32) -> Result<u64, CudaStatus> {
    let c = client::client()?;
    let req = HostRegisterShared {
        addr: start as u64,
        size: len as u64,
        flags,
    };
    Ok(c.call_with_fd(state::current_device(), &req, fd.as_fd())?
        .device_ptr)
}

/// Whether this connection can share memory with its host at all (a same-host memfd,
/// or guest RAM in a VM guest; [`alloc_any`]).
pub fn available() -> bool {
    enabled()
        && (client::client().is_ok_and(|c| c.can_pass_fds())
            || crate::guest_pages::pinned::possible())
}

/// New shared pinned memory of at least `size` bytes, or `None` where sharing is not
/// possible (the caller then uses private memory).
pub fn alloc(size: usize, flags: u32) -> Option<(usize, Shared)> {
    if !enabled() || !client::client().is_ok_and(|c| c.can_pass_fds()) {
        return None;
    }
    let len = size.div_ceil(PAGE) * PAGE;
    if let Some(region) = kept::take(len, flags, state::current_device()) {
        return Some((region.start, region));
    }
    match alloc_new(len, flags) {
        // The host's pinned memory may be full of what this process keeps for reuse:
        // that goes back, and the allocation is tried again.
        None if kept::release_all() > 0 => alloc_new(len, flags),
        made => made,
    }
}

/// A new memfd of `len` bytes (whole pages), mapped here and registered with the host.
fn alloc_new(len: usize, flags: u32) -> Option<(usize, Shared)> {
    let fd = memfd(len).ok()?;
    let length = NonZeroUsize::new(len)?;
    // SAFETY: a fresh shared mapping of our own memfd at an address the kernel picks.
    let addr = unsafe {
        mmap(
            None,
            length,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            &fd,
            0,
        )
    }
    .ok()?;
    let start = addr.as_ptr() as usize;
    match register(&fd, start, len, flags) {
        Ok(device_ptr) => Some((
            start,
            Shared {
                start,
                len,
                device_ptr,
            },
        )),
        Err(e) => {
            note_fallback(e);
            // SAFETY: unmapping the mapping made just above, which nobody else uses.
            let _ = unsafe { munmap(addr, len) };
            None
        }
    }
}

/// Pinned memory shared with the host however this connection can: a same-host memfd
/// ([`alloc`]), or in a VM guest, guest RAM the worker maps
/// ([`crate::guest_pages::pinned`]). `None`: private memory it must be.
pub fn alloc_any(size: usize, flags: u32) -> Option<(usize, Shared)> {
    alloc(size, flags)
        .or_else(|| crate::guest_pages::pinned::alloc(size).map(|region| (region.start, region)))
}

/// Hand the host a mapping of `fd` the caller made at `[start, start + len)`, so its
/// copies to and from there are the GPU's DMA; `None` where that is not possible.
pub fn share_mapping(fd: &OwnedFd, start: usize, len: usize) -> Option<Shared> {
    if !enabled() || !client::client().is_ok_and(|c| c.can_pass_fds()) {
        return None;
    }
    match register(fd, start, len, 0) {
        Ok(device_ptr) => Some(Shared {
            start,
            len,
            device_ptr,
        }),
        Err(e) => {
            note_fallback(e);
            None
        }
    }
}

/// Release shared pinned memory made by [`alloc_any`] with `flags` on `device`.
pub fn free(region: Shared, flags: u32, device: i32) {
    // A piece of guest RAM goes back to the process's pool, still mapped by the host.
    if crate::guest_pages::pinned::free(region.start) {
        return;
    }
    if kept::keep(region, flags, device) {
        return;
    }
    release_region(region);
}

/// Unregister and unmap a region of [`alloc`]'s.
fn release_region(region: Shared) {
    unregister(region);
    if let Some(addr) = NonNull::new(region.start as *mut libc::c_void) {
        // SAFETY: the region was mapped by `alloc` and the program has freed it.
        let _ = unsafe { munmap(addr, region.len) };
    }
}

pub fn unregister(region: Shared) {
    if let Ok(c) = client::client() {
        let _ = c.call(
            state::current_device(),
            &HostUnregisterShared {
                addr: region.start as u64,
            },
            &[],
            client::Sink::None,
        );
    }
}

/// Freed memfd regions kept for the next allocation of the same length, flags and
/// device. Frameworks free and allocate the same small pinned buffers every step
/// (XLA's host transfers), and natively that is cheap; here each new region costs a
/// memfd, a mapping and a waited request that has the host map and register it (about
/// 100 us), and each free another request. Bounded: regions up to [`KEPT_REGION_MAX`],
/// [`KEPT_MAX`] bytes in all; all go back on a device reset and whenever the host
/// refuses a new region (its pinned-memory quota may need what is kept).
pub(crate) mod kept {
    use std::sync::Mutex;

    use super::Shared;

    pub(crate) const KEPT_MAX: usize = 64 << 20;
    pub(crate) const KEPT_REGION_MAX: usize = 16 << 20;

    struct Kept {
        flags: u32,
        device: i32,
        region: Shared,
    }

    static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

    /// `VMCUDA_KEEP_PINNED=0` frees every region at once, as before.
    fn wanted() -> bool {
        static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *WANTED.get_or_init(|| std::env::var("VMCUDA_KEEP_PINNED").map_or(true, |v| v != "0"))
    }

    fn kept() -> std::sync::MutexGuard<'static, Vec<Kept>> {
        KEPT.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A kept region of exactly `len` bytes made with `flags` on `device`.
    pub(crate) fn take(len: usize, flags: u32, device: i32) -> Option<Shared> {
        let mut k = kept();
        let at = k
            .iter()
            .rposition(|r| r.region.len == len && r.flags == flags && r.device == device)?;
        Some(k.swap_remove(at).region)
    }

    /// Keep `region` for reuse, if it fits the bounds; whether it was kept.
    pub(crate) fn keep(region: Shared, flags: u32, device: i32) -> bool {
        if region.len > KEPT_REGION_MAX || !super::enabled() || !wanted() {
            return false;
        }
        let mut k = kept();
        let held: usize = k.iter().map(|r| r.region.len).sum();
        if held + region.len > KEPT_MAX {
            return false;
        }
        k.push(Kept {
            flags,
            device,
            region,
        });
        true
    }

    /// Release every kept region (unregistered and unmapped): how many there were.
    pub(crate) fn release_all() -> usize {
        let all = std::mem::take(&mut *kept());
        let n = all.len();
        for r in all {
            super::release_region(r.region);
        }
        n
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// `len` bytes of fresh anonymous pages, as a region (release unmaps them).
        fn region(len: usize) -> Shared {
            // SAFETY: a new private mapping at an address the kernel picks.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            Shared {
                start: p as usize,
                len,
                device_ptr: p as u64,
            }
        }

        /// A freed region comes back for the same length, flags and device only; the
        /// kept bytes stay within their bounds; a release empties the keep.
        #[test]
        fn freed_regions_come_back_for_the_same_request_within_bounds() {
            release_all();
            let page = region(4096);
            assert!(keep(page, 0, 0));
            assert!(take(4096, 1, 0).is_none(), "other flags");
            assert!(take(4096, 0, 1).is_none(), "another device");
            assert!(take(8192, 0, 0).is_none(), "another length");
            assert_eq!(take(4096, 0, 0).map(|r| r.start), Some(page.start));
            assert!(take(4096, 0, 0).is_none(), "taken once");

            let large = region(KEPT_REGION_MAX + 4096);
            assert!(!keep(large, 0, 0), "too large to keep");
            super::super::release_region(large);
            let mut held = 0;
            while held + KEPT_REGION_MAX <= KEPT_MAX {
                assert!(keep(region(KEPT_REGION_MAX), 0, 0));
                held += KEPT_REGION_MAX;
            }
            assert!(!keep(page, 0, 0), "over the total");
            assert_eq!(release_all(), KEPT_MAX / KEPT_REGION_MAX);
            assert_eq!(release_all(), 0);
            assert!(keep(page, 0, 0));
            assert_eq!(release_all(), 1);
        }
    }
}

/// Move the pages holding `[ptr, ptr + size)` onto a shared memfd, in place and with
/// their contents, and hand them to the host. `None` where that is not possible.
///
/// # Safety
/// `[ptr, ptr + size)` is mapped memory of the program's (`cudaHostRegister`'s
/// contract), which no other shared region has moved onto its memfd.
pub unsafe fn share_existing(ptr: usize, size: usize, flags: u32) -> Option<Shared> {
    if !enabled() || !client::client().is_ok_and(|c| c.can_pass_fds()) {
        return None;
    }
    let start = ptr / PAGE * PAGE;
    let len = (ptr + size).div_ceil(PAGE) * PAGE - start;
    let fd = memfd(len).ok()?;
    // SAFETY: `[ptr, ptr + size)` is the program's mapped memory (the caller's promise);
    // the whole pages around it are mapped (mappings are page-granular), readable and
    // writable (CUDA registers writable memory).
    unsafe { move_onto(&fd, start, len) }.ok()?;
    match register(&fd, start, len, flags) {
        Ok(device_ptr) => Some(Shared {
            start,
            len,
            device_ptr,
        }),
        Err(e) => {
            note_fallback(e);
            None
        }
    }
}

/// Move the whole pages `[start, start + len)` of this process onto `memfd` (at least
/// `len` bytes long), in place and with their contents: the program sees the same bytes
/// at the same addresses, now in a file the host can map (`cudaHostRegister`, here and
/// in a VM guest).
///
/// # Safety
/// `[start, start + len)` is page-aligned, mapped, readable and writable memory of
/// the program's.
pub(crate) unsafe fn move_onto(
    memfd: &OwnedFd,
    start: usize,
    len: usize,
) -> Result<NonNull<libc::c_void>, String> {
    // SAFETY: the caller's promise: the range is the program's readable memory.
    let current = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
    let file = std::fs::File::from(memfd.try_clone().map_err(|e| e.to_string())?);
    (&file).write_all(current).map_err(|e| e.to_string())?;
    let at = NonZeroUsize::new(start).ok_or("null")?;
    let length = NonZeroUsize::new(len).ok_or("empty")?;
    // SAFETY: replaces the program's pages just copied with the file holding the
    // same bytes, at the same address (a thread writing them meanwhile could lose
    // that write: registering memory being written is a race in CUDA already).
    unsafe {
        mmap(
            Some(at),
            length,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED | MapFlags::MAP_FIXED | MapFlags::MAP_POPULATE,
            memfd,
            0,
        )
    }
    .map_err(|e| format!("cannot move the pages onto shared memory ({e})"))
}

/// Device address space is reserved in 2 MiB granules, the GPU's own VA granularity.
const GRANULE: usize = 2 << 20;

/// Granule index -> (live device ranges touching it, whether we claimed it).
static GRANULES: std::sync::Mutex<std::collections::BTreeMap<usize, (u32, bool)>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn granules(ptr: usize, len: usize) -> std::ops::RangeInclusive<usize> {
    ptr / GRANULE..=(ptr + len.max(1) - 1) / GRANULE
}

/// Claim `[ptr, ptr + len)` of this process's address space without backing, so no
/// guest host allocation lands on a device address. A granule the program already
/// uses is left alone (addresses there stay ambiguous). Returns whether the whole
/// range is claimed, i.e. clear of the program's own memory.
pub fn reserve(ptr: usize, len: usize) -> bool {
    let mut table = GRANULES.lock().unwrap_or_else(|p| p.into_inner());
    let span = granules(ptr, len);
    // Granules no live range holds, claimed a run at a time: one mmap for a whole
    // allocation (a granule at a time, a 1 GiB allocation took 512 of them); a run
    // that overlaps the program's memory is claimed granule by granule instead.
    let fresh: Vec<usize> = span
        .clone()
        .filter(|g| table.get(g).is_none_or(|e| e.0 == 0))
        .collect();
    for run in runs(&fresh) {
        let whole = claim(run.start * GRANULE, run.len() * GRANULE);
        for g in run {
            let claimed = whole || claim(g * GRANULE, GRANULE);
            table.insert(g, (0, claimed));
        }
    }
    let mut clear = true;
    for g in span {
        let entry = table.entry(g).or_insert((0, false));
        entry.0 += 1;
        clear &= entry.1;
    }
    clear
}

/// Consecutive granule indices of `sorted` as ranges.
fn runs(sorted: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for &g in sorted {
        match out.last_mut() {
            Some(r) if r.end == g => r.end = g + 1,
            _ => out.push(g..g + 1),
        }
    }
    out
}

/// Whether every granule of `[ptr, ptr + len)` is claimed by this process for device
/// memory (and so holds none of the program's own memory).
pub fn claimed(ptr: usize, len: usize) -> bool {
    let table = GRANULES.lock().unwrap_or_else(|p| p.into_inner());
    granules(ptr, len).all(|g| table.get(&g).is_some_and(|e| e.1))
}

/// Drop one device range's hold on its granules; unmap those we claimed and nobody uses.
pub fn release(ptr: usize, len: usize) {
    let mut table = GRANULES.lock().unwrap_or_else(|p| p.into_inner());
    let mut unclaim = Vec::new();
    for g in granules(ptr, len) {
        let Some(entry) = table.get_mut(&g) else {
            continue;
        };
        entry.0 -= 1;
        if entry.0 == 0 {
            if entry.1 {
                unclaim.push(g);
            }
            table.remove(&g);
        }
    }
    // One munmap a run of granules (it spans the several mappings of a run as well).
    for run in runs(&unclaim) {
        if let Some(addr) = NonNull::new((run.start * GRANULE) as *mut libc::c_void) {
            // SAFETY: these granules were mapped PROT_NONE by `claim` and no live
            // device range uses them any more.
            let _ = unsafe { munmap(addr, run.len() * GRANULE) };
        }
    }
}

/// Map `[at, at + len)` PROT_NONE where nothing of the program's is: whether it was.
fn claim(at: usize, len: usize) -> bool {
    let (Some(addr), Some(length)) = (NonZeroUsize::new(at), NonZeroUsize::new(len)) else {
        return false;
    };
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; a PROT_NONE,
    // unbacked mapping only claims the addresses.
    let r = unsafe {
        nix::sys::mman::mmap_anonymous(
            Some(addr),
            length,
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE | MapFlags::MAP_FIXED_NOREPLACE,
        )
    };
    match r {
        Ok(p) if p.as_ptr() as usize == at => true,
        Ok(p) => {
            // SAFETY: an old kernel put it elsewhere; unmapping what was just made.
            let _ = unsafe { munmap(p, len) };
            false
        }
        Err(_) => {
            if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                eprintln!("vmcuda: device addresses at {at:#x} overlap this program's own memory");
            }
            false
        }
    }
}

fn note_fallback(e: CudaStatus) {
    if std::env::var_os("VMCUDA_VERBOSE").is_some() {
        eprintln!(
            "vmcuda: pinned memory not shared with the host ({e}); copies go over the socket"
        );
    }
}

/// A page of the program's own memory at a fixed address, for tests of device ranges
/// that fall on it; unmapped when dropped.
#[cfg(test)]
pub(crate) struct ProgramPage(NonNull<libc::c_void>);

#[cfg(test)]
impl ProgramPage {
    pub(crate) fn at(at: usize) -> ProgramPage {
        // SAFETY: NOREPLACE never replaces a mapping; the page is unmapped on drop.
        let page = unsafe {
            nix::sys::mman::mmap_anonymous(
                Some(NonZeroUsize::new(at).expect("nonzero address")),
                NonZeroUsize::new(PAGE).expect("nonzero length"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED_NOREPLACE,
            )
        }
        .expect("a free test address");
        ProgramPage(page)
    }
}

#[cfg(test)]
impl Drop for ProgramPage {
    fn drop(&mut self) {
        // SAFETY: the page `at` mapped, used by nothing else.
        let _ = unsafe { munmap(self.0, PAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a page at `at` can be mapped (i.e. nothing holds that address).
    fn free_at(at: usize) -> bool {
        let (addr, len) = (
            NonZeroUsize::new(at).unwrap(),
            NonZeroUsize::new(PAGE).unwrap(),
        );
        // SAFETY: NOREPLACE probe; unmapped again at once if it succeeds.
        let r = unsafe {
            nix::sys::mman::mmap_anonymous(
                Some(addr),
                len,
                ProtFlags::PROT_NONE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED_NOREPLACE,
            )
        };
        match r {
            Ok(p) => {
                // SAFETY: unmapping the probe.
                let _ = unsafe { munmap(p, PAGE) };
                p.as_ptr() as usize == at
            }
            Err(_) => false,
        }
    }

    #[test]
    fn device_ranges_keep_guest_memory_out_and_release_when_unused() {
        let base = 0x2345_0000_0000usize;
        assert!(free_at(base) && free_at(base + GRANULE));
        // Two small ranges in one granule, one spilling into the next.
        assert!(reserve(base + 512, 1024));
        assert!(reserve(base + GRANULE - 100, 200));
        assert!(!free_at(base) && !free_at(base + GRANULE));
        release(base + 512, 1024);
        assert!(!free_at(base), "still held by the second range");
        release(base + GRANULE - 100, 200);
        assert!(free_at(base) && free_at(base + GRANULE));
    }

    #[test]
    fn a_range_over_the_programs_own_memory_is_not_clear() {
        let at = 0x2346_0000_0000usize;
        let mine = ProgramPage::at(at);
        assert!(
            !reserve(at + 4096, 100),
            "the program's page is in that granule"
        );
        release(at + 4096, 100);
        drop(mine);
        assert!(reserve(at + 4096, 100));
        release(at + 4096, 100);
        assert!(free_at(at));
    }

    /// A range of many granules is claimed as one run; where the program's own page
    /// sits in the middle, the granules around it are still claimed one by one, and
    /// the program's page is never touched; released, every claimed granule is free.
    #[test]
    fn long_ranges_are_claimed_in_runs_around_the_programs_memory() {
        assert_eq!(runs(&[1, 2, 3, 7, 9, 10]), [1..4, 7..8, 9..11]);
        assert!(runs(&[]).is_empty());
        let at = 0x2347_0000_0000usize;
        let len = 16 * GRANULE;
        assert!(reserve(at, len));
        assert!(claimed(at, len));
        release(at, len);
        assert!((0..16).all(|i| free_at(at + i * GRANULE)));
        let mine = ProgramPage::at(at + 5 * GRANULE);
        assert!(!reserve(at, len), "the program's page is in granule 5");
        let table = GRANULES.lock().unwrap();
        let first = at / GRANULE;
        let claimed_now: Vec<bool> = (first..first + 16).map(|g| table[&g].1).collect();
        drop(table);
        assert_eq!(claimed_now.iter().filter(|c| !**c).count(), 1);
        assert!(!claimed_now[5]);
        release(at, len);
        drop(mine);
        assert!((0..16).all(|i| free_at(at + i * GRANULE)));
    }
}
