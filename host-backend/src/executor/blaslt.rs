//! The cuBLASLt part of the executor seam: Lt handles, the heuristic query and
//! matmuls.
//!
//! The session has checked the problem ([`LtProblem::validate`]), every device range
//! it touches and the algorithm (one the executor's heuristic returned) before an
//! executor sees a call. The host-memory test double's matmul, a plain
//! reference computation on the CPU, is `host_memory::reference::matmul`.

use vmcuda_wire::blas::Scalars;
use vmcuda_wire::blaslt::{LtAlgo, LtHeuristicReply, LtProblem, LtShape};
use vmcuda_wire::op::DevicePtr;

use super::blas::ExecBlas;
use super::{ExecResult, ExecStream};

/// An executor's cuBLASLt handle id.
pub type ExecLt = u64;

/// The handle a heuristic or matmul runs with: one made by `cublasLtCreate`, or a
/// cuBLAS handle passed where cuBLASLt wants its own (as PyTorch does; cuBLAS allows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtHandleRef {
    Lt(ExecLt),
    Blas(ExecBlas),
}

/// A checked matmul.
#[derive(Clone, Copy, Debug)]
pub struct LtMatmulCall<'a> {
    pub stream: ExecStream,
    pub problem: &'a LtProblem,
    pub shape: &'a LtShape,
    pub scalars: &'a Scalars,
    /// A, B, C, D.
    pub ptrs: [DevicePtr; 4],
    pub algo: Option<&'a LtAlgo>,
    pub workspace: DevicePtr,
    pub workspace_size: u64,
}

pub trait BlasLt {
    /// A new handle on the current device.
    fn lt_create(&mut self) -> ExecResult<ExecLt>;
    fn lt_destroy(&mut self, handle: ExecLt) -> ExecResult<()>;
    /// Ask for at most `requested` algorithms. A refusal by cuBLASLt is the reply's
    /// status, not an error: the guest returns it as cuBLASLt's answer.
    fn lt_heuristic(
        &mut self,
        handle: LtHandleRef,
        problem: &LtProblem,
        shape: &LtShape,
        preference: &vmcuda_wire::blaslt::Descriptor,
        requested: u32,
    ) -> ExecResult<LtHeuristicReply>;
    fn lt_matmul(&mut self, handle: LtHandleRef, call: &LtMatmulCall<'_>) -> ExecResult<()>;
}
