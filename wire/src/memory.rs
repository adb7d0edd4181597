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
    /// Once the copy is enqueued, have the stream write `value` to this 4-byte word of
    /// shared guest memory after it (a synchronous copy the guest watches finish; see
    /// the guest library's `done_word`). No word is written for a copy that fails.
    pub done: Option<DoneWord>,
}

/// A word of shared guest memory (its device pointer) and the value a stream writes
/// there when it gets to that point.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DoneWord {
    pub addr: DevicePtr,
    pub value: u32,
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
    /// A secret of this connection's, known to the broker and the host only (the
    /// process never reads what the broker wrote to its connection): it seals each
    /// [`GuestPagesExtend`] the broker hands the process later.
    pub key: [u8; 32],
}

/// More guest pages for a connection that has a [`GuestPagesGrant`]: pages the broker
/// gave the process later (its pinned allocations), which the process passes on as
/// they came. `seal` is [`grant_seal`] under the grant's key, so the process can pass
/// them on but can name no page of its own choosing.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GuestPagesExtend {
    pub page_size: u64,
    pub pages: Vec<u64>,
    pub seal: [u8; 32],
}

/// The broker's seal on `pages` of `page_size` bytes for the connection whose grant
/// carried `key` (HMAC-SHA256 over a label, the page size and the pages).
pub fn grant_seal(key: &[u8; 32], page_size: u64, pages: &[u64]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, &sealed_bytes(page_size, pages));
    let mut seal = [0u8; 32];
    seal.copy_from_slice(tag.as_ref());
    seal
}

/// Whether `seal` is the broker's seal on these pages under `key` (compared in
/// constant time).
pub fn grant_seal_holds(key: &[u8; 32], page_size: u64, pages: &[u64], seal: &[u8; 32]) -> bool {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::verify(&key, &sealed_bytes(page_size, pages), seal).is_ok()
}

fn sealed_bytes(page_size: u64, pages: &[u64]) -> Vec<u8> {
    let mut bytes = b"vmcuda guest pages extend v1".to_vec();
    bytes.extend_from_slice(&page_size.to_le_bytes());
    bytes.extend_from_slice(&(pages.len() as u64).to_le_bytes());
    for p in pages {
        bytes.extend_from_slice(&p.to_le_bytes());
    }
    bytes
}

/// A fresh secret for a grant.
pub fn grant_key() -> Result<[u8; 32], ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut key)?;
    Ok(key)
}

#[cfg(test)]
mod seal_tests {
    use super::*;

    #[test]
    fn a_seal_holds_only_for_its_key_page_size_and_pages() {
        let key = grant_key().unwrap();
        let pages = [0x4000_0000u64, 0x4020_0000];
        let seal = grant_seal(&key, 2 << 20, &pages);
        assert!(grant_seal_holds(&key, 2 << 20, &pages, &seal));
        let other = grant_key().unwrap();
        assert_ne!(key, other);
        assert!(!grant_seal_holds(&other, 2 << 20, &pages, &seal));
        assert!(!grant_seal_holds(&key, 4096, &pages, &seal));
        assert!(!grant_seal_holds(&key, 2 << 20, &pages[..1], &seal));
        assert!(!grant_seal_holds(
            &key,
            2 << 20,
            &[0x4000_0000, 0x4040_0000],
            &seal
        ));
        let mut bent = seal;
        bent[31] ^= 1;
        assert!(!grant_seal_holds(&key, 2 << 20, &pages, &bent));
    }
}
