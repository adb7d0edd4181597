//! Host memory shared with the backend (same-host guests on a Unix socket).
//!
//! Pinned memory is placed in memfds: the descriptor goes to the worker with the
//! request, the worker maps it at the same address and registers it with the GPU, so
//! the device pointer equals the host pointer as under native UVA, and kernels read
//! and write the guest's own pages (zero-copy mapped memory). `cudaHostRegister` moves
//! the program's existing pages onto a memfd in place, contents preserved. Where
//! descriptors cannot travel (TCP) or the worker cannot map the address, pinned memory
//! stays private to the guest and copies go over the socket, as before.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use vmcuda_wire::op::{HostRegisterShared, HostUnregisterShared};
use vmcuda_wire::CudaStatus;

use crate::pages::{memfd, move_onto, Shared, PAGE};
use crate::{client, state};

pub(crate) fn enabled() -> bool {
    std::env::var("VMCUDA_SHARED_MEMORY").map_or(true, |v| v != "0")
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

/// Whether this connection can share memfds with its host (a same-host guest).
pub fn available() -> bool {
    enabled() && client::client().is_ok_and(|c| c.can_pass_fds())
}

/// New shared pinned memory of at least `size` bytes, or `None` where sharing is not
/// possible (the caller then uses private memory).
pub fn alloc(size: usize, flags: u32) -> Option<(usize, Shared)> {
    if !available() {
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

/// Hand the host a mapping of `fd` the caller made at `[start, start + len)`, so its
/// copies to and from there are the GPU's DMA; `None` where that is not possible.
pub fn share_mapping(fd: &OwnedFd, start: usize, len: usize) -> Option<Shared> {
    if !available() {
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

/// Release shared pinned memory made by [`alloc`] with `flags` on `device`.
pub fn free(region: Shared, flags: u32, device: i32) {
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
    if !available() {
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

fn note_fallback(e: CudaStatus) {
    if std::env::var_os("VMCUDA_VERBOSE").is_some() {
        eprintln!(
            "vmcuda: pinned memory not shared with the host ({e}); copies go over the socket"
        );
    }
}
