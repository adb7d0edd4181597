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

/// The program's pinned memory in a VM guest: pieces of guest RAM the worker maps (at
/// the program's own address where it can) and registered with the GPU, so copies to
/// and from it are the GPU's DMA and kernels reach it, as natively. Chunks come from
/// the guest's RAM broker (each sealed for this connection, [`GuestPagesExtend`]), or
/// are a privileged process's own huge pages; they are cut into page-aligned pieces
/// and kept for the life of the process, since a broker's pages cannot go back to
/// the guest while the host may still map them.
pub mod pinned {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use vmcuda_wire::op::{GuestPagesExtend, HostRegisterGuestPages};
    use vmcuda_wire::CudaStatus;

    use super::HostPages;
    use crate::shared::{Shared, PAGE};
    use crate::{client, state};

    /// Guest pages registered with the host, and which of their bytes are free.
    struct Chunk {
        start: usize,
        device_ptr: u64,
        /// Free pieces: offset -> length, neither touching another.
        free: BTreeMap<usize, usize>,
    }

    impl Chunk {
        /// First fit of `len` bytes: the piece's offset.
        fn take(&mut self, len: usize) -> Option<usize> {
            let (&at, &have) = self.free.iter().find(|(_, &have)| have >= len)?;
            self.free.remove(&at);
            if have > len {
                self.free.insert(at + len, have - len);
            }
            Some(at)
        }

        /// Give back `[at, at + len)`, merging it with free neighbours.
        fn give(&mut self, mut at: usize, mut len: usize) {
            if let Some((&before, &blen)) = self.free.range(..at).next_back() {
                if before + blen == at {
                    self.free.remove(&before);
                    at = before;
                    len += blen;
                }
            }
            if let Some(after) = self.free.remove(&(at + len)) {
                len += after;
            }
            self.free.insert(at, len);
        }
    }

    struct Pool {
        chunks: Vec<Chunk>,
        /// Pieces handed out: start -> (chunk index, length).
        pieces: BTreeMap<usize, (usize, usize)>,
        /// Set once guest RAM proved out of reach for this process (no broker and no
        /// privilege, or a host without the guest's RAM): pinned memory stays private.
        unavailable: bool,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        chunks: Vec::new(),
        pieces: BTreeMap::new(),
        unavailable: false,
    });

    /// The least a chunk holds: one huge page, cut into pieces for small allocations.
    const MIN_CHUNK: usize = super::HUGE_PAGE;

    fn enabled() -> bool {
        crate::shared::enabled() && std::env::var("VMCUDA_GUEST_PINNED").map_or(true, |v| v != "0")
    }

    /// Whether pinned memory may be guest RAM here: a VM guest with the broker's guest
    /// RAM, or a privileged process (which reads its own pages' addresses), and not
    /// found out of reach yet.
    pub fn possible() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let has_pages = |c: &client::Client| c.is_vsock() && (c.area.is_some() || root);
        enabled()
            && client::client().is_ok_and(|c| c.single().is_some_and(has_pages))
            && !POOL.lock().unwrap_or_else(|p| p.into_inner()).unavailable
    }

    /// `size` bytes of pinned memory in guest RAM the host maps, or `None` (the caller
    /// then uses private memory, whose copies travel through the staging area or the
    /// socket).
    pub fn alloc(size: usize) -> Option<Shared> {
        if !possible() {
            return None;
        }
        let len = size.max(1).next_multiple_of(PAGE);
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if pool.unavailable {
            return None;
        }
        let found = pool
            .chunks
            .iter_mut()
            .enumerate()
            .find_map(|(i, c)| c.take(len).map(|at| (i, at)));
        let (index, at) = match found {
            Some(found) => found,
            None => {
                let chunk = match new_chunk(len.max(MIN_CHUNK)) {
                    Ok(chunk) => chunk,
                    Err((why, lasting)) => {
                        pool.unavailable |= lasting;
                        if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                            eprintln!("vmcuda: pinned memory not in guest RAM ({why}); its copies go through the staging area or the socket");
                        }
                        return None;
                    }
                };
                pool.chunks.push(chunk);
                let index = pool.chunks.len() - 1;
                let at = pool.chunks[index].take(len)?;
                (index, at)
            }
        };
        let chunk = &pool.chunks[index];
        let region = Shared {
            start: chunk.start + at,
            len,
            device_ptr: chunk.device_ptr + at as u64,
        };
        pool.pieces.insert(region.start, (index, len));
        Some(region)
    }

    /// Give back a piece [`alloc`] made; whether `start` was one.
    pub fn free(start: usize) -> bool {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        let Some((index, len)) = pool.pieces.remove(&start) else {
            return false;
        };
        let chunk = &mut pool.chunks[index];
        let at = start - chunk.start;
        chunk.give(at, len);
        true
    }

    /// Guest pages of at least `len` bytes, made known to and registered with the host;
    /// or why not, and whether that will last.
    fn new_chunk(len: usize) -> Result<Chunk, (String, bool)> {
        let c = client::client().map_err(|e| (e.to_string(), true))?;
        let c = c.single().ok_or(("more than one host".to_string(), true))?;
        let (pages, seal) = match &c.area {
            Some(area) => {
                let more = area.more(len).map_err(|why| (why, false))?;
                let pages = HostPages {
                    at: more.at,
                    len: more.len,
                    page_size: more.page_size,
                    pages: more.pages,
                    owned: false,
                };
                (pages, Some(more.seal))
            }
            // A privileged process's own huge pages; an unprivileged one's addresses
            // are hidden, for good.
            None => (HostPages::take(len, None).map_err(|why| (why, true))?, None),
        };
        match give_host(c, &pages, seal) {
            Ok(device_ptr) => Ok(Chunk {
                start: pages.at.as_ptr() as usize,
                device_ptr,
                free: BTreeMap::from([(0, pages.len)]),
            }),
            Err(e) => {
                pages.give_up();
                Err(e)
            }
        }
    }

    /// Hand `pages` to the host (with the broker's seal, where they came from it) and
    /// register them as pinned memory at their address here: their device pointer, or
    /// why not and whether that will last.
    fn give_host(
        c: &client::Client,
        pages: &HostPages,
        seal: Option<[u8; 32]>,
    ) -> Result<u64, (String, bool)> {
        if let Some(seal) = seal {
            let extend = GuestPagesExtend {
                page_size: pages.page_size,
                pages: pages.pages.clone(),
                seal,
            };
            c.call(state::current_device(), &extend, &[], client::Sink::None)
                .map_err(|e| {
                    (
                        format!("the host did not take the broker's pages ({e})"),
                        true,
                    )
                })?;
        }
        let req = HostRegisterGuestPages {
            addr: pages.at.as_ptr() as u64,
            size: pages.len as u64,
            page_size: pages.page_size,
            pages: pages.pages.clone(),
            flags: 0,
        };
        match c.call(state::current_device(), &req, &[], client::Sink::None) {
            Ok(r) if r.device_ptr != 0 => Ok(r.device_ptr),
            other => {
                let lasting = matches!(other, Err(CudaStatus::ErrorNotSupported) | Ok(_));
                Err((
                    format!(
                        "the host did not take the guest's pages ({other:?}; see the host log)"
                    ),
                    lasting,
                ))
            }
        }
    }

    /// Memory the program registers (`cudaHostRegister`) in a VM guest: its whole pages
    /// move in place onto guest RAM held still for the host (the broker's, or for a
    /// privileged process its own, pinned), and the host maps and registers them.
    /// `None` where that is not possible: the memory stays the program's private memory.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` is mapped memory of the program's (`cudaHostRegister`'s
    /// contract) whose pages no other region has moved onto a file.
    pub unsafe fn register_in_place(ptr: usize, size: usize) -> Option<Shared> {
        if !possible() {
            return None;
        }
        let start = ptr / PAGE * PAGE;
        let len = (ptr + size).div_ceil(PAGE) * PAGE - start;
        let c = client::client().ok()?.single()?;
        let moved = match &c.area {
            // SAFETY: the caller's promise, passed on.
            Some(area) => unsafe { area.register_in_place(start, len) }
                .map(|more| (more.pages, Some(more.seal))),
            // SAFETY: the caller's promise, passed on.
            None => unsafe { own_pages_in_place(start, len) }.map(|pages| (pages, None)),
        };
        let verbose = std::env::var_os("VMCUDA_VERBOSE").is_some();
        let (pages, seal) = match moved {
            Ok(moved) => moved,
            Err(why) => {
                if verbose {
                    eprintln!("vmcuda: registered memory not in guest RAM ({why}); its copies go through the staging area or the socket");
                }
                return None;
            }
        };
        let pages = HostPages {
            at: std::ptr::NonNull::new(start as *mut u8)?,
            len,
            page_size: PAGE as u64,
            pages,
            owned: false,
        };
        match give_host(c, &pages, seal) {
            Ok(device_ptr) => Some(Shared {
                start,
                len,
                device_ptr,
            }),
            Err((why, _)) => {
                if verbose {
                    eprintln!("vmcuda: registered memory not in guest RAM ({why})");
                }
                None
            }
        }
    }

    /// A privileged process's own pages `[start, start + len)`, moved onto a memfd and
    /// pinned for the rest of the process's life: their guest-physical addresses.
    ///
    /// # Safety
    /// As for [`register_in_place`].
    unsafe fn own_pages_in_place(start: usize, len: usize) -> Result<Vec<u64>, String> {
        let memfd = crate::shared::memfd(len).map_err(|e| e.to_string())?;
        // SAFETY: the caller's promise, passed on.
        let at = unsafe { crate::shared::move_onto(&memfd, start, len) }?;
        let pin = super::pin::LongTermPin::new(at, len)
            .map_err(|e| format!("cannot pin the pages ({e})"))?;
        let pages = super::read_pagemap_pages(start, len, PAGE)?;
        // The host may use these pages until the process ends.
        std::mem::forget(pin);
        Ok(pages)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Pieces are cut first-fit and merge with their free neighbours when given back.
        #[test]
        fn pieces_are_cut_and_merged_back() {
            let mut c = Chunk {
                start: 0x10_0000,
                device_ptr: 0,
                free: BTreeMap::from([(0, 8 * PAGE)]),
            };
            let a = c.take(PAGE).unwrap();
            let b = c.take(2 * PAGE).unwrap();
            let d = c.take(5 * PAGE).unwrap();
            assert_eq!((a, b, d), (0, PAGE, 3 * PAGE));
            assert_eq!(c.take(PAGE), None, "full");
            c.give(b, 2 * PAGE);
            assert_eq!(c.take(3 * PAGE), None, "two free pages are not three");
            c.give(a, PAGE);
            assert_eq!(
                c.free,
                BTreeMap::from([(0, 3 * PAGE)]),
                "merged with the one before"
            );
            c.give(d, 5 * PAGE);
            assert_eq!(c.free, BTreeMap::from([(0, 8 * PAGE)]), "and the one after");
            assert_eq!(c.take(8 * PAGE), Some(0));
        }
    }
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
