//! The reference GEMM: `C = alpha * op(A) * op(B) + beta * C`, column-major.

use vmcuda_wire::blas::{compute_type, data_type, GemmKind};

use super::super::super::blas::GemmCall;
use super::{load, store, Cx};

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
    use super::super::super::super::blas::ExecBatch;
    use super::super::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
    use super::*;
    use vmcuda_wire::blas::{Operand, Precision, Scalars};

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
