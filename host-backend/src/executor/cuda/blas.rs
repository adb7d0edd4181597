//! cuBLAS on real GPUs: one real `cublasHandle_t` per guest handle, made in the
//! current device's primary context.
//!
//! The library is found through cudarc's cuBLAS loader (`cublas` feature, dynamic
//! loading), but its functions are called through pointers typed here with plain C
//! integers for every enum argument: a guest's numbers are passed on for cuBLAS to
//! judge, and never become Rust enum values they might not be. Before each GEMM the
//! handle gets the request's stream, math mode and pointer mode, so these settings
//! live in the guest and cost no requests of their own. A pointer-array batch runs on
//! device copies of the arrays the session checked (stream-ordered allocation on the
//! GEMM's stream), so the guest cannot swap a pointer between the check and the GEMM.

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong, c_void};
use std::ptr;

use cudarc::driver::sys;
use tracing::{debug, warn};
use vmcuda_wire::blas::{
    BlasOption, GemmKind, Precision, Scalars, POINTER_MODE_DEVICE, POINTER_MODE_HOST,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::blas::{status_from_cublas, Blas, ExecBatch, ExecBlas, GemmCall};
use super::super::blas_table::TableCall;
use super::super::ExecResult;
use super::{check, CudaExecutor};

pub(super) type Handle = *mut c_void;
pub(super) type Status = c_int;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetPtrFn = unsafe extern "C" fn(Handle, *mut c_void) -> Status;
type SetIntFn = unsafe extern "C" fn(Handle, c_int) -> Status;
type SetWorkspaceFn = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;
pub(super) type Ptr = *const c_void;
/// `cublas?gemm[_v2]`: (h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc).
type GemmFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    Ptr,
    c_int,
    Ptr,
    Ptr,
    c_int,
) -> Status;
/// `cublas?gemmStridedBatched`: strides after each ld, batch count last.
type GemmStridedFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_longlong,
    Ptr,
    c_int,
    c_longlong,
    Ptr,
    Ptr,
    c_int,
    c_longlong,
    c_int,
) -> Status;
/// `cublas?gemmBatched`: pointer arrays, batch count last.
type GemmBatchedFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    Ptr,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
) -> Status;
/// `cublasGemmEx`: a type after each matrix, compute type and algorithm last.
type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
    Ptr,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;
type GemmStridedExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
    c_longlong,
    Ptr,
    c_int,
    c_int,
    c_longlong,
    Ptr,
    Ptr,
    c_int,
    c_int,
    c_longlong,
    c_int,
    c_int,
    c_int,
) -> Status;
type GemmBatchedExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
    Ptr,
    c_int,
    c_int,
    Ptr,
    Ptr,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;

/// Typed GEMM names, indexed by [`precision_index`].
const TYPED: [(&str, &str, &str); 5] = [
    (
        "cublasSgemm_v2",
        "cublasSgemmStridedBatched",
        "cublasSgemmBatched",
    ),
    (
        "cublasDgemm_v2",
        "cublasDgemmStridedBatched",
        "cublasDgemmBatched",
    ),
    (
        "cublasHgemm",
        "cublasHgemmStridedBatched",
        "cublasHgemmBatched",
    ),
    (
        "cublasCgemm_v2",
        "cublasCgemmStridedBatched",
        "cublasCgemmBatched",
    ),
    (
        "cublasZgemm_v2",
        "cublasZgemmStridedBatched",
        "cublasZgemmBatched",
    ),
];

fn precision_index(p: Precision) -> usize {
    match p {
        Precision::S => 0,
        Precision::D => 1,
        Precision::H => 2,
        Precision::C => 3,
        Precision::Z => 4,
    }
}

/// The cuBLAS entry points this executor calls.
struct Api {
    create: CreateFn,
    destroy: DestroyFn,
    set_stream: SetPtrFn,
    set_math_mode: SetIntFn,
    set_pointer_mode: SetIntFn,
    set_workspace: SetWorkspaceFn,
    typed: [(GemmFn, GemmStridedFn, GemmBatchedFn); 5],
    ex: GemmExFn,
    strided_ex: GemmStridedExFn,
    batched_ex: GemmBatchedExFn,
}

impl Api {
    fn load() -> ExecResult<Api> {
        // SAFETY: only dlopens candidate library names and closes them again.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            warn!("libcublas not found: cuBLAS calls from guests fail");
            return Err(CudaStatus::ErrorNotSupported);
        }
        // Stream-ordered allocation carries pointer arrays; check it is there, as
        // cudarc panics on a missing symbol.
        // SAFETY: the driver library was found when the executor was made.
        let driver = unsafe { sys::culib() };
        for name in ["cuMemAllocAsync", "cuMemFreeAsync", "cuMemcpyHtoDAsync_v2"] {
            // SAFETY: only looks the address up.
            unsafe { super::entry_point::<*const c_void>(driver, "libcuda", name)? };
        }
        // SAFETY: present (checked above); cudarc keeps it loaded for the process.
        let lib = unsafe { cudarc::cublas::sys::culib() };
        macro_rules! get {
            ($name:expr) => {
                // SAFETY: each name is looked up with the C signature the header gives
                // it (the type of the field it is stored in).
                unsafe { super::entry_point(lib, "libcublas", $name)? }
            };
        }
        let mut typed = Vec::with_capacity(TYPED.len());
        for (single, strided, batched) in TYPED {
            typed.push((get!(single), get!(strided), get!(batched)));
        }
        let typed: [(GemmFn, GemmStridedFn, GemmBatchedFn); 5] =
            typed.try_into().map_err(|_| CudaStatus::ErrorUnknown)?;
        Ok(Api {
            create: get!("cublasCreate_v2"),
            destroy: get!("cublasDestroy_v2"),
            set_stream: get!("cublasSetStream_v2"),
            set_math_mode: get!("cublasSetMathMode"),
            set_pointer_mode: get!("cublasSetPointerMode_v2"),
            set_workspace: get!("cublasSetWorkspace_v2"),
            typed,
            ex: get!("cublasGemmEx"),
            strided_ex: get!("cublasGemmStridedBatchedEx"),
            batched_ex: get!("cublasGemmBatchedEx"),
        })
    }
}

/// The executor's cuBLAS state: the entry points once loaded, and the live handles
/// with the device each belongs to.
#[derive(Default)]
pub(super) struct CudaBlas {
    api: Option<Result<Api, CudaStatus>>,
    handles: HashMap<ExecBlas, (Handle, usize)>,
    /// Addresses of the table functions looked up so far, by function id.
    pub(super) table: HashMap<u16, usize>,
}

/// A `cublasStatus_t` as a result (cuBLASLt's statuses are cuBLAS's).
pub(super) fn cublas(status: Status) -> ExecResult<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(status_from_cublas(status as u32))
    }
}

impl CudaExecutor {
    fn blas_api(&mut self) -> ExecResult<&Api> {
        let api = self.blas.api.get_or_insert_with(Api::load);
        api.as_ref().map_err(|e| *e)
    }

    /// The real handle of `id`, with its device's context current.
    pub(super) fn blas_handle(&mut self, id: ExecBlas) -> ExecResult<Handle> {
        let entry = self.blas.handles.get(&id).copied();
        self.bound_handle(entry)
    }

    /// Destroy the handles of device `idx` (its context is current or going away).
    pub(super) fn blas_destroy_device(&mut self, idx: usize) {
        if let Some(Ok(api)) = &self.blas.api {
            super::blaslt::destroy_device_handles(&mut self.blas.handles, idx, api.destroy);
        }
    }

    /// Copy the checked pointer arrays to device memory of our own on `stream`, run
    /// `f` with their device addresses (in the order given), and free them in stream
    /// order.
    pub(super) fn with_device_arrays(
        &mut self,
        stream: sys::CUstream,
        arrays: &[&[u64]],
        f: impl FnOnce(&[Ptr]) -> ExecResult<()>,
    ) -> ExecResult<()> {
        let bytes: Vec<u8> = arrays
            .iter()
            .flat_map(|a| a.iter().flat_map(|p| p.to_le_bytes()))
            .collect();
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; a context is current; the symbol was checked.
        check(unsafe { sys::cuMemAllocAsync(&mut base, bytes.len().max(1), stream) })?;
        // SAFETY: `bytes` is pageable host memory: the copy stages it before returning,
        // so the buffer may go once the call returns; `base` holds bytes.len() bytes.
        let copied = check(unsafe {
            sys::cuMemcpyHtoDAsync_v2(base, bytes.as_ptr().cast(), bytes.len(), stream)
        });
        let result = copied.and_then(|()| {
            let mut offset = 0;
            let starts: Vec<Ptr> = arrays
                .iter()
                .map(|a| {
                    let at = (base as usize + offset) as Ptr;
                    offset += a.len() * 8;
                    at
                })
                .collect();
            f(&starts)
        });
        // SAFETY: freed once, in order after the call that reads it.
        let _ = unsafe { sys::cuMemFreeAsync(base, stream) };
        result
    }

    /// The handle of `id` with the call's stream, math mode and pointer mode set, the
    /// call's stream, and the loaded entry points.
    pub(super) fn blas_prepare(
        &mut self,
        id: ExecBlas,
        stream: u64,
        math_mode: u32,
        pointer_mode: u32,
    ) -> ExecResult<(Handle, sys::CUstream)> {
        let h = self.blas_handle(id)?;
        let stream = self.stream(stream)?;
        let api = self.blas_api()?;
        let (set_stream, set_math, set_pmode) =
            (api.set_stream, api.set_math_mode, api.set_pointer_mode);
        // SAFETY: `h` is live in the current context; the stream is one of ours;
        // cuBLAS checks the mode numbers itself.
        unsafe {
            cublas(set_stream(h, stream.cast()))?;
            cublas(set_math(h, math_mode as c_int))?;
            cublas(set_pmode(h, pointer_mode as c_int))?;
        }
        Ok((h, stream))
    }
}

/// A handle-setting entry point of the cuBLAS cudarc loaded (rare calls: looked up
/// each time).
fn option_entry_point(name: &str) -> ExecResult<*const c_void> {
    // SAFETY: the library was loaded when the handle was made (blas_api); cudarc keeps
    // it loaded for the process.
    let lib = unsafe { cudarc::cublas::sys::culib() };
    // SAFETY: only looks the address up; the caller types it from the prototype.
    unsafe { super::entry_point(lib, "libcublas", name) }
}

impl Blas for CudaExecutor {
    fn blas_default_workspace(&self) -> u64 {
        // cuBLAS's own default on Hopper-class GPUs.
        32 << 20
    }

    fn blas_create(&mut self) -> ExecResult<ExecBlas> {
        let create = self.blas_api()?.create;
        self.bind()?;
        let mut h: Handle = ptr::null_mut();
        // SAFETY: out-pointer to a local; the current device's context is current.
        cublas(unsafe { create(&mut h) })?;
        let id = h as usize as ExecBlas;
        self.blas.handles.insert(id, (h, self.current));
        debug!(device = self.current, "cuBLAS handle created");
        Ok(id)
    }

    fn blas_destroy(&mut self, id: ExecBlas) -> ExecResult<()> {
        let h = self.blas_handle(id)?;
        let destroy = self.blas_api()?.destroy;
        self.blas.handles.remove(&id);
        // SAFETY: made by blas_create and removed from the map: destroyed once.
        cublas(unsafe { destroy(h) })
    }

    fn blas_set_option(&mut self, id: ExecBlas, option: BlasOption, value: i32) -> ExecResult<()> {
        let h = self.blas_handle(id)?;
        let set = option_entry_point(option.entry_points().0)?;
        // SAFETY: `h` is live; `cublasSet<option>(handle, int-sized value)` by cuBLAS's
        // prototype (enums and ints alike).
        cublas(unsafe {
            let set: unsafe extern "C" fn(Handle, c_int) -> Status = std::mem::transmute(set);
            set(h, value)
        })
    }

    fn blas_get_option(&mut self, id: ExecBlas, option: BlasOption) -> ExecResult<i32> {
        let h = self.blas_handle(id)?;
        let get = option_entry_point(option.entry_points().1)?;
        let mut value: c_int = 0;
        // SAFETY: `h` is live; `cublasGet<option>(handle, int-sized out)` by cuBLAS's
        // prototype; the out-pointer is a local.
        cublas(unsafe {
            let get: unsafe extern "C" fn(Handle, *mut c_int) -> Status = std::mem::transmute(get);
            get(h, &mut value)
        })?;
        Ok(value)
    }

    fn blas_set_workspace(&mut self, id: ExecBlas, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        let h = self.blas_handle(id)?;
        let set = self.blas_api()?.set_workspace;
        let size = usize::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        // SAFETY: `h` is live; the session checked that [ptr, ptr + size) is the
        // guest's own device memory (or the workspace it allocated for it).
        cublas(unsafe { set(h, ptr as usize as *mut c_void, size) })
    }

    fn blas_gemm(&mut self, id: ExecBlas, call: &GemmCall<'_>) -> ExecResult<()> {
        let (alpha, beta, mode) = match call.scalars {
            Scalars::Host { alpha, beta } => (
                alpha.as_ptr().cast(),
                beta.as_ptr().cast(),
                POINTER_MODE_HOST,
            ),
            Scalars::Device { alpha, beta } => (
                *alpha as usize as Ptr,
                *beta as usize as Ptr,
                POINTER_MODE_DEVICE,
            ),
        };
        let (h, stream) = self.blas_prepare(id, call.stream, call.math_mode, mode)?;
        let api = self.blas_api()?;
        let typed = api.typed;
        let (ex, strided_ex, batched_ex) = (api.ex, api.strided_ex, api.batched_ex);
        // The session validated every size against INT_MAX and every range against
        // the guest's memory; host-mode scalars point into `call`, alive until we return.
        let (ta, tb) = (call.trans_a as c_int, call.trans_b as c_int);
        let (m, n, k) = (call.m as c_int, call.n as c_int, call.k as c_int);
        let (lda, ldb, ldc) = (call.a.ld as c_int, call.b.ld as c_int, call.c.ld as c_int);
        let (a, b, c) = (
            call.a.ptr as usize as Ptr,
            call.b.ptr as usize as Ptr,
            call.c.ptr as usize as Ptr,
        );
        let (sa, sb, sc) = (call.a.stride, call.b.stride, call.c.stride);
        match (call.kind, call.batch) {
            (GemmKind::Typed(p), ExecBatch::Single) => {
                let f = typed[precision_index(p)].0;
                // SAFETY: as above; `f` has the GemmFn signature.
                cublas(unsafe { f(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) })
            }
            (GemmKind::Typed(p), ExecBatch::Strided { count }) => {
                let f = typed[precision_index(p)].1;
                // SAFETY: as above; the whole batch's spans were checked.
                cublas(unsafe {
                    f(
                        h,
                        ta,
                        tb,
                        m,
                        n,
                        k,
                        alpha,
                        a,
                        lda,
                        sa,
                        b,
                        ldb,
                        sb,
                        beta,
                        c,
                        ldc,
                        sc,
                        count as c_int,
                    )
                })
            }
            (GemmKind::Typed(p), ExecBatch::Pointers { a, b, c }) => {
                let f = typed[precision_index(p)].2;
                let count = a.len() as c_int;
                self.with_device_arrays(stream, &[a, b, c], |p| {
                    let (a, b, c) = (p[0], p[1], p[2]);
                    // SAFETY: as above; the arrays are our device copies of checked pointers.
                    cublas(unsafe {
                        f(
                            h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count,
                        )
                    })
                })
            }
            (
                GemmKind::Ex {
                    a_type,
                    b_type,
                    c_type,
                    compute,
                    algo,
                },
                batch,
            ) => match batch {
                ExecBatch::Single => {
                    // SAFETY: as above; cuBLAS checks the type numbers.
                    cublas(unsafe {
                        ex(
                            h, ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                            c_type, ldc, compute, algo,
                        )
                    })
                }
                ExecBatch::Strided { count } => {
                    // SAFETY: as above.
                    cublas(unsafe {
                        strided_ex(
                            h,
                            ta,
                            tb,
                            m,
                            n,
                            k,
                            alpha,
                            a,
                            a_type,
                            lda,
                            sa,
                            b,
                            b_type,
                            ldb,
                            sb,
                            beta,
                            c,
                            c_type,
                            ldc,
                            sc,
                            count as c_int,
                            compute,
                            algo,
                        )
                    })
                }
                ExecBatch::Pointers { a, b, c } => {
                    let count = a.len() as c_int;
                    self.with_device_arrays(stream, &[a, b, c], |p| {
                        let (a, b, c) = (p[0], p[1], p[2]);
                        // SAFETY: as above; the arrays are our device copies.
                        cublas(unsafe {
                            batched_ex(
                                h, ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                                c_type, ldc, count, compute, algo,
                            )
                        })
                    })
                }
            },
        }
    }

    fn blas_call(&mut self, id: ExecBlas, call: &mut TableCall) -> ExecResult<()> {
        self.blas_table_call(id, call)
    }
}
