//! The cuBLASLt API, forwarded at its own level like cuBLAS (see [`crate::blas`] for
//! how the public library, here `libcublasLt.so.13`, reaches these private exports of
//! `libcuda.so.1` and shares its connection).
//!
//! **Descriptors** (matmul descriptors, matrix layouts, preferences) are made, set, read
//! and destroyed here without a round trip ([`desc`]): each is the list of attribute
//! bytes the program set, checked against the sizes cuBLASLt defines
//! (`vmcuda_wire::blaslt`), wrong sizes answering `CUBLAS_STATUS_INVALID_VALUE` as
//! cuBLASLt does.
//!
//! **Handles** are ids made here; creating one waits for the host, which makes a real
//! one. Where cuBLASLt wants a `cublasLtHandle_t` it also takes a `cublasHandle_t` (PyTorch
//! passes its cuBLAS handle and never creates an Lt one), so both are accepted.
//!
//! **Matmuls** ([`matmul`]): the heuristic query sends the whole descriptor state and
//! waits for the host's cuBLASLt; a matmul is checked here
//! ([`vmcuda_wire::blaslt::LtProblem::validate`]) and posted in order on its stream, its
//! host-mode `alpha`/`beta` copied by value. Host-side failures surface as the CUDA
//! error of the program's next waited-for call, as for cuBLAS GEMMs.

mod desc;
mod matmul;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::blaslt::{LtCreate, LtDestroy, LtHandle};
use vmcuda_wire::op::StreamHandle;

use crate::blas::handle::{self, create_status, post_on_device, status_text, CUBLAS_VERSION};
use crate::blas::{export, status, Result};
use crate::{api, caller, state};

/// Guest Lt handles and the device each was made on.
static HANDLES: Mutex<Option<HashMap<u64, i32>>> = Mutex::new(None);

fn handles() -> MutexGuard<'static, Option<HashMap<u64, i32>>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The program's `cublasLtHandle_t`.
pub type Handle = *mut c_void;

/// The device a handle works on: an Lt handle made here, or a cuBLAS handle.
fn device_of(h: Handle) -> Result<i32> {
    if let Some(d) = handles().as_ref().and_then(|m| m.get(&(h as u64)).copied()) {
        return Ok(d);
    }
    handle::get(h.cast()).map(|s| s.device)
}

export! {
    fn cublasLtCreate(out: *mut Handle) {
        if out.is_null() {
            return Err(status::INVALID_VALUE);
        }
        let id = state::fresh_id();
        api::call(&LtCreate { handle: LtHandle(id) }).map_err(create_status)?;
        handles()
            .get_or_insert_with(HashMap::new)
            .insert(id, state::current_device());
        // SAFETY: by cublasLtCreate's contract `out` is NULL or writable.
        unsafe { caller::write(out, id as Handle) }.map_err(|_| status::INVALID_VALUE)
    }
}

export! {
    fn cublasLtDestroy(h: Handle) {
        let device = handles()
            .as_mut()
            .and_then(|m| m.remove(&(h as u64)))
            .ok_or(status::NOT_INITIALIZED)?;
        matmul::forget_handle(LtHandle(h as u64));
        post_on_device(device, StreamHandle::LEGACY, LtDestroy { handle: LtHandle(h as u64) })
    }
}

#[export_name = "__vmcuda_cublasLtGetVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cublasLtGetVersion() -> usize {
    CUBLAS_VERSION as usize
}

#[export_name = "__vmcuda_cublasLtGetCudartVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cublasLtGetCudartVersion() -> usize {
    handle::CUDART_VERSION
}

export! {
    fn cublasLtGetProperty(kind: c_int, out: *mut c_int) {
        // SAFETY: by cublasLtGetProperty's contract `out` is NULL or writable.
        unsafe { handle::property(kind, out) }
    }
}

#[export_name = "__vmcuda_cublasLtGetStatusName"]
#[allow(non_snake_case)]
pub extern "C" fn cublasLtGetStatusName(s: c_int) -> *const c_char {
    status_text(s, true)
}

#[export_name = "__vmcuda_cublasLtGetStatusString"]
#[allow(non_snake_case)]
pub extern "C" fn cublasLtGetStatusString(s: c_int) -> *const c_char {
    status_text(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_unknown_handles() {
        assert_eq!(cublasLtGetVersion(), 131000);
        assert_eq!(cublasLtGetCudartVersion(), 13000);
        assert_eq!(cublasLtDestroy(0x5151 as Handle), status::NOT_INITIALIZED);
        assert_eq!(device_of(0x5152 as Handle), Err(status::NOT_INITIALIZED));
        handles().get_or_insert_with(HashMap::new).insert(0x5153, 1);
        assert_eq!(device_of(0x5153 as Handle), Ok(1));
        let mut v = 0;
        assert_eq!(cublasLtGetProperty(1, &mut v), status::SUCCESS);
        assert_eq!(v, 10);
    }
}
