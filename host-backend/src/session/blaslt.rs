//! cuBLASLt requests: the guest's Lt handles, the heuristic query, and every matmul
//! checked before the executor sees it.
//!
//! A request names an Lt handle the guest made, or one of its cuBLAS handles (cuBLASLt
//! takes those too, and PyTorch passes nothing else). Descriptor state arrives with
//! every request and is checked again here ([`LtProblem::validate`], the attribute
//! tables); a matmul's A, B, C and D over the whole batch, the bias vector, the scale
//! pointers, device-mode `alpha`/`beta` and the workspace must lie in the guest's own
//! memory, and its algorithm must be one this session's heuristic queries returned (the
//! 64 opaque bytes are cuBLASLt's to interpret, so a guest does not get to forge them).
//! Anything else is refused with `cudaErrorInvalidValue` and logged; matmuls are
//! posted, so the refusal reaches the program at its next waited-for call.

use std::collections::{HashMap, HashSet};

use tracing::warn;
use vmcuda_wire::blas::{BlasHandle, Scalars};
use vmcuda_wire::blaslt::{
    LtAlgo, LtCreate, LtDestroy, LtHandle, LtHeuristic, LtHeuristicReply, LtMatmul, LtShape,
    MAX_HEURISTIC_RESULTS, PREFERENCE_ATTRS,
};
use vmcuda_wire::op::HandlerResult;
use vmcuda_wire::op::{BlasLtOps, CallContext};
use vmcuda_wire::CudaStatus;

use crate::executor::blaslt::{ExecLt, LtHandleRef, LtMatmulCall};

use super::{nothing, Session};

/// Algorithms remembered per session; a guest asking for more distinct ones than this
/// starts the list afresh (PyTorch asks for the same few shapes over and over).
const MAX_KNOWN_ALGOS: usize = 4096;

#[derive(Default)]
pub(super) struct LtState {
    handles: HashMap<LtHandle, ExecLt>,
    /// Algorithms the executor's heuristic handed this guest.
    algos: HashSet<LtAlgo>,
}

impl Session {
    /// The executor handle a request runs with.
    fn lt_target(&self, h: LtHandle) -> Result<LtHandleRef, CudaStatus> {
        if let Some(e) = self.lt.handles.get(&h) {
            return Ok(LtHandleRef::Lt(*e));
        }
        self.blas_exec(BlasHandle(h.0))
            .map(LtHandleRef::Blas)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    /// A problem the guest should have refused itself.
    fn lt_checked(&self, req: &vmcuda_wire::blaslt::LtProblem) -> Result<LtShape, CudaStatus> {
        req.validate().map_err(|e| {
            warn!(client = %self.client, "refused a cuBLASLt call the guest should have refused: {e}");
            CudaStatus::ErrorInvalidValue
        })
    }

    /// Destroy every Lt handle (the session ends).
    pub(super) fn lt_drop_all(&mut self) {
        for (_, e) in std::mem::take(&mut self.lt.handles) {
            let _ = self.exec.lt_destroy(e);
        }
    }

    /// Forget the Lt handles after a device reset (the executor's are gone).
    pub(super) fn lt_reset(&mut self) {
        self.lt = LtState::default();
    }
}

impl BlasLtOps for Session {
    fn lt_create(&mut self, _: &CallContext, req: LtCreate, _: &[u8]) -> HandlerResult<()> {
        if self.lt.handles.contains_key(&req.handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.accounts.check_count(
            "cuBLASLt handle",
            self.lt.handles.len(),
            self.grant.max_streams,
        )?;
        let e = self.exec.lt_create()?;
        self.lt.handles.insert(req.handle, e);
        nothing()
    }

    fn lt_destroy(&mut self, _: &CallContext, req: LtDestroy, _: &[u8]) -> HandlerResult<()> {
        let e = self
            .lt
            .handles
            .remove(&req.handle)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        self.exec.lt_destroy(e)?;
        nothing()
    }

    fn lt_heuristic(
        &mut self,
        _: &CallContext,
        req: LtHeuristic,
        _: &[u8],
    ) -> HandlerResult<LtHeuristicReply> {
        let target = self.lt_target(req.handle)?;
        let shape = self.lt_checked(&req.problem)?;
        if req.preference.check(PREFERENCE_ATTRS).is_err()
            || !(1..=MAX_HEURISTIC_RESULTS).contains(&req.requested)
        {
            warn!(client = %self.client, "refused a cuBLASLt heuristic query with bad preferences or count");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let reply =
            self.exec
                .lt_heuristic(target, &req.problem, &shape, &req.preference, req.requested)?;
        if self.lt.algos.len() + reply.results.len() > MAX_KNOWN_ALGOS {
            self.lt.algos.clear();
        }
        for r in reply.results.iter().filter(|r| r.state == 0) {
            self.lt.algos.insert(r.algo);
        }
        Ok((reply, Vec::new()))
    }

    fn lt_matmul(&mut self, _: &CallContext, req: LtMatmul, _: &[u8]) -> HandlerResult<()> {
        let target = self.lt_target(req.handle)?;
        let stream = self.handles.stream(req.stream)?;
        let shape = self.lt_checked(&req.problem)?;
        if let Some(algo) = &req.algo {
            if !self.lt.algos.contains(algo) {
                warn!(client = %self.client, "refused a cuBLASLt matmul with an algorithm no heuristic returned");
                return Err(CudaStatus::ErrorInvalidValue);
            }
        }
        let beta_zero = match &req.scalars {
            Scalars::Host { alpha, beta } => {
                if alpha.len() as u64 != shape.scale || beta.len() as u64 != shape.scale {
                    warn!(client = %self.client, "refused a cuBLASLt matmul: scalar size");
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                beta.iter().all(|b| *b == 0)
            }
            Scalars::Device { alpha, beta } => {
                self.check_range(*alpha, shape.scale)?;
                self.check_range(*beta, shape.scale)?;
                false
            }
        };
        for (i, m) in shape.matrices.iter().enumerate() {
            // With beta == 0 cuBLASLt never reads C, which may then be NULL.
            if i == 2 && beta_zero && req.ptrs[2] == 0 {
                continue;
            }
            self.check_range(req.ptrs[i], m.total)?;
        }
        if let Some(bias) = &shape.bias {
            self.check_range(bias.ptr, bias.total)?;
        }
        for (ptr, len) in &shape.scalar_ptrs {
            self.check_range(*ptr, *len)?;
        }
        self.check_range(req.workspace, req.workspace_size)?;
        if shape.m == 0 || shape.n == 0 {
            return nothing(); // nothing to compute, as in cuBLASLt
        }
        let call = LtMatmulCall {
            stream,
            problem: &req.problem,
            shape: &shape,
            scalars: &req.scalars,
            ptrs: req.ptrs,
            algo: req.algo.as_ref(),
            workspace: req.workspace,
            workspace_size: req.workspace_size,
        };
        self.exec.lt_matmul(target, &call)?;
        nothing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use vmcuda_wire::blas::{compute_type, data_type, BlasCreate};
    use vmcuda_wire::blaslt::{
        desc, epilogue, layout, Descriptor, LtProblem, LAYOUT_ATTRS, MATMUL_DESC_ATTRS,
    };
    use vmcuda_wire::op::*;

    use super::super::blas::tests::{alloc, floats as f32s, read};

    fn session() -> Session {
        let exec = HostMemoryExecutor::new(1 << 30, None).unwrap();
        let mut s = Session::new(Box::new(exec), Grant::unlimited("test"));
        s.lt_create(
            &CallContext::default(),
            LtCreate {
                handle: LtHandle(0x200),
            },
            &[],
        )
        .unwrap();
        s
    }

    /// 2x2 fp32 matmul, optionally with the bias epilogue at `bias`.
    fn problem(bias: Option<u64>) -> LtProblem {
        let mut d = Descriptor::default();
        let t = MATMUL_DESC_ATTRS;
        d.set(t, desc::COMPUTE_TYPE, &compute_type::C32F.to_le_bytes())
            .unwrap();
        d.set(t, desc::SCALE_TYPE, &data_type::R_32F.to_le_bytes())
            .unwrap();
        if let Some(ptr) = bias {
            d.set(t, desc::EPILOGUE, &epilogue::BIAS.to_le_bytes())
                .unwrap();
            d.set(t, desc::BIAS_POINTER, &ptr.to_le_bytes()).unwrap();
        }
        let mut l = Descriptor::default();
        l.set(
            LAYOUT_ATTRS,
            layout::TYPE,
            &(data_type::R_32F as u32).to_le_bytes(),
        )
        .unwrap();
        for id in [layout::ROWS, layout::COLS, layout::LD] {
            l.set(LAYOUT_ATTRS, id, &2u64.to_le_bytes()).unwrap();
        }
        LtProblem {
            desc: d,
            layouts: [l.clone(), l.clone(), l.clone(), l],
        }
    }

    fn matmul(handle: u64, problem: LtProblem, ptrs: [u64; 4], algo: Option<LtAlgo>) -> LtMatmul {
        LtMatmul {
            handle: LtHandle(handle),
            stream: StreamHandle::LEGACY,
            problem,
            scalars: Scalars::Host {
                alpha: f32s(&[1.0]),
                beta: f32s(&[0.0]),
            },
            ptrs,
            algo,
            workspace: 0,
            workspace_size: 0,
        }
    }

    fn heuristic(s: &mut Session, handle: u64, problem: &LtProblem) -> LtHeuristicReply {
        s.lt_heuristic(
            &CallContext::default(),
            LtHeuristic {
                handle: LtHandle(handle),
                problem: problem.clone(),
                preference: Descriptor::default(),
                requested: 1,
            },
            &[],
        )
        .unwrap()
        .0
    }

    #[test]
    fn a_matmul_runs_with_the_heuristics_algorithm_on_a_cublas_handle_too() {
        let mut s = session();
        s.blas_create(
            &CallContext::default(),
            BlasCreate {
                handle: BlasHandle(0x300),
            },
            &[],
        )
        .unwrap();
        let a = alloc(&mut s, &f32s(&[1., 2., 3., 4.]));
        let bias = alloc(&mut s, &f32s(&[10., 20.]));
        let d = alloc(&mut s, &f32s(&[0.; 4]));
        let p = problem(Some(bias));
        let reply = heuristic(&mut s, 0x300, &p);
        assert_eq!((reply.status, reply.results.len()), (0, 1));
        let algo = reply.results[0].algo;
        s.lt_matmul(
            &CallContext::default(),
            matmul(0x300, p.clone(), [a, a, 0, d], Some(algo)),
            &[],
        )
        .unwrap();
        // A = [1 3; 2 4], A*A = [7 15; 10 22], plus the bias per row: [17 25; 30 42].
        assert_eq!(read(&mut s, d, 16), f32s(&[17., 30., 25., 42.]));
        // An algorithm no heuristic returned is refused.
        let mut forged = algo;
        forged[1] = 1;
        assert_eq!(
            s.lt_matmul(
                &CallContext::default(),
                matmul(0x200, p, [a, a, 0, d], Some(forged)),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
        // An unknown handle.
        assert_eq!(
            s.lt_matmul(
                &CallContext::default(),
                matmul(0x999, problem(None), [a, a, 0, d], None),
                &[]
            )
            .err(),
            Some(CudaStatus::ErrorInvalidResourceHandle)
        );
    }

    #[test]
    fn a_matmul_reaching_outside_the_guests_memory_never_runs() {
        let mut s = session();
        let a = alloc(&mut s, &f32s(&[1., 2., 3., 4.]));
        let d = alloc(&mut s, &f32s(&[9.; 4]));
        let short = alloc(&mut s, &f32s(&[1., 1., 1.]));
        let refused =
            |s: &mut Session, m: LtMatmul| s.lt_matmul(&CallContext::default(), m, &[]).err();
        let bad = CudaStatus::ErrorInvalidValue;
        assert_eq!(
            refused(&mut s, matmul(0x200, problem(None), [a, short, 0, d], None)),
            Some(bad)
        );
        assert_eq!(
            refused(
                &mut s,
                matmul(0x200, problem(None), [a, a, 0, 0xdead_0000], None)
            ),
            Some(bad)
        );
        // A bias vector one element short.
        let p = problem(Some(short + 8));
        assert_eq!(
            refused(&mut s, matmul(0x200, p, [a, a, 0, d], None)),
            Some(bad)
        );
        // beta != 0 reads C, which must then be the guest's.
        let mut m = matmul(0x200, problem(None), [a, a, 0, d], None);
        m.scalars = Scalars::Host {
            alpha: f32s(&[1.0]),
            beta: f32s(&[1.0]),
        };
        assert_eq!(refused(&mut s, m), Some(bad));
        // A workspace that is not the guest's, a wrong scalar size.
        let mut m = matmul(0x200, problem(None), [a, a, 0, d], None);
        m.workspace = d;
        m.workspace_size = 1 << 20;
        assert_eq!(refused(&mut s, m), Some(bad));
        let mut m = matmul(0x200, problem(None), [a, a, 0, d], None);
        m.scalars = Scalars::Host {
            alpha: vec![0; 8],
            beta: vec![0; 8],
        };
        assert_eq!(refused(&mut s, m), Some(bad));
        assert_eq!(read(&mut s, d, 16), f32s(&[9.; 4]));
        // Device-mode scalars must be the guest's too.
        let mut m = matmul(0x200, problem(None), [a, a, 0, d], None);
        m.scalars = Scalars::Device {
            alpha: a,
            beta: 0x1234_0000,
        };
        assert_eq!(refused(&mut s, m), Some(bad));
        // The same matmul inside its memory runs.
        s.lt_matmul(
            &CallContext::default(),
            matmul(0x200, problem(None), [a, a, 0, d], None),
            &[],
        )
        .unwrap();
        assert_eq!(read(&mut s, d, 16), f32s(&[7., 10., 15., 22.]));
        s.lt_destroy(
            &CallContext::default(),
            LtDestroy {
                handle: LtHandle(0x200),
            },
            &[],
        )
        .unwrap();
        assert!(s
            .lt_destroy(
                &CallContext::default(),
                LtDestroy {
                    handle: LtHandle(0x200)
                },
                &[]
            )
            .is_err());
    }
}
