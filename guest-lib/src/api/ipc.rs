//! CUDA IPC (`cudaIpc*`): sharing device memory and events with other processes.
//!
//! A VM guest's device memory lives in a host worker process of its own; no other
//! guest process can map it. Every IPC call answers `cudaErrorNotSupported` (and says
//! so once on stderr) instead of handing out a handle nobody could open. PyTorch uses
//! IPC only to share CUDA tensors between processes (`torch.multiprocessing`), where
//! this error surfaces as a clear failure of that sharing.

use std::ffi::c_void;
use std::sync::Once;

use vmcuda_wire::CudaStatus;

use super::{guard, RawHandle};
use crate::cudaError_t;

/// `cudaIpcMemHandle_t` / `cudaIpcEventHandle_t`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    reserved: [u8; 64],
}

fn not_supported(name: &'static str) -> cudaError_t {
    static SAID: Once = Once::new();
    guard(name, || {
        SAID.call_once(|| {
            eprintln!(
                "vmcuda: {name}: CUDA IPC is not supported in a VM guest (device memory cannot be shared with other processes); answering cudaErrorNotSupported"
            )
        });
        Err(CudaStatus::ErrorNotSupported)
    })
}

#[no_mangle]
pub extern "C" fn cudaIpcGetMemHandle(_handle: *mut IpcHandle, _ptr: *mut c_void) -> cudaError_t {
    not_supported("cudaIpcGetMemHandle")
}

#[no_mangle]
pub extern "C" fn cudaIpcOpenMemHandle(
    _ptr: *mut *mut c_void,
    _handle: IpcHandle,
    _flags: u32,
) -> cudaError_t {
    not_supported("cudaIpcOpenMemHandle")
}

#[no_mangle]
pub extern "C" fn cudaIpcCloseMemHandle(_ptr: *mut c_void) -> cudaError_t {
    not_supported("cudaIpcCloseMemHandle")
}

#[no_mangle]
pub extern "C" fn cudaIpcGetEventHandle(_handle: *mut IpcHandle, _event: RawHandle) -> cudaError_t {
    not_supported("cudaIpcGetEventHandle")
}

#[no_mangle]
pub extern "C" fn cudaIpcOpenEventHandle(
    _event: *mut RawHandle,
    _handle: IpcHandle,
) -> cudaError_t {
    not_supported("cudaIpcOpenEventHandle")
}
