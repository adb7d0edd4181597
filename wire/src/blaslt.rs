//! cuBLASLt on the wire: the state of matmul descriptors, matrix layouts and
//! preferences, the heuristic query and the matmul, and the checks and extents both
//! ends compute from them.
//!
//! Descriptors live in the guest (creating and setting them costs no round trip); a
//! [`Descriptor`] is the list of attributes the program set, as the bytes cuBLASLt
//! defines for each ([`MATMUL_DESC_ATTRS`], [`LAYOUT_ATTRS`], [`PREFERENCE_ATTRS`]).
//! The heuristic query and every matmul carry the whole state; the host makes real
//! descriptors from it. [`LtProblem::validate`] is the one check of a matmul's
//! shapes, types and memory extents: the guest runs it before it sends anything (so
//! argument errors are synchronous, as in cuBLASLt), the host runs it again (a guest is
//! not trusted) and refuses every operand that reaches outside the guest's memory.
//!
//! Only what the bridge can check is forwarded: column- and row-major layouts, strided
//! batches, host or device `alpha`/`beta`, epilogues without an auxiliary buffer, and
//! scale and amax pointers of a single value. The rest is `CUBLAS_STATUS_NOT_SUPPORTED`.
//!
//! One file per concern: this one holds the handle and the requests and replies;
//! `attr` the attribute tables and [`Descriptor`]; `shape` [`LtProblem::validate`] and
//! what it finds out about a matmul.

mod attr;
mod shape;
#[cfg(test)]
mod tests;

pub use attr::{
    desc, epilogue, layout, pref, spec, AttrError, AttrKind, AttrSpec, Descriptor, LAYOUT_ATTRS,
    MATMUL_DESC_ATTRS, POINTER_MODE_DEVICE, POINTER_MODE_HOST, PREFERENCE_ATTRS,
};
pub use shape::{BiasInfo, LtArgError, LtProblem, LtShape, MatrixInfo};

use serde::{Deserialize, Serialize};

use crate::blas::Scalars;
use crate::handle::{DevicePtr, StreamHandle};

/// A cuBLASLt handle named by the guest. cuBLASLt also takes a `cublasHandle_t` where
/// it wants a `cublasLtHandle_t` (PyTorch passes its cuBLAS handle), so the host looks
/// an id up among the guest's cuBLAS handles when it is no Lt handle.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct LtHandle(pub u64);

/// `cublasLtMatmulAlgo_t`: 64 opaque bytes, as the host's cuBLASLt made them.
pub type LtAlgo = [u64; 8];

/// One `cublasLtMatmulHeuristicResult_t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LtHeuristicResult {
    pub algo: LtAlgo,
    pub workspace_size: u64,
    pub state: u32,
    pub waves_count: f32,
}

/// `cublasLtMatmulHeuristicResult_t`, field for field: what the guest writes for the
/// program and the host gets from its cuBLASLt.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RawHeuristicResult {
    pub algo: LtAlgo,
    pub workspace_size: usize,
    pub state: i32,
    pub waves_count: f32,
    pub reserved: [i32; 4],
}

/// The most results one heuristic query asks the host for.
pub const MAX_HEURISTIC_RESULTS: u32 = 32;

/// `cublasLtCreate`: the guest names the handle; the host makes a real one.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtCreate {
    pub handle: LtHandle,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtDestroy {
    pub handle: LtHandle,
}

/// `cublasLtMatmulAlgoGetHeuristic`: answered by the host's cuBLASLt.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtHeuristic {
    pub handle: LtHandle,
    pub problem: LtProblem,
    pub preference: Descriptor,
    /// 1..=[`MAX_HEURISTIC_RESULTS`].
    pub requested: u32,
}

/// The heuristic's `cublasStatus_t` and its results (empty unless it succeeded).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LtHeuristicReply {
    pub status: u32,
    pub results: Vec<LtHeuristicResult>,
}

/// `cublasLtMatmul`, posted on `stream`: the descriptor state, `alpha`/`beta` (by
/// value in host pointer mode), the device pointers, the algorithm (one the host's
/// heuristic returned) and the workspace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtMatmul {
    pub handle: LtHandle,
    pub stream: StreamHandle,
    pub problem: LtProblem,
    pub scalars: Scalars,
    /// A, B, C, D.
    pub ptrs: [DevicePtr; 4],
    pub algo: Option<LtAlgo>,
    pub workspace: DevicePtr,
    pub workspace_size: u64,
}
