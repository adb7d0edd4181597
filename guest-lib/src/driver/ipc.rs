//! CUDA IPC between the processes of one VM (`cuIpc*`; NVIDIA's `cudaIpc*` call
//! these). The host mediates (docs/ipc.md): an export is named by a token the host's
//! daemon draws, and the 64-byte handle a program passes to another process holds that
//! token and nothing else (no address, no host data). Another process of the same VM
//! opens it through its own host worker; any other process, of another VM or with
//! forged bytes, is refused.
//!
//! The handles' and descriptors' bytes are [`crate::driver::inner::ipc`]'s.

use vmcuda_wire::op::{
    EventHandle, IpcCloseMemHandle, IpcGetEventHandle, IpcGetMemHandle, IpcOpenEventHandle,
    IpcOpenMemHandle,
};
use vmcuda_wire::CudaStatus;

use super::{check_initialized, export, Result};
use crate::abi::driver::IpcHandle;
use crate::driver::inner::ipc::{
    descriptor, descriptor_token, KIND_ALLOCATION, KIND_EVENT, KIND_MEMORY,
};
use crate::driver::inner::{call, on_host_of, RawHandle};
use crate::{caller, state};

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const LAZY_ENABLE_PEER_ACCESS: u32 = 1;
/// `CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS`: an opened event's flags.
const OPENED_EVENT_FLAGS: u32 = 0x2 | 0x4;

/// A descriptor for the physical allocation exported as `token`
/// (`cuMemExportToShareableHandle`): a sealed memfd holding its handle, which the
/// program may pass to another process as it would the driver's.
pub(crate) fn allocation_descriptor(token: [u8; 16]) -> Result<i32> {
    use std::os::fd::IntoRawFd;
    Ok(descriptor(KIND_ALLOCATION, token)?.into_raw_fd())
}

/// The token in a descriptor [`allocation_descriptor`] made (in this process or
/// another of the VM); any other descriptor is an invalid value.
pub(crate) fn allocation_token(fd: i32) -> Result<[u8; 16]> {
    descriptor_token(fd, KIND_ALLOCATION)
}

/// The handle of the allocation holding `ptr`.
pub(crate) fn get_mem_handle(ptr: u64) -> Result<IpcHandle> {
    let owner = state::registry()
        .device_range(ptr)
        .map(|(_, _, device)| device);
    let reply = on_host_of(owner, || call(&IpcGetMemHandle { ptr }))?;
    Ok(IpcHandle::of(KIND_MEMORY, reply.token))
}

/// Map another process's export on the current device: its address here.
pub(crate) fn open_mem_handle(handle: &IpcHandle, flags: u32) -> Result<u64> {
    if flags & !LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let token = handle.token(KIND_MEMORY)?;
    let opened = call(&IpcOpenMemHandle { token, flags })?;
    // Device memory to this process from now on: copies route to it, and
    // cuMemGetAddressRange and pointer attributes find it.
    state::registry().add_device_range(opened.ptr, opened.size, state::current_device());
    Ok(opened.ptr)
}

/// Close one open of memory `open_mem_handle` mapped.
pub(crate) fn close_mem_handle(ptr: u64) -> Result<()> {
    let owner = state::registry()
        .device_range(ptr)
        .map(|(_, _, device)| device);
    let closed = on_host_of(owner, || call(&IpcCloseMemHandle { ptr }))?;
    if closed.unmapped {
        state::registry().remove_device_range(ptr);
    }
    Ok(())
}

/// The handle of an interprocess event.
pub(crate) fn get_event_handle(event: RawHandle) -> Result<IpcHandle> {
    let owner = state::registry()
        .events
        .get(&(event as u64))
        .map(|(device, _)| *device);
    let req = IpcGetEventHandle {
        event: EventHandle(event as u64),
    };
    let reply = on_host_of(owner, || call(&req))?;
    Ok(IpcHandle::of(KIND_EVENT, reply.token))
}

/// Open another process's interprocess event: a new event of this process.
pub(crate) fn open_event_handle(handle: &IpcHandle) -> Result<RawHandle> {
    let token = handle.token(KIND_EVENT)?;
    let id = state::fresh_id();
    call(&IpcOpenEventHandle {
        event: EventHandle(id),
        token,
    })?;
    state::registry()
        .events
        .insert(id, (state::current_device(), OPENED_EVENT_FLAGS));
    Ok(id as RawHandle)
}

export! {
    fn cuIpcGetMemHandle(handle: *mut IpcHandle, ptr: u64) {
        check_initialized()?;
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = get_mem_handle(ptr)?;
        // SAFETY: by cuIpcGetMemHandle's contract `handle` is writable (NULL refused).
        unsafe { caller::write(handle, made) }
    }
}

/// Both versions of `cuIpcOpenMemHandle`: open `handle` and write its address to `ptr`.
fn open_into(ptr: *mut u64, handle: &IpcHandle, flags: u32) -> Result<()> {
    check_initialized()?;
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let opened = open_mem_handle(handle, flags)?;
    // SAFETY: by cuIpcOpenMemHandle's contract `ptr` is writable (NULL refused).
    unsafe { caller::write(ptr, opened) }
}

export! {
    fn cuIpcOpenMemHandle_v2(ptr: *mut u64, handle: IpcHandle, flags: u32) {
        open_into(ptr, &handle, flags)
    }
}

export! {
    /// The first version: the same call.
    fn cuIpcOpenMemHandle(ptr: *mut u64, handle: IpcHandle, flags: u32) {
        open_into(ptr, &handle, flags)
    }
}

export! {
    fn cuIpcCloseMemHandle(ptr: u64) {
        check_initialized()?;
        close_mem_handle(ptr)
    }
}

export! {
    fn cuIpcGetEventHandle(handle: *mut IpcHandle, event: RawHandle) {
        check_initialized()?;
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = get_event_handle(event)?;
        // SAFETY: by cuIpcGetEventHandle's contract `handle` is writable (NULL refused).
        unsafe { caller::write(handle, made) }
    }
}

export! {
    fn cuIpcOpenEventHandle(event: *mut RawHandle, handle: IpcHandle) {
        check_initialized()?;
        if event.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let opened = open_event_handle(&handle)?;
        // SAFETY: by cuIpcOpenEventHandle's contract `event` is writable (NULL refused).
        unsafe { caller::write(event, opened) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_descriptors_hold_their_token_and_other_files_are_refused() {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let fd = allocation_descriptor([7; 16]).unwrap();
        // SAFETY: allocation_descriptor opened it for the caller, who owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        assert_eq!(allocation_token(owned.as_raw_fd()).unwrap(), [7; 16]);
        // Sealed: the token cannot be rewritten through the descriptor.
        assert!(nix::sys::uio::pwrite(&owned, &[0u8; 4], 16).is_err());
        let other = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            allocation_token(other.as_raw_fd()),
            Err(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(allocation_token(-1), Err(CudaStatus::ErrorInvalidValue));
    }

    #[test]
    fn flags_cuda_does_not_have_are_refused_before_anything_is_sent() {
        let h = IpcHandle::of(KIND_MEMORY, [1; 16]);
        assert_eq!(open_mem_handle(&h, 2), Err(CudaStatus::ErrorInvalidValue));
    }
}
