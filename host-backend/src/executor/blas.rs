//! The BLAS part of the executor seam: cuBLAS handles and GEMMs.
//!
//! The session has already checked every argument and every device range (the
//! operands, the scalars in device pointer mode, and each pointer of a pointer-array
//! batch) before an executor sees a call. The host-memory test double's GEMM, a
//! plain column-major reference computation on the CPU, is
//! `host_memory::reference::gemm`.

use vmcuda_wire::blas::{
    data_type, matrix_span, stored_shape, BlasOption, GemmKind, Operand, Scalars,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::blas_table::TableCall;
use super::{ExecResult, ExecStream};

/// An executor's cuBLAS handle id.
pub type ExecBlas = u64;

/// How a checked GEMM's batch reaches the executor. For pointer arrays, the session
/// has read the arrays from device memory and checked every pointer: the executor
/// uses these copies, never the arrays the guest could still change.
#[derive(Clone, Copy, Debug)]
pub enum ExecBatch<'a> {
    Single,
    Strided {
        count: i64,
    },
    Pointers {
        a: &'a [u64],
        b: &'a [u64],
        c: &'a [u64],
    },
}

/// A checked GEMM, in cuBLAS's terms (column-major).
#[derive(Clone, Copy, Debug)]
pub struct GemmCall<'a> {
    pub stream: ExecStream,
    pub math_mode: u32,
    pub kind: GemmKind,
    pub trans_a: u32,
    pub trans_b: u32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub scalars: &'a Scalars,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub batch: ExecBatch<'a>,
}

pub trait Blas {
    /// Bytes of workspace the session should allocate (charged to the guest) and
    /// give each new handle, so the library does not allocate one behind the quota.
    fn blas_default_workspace(&self) -> u64;
    /// A new handle on the current device.
    fn blas_create(&mut self) -> ExecResult<ExecBlas>;
    fn blas_destroy(&mut self, handle: ExecBlas) -> ExecResult<()>;
    /// Set a handle setting (cuBLAS judges the value).
    fn blas_set_option(
        &mut self,
        handle: ExecBlas,
        option: BlasOption,
        value: i32,
    ) -> ExecResult<()>;
    fn blas_get_option(&mut self, handle: ExecBlas, option: BlasOption) -> ExecResult<i32>;
    /// Give the handle `[ptr, ptr + size)` as its workspace.
    fn blas_set_workspace(&mut self, handle: ExecBlas, ptr: DevicePtr, size: u64)
        -> ExecResult<()>;
    fn blas_gemm(&mut self, handle: ExecBlas, call: &GemmCall<'_>) -> ExecResult<()>;
    /// A function of the table (`vmcuda_wire::blas_table`); host values are read and
    /// written in `call.args`.
    fn blas_call(&mut self, handle: ExecBlas, call: &mut TableCall) -> ExecResult<()>;
}

/// The CUDA status a failing `cublasStatus_t` is reported as: GEMMs are posted, so
/// their failures reach the program as the asynchronous CUDA error of its next
/// waited-for call.
pub fn status_from_cublas(status: u32) -> CudaStatus {
    use vmcuda_wire::blas::status as s;
    match status {
        s::INVALID_VALUE => CudaStatus::ErrorInvalidValue,
        s::ALLOC_FAILED => CudaStatus::ErrorMemoryAllocation,
        s::NOT_SUPPORTED | s::ARCH_MISMATCH => CudaStatus::ErrorNotSupported,
        s::NOT_INITIALIZED => CudaStatus::ErrorInitializationError,
        s::EXECUTION_FAILED => CudaStatus::ErrorLaunchFailure,
        _ => CudaStatus::ErrorUnknown,
    }
}

impl GemmCall<'_> {
    /// Bytes one matrix of A, B and C spans (0 when the GEMM does not read it).
    pub fn spans(&self) -> [u64; 3] {
        let (at, bt, ct) = self.kind.types();
        let size = |t| data_type::size(t).unwrap_or(1);
        if self.m == 0 || self.n == 0 {
            return [0; 3];
        }
        let (ar, ac) = stored_shape(self.trans_a, self.m, self.k);
        let (br, bc) = stored_shape(self.trans_b, self.k, self.n);
        // The session validated the call, so none of these overflow.
        [
            matrix_span(ar, ac, self.a.ld, size(at)).unwrap_or(0),
            matrix_span(br, bc, self.b.ld, size(bt)).unwrap_or(0),
            matrix_span(self.m, self.n, self.c.ld, size(ct)).unwrap_or(0),
        ]
    }
}
