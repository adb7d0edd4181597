//! The tensor-map encoders besides `cuTensorMapEncodeTiled` (memory.rs): the im2col
//! encodings and a map's new address. Pure computation in the real driver, done by the
//! host's driver: each map comes back as its 128 bytes, and is kept ([`encoded`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::driver::{
    Im2colWide, TensorMapEncodeIm2col, TensorMapReplaceAddress, TENSOR_MAP_LEN, TENSOR_MAP_MAX_RANK,
};
use vmcuda_wire::op::Request;
use vmcuda_wire::CudaStatus;

use super::{check_initialized, export, Result};
use crate::caller;
use crate::client::Sink;
use crate::driver::inner::call_with;

type Map = [u8; TENSOR_MAP_LEN];

/// Maps kept at most; a full cache starts over.
const MAX_KEPT: usize = 4096;

/// Maps the host encoded, by op, device and request bytes.
type Kept = HashMap<(u16, i32, Vec<u8>), Map>;
static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// The map the host's driver encodes for `req` on the calling thread's device, asked
/// once: the encoding is a pure function of the arguments and the GPU, and XLA and
/// cuBLASLt encode the same maps again before each launch that uses them (about ten a
/// step of a JAX MLP, a round trip each). Only maps the host made are kept; a refusal
/// is asked again.
pub(super) fn encoded<R: Request<Reply = ()>>(req: &R) -> Result<Map> {
    kept_or(req, crate::state::current_device(), || {
        let mut map = [0u8; TENSOR_MAP_LEN];
        call_with(req, &[], Sink::Into(&mut map))?;
        Ok(map)
    })
}

/// [`encoded`]'s cache: the map kept for `req` on `device`, else what `ask` answers
/// (kept when it is a map).
fn kept_or<R: Request>(req: &R, device: i32, ask: impl FnOnce() -> Result<Map>) -> Result<Map> {
    let key = postcard::to_stdvec(req)
        .ok()
        .map(|bytes| (R::OP.code(), device, bytes));
    let kept = |k: &(u16, i32, Vec<u8>)| {
        let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        kept.as_ref().and_then(|m| m.get(k).copied())
    };
    if let Some(map) = key.as_ref().and_then(kept) {
        return Ok(map);
    }
    let map = ask()?;
    if let Some(key) = key {
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        let kept = kept.get_or_insert_with(HashMap::new);
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert(key, map);
    }
    Ok(map)
}

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
    let map_bytes = encoded(req)?;
    // SAFETY: as the caller promised (checked not NULL above).
    unsafe { caller::write(map, map_bytes) }
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
        let changed = encoded(&req)?;
        // SAFETY: as above.
        unsafe { caller::write(map, changed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache is the process's: one test at a time uses it.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn replace(address: u64) -> TensorMapReplaceAddress {
        TensorMapReplaceAddress {
            map: vec![7; TENSOR_MAP_LEN],
            global_address: address,
        }
    }

    #[test]
    fn a_map_is_asked_of_the_host_once_per_request_and_device() {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let asked = std::cell::Cell::new(0);
        let ask = |byte: u8| {
            asked.set(asked.get() + 1);
            Ok([byte; TENSOR_MAP_LEN])
        };
        // Addresses of this test alone: the cache is the process's.
        let (a, b) = (0x7e57_0000_1000, 0x7e57_0000_2000);
        assert_eq!(
            kept_or(&replace(a), 0, || ask(1)).unwrap(),
            [1; TENSOR_MAP_LEN]
        );
        assert_eq!(
            kept_or(&replace(a), 0, || ask(9)).unwrap(),
            [1; TENSOR_MAP_LEN]
        );
        assert_eq!(asked.get(), 1, "the second encoding was kept");
        // Another address, another device: asked again.
        assert_eq!(
            kept_or(&replace(b), 0, || ask(2)).unwrap(),
            [2; TENSOR_MAP_LEN]
        );
        assert_eq!(
            kept_or(&replace(a), 1, || ask(3)).unwrap(),
            [3; TENSOR_MAP_LEN]
        );
        assert_eq!(asked.get(), 3);
        // A refusal is not kept.
        let c = 0x7e57_0000_3000;
        let refused = kept_or(&replace(c), 0, || Err(CudaStatus::ErrorInvalidValue));
        assert_eq!(refused, Err(CudaStatus::ErrorInvalidValue));
        assert_eq!(
            kept_or(&replace(c), 0, || ask(4)).unwrap(),
            [4; TENSOR_MAP_LEN]
        );
    }

    #[test]
    fn the_cache_is_bounded() {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..(MAX_KEPT as u64 + 10) {
            kept_or(&replace(0x7e58_0000_0000 + i * 16), 0, || {
                Ok([0; TENSOR_MAP_LEN])
            })
            .unwrap();
        }
        let kept = KEPT.lock().unwrap();
        assert!(kept.as_ref().unwrap().len() <= MAX_KEPT);
    }
}
