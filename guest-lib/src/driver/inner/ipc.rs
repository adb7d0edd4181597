//! CUDA IPC (`cudaIpc*`): sharing device memory and events with the other processes of
//! the VM. The driver's calls do the work (crate::driver::ipc, docs/ipc.md), as
//! NVIDIA's runtime has them do it on vmcuda's driver.
//!
//! Here, the bytes of vmcuda's IPC handles and descriptors: [`MAGIC`], a kind byte (1
//! memory, 2 event, 3 physical allocation, 4 memory pool, 5 pool allocation), seven
//! zero bytes, the 16-byte token, zeros. A pool allocation's
//! `cudaMemPoolPtrExportData` is such a handle; a physical allocation's or a pool's
//! descriptor is a sealed memfd holding one.

use vmcuda_wire::CudaStatus;

use super::Result;
use crate::abi::driver::IpcHandle;

/// What every vmcuda IPC handle starts with.
pub const MAGIC: &[u8; 8] = b"vmcudaIP";
pub(crate) const KIND_MEMORY: u8 = 1;
pub(crate) const KIND_EVENT: u8 = 2;
pub(crate) const KIND_ALLOCATION: u8 = 3;
pub(crate) const KIND_POOL: u8 = 4;
pub(crate) const KIND_POOL_POINTER: u8 = 5;

impl IpcHandle {
    pub(crate) fn of(kind: u8, token: [u8; 16]) -> IpcHandle {
        let mut reserved = [0u8; 64];
        reserved[..8].copy_from_slice(MAGIC);
        reserved[8] = kind;
        reserved[16..32].copy_from_slice(&token);
        IpcHandle { reserved }
    }

    /// The token of a handle of `kind`; bytes no vmcuda export made are an invalid
    /// value, as the driver calls a handle it cannot use.
    pub(crate) fn token(&self, kind: u8) -> Result<[u8; 16]> {
        let r = &self.reserved;
        let shaped = &r[..8] == MAGIC
            && r[8] == kind
            && r[9..16].iter().all(|&b| b == 0)
            && r[32..].iter().all(|&b| b == 0);
        if !shaped {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(r[16..32].try_into().expect("16 bytes"))
    }
}

/// A sealed memfd holding the handle of `kind` for `token`.
pub(crate) fn descriptor(kind: u8, token: [u8; 16]) -> Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let os = |_| CudaStatus::ErrorOperatingSystem;
    let fd = memfd_create(
        c"vmcuda-cumem",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(os)?;
    let handle = IpcHandle::of(kind, token);
    if nix::sys::uio::pwrite(&fd, &handle.reserved, 0).map_err(os)? != handle.reserved.len() {
        return Err(CudaStatus::ErrorOperatingSystem);
    }
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(os)?;
    Ok(fd)
}

/// The token of `kind` in a descriptor [`descriptor`] made; any other descriptor is an
/// invalid value.
pub(crate) fn descriptor_token(fd: i32, kind: u8) -> Result<[u8; 16]> {
    use std::os::fd::BorrowedFd;
    if fd < 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: the program lends the descriptor for this call; it is only read.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut handle = IpcHandle { reserved: [0; 64] };
    match nix::sys::uio::pread(fd, &mut handle.reserved, 0) {
        Ok(64) => handle.token(kind),
        _ => Err(CudaStatus::ErrorInvalidValue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_their_token_and_kind_and_nothing_else() {
        let token = [0x5a; 16];
        let h = IpcHandle::of(KIND_MEMORY, token);
        assert_eq!(h.token(KIND_MEMORY).unwrap(), token);
        assert_eq!(&h.reserved[..8], MAGIC);
        assert!(h.reserved[32..].iter().all(|&b| b == 0));
        // An event's handle is not memory's, and bytes not of this shape are refused
        // before anything is sent.
        assert_eq!(h.token(KIND_EVENT), Err(CudaStatus::ErrorInvalidValue));
        let mut forged = h;
        forged.reserved[40] = 1;
        assert_eq!(
            forged.token(KIND_MEMORY),
            Err(CudaStatus::ErrorInvalidValue)
        );
        let zero = IpcHandle { reserved: [0; 64] };
        assert_eq!(zero.token(KIND_MEMORY), Err(CudaStatus::ErrorInvalidValue));
    }
}
