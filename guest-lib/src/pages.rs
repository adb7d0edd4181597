//! Pages of this process's address space, as the host comes to map them: memfds that
//! never shrink and the program's pages moved onto one in place, huge pages and the
//! guest-physical addresses a VM guest's pages have, and long-term pins. The regions
//! shared with the host are [`Shared`]. Nothing here talks to the host: the modules
//! that do ([`crate::shared`], [`crate::guest_ram`], [`crate::guest_pages`]) stand on it.

use std::io::Write;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use vmcuda_wire::CudaStatus;

/// The base page size.
pub const PAGE: usize = 4096;

/// A region shared with the host: page-aligned start and length, and its device
/// pointer.
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    pub start: usize,
    pub len: usize,
    pub device_ptr: u64,
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

/// Pages held in place for as long as the host may use them.
pub mod pin {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::ptr::NonNull;

    /// A long-term pin of a range of the broker's memory: an io_uring instance with
    /// the range registered as its fixed buffers. The kernel neither migrates nor
    /// reclaims pages pinned this way; closing the instance lets them go.
    pub struct LongTermPin {
        /// Never read: closing it unpins the pages.
        _ring: OwnedFd,
    }

    /// `IORING_REGISTER_BUFFERS`.
    const REGISTER_BUFFERS: libc::c_long = 0;
    /// The most one fixed buffer may hold.
    const MAX_BUFFER: usize = 1 << 30;

    impl LongTermPin {
        pub fn new(base: NonNull<libc::c_void>, len: usize) -> std::io::Result<LongTermPin> {
            // `struct io_uring_params`, all zero: no flags asked for.
            let mut params = [0u64; 15];
            // SAFETY: io_uring_setup writes at most the 120 bytes of its parameters
            // into `params`, which is 120 bytes long.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: io_uring_setup just made this descriptor for us.
            let ring = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            let buffers: Vec<libc::iovec> = (0..len)
                .step_by(MAX_BUFFER)
                .map(|off| libc::iovec {
                    iov_base: base.as_ptr().wrapping_byte_add(off),
                    iov_len: (len - off).min(MAX_BUFFER),
                })
                .collect();
            // SAFETY: the kernel reads `buffers.len()` iovecs, each naming part of the
            // broker's own mapping `[base, base + len)`, which outlives the pin.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    fd as libc::c_long,
                    REGISTER_BUFFERS,
                    buffers.as_ptr(),
                    buffers.len() as libc::c_long,
                )
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(LongTermPin { _ring: ring })
        }
    }
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
