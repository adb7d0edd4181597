//! The reference cuBLASLt matmul for real floating-point types with the default, bias
//! and ReLU epilogues.

use vmcuda_wire::blas::{compute_type, data_type};
use vmcuda_wire::blaslt::{epilogue, LtShape};

use super::{load, store, Cx};

/// Whether [`cpu_matmul`] computes this matmul.
pub fn cpu_matmul_supports(shape: &LtShape) -> bool {
    use data_type as d;
    let real = |t| matches!(t, d::R_32F | d::R_64F | d::R_16F | d::R_16BF);
    shape.matrices.iter().all(|m| real(m.data_type))
        && matches!(shape.scale_type, d::R_32F | d::R_64F)
        && compute_type::scalar_size(shape.compute).is_some_and(|s| s >= 4)
        && !matches!(
            shape.compute,
            compute_type::C32I | compute_type::C32I_PEDANTIC
        )
        && matches!(
            shape.epilogue,
            epilogue::DEFAULT | epilogue::RELU | epilogue::BIAS | epilogue::RELU_BIAS
        )
        && shape.bias.is_none_or(|b| real(b.data_type))
        && shape.scalar_ptrs.is_empty()
}

/// One matmul of a batch for [`cpu_matmul`]: the bytes of A, B, C and the bias (read
/// only, each from its matrix's first element; C and bias may be empty when not read)
/// and D.
pub struct LtCpuOperands<'a> {
    pub a: &'a [u8],
    pub b: &'a [u8],
    pub c: &'a [u8],
    pub bias: &'a [u8],
    pub d: &'a mut [u8],
}

/// `D = epilogue(alpha * op(A) op(B) + beta * C)` for one matrix of the batch, on the
/// CPU, accumulated in double precision and rounded once on the store of D. As in
/// cuBLASLt, `beta == 0` does not read C; the bias is added before the ReLU.
pub fn cpu_matmul(shape: &LtShape, alpha: &[u8], beta: &[u8], ops: LtCpuOperands<'_>) {
    let [a, b, c, d] = &shape.matrices;
    let alpha = load(shape.scale_type, alpha).re;
    let beta = load(shape.scale_type, beta).re;
    // op(X)(row, col) of a stored matrix.
    let element = |bytes: &[u8], x: &vmcuda_wire::blaslt::MatrixInfo, t, row, col| {
        let (r, cl) = if t == 0 { (row, col) } else { (col, row) };
        load(x.data_type, &bytes[(x.offset(r, cl) * x.elem) as usize..]).re
    };
    let relu = matches!(shape.epilogue, epilogue::RELU | epilogue::RELU_BIAS);
    for j in 0..shape.n {
        for i in 0..shape.m {
            let mut sum = 0.0;
            for l in 0..shape.k {
                sum +=
                    element(ops.a, a, shape.trans_a, i, l) * element(ops.b, b, shape.trans_b, l, j);
            }
            let mut v = alpha * sum;
            if beta != 0.0 {
                v += beta * element(ops.c, c, 0, i, j);
            }
            if let Some(bias) = &shape.bias {
                v += load(bias.data_type, &ops.bias[(i * bias.elem) as usize..]).re;
            }
            if relu {
                v = v.max(0.0);
            }
            let at = (d.offset(i, j) * d.elem) as usize;
            store(d.data_type, Cx::real(v), &mut ops.d[at..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcuda_wire::blaslt::LtProblem;
    use vmcuda_wire::blaslt::{desc, layout, Descriptor, LAYOUT_ATTRS, MATMUL_DESC_ATTRS};

    fn layout_of(t: i32, rows: u64, cols: u64, ld: i64, order: i32) -> Descriptor {
        let mut l = Descriptor::default();
        let t4 = (t as u32).to_le_bytes();
        l.set(LAYOUT_ATTRS, layout::TYPE, &t4).unwrap();
        l.set(LAYOUT_ATTRS, layout::ROWS, &rows.to_le_bytes())
            .unwrap();
        l.set(LAYOUT_ATTRS, layout::COLS, &cols.to_le_bytes())
            .unwrap();
        l.set(LAYOUT_ATTRS, layout::LD, &ld.to_le_bytes()).unwrap();
        l.set(LAYOUT_ATTRS, layout::ORDER, &order.to_le_bytes())
            .unwrap();
        l
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn matmul_with_bias_relu_transposes_and_row_major_output() {
        // A (2x3) = [1 2 3; 4 5 6] stored transposed (3x2 column-major, TRANSA = T),
        // B (3x2) = [7 8; 9 10; 11 12] column-major, D row-major (ld 2).
        let mut d = Descriptor::default();
        let set = |d: &mut Descriptor, id, v: u32| {
            d.set(MATMUL_DESC_ATTRS, id, &v.to_le_bytes()).unwrap()
        };
        set(&mut d, desc::COMPUTE_TYPE, compute_type::C32F as u32);
        set(&mut d, desc::SCALE_TYPE, data_type::R_32F as u32);
        set(&mut d, desc::TRANSA, 1);
        set(&mut d, desc::EPILOGUE, epilogue::RELU_BIAS);
        d.set(MATMUL_DESC_ATTRS, desc::BIAS_POINTER, &8u64.to_le_bytes())
            .unwrap();
        let f = data_type::R_32F;
        let problem = LtProblem {
            desc: d,
            layouts: [
                layout_of(f, 3, 2, 3, 0),
                layout_of(f, 3, 2, 3, 0),
                layout_of(f, 2, 2, 2, 1),
                layout_of(f, 2, 2, 2, 1),
            ],
        };
        let shape = problem.validate().unwrap();
        assert!(cpu_matmul_supports(&shape));
        let a = f32s(&[1., 2., 3., 4., 5., 6.]);
        let b = f32s(&[7., 9., 11., 8., 10., 12.]);
        let bias = f32s(&[-100., -200.]);
        let run = |bias: &[u8]| {
            let mut out = vec![0u8; 16];
            let ops = LtCpuOperands {
                a: &a,
                b: &b,
                c: &[],
                bias,
                d: &mut out,
            };
            cpu_matmul(&shape, &f32s(&[1.0]), &f32s(&[0.0]), ops);
            out
        };
        // A*B = [58 64; 139 154]; + bias per row = [-42 -36; -61 -46]; ReLU: 0.
        assert_eq!(run(&bias), f32s(&[0., 0., 0., 0.]));
        let bias = f32s(&[1., -140.]);
        let out = run(&bias);
        // Row-major D: [59 65; 0 14].
        assert_eq!(out, f32s(&[59., 65., 0., 14.]));
    }
}
