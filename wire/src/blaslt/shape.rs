//! The one check of a matmul: its descriptor and layouts against each other, and the
//! extent in memory of every operand.

use serde::{Deserialize, Serialize};

use crate::blas::{batch_span, compute_type, data_type, matrix_span, status};

use crate::handle::DevicePtr;

use super::attr::{
    desc, epilogue, layout, AttrError, Descriptor, LAYOUT_ATTRS, MATMUL_DESC_ATTRS,
    POINTER_MODE_DEVICE,
};

/// A matmul's descriptor and the layouts of A, B, C and D.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LtProblem {
    pub desc: Descriptor,
    pub layouts: [Descriptor; 4],
}

/// One matrix of a checked matmul, as the layout describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixInfo {
    pub data_type: i32,
    pub elem: u64,
    pub rows: u64,
    pub cols: u64,
    pub ld: u64,
    /// [`layout::ORDER_COL`] or [`layout::ORDER_ROW`].
    pub order: i32,
    pub batch: u64,
    /// Elements from one matrix of the batch to the next.
    pub stride: u64,
    /// Bytes the whole batch spans from the matrix pointer (0: nothing read).
    pub total: u64,
}

impl MatrixInfo {
    /// Bytes one matrix of the batch spans (0: nothing read).
    pub fn matrix_bytes(&self) -> u64 {
        if self.total == 0 {
            return 0;
        }
        self.total - self.stride * self.elem * (self.batch - 1)
    }

    /// Element offset of (row, col) in one matrix.
    pub fn offset(&self, row: u64, col: u64) -> u64 {
        if self.order == layout::ORDER_ROW {
            row * self.ld + col
        } else {
            row + col * self.ld
        }
    }
}

/// The bias vector of a bias epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BiasInfo {
    pub ptr: DevicePtr,
    pub data_type: i32,
    pub elem: u64,
    /// Elements of one vector.
    pub len: u64,
    pub stride: u64,
    pub total: u64,
}

/// A checked matmul: `D = epilogue(alpha * op(A) op(B) + beta * C)`, `op(A)` m x k.
#[derive(Clone, Debug, PartialEq)]
pub struct LtShape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub trans_a: u32,
    pub trans_b: u32,
    pub compute: i32,
    pub scale_type: i32,
    /// Bytes of `alpha` and of `beta`.
    pub scale: u64,
    pub pointer_mode: u32,
    pub epilogue: u32,
    /// A, B, C, D.
    pub matrices: [MatrixInfo; 4],
    pub bias: Option<BiasInfo>,
    /// Other device pointers cuBLASLt reads or writes (scale factors, amax), with the
    /// bytes each spans.
    pub scalar_ptrs: Vec<(DevicePtr, u64)>,
}

/// Why a matmul is refused, as cuBLASLt would say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LtArgError {
    #[error("invalid cuBLASLt matmul argument: {0}")]
    Invalid(&'static str),
    #[error("cuBLASLt matmul feature not forwarded by the bridge: {0}")]
    Unsupported(&'static str),
}

impl LtArgError {
    /// The `cublasStatus_t` for it.
    pub fn status(self) -> u32 {
        match self {
            LtArgError::Invalid(_) => status::INVALID_VALUE,
            LtArgError::Unsupported(_) => status::NOT_SUPPORTED,
        }
    }
}

impl From<AttrError> for LtArgError {
    fn from(e: AttrError) -> Self {
        match e {
            AttrError::Invalid => LtArgError::Invalid("attribute"),
            AttrError::Unsupported => LtArgError::Unsupported("attribute"),
        }
    }
}

fn ensure(ok: bool, e: LtArgError) -> Result<(), LtArgError> {
    if ok {
        Ok(())
    } else {
        Err(e)
    }
}

const INT_MAX: u64 = i32::MAX as u64;

/// One layout, checked.
fn matrix(l: &Descriptor) -> Result<MatrixInfo, LtArgError> {
    use LtArgError::{Invalid, Unsupported};
    l.check(LAYOUT_ATTRS)?;
    let t = LAYOUT_ATTRS;
    let data_type = l.i32(t, layout::TYPE);
    let elem = data_type::size(data_type).ok_or(Unsupported("matrix data type"))?;
    ensure(
        !data_type::is_complex(data_type),
        Unsupported("complex matrices"),
    )?;
    let order = l.i32(t, layout::ORDER);
    ensure(
        order == layout::ORDER_COL || order == layout::ORDER_ROW,
        Unsupported("memory order other than column or row major"),
    )?;
    ensure(
        l.bits(t, layout::BATCH_MODE) == 0,
        Unsupported("pointer-array or grouped batches"),
    )?;
    ensure(
        l.bits(t, layout::PLANE_OFFSET) == 0,
        Unsupported("planar complex"),
    )?;
    let (rows, cols) = (l.bits(t, layout::ROWS), l.bits(t, layout::COLS));
    let ld = l.bits(t, layout::LD) as i64;
    let batch = l.i32(t, layout::BATCH_COUNT);
    let stride = l.bits(t, layout::STRIDED_BATCH_OFFSET) as i64;
    ensure(
        rows <= INT_MAX && cols <= INT_MAX,
        Invalid("size above INT_MAX"),
    )?;
    ensure(
        (0..=i32::MAX as i64).contains(&ld),
        Invalid("leading dimension"),
    )?;
    ensure(batch >= 1, Invalid("batch count < 1"))?;
    ensure(stride >= 0, Unsupported("negative batch stride"))?;
    let ld = ld as u64;
    // Rows are contiguous in row-major order, columns in column-major order.
    let (contiguous, lines) = if order == layout::ORDER_ROW {
        (cols, rows)
    } else {
        (rows, cols)
    };
    ensure(
        ld >= contiguous.max(1),
        Invalid("leading dimension too small"),
    )?;
    let overflow = Invalid("matrix extent overflows");
    let span = matrix_span(contiguous as i64, lines as i64, ld as i64, elem).ok_or(overflow)?;
    let total = batch_span(span, stride, batch as i64, elem).ok_or(overflow)?;
    Ok(MatrixInfo {
        data_type,
        elem,
        rows,
        cols,
        ld,
        order,
        batch: batch as u64,
        stride: stride as u64,
        total,
    })
}

/// (rows, cols) of `op(X)` for a stored rows x cols matrix.
fn op_shape(trans: u32, m: &MatrixInfo) -> (u64, u64) {
    if trans == 0 {
        (m.rows, m.cols)
    } else {
        (m.cols, m.rows)
    }
}

impl LtProblem {
    /// The checks cuBLASLt makes before it queues a matmul, and every extent.
    pub fn validate(&self) -> Result<LtShape, LtArgError> {
        use LtArgError::{Invalid, Unsupported};
        let d = &self.desc;
        let t = MATMUL_DESC_ATTRS;
        d.check(t)?;
        let [a, b, c, dm] = [
            matrix(&self.layouts[0])?,
            matrix(&self.layouts[1])?,
            matrix(&self.layouts[2])?,
            matrix(&self.layouts[3])?,
        ];
        let compute = d.i32(t, desc::COMPUTE_TYPE);
        let scale_type = d.i32(t, desc::SCALE_TYPE);
        compute_type::scalar_size(compute).ok_or(Unsupported("compute type"))?;
        let scale = data_type::size(scale_type).ok_or(Unsupported("scale type"))?;
        let trans_a = d.bits(t, desc::TRANSA) as u32;
        let trans_b = d.bits(t, desc::TRANSB) as u32;
        ensure(trans_a <= 2 && trans_b <= 2, Invalid("transpose"))?;
        ensure(
            d.bits(t, desc::TRANSC) == 0,
            Invalid("C cannot be transposed"),
        )?;
        let pointer_mode = d.bits(t, desc::POINTER_MODE) as u32;
        ensure(pointer_mode <= 4, Invalid("pointer mode"))?;
        ensure(
            pointer_mode <= POINTER_MODE_DEVICE,
            Unsupported("vector alpha/beta pointer modes"),
        )?;
        for stride in [
            desc::ALPHA_VECTOR_BATCH_STRIDE,
            desc::ALPHA_BATCH_STRIDE,
            desc::BETA_BATCH_STRIDE,
        ] {
            ensure(d.bits(t, stride) == 0, Unsupported("batched alpha/beta"))?;
        }
        let (m, k) = op_shape(trans_a, &a);
        let (kb, n) = op_shape(trans_b, &b);
        ensure(k == kb, Invalid("A and B disagree on k"))?;
        ensure(
            (c.rows, c.cols) == (m, n) && (dm.rows, dm.cols) == (m, n),
            Invalid("C and D must be m x n"),
        )?;
        let batch = dm.batch;
        ensure(
            [a.batch, b.batch, c.batch].iter().all(|x| *x == batch),
            Invalid("batch counts differ"),
        )?;
        let epilogue = d.bits(t, desc::EPILOGUE) as u32;
        let bias_len = match epilogue {
            epilogue::DEFAULT | epilogue::RELU | epilogue::GELU => None,
            epilogue::BIAS | epilogue::RELU_BIAS | epilogue::GELU_BIAS | epilogue::BGRADA => {
                Some(m)
            }
            epilogue::BGRADB => Some(n),
            _ => {
                return Err(Unsupported(
                    "epilogue with an auxiliary buffer, or an unknown epilogue",
                ))
            }
        };
        let bias = match bias_len {
            None => None,
            Some(len) => {
                let ptr = d.bits(t, desc::BIAS_POINTER);
                ensure(ptr != 0, Invalid("bias epilogue without a bias pointer"))?;
                let set = d.i32(t, desc::BIAS_DATA_TYPE);
                let data_type = if set == -1 { dm.data_type } else { set };
                let elem = data_type::size(data_type).ok_or(Unsupported("bias data type"))?;
                let stride = d.bits(t, desc::BIAS_BATCH_STRIDE) as i64;
                ensure(stride >= 0, Unsupported("negative bias batch stride"))?;
                let overflow = Invalid("bias extent overflows");
                let span = len.checked_mul(elem).ok_or(overflow)?;
                let total = batch_span(span, stride, batch as i64, elem).ok_or(overflow)?;
                Some(BiasInfo {
                    ptr,
                    data_type,
                    elem,
                    len,
                    stride: stride as u64,
                    total,
                })
            }
        };
        // Scale factors and amax are single values of the compute type unless a block
        // scaling mode is set, whose extents follow rules not forwarded.
        for mode in [
            desc::A_SCALE_MODE,
            desc::B_SCALE_MODE,
            desc::C_SCALE_MODE,
            desc::D_SCALE_MODE,
        ] {
            ensure(d.bits(t, mode) == 0, Unsupported("block scaling modes"))?;
        }
        let one = compute_type::scalar_size(compute).unwrap_or(4);
        let scalar_ptrs = [
            desc::A_SCALE_POINTER,
            desc::B_SCALE_POINTER,
            desc::C_SCALE_POINTER,
            desc::D_SCALE_POINTER,
            desc::AMAX_D_POINTER,
        ]
        .iter()
        .map(|id| d.bits(t, *id))
        .filter(|p| *p != 0)
        .map(|p| (p, one))
        .collect();
        let empty = m == 0 || n == 0;
        let mut matrices = [a, b, c, dm];
        if empty {
            for x in &mut matrices {
                x.total = 0;
            }
        } else if k == 0 {
            matrices[0].total = 0;
            matrices[1].total = 0;
        }
        Ok(LtShape {
            m,
            n,
            k,
            batch,
            trans_a,
            trans_b,
            compute,
            scale_type,
            scale,
            pointer_mode,
            epilogue,
            matrices,
            bias,
            scalar_ptrs,
        })
    }
}
