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

use vmcuda_wire::op::HostRegisterGuestPages;

use crate::guest_ram::HostPages;
use crate::{client, state};

/// Map `len` bytes (a whole number of huge pages) of guest pages the host can reach
/// (see [`HostPages::take`]) and register them with the host by guest-physical
/// address; the address of the area, or why not.
pub fn alloc(len: usize, flags: u32) -> Result<usize, String> {
    let area = client::client()
        .ok()
        .and_then(|c| c.single())
        .and_then(|c| c.area.as_deref());
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

    use crate::guest_ram::HostPages;
    use crate::pages::{Shared, PAGE};
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
    const MIN_CHUNK: usize = crate::pages::HUGE_PAGE;

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
        let memfd = crate::pages::memfd(len).map_err(|e| e.to_string())?;
        // SAFETY: the caller's promise, passed on.
        let at = unsafe { crate::pages::move_onto(&memfd, start, len) }?;
        let pin = crate::pages::pin::LongTermPin::new(at, len)
            .map_err(|e| format!("cannot pin the pages ({e})"))?;
        let pages = crate::pages::read_pagemap_pages(start, len, PAGE)?;
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
