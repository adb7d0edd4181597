//! The exports of every table function (`vmcuda_wire::blas_table`), generated from
//! its line: `__vmcuda_<name>` with the C signature (the handle, then a C `int`, a
//! 64-bit integer or a pointer per argument), running [`call`].
//!
//! A call is checked here first with the table's checks (cuBLAS's synchronous
//! argument errors, `CUBLAS_STATUS_INVALID_VALUE`, nothing sent; a solver also gets
//! `-position` in its host `info`, as cuBLAS reports it). Host scalars are read at
//! the call, as cuBLAS reads them. A call that brings host values back (a result or
//! in/out scalar in host pointer mode, a solver's `info`) waits for the stream's
//! earlier work and for its reply, as cuBLAS blocks then; every other call is posted
//! in order on the handle's stream like the GEMMs, its failure surfacing at the next
//! waited-for call.

use std::ffi::{c_int, c_void};

use vmcuda_wire::blas::{BlasHandle, POINTER_MODE_HOST};
use vmcuda_wire::blas_table::{
    ArgKind, BlasArg, BlasArgError, BlasCall, BlasCallWaited, BlasFn, Extent,
};
use vmcuda_wire::CudaStatus;

use super::handle::{self, Handle};
use super::{cublasStatus_t, guard, status, Result};
use crate::{api, caller, gate};

/// An argument as the program passed it.
#[derive(Clone, Copy)]
pub enum RawArg {
    Int(c_int),
    Long(i64),
    Ptr(usize),
}

impl From<i64> for RawArg {
    fn from(v: i64) -> Self {
        RawArg::Long(v)
    }
}

impl From<c_int> for RawArg {
    fn from(v: c_int) -> Self {
        RawArg::Int(v)
    }
}

impl From<*mut c_void> for RawArg {
    fn from(p: *mut c_void) -> Self {
        RawArg::Ptr(p as usize)
    }
}

impl RawArg {
    fn ptr(self) -> usize {
        match self {
            RawArg::Ptr(p) => p,
            RawArg::Int(_) | RawArg::Long(_) => 0,
        }
    }
}

/// The `cublasStatus_t` of a waited call the host refused or cuBLAS failed (the
/// inverse of the host's `status_from_cublas`).
pub(super) fn status_of(e: CudaStatus) -> cublasStatus_t {
    match e {
        CudaStatus::ErrorInvalidValue => status::INVALID_VALUE,
        CudaStatus::ErrorMemoryAllocation => status::ALLOC_FAILED,
        CudaStatus::ErrorNotSupported => status::NOT_SUPPORTED,
        CudaStatus::ErrorInitializationError => status::NOT_INITIALIZED,
        CudaStatus::ErrorLaunchFailure => status::EXECUTION_FAILED,
        _ => status::INTERNAL_ERROR,
    }
}

/// cuBLAS's own words on stdout for a refused level-2/3 routine (the reference BLAS's
/// `xerbla`, as for the GEMMs): the routine's BLAS name and the first illegal argument,
/// numbered from the one after the handle. Checked against cuBLAS on the H200 for
/// STRSV and SSYRK; the batched and `Ex` extensions are not reference-BLAS routines.
fn report_illegal_parameter(name: &str, position: usize) {
    let core = name.trim_start_matches("cublas").trim_end_matches("_v2");
    if core.contains("Batched") || core.ends_with("Ex") {
        return;
    }
    let line = format!(
        " ** On entry to {}  parameter number {position} had an illegal value\n",
        core.to_uppercase()
    );
    crate::client::write_console(1, line.as_bytes());
}

/// Check, marshal and forward one table call (see the module documentation).
///
/// # Safety
/// Each pointer argument in `raw` is NULL or, where `f`'s table line makes it a host
/// buffer (a host-mode scalar or output, a solver's `info`), valid for the extent its
/// line gives it (cuBLAS's contract for `f`).
pub unsafe fn call(h: Handle, f: BlasFn, raw: &[RawArg]) -> Result<()> {
    let s = handle::get(h)?;
    let mut args: Vec<BlasArg> = raw
        .iter()
        .map(|r| match *r {
            RawArg::Int(v) => BlasArg::Int(v),
            RawArg::Long(v) => BlasArg::Long(v),
            RawArg::Ptr(p) => BlasArg::Device(p as u64),
        })
        .collect();
    let kinds = f.kinds();
    let extents = f.layout(&args).map_err(|e| {
        if let BlasArgError::Invalid(name, position) = e {
            report_illegal_parameter(name, position);
            for (kind, r) in kinds.iter().zip(raw) {
                if *kind == ArgKind::Info {
                    // SAFETY: as `call`'s caller promised.
                    unsafe { caller::write_opt(r.ptr() as *mut c_int, -(position as c_int)) };
                }
            }
        }
        e.status()
    })?;
    let host = s.pointer_mode == POINTER_MODE_HOST;
    for (i, (kind, r)) in kinds.iter().zip(raw).enumerate() {
        let bytes = match extents[i] {
            Extent::Bytes(b) => b as usize,
            _ => 0,
        };
        let p = r.ptr();
        let read = || {
            // SAFETY: as `call`'s caller promised.
            unsafe { caller::bytes(p as *const u8, bytes) }
                .map(<[u8]>::to_vec)
                .map_err(|_| status::INVALID_VALUE)
        };
        args[i] = match kind {
            ArgKind::Scalar if host => BlasArg::HostIn(read()?),
            ArgKind::InOut if host => BlasArg::HostInOut(read()?),
            ArgKind::Out | ArgKind::Info if host || *kind == ArgKind::Info => {
                if p == 0 {
                    return Err(status::INVALID_VALUE);
                }
                BlasArg::HostOut(bytes as u32)
            }
            _ => continue,
        };
    }
    let back: Vec<(usize, usize)> = args
        .iter()
        .zip(raw)
        .zip(&extents)
        .filter(|((a, _), _)| a.returns())
        .map(|((_, r), e)| match e {
            Extent::Bytes(b) => (r.ptr(), *b as usize),
            _ => (r.ptr(), 0),
        })
        .collect();
    let req = BlasCall {
        handle: BlasHandle(h as u64),
        stream: handle::wire_stream(&s),
        math_mode: s.math_mode,
        pointer_mode: s.pointer_mode,
        function: f.id(),
        args,
    };
    if back.is_empty() {
        return handle::post_on(&s, req);
    }
    let stream = handle::wire_stream(&s);
    let outputs = handle::on_device(&s, || {
        gate::sync_stream(stream)?;
        api::call(&BlasCallWaited(req))
    })
    .map_err(status_of)?;
    let mut at = 0;
    for (p, len) in back {
        let value = outputs
            .bytes
            .get(at..at + len)
            .ok_or(status::INTERNAL_ERROR)?;
        // SAFETY: as `call`'s caller promised.
        unsafe { caller::copy_host(p as *mut u8, value.as_ptr(), len) }
            .map_err(|_| status::INVALID_VALUE)?;
        at += len;
    }
    Ok(())
}

/// The guest side of the table: one export per line.
macro_rules! guest_exports {
    ($(
        $id:literal $name:ident [$p:ident $family:ident] (
            $( $arg:ident : $kind:ident $( ( $($spec:tt)* ) )? $( if ( $($cond:tt)* ) )? ),* $(,)?
        );
    )*) => {$(
        #[export_name = concat!("__vmcuda_", stringify!($name))]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub extern "C" fn $name(handle: Handle, $( $arg: vmcuda_wire::blas_c_type!($kind) ),*) -> cublasStatus_t {
            // SAFETY: cuBLAS's contract for this function: each host buffer its line
            // names is NULL or valid for the extent the line gives it.
            guard(stringify!($name), || unsafe { call(handle, BlasFn::$name, &[$( RawArg::from($arg) ),*]) })
        }
    )*};
}

vmcuda_wire::blas_table!(guest_exports);
