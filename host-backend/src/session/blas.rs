//! cuBLAS requests: the guest's handles, and every GEMM checked before the executor
//! sees it.
//!
//! Handles are named by the guest (like streams) and mapped here onto the executor's.
//! A new handle gets a workspace this session allocates and charges to the guest's
//! quota, so the library does not allocate one behind it; a workspace the program
//! sets itself must be its own memory. A GEMM is validated again with the guest's own
//! check ([`BlasGemm::validate`]), then every operand's span, each scalar in device
//! pointer mode, and for pointer-array batches every pointer in the arrays (read from
//! device memory here and handed to the executor as checked copies) must lie in the
//! guest's own memory. Anything else is refused with `cudaErrorInvalidValue` and never
//! runs; GEMMs are posted, so the refusal reaches the program at its next waited-for
//! call, as an asynchronous CUDA error.

use std::collections::HashMap;

use tracing::warn;
use vmcuda_wire::blas::{
    Batch, BlasCreate, BlasDestroy, BlasGemm, BlasGetOption, BlasHandle, BlasOption,
    BlasOptionValue, BlasSetOption, BlasSetWorkspace, Scalars,
};
use vmcuda_wire::op::{BlasCall, BlasCallWaited, BlasOps, BlasOutputs, CallContext};
use vmcuda_wire::op::{DevicePtr, HandlerResult};
use vmcuda_wire::CudaStatus;

use crate::executor::blas::{ExecBatch, ExecBlas, GemmCall};

use super::{nothing, Session};

/// One guest handle: the executor's handle and the workspace the session allocated
/// for it (pointer, bytes), if it still has it.
pub(super) struct BlasEntry {
    pub(super) exec: ExecBlas,
    workspace: Option<(DevicePtr, u64)>,
    /// The device it was made on.
    device: i32,
}

#[derive(Default)]
pub(super) struct BlasHandles {
    handles: HashMap<BlasHandle, BlasEntry>,
}

impl BlasHandles {
    /// Forget the handles made on `device` (it was reset: the executor's are gone);
    /// their workspaces.
    pub(super) fn clear(&mut self, device: i32) -> Vec<(DevicePtr, u64)> {
        let mut workspaces = Vec::new();
        self.handles.retain(|_, e| {
            if e.device != device {
                return true;
            }
            workspaces.extend(e.workspace);
            false
        });
        workspaces
    }
}

impl Session {
    pub(super) fn blas_entry(&self, h: BlasHandle) -> Result<&BlasEntry, CudaStatus> {
        self.blas
            .handles
            .get(&h)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    /// The executor's handle for a guest cuBLAS handle (cuBLASLt takes these too).
    pub(super) fn blas_exec(&self, h: BlasHandle) -> Option<ExecBlas> {
        self.blas.handles.get(&h).map(|e| e.exec)
    }

    /// Give back a workspace this session allocated.
    fn release_workspace(&mut self, (ptr, bytes): (DevicePtr, u64)) {
        let _ = self.exec.free(ptr);
        self.accounts.refund(bytes);
        self.accounts
            .set_device_bytes(self.accounts.device_bytes.saturating_sub(bytes));
    }

    /// Destroy every handle (the session ends).
    pub(super) fn blas_drop_all(&mut self) {
        for (_, entry) in std::mem::take(&mut self.blas.handles) {
            let _ = self.exec.blas_destroy(entry.exec);
            if let Some(ws) = entry.workspace {
                self.release_workspace(ws);
            }
        }
    }

    /// Forget `device`'s handles after its reset, giving their workspaces' quota back.
    pub(super) fn blas_reset(&mut self, device: i32) {
        for (_, bytes) in self.blas.clear(device) {
            self.accounts.refund(bytes);
        }
    }

    /// Read a pointer array of `count` entries from the guest's device memory and
    /// check that each pointer's matrix (`span` bytes) is the guest's own.
    pub(super) fn checked_pointers(
        &mut self,
        array: DevicePtr,
        count: usize,
        span: u64,
        stream: u64,
    ) -> Result<Vec<u64>, CudaStatus> {
        let mut bytes = vec![0u8; count * 8];
        let array = self.check_range(array, bytes.len() as u64)?;
        // Waits for earlier work on the stream, which may be what wrote the array.
        self.exec.copy_dtoh(&mut bytes, array, stream, false)?;
        let ptrs: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunks")))
            .collect();
        for &p in &ptrs {
            self.check_range(p, span)?;
        }
        Ok(ptrs)
    }
}

impl BlasOps for Session {
    fn blas_create(&mut self, ctx: &CallContext, req: BlasCreate, _: &[u8]) -> HandlerResult<()> {
        if self.blas.handles.contains_key(&req.handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.accounts.check_count(
            "cuBLAS handle",
            self.blas.handles.len(),
            self.grant.max_streams,
        )?;
        let exec = self.exec.blas_create()?;
        let bytes = self.exec.blas_default_workspace();
        let mut workspace = None;
        if bytes > 0 {
            let made = self.accounts.charge(bytes).and_then(|()| {
                self.exec
                    .alloc(bytes)
                    .inspect_err(|_| self.accounts.refund(bytes))
            });
            let ptr = match made {
                Ok(ptr) => ptr,
                Err(e) => {
                    let _ = self.exec.blas_destroy(exec);
                    return Err(e);
                }
            };
            self.accounts
                .set_device_bytes(self.accounts.device_bytes.saturating_add(bytes));
            if let Err(e) = self.exec.blas_set_workspace(exec, ptr, bytes) {
                let _ = self.exec.blas_destroy(exec);
                self.release_workspace((ptr, bytes));
                return Err(e);
            }
            workspace = Some((ptr, bytes));
        }
        self.blas.handles.insert(
            req.handle,
            BlasEntry {
                exec,
                workspace,
                device: ctx.device,
            },
        );
        nothing()
    }

    fn blas_destroy(&mut self, _: &CallContext, req: BlasDestroy, _: &[u8]) -> HandlerResult<()> {
        let entry = self
            .blas
            .handles
            .remove(&req.handle)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let destroyed = self.exec.blas_destroy(entry.exec);
        if let Some(ws) = entry.workspace {
            self.release_workspace(ws);
        }
        destroyed?;
        nothing()
    }

    fn blas_set_option(
        &mut self,
        _: &CallContext,
        req: BlasSetOption,
        _: &[u8],
    ) -> HandlerResult<()> {
        let exec = self.blas_entry(req.handle)?.exec;
        let option = BlasOption::from_u32(req.option).ok_or(CudaStatus::ErrorInvalidValue)?;
        self.exec.blas_set_option(exec, option, req.value)?;
        nothing()
    }

    fn blas_get_option(
        &mut self,
        _: &CallContext,
        req: BlasGetOption,
        _: &[u8],
    ) -> HandlerResult<BlasOptionValue> {
        let exec = self.blas_entry(req.handle)?.exec;
        let option = BlasOption::from_u32(req.option).ok_or(CudaStatus::ErrorInvalidValue)?;
        let value = self.exec.blas_get_option(exec, option)?;
        Ok((BlasOptionValue { value }, Vec::new()))
    }

    fn blas_set_workspace(
        &mut self,
        _: &CallContext,
        req: BlasSetWorkspace,
        _: &[u8],
    ) -> HandlerResult<()> {
        let exec = self.blas_entry(req.handle)?.exec;
        self.check_range(req.ptr, req.size)?;
        self.exec.blas_set_workspace(exec, req.ptr, req.size)?;
        // The program's own workspace replaces ours; ours is freed in stream order by
        // the driver (it waits for work that still uses it).
        let entry = self
            .blas
            .handles
            .get_mut(&req.handle)
            .expect("looked up above");
        if let Some(ws) = entry.workspace.take() {
            self.release_workspace(ws);
        }
        nothing()
    }

    fn blas_gemm(&mut self, _: &CallContext, req: BlasGemm, _: &[u8]) -> HandlerResult<()> {
        let exec = self.blas_entry(req.handle)?.exec;
        let stream = self.handles.stream(req.stream)?;
        let extents = req.validate().map_err(|e| {
            warn!(client = %self.client, "refused a GEMM the guest should have refused: {e}");
            CudaStatus::ErrorInvalidValue
        })?;
        if let Scalars::Device { alpha, beta } = req.scalars {
            self.check_range(alpha, extents.scalar)?;
            self.check_range(beta, extents.scalar)?;
        }
        let ops = [req.a, req.b, req.c];
        for (op, total) in ops.iter().zip(extents.total) {
            self.check_range(op.ptr, total)?;
        }
        let arrays;
        let batch = match req.batch {
            Batch::Single => ExecBatch::Single,
            Batch::Strided { count } => ExecBatch::Strided { count },
            Batch::Pointers { count } => {
                let nothing_to_do = extents.total[0] == 0;
                let count = if nothing_to_do { 0 } else { count as usize };
                let mut read = Vec::with_capacity(3);
                for (op, span) in ops.iter().zip(extents.matrix) {
                    read.push(self.checked_pointers(op.ptr, count, span, stream)?);
                }
                arrays = read;
                ExecBatch::Pointers {
                    a: &arrays[0],
                    b: &arrays[1],
                    c: &arrays[2],
                }
            }
        };
        if req.batch.count() == 0 || extents.matrix[2] == 0 {
            return nothing(); // nothing to compute, as in cuBLAS
        }
        let call = GemmCall {
            stream,
            math_mode: req.math_mode,
            kind: req.kind,
            trans_a: req.trans_a,
            trans_b: req.trans_b,
            m: req.m,
            n: req.n,
            k: req.k,
            scalars: &req.scalars,
            a: req.a,
            b: req.b,
            c: req.c,
            batch,
        };
        self.exec.blas_gemm(exec, &call)?;
        nothing()
    }

    fn blas_call(&mut self, _: &CallContext, req: BlasCall, _: &[u8]) -> HandlerResult<()> {
        self.run_blas_call(req).map(|_| ((), Vec::new()))
    }

    fn blas_call_waited(
        &mut self,
        _: &CallContext,
        req: BlasCallWaited,
        _: &[u8],
    ) -> HandlerResult<BlasOutputs> {
        self.run_blas_call(req.0)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use vmcuda_wire::blas::{Operand, Precision};
    use vmcuda_wire::op::*;

    pub(in crate::session) fn session() -> Session {
        let exec = HostMemoryExecutor::new(1 << 30, None).unwrap();
        let mut s = Session::new(Box::new(exec), Grant::unlimited("test"));
        s.blas_create(
            &CallContext::default(),
            BlasCreate {
                handle: BlasHandle(0x100),
            },
            &[],
        )
        .unwrap();
        s
    }

    /// A device allocation holding `bytes`.
    pub(in crate::session) fn alloc(s: &mut Session, bytes: &[u8]) -> u64 {
        let ctx = CallContext::default();
        let ptr = s
            .mem_alloc(
                &ctx,
                MemAlloc {
                    size: bytes.len() as u64,
                },
                &[],
            )
            .unwrap()
            .0
            .ptr;
        let copy = MemcpyHtoD {
            dst: ptr,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        s.memcpy_htod(&ctx, copy, bytes).unwrap();
        ptr
    }

    pub(in crate::session) fn floats(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// C (2x2) = A (2x2) * B (2x2), A, B, C at the given pointers.
    fn gemm(a: u64, b: u64, c: u64, batch: Batch) -> BlasGemm {
        let op = |ptr| Operand {
            ptr,
            ld: 2,
            stride: 4,
        };
        BlasGemm {
            handle: BlasHandle(0x100),
            stream: StreamHandle::LEGACY,
            math_mode: 0,
            kind: vmcuda_wire::blas::GemmKind::Typed(Precision::S),
            trans_a: 0,
            trans_b: 0,
            m: 2,
            n: 2,
            k: 2,
            scalars: Scalars::Host {
                alpha: floats(&[1.0]),
                beta: floats(&[0.0]),
            },
            a: op(a),
            b: op(b),
            c: op(c),
            batch,
        }
    }

    pub(in crate::session) fn read(s: &mut Session, ptr: u64, len: u64) -> Vec<u8> {
        let req = MemcpyDtoH {
            src: ptr,
            size: len,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        s.memcpy_dtoh(&CallContext::default(), req, &[]).unwrap().1
    }

    #[test]
    fn a_gemm_reaching_outside_the_guests_memory_never_runs() {
        let mut s = session();
        let a = alloc(&mut s, &floats(&[1., 2., 3., 4.]));
        let c = alloc(&mut s, &floats(&[9.; 4]));
        // B one element short of its allocation: refused, C untouched.
        let short = alloc(&mut s, &floats(&[1., 1., 1.]));
        assert_eq!(
            s.blas_gemm(
                &CallContext::default(),
                gemm(a, short, c, Batch::Single),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        // A pointer the guest never got.
        assert_eq!(
            s.blas_gemm(
                &CallContext::default(),
                gemm(a, 0xdead_0000, c, Batch::Single),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        // A strided batch whose second C lies past the allocation.
        assert_eq!(
            s.blas_gemm(
                &CallContext::default(),
                gemm(a, a, c, Batch::Strided { count: 2 }),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(read(&mut s, c, 16), floats(&[9.; 4]));
        // The same GEMM inside its memory runs: C = A * A.
        s.blas_gemm(&CallContext::default(), gemm(a, a, c, Batch::Single), &[])
            .unwrap();
        assert_eq!(read(&mut s, c, 16), floats(&[7., 10., 15., 22.]));
        // An unknown handle.
        let mut g = gemm(a, a, c, Batch::Single);
        g.handle = BlasHandle(0x999);
        assert_eq!(
            s.blas_gemm(&CallContext::default(), g, &[]).err(),
            Some(CudaStatus::ErrorInvalidResourceHandle)
        );
    }

    #[test]
    fn every_pointer_of_a_pointer_array_batch_is_checked() {
        let mut s = session();
        let a = alloc(&mut s, &floats(&[1., 2., 3., 4.]));
        let c = alloc(&mut s, &floats(&[0.; 4]));
        let ptrs = |p: &[u64]| -> Vec<u8> { p.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let good = alloc(&mut s, &ptrs(&[a]));
        let out = alloc(&mut s, &ptrs(&[c]));
        let wild = alloc(&mut s, &ptrs(&[0x4242_0000]));
        assert_eq!(
            s.blas_gemm(
                &CallContext::default(),
                gemm(good, wild, out, Batch::Pointers { count: 1 }),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        // Two entries claimed, one stored: the array itself is out of range.
        assert_eq!(
            s.blas_gemm(
                &CallContext::default(),
                gemm(good, good, out, Batch::Pointers { count: 2 }),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        s.blas_gemm(
            &CallContext::default(),
            gemm(good, good, out, Batch::Pointers { count: 1 }),
            &[],
        )
        .unwrap();
        assert_eq!(read(&mut s, c, 16), floats(&[7., 10., 15., 22.]));
    }

    #[test]
    fn device_scalars_and_workspaces_must_be_the_guests() {
        let mut s = session();
        let a = alloc(&mut s, &floats(&[1., 2., 3., 4.]));
        let c = alloc(&mut s, &floats(&[0.; 4]));
        let mut g = gemm(a, a, c, Batch::Single);
        g.scalars = Scalars::Device {
            alpha: a,
            beta: 0x1234_5678,
        };
        assert_eq!(
            s.blas_gemm(&CallContext::default(), g, &[]).err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        let ws = BlasSetWorkspace {
            handle: BlasHandle(0x100),
            ptr: c,
            size: 1 << 20,
        };
        assert_eq!(
            s.blas_set_workspace(&CallContext::default(), ws, &[]).err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        let ws = BlasSetWorkspace {
            handle: BlasHandle(0x100),
            ptr: c,
            size: 16,
        };
        s.blas_set_workspace(&CallContext::default(), ws, &[])
            .unwrap();
        s.blas_destroy(
            &CallContext::default(),
            BlasDestroy {
                handle: BlasHandle(0x100),
            },
            &[],
        )
        .unwrap();
        assert!(s
            .blas_destroy(
                &CallContext::default(),
                BlasDestroy {
                    handle: BlasHandle(0x100)
                },
                &[]
            )
            .is_err());
    }
}
