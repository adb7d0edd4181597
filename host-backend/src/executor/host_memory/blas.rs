//! cuBLAS on the host-memory test double: handles are plain ids and GEMMs are
//! computed by the CPU reference ([`super::reference::gemm::cpu_gemm`]) on the fake
//! device memory, in issue order like everything here. This makes forwarding testable
//! end to end without a GPU; it is not a GPU result.

use tracing::warn;
use vmcuda_wire::blas::{BlasOption, Scalars};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::blas::{Blas, ExecBatch, ExecBlas, GemmCall};
use super::super::blas_table::TableCall;
use super::super::ExecResult;
use super::reference::gemm::{cpu_gemm, cpu_gemm_supports, CpuOperands};
use super::reference::table::{cpu_blas_call, CpuMemory};
use super::HostMemoryExecutor;

impl CpuMemory for HostMemoryExecutor {
    fn read(&self, ptr: DevicePtr, len: u64) -> ExecResult<Vec<u8>> {
        self.slice(ptr, len).map(<[u8]>::to_vec)
    }
    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> ExecResult<()> {
        self.slice_mut(ptr, bytes.len() as u64)?
            .copy_from_slice(bytes);
        Ok(())
    }
}

impl HostMemoryExecutor {
    /// One GEMM of a batch, its operands at `a`, `b`, `c`.
    fn gemm_one(
        &mut self,
        call: &GemmCall<'_>,
        (alpha, beta): (&[u8], &[u8]),
        [a, b, c]: [DevicePtr; 3],
    ) -> ExecResult<()> {
        let [sa, sb, sc] = call.spans();
        // A and B are copied out first: they may share an allocation with C.
        let a = self.slice(a, sa)?.to_vec();
        let b = self.slice(b, sb)?.to_vec();
        let c = self.slice_mut(c, sc)?;
        if sc > 0 {
            cpu_gemm(call, alpha, beta, CpuOperands { a: &a, b: &b, c });
        }
        Ok(())
    }
}

impl Blas for HostMemoryExecutor {
    fn blas_default_workspace(&self) -> u64 {
        0
    }

    fn blas_create(&mut self) -> ExecResult<ExecBlas> {
        let id = self.fresh_id();
        self.blas_handles.insert(id);
        Ok(id)
    }

    fn blas_destroy(&mut self, handle: ExecBlas) -> ExecResult<()> {
        if self.blas_handles.remove(&handle) {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }

    fn blas_set_option(
        &mut self,
        handle: ExecBlas,
        option: BlasOption,
        value: i32,
    ) -> ExecResult<()> {
        if !self.blas_handles.contains(&handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // Kept, not acted on: nothing here computes differently by them.
        self.blas_options.insert((handle, option as u32), value);
        Ok(())
    }

    fn blas_get_option(&mut self, handle: ExecBlas, option: BlasOption) -> ExecResult<i32> {
        if !self.blas_handles.contains(&handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // Unset settings read 0, each one's first enumerator.
        Ok(self
            .blas_options
            .get(&(handle, option as u32))
            .copied()
            .unwrap_or(0))
    }

    fn blas_set_workspace(
        &mut self,
        handle: ExecBlas,
        ptr: DevicePtr,
        size: u64,
    ) -> ExecResult<()> {
        if !self.blas_handles.contains(&handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // Nothing computes in it here; it only has to be memory of the guest's.
        self.slice(ptr, size).map(|_| ())
    }

    fn blas_gemm(&mut self, handle: ExecBlas, call: &GemmCall<'_>) -> ExecResult<()> {
        if !self.blas_handles.contains(&handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.check_stream(call.stream)?;
        if !cpu_gemm_supports(call.kind) {
            warn!(kind = ?call.kind, "GEMM type not computed by the host-memory test double");
            return Err(CudaStatus::ErrorNotSupported);
        }
        let (alpha, beta) = match call.scalars {
            Scalars::Host { alpha, beta } => (alpha.clone(), beta.clone()),
            Scalars::Device { alpha, beta } => {
                let size = call
                    .kind
                    .scalar_size()
                    .ok_or(CudaStatus::ErrorNotSupported)?;
                (
                    self.slice(*alpha, size)?.to_vec(),
                    self.slice(*beta, size)?.to_vec(),
                )
            }
        };
        let scalars = (&alpha[..], &beta[..]);
        let (at, bt, ct) = call.kind.types();
        let size = |t| vmcuda_wire::blas::data_type::size(t).unwrap_or(1);
        match call.batch {
            ExecBatch::Single => self.gemm_one(call, scalars, [call.a.ptr, call.b.ptr, call.c.ptr]),
            ExecBatch::Strided { count } => {
                for i in 0..count.max(0) as u64 {
                    // The session checked the whole batch's span, so these stay inside.
                    let at_i = |p: DevicePtr, stride: i64, elem: u64| p + i * stride as u64 * elem;
                    self.gemm_one(
                        call,
                        scalars,
                        [
                            at_i(call.a.ptr, call.a.stride, size(at)),
                            at_i(call.b.ptr, call.b.stride, size(bt)),
                            at_i(call.c.ptr, call.c.stride, size(ct)),
                        ],
                    )?;
                }
                Ok(())
            }
            ExecBatch::Pointers { a, b, c } => {
                for ((a, b), c) in a.iter().zip(b).zip(c) {
                    self.gemm_one(call, scalars, [*a, *b, *c])?;
                }
                Ok(())
            }
        }
    }

    fn blas_call(&mut self, handle: ExecBlas, call: &mut TableCall) -> ExecResult<()> {
        if !self.blas_handles.contains(&handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.check_stream(call.stream)?;
        cpu_blas_call(self, call).inspect_err(|e| {
            if *e == CudaStatus::ErrorNotSupported {
                warn!(
                    function = call.function.name(),
                    "not computed by the host-memory test double"
                );
            }
        })
    }
}
