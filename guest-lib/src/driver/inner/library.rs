//! The runtime's library and kernel calls (`cudaLibrary*`, `cudaGetKernel`,
//! `cudaGetFuncBySymbol`, `cudaKernelSetAttributeForDevice`): where NVIDIA's runtime is
//! a thin layer over the driver, so is this one, over the guest's own driver, so the
//! two cannot disagree. A `cudaKernel_t` is either a kernel the program's fatbinaries
//! registered (its host stub, as `__cudaGetKernel` gives it) or a library's kernel.

use std::ffi::{c_char, c_void};

use vmcuda_wire::CudaStatus;

use super::registration::{is_kernel, kernel};
use super::{guard, RawHandle, Result};
use crate::driver::library as drv;
use crate::driver::result::CUresult;
use crate::{caller, cudaError_t};

/// A driver call's answer as the runtime's.
fn driver(r: CUresult) -> Result<()> {
    match r {
        0 => Ok(()),
        code => Err(CudaStatus(code)),
    }
}

macro_rules! over_driver {
    ($($(#[$m:meta])* $name:ident => $drv:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            $(#[$m])*
            #[allow(clippy::too_many_arguments)]
            pub extern "C" fn $name($($arg: $ty),*) -> cudaError_t {
                guard(stringify!($name), || driver(drv::$drv($($arg),*)))
            }
        )*
    };
}

over_driver! {}

/// `cudaGetKernel`: a registered kernel's `cudaKernel_t` (its host stub).
pub extern "C" fn cudaGetKernel(out: *mut RawHandle, entry: *const c_void) -> cudaError_t {
    super::launch::__cudaGetKernel(out, entry)
}

/// `cudaGetFuncBySymbol`: the driver's `CUfunction` for a registered kernel, which the
/// guest's driver calls (`cuLaunchKernel`, `cuFuncGetAttribute`...) take.
pub extern "C" fn cudaGetFuncBySymbol(out: *mut RawHandle, symbol: *const c_void) -> cudaError_t {
    guard("cudaGetFuncBySymbol", || {
        let (function, params) = kernel(symbol as usize)?;
        let mut name: *const c_char = std::ptr::null();
        crate::driver::keeping_last_error(|| super::launch::cudaFuncGetName(&mut name, symbol))?;
        // SAFETY: cudaFuncGetName hands out a NUL-terminated name kept for the process.
        let name = unsafe { caller::string(name) }?;
        let id = crate::driver::module::adopt_runtime_kernel(function, &name, params)?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, id as RawHandle) }
    })
}

/// Make `device` current for `f`, then the device that was.
pub(crate) fn on_device<T>(device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let was = crate::state::current_device();
    if device == was {
        return f();
    }
    crate::driver::keeping_last_error(|| super::device::cudaSetDevice(device))?;
    let r = f();
    crate::driver::keeping_last_error(|| super::device::cudaSetDevice(was))?;
    r
}

/// `cudaKernelSetAttributeForDevice`: a registered kernel's attribute as
/// `cudaFuncSetAttribute` sets it, on `device`; a library's kernel's as the driver's
/// `cuKernelSetAttribute` does (the attributes are numbered alike).
pub extern "C" fn cudaKernelSetAttributeForDevice(
    kernel_handle: RawHandle,
    attr: i32,
    value: i32,
    device: i32,
) -> cudaError_t {
    guard("cudaKernelSetAttributeForDevice", || {
        if is_kernel(kernel_handle as usize) {
            return on_device(device, || {
                crate::driver::keeping_last_error(|| {
                    super::launch::cudaFuncSetAttribute(kernel_handle, attr, value)
                })
            });
        }
        if kernel_handle.is_null() {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        driver(drv::cuKernelSetAttribute(
            attr,
            value,
            kernel_handle,
            device,
        ))
    })
}
