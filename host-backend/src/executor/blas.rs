//! The BLAS part of the executor seam: cuBLAS handles and GEMMs.
//!
//! The session has already checked every argument and every device range (the
//! operands, the scalars in device pointer mode, and each pointer of a pointer-array
//! batch) before an executor sees a call. [`cpu_gemm`] is the host-memory test
//! double's GEMM: a plain column-major reference computation on the CPU, so that
//! forwarding can be tested end to end without a GPU. It is never a GPU result.

use vmcuda_wire::blas::{
    compute_type, data_type, matrix_span, stored_shape, GemmKind, Operand, Scalars,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::blas_table::TableCall;
use super::{ExecResult, ExecStream};

/// An executor's cuBLAS handle id.
pub type ExecBlas = u64;

/// How a checked GEMM's batch reaches the executor. For pointer arrays, the session
/// has read the arrays from device memory and checked every pointer: the executor
/// uses these copies, never the arrays the guest could still change.
#[derive(Clone, Copy, Debug)]
pub enum ExecBatch<'a> {
    Single,
    Strided {
        count: i64,
    },
    Pointers {
        a: &'a [u64],
        b: &'a [u64],
        c: &'a [u64],
    },
}

/// A checked GEMM, in cuBLAS's terms (column-major).
#[derive(Clone, Copy, Debug)]
pub struct GemmCall<'a> {
    pub stream: ExecStream,
    pub math_mode: u32,
    pub kind: GemmKind,
    pub trans_a: u32,
    pub trans_b: u32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub scalars: &'a Scalars,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub batch: ExecBatch<'a>,
}

pub trait Blas {
    /// Bytes of workspace the session should allocate (charged to the guest) and
    /// give each new handle, so the library does not allocate one behind the quota.
    fn blas_default_workspace(&self) -> u64;
    /// A new handle on the current device.
    fn blas_create(&mut self) -> ExecResult<ExecBlas>;
    fn blas_destroy(&mut self, handle: ExecBlas) -> ExecResult<()>;
    /// Give the handle `[ptr, ptr + size)` as its workspace.
    fn blas_set_workspace(&mut self, handle: ExecBlas, ptr: DevicePtr, size: u64)
        -> ExecResult<()>;
    fn blas_gemm(&mut self, handle: ExecBlas, call: &GemmCall<'_>) -> ExecResult<()>;
    /// A function of the table (`vmcuda_wire::blas_table`); host values are read and
    /// written in `call.args`.
    fn blas_call(&mut self, handle: ExecBlas, call: &mut TableCall) -> ExecResult<()>;
}

/// The CUDA status a failing `cublasStatus_t` is reported as: GEMMs are posted, so
/// their failures reach the program as the asynchronous CUDA error of its next
/// waited-for call.
pub fn status_from_cublas(status: u32) -> CudaStatus {
    use vmcuda_wire::blas::status as s;
    match status {
        s::INVALID_VALUE => CudaStatus::ErrorInvalidValue,
        s::ALLOC_FAILED => CudaStatus::ErrorMemoryAllocation,
        s::NOT_SUPPORTED | s::ARCH_MISMATCH => CudaStatus::ErrorNotSupported,
        s::NOT_INITIALIZED => CudaStatus::ErrorInitializationError,
        s::EXECUTION_FAILED => CudaStatus::ErrorLaunchFailure,
        _ => CudaStatus::ErrorUnknown,
    }
}

/// A complex number in double precision: every element and scalar of the reference
/// GEMM is computed in it (reals have `im == 0`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Cx {
    pub re: f64,
    pub im: f64,
}

impl Cx {
    pub fn real(re: f64) -> Cx {
        Cx { re, im: 0.0 }
    }
    pub fn add(self, o: Cx) -> Cx {
        Cx {
            re: self.re + o.re,
            im: self.im + o.im,
        }
    }
    pub fn sub(self, o: Cx) -> Cx {
        Cx {
            re: self.re - o.re,
            im: self.im - o.im,
        }
    }
    pub fn mul(self, o: Cx) -> Cx {
        Cx {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }
    pub fn conj(self) -> Cx {
        Cx {
            re: self.re,
            im: -self.im,
        }
    }
    pub fn div(self, o: Cx) -> Cx {
        let d = o.re * o.re + o.im * o.im;
        let n = self.mul(o.conj());
        Cx {
            re: n.re / d,
            im: n.im / d,
        }
    }
}

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let frac = (h & 0x3ff) as f32;
    sign * match exp {
        0 => frac * 2f32.powi(-24),
        31 if frac == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + frac / 1024.0) * 2f32.powi(e as i32 - 15),
    }
}

/// f32 to IEEE half, rounding to nearest even.
pub fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if f.is_nan() {
        return sign | 0x7e00;
    }
    let a = f.abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    if a < 2f32.powi(-24) * 0.5 {
        return sign;
    }
    // Scale so the half's last mantissa bit is worth 1, then round to an integer.
    let e = a.log2().floor().max(-14.0) as i32;
    let unit = 2f32.powi(e - 10);
    let q = (a / unit).round_ties_even() as u32; // 1024..=2048 for normals
    let (e, q) = if q >= 2048 { (e + 1, q / 2) } else { (e, q) };
    if q < 1024 {
        return sign | q as u16; // subnormal
    }
    sign | (((e + 15) as u16) << 10) | (q as u16 & 0x3ff)
}

fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

fn f32_to_bf16(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7fc0;
    }
    let bits = f.to_bits();
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    b[..N].try_into().expect("element size checked")
}

/// One element of type `t` from its bytes.
pub(super) fn load(t: i32, b: &[u8]) -> Cx {
    use data_type as d;
    match t {
        d::R_32F => Cx::real(f32::from_le_bytes(le(b)) as f64),
        d::R_64F => Cx::real(f64::from_le_bytes(le(b))),
        d::R_16F => Cx::real(f16_to_f32(u16::from_le_bytes(le(b))) as f64),
        d::R_16BF => Cx::real(bf16_to_f32(u16::from_le_bytes(le(b))) as f64),
        d::R_8I => Cx::real(b[0] as i8 as f64),
        d::R_8U => Cx::real(b[0] as f64),
        d::R_32I => Cx::real(i32::from_le_bytes(le(b)) as f64),
        d::C_32F => Cx {
            re: f32::from_le_bytes(le(b)) as f64,
            im: f32::from_le_bytes(le(&b[4..])) as f64,
        },
        d::C_64F => Cx {
            re: f64::from_le_bytes(le(b)),
            im: f64::from_le_bytes(le(&b[8..])),
        },
        _ => Cx::default(),
    }
}

pub(super) fn store(t: i32, v: Cx, b: &mut [u8]) {
    use data_type as d;
    match t {
        d::R_32F => b[..4].copy_from_slice(&(v.re as f32).to_le_bytes()),
        d::R_64F => b[..8].copy_from_slice(&v.re.to_le_bytes()),
        d::R_16F => b[..2].copy_from_slice(&f32_to_f16(v.re as f32).to_le_bytes()),
        d::R_16BF => b[..2].copy_from_slice(&f32_to_bf16(v.re as f32).to_le_bytes()),
        d::R_32I => b[..4].copy_from_slice(&(v.re as i32).to_le_bytes()),
        d::C_32F => {
            b[..4].copy_from_slice(&(v.re as f32).to_le_bytes());
            b[4..8].copy_from_slice(&(v.im as f32).to_le_bytes());
        }
        d::C_64F => {
            b[..8].copy_from_slice(&v.re.to_le_bytes());
            b[8..16].copy_from_slice(&v.im.to_le_bytes());
        }
        _ => {}
    }
}

/// The `cudaDataType` alpha and beta are stored as.
fn scalar_type(kind: GemmKind) -> i32 {
    use compute_type as c;
    match kind {
        GemmKind::Typed(p) => p.data_type(),
        GemmKind::Ex {
            c_type, compute, ..
        } => {
            let complex = data_type::is_complex(c_type);
            match (compute, complex) {
                (c::C16F | c::C16F_PEDANTIC, false) => data_type::R_16F,
                (c::C64F | c::C64F_PEDANTIC | c::C64F_EMULATED_FIXEDPOINT, false) => {
                    data_type::R_64F
                }
                (c::C64F | c::C64F_PEDANTIC | c::C64F_EMULATED_FIXEDPOINT, true) => {
                    data_type::C_64F
                }
                (c::C32I | c::C32I_PEDANTIC, _) => data_type::R_32I,
                (_, true) => data_type::C_32F,
                (_, false) => data_type::R_32F,
            }
        }
    }
}

/// Whether the reference GEMM handles this type combination.
pub fn cpu_gemm_supports(kind: GemmKind) -> bool {
    use data_type as d;
    let (a, b, c) = kind.types();
    let known = |t| {
        matches!(
            t,
            d::R_32F
                | d::R_64F
                | d::R_16F
                | d::R_16BF
                | d::R_8I
                | d::R_8U
                | d::R_32I
                | d::C_32F
                | d::C_64F
        )
    };
    let complex = d::is_complex(c);
    known(a)
        && known(b)
        && known(c)
        && d::is_complex(a) == complex
        && d::is_complex(b) == complex
        && !matches!(c, d::R_8I | d::R_8U)
}

impl GemmCall<'_> {
    /// Bytes one matrix of A, B and C spans (0 when the GEMM does not read it).
    pub fn spans(&self) -> [u64; 3] {
        let (at, bt, ct) = self.kind.types();
        let size = |t| data_type::size(t).unwrap_or(1);
        if self.m == 0 || self.n == 0 {
            return [0; 3];
        }
        let (ar, ac) = stored_shape(self.trans_a, self.m, self.k);
        let (br, bc) = stored_shape(self.trans_b, self.k, self.n);
        // The session validated the call, so none of these overflow.
        [
            matrix_span(ar, ac, self.a.ld, size(at)).unwrap_or(0),
            matrix_span(br, bc, self.b.ld, size(bt)).unwrap_or(0),
            matrix_span(self.m, self.n, self.c.ld, size(ct)).unwrap_or(0),
        ]
    }
}

/// One GEMM's operands for [`cpu_gemm`]: the bytes of A, B (read only) and C, each
/// starting at its matrix's first element and at least as long as its span.
pub struct CpuOperands<'a> {
    pub a: &'a [u8],
    pub b: &'a [u8],
    pub c: &'a mut [u8],
}

/// `C = alpha * op(A) * op(B) + beta * C` on the CPU, column-major, accumulated in
/// double precision (so half and bfloat16 inputs round once, on the store of C). As
/// in BLAS, `beta == 0` overwrites C without reading it.
pub fn cpu_gemm(call: &GemmCall<'_>, alpha: &[u8], beta: &[u8], ops: CpuOperands<'_>) {
    let (at, bt, ct) = call.kind.types();
    let st = scalar_type(call.kind);
    let (alpha, beta) = (load(st, alpha), load(st, beta));
    let size = |t| data_type::size(t).unwrap_or(1) as usize;
    let (ea, eb, ec) = (size(at), size(bt), size(ct));
    let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
    let (lda, ldb, ldc) = (call.a.ld as usize, call.b.ld as usize, call.c.ld as usize);
    // op(X)(row, col), reading X stored column-major with leading dimension ld.
    let element = |bytes: &[u8], t: i32, e: usize, ld: usize, op: u32, row: usize, col: usize| {
        let (r, c) = if op == 0 { (row, col) } else { (col, row) };
        let v = load(t, &bytes[(r + c * ld) * e..]);
        if op == 2 {
            v.conj()
        } else {
            v
        }
    };
    for j in 0..n {
        for i in 0..m {
            let mut sum = Cx::default();
            for l in 0..k {
                let x = element(ops.a, at, ea, lda, call.trans_a, i, l);
                let y = element(ops.b, bt, eb, ldb, call.trans_b, l, j);
                sum = sum.add(x.mul(y));
            }
            let at_c = (i + j * ldc) * ec;
            let mut v = alpha.mul(sum);
            if beta != Cx::default() {
                v = v.add(beta.mul(load(ct, &ops.c[at_c..])));
            }
            store(ct, v, &mut ops.c[at_c..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcuda_wire::blas::Precision;

    fn call<'a>(kind: GemmKind, scalars: &'a Scalars, ta: u32, tb: u32) -> GemmCall<'a> {
        GemmCall {
            stream: 0,
            math_mode: 0,
            kind,
            trans_a: ta,
            trans_b: tb,
            m: 2,
            n: 2,
            k: 3,
            scalars,
            a: Operand {
                ptr: 0,
                ld: if ta == 0 { 2 } else { 3 },
                stride: 0,
            },
            b: Operand {
                ptr: 0,
                ld: if tb == 0 { 3 } else { 2 },
                stride: 0,
            },
            c: Operand {
                ptr: 0,
                ld: 2,
                stride: 0,
            },
            batch: ExecBatch::Single,
        }
    }

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn sgemm_matches_a_hand_computation_with_and_without_transposes() {
        // A (2x3) = [1 2 3; 4 5 6], B (3x2) = [7 8; 9 10; 11 12], C = A*B = [58 64; 139 154].
        let a = bytes_f32(&[1., 4., 2., 5., 3., 6.]);
        let b = bytes_f32(&[7., 9., 11., 8., 10., 12.]);
        let s = Scalars::Host {
            alpha: bytes_f32(&[2.0]),
            beta: bytes_f32(&[1.0]),
        };
        let mut c = bytes_f32(&[1., 1., 1., 1.]);
        let g = call(GemmKind::Typed(Precision::S), &s, 0, 0);
        cpu_gemm(
            &g,
            &bytes_f32(&[2.0]),
            &bytes_f32(&[1.0]),
            CpuOperands {
                a: &a,
                b: &b,
                c: &mut c,
            },
        );
        assert_eq!(c, bytes_f32(&[117., 279., 129., 309.]));
        // The same product from A^T and B^T stored (T, T).
        let at = bytes_f32(&[1., 2., 3., 4., 5., 6.]);
        let bt = bytes_f32(&[7., 8., 9., 10., 11., 12.]);
        let mut c = vec![0xff; 16]; // beta == 0: C is not read, NaN bits vanish
        let g = call(GemmKind::Typed(Precision::S), &s, 1, 1);
        cpu_gemm(
            &g,
            &bytes_f32(&[1.0]),
            &bytes_f32(&[0.0]),
            CpuOperands {
                a: &at,
                b: &bt,
                c: &mut c,
            },
        );
        assert_eq!(c, bytes_f32(&[58., 139., 64., 154.]));
    }

    #[test]
    fn half_and_bfloat16_round_trip_exact_values() {
        for v in [
            0.0f32,
            1.0,
            -2.5,
            0.099975586,
            65504.0,
            6.1035156e-5,
            5.9604645e-8,
        ] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 1.0 / 2048.0), 0x3c00, "ties to even");
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(bf16_to_f32(f32_to_bf16(3.0)), 3.0);
        assert!(cpu_gemm_supports(GemmKind::Typed(Precision::Z)));
        assert!(!cpu_gemm_supports(GemmKind::Ex {
            a_type: data_type::R_32F,
            b_type: data_type::C_32F,
            c_type: data_type::C_32F,
            compute: compute_type::C32F,
            algo: -1
        }));
    }
}
