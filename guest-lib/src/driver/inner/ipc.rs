//! CUDA IPC (`cudaIpc*`): sharing device memory and events with the other processes of
//! the VM. The driver's calls do the work (crate::driver::ipc, docs/ipc.md), as
//! NVIDIA's runtime has them do it on vmcuda's driver.

use std::ffi::c_void;

use vmcuda_wire::CudaStatus;

use super::{guard, RawHandle};
use crate::abi::driver::IpcHandle;
use crate::caller;
use crate::cudaError_t;
use crate::driver::ipc as driver;

pub extern "C" fn cudaIpcGetMemHandle(handle: *mut IpcHandle, ptr: *mut c_void) -> cudaError_t {
    guard("cudaIpcGetMemHandle", || {
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = driver::get_mem_handle(ptr as u64)?;
        // SAFETY: by cudaIpcGetMemHandle's contract `handle` is writable (NULL refused).
        unsafe { caller::write(handle, made) }
    })
}

pub extern "C" fn cudaIpcOpenMemHandle(
    ptr: *mut *mut c_void,
    handle: IpcHandle,
    flags: u32,
) -> cudaError_t {
    guard("cudaIpcOpenMemHandle", || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let opened = driver::open_mem_handle(&handle, flags)?;
        // SAFETY: by cudaIpcOpenMemHandle's contract `ptr` is writable (NULL refused).
        unsafe { caller::write(ptr, opened as *mut c_void) }
    })
}

pub extern "C" fn cudaIpcCloseMemHandle(ptr: *mut c_void) -> cudaError_t {
    guard("cudaIpcCloseMemHandle", || {
        driver::close_mem_handle(ptr as u64)
    })
}

pub extern "C" fn cudaIpcGetEventHandle(handle: *mut IpcHandle, event: RawHandle) -> cudaError_t {
    guard("cudaIpcGetEventHandle", || {
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = driver::get_event_handle(event)?;
        // SAFETY: by cudaIpcGetEventHandle's contract `handle` is writable (NULL refused).
        unsafe { caller::write(handle, made) }
    })
}

pub extern "C" fn cudaIpcOpenEventHandle(event: *mut RawHandle, handle: IpcHandle) -> cudaError_t {
    guard("cudaIpcOpenEventHandle", || {
        if event.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let opened = driver::open_event_handle(&handle)?;
        // SAFETY: by cudaIpcOpenEventHandle's contract `event` is writable (NULL refused).
        unsafe { caller::write(event, opened) }
    })
}
