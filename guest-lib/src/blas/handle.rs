//! cuBLAS handles: made and named here, their settings kept here.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::blas::{
    BlasCreate, BlasDestroy, BlasGetOption, BlasHandle, BlasOption, BlasSetOption,
    BlasSetWorkspace, POINTER_MODE_DEVICE, POINTER_MODE_HOST,
};
use vmcuda_wire::op::StreamHandle;
use vmcuda_wire::CudaStatus;

use super::{export, status, Result};
use crate::api::{self, stream_handle};
use crate::{caller, gate, state};

/// The cuBLAS version this library answers with: that of the libcublas.so.13 whose
/// export list it is checked against (guest-lib/blas/libcublas.so.13.exports).
pub const CUBLAS_VERSION: c_int = 13 * 10000 + 10 * 100;
/// The CUDA runtime version cuBLAS reports being built against.
pub const CUDART_VERSION: usize = 13000;

/// What the program set on a handle.
#[derive(Clone, Copy, Debug)]
pub struct HandleState {
    pub device: i32,
    /// The program's `cudaStream_t`, as given.
    pub stream: usize,
    pub pointer_mode: u32,
    pub math_mode: u32,
    pub atomics_mode: u32,
    /// The program's own workspace, once it set one.
    pub workspace: Option<(u64, u64)>,
    /// The settings of `BlasOption` the program set (by its number), which the host's
    /// handle has too; unset ones are asked of the host.
    pub options: [Option<i32>; BlasOption::ALL.len()],
}

static HANDLES: Mutex<Option<HashMap<u64, HandleState>>> = Mutex::new(None);

fn handles() -> MutexGuard<'static, Option<HashMap<u64, HandleState>>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The program's `cublasHandle_t`: the guest-made id.
pub type Handle = *mut c_void;

/// A handle's settings, or `NOT_INITIALIZED` for a handle this library did not make.
pub fn get(h: Handle) -> Result<HandleState> {
    handles()
        .as_ref()
        .and_then(|m| m.get(&(h as u64)).copied())
        .ok_or(status::NOT_INITIALIZED)
}

fn update(h: Handle, f: impl FnOnce(&mut HandleState) -> Result<()>) -> Result<()> {
    let mut g = handles();
    let s = g
        .as_mut()
        .and_then(|m| m.get_mut(&(h as u64)))
        .ok_or(status::NOT_INITIALIZED)?;
    f(s)
}

/// The wire stream of a handle's stream.
pub fn wire_stream(s: &HandleState) -> StreamHandle {
    stream_handle(s.stream as *mut c_void, false)
}

/// Post a request on the handle's stream, in order behind host functions queued on
/// it; a request that cannot be sent fails as a failed kernel launch does.
pub fn post_on<R>(s: &HandleState, req: R) -> Result<()>
where
    R: vmcuda_wire::op::Request + Send + 'static,
    R::Reply: Default,
{
    post_on_device(s.device, wire_stream(s), req)
}

/// [`post_on`] for a request of no cuBLAS handle (cuBLASLt names its stream per call).
pub fn post_on_device<R>(device: i32, stream: StreamHandle, req: R) -> Result<()>
where
    R: vmcuda_wire::op::Request + Send + 'static,
    R::Reply: Default,
{
    on_device_number(device, || {
        gate::submit(stream, move || api::post(&req, &[]))
    })
    .map_err(|_| status::EXECUTION_FAILED)
}

/// Run `f` with the handle's device current: its requests run there, as cuBLAS runs
/// its work in the handle's context.
pub fn on_device<T>(s: &HandleState, f: impl FnOnce() -> T) -> T {
    on_device_number(s.device, f)
}

fn on_device_number<T>(device: i32, f: impl FnOnce() -> T) -> T {
    let current = state::current_device();
    state::set_current_device(device);
    let r = f();
    state::set_current_device(current);
    r
}

/// The `cublasStatus_t` for a failed create.
pub(crate) fn create_status(e: CudaStatus) -> u32 {
    if e == CudaStatus::ErrorMemoryAllocation {
        status::ALLOC_FAILED
    } else {
        status::NOT_INITIALIZED
    }
}

export! {
    fn cublasCreate_v2(out: *mut Handle) {
        if out.is_null() {
            return Err(status::INVALID_VALUE);
        }
        let id = state::fresh_id();
        api::call(&BlasCreate { handle: BlasHandle(id) }).map_err(create_status)?;
        handles().get_or_insert_with(HashMap::new).insert(
            id,
            HandleState {
                device: state::current_device(),
                stream: 0,
                pointer_mode: POINTER_MODE_HOST,
                math_mode: 0,
                atomics_mode: 0,
                workspace: None,
                options: [None; BlasOption::ALL.len()],
            },
        );
        // SAFETY: by cublasCreate_v2's contract `out` is NULL or writable.
        unsafe { caller::write(out, id as Handle) }.map_err(|_| status::INVALID_VALUE)
    }
}

export! {
    fn cublasDestroy_v2(h: Handle) {
        let s = get(h)?;
        handles().as_mut().map(|m| m.remove(&(h as u64)));
        post_on(&s, BlasDestroy { handle: BlasHandle(h as u64) })
    }
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn version(h: Handle, out: *mut c_int) -> Result<()> {
    get(h)?;
    // SAFETY: as `version`'s caller promised.
    unsafe { caller::write(out, CUBLAS_VERSION) }.map_err(|_| status::INVALID_VALUE)
}

export! {
    fn cublasGetVersion_v2(h: Handle, out: *mut c_int) {
        // SAFETY: by cublasGetVersion_v2's contract `out` is NULL or writable.
        unsafe { version(h, out) }
    }
}
export! {
    fn cublasGetVersion(h: Handle, out: *mut c_int) {
        // SAFETY: by cublasGetVersion's contract `out` is NULL or writable.
        unsafe { version(h, out) }
    }
}

/// `cublasGetProperty` and `cublasLtGetProperty`: `libraryPropertyType` 0 major,
/// 1 minor, 2 patch level.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn property(kind: c_int, out: *mut c_int) -> Result<()> {
    let v = match kind {
        0 => CUBLAS_VERSION / 10000,
        1 => CUBLAS_VERSION / 100 % 100,
        2 => CUBLAS_VERSION % 100,
        _ => return Err(status::INVALID_VALUE),
    };
    // SAFETY: as `property`'s caller promised.
    unsafe { caller::write(out, v) }.map_err(|_| status::INVALID_VALUE)
}

export! {
    fn cublasGetProperty(kind: c_int, out: *mut c_int) {
        // SAFETY: by cublasGetProperty's contract `out` is NULL or writable.
        unsafe { property(kind, out) }
    }
}

#[export_name = "__vmcuda_cublasGetCudartVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cublasGetCudartVersion() -> usize {
    CUDART_VERSION
}

export! {
    fn cublasSetStream_v2(h: Handle, stream: *mut c_void) {
        update(h, |s| {
            s.stream = stream as usize;
            Ok(())
        })
    }
}

export! {
    fn cublasGetStream_v2(h: Handle, out: *mut *mut c_void) {
        let s = get(h)?;
        // SAFETY: by cublasGetStream_v2's contract `out` is NULL or writable.
        unsafe { caller::write(out, s.stream as *mut c_void) }.map_err(|_| status::INVALID_VALUE)
    }
}

export! {
    fn cublasSetPointerMode_v2(h: Handle, mode: c_int) {
        let mode = u32::try_from(mode).map_err(|_| status::INVALID_VALUE)?;
        if mode != POINTER_MODE_HOST && mode != POINTER_MODE_DEVICE {
            return Err(status::INVALID_VALUE);
        }
        update(h, |s| {
            s.pointer_mode = mode;
            Ok(())
        })
    }
}

export! {
    fn cublasGetPointerMode_v2(h: Handle, out: *mut c_int) {
        let s = get(h)?;
        // SAFETY: by cublasGetPointerMode_v2's contract `out` is NULL or writable.
        unsafe { caller::write(out, s.pointer_mode as c_int) }.map_err(|_| status::INVALID_VALUE)
    }
}

/// `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`, a flag over the modes 0..=3.
const MATH_DISALLOW_REDUCED: u32 = 16;

export! {
    fn cublasSetMathMode(h: Handle, mode: c_int) {
        let mode = u32::try_from(mode).map_err(|_| status::INVALID_VALUE)?;
        if mode & !MATH_DISALLOW_REDUCED > 3 {
            return Err(status::INVALID_VALUE);
        }
        update(h, |s| {
            s.math_mode = mode;
            Ok(())
        })
    }
}

export! {
    fn cublasGetMathMode(h: Handle, out: *mut c_int) {
        let s = get(h)?;
        // SAFETY: by cublasGetMathMode's contract `out` is NULL or writable.
        unsafe { caller::write(out, s.math_mode as c_int) }.map_err(|_| status::INVALID_VALUE)
    }
}

export! {
    fn cublasSetAtomicsMode(h: Handle, mode: c_int) {
        let mode = u32::try_from(mode).ok().filter(|m| *m <= 1).ok_or(status::INVALID_VALUE)?;
        // Atomics only ever make some routines faster and less reproducible; the
        // host's handles run without them, which is always allowed.
        update(h, |s| {
            s.atomics_mode = mode;
            Ok(())
        })
    }
}

export! {
    fn cublasGetAtomicsMode(h: Handle, out: *mut c_int) {
        let s = get(h)?;
        // SAFETY: by cublasGetAtomicsMode's contract `out` is NULL or writable.
        unsafe { caller::write(out, s.atomics_mode as c_int) }.map_err(|_| status::INVALID_VALUE)
    }
}

/// Set a handle setting: the host's cuBLAS judges the value, after the stream's
/// earlier calls (which were made under the old one).
fn set_option(h: Handle, option: BlasOption, value: c_int) -> Result<()> {
    let s = get(h)?;
    let stream = wire_stream(&s);
    let req = BlasSetOption {
        handle: BlasHandle(h as u64),
        option: option as u32,
        value,
    };
    on_device(&s, || {
        gate::sync_stream(stream)?;
        api::call(&req)
    })
    .map_err(super::table::status_of)?;
    update(h, |s| {
        s.options[option as usize] = Some(value);
        Ok(())
    })
}

/// Read a handle setting: the value the program set, else the host handle's.
fn get_option(h: Handle, option: BlasOption, out: *mut c_int) -> Result<()> {
    let s = get(h)?;
    if out.is_null() {
        return Err(status::INVALID_VALUE);
    }
    let value = match s.options[option as usize] {
        Some(v) => v,
        None => {
            let req = BlasGetOption {
                handle: BlasHandle(h as u64),
                option: option as u32,
            };
            on_device(&s, || api::call(&req))
                .map_err(super::table::status_of)?
                .value
        }
    };
    // SAFETY: by the getter's contract `out` is NULL (refused above) or writable.
    unsafe { caller::write(out, value) }.map_err(|_| status::INVALID_VALUE)
}

/// `cublasSet<option>` / `cublasGet<option>` of every `BlasOption`.
macro_rules! option_exports {
    ($($option:ident: $set:ident, $get:ident;)*) => {$(
        export! {
            fn $set(h: Handle, value: c_int) {
                set_option(h, BlasOption::$option, value)
            }
        }
        export! {
            fn $get(h: Handle, out: *mut c_int) {
                get_option(h, BlasOption::$option, out)
            }
        }
    )*};
}

option_exports! {
    EnvironmentMode: cublasSetEnvironmentMode, cublasGetEnvironmentMode;
    EmulationStrategy: cublasSetEmulationStrategy, cublasGetEmulationStrategy;
    EmulationSpecialValuesSupport: cublasSetEmulationSpecialValuesSupport,
        cublasGetEmulationSpecialValuesSupport;
    FixedPointEmulationMantissaControl: cublasSetFixedPointEmulationMantissaControl,
        cublasGetFixedPointEmulationMantissaControl;
    FixedPointEmulationMaxMantissaBitCount: cublasSetFixedPointEmulationMaxMantissaBitCount,
        cublasGetFixedPointEmulationMaxMantissaBitCount;
    FixedPointEmulationMantissaBitOffset: cublasSetFixedPointEmulationMantissaBitOffset,
        cublasGetFixedPointEmulationMantissaBitOffset;
}

/// cuBLAS requires workspaces aligned to 256 bytes.
const WORKSPACE_ALIGN: u64 = 256;

export! {
    fn cublasSetWorkspace_v2(h: Handle, ptr: *mut c_void, size: usize) {
        let (ptr, size) = (ptr as u64, size as u64);
        if (ptr == 0 && size > 0) || ptr % WORKSPACE_ALIGN != 0 {
            return Err(status::INVALID_VALUE);
        }
        let s = get(h)?;
        // PyTorch sets the same workspace before every GEMM: only changes travel.
        if s.workspace == Some((ptr, size)) {
            return Ok(());
        }
        update(h, |s| {
            s.workspace = Some((ptr, size));
            Ok(())
        })?;
        post_on(&s, BlasSetWorkspace { handle: BlasHandle(h as u64), ptr, size })
    }
}

/// (name, description) of every `cublasStatus_t`, NUL-terminated.
const STATUS_TEXT: &[(u32, &str, &str)] = &[
    (0, "CUBLAS_STATUS_SUCCESS\0", "success\0"),
    (
        1,
        "CUBLAS_STATUS_NOT_INITIALIZED\0",
        "the library was not initialized\0",
    ),
    (
        3,
        "CUBLAS_STATUS_ALLOC_FAILED\0",
        "the resource allocation failed\0",
    ),
    (
        7,
        "CUBLAS_STATUS_INVALID_VALUE\0",
        "an invalid numeric value was used as an argument\0",
    ),
    (
        8,
        "CUBLAS_STATUS_ARCH_MISMATCH\0",
        "an absent device architectural feature is required\0",
    ),
    (
        11,
        "CUBLAS_STATUS_MAPPING_ERROR\0",
        "an access to GPU memory space failed\0",
    ),
    (
        13,
        "CUBLAS_STATUS_EXECUTION_FAILED\0",
        "the GPU program failed to execute\0",
    ),
    (
        14,
        "CUBLAS_STATUS_INTERNAL_ERROR\0",
        "an internal operation failed\0",
    ),
    (
        15,
        "CUBLAS_STATUS_NOT_SUPPORTED\0",
        "the functionality requested is not supported\0",
    ),
    (
        16,
        "CUBLAS_STATUS_LICENSE_ERROR\0",
        "error detected trying to check the license\0",
    ),
];

pub(crate) fn status_text(s: c_int, name: bool) -> *const c_char {
    let entry = STATUS_TEXT.iter().find(|e| e.0 as c_int == s);
    let text = match entry {
        Some(e) if name => e.1,
        Some(e) => e.2,
        None if name => "CUBLAS_STATUS_UNKNOWN\0",
        None => "unknown error\0",
    };
    text.as_ptr().cast()
}

#[export_name = "__vmcuda_cublasGetStatusName"]
#[allow(non_snake_case)]
pub extern "C" fn cublasGetStatusName(s: c_int) -> *const c_char {
    status_text(s, true)
}

#[export_name = "__vmcuda_cublasGetStatusString"]
#[allow(non_snake_case)]
pub extern "C" fn cublasGetStatusString(s: c_int) -> *const c_char {
    status_text(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts_are_c_strings() {
        for (code, name, text) in STATUS_TEXT {
            assert!(name.ends_with('\0') && text.ends_with('\0'), "{code}");
            assert_eq!(status_text(*code as c_int, true), name.as_ptr().cast());
        }
        // SAFETY: a static NUL-terminated string.
        let unknown = unsafe { std::ffi::CStr::from_ptr(status_text(99, true)) };
        assert_eq!(unknown.to_str(), Ok("CUBLAS_STATUS_UNKNOWN"));
    }

    #[test]
    fn settings_need_a_handle_made_here_and_valid_modes() {
        let bogus = 0x7777 as Handle;
        assert_eq!(cublasSetPointerMode_v2(bogus, 1), status::NOT_INITIALIZED);
        handles().get_or_insert_with(HashMap::new).insert(
            0x7778,
            HandleState {
                device: 0,
                stream: 0,
                pointer_mode: 0,
                math_mode: 0,
                atomics_mode: 0,
                workspace: None,
                options: [None; BlasOption::ALL.len()],
            },
        );
        let h = 0x7778 as Handle;
        assert_eq!(cublasSetPointerMode_v2(h, 2), status::INVALID_VALUE);
        assert_eq!(cublasSetPointerMode_v2(h, 1), status::SUCCESS);
        let mut mode = 0;
        assert_eq!(cublasGetPointerMode_v2(h, &mut mode), status::SUCCESS);
        assert_eq!(mode, 1);
        assert_eq!(cublasSetMathMode(h, 3 | 16), status::SUCCESS);
        assert_eq!(cublasSetMathMode(h, 4), status::INVALID_VALUE);
        assert_eq!(
            cublasSetWorkspace_v2(h, 0x1001 as *mut c_void, 64),
            status::INVALID_VALUE,
            "misaligned workspace"
        );
        let mut v = 0;
        assert_eq!(cublasGetProperty(0, &mut v), status::SUCCESS);
        assert_eq!(v, 13);
    }
}
