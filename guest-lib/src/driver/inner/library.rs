//! The runtime's library and kernel calls (`cudaLibrary*`, `cudaGetKernel`,
//! `cudaGetFuncBySymbol`, `cudaKernelSetAttributeForDevice`): where NVIDIA's runtime is
//! a thin layer over the driver, so is this one, over the guest's own driver, so the
//! two cannot disagree. A `cudaKernel_t` is either a kernel the program's fatbinaries
//! registered (its host stub, as `__cudaGetKernel` gives it) or a library's kernel.

use super::Result;

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
