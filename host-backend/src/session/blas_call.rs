//! The table functions (`vmcuda_wire::blas_table`): validated again here with the
//! table's own checks (a guest is not trusted), every argument checked to travel as
//! its kind and the handle's pointer mode require (a host value never goes where
//! cuBLAS takes a device pointer, nor the reverse), every device extent checked
//! against the guest's own memory, and every pointer of a pointer array read and
//! checked, before the executor sees the call. Refusals are `cudaErrorInvalidValue`
//! and logged: for a posted call it reaches the program at its next waited-for call.

use tracing::warn;
use vmcuda_wire::blas_table::{ArgKind, BlasArg, BlasCall, BlasFn, BlasOutputs, Extent};
use vmcuda_wire::op::HandlerResult;
use vmcuda_wire::CudaStatus;

use crate::executor::blas_table::{ExecArg, TableCall};

use super::Session;

impl Session {
    /// Run a table call; the host values it returns, concatenated in argument order.
    pub(super) fn handle_blas_call(&mut self, req: BlasCall) -> HandlerResult<BlasOutputs> {
        let exec = self.blas_entry(req.handle)?.exec;
        let stream = self.stream(req.stream)?;
        let function = BlasFn::from_id(req.function).ok_or_else(|| {
            warn!(client = %self.client, id = req.function, "unknown cuBLAS function id");
            CudaStatus::ErrorInvalidValue
        })?;
        let extents = function
            .validate(&req.args, req.pointer_mode)
            .map_err(|e| {
                warn!(client = %self.client, "refused a cuBLAS call: {e}");
                CudaStatus::ErrorInvalidValue
            })?;
        let returns: Vec<bool> = req.args.iter().map(BlasArg::returns).collect();
        let mut args = Vec::with_capacity(req.args.len());
        for ((arg, extent), kind) in req.args.into_iter().zip(&extents).zip(function.kinds()) {
            args.push(match (arg, *extent) {
                (BlasArg::Int(v), _) => ExecArg::Int(v),
                (BlasArg::Device(p), Extent::Pointers { count, each }) => {
                    let array_bytes = count.checked_mul(8).ok_or(CudaStatus::ErrorInvalidValue)?;
                    self.check_range(p, array_bytes)?;
                    ExecArg::Pointers(self.checked_pointers(p, count as usize, each, stream)?)
                }
                (BlasArg::Device(p), Extent::Bytes(bytes)) => {
                    // cuBLAS takes NULL for an optional array (no pivoting, no infos).
                    if !(*kind == ArgKind::OptDevice && p == 0) {
                        self.check_range(p, bytes)?;
                    }
                    ExecArg::Device(p)
                }
                (BlasArg::HostIn(v) | BlasArg::HostInOut(v), _) => ExecArg::Host(v),
                (BlasArg::HostOut(n), _) => ExecArg::Host(vec![0; n as usize]),
                (BlasArg::Device(_), Extent::None) => return Err(CudaStatus::ErrorInvalidValue),
            });
        }
        let mut call = TableCall {
            stream,
            math_mode: req.math_mode,
            pointer_mode: req.pointer_mode,
            function,
            args,
            extents,
        };
        self.exec.blas_call(exec, &mut call)?;
        let mut bytes = Vec::new();
        for (arg, back) in call.args.iter().zip(returns) {
            if let (ExecArg::Host(v), true) = (arg, back) {
                bytes.extend_from_slice(v);
            }
        }
        Ok((BlasOutputs { bytes }, Vec::new()))
    }
}
