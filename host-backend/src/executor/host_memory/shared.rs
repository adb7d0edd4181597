//! The test double's device memory that another worker can map: an allocation exported
//! for CUDA IPC moves into a memfd, mapped shared here and in every importer, so the
//! processes of one VM see each other's bytes as on a GPU.

use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use vmcuda_wire::CudaStatus;

use super::super::ExecResult;

/// An allocation's bytes: the executor's own, or shared through a memfd.
pub enum Bytes {
    Own(Vec<u8>),
    Shared(SharedBytes),
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::Own(v)
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Own(v) => v,
            Bytes::Shared(s) => s.as_slice(),
        }
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Bytes::Own(v) => v,
            Bytes::Shared(s) => s.as_mut_slice(),
        }
    }
}

/// `len` bytes of a memfd, mapped shared.
pub struct SharedBytes {
    fd: OwnedFd,
    at: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone in this process (like a Vec's
// buffer); other processes reach it only through their own mappings.
unsafe impl Send for SharedBytes {}

impl SharedBytes {
    /// A fresh memfd holding a copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> ExecResult<SharedBytes> {
        if bytes.is_empty() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let fd =
            nix::sys::memfd::memfd_create(c"vmcuda-ipc", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
        nix::unistd::ftruncate(&fd, bytes.len() as i64)
            .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
        let mut shared = SharedBytes::map(fd, bytes.len())?;
        shared.as_mut_slice().copy_from_slice(bytes);
        Ok(shared)
    }

    /// Map `len` bytes of `fd`, another worker's export; refused where the file is
    /// shorter.
    pub fn map(fd: OwnedFd, len: usize) -> ExecResult<SharedBytes> {
        let size = nix::sys::stat::fstat(&fd).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        let length = std::num::NonZeroUsize::new(len).ok_or(CudaStatus::ErrorInvalidValue)?;
        if (size.st_size as u64) < len as u64 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: a fresh shared mapping of a file this value owns, placed by the
        // kernel, overlapping nothing of ours.
        let at = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
        }
        .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
        Ok(SharedBytes {
            fd,
            at: at.cast(),
            len,
        })
    }

    /// Another descriptor of the memfd, for an importer.
    pub fn share(&self) -> ExecResult<OwnedFd> {
        self.fd
            .try_clone()
            .map_err(|_| CudaStatus::ErrorOperatingSystem)
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `at` is a live mapping of `len` readable bytes for as long as self
        // is. Other processes of the VM may write them meanwhile, as another GPU
        // context may write device memory: plain bytes, no invariant to break.
        unsafe { std::slice::from_raw_parts(self.at.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only slice here.
        unsafe { std::slice::from_raw_parts_mut(self.at.as_ptr(), self.len) }
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no slice of it outlives
        // self.
        let _ = unsafe { munmap(self.at.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_an_export_see_each_others_writes() {
        let mut a = SharedBytes::copy_of(&[1, 2, 3, 4]).unwrap();
        let mut b = SharedBytes::map(a.share().unwrap(), 4).unwrap();
        assert_eq!(b.as_slice(), &[1, 2, 3, 4]);
        b.as_mut_slice()[0] = 9;
        assert_eq!(a.as_slice()[0], 9);
        a.as_mut_slice()[3] = 7;
        assert_eq!(b.as_slice()[3], 7);
        // Longer than the file: refused, not a mapping past its end.
        assert!(SharedBytes::map(a.share().unwrap(), 4096 * 2).is_err());
        assert!(SharedBytes::copy_of(&[]).is_err());
    }
}
