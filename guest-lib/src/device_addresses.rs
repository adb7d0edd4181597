//! The device's addresses kept out of the program's own memory.
//!
//! Device pointers come from the host's address space, so without a reservation a
//! guest host buffer could sit at the same numbers and be taken for device memory
//! (`cudaMemcpyDefault`, pointer attributes). Every device range the guest learns of
//! claims its granules of this process's address space, unbacked.

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{munmap, MapFlags, ProtFlags};

#[cfg(test)]
use crate::pages::PAGE;

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
