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
    pub(super) fn run_blas_call(&mut self, req: BlasCall) -> HandlerResult<BlasOutputs> {
        let exec = self.blas_entry(req.handle)?.exec;
        let stream = self.handles.stream(req.stream)?;
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
                (BlasArg::Int(v), _) => ExecArg::Int(v.into()),
                (BlasArg::Long(v), _) => ExecArg::Int(v),
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

#[cfg(test)]
mod tests {
    use super::super::blas::tests::{alloc, floats, read, session};
    use super::*;
    use vmcuda_wire::blas::{BlasHandle, POINTER_MODE_DEVICE, POINTER_MODE_HOST};
    use vmcuda_wire::op::*;

    fn call(f: BlasFn, pointer_mode: u32, args: Vec<BlasArg>) -> BlasCall {
        BlasCall {
            handle: BlasHandle(0x100),
            stream: StreamHandle::LEGACY,
            math_mode: 0,
            pointer_mode,
            function: f.id(),
            args,
        }
    }

    /// `cublasSaxpy_v2(n, alpha, x, 1, y, 1)` in host pointer mode.
    fn saxpy(n: i32, x: u64, y: u64) -> BlasCall {
        use BlasArg::{Device, HostIn, Int};
        let alpha = HostIn(floats(&[2.0]));
        let args = vec![Int(n), alpha, Device(x), Int(1), Device(y), Int(1)];
        call(BlasFn::cublasSaxpy_v2, POINTER_MODE_HOST, args)
    }

    #[test]
    fn a_table_call_reaching_outside_the_guests_memory_never_runs() {
        let mut s = session();
        let x = alloc(&mut s, &floats(&[1., 2., 3.]));
        let y = alloc(&mut s, &floats(&[10., 20., 30.]));
        let refused = Some(CudaStatus::ErrorInvalidValue);
        assert_eq!(s.run_blas_call(saxpy(4, x, y)).err(), refused, "one past y");
        assert_eq!(s.run_blas_call(saxpy(3, 0xdead_0000, y)).err(), refused);
        assert_eq!(read(&mut s, y, 12), floats(&[10., 20., 30.]));
        s.run_blas_call(saxpy(3, x, y)).unwrap();
        assert_eq!(read(&mut s, y, 12), floats(&[12., 24., 36.]));
    }

    #[test]
    fn malformed_table_calls_are_refused() {
        let mut s = session();
        let x = alloc(&mut s, &floats(&[1., 2., 3.]));
        let refused = Some(CudaStatus::ErrorInvalidValue);
        let mut unknown = saxpy(3, x, x);
        unknown.function = 0xfff0;
        assert_eq!(s.run_blas_call(unknown).err(), refused);
        // A host scalar where device pointer mode makes cuBLAS read a device pointer.
        let mut mixed = saxpy(3, x, x);
        mixed.pointer_mode = POINTER_MODE_DEVICE;
        assert_eq!(s.run_blas_call(mixed).err(), refused);
        // A device "scalar" in host mode would be read by cuBLAS as host memory.
        let mut mixed = saxpy(3, x, x);
        mixed.args[1] = BlasArg::Device(x);
        assert_eq!(s.run_blas_call(mixed).err(), refused);
        let mut short = saxpy(3, x, x);
        short.args.pop();
        assert_eq!(s.run_blas_call(short).err(), refused);
        let mut stale = saxpy(3, x, x);
        stale.handle = BlasHandle(0x999);
        assert_eq!(
            s.run_blas_call(stale).err(),
            Some(CudaStatus::ErrorInvalidResourceHandle)
        );
    }

    #[test]
    fn host_results_come_back_and_pointer_arrays_are_checked() {
        use BlasArg::{Device, HostOut, Int};
        let mut s = session();
        let x = alloc(&mut s, &floats(&[3., 4.]));
        let nrm2 = call(
            BlasFn::cublasSnrm2_v2,
            POINTER_MODE_HOST,
            vec![Int(2), Device(x), Int(1), HostOut(4)],
        );
        let (out, _) = s.run_blas_call(nrm2).unwrap();
        assert_eq!(out.bytes, floats(&[5.0]));
        // getrfBatched over an array holding a pointer the guest does not own.
        let wild = alloc(&mut s, &0x4242_0000u64.to_le_bytes());
        let infos = alloc(&mut s, &[0; 4]);
        let getrf = call(
            BlasFn::cublasSgetrfBatched,
            POINTER_MODE_HOST,
            vec![
                Int(1),
                Device(wild),
                Int(1),
                Device(0),
                Device(infos),
                Int(1),
            ],
        );
        assert_eq!(
            s.run_blas_call(getrf).err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
    }
}
