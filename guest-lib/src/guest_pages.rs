//! The staging area of a guest in a VM served through the vhost-user device.
//!
//! Memory cannot be passed as a descriptor over vsock, but the device's worker can map
//! the guest's RAM. So the staging area is made of 2 MiB huge pages (physically
//! contiguous, and not moved as ordinary pages are), their guest-physical addresses
//! are read from /proc/self/pagemap (only a privileged process sees them) and sent to
//! the host ([`HostRegisterGuestPages`]), which maps the same pages. Copies then work as
//! for a same-host guest ([`crate::staging`]). Whatever is missing (no huge pages, no
//! privilege, a host that refuses) leaves the copies on the socket, with the reason
//! said under `VMCUDA_VERBOSE`.

use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use vmcuda_wire::op::HostRegisterGuestPages;

use crate::{client, state};

/// The huge page size on x86-64 and arm64 (with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// The guest-physical address of the page mapped at `va`, from a pagemap entry: `None`
/// when the page is absent or its frame is hidden (read as 0 without CAP_SYS_ADMIN).
pub fn physical_address(entry: u64, va: usize) -> Option<u64> {
    const PRESENT: u64 = 1 << 63;
    const PFN_MASK: u64 = (1 << 55) - 1;
    let pfn = entry & PFN_MASK;
    (entry & PRESENT != 0 && pfn != 0).then(|| pfn * 4096 + (va % 4096) as u64)
}

/// Map `len` bytes (rounded up to whole huge pages) of huge pages and read their
/// guest-physical addresses: the mapping (owned by the caller, `munmap` undoes it),
/// its length, and each page's address, or why not.
pub fn huge_pages(len: usize) -> Result<(NonNull<libc::c_void>, usize, Vec<u64>), String> {
    let len = len.next_multiple_of(HUGE_PAGE);
    let length = NonZeroUsize::new(len).ok_or("empty staging area")?;
    // Shared, so that a fork never makes a copy-on-write copy of a page the host
    // writes; populated, so every page has its frame before we look it up.
    // SAFETY: a fresh anonymous mapping where the kernel chooses, owned here.
    let area = unsafe {
        mmap_anonymous(
            None,
            length,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED | MapFlags::MAP_HUGETLB | MapFlags::MAP_POPULATE,
        )
    }
    .map_err(|e| format!("no huge pages ({e}; boot with hugepages=N)"))?;
    // MAP_POPULATE gives up silently where huge pages run out: a page it could not
    // fill shows as absent in pagemap below, and the area is refused.
    match read_pagemap(area.as_ptr() as usize, len) {
        Ok(pages) => Ok((area, len, pages)),
        Err(why) => {
            // SAFETY: unmapping the area mapped above, which nothing else uses.
            let _ = unsafe { munmap(area, len) };
            Err(why)
        }
    }
}

/// Guest pages the host may map by guest-physical address.
pub struct HostPages {
    pub at: NonNull<u8>,
    pub len: usize,
    pub page_size: u64,
    pub pages: Vec<u64>,
    /// Whether the mapping is the caller's own (huge pages it made), to unmap when it
    /// gives them up; otherwise a piece of the broker's area, mapped for the life of
    /// the process.
    pub owned: bool,
}

impl HostPages {
    /// `len` bytes of guest pages: from the guest RAM the broker gave this process
    /// (`area`), else huge pages of its own, whose addresses only a privileged process
    /// can read.
    pub fn take(
        len: usize,
        area: Option<&crate::guest_ram::GuestArea>,
    ) -> Result<HostPages, String> {
        if let Some(area) = area {
            let (at, len, pages) = area
                .carve(len)
                .ok_or("no room left in the guest RAM the broker gave")?;
            return Ok(HostPages {
                at,
                len,
                page_size: area.page_size() as u64,
                pages,
                owned: false,
            });
        }
        let (at, len, pages) = huge_pages(len)?;
        Ok(HostPages {
            at: at.cast(),
            len,
            page_size: HUGE_PAGE as u64,
            pages,
            owned: true,
        })
    }

    /// Unmap them if they are the caller's own; a piece of the broker's area stays.
    pub fn give_up(self) {
        if self.owned {
            // SAFETY: unmapping the caller's own mapping of these pages, which nothing
            // else uses.
            let _ = unsafe { munmap(self.at.cast(), self.len) };
        }
    }
}

/// Map `len` bytes (a whole number of huge pages) of guest pages the host can reach
/// (see [`HostPages::take`]) and register them with the host by guest-physical
/// address; the address of the area, or why not.
pub fn alloc(len: usize, flags: u32) -> Result<usize, String> {
    let area = client::client()
        .ok()
        .and_then(|c| c.single())
        .and_then(|c| c.area.as_ref());
    let pages = HostPages::take(len, area)?;
    let req = HostRegisterGuestPages {
        addr: pages.at.as_ptr() as u64,
        size: pages.len as u64,
        page_size: pages.page_size,
        pages: pages.pages.clone(),
        flags,
    };
    let registered = client::client()
        .and_then(|c| c.call(state::current_device(), &req, &[], client::Sink::None));
    match registered {
        Ok(_) => Ok(pages.at.as_ptr() as usize),
        Err(e) => {
            pages.give_up();
            Err(format!(
                "the host did not take the guest's pages ({e}; see the host log)"
            ))
        }
    }
}

/// The guest-physical address of each huge page of `[start, start + len)`.
fn read_pagemap(start: usize, len: usize) -> Result<Vec<u64>, String> {
    read_pagemap_pages(start, len, HUGE_PAGE)
}

/// The guest-physical address of each `page`-sized page of `[start, start + len)` of
/// this process, each of which must be present and aligned to its size in
/// guest-physical memory.
pub fn read_pagemap_pages(start: usize, len: usize, page: usize) -> Result<Vec<u64>, String> {
    let pagemap = std::fs::File::open("/proc/self/pagemap")
        .map_err(|e| format!("cannot read /proc/self/pagemap ({e})"))?;
    (start..start + len)
        .step_by(page)
        .map(|va| {
            let mut entry = [0u8; 8];
            pagemap
                .read_exact_at(&mut entry, (va / 4096 * 8) as u64)
                .map_err(|e| format!("cannot read /proc/self/pagemap ({e})"))?;
            match physical_address(u64::from_le_bytes(entry), va) {
                Some(gpa) if gpa % page as u64 == 0 => Ok(gpa),
                Some(_) => Err("a huge page is not aligned in guest-physical memory".into()),
                None => Err(
                    "guest-physical addresses are hidden (not root) or a huge page is missing"
                        .into(),
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagemap_entries_give_frames_only_when_present_and_shown() {
        let present = 1u64 << 63;
        assert_eq!(
            physical_address(present | 0x1234, 0x7000_0010),
            Some(0x0123_4010)
        );
        // Hidden from an unprivileged process: the frame reads as 0.
        assert_eq!(physical_address(present, 0x7000_0000), None);
        // Swapped or never touched.
        assert_eq!(physical_address(0x1234, 0x7000_0000), None);
        // Flag bits above the frame number are not part of it.
        assert_eq!(
            physical_address(present | (1 << 55) | (1 << 61) | 0x200, 0),
            Some(0x200 * 4096)
        );
    }

    /// In this process (unprivileged, maybe without huge pages) the area is refused
    /// with a reason, never half made.
    #[test]
    fn pagemap_of_ordinary_memory_reads_or_refuses_cleanly() {
        let v = vec![1u8; 3 * HUGE_PAGE];
        let start = (v.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        match read_pagemap(start, HUGE_PAGE) {
            // Root: a real frame (not necessarily huge-page aligned for ordinary pages).
            Ok(pages) => assert_eq!(pages.len(), 1),
            Err(e) => assert!(e.contains("hidden") || e.contains("aligned"), "{e}"),
        }
    }
}
