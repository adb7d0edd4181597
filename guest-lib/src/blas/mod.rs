//! The cuBLAS v2 API, forwarded at its own level (cuBLAS never calls the CUDA runtime,
//! so a program's GEMMs reach the bridge only through these functions).
//!
//! **How libcublas.so.13 shares this library's connection.** The functions here live
//! in the same static library as the runtime and the driver, linked into
//! `libcuda.so.1`, exported there under private names (`__vmcuda_cublasSgemm_v2`, ...)
//! with libcuda's private version node `VMCUDA_LIBCUDA` (guest-lib/build-libs.sh),
//! which no program binds by accident. `libcublas.so.13` holds only one jump per
//! function, `cublasSgemm_v2@@libcublas.so.13` to
//! `__vmcuda_cublasSgemm_v2@VMCUDA_LIBCUDA`, and NEEDs `libcuda.so.1`: one client,
//! one registry of streams and allocations, one current device per thread, whichever
//! library a call enters through. A jump leaves every argument where the C caller put
//! it, so the trampolines need no knowledge of the signatures.
//!
//! **Handles** are ids made in the guest (like streams): creating one waits for the
//! host (which makes a real handle and charges its workspace to the guest's quota),
//! everything else about a handle (stream, pointer mode, math mode) is kept here and
//! travels with each GEMM.
//!
//! **Coverage.** The GEMM families have their own request (`gemm.rs`); every other
//! forwarded function (level 1, 2, 3, the batched solvers, `DotEx`, `SgemmEx`) is one
//! line of the declarative table in `vmcuda_wire::blas_table`, from which its export
//! here (`table.rs`), its wire checks and the host's dispatch are generated. The
//! vector and matrix copies are 2D copies of the runtime (`vector.rs`).
//!
//! **Errors.** cuBLAS reports argument errors synchronously, so every GEMM is checked
//! here first ([`vmcuda_wire::blas::BlasGemm::validate`]: `CUBLAS_STATUS_INVALID_VALUE`
//! or `NOT_SUPPORTED`, nothing sent). A checked GEMM is posted without waiting, in
//! order on its stream (behind host functions, through the stream gate), as cuBLAS
//! queues its kernels. A failure on the host (a range outside the guest's memory, a
//! cuBLAS error) is then reported the way asynchronous CUDA errors are: as the CUDA
//! error of the program's next waited-for call (`cudaErrorInvalidValue` for a refused
//! range, `cudaErrorLaunchFailure` for `CUBLAS_STATUS_EXECUTION_FAILED`, see the host's
//! `status_from_cublas`). A GEMM that cannot even be sent (lost connection, sticky
//! error) returns `CUBLAS_STATUS_EXECUTION_FAILED`, as a failed kernel launch does.

mod gemm;
pub(crate) mod handle;
mod table;
mod unsupported;
mod vector;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use vmcuda_wire::blas::status;

/// `cublasStatus_t`.
#[allow(non_camel_case_types)]
pub type cublasStatus_t = u32;

pub type Result<T> = std::result::Result<T, cublasStatus_t>;

/// Run an export's body: no unwinding across the C boundary.
pub fn guard(name: &'static str, body: impl FnOnce() -> Result<()>) -> cublasStatus_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => status::SUCCESS,
        Ok(Err(s)) => s,
        Err(_) => {
            eprintln!("vmcuda: internal error in {name}; reporting CUBLAS_STATUS_INTERNAL_ERROR");
            status::INTERNAL_ERROR
        }
    }
}

/// Define a cuBLAS export under its private name in libcuda.so.1 (see the module
/// documentation); libcublas.so.13 forwards the public name to it.
macro_rules! export {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[export_name = concat!("__vmcuda_", stringify!($name))]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub extern "C" fn $name($($arg: $ty),*) -> $crate::blas::cublasStatus_t {
            $crate::blas::guard(stringify!($name), || $body)
        }
    };
}
pub(crate) use export;
