//! cuBLASLt on real GPUs: one real `cublasLtHandle_t` per guest Lt handle, made in the
//! current device's primary context; a guest cuBLAS handle passed as an Lt handle is
//! the real `cublasHandle_t`, which cuBLAS accepts as a `cublasLtHandle_t` (PyTorch
//! relies on this, and passes nothing else).
//!
//! The library is found through cudarc's cuBLASLt loader (`cublaslt` feature, dynamic
//! loading); its functions are called through pointers typed here with plain C integers
//! for every enum, so a guest's numbers reach cuBLASLt to be judged and never become
//! Rust enum values. Each heuristic query and matmul makes real descriptors from the
//! guest's attribute bytes (checked against cuBLASLt's sizes by the session) and
//! destroys them when done: they are host-side structures, cheap to make, and cuBLASLt
//! copies what it needs at the call.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr;

use tracing::{debug, warn};
use vmcuda_wire::blas::Scalars;
use vmcuda_wire::blaslt::{
    layout, Descriptor, LtHeuristicReply, LtHeuristicResult, LtProblem, LtShape,
    RawHeuristicResult as HeuristicResult, LAYOUT_ATTRS,
};
use vmcuda_wire::CudaStatus;

use super::super::blaslt::{BlasLt, ExecLt, LtHandleRef, LtMatmulCall};
use super::super::ExecResult;
use super::blas::cublas;
use super::CudaExecutor;

type Handle = *mut c_void;
/// A matmul descriptor, matrix layout or preference.
type Object = *mut c_void;
type Status = c_int;
type Ptr = *const c_void;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
pub(super) type DestroyFn = unsafe extern "C" fn(Object) -> Status;
/// `cublasLtMatmulDescCreate(desc*, computeType, scaleType)`.
type DescCreateFn = unsafe extern "C" fn(*mut Object, c_int, c_int) -> Status;
/// `cublasLtMatrixLayoutCreate(layout*, type, rows, cols, ld)`.
type LayoutCreateFn = unsafe extern "C" fn(*mut Object, c_int, u64, u64, i64) -> Status;
type PrefCreateFn = unsafe extern "C" fn(*mut Object) -> Status;
/// `cublasLt*SetAttribute(object, attr, buf, sizeInBytes)`.
type SetAttrFn = unsafe extern "C" fn(Object, c_int, Ptr, usize) -> Status;

/// `cublasLtMatmulAlgoGetHeuristic(h, desc, A, B, C, D, pref, requested, results*, count*)`.
type HeuristicFn = unsafe extern "C" fn(
    Handle,
    Object,
    Object,
    Object,
    Object,
    Object,
    Object,
    c_int,
    *mut HeuristicResult,
    *mut c_int,
) -> Status;
/// `cublasLtMatmul(h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
/// workspace, workspaceSize, stream)`.
type MatmulFn = unsafe extern "C" fn(
    Handle,
    Object,
    Ptr,
    Ptr,
    Object,
    Ptr,
    Object,
    Ptr,
    Ptr,
    Object,
    *mut c_void,
    Object,
    *const [u64; 8],
    *mut c_void,
    usize,
    *mut c_void,
) -> Status;

/// The cuBLASLt entry points this executor calls.
struct Api {
    create: CreateFn,
    destroy: DestroyFn,
    desc_create: DescCreateFn,
    desc_destroy: DestroyFn,
    desc_set: SetAttrFn,
    layout_create: LayoutCreateFn,
    layout_destroy: DestroyFn,
    layout_set: SetAttrFn,
    pref_create: PrefCreateFn,
    pref_destroy: DestroyFn,
    pref_set: SetAttrFn,
    heuristic: HeuristicFn,
    matmul: MatmulFn,
}

impl Api {
    fn load() -> ExecResult<Api> {
        // SAFETY: only dlopens candidate library names and closes them again.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            warn!("libcublasLt not found: cuBLASLt calls from guests fail");
            return Err(CudaStatus::ErrorNotSupported);
        }
        // SAFETY: present (checked above); cudarc keeps it loaded for the process.
        let lib = unsafe { cudarc::cublaslt::sys::culib() };
        macro_rules! get {
            ($name:expr) => {
                // SAFETY: each name is looked up with the C signature the header gives
                // it (the type of the field it is stored in).
                unsafe { super::entry_point(lib, "libcublasLt", $name)? }
            };
        }
        Ok(Api {
            create: get!("cublasLtCreate"),
            destroy: get!("cublasLtDestroy"),
            desc_create: get!("cublasLtMatmulDescCreate"),
            desc_destroy: get!("cublasLtMatmulDescDestroy"),
            desc_set: get!("cublasLtMatmulDescSetAttribute"),
            layout_create: get!("cublasLtMatrixLayoutCreate"),
            layout_destroy: get!("cublasLtMatrixLayoutDestroy"),
            layout_set: get!("cublasLtMatrixLayoutSetAttribute"),
            pref_create: get!("cublasLtMatmulPreferenceCreate"),
            pref_destroy: get!("cublasLtMatmulPreferenceDestroy"),
            pref_set: get!("cublasLtMatmulPreferenceSetAttribute"),
            heuristic: get!("cublasLtMatmulAlgoGetHeuristic"),
            matmul: get!("cublasLtMatmul"),
        })
    }
}

/// The executor's cuBLASLt state: the entry points once loaded, and the live handles
/// with the device each belongs to.
#[derive(Default)]
pub(super) struct CudaLt {
    api: Option<Result<Api, CudaStatus>>,
    handles: HashMap<ExecLt, (Handle, usize)>,
}

/// A real descriptor, destroyed when dropped.
struct Real {
    object: Object,
    destroy: DestroyFn,
}

impl Drop for Real {
    fn drop(&mut self) {
        // SAFETY: made by the matching create call, destroyed once, here.
        let _ = unsafe { (self.destroy)(self.object) };
    }
}

/// Set every attribute of `d` on the real `object`.
fn replay(object: Object, set: SetAttrFn, d: &Descriptor) -> ExecResult<()> {
    for (id, bytes) in &d.attrs {
        // SAFETY: `object` is live; `bytes` holds exactly the attribute's size (the
        // session checked it against cuBLASLt's table) and outlives the call, which
        // copies the value.
        cublas(unsafe { set(object, *id as c_int, bytes.as_ptr().cast(), bytes.len()) })?;
    }
    Ok(())
}

/// The real descriptor and layouts of one problem.
struct RealProblem {
    desc: Real,
    layouts: [Real; 4],
}

impl Api {
    fn problem(&self, p: &LtProblem, shape: &LtShape) -> ExecResult<RealProblem> {
        let mut o: Object = ptr::null_mut();
        // SAFETY: out-pointer to a local; cuBLASLt judges the type numbers.
        cublas(unsafe { (self.desc_create)(&mut o, shape.compute, shape.scale_type) })?;
        let desc = Real {
            object: o,
            destroy: self.desc_destroy,
        };
        replay(desc.object, self.desc_set, &p.desc)?;
        let mut made = Vec::with_capacity(4);
        for (l, m) in p.layouts.iter().zip(&shape.matrices) {
            let mut o: Object = ptr::null_mut();
            let ld = l.bits(LAYOUT_ATTRS, layout::LD) as i64;
            // SAFETY: out-pointer to a local; the sizes were checked by validate().
            cublas(unsafe { (self.layout_create)(&mut o, m.data_type, m.rows, m.cols, ld) })?;
            let real = Real {
                object: o,
                destroy: self.layout_destroy,
            };
            replay(real.object, self.layout_set, l)?;
            made.push(real);
        }
        let layouts: [Real; 4] = made.try_into().map_err(|_| CudaStatus::ErrorUnknown)?;
        Ok(RealProblem { desc, layouts })
    }
}

impl CudaExecutor {
    fn lt_api(&mut self) -> ExecResult<&Api> {
        let api = self.lt.api.get_or_insert_with(Api::load);
        api.as_ref().map_err(|e| *e)
    }

    /// The real handle for `handle`, with its device's context current.
    fn lt_handle(&mut self, handle: LtHandleRef) -> ExecResult<Handle> {
        match handle {
            LtHandleRef::Blas(id) => self.blas_handle(id),
            LtHandleRef::Lt(id) => {
                let entry = self.lt.handles.get(&id).copied();
                self.bound_handle(entry)
            }
        }
    }

    /// A library handle `(handle, device)` from a table, usable only on the current
    /// device (a handle works in the context it was made in); that context is bound.
    pub(super) fn bound_handle(&mut self, entry: Option<(Handle, usize)>) -> ExecResult<Handle> {
        let (h, dev) = entry.ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        if dev != self.current {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.bind()?;
        Ok(h)
    }

    /// Destroy the Lt handles of device `idx` (its context is current or going away).
    pub(super) fn lt_destroy_device(&mut self, idx: usize) {
        if let Some(Ok(api)) = &self.lt.api {
            destroy_device_handles(&mut self.lt.handles, idx, api.destroy);
        }
    }
}

/// Destroy with `destroy` the handles of `handles` made on device `idx`.
pub(super) fn destroy_device_handles(
    handles: &mut HashMap<u64, (Handle, usize)>,
    idx: usize,
    destroy: DestroyFn,
) {
    handles.retain(|_, (h, dev)| {
        if *dev == idx {
            // SAFETY: a handle made by the matching create call, destroyed once (it
            // leaves the map).
            let _ = unsafe { destroy(*h) };
            false
        } else {
            true
        }
    });
}

impl BlasLt for CudaExecutor {
    fn lt_create(&mut self) -> ExecResult<ExecLt> {
        let create = self.lt_api()?.create;
        self.bind()?;
        let mut h: Handle = ptr::null_mut();
        // SAFETY: out-pointer to a local; the current device's context is current.
        cublas(unsafe { create(&mut h) })?;
        let id = h as usize as ExecLt;
        self.lt.handles.insert(id, (h, self.current));
        debug!(device = self.current, "cuBLASLt handle created");
        Ok(id)
    }

    fn lt_destroy(&mut self, id: ExecLt) -> ExecResult<()> {
        let h = self.lt_handle(LtHandleRef::Lt(id))?;
        let destroy = self.lt_api()?.destroy;
        self.lt.handles.remove(&id);
        // SAFETY: made by lt_create and removed from the map: destroyed once.
        cublas(unsafe { destroy(h) })
    }

    fn lt_heuristic(
        &mut self,
        handle: LtHandleRef,
        problem: &LtProblem,
        shape: &LtShape,
        preference: &Descriptor,
        requested: u32,
    ) -> ExecResult<LtHeuristicReply> {
        let h = self.lt_handle(handle)?;
        let api = self.lt_api()?;
        let real = api.problem(problem, shape)?;
        let mut o: Object = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        cublas(unsafe { (api.pref_create)(&mut o) })?;
        let pref = Real {
            object: o,
            destroy: api.pref_destroy,
        };
        replay(pref.object, api.pref_set, preference)?;
        let mut results = vec![HeuristicResult::default(); requested as usize];
        let mut count: c_int = 0;
        let [a, b, c, d] = &real.layouts;
        // SAFETY: `h` is live in the current context, every object is live, `results`
        // holds `requested` entries and `count` is a local.
        let status = unsafe {
            (api.heuristic)(
                h,
                real.desc.object,
                a.object,
                b.object,
                c.object,
                d.object,
                pref.object,
                requested as c_int,
                results.as_mut_ptr(),
                &mut count,
            )
        };
        if status != 0 {
            return Ok(LtHeuristicReply {
                status: status as u32,
                results: Vec::new(),
            });
        }
        let count = (count.max(0) as usize).min(results.len());
        Ok(LtHeuristicReply {
            status: 0,
            results: results[..count]
                .iter()
                .map(|r| LtHeuristicResult {
                    algo: r.algo,
                    workspace_size: r.workspace_size as u64,
                    state: r.state as u32,
                    waves_count: r.waves_count,
                })
                .collect(),
        })
    }

    fn lt_matmul(&mut self, handle: LtHandleRef, call: &LtMatmulCall<'_>) -> ExecResult<()> {
        let h = self.lt_handle(handle)?;
        let stream = self.stream(call.stream)?;
        let api = self.lt_api()?;
        let matmul = api.matmul;
        let real = api.problem(call.problem, call.shape)?;
        // Host-mode scalars point into `call`, alive until we return (cuBLASLt reads
        // them before it returns); device-mode ones were range-checked by the session.
        let (alpha, beta): (Ptr, Ptr) = match call.scalars {
            Scalars::Host { alpha, beta } => (alpha.as_ptr().cast(), beta.as_ptr().cast()),
            Scalars::Device { alpha, beta } => (*alpha as usize as Ptr, *beta as usize as Ptr),
        };
        let p = |i: usize| call.ptrs[i] as usize as Ptr;
        let algo = call.algo.map_or(ptr::null(), |a| a as *const [u64; 8]);
        let [a, b, c, d] = &real.layouts;
        let size =
            usize::try_from(call.workspace_size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        // SAFETY: `h` is live in the current context; every descriptor is live; the
        // session checked every device range (A, B, C, D over the whole batch, bias,
        // scale pointers, workspace) against the guest's memory and the algorithm
        // against those this executor's heuristic returned; the stream is one of ours.
        cublas(unsafe {
            matmul(
                h,
                real.desc.object,
                alpha,
                p(0),
                a.object,
                p(1),
                b.object,
                beta,
                p(2),
                c.object,
                call.ptrs[3] as usize as *mut c_void,
                d.object,
                algo,
                call.workspace as usize as *mut c_void,
                size,
                stream.cast(),
            )
        })
    }
}
