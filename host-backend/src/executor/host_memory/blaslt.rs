//! cuBLASLt on the host-memory test double: handles are plain ids, the heuristic
//! offers one placeholder algorithm for what the CPU reference computes
//! ([`super::reference::matmul::cpu_matmul`]) and `CUBLAS_STATUS_NOT_SUPPORTED` for the
//! rest, and matmuls run on the fake device memory in issue order. This makes
//! forwarding testable end to end without a GPU; it is not a GPU result.

use tracing::warn;
use vmcuda_wire::blas::{status, Scalars};
use vmcuda_wire::blaslt::{Descriptor, LtHeuristicReply, LtHeuristicResult, LtProblem, LtShape};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::blaslt::{BlasLt, ExecLt, LtHandleRef, LtMatmulCall};
use super::super::ExecResult;
use super::reference::load;
use super::reference::matmul::{cpu_matmul, cpu_matmul_supports, LtCpuOperands};
use super::HostMemoryExecutor;

/// The one algorithm this executor offers: a marker, not a cuBLASLt algorithm.
const CPU_ALGO: [u64; 8] = [0x766d_6375_6461_4350, 0, 0, 0, 0, 0, 0, 0];

impl HostMemoryExecutor {
    fn check_lt(&self, handle: LtHandleRef) -> ExecResult<()> {
        let known = match handle {
            LtHandleRef::Lt(h) => self.lt_handles.contains(&h),
            LtHandleRef::Blas(h) => self.blas_handles.contains(&h),
        };
        if known {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }

    /// `len` bytes at `ptr`, or nothing for an operand that is not read.
    fn read_operand(&self, ptr: DevicePtr, len: u64) -> ExecResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        Ok(self.slice(ptr, len)?.to_vec())
    }
}

impl BlasLt for HostMemoryExecutor {
    fn lt_create(&mut self) -> ExecResult<ExecLt> {
        let id = self.fresh_id();
        self.lt_handles.insert(id);
        Ok(id)
    }

    fn lt_destroy(&mut self, handle: ExecLt) -> ExecResult<()> {
        if self.lt_handles.remove(&handle) {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }

    fn lt_heuristic(
        &mut self,
        handle: LtHandleRef,
        _problem: &LtProblem,
        shape: &LtShape,
        _preference: &Descriptor,
        _requested: u32,
    ) -> ExecResult<LtHeuristicReply> {
        self.check_lt(handle)?;
        if !cpu_matmul_supports(shape) {
            return Ok(LtHeuristicReply {
                status: status::NOT_SUPPORTED,
                results: Vec::new(),
            });
        }
        Ok(LtHeuristicReply {
            status: status::SUCCESS,
            results: vec![LtHeuristicResult {
                algo: CPU_ALGO,
                workspace_size: 0,
                state: status::SUCCESS,
                waves_count: 1.0,
            }],
        })
    }

    fn lt_matmul(&mut self, handle: LtHandleRef, call: &LtMatmulCall<'_>) -> ExecResult<()> {
        self.check_lt(handle)?;
        self.check_stream(call.stream)?;
        let shape = call.shape;
        if !cpu_matmul_supports(shape) {
            warn!(
                ?shape,
                "cuBLASLt matmul not computed by the host-memory test double"
            );
            return Err(CudaStatus::ErrorNotSupported);
        }
        let (alpha, beta) = match call.scalars {
            Scalars::Host { alpha, beta } => (alpha.clone(), beta.clone()),
            Scalars::Device { alpha, beta } => (
                self.slice(*alpha, shape.scale)?.to_vec(),
                self.slice(*beta, shape.scale)?.to_vec(),
            ),
        };
        let reads_c = load(shape.scale_type, &beta).re != 0.0;
        for i in 0..shape.batch {
            // The session checked every batch's span, so these stay inside.
            let at = |n: usize| {
                let m = &shape.matrices[n];
                (call.ptrs[n] + i * m.stride * m.elem, m.matrix_bytes())
            };
            let (pa, la) = at(0);
            let (pb, lb) = at(1);
            let (pc, lc) = at(2);
            let (pd, ld) = at(3);
            // Inputs are copied out first: they may share an allocation with D.
            let a = self.read_operand(pa, la)?;
            let b = self.read_operand(pb, lb)?;
            let c = self.read_operand(pc, if reads_c { lc } else { 0 })?;
            let bias = match &shape.bias {
                Some(bs) => {
                    self.read_operand(bs.ptr + i * bs.stride * bs.elem, bs.len * bs.elem)?
                }
                None => Vec::new(),
            };
            if ld == 0 {
                continue;
            }
            let d = self.slice_mut(pd, ld)?;
            let ops = LtCpuOperands {
                a: &a,
                b: &b,
                c: &c,
                bias: &bias,
                d,
            };
            cpu_matmul(shape, &alpha, &beta, ops);
        }
        Ok(())
    }
}
