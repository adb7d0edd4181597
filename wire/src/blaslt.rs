//! cuBLASLt on the wire: the state of matmul descriptors, matrix layouts and
//! preferences, the heuristic query and the matmul, and the checks and extents both
//! ends compute from them.
//!
//! Descriptors live in the guest (creating and setting them costs no round trip); a
//! [`Descriptor`] is the list of attributes the program set, as the bytes cuBLASLt
//! defines for each ([`MATMUL_DESC_ATTRS`], [`LAYOUT_ATTRS`], [`PREFERENCE_ATTRS`]).
//! The heuristic query and every matmul carry the whole state; the host makes real
//! descriptors from it. [`LtProblem::validate`] is the one check of a matmul's
//! shapes, types and memory extents: the guest runs it before it sends anything (so
//! argument errors are synchronous, as in cuBLASLt), the host runs it again (a guest is
//! not trusted) and refuses every operand that reaches outside the guest's memory.
//!
//! Only what the bridge can check is forwarded: column- and row-major layouts, strided
//! batches, host or device `alpha`/`beta`, epilogues without an auxiliary buffer, and
//! scale and amax pointers of a single value. The rest is `CUBLAS_STATUS_NOT_SUPPORTED`.

use serde::{Deserialize, Serialize};

use crate::blas::{batch_span, compute_type, data_type, matrix_span, status, Scalars};
use crate::op::{DevicePtr, StreamHandle};

/// A cuBLASLt handle named by the guest. cuBLASLt also takes a `cublasHandle_t` where
/// it wants a `cublasLtHandle_t` (PyTorch passes its cuBLAS handle), so the host looks
/// an id up among the guest's cuBLAS handles when it is no Lt handle.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct LtHandle(pub u64);

/// What an attribute's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// A plain value, passed on as is.
    Value,
    /// A device pointer cuBLASLt dereferences: checked by [`LtProblem::validate`].
    DevicePtr,
    /// Not forwarded (a host pointer, or a feature whose memory extent is unclear):
    /// setting it answers `CUBLAS_STATUS_NOT_SUPPORTED`.
    Unsupported,
}

/// One attribute: its id, the size cuBLASLt stores it in, and its default.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    pub id: u32,
    pub size: usize,
    pub kind: AttrKind,
    /// Little-endian bits of the default value.
    pub default: u64,
}

const fn value(id: u32, size: usize, default: u64) -> AttrSpec {
    AttrSpec {
        id,
        size,
        kind: AttrKind::Value,
        default,
    }
}
const fn device_ptr(id: u32) -> AttrSpec {
    AttrSpec {
        id,
        size: 8,
        kind: AttrKind::DevicePtr,
        default: 0,
    }
}
const fn unsupported(id: u32, size: usize) -> AttrSpec {
    AttrSpec {
        id,
        size,
        kind: AttrKind::Unsupported,
        default: 0,
    }
}

/// `cublasLtMatmulDescAttributes_t`.
pub mod desc {
    pub const COMPUTE_TYPE: u32 = 0;
    pub const SCALE_TYPE: u32 = 1;
    pub const POINTER_MODE: u32 = 2;
    pub const TRANSA: u32 = 3;
    pub const TRANSB: u32 = 4;
    pub const TRANSC: u32 = 5;
    pub const FILL_MODE: u32 = 6;
    pub const EPILOGUE: u32 = 7;
    pub const BIAS_POINTER: u32 = 8;
    pub const BIAS_BATCH_STRIDE: u32 = 10;
    pub const EPILOGUE_AUX_POINTER: u32 = 11;
    pub const ALPHA_VECTOR_BATCH_STRIDE: u32 = 14;
    pub const A_SCALE_POINTER: u32 = 17;
    pub const B_SCALE_POINTER: u32 = 18;
    pub const C_SCALE_POINTER: u32 = 19;
    pub const D_SCALE_POINTER: u32 = 20;
    pub const AMAX_D_POINTER: u32 = 21;
    pub const BIAS_DATA_TYPE: u32 = 26;
    pub const A_SCALE_MODE: u32 = 31;
    pub const B_SCALE_MODE: u32 = 32;
    pub const C_SCALE_MODE: u32 = 33;
    pub const D_SCALE_MODE: u32 = 34;
    pub const ALPHA_BATCH_STRIDE: u32 = 39;
    pub const BETA_BATCH_STRIDE: u32 = 40;
}

/// `cublasLtMatrixLayoutAttribute_t`.
pub mod layout {
    pub const TYPE: u32 = 0;
    pub const ORDER: u32 = 1;
    pub const ROWS: u32 = 2;
    pub const COLS: u32 = 3;
    pub const LD: u32 = 4;
    pub const BATCH_COUNT: u32 = 5;
    pub const STRIDED_BATCH_OFFSET: u32 = 6;
    pub const PLANE_OFFSET: u32 = 7;
    pub const BATCH_MODE: u32 = 8;
    /// `cublasLtOrder_t` values the bridge forwards.
    pub const ORDER_COL: i32 = 0;
    pub const ORDER_ROW: i32 = 1;
}

/// `cublasLtMatmulPreferenceAttributes_t`.
pub mod pref {
    pub const SEARCH_MODE: u32 = 0;
    pub const MAX_WORKSPACE_BYTES: u32 = 1;
}

/// `cublasLtEpilogue_t`.
pub mod epilogue {
    pub const DEFAULT: u32 = 1;
    pub const RELU: u32 = 2;
    pub const BIAS: u32 = 4;
    pub const RELU_BIAS: u32 = 6;
    pub const GELU: u32 = 32;
    pub const GELU_BIAS: u32 = 36;
    pub const BGRADA: u32 = 256;
    pub const BGRADB: u32 = 512;
}

/// `cublasLtPointerMode_t` values the bridge forwards (the vector modes are not).
pub const POINTER_MODE_HOST: u32 = 0;
pub const POINTER_MODE_DEVICE: u32 = 1;

/// Every `cublasLtMatmulDescAttributes_t` of cuBLAS 13.1 with its size.
pub const MATMUL_DESC_ATTRS: &[AttrSpec] = &[
    value(desc::COMPUTE_TYPE, 4, 0),
    value(desc::SCALE_TYPE, 4, 0),
    value(desc::POINTER_MODE, 4, 0),
    value(desc::TRANSA, 4, 0),
    value(desc::TRANSB, 4, 0),
    value(desc::TRANSC, 4, 0),
    value(desc::FILL_MODE, 4, 2), // CUBLAS_FILL_MODE_FULL
    value(desc::EPILOGUE, 4, epilogue::DEFAULT as u64),
    device_ptr(desc::BIAS_POINTER),
    value(desc::BIAS_BATCH_STRIDE, 8, 0),
    // The auxiliary buffer's extent depends on the epilogue's bit-mask or GELU rules.
    unsupported(desc::EPILOGUE_AUX_POINTER, 8),
    value(12, 8, 0), // EPILOGUE_AUX_LD
    value(13, 8, 0), // EPILOGUE_AUX_BATCH_STRIDE
    value(desc::ALPHA_VECTOR_BATCH_STRIDE, 8, 0),
    value(15, 4, 0), // SM_COUNT_TARGET
    device_ptr(desc::A_SCALE_POINTER),
    device_ptr(desc::B_SCALE_POINTER),
    device_ptr(desc::C_SCALE_POINTER),
    device_ptr(desc::D_SCALE_POINTER),
    device_ptr(desc::AMAX_D_POINTER),
    value(22, 4, u32::MAX as u64), // EPILOGUE_AUX_DATA_TYPE, -1
    unsupported(23, 8),            // EPILOGUE_AUX_SCALE_POINTER
    unsupported(24, 8),            // EPILOGUE_AUX_AMAX_POINTER
    value(25, 1, 0),               // FAST_ACCUM, int8_t
    value(desc::BIAS_DATA_TYPE, 4, u32::MAX as u64),
    value(desc::A_SCALE_MODE, 4, 0),
    value(desc::B_SCALE_MODE, 4, 0),
    value(desc::C_SCALE_MODE, 4, 0),
    value(desc::D_SCALE_MODE, 4, 0),
    value(35, 4, 0),    // EPILOGUE_AUX_SCALE_MODE
    unsupported(36, 8), // D_OUT_SCALE_POINTER: block scales, extent per mode
    value(37, 4, 0),    // D_OUT_SCALE_MODE
    unsupported(38, 8), // EMULATION_DESCRIPTOR: a host pointer of the guest
    value(desc::ALPHA_BATCH_STRIDE, 8, 0),
    value(desc::BETA_BATCH_STRIDE, 8, 0),
    value(41, 4, 0x8000), // BATCH_INVARIANCE_FLAGS, UNSET
];

/// Every `cublasLtMatrixLayoutAttribute_t` with its size.
pub const LAYOUT_ATTRS: &[AttrSpec] = &[
    value(layout::TYPE, 4, 0),
    value(layout::ORDER, 4, layout::ORDER_COL as u64),
    value(layout::ROWS, 8, 0),
    value(layout::COLS, 8, 0),
    value(layout::LD, 8, 0),
    value(layout::BATCH_COUNT, 4, 1),
    value(layout::STRIDED_BATCH_OFFSET, 8, 0),
    value(layout::PLANE_OFFSET, 8, 0),
    value(layout::BATCH_MODE, 4, 0),
    // Grouped layouts: device arrays of shapes, not forwarded.
    unsupported(9, 8),
    unsupported(10, 8),
    unsupported(11, 8),
    value(12, 4, 0),
    value(13, 4, 0),
];

/// Every `cublasLtMatmulPreferenceAttributes_t` with its size.
pub const PREFERENCE_ATTRS: &[AttrSpec] = &[
    value(pref::SEARCH_MODE, 4, 0),
    value(pref::MAX_WORKSPACE_BYTES, 8, 0),
    value(3, 4, 0x7), // REDUCTION_SCHEME_MASK: all
    value(5, 4, 256), // MIN_ALIGNMENT_A_BYTES
    value(6, 4, 256),
    value(7, 4, 256),
    value(8, 4, 256),
    value(9, 4, 0),         // MAX_WAVES_COUNT, float 0.0
    value(12, 8, u64::MAX), // IMPL_MASK: everything
    value(13, 4, 0),
    value(14, 4, 0),
    value(15, 4, 0),
];

/// The spec of attribute `id` in `table`.
pub fn spec(table: &[AttrSpec], id: u32) -> Option<&AttrSpec> {
    table.iter().find(|s| s.id == id)
}

/// Why an attribute cannot be set, as cuBLASLt would say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    #[error("unknown attribute or wrong size")]
    Invalid,
    #[error("attribute not forwarded by the bridge")]
    Unsupported,
}

impl AttrError {
    pub fn status(self) -> u32 {
        match self {
            AttrError::Invalid => status::INVALID_VALUE,
            AttrError::Unsupported => status::NOT_SUPPORTED,
        }
    }
}

/// The attributes a program set on one descriptor, in the order it set them (the last
/// setting of an id wins, as in cuBLASLt).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    pub attrs: Vec<(u32, Vec<u8>)>,
}

impl Descriptor {
    /// Check `bytes` against `table` and record them.
    pub fn set(&mut self, table: &[AttrSpec], id: u32, bytes: &[u8]) -> Result<(), AttrError> {
        check_attr(table, id, bytes)?;
        self.attrs.retain(|(a, _)| *a != id);
        self.attrs.push((id, bytes.to_vec()));
        Ok(())
    }

    /// The bytes of attribute `id`: set, or its default.
    pub fn get(&self, table: &[AttrSpec], id: u32) -> Option<Vec<u8>> {
        if let Some((_, v)) = self.attrs.iter().rev().find(|(a, _)| *a == id) {
            return Some(v.clone());
        }
        let s = spec(table, id)?;
        Some(s.default.to_le_bytes()[..s.size].to_vec())
    }

    /// Attribute `id` as little-endian bits (zero-extended).
    pub fn bits(&self, table: &[AttrSpec], id: u32) -> u64 {
        let mut b = [0u8; 8];
        if let Some(v) = self.get(table, id) {
            let n = v.len().min(8);
            b[..n].copy_from_slice(&v[..n]);
        }
        u64::from_le_bytes(b)
    }

    /// A 4-byte attribute read as the C `int32_t` it is.
    pub fn i32(&self, table: &[AttrSpec], id: u32) -> i32 {
        self.bits(table, id) as u32 as i32
    }

    /// Check every attribute against `table` (a guest's list is not trusted).
    pub fn check(&self, table: &[AttrSpec]) -> Result<(), AttrError> {
        self.attrs
            .iter()
            .try_for_each(|(id, bytes)| check_attr(table, *id, bytes))
    }
}

fn check_attr(table: &[AttrSpec], id: u32, bytes: &[u8]) -> Result<(), AttrError> {
    let s = spec(table, id).ok_or(AttrError::Invalid)?;
    if bytes.len() != s.size {
        return Err(AttrError::Invalid);
    }
    // A pointer left NULL (the default) is no use of the feature.
    if s.kind == AttrKind::Unsupported && bytes.iter().any(|b| *b != 0) {
        return Err(AttrError::Unsupported);
    }
    Ok(())
}

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

/// `cublasLtMatmulAlgo_t`: 64 opaque bytes, as the host's cuBLASLt made them.
pub type LtAlgo = [u64; 8];

/// One `cublasLtMatmulHeuristicResult_t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LtHeuristicResult {
    pub algo: LtAlgo,
    pub workspace_size: u64,
    pub state: u32,
    pub waves_count: f32,
}

/// `cublasLtMatmulHeuristicResult_t`, field for field: what the guest writes for the
/// program and the host gets from its cuBLASLt.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RawHeuristicResult {
    pub algo: LtAlgo,
    pub workspace_size: usize,
    pub state: i32,
    pub waves_count: f32,
    pub reserved: [i32; 4],
}

/// The most results one heuristic query asks the host for.
pub const MAX_HEURISTIC_RESULTS: u32 = 32;

/// `cublasLtCreate`: the guest names the handle; the host makes a real one.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtCreate {
    pub handle: LtHandle,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtDestroy {
    pub handle: LtHandle,
}

/// `cublasLtMatmulAlgoGetHeuristic`: answered by the host's cuBLASLt.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtHeuristic {
    pub handle: LtHandle,
    pub problem: LtProblem,
    pub preference: Descriptor,
    /// 1..=[`MAX_HEURISTIC_RESULTS`].
    pub requested: u32,
}

/// The heuristic's `cublasStatus_t` and its results (empty unless it succeeded).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LtHeuristicReply {
    pub status: u32,
    pub results: Vec<LtHeuristicResult>,
}

/// `cublasLtMatmul`, posted on `stream`: the descriptor state, `alpha`/`beta` (by
/// value in host pointer mode), the device pointers, the algorithm (one the host's
/// heuristic returned) and the workspace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LtMatmul {
    pub handle: LtHandle,
    pub stream: StreamHandle,
    pub problem: LtProblem,
    pub scalars: Scalars,
    /// A, B, C, D.
    pub ptrs: [DevicePtr; 4],
    pub algo: Option<LtAlgo>,
    pub workspace: DevicePtr,
    pub workspace_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
