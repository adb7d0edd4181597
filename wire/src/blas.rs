//! cuBLAS on the wire: the request types of the BLAS ops and the argument checks and
//! memory extents both ends compute from them.
//!
//! One [`BlasGemm`] request carries every GEMM family (S/D/H/C/Z, `GemmEx`, their
//! strided-batched and pointer-array-batched forms): the family travels as a
//! [`GemmKind`], the batch shape as a [`Batch`], so the host calls the very cuBLAS
//! function the program called. The guest checks the arguments with
//! [`BlasGemm::validate`] before it posts the request (cuBLAS reports argument errors
//! synchronously, and a posted request has no reply); the host runs the same check
//! again (a guest is not trusted) and uses [`GemmExtents`] to refuse any operand that
//! reaches outside the guest's own memory.

use serde::{Deserialize, Serialize};

use crate::handle::{DevicePtr, StreamHandle};

/// A cuBLAS handle named by the guest (ids picked by the guest, like streams), so
/// that the program's `cublasHandle_t` needs no host pointer.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct BlasHandle(pub u64);

/// `cublasStatus_t` values the bridge produces.
pub mod status {
    pub const SUCCESS: u32 = 0;
    pub const NOT_INITIALIZED: u32 = 1;
    pub const ALLOC_FAILED: u32 = 3;
    pub const INVALID_VALUE: u32 = 7;
    pub const ARCH_MISMATCH: u32 = 8;
    pub const MAPPING_ERROR: u32 = 11;
    pub const EXECUTION_FAILED: u32 = 13;
    pub const INTERNAL_ERROR: u32 = 14;
    pub const NOT_SUPPORTED: u32 = 15;
    pub const LICENSE_ERROR: u32 = 16;
}

/// `cudaDataType` values.
pub mod data_type {
    pub const R_32F: i32 = 0;
    pub const R_64F: i32 = 1;
    pub const R_16F: i32 = 2;
    pub const R_8I: i32 = 3;
    pub const C_32F: i32 = 4;
    pub const C_64F: i32 = 5;
    pub const C_16F: i32 = 6;
    pub const C_8I: i32 = 7;
    pub const R_8U: i32 = 8;
    pub const R_32I: i32 = 10;
    pub const R_16BF: i32 = 14;
    pub const C_16BF: i32 = 15;
    pub const R_8F_E4M3: i32 = 28;
    pub const R_8F_E5M2: i32 = 29;

    /// Bytes per element, for the types GEMMs take.
    pub fn size(t: i32) -> Option<u64> {
        Some(match t {
            R_8I | R_8U | R_8F_E4M3 | R_8F_E5M2 => 1,
            R_16F | R_16BF | C_8I => 2,
            R_32F | R_32I | C_16F | C_16BF => 4,
            R_64F | C_32F => 8,
            C_64F => 16,
            _ => return None,
        })
    }

    pub fn is_complex(t: i32) -> bool {
        matches!(t, C_32F | C_64F | C_16F | C_8I | C_16BF)
    }
}

/// `cublasComputeType_t` values.
pub mod compute_type {
    pub const C16F: i32 = 64;
    pub const C16F_PEDANTIC: i32 = 65;
    pub const C32F: i32 = 68;
    pub const C32F_PEDANTIC: i32 = 69;
    pub const C64F: i32 = 70;
    pub const C64F_PEDANTIC: i32 = 71;
    pub const C32I: i32 = 72;
    pub const C32I_PEDANTIC: i32 = 73;
    pub const C32F_FAST_16F: i32 = 74;
    pub const C32F_FAST_16BF: i32 = 75;
    pub const C32F_FAST_TF32: i32 = 77;
    pub const C32F_EMULATED_16BFX9: i32 = 78;
    pub const C64F_EMULATED_FIXEDPOINT: i32 = 79;

    /// Bytes of one real `alpha`/`beta` scalar for this compute type.
    pub fn scalar_size(c: i32) -> Option<u64> {
        Some(match c {
            C16F | C16F_PEDANTIC => 2,
            C32F | C32F_PEDANTIC | C32F_FAST_16F | C32F_FAST_16BF | C32F_FAST_TF32
            | C32F_EMULATED_16BFX9 | C32I | C32I_PEDANTIC => 4,
            C64F | C64F_PEDANTIC | C64F_EMULATED_FIXEDPOINT => 8,
            _ => return None,
        })
    }
}

/// `cublasPointerMode_t`.
pub const POINTER_MODE_HOST: u32 = 0;
pub const POINTER_MODE_DEVICE: u32 = 1;

/// The precision of the classic typed GEMMs (`cublas?gemm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    /// float
    S,
    /// double
    D,
    /// half (compute in half)
    H,
    /// complex float
    C,
    /// complex double
    Z,
}

impl Precision {
    /// The `cudaDataType` of its matrices (and scalars).
    pub fn data_type(self) -> i32 {
        match self {
            Precision::S => data_type::R_32F,
            Precision::D => data_type::R_64F,
            Precision::H => data_type::R_16F,
            Precision::C => data_type::C_32F,
            Precision::Z => data_type::C_64F,
        }
    }
}

/// Which GEMM the program called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GemmKind {
    /// `cublas{S,D,H,C,Z}gemm[_v2|StridedBatched|Batched]`.
    Typed(Precision),
    /// `cublasGemmEx` / `cublasGemmStridedBatchedEx` / `cublasGemmBatchedEx`.
    Ex {
        a_type: i32,
        b_type: i32,
        c_type: i32,
        compute: i32,
        algo: i32,
    },
}

impl GemmKind {
    /// `cudaDataType`s of A, B and C.
    pub fn types(self) -> (i32, i32, i32) {
        match self {
            GemmKind::Typed(p) => (p.data_type(), p.data_type(), p.data_type()),
            GemmKind::Ex {
                a_type,
                b_type,
                c_type,
                ..
            } => (a_type, b_type, c_type),
        }
    }

    /// Bytes of one `alpha` or `beta`.
    pub fn scalar_size(self) -> Option<u64> {
        match self {
            GemmKind::Typed(p) => data_type::size(p.data_type()),
            GemmKind::Ex {
                c_type, compute, ..
            } => {
                let real = compute_type::scalar_size(compute)?;
                Some(if data_type::is_complex(c_type) {
                    real * 2
                } else {
                    real
                })
            }
        }
    }
}

/// How `alpha` and `beta` travel: by value when the handle's pointer mode is host
/// (the program's host memory is read in the guest, at the call, as cuBLAS reads it),
/// as device pointers in device pointer mode (read by the GPU when the GEMM runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Scalars {
    Host { alpha: Vec<u8>, beta: Vec<u8> },
    Device { alpha: DevicePtr, beta: DevicePtr },
}

/// One matrix operand: its device pointer (for [`Batch::Pointers`], the device
/// array of per-batch pointers), leading dimension, and batch stride in elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    pub ptr: DevicePtr,
    pub ld: i64,
    pub stride: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Batch {
    /// One GEMM.
    Single,
    /// `count` GEMMs, operand i at `ptr + i * stride` elements.
    Strided { count: i64 },
    /// `count` GEMMs, the operands' pointers in device arrays (`Operand::ptr`).
    Pointers { count: i64 },
}

impl Batch {
    pub fn count(self) -> i64 {
        match self {
            Batch::Single => 1,
            Batch::Strided { count } | Batch::Pointers { count } => count,
        }
    }
}

/// `cublasCreate`: the guest names the handle.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasCreate {
    pub handle: BlasHandle,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasDestroy {
    pub handle: BlasHandle,
}
/// `cublasSetWorkspace`: the program's own device memory becomes the handle's
/// workspace (`size` 0: back to a workspace the host provides).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasSetWorkspace {
    pub handle: BlasHandle,
    pub ptr: DevicePtr,
    pub size: u64,
}

/// A handle setting cuBLAS keeps beside the modes that travel with each call: one
/// 32-bit value set with `cublasSet<name>` and read with `cublasGet<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BlasOption {
    EnvironmentMode = 0,
    EmulationStrategy = 1,
    EmulationSpecialValuesSupport = 2,
    FixedPointEmulationMantissaControl = 3,
    FixedPointEmulationMaxMantissaBitCount = 4,
    FixedPointEmulationMantissaBitOffset = 5,
}

impl BlasOption {
    pub const ALL: [BlasOption; 6] = [
        BlasOption::EnvironmentMode,
        BlasOption::EmulationStrategy,
        BlasOption::EmulationSpecialValuesSupport,
        BlasOption::FixedPointEmulationMantissaControl,
        BlasOption::FixedPointEmulationMaxMantissaBitCount,
        BlasOption::FixedPointEmulationMantissaBitOffset,
    ];

    pub fn from_u32(v: u32) -> Option<BlasOption> {
        Self::ALL.get(v as usize).copied()
    }

    /// The cuBLAS entry points that set and get it.
    pub fn entry_points(self) -> (&'static str, &'static str) {
        match self {
            BlasOption::EnvironmentMode => ("cublasSetEnvironmentMode", "cublasGetEnvironmentMode"),
            BlasOption::EmulationStrategy => {
                ("cublasSetEmulationStrategy", "cublasGetEmulationStrategy")
            }
            BlasOption::EmulationSpecialValuesSupport => (
                "cublasSetEmulationSpecialValuesSupport",
                "cublasGetEmulationSpecialValuesSupport",
            ),
            BlasOption::FixedPointEmulationMantissaControl => (
                "cublasSetFixedPointEmulationMantissaControl",
                "cublasGetFixedPointEmulationMantissaControl",
            ),
            BlasOption::FixedPointEmulationMaxMantissaBitCount => (
                "cublasSetFixedPointEmulationMaxMantissaBitCount",
                "cublasGetFixedPointEmulationMaxMantissaBitCount",
            ),
            BlasOption::FixedPointEmulationMantissaBitOffset => (
                "cublasSetFixedPointEmulationMantissaBitOffset",
                "cublasGetFixedPointEmulationMantissaBitOffset",
            ),
        }
    }
}

/// `cublasSet<option>`: waited for, as cuBLAS judges the value at once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasSetOption {
    pub handle: BlasHandle,
    /// [`BlasOption`].
    pub option: u32,
    pub value: i32,
}

/// `cublasGet<option>` of a setting the program has not set (the guest answers the
/// ones it set).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasGetOption {
    pub handle: BlasHandle,
    pub option: u32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BlasOptionValue {
    pub value: i32,
}

/// Any GEMM. Transposes are `cublasOperation_t` (0 N, 1 T, 2 C); `math_mode` is the
/// handle's `cublasMath_t`, applied before the call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BlasGemm {
    pub handle: BlasHandle,
    pub stream: StreamHandle,
    pub math_mode: u32,
    pub kind: GemmKind,
    pub trans_a: u32,
    pub trans_b: u32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub scalars: Scalars,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub batch: Batch,
}

/// Bytes a column-major `rows x cols` matrix with leading dimension `ld` spans from
/// its first element (0 when it is empty). `None` on overflow.
/// The stored (rows, columns) of an operand whose op is `rows x cols`: transposed when
/// the op is T or C.
pub fn stored_shape(trans: u32, rows: i64, cols: i64) -> (i64, i64) {
    if trans == 0 {
        (rows, cols)
    } else {
        (cols, rows)
    }
}

pub fn matrix_span(rows: i64, cols: i64, ld: i64, elem: u64) -> Option<u64> {
    if rows <= 0 || cols <= 0 {
        return Some(0);
    }
    let elems = (cols as u64 - 1)
        .checked_mul(ld as u64)?
        .checked_add(rows as u64)?;
    elems.checked_mul(elem)
}

/// The bytes one operand spans over a batch: each matrix is `span` bytes, matrix i
/// starts `i * stride` elements after the first. `None` on overflow.
pub fn batch_span(span: u64, stride: i64, count: i64, elem: u64) -> Option<u64> {
    if span == 0 || count <= 0 {
        return Some(0);
    }
    (stride as u64)
        .checked_mul(elem)?
        .checked_mul(count as u64 - 1)?
        .checked_add(span)
}

/// What a checked GEMM touches: per operand the bytes one matrix spans, and for
/// strided batches the bytes the whole batch spans from the operand's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmExtents {
    /// Element sizes of A, B, C.
    pub elem: [u64; 3],
    /// Bytes one matrix of A, B, C spans (0: not read, e.g. `k == 0` for A and B).
    pub matrix: [u64; 3],
    /// Bytes from `Operand::ptr` the batch spans (strided and single); for pointer
    /// arrays, the bytes of the pointer array itself.
    pub total: [u64; 3],
    /// Bytes of one scalar.
    pub scalar: u64,
}

/// Why a GEMM's arguments are refused, as cuBLAS would say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GemmArgError {
    #[error("invalid GEMM argument: {0}")]
    Invalid(&'static str),
    #[error("unsupported GEMM type combination")]
    Unsupported,
}

impl GemmArgError {
    /// The `cublasStatus_t` cuBLAS returns for it.
    pub fn status(self) -> u32 {
        match self {
            GemmArgError::Invalid(_) => status::INVALID_VALUE,
            GemmArgError::Unsupported => status::NOT_SUPPORTED,
        }
    }
}

fn ensure(ok: bool, what: &'static str) -> Result<(), GemmArgError> {
    if ok {
        Ok(())
    } else {
        Err(GemmArgError::Invalid(what))
    }
}

impl BlasGemm {
    /// The checks cuBLAS makes before it queues anything (sizes, leading dimensions,
    /// operations, types, scalar sizes), and the extents of every operand.
    pub fn validate(&self) -> Result<GemmExtents, GemmArgError> {
        ensure(self.m >= 0 && self.n >= 0 && self.k >= 0, "m, n, k < 0")?;
        ensure(
            self.trans_a <= 2 && self.trans_b <= 2,
            "transpose is not N, T or C",
        )?;
        let count = self.batch.count();
        ensure(count >= 0, "batch count < 0")?;
        // The host calls the 32-bit entry points (for the guest's `_64` ones too): a GEMM
        // with a size above INT_MAX is refused.
        let int = |v: i64| v <= i32::MAX as i64;
        ensure(
            int(self.m) && int(self.n) && int(self.k) && int(count),
            "size above INT_MAX",
        )?;
        let (at, bt, ct) = self.kind.types();
        let size = |t| data_type::size(t).ok_or(GemmArgError::Unsupported);
        let elem = [size(at)?, size(bt)?, size(ct)?];
        let scalar = self.kind.scalar_size().ok_or(GemmArgError::Unsupported)?;
        // op(A) is m x k, op(B) is k x n.
        let (a_rows, a_cols) = stored_shape(self.trans_a, self.m, self.k);
        let (b_rows, b_cols) = stored_shape(self.trans_b, self.k, self.n);
        ensure(
            self.a.ld >= a_rows.max(1) && int(self.a.ld),
            "lda too small",
        )?;
        ensure(
            self.b.ld >= b_rows.max(1) && int(self.b.ld),
            "ldb too small",
        )?;
        ensure(
            self.c.ld >= self.m.max(1) && int(self.c.ld),
            "ldc too small",
        )?;
        let overflow = GemmArgError::Invalid("operand extent overflows");
        // With m or n zero nothing is touched; with k zero, C = beta * C.
        let nothing = self.m == 0 || self.n == 0;
        let matrix = if nothing {
            [0, 0, 0]
        } else {
            [
                matrix_span(a_rows, a_cols, self.a.ld, elem[0]).ok_or(overflow)?,
                matrix_span(b_rows, b_cols, self.b.ld, elem[1]).ok_or(overflow)?,
                matrix_span(self.m, self.n, self.c.ld, elem[2]).ok_or(overflow)?,
            ]
        };
        let total = match self.batch {
            Batch::Single => matrix,
            Batch::Strided { count } => {
                let ops = [self.a, self.b, self.c];
                let mut t = [0; 3];
                for i in 0..3 {
                    ensure(ops[i].stride >= 0, "negative batch stride")?;
                    t[i] = batch_span(matrix[i], ops[i].stride, count, elem[i]).ok_or(overflow)?;
                }
                t
            }
            Batch::Pointers { count } => {
                let array = if nothing { 0 } else { count as u64 * 8 };
                [array, array, array]
            }
        };
        if let Scalars::Host { alpha, beta } = &self.scalars {
            ensure(
                alpha.len() as u64 == scalar && beta.len() as u64 == scalar,
                "scalar size",
            )?;
        }
        Ok(GemmExtents {
            elem,
            matrix,
            total,
            scalar,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sgemm(m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64) -> BlasGemm {
        BlasGemm {
            handle: BlasHandle(1),
            stream: StreamHandle::LEGACY,
            math_mode: 0,
            kind: GemmKind::Typed(Precision::S),
            trans_a: 0,
            trans_b: 0,
            m,
            n,
            k,
            scalars: Scalars::Host {
                alpha: 1f32.to_le_bytes().to_vec(),
                beta: 0f32.to_le_bytes().to_vec(),
            },
            a: Operand {
                ptr: 0x1000,
                ld: lda,
                stride: 0,
            },
            b: Operand {
                ptr: 0x2000,
                ld: ldb,
                stride: 0,
            },
            c: Operand {
                ptr: 0x3000,
                ld: ldc,
                stride: 0,
            },
            batch: Batch::Single,
        }
    }

    #[test]
    fn spans_are_column_major_with_leading_dimension() {
        assert_eq!(matrix_span(3, 2, 5, 4), Some((5 + 3) * 4));
        assert_eq!(matrix_span(0, 2, 5, 4), Some(0));
        assert_eq!(matrix_span(1, 1, 1, 8), Some(8));
        assert_eq!(matrix_span(2, i64::MAX, i64::MAX, 8), None);
    }

    #[test]
    fn extents_follow_the_transposes() {
        let g = sgemm(4, 3, 2, 4, 2, 4);
        let e = g.validate().unwrap();
        assert_eq!(e.matrix, [4 * 2 * 4, 2 * 3 * 4, 4 * 3 * 4]);
        let mut t = sgemm(4, 3, 2, 2, 3, 4);
        t.trans_a = 1; // A stored k x m
        t.trans_b = 2; // B stored n x k
        let e = t.validate().unwrap();
        assert_eq!(e.matrix, [(3 * 2 + 2) * 4, (3 + 3) * 4, 48]);
    }

    #[test]
    fn bad_arguments_are_invalid_value() {
        for g in [
            sgemm(-1, 1, 1, 1, 1, 1),
            sgemm(4, 1, 1, 3, 1, 4), // lda < m
            sgemm(4, 1, 2, 4, 1, 4), // ldb < k
            sgemm(4, 1, 1, 4, 1, 3), // ldc < m
            sgemm(1 << 31, 1, 1, 1 << 31, 1, 1 << 31),
        ] {
            assert_eq!(
                g.validate().map_err(|e| e.status()),
                Err(status::INVALID_VALUE),
                "{g:?}"
            );
        }
        let mut g = sgemm(1, 1, 1, 1, 1, 1);
        g.trans_a = 3;
        assert!(g.validate().is_err());
        let mut g = sgemm(1, 1, 1, 1, 1, 1);
        g.scalars = Scalars::Host {
            alpha: vec![0; 8],
            beta: vec![0; 4],
        };
        assert!(g.validate().is_err(), "an 8-byte alpha for a float GEMM");
    }

    #[test]
    fn empty_gemms_touch_nothing_and_k_zero_touches_only_c() {
        assert_eq!(sgemm(0, 5, 5, 1, 5, 1).validate().unwrap().total, [0; 3]);
        let e = sgemm(2, 2, 0, 2, 1, 2).validate().unwrap();
        assert_eq!(e.matrix, [0, 0, 16]);
    }

    #[test]
    fn strided_batches_span_every_matrix_and_refuse_overflow() {
        let mut g = sgemm(2, 2, 2, 2, 2, 2);
        g.a.stride = 4;
        g.b.stride = 0; // broadcast B
        g.c.stride = 10;
        g.batch = Batch::Strided { count: 3 };
        let e = g.validate().unwrap();
        assert_eq!(e.total, [(4 * 2 + 4) * 4, 16, (10 * 2 + 4) * 4]);
        g.c.stride = i64::MAX / 2;
        assert!(g.validate().is_err());
        g.c.stride = -1;
        assert!(g.validate().is_err());
    }

    #[test]
    fn ex_scalars_follow_the_compute_type() {
        let mut g = sgemm(1, 1, 1, 1, 1, 1);
        g.kind = GemmKind::Ex {
            a_type: data_type::R_16BF,
            b_type: data_type::R_16BF,
            c_type: data_type::R_16BF,
            compute: compute_type::C32F,
            algo: -1,
        };
        let e = g.validate().unwrap();
        assert_eq!((e.elem, e.scalar), ([2, 2, 2], 4));
        g.kind = GemmKind::Ex {
            a_type: data_type::C_64F,
            b_type: data_type::C_64F,
            c_type: data_type::C_64F,
            compute: compute_type::C64F,
            algo: -1,
        };
        assert_eq!(g.kind.scalar_size(), Some(16));
        g.kind = GemmKind::Ex {
            a_type: 99,
            b_type: 0,
            c_type: 0,
            compute: compute_type::C32F,
            algo: -1,
        };
        assert_eq!(
            g.validate().map_err(|e| e.status()),
            Err(status::NOT_SUPPORTED)
        );
    }
}
