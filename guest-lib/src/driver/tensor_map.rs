//! The tensor-map encoders besides `cuTensorMapEncodeTiled` (memory.rs): the im2col
//! encodings and a map's new address. Pure computation in the real driver, done by the
//! host's driver: each map comes back as its 128 bytes.

use std::ffi::c_void;

use vmcuda_wire::driver::{
    Im2colWide, TensorMapEncodeIm2col, TensorMapReplaceAddress, TENSOR_MAP_LEN, TENSOR_MAP_MAX_RANK,
};
use vmcuda_wire::CudaStatus;

use super::{check_initialized, export, Result};
use crate::caller;
use crate::client::Sink;
use crate::driver::inner::call_with;

type Map = [u8; TENSOR_MAP_LEN];

/// `n` values the program gave (none read for `n` 0).
///
/// # Safety
/// `ptr` is NULL (refused unless `n` is 0) or readable for `n` values.
unsafe fn values<T: Copy>(ptr: *const T, n: usize) -> Result<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: as the caller promised; `n` is at most the largest rank.
    unsafe { caller::slice(ptr, n) }
}

/// Encode on the host and write the map.
///
/// # Safety
/// `map` is NULL or writable.
unsafe fn encode(map: *mut Map, req: &TensorMapEncodeIm2col) -> Result<()> {
    if map.is_null() || !req.shape_is_valid() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let mut encoded = [0u8; TENSOR_MAP_LEN];
    call_with(req, &[], Sink::Into(&mut encoded))?;
    // SAFETY: as the caller promised (checked not NULL above).
    unsafe { caller::write(map, encoded) }
}

/// The rank, checked before any array is read.
fn rank(rank: u32) -> Result<usize> {
    let rank = rank as usize;
    if (3..=TENSOR_MAP_MAX_RANK).contains(&rank) {
        Ok(rank)
    } else {
        Err(CudaStatus::ErrorInvalidValue)
    }
}

export! {
    fn cuTensorMapEncodeIm2col(
        map: *mut Map,
        data_type: u32,
        tensor_rank: u32,
        global_address: *mut c_void,
        global_dim: *const u64,
        global_strides: *const u64,
        lower_corner: *const i32,
        upper_corner: *const i32,
        channels_per_pixel: u32,
        pixels_per_column: u32,
        element_strides: *const u32,
        interleave: u32,
        swizzle: u32,
        l2_promotion: u32,
        oob_fill: u32,
    ) {
        check_initialized()?;
        let rank = rank(tensor_rank)?;
        // SAFETY: by cuTensorMapEncodeIm2col's contract each array holds the entries
        // its rank says (rank, rank - 1 strides, rank - 2 corners) and `map` is
        // writable.
        unsafe {
            let req = TensorMapEncodeIm2col {
                data_type,
                global_address: global_address as u64,
                global_dim: values(global_dim, rank)?,
                global_strides: values(global_strides, rank - 1)?,
                lower_corner: values(lower_corner, rank - 2)?,
                upper_corner: values(upper_corner, rank - 2)?,
                channels_per_pixel,
                pixels_per_column,
                element_strides: values(element_strides, rank)?,
                interleave,
                swizzle,
                l2_promotion,
                oob_fill,
                wide: None,
            };
            encode(map, &req)
        }
    }
}

export! {
    fn cuTensorMapEncodeIm2colWide(
        map: *mut Map,
        data_type: u32,
        tensor_rank: u32,
        global_address: *mut c_void,
        global_dim: *const u64,
        global_strides: *const u64,
        lower_width: i32,
        upper_width: i32,
        channels_per_pixel: u32,
        pixels_per_column: u32,
        element_strides: *const u32,
        interleave: u32,
        mode: u32,
        swizzle: u32,
        l2_promotion: u32,
        oob_fill: u32,
    ) {
        check_initialized()?;
        let rank = rank(tensor_rank)?;
        // SAFETY: by cuTensorMapEncodeIm2colWide's contract each array holds the
        // entries its rank says and `map` is writable.
        unsafe {
            let req = TensorMapEncodeIm2col {
                data_type,
                global_address: global_address as u64,
                global_dim: values(global_dim, rank)?,
                global_strides: values(global_strides, rank - 1)?,
                lower_corner: Vec::new(),
                upper_corner: Vec::new(),
                channels_per_pixel,
                pixels_per_column,
                element_strides: values(element_strides, rank)?,
                interleave,
                swizzle,
                l2_promotion,
                oob_fill,
                wide: Some(Im2colWide { lower_width, upper_width, mode }),
            };
            encode(map, &req)
        }
    }
}

export! {
    /// The host's driver checks the map and writes the address into a copy of it.
    fn cuTensorMapReplaceAddress(map: *mut Map, global_address: *mut c_void) {
        check_initialized()?;
        // SAFETY: by its contract `map` is a readable and writable encoded map.
        let old = unsafe { caller::read(map) }?;
        let req = TensorMapReplaceAddress {
            map: old.to_vec(),
            global_address: global_address as u64,
        };
        let mut changed = [0u8; TENSOR_MAP_LEN];
        call_with(&req, &[], Sink::Into(&mut changed))?;
        // SAFETY: as above.
        unsafe { caller::write(map, changed) }
    }
}
