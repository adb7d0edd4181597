//! Guest memory shared with a worker: a same-host guest's sealed memfds, mapped at the
//! guest's own addresses where possible, and a VM's guest pages (see
//! [`crate::guest_ram`]), mapped side by side. Each mapping is registered with the GPU
//! by the session, which counts it against the guest's quota (all but the library's
//! one bounded staging area).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use tracing::{info, warn};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

/// Guest memory mapped into this process: at the guest's own address (a same-host
/// guest's memfd), or elsewhere (guest pages of a VM, named by guest-physical address).
pub struct SharedMapping {
    /// Where it is mapped here.
    pub(crate) addr: NonNull<libc::c_void>,
    pub(crate) len: usize,
    /// Where the device sees it (the same address wherever addressing is unified);
    /// `None` for guest pages mapped away from the guest's address: the guest's
    /// address means nothing here, so only [`MemcpyShared`] may reach them.
    pub(crate) device_ptr: Option<DevicePtr>,
    /// The guest library's staging area ([`SHARED_STAGING`]): not the program's memory,
    /// not counted against the quota.
    pub(crate) staging: bool,
}

impl SharedMapping {
    /// Map `len` bytes of `fd` at exactly `addr`, never over anything already there.
    pub fn map(fd: &OwnedFd, addr: u64, len: u64) -> Result<SharedMapping, CudaStatus> {
        // A mapping longer than its file would fault (SIGBUS) when the GPU touches it.
        let file_len = nix::sys::stat::fstat(fd)
            .map_err(|_| CudaStatus::ErrorInvalidValue)?
            .st_size as u64;
        // A guest that could shrink the file would cut pages from under the mapping,
        // and this process would fault touching them: only sealed files are mapped.
        if !vmcuda_wire::memory::sealed_against_shrinking(std::os::fd::AsFd::as_fd(fd)) {
            warn!(
                addr,
                len, "refused shared memory that could shrink (no F_SEAL_SHRINK)"
            );
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let page = 4096u64;
        if addr == 0
            || addr & (page - 1) != 0
            || len == 0
            || len & (page - 1) != 0
            || len > file_len
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let want = NonZeroUsize::new(addr as usize).ok_or(CudaStatus::ErrorInvalidValue)?;
        let length = NonZeroUsize::new(len as usize).ok_or(CudaStatus::ErrorInvalidValue)?;
        use nix::sys::mman::{MapFlags, ProtFlags};
        let map_at = |at: Option<NonZeroUsize>, flags: MapFlags| {
            // SAFETY: with a hint, MAP_FIXED_NOREPLACE never replaces an existing
            // mapping of this process; without one the kernel picks free addresses. The
            // new mapping is owned by the returned value, which unmaps it.
            unsafe {
                nix::sys::mman::mmap(
                    at,
                    length,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_SHARED | flags,
                    fd,
                    0,
                )
            }
        };
        let got = match map_at(Some(want), MapFlags::MAP_FIXED_NOREPLACE) {
            Ok(got) if got.as_ptr() as u64 == addr => got,
            other => {
                if let Ok(elsewhere) = other {
                    // Old kernels treat NOREPLACE as a hint.
                    // SAFETY: unmapping the mapping just made, which nothing uses.
                    let _ = unsafe { nix::sys::mman::munmap(elsewhere, len as usize) };
                }
                // This process already uses the guest's addresses (the driver's own
                // reservations, most often): map the pages elsewhere. Copies reach them
                // all the same; only their device pointer differs from the guest's
                // pointer, which programs passing pinned pointers straight to kernels
                // would notice.
                let got = map_at(None, MapFlags::empty()).map_err(|e| {
                    warn!(addr, len, "cannot map shared guest memory: {e}");
                    CudaStatus::ErrorNotSupported
                })?;
                info!(
                    addr,
                    len, "shared guest memory mapped away from the guest's address, taken here"
                );
                got
            }
        };
        let mapping = SharedMapping {
            addr: got,
            len: len as usize,
            device_ptr: Some(addr),
            staging: false,
        };
        Ok(mapping)
    }
}

impl SharedMapping {
    pub fn host_addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range this value mapped.
        let _ = unsafe { nix::sys::mman::munmap(self.addr, self.len) };
    }
}

/// Set the done word of a host-function slot (`HostFunctionSignal`) at `here`, an
/// address in a mapping of this process: a stream waiting for the guest to run the
/// function goes on (the session ends, and nothing will run it any more).
pub fn release_host_function(mappings: &SharedMappings, here: u64) {
    let inside = mappings.by_guest_addr.values().any(|m| {
        let start = m.host_addr();
        here >= start && here.saturating_add(8) <= start + m.len as u64
    });
    if !inside || !here.is_multiple_of(4) {
        return;
    }
    let done = (here + 4) as usize as *const std::sync::atomic::AtomicU32;
    // SAFETY: checked just above: 4 aligned bytes inside a live mapping of ours.
    unsafe { (*done).store(1, std::sync::atomic::Ordering::SeqCst) };
}

/// A guest's shared mappings, by the guest's address.
#[derive(Default)]
pub struct SharedMappings {
    pub by_guest_addr: BTreeMap<u64, SharedMapping>,
}

impl SharedMappings {
    /// Whether `[ptr, end)` lies inside one mapping the device can reach, at the
    /// address the device reaches it by: the device pointer it was registered under
    /// (the guest was given it), which is the guest's own address where the pages are
    /// mapped there. The guest's address of pages mapped away from it is not theirs
    /// here (the device would reach whatever this process has there).
    pub fn covers(&self, ptr: u64, end: u64) -> bool {
        let reaches = |m: &SharedMapping| {
            m.device_ptr
                .is_some_and(|d| ptr >= d && end <= d.saturating_add(m.len as u64))
        };
        // Most pages are mapped at the guest's address, found by it at once; the others
        // by a look at each mapping.
        self.by_guest_addr
            .range(..=ptr)
            .next_back()
            .is_some_and(|(_, m)| reaches(m))
            || self.by_guest_addr.values().any(reaches)
    }

    /// Whether the guest already holds its staging area.
    pub fn has_staging(&self) -> bool {
        self.by_guest_addr.values().any(|m| m.staging)
    }
}
