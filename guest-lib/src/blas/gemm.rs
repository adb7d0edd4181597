//! The GEMM families, all through one request ([`BlasGemm`]).

use std::ffi::{c_int, c_longlong, c_void};

use vmcuda_wire::blas::{
    stored_shape, Batch, BlasGemm, BlasHandle, GemmKind, Operand, Precision, Scalars,
    POINTER_MODE_DEVICE,
};

use super::handle::{self, Handle};
use super::{export, status, Result};
use crate::caller;

type Ptr = *const c_void;

/// The operation's shape as the program gave it.
struct Shape {
    trans: (c_int, c_int),
    mnk: (i64, i64, i64),
}

/// Check a GEMM and post it on the handle's stream.
///
/// # Safety
/// In host pointer mode `alpha` and `beta` are NULL or readable for one scalar of
/// the GEMM's compute type (cuBLAS's contract).
unsafe fn gemm(
    h: Handle,
    kind: GemmKind,
    shape: Shape,
    (alpha, beta): (Ptr, Ptr),
    [a, b, c]: [Operand; 3],
    batch: Batch,
) -> Result<()> {
    let s = handle::get(h)?;
    let scalar = kind.scalar_size().ok_or(status::NOT_SUPPORTED)?;
    if alpha.is_null() || beta.is_null() {
        return Err(status::INVALID_VALUE);
    }
    let scalars = if s.pointer_mode == POINTER_MODE_DEVICE {
        Scalars::Device {
            alpha: alpha as u64,
            beta: beta as u64,
        }
    } else {
        // Host scalars are read now, as cuBLAS reads them before it returns.
        let read = |p: Ptr| {
            // SAFETY: as `gemm`'s caller promised.
            unsafe { caller::bytes(p.cast(), scalar as usize) }
                .map(<[u8]>::to_vec)
                .map_err(|_| status::INVALID_VALUE)
        };
        Scalars::Host {
            alpha: read(alpha)?,
            beta: read(beta)?,
        }
    };
    let op = |t: c_int| u32::try_from(t).map_err(|_| status::INVALID_VALUE);
    let req = BlasGemm {
        handle: BlasHandle(h as u64),
        stream: handle::wire_stream(&s),
        math_mode: s.math_mode,
        kind,
        trans_a: op(shape.trans.0)?,
        trans_b: op(shape.trans.1)?,
        m: shape.mnk.0,
        n: shape.mnk.1,
        k: shape.mnk.2,
        scalars,
        a,
        b,
        c,
        batch,
    };
    let extents = req.validate().map_err(|e| {
        report_illegal_parameter(&req);
        e.status()
    })?;
    // Nothing to compute: cuBLAS returns at once.
    if req.batch.count() == 0 || extents.matrix[2] == 0 {
        return Ok(());
    }
    handle::post_on(&s, req)
}

/// cuBLAS's own words on stdout for a refused plain `?gemm` (the reference BLAS's
/// `xerbla`): the first illegal argument, numbered from `transa` = 1. Programs and
/// their tests see the same output as natively.
fn report_illegal_parameter(req: &BlasGemm) {
    let GemmKind::Typed(p) = req.kind else {
        return;
    };
    let routine = match p {
        Precision::S => "SGEMM",
        Precision::D => "DGEMM",
        Precision::C => "CGEMM",
        Precision::Z => "ZGEMM",
        // Only the routines whose message was checked against cuBLAS on the H200 (SGEMM)
        // and their reference-BLAS siblings speak.
        _ => return,
    };
    if !matches!(req.batch, Batch::Single) {
        return;
    }
    let rows = |t: u32, r: i64, c: i64| stored_shape(t, r, c).0;
    let checks = [
        (1, req.trans_a <= 2),
        (2, req.trans_b <= 2),
        (3, req.m >= 0),
        (4, req.n >= 0),
        (5, req.k >= 0),
        (8, req.a.ld >= rows(req.trans_a, req.m, req.k).max(1)),
        (10, req.b.ld >= rows(req.trans_b, req.k, req.n).max(1)),
        (13, req.c.ld >= req.m.max(1)),
    ];
    if let Some((number, _)) = checks.iter().find(|(_, ok)| !ok) {
        let line =
            format!(" ** On entry to {routine}  parameter number {number} had an illegal value\n");
        crate::client::write_console(1, line.as_bytes());
    }
}

fn operand(ptr: Ptr, ld: impl Into<i64>, stride: c_longlong) -> Operand {
    Operand {
        ptr: ptr as u64,
        ld: ld.into(),
        stride,
    }
}

/// The typed families: `cublas?gemm[_v2]`, `?gemmStridedBatched`, `?gemmBatched`,
/// with sizes of type `$int` (`c_int`, or `i64` for the `_64` entry points: one
/// request either way, sizes above `INT_MAX` refused as the host's cuBLAS calls take
/// C ints).
macro_rules! typed_gemms {
    ($int:ty => $($p:ident: $single:ident, $strided:ident, $batched:ident;)*) => {$(
        export! {
            fn $single(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, lda: $int, b: Ptr, ldb: $int, beta: Ptr, c: Ptr, ldc: $int,
            ) {
                // SAFETY: by cuBLAS's contract for the GEMMs, host-mode `alpha` and `beta`
                // are NULL or readable scalars.
                unsafe {
                    gemm(
                    h,
                    GemmKind::Typed(Precision::$p),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, 0), operand(b, ldb, 0), operand(c, ldc, 0)],
                    Batch::Single,
                    )
                }
            }
        }
        export! {
            fn $strided(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, lda: $int, sa: c_longlong, b: Ptr, ldb: $int, sb: c_longlong,
                beta: Ptr, c: Ptr, ldc: $int, sc: c_longlong, count: $int,
            ) {
                // SAFETY: by cuBLAS's contract for the GEMMs, host-mode `alpha` and `beta`
                // are NULL or readable scalars.
                unsafe {
                    gemm(
                    h,
                    GemmKind::Typed(Precision::$p),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, sa), operand(b, ldb, sb), operand(c, ldc, sc)],
                    Batch::Strided { count: count.into() },
                    )
                }
            }
        }
        export! {
            fn $batched(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, lda: $int, b: Ptr, ldb: $int, beta: Ptr, c: Ptr, ldc: $int,
                count: $int,
            ) {
                // The arrays of device pointers live in device memory: forwarded as is.
                // SAFETY: by cuBLAS's contract for the GEMMs, host-mode `alpha` and `beta`
                // are NULL or readable scalars.
                unsafe {
                    gemm(
                    h,
                    GemmKind::Typed(Precision::$p),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, 0), operand(b, ldb, 0), operand(c, ldc, 0)],
                    Batch::Pointers { count: count.into() },
                    )
                }
            }
        }
    )*};
}

typed_gemms! {
    c_int =>
    S: cublasSgemm_v2, cublasSgemmStridedBatched, cublasSgemmBatched;
    D: cublasDgemm_v2, cublasDgemmStridedBatched, cublasDgemmBatched;
    H: cublasHgemm, cublasHgemmStridedBatched, cublasHgemmBatched;
    C: cublasCgemm_v2, cublasCgemmStridedBatched, cublasCgemmBatched;
    Z: cublasZgemm_v2, cublasZgemmStridedBatched, cublasZgemmBatched;
}

typed_gemms! {
    i64 =>
    S: cublasSgemm_v2_64, cublasSgemmStridedBatched_64, cublasSgemmBatched_64;
    D: cublasDgemm_v2_64, cublasDgemmStridedBatched_64, cublasDgemmBatched_64;
    H: cublasHgemm_64, cublasHgemmStridedBatched_64, cublasHgemmBatched_64;
    C: cublasCgemm_v2_64, cublasCgemmStridedBatched_64, cublasCgemmBatched_64;
    Z: cublasZgemm_v2_64, cublasZgemmStridedBatched_64, cublasZgemmBatched_64;
}

fn ex(a_type: c_int, b_type: c_int, c_type: c_int, compute: c_int, algo: c_int) -> GemmKind {
    GemmKind::Ex {
        a_type,
        b_type,
        c_type,
        compute,
        algo,
    }
}

/// `cublasGemmEx`, `cublasGemmStridedBatchedEx`, `cublasGemmBatchedEx`, with sizes
/// of type `$int` (as `typed_gemms`).
macro_rules! ex_gemms {
    ($int:ty => $single:ident, $strided:ident, $batched:ident) => {
        export! {
            fn $single(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, at: c_int, lda: $int, b: Ptr, bt: c_int, ldb: $int, beta: Ptr,
                c: Ptr, ct: c_int, ldc: $int, compute: c_int, algo: c_int,
            ) {
                // SAFETY: by cublasGemmEx's contract its pointer arguments are as `gemm` requires.
                unsafe { gemm(
                    h,
                    ex(at, bt, ct, compute, algo),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, 0), operand(b, ldb, 0), operand(c, ldc, 0)],
                    Batch::Single,
                ) }
            }
        }

        export! {
            fn $strided(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, at: c_int, lda: $int, sa: c_longlong, b: Ptr, bt: c_int, ldb: $int,
                sb: c_longlong, beta: Ptr, c: Ptr, ct: c_int, ldc: $int, sc: c_longlong,
                count: $int, compute: c_int, algo: c_int,
            ) {
                // SAFETY: by cublasGemmStridedBatchedEx's contract its pointer arguments are as
                // `gemm` requires.
                unsafe { gemm(
                    h,
                    ex(at, bt, ct, compute, algo),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, sa), operand(b, ldb, sb), operand(c, ldc, sc)],
                    Batch::Strided { count: count.into() },
                ) }
            }
        }

        export! {
            fn $batched(
                h: Handle, ta: c_int, tb: c_int, m: $int, n: $int, k: $int, alpha: Ptr,
                a: Ptr, at: c_int, lda: $int, b: Ptr, bt: c_int, ldb: $int, beta: Ptr,
                c: Ptr, ct: c_int, ldc: $int, count: $int, compute: c_int, algo: c_int,
            ) {
                // SAFETY: by cublasGemmBatchedEx's contract its pointer arguments are as `gemm`
                // requires.
                unsafe { gemm(
                    h,
                    ex(at, bt, ct, compute, algo),
                    Shape { trans: (ta, tb), mnk: (m.into(), n.into(), k.into()) },
                    (alpha, beta),
                    [operand(a, lda, 0), operand(b, ldb, 0), operand(c, ldc, 0)],
                    Batch::Pointers { count: count.into() },
                ) }
            }
        }
    };
}

ex_gemms!(c_int => cublasGemmEx, cublasGemmStridedBatchedEx, cublasGemmBatchedEx);
ex_gemms!(i64 => cublasGemmEx_64, cublasGemmStridedBatchedEx_64, cublasGemmBatchedEx_64);
