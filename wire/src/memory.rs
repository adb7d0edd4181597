//! Memory requests whose types carry more than plain fields: guest memory shared with
//! the backend (same-host memfds and a VM's guest pages) and pointer attributes. The op
//! table in [`crate::op`] declares the plain ones inline.

use serde::{Deserialize, Serialize};

use crate::handle::{DevicePtr, StreamHandle};

/// Whether a memfd a peer passed is sealed against shrinking: only such a file may be
/// mapped by the side that did not make it, since pages cut from under a mapping
/// fault (SIGBUS) whoever touches them.
pub fn sealed_against_shrinking(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    fcntl(fd, FcntlArg::F_GET_SEALS)
        .is_ok_and(|s| SealFlag::from_bits_truncate(s).contains(SealFlag::F_SEAL_SHRINK))
}

/// `cudaPointerAttributes` for a pointer the host knows (`memory_type` is a
/// `cudaMemoryType`: 0 unregistered, 1 host, 2 device, 3 managed).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PointerAttributes {
    pub memory_type: i32,
    pub device: i32,
    pub device_pointer: DevicePtr,
}

/// Share guest host memory with the backend: the frame carries a memfd (SCM_RIGHTS,
/// Unix sockets only) whose first `size` bytes the guest has mapped at `addr`. The
/// backend maps it at the same address and registers it with the GPU, so kernels can
/// reach it through the device pointer in the reply (equal to `addr` under UVA).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostRegisterShared {
    pub addr: u64,
    pub size: u64,
    /// `cudaHostAlloc`/`cudaHostRegister` flags.
    pub flags: u32,
}
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SharedHostMemory {
    pub device_ptr: DevicePtr,
}
/// `HostRegisterShared` flag (outside CUDA's flag bits): the region is the guest
/// library's own staging area for pageable copies, not memory the program asked for.
/// The host takes one per connection, of at most [`MAX_STAGING_LEN`] bytes, and does not
/// count it against the quota (like its own receive buffers).
pub const SHARED_STAGING: u32 = 1 << 31;
pub const MAX_STAGING_LEN: u64 = 256 << 20;

/// Share guest memory with a backend that has the guest's RAM mapped (the vhost-user
/// device's workers): the guest process has `size` bytes at `addr`, made of pages of
/// `page_size` bytes whose guest-physical addresses are `pages`, in order. The backend
/// maps those pages side by side and registers them with the GPU; copies then name
/// `addr` in [`MemcpyShared`] as for [`HostRegisterShared`]. The memory is the host's to
/// copy from and to only: its device pointer in the reply is 0 (kernels cannot reach
/// it). Only connections from a privileged guest source port may ask (the guest-physical
/// addresses reach any of the VM's memory); see docs/security.md.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostRegisterGuestPages {
    pub addr: u64,
    pub size: u64,
    pub page_size: u64,
    pub pages: Vec<u64>,
    /// As in [`HostRegisterShared`] ([`SHARED_STAGING`] for the staging area).
    pub flags: u32,
}

/// A copy between device memory and guest memory the host has mapped (shared pinned
/// memory, or the staging area): the DMA engine reads or writes the guest's pages, and
/// no byte travels on the socket. `host` is the guest's address, inside one region
/// registered with `HostRegisterShared`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcpyShared {
    pub device: DevicePtr,
    pub host: u64,
    pub size: u64,
    pub to_device: bool,
    pub stream: StreamHandle,
    /// Left running on the stream (`cudaMemcpyAsync`); otherwise done before the reply.
    pub is_async: bool,
}

/// Move this connection's frames into a command ring in memory both sides share (see
/// [`crate::ring`]), `capacity` bytes each way. Its reply is the last frame on the
/// socket; the guest's next frame goes into the ring.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RingAttach {
    pub capacity: u32,
    pub place: RingPlace,
}

/// Where a command ring's memory is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum RingPlace {
    /// A sealed memfd passed with the request (a guest on the same host).
    Descriptor,
    /// Guest pages of `page_size` bytes, by guest-physical address, in order (a VM
    /// guest whose worker has the VM's RAM, as for [`HostRegisterGuestPages`]).
    GuestPages { page_size: u64, pages: Vec<u64> },
}

/// The first frame of a connection the guest's RAM broker (a privileged guest service)
/// made for an unprivileged process, before the hello: the only guest pages the
/// connection may name from now on, which the broker owns for that process (see
/// docs/security.md). Anywhere else it is refused.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GuestPagesGrant {
    pub page_size: u64,
    pub pages: Vec<u64>,
}
