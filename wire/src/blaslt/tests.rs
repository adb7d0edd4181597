use super::*;
use crate::blas::{compute_type, data_type, status};

fn layout_of(t: i32, rows: u64, cols: u64, ld: i64) -> Descriptor {
    let mut l = Descriptor::default();
    l.set(LAYOUT_ATTRS, layout::TYPE, &(t as u32).to_le_bytes())
        .unwrap();
    l.set(LAYOUT_ATTRS, layout::ROWS, &rows.to_le_bytes())
        .unwrap();
    l.set(LAYOUT_ATTRS, layout::COLS, &cols.to_le_bytes())
        .unwrap();
    l.set(LAYOUT_ATTRS, layout::LD, &ld.to_le_bytes()).unwrap();
    l
}

fn problem(ta: u32, m: u64, n: u64, k: u64) -> LtProblem {
    let mut desc = Descriptor::default();
    let set = |d: &mut Descriptor, id, v: i32| d.set(MATMUL_DESC_ATTRS, id, &v.to_le_bytes());
    set(&mut desc, desc::COMPUTE_TYPE, compute_type::C32F).unwrap();
    set(&mut desc, desc::SCALE_TYPE, data_type::R_32F).unwrap();
    set(&mut desc, desc::TRANSA, ta as i32).unwrap();
    let a = if ta == 0 {
        layout_of(data_type::R_16F, m, k, m as i64)
    } else {
        layout_of(data_type::R_16F, k, m, k as i64)
    };
    LtProblem {
        desc,
        layouts: [
            a,
            layout_of(data_type::R_16F, k, n, k as i64),
            layout_of(data_type::R_16F, m, n, m as i64),
            layout_of(data_type::R_16F, m, n, m as i64),
        ],
    }
}

#[test]
fn heuristic_results_have_cublaslt_layout() {
    // A 64-byte algo, size_t, cublasStatus_t, float, int[4].
    assert_eq!(std::mem::size_of::<RawHeuristicResult>(), 96);
}

#[test]
fn attributes_have_cublaslt_sizes_and_defaults() {
    let mut d = Descriptor::default();
    assert_eq!(
        d.set(MATMUL_DESC_ATTRS, desc::TRANSA, &[1, 0]),
        Err(AttrError::Invalid),
        "TRANSA is 4 bytes"
    );
    assert_eq!(
        d.set(MATMUL_DESC_ATTRS, 9, &[0; 8]),
        Err(AttrError::Invalid),
        "no attribute 9"
    );
    assert_eq!(
        d.set(MATMUL_DESC_ATTRS, 38, &0x1234u64.to_le_bytes()),
        Err(AttrError::Unsupported),
        "an emulation descriptor is a guest host pointer"
    );
    d.set(MATMUL_DESC_ATTRS, 38, &[0; 8]).unwrap();
    d.set(MATMUL_DESC_ATTRS, 25, &[1]).unwrap();
    assert_eq!(d.get(MATMUL_DESC_ATTRS, 25), Some(vec![1]));
    assert_eq!(d.i32(MATMUL_DESC_ATTRS, desc::BIAS_DATA_TYPE), -1);
    assert_eq!(
        d.bits(MATMUL_DESC_ATTRS, desc::EPILOGUE),
        epilogue::DEFAULT as u64
    );
    assert_eq!(d.get(PREFERENCE_ATTRS, 12), Some(vec![0xff; 8]));
    d.set(MATMUL_DESC_ATTRS, desc::TRANSA, &1u32.to_le_bytes())
        .unwrap();
    d.set(MATMUL_DESC_ATTRS, desc::TRANSA, &2u32.to_le_bytes())
        .unwrap();
    assert_eq!(d.bits(MATMUL_DESC_ATTRS, desc::TRANSA), 2);
    assert_eq!(d.attrs.iter().filter(|a| a.0 == desc::TRANSA).count(), 1);
}

#[test]
fn shapes_follow_the_transposes_and_extents_the_layouts() {
    let s = problem(0, 4, 3, 2).validate().unwrap();
    assert_eq!((s.m, s.n, s.k, s.batch), (4, 3, 2, 1));
    assert_eq!(s.matrices[0].total, 4 * 2 * 2);
    assert_eq!(s.matrices[3].total, 4 * 3 * 2);
    assert_eq!(s.scale, 4);
    let s = problem(1, 4, 3, 2).validate().unwrap();
    assert_eq!((s.m, s.k), (4, 2));
    // k of B disagrees with A's.
    let mut p = problem(0, 4, 3, 2);
    p.layouts[1] = layout_of(data_type::R_16F, 5, 3, 5);
    assert_eq!(
        p.validate().map_err(|e| e.status()),
        Err(status::INVALID_VALUE)
    );
    // ld below the rows of a column-major matrix.
    let mut p = problem(0, 4, 3, 2);
    p.layouts[3] = layout_of(data_type::R_16F, 4, 3, 3);
    assert!(p.validate().is_err());
    // Row-major: ld counts columns.
    let mut p = problem(0, 4, 3, 2);
    p.layouts[3]
        .set(LAYOUT_ATTRS, layout::ORDER, &1i32.to_le_bytes())
        .unwrap();
    p.layouts[3]
        .set(LAYOUT_ATTRS, layout::LD, &3i64.to_le_bytes())
        .unwrap();
    let s = p.validate().unwrap();
    assert_eq!(s.matrices[3].total, 4 * 3 * 2);
    assert_eq!(s.matrices[3].offset(1, 2), 5);
}

#[test]
fn strided_batches_and_bias_span_every_matrix() {
    let mut p = problem(0, 2, 2, 2);
    for l in &mut p.layouts {
        l.set(LAYOUT_ATTRS, layout::BATCH_COUNT, &3i32.to_le_bytes())
            .unwrap();
        l.set(
            LAYOUT_ATTRS,
            layout::STRIDED_BATCH_OFFSET,
            &8i64.to_le_bytes(),
        )
        .unwrap();
    }
    p.desc
        .set(
            MATMUL_DESC_ATTRS,
            desc::EPILOGUE,
            &epilogue::BIAS.to_le_bytes(),
        )
        .unwrap();
    assert_eq!(
        p.validate().map_err(|e| e.status()),
        Err(status::INVALID_VALUE),
        "a bias epilogue needs its pointer"
    );
    p.desc
        .set(
            MATMUL_DESC_ATTRS,
            desc::BIAS_POINTER,
            &0x1000u64.to_le_bytes(),
        )
        .unwrap();
    p.desc
        .set(
            MATMUL_DESC_ATTRS,
            desc::BIAS_BATCH_STRIDE,
            &2i64.to_le_bytes(),
        )
        .unwrap();
    let s = p.validate().unwrap();
    assert_eq!(s.matrices[0].total, (8 * 2 + 4) * 2);
    assert_eq!(s.matrices[0].matrix_bytes(), 4 * 2);
    let bias = s.bias.unwrap();
    assert_eq!((bias.len, bias.elem, bias.total), (2, 2, (2 * 2 + 2) * 2));
    // Batch counts must agree.
    p.layouts[2]
        .set(LAYOUT_ATTRS, layout::BATCH_COUNT, &2i32.to_le_bytes())
        .unwrap();
    assert!(p.validate().is_err());
}

#[test]
fn what_cannot_be_checked_is_not_supported() {
    let unsupported = |p: &LtProblem| p.validate().map_err(|e| e.status());
    let mut p = problem(0, 2, 2, 2);
    p.desc
        .set(MATMUL_DESC_ATTRS, desc::POINTER_MODE, &2i32.to_le_bytes())
        .unwrap();
    assert_eq!(unsupported(&p), Err(status::NOT_SUPPORTED));
    let mut p = problem(0, 2, 2, 2);
    p.desc
        .set(
            MATMUL_DESC_ATTRS,
            desc::EPILOGUE,
            &(2u32 | 128).to_le_bytes(),
        )
        .unwrap();
    assert_eq!(unsupported(&p), Err(status::NOT_SUPPORTED), "RELU_AUX");
    let mut p = problem(0, 2, 2, 2);
    p.layouts[0]
        .set(LAYOUT_ATTRS, layout::ORDER, &2i32.to_le_bytes())
        .unwrap();
    assert_eq!(unsupported(&p), Err(status::NOT_SUPPORTED), "COL32");
    let mut p = problem(0, 2, 2, 2);
    p.desc.attrs.push((38, 7u64.to_le_bytes().to_vec()));
    assert_eq!(
        unsupported(&p),
        Err(status::NOT_SUPPORTED),
        "a smuggled attribute is checked too"
    );
    let mut p = problem(0, 2, 2, 2);
    p.desc
        .set(MATMUL_DESC_ATTRS, desc::POINTER_MODE, &1i32.to_le_bytes())
        .unwrap();
    p.desc
        .set(
            MATMUL_DESC_ATTRS,
            desc::A_SCALE_POINTER,
            &0x40u64.to_le_bytes(),
        )
        .unwrap();
    let s = p.validate().unwrap();
    assert_eq!(s.pointer_mode, POINTER_MODE_DEVICE);
    assert_eq!(s.scalar_ptrs, vec![(0x40, 4)]);
}
