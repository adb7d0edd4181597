//! cuBLASLt's descriptor attributes: each one's id, size, default and whether the
//! bridge can forward it, and [`Descriptor`], the attribute bytes a program set.

use serde::{Deserialize, Serialize};

use crate::blas::status;

/// What an attribute's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// A plain value, passed on as is.
    Value,
    /// A device pointer cuBLASLt dereferences: checked by
    /// [`LtProblem::validate`](super::LtProblem::validate).
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
