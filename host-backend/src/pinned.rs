//! Page-aligned host buffers that own whole pages, so they can be page-locked with the
//! GPU (the driver refuses copies that straddle the edge of a registered range, so a
//! registered range must never reach into a neighbour's bytes).

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

pub const PAGE: usize = 4096;

/// An anonymous private mapping of whole pages, unmapped on drop.
pub struct PageBuffer {
    ptr: NonNull<libc::c_void>,
    len: usize,
}

impl PageBuffer {
    /// At least `len` bytes (rounded up to whole pages), zeroed by the kernel.
    pub fn new(len: usize) -> std::io::Result<PageBuffer> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        let length = NonZeroUsize::new(len).expect("at least one page");
        // SAFETY: a fresh anonymous mapping at an address the kernel picks; nothing
        // else refers to it, and `Drop` unmaps exactly it.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }?;
        Ok(PageBuffer { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn start(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len) }
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping `new` made.
        let _ = unsafe { munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_aligned_and_writable() {
        let mut b = PageBuffer::new(5000).unwrap();
        assert_eq!(b.len(), 2 * PAGE);
        assert_eq!(b.start() % PAGE as u64, 0);
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
        assert_eq!(b.as_slice()[0], 0);
    }
}
