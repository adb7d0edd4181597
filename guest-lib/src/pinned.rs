//! Pinned host memory shared with the host however this connection can: a same-host
//! memfd ([`crate::shared`]), or in a VM guest, guest RAM the worker maps
//! ([`crate::guest_pages::pinned`]). Where neither can, the memory stays private to the
//! guest and its copies travel through the staging area or the socket.

use crate::pages::Shared;
use crate::{guest_pages, shared};

/// Whether this connection can share memory with its host at all.
pub fn available() -> bool {
    shared::available() || guest_pages::pinned::possible()
}

/// New pinned memory of at least `size` bytes shared with the host, or `None`: private
/// memory it must be.
pub fn alloc(size: usize, flags: u32) -> Option<(usize, Shared)> {
    shared::alloc(size, flags)
        .or_else(|| guest_pages::pinned::alloc(size).map(|region| (region.start, region)))
}

/// Release memory [`alloc`] made with `flags` on `device`.
pub fn free(region: Shared, flags: u32, device: i32) {
    // A piece of guest RAM goes back to the process's pool, still mapped by the host.
    if guest_pages::pinned::free(region.start) {
        return;
    }
    shared::free(region, flags, device);
}
