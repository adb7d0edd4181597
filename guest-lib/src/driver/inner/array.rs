//! CUDA arrays, copies to, from and between them, 3D memory, texture and surface
//! objects.
//!
//! Arrays are host objects; the guest keeps what each was made with (the channel
//! format, extent and flags `cudaArrayGetInfo` answers, and the element size every
//! copy's offsets are counted in). Every copy that involves an array, and every 3D
//! copy, is one op naming its two sides ([`CopyPlace`]): device memory, an array,
//! pinned memory the host shares, or the frame, whose bytes are the host side's rows
//! packed (in pieces no larger than a chunk). 3D copies between linear memory only
//! are pitched 2D copies. Texture and surface objects are the driver's values, which
//! kernels take by value; the descriptors given are kept for the `Get` calls.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::array::{
    format, ArrayDesc, ArrayHandle, CopyPlace, MipmappedHandle, TexResource, TextureDesc, ViewDesc,
};
use vmcuda_wire::op::{
    ArrayCreate, ArrayDestroy, Copy3D, DeviceGetTexture1DLinearMaxWidth, MipmappedArrayCreate,
    MipmappedArrayDestroy, MipmappedArrayGetLevel, StreamHandle, SurfObjectCreate,
    SurfObjectDestroy, TexObjectCreate, TexObjectDestroy,
};
use vmcuda_wire::CudaStatus;

use super::device::check_device;
use super::{call, call_with, guard, stream_handle, RawHandle, Result};
use crate::abi::runtime::Memcpy3DBatchOp;
use crate::abi::runtime::{
    ChannelFormatDesc, Memcpy3DOperand, Memcpy3DParms, PitchedPtr, Pos, ResourceDescC,
    TextureDescC, ViewDescC,
};
use crate::client::{self, Sink};
use crate::copy_route::pinned_region;
use crate::{caller, cudaError_t, gate};

const KIND_SIGNED: u32 = 0;
const KIND_UNSIGNED: u32 = 1;
const KIND_FLOAT: u32 = 2;

impl ChannelFormatDesc {
    /// The driver's format and channel count.
    pub fn format(&self) -> Result<(u32, u32)> {
        let bits = [self.x, self.y, self.z, self.w];
        let channels = bits.iter().take_while(|&&b| b != 0).count();
        if channels == 0 || bits[channels..].iter().any(|&b| b != 0) {
            return Err(CudaStatus::ErrorInvalidChannelDescriptor);
        }
        if bits[..channels].iter().any(|&b| b != self.x) || channels == 3 {
            return Err(CudaStatus::ErrorInvalidChannelDescriptor);
        }
        let f = match (self.kind, self.x) {
            (KIND_UNSIGNED, 8) => format::UNSIGNED_INT8,
            (KIND_UNSIGNED, 16) => format::UNSIGNED_INT16,
            (KIND_UNSIGNED, 32) => format::UNSIGNED_INT32,
            (KIND_SIGNED, 8) => format::SIGNED_INT8,
            (KIND_SIGNED, 16) => format::SIGNED_INT16,
            (KIND_SIGNED, 32) => format::SIGNED_INT32,
            (KIND_FLOAT, 16) => format::HALF,
            (KIND_FLOAT, 32) => format::FLOAT,
            _ => return Err(CudaStatus::ErrorInvalidChannelDescriptor),
        };
        Ok((f, channels as u32))
    }

    /// The runtime's description of a driver format.
    pub fn of(format: u32, channels: u32) -> ChannelFormatDesc {
        let (kind, bits) = match format {
            format::UNSIGNED_INT8 => (KIND_UNSIGNED, 8),
            format::UNSIGNED_INT16 => (KIND_UNSIGNED, 16),
            format::UNSIGNED_INT32 => (KIND_UNSIGNED, 32),
            format::SIGNED_INT8 => (KIND_SIGNED, 8),
            format::SIGNED_INT16 => (KIND_SIGNED, 16),
            format::SIGNED_INT32 => (KIND_SIGNED, 32),
            format::HALF => (KIND_FLOAT, 16),
            _ => (KIND_FLOAT, 32),
        };
        let c = |i: u32| if i < channels { bits } else { 0 };
        ChannelFormatDesc {
            x: c(0),
            y: c(1),
            z: c(2),
            w: c(3),
            kind,
        }
    }
}

/// What the guest knows of an array.
#[derive(Clone, Copy)]
struct ArrayInfo {
    desc: ArrayDesc,
    /// A level of a mipmapped array (freed with it).
    level: bool,
}

#[derive(Default)]
struct Arrays {
    arrays: HashMap<u64, ArrayInfo>,
    mipmaps: HashMap<u64, ArrayDesc>,
    textures: HashMap<u64, (ResourceDescC, TextureDescC, Option<ViewDescC>)>,
    surfaces: HashMap<u64, ResourceDescC>,
}

// SAFETY: the descriptors kept hold the program's own pointers as values (device
// addresses, array handles), read back by the program's `Get` calls only.
unsafe impl Send for Arrays {}

static ARRAYS: Mutex<Option<Arrays>> = Mutex::new(None);

fn arrays<T>(f: impl FnOnce(&mut Arrays) -> T) -> T {
    let mut g = ARRAYS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Arrays::default))
}

pub(crate) fn array_desc(array: RawHandle) -> Result<ArrayDesc> {
    array_info(array).map(|i| i.desc)
}

fn array_info(array: RawHandle) -> Result<ArrayInfo> {
    arrays(|a| a.arrays.get(&(array as u64)).copied()).ok_or(CudaStatus::ErrorInvalidResourceHandle)
}

/// Forget every array and object (the device was reset).
pub fn forget_device_state() {
    *ARRAYS.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

// ---- arrays -----------------------------------------------------------------------

/// `cudaArraySparse` and `cudaArrayDeferredMapping` (`CUDA_ARRAY3D_SPARSE`,
/// `CUDA_ARRAY3D_DEFERRED_MAPPING`): arrays whose memory the program maps itself.
const SPARSE: u32 = 0x40;
const DEFERRED_MAPPING: u32 = 0x80;

/// Refuse arrays whose memory the program would map itself, saying so once: their
/// tiles and mip tails are mapped by `cudaMemMapArrayAsync`, which vmcuda does not
/// forward. Every array the guest can hold is therefore neither sparse nor deferred.
fn refuse_self_mapped(flags: u32) -> Result<()> {
    if flags & (SPARSE | DEFERRED_MAPPING) != 0 {
        return Err(crate::notice::refuse(
            "a sparse or deferred-mapping CUDA array",
            "is not supported by vmcuda (its memory would be mapped by cudaMemMapArrayAsync)",
        ));
    }
    Ok(())
}

/// An array of `desc`, known here from now on.
pub(crate) fn create_array(desc: ArrayDesc) -> Result<RawHandle> {
    refuse_self_mapped(desc.flags)?;
    let made = call(&ArrayCreate { desc })?;
    arrays(|a| {
        a.arrays
            .insert(made.array.0, ArrayInfo { desc, level: false })
    });
    Ok(made.array.0 as RawHandle)
}

/// The widest 1D texture over linear memory on `device`, in elements of `channels`
/// channels of `format`: asked of the device's own host.
pub(crate) fn texture_1d_linear_max_width(format: u32, channels: u32, device: i32) -> Result<u64> {
    check_device(device)?;
    let req = DeviceGetTexture1DLinearMaxWidth { format, channels };
    Ok(crate::state::as_device(device, || call(&req))?.width)
}

pub extern "C" fn cudaFreeArray(array: RawHandle) -> cudaError_t {
    guard("cudaFreeArray", || {
        if array.is_null() {
            return Ok(());
        }
        let info = array_info(array)?;
        if info.level {
            // A level is its mipmapped array's, freed with it: nothing to do (CUDA
            // answers success too).
            return Ok(());
        }
        call(&ArrayDestroy {
            array: ArrayHandle(array as u64),
        })?;
        arrays(|a| a.arrays.remove(&(array as u64)));
        Ok(())
    })
}

// ---- what an array is made of ------------------------------------------------------
//
// Every array here has a one-plane format and is neither sparse nor deferred-mapping
// (`refuse_self_mapped`; multi-planar formats have no channel descriptor the guest
// takes), so each of these asks of a known array what CUDA answers for such an array:
// cudaErrorInvalidValue.

/// Whether `mipmap` is a mipmapped array the program holds.
pub(crate) fn check_mipmap(mipmap: RawHandle) -> Result<()> {
    match arrays(|a| a.mipmaps.contains_key(&(mipmap as u64))) {
        true => Ok(()),
        false => Err(CudaStatus::ErrorInvalidResourceHandle),
    }
}

pub extern "C" fn cudaArrayGetPlane(
    _out: *mut RawHandle,
    array: RawHandle,
    _plane: u32,
) -> cudaError_t {
    guard("cudaArrayGetPlane", || {
        array_info(array)?;
        Err(CudaStatus::ErrorInvalidValue)
    })
}

pub extern "C" fn cudaArrayGetSparseProperties(
    _props: *mut c_void,
    array: RawHandle,
) -> cudaError_t {
    guard("cudaArrayGetSparseProperties", || {
        array_info(array)?;
        Err(CudaStatus::ErrorInvalidValue)
    })
}

pub extern "C" fn cudaMipmappedArrayGetSparseProperties(
    _props: *mut c_void,
    mipmap: RawHandle,
) -> cudaError_t {
    guard("cudaMipmappedArrayGetSparseProperties", || {
        check_mipmap(mipmap)?;
        Err(CudaStatus::ErrorInvalidValue)
    })
}

pub extern "C" fn cudaArrayGetMemoryRequirements(
    _reqs: *mut c_void,
    array: RawHandle,
    device: i32,
) -> cudaError_t {
    guard("cudaArrayGetMemoryRequirements", || {
        check_device(device)?;
        array_info(array)?;
        Err(CudaStatus::ErrorInvalidValue)
    })
}

pub extern "C" fn cudaMipmappedArrayGetMemoryRequirements(
    _reqs: *mut c_void,
    mipmap: RawHandle,
    device: i32,
) -> cudaError_t {
    guard("cudaMipmappedArrayGetMemoryRequirements", || {
        check_device(device)?;
        check_mipmap(mipmap)?;
        Err(CudaStatus::ErrorInvalidValue)
    })
}

/// A mipmapped array of `levels` levels, the first of `desc`'s extent.
pub(crate) fn create_mipmapped(desc: ArrayDesc, levels: u32) -> Result<RawHandle> {
    refuse_self_mapped(desc.flags)?;
    let made = call(&MipmappedArrayCreate { desc, levels })?;
    arrays(|a| a.mipmaps.insert(made.mipmap.0, desc));
    Ok(made.mipmap.0 as RawHandle)
}

/// Level `level` of a mipmapped array, known here as an array from now on.
pub(crate) fn mipmapped_level(mipmap: RawHandle, level: u32) -> Result<RawHandle> {
    let made = call(&MipmappedArrayGetLevel {
        mipmap: MipmappedHandle(mipmap as u64),
        level,
    })?;
    let info = ArrayInfo {
        desc: made.desc,
        level: true,
    };
    arrays(|a| a.arrays.insert(made.array.0, info));
    Ok(made.array.0 as RawHandle)
}

pub extern "C" fn cudaFreeMipmappedArray(mipmap: RawHandle) -> cudaError_t {
    guard("cudaFreeMipmappedArray", || {
        if mipmap.is_null() {
            return Ok(());
        }
        call(&MipmappedArrayDestroy {
            mipmap: MipmappedHandle(mipmap as u64),
        })?;
        arrays(|a| a.mipmaps.remove(&(mipmap as u64)));
        Ok(())
    })
}

// ---- copies ---------------------------------------------------------------------------

/// One side of a copy as the guest sees it.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    /// An array at byte `x` of row `y` of slice `z`.
    Array {
        array: u64,
        x: usize,
        y: usize,
        z: usize,
    },
    /// Device memory.
    Device {
        ptr: usize,
        pitch: usize,
        rows: usize,
    },
    /// The program's host memory.
    Host {
        ptr: usize,
        pitch: usize,
        rows: usize,
    },
}

impl Side {
    /// The part of this side `dy` rows and `dz` slices on.
    fn offset(self, dy: usize, dz: usize) -> Side {
        match self {
            Side::Array { array, x, y, z } => Side::Array {
                array,
                x,
                y: y + dy,
                z: z + dz,
            },
            Side::Device { ptr, pitch, rows } => Side::Device {
                ptr: ptr + dz * pitch * rows + dy * pitch,
                pitch,
                rows,
            },
            Side::Host { ptr, pitch, rows } => Side::Host {
                ptr: ptr + dz * pitch * rows + dy * pitch,
                pitch,
                rows,
            },
        }
    }

    fn place(self) -> CopyPlace {
        match self {
            Side::Array { array, x, y, z } => CopyPlace::Array {
                array: ArrayHandle(array),
                x: x as u64,
                y: y as u64,
                z: z as u64,
            },
            Side::Device { ptr, pitch, rows } => CopyPlace::Device {
                ptr: ptr as u64,
                pitch: pitch as u64,
                height: rows as u64,
            },
            Side::Host { ptr, pitch, rows } => CopyPlace::Shared {
                addr: ptr as u64,
                pitch: pitch as u64,
                height: rows as u64,
            },
        }
    }
}

/// The host side of a copy, if it has one.
fn host_side(src: Side, dst: Side) -> Option<(Side, bool)> {
    match (src, dst) {
        (h @ Side::Host { .. }, _) => Some((h, true)),
        (_, h @ Side::Host { .. }) => Some((h, false)),
        _ => None,
    }
}

/// Whether the rows of a host side lie in pinned memory the host shares.
fn shared_host(side: Side, width: usize, height: usize, depth: usize) -> bool {
    let Side::Host { ptr, pitch, rows } = side else {
        return false;
    };
    let span = (depth.saturating_sub(1) * rows + height.saturating_sub(1)) * pitch + width;
    pinned_region(ptr, span)
}

/// Copy `depth` slices of `height` rows of `width` bytes from `src` to `dst` in
/// `stream`'s order: one op, or several where the host side's bytes travel in the
/// frame (a piece of rows at a time).
///
/// # Safety
/// A host side is the program's memory for the whole extent (readable as a source,
/// writable as a destination).
pub(crate) unsafe fn copy(
    src: Side,
    dst: Side,
    width: usize,
    height: usize,
    depth: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if width == 0 || height == 0 || depth == 0 {
        return Ok(());
    }
    let op = |src: CopyPlace, dst: CopyPlace, height: usize, depth: usize| Copy3D {
        src,
        dst,
        width: width as u64,
        height: height as u64,
        depth: depth as u64,
        stream,
        is_async,
    };
    let Some((host, to_device)) = host_side(src, dst) else {
        let req = op(src.place(), dst.place(), height, depth);
        return gate::submit(stream, move || call(&req).map(|_| ()));
    };
    gate::sync_stream(stream)?;
    if shared_host(host, width, height, depth) {
        return call(&op(src.place(), dst.place(), height, depth)).map(|_| ());
    }
    // Through the frame: a piece of whole rows at a time, within a chunk.
    let rows_per_piece = (client::chunk() / width).max(1);
    for z in 0..depth {
        let mut y = 0;
        while y < height {
            let n = rows_per_piece.min(height - y);
            let (s, d) = (src.offset(y, z), dst.offset(y, z));
            let Side::Host { ptr, pitch, .. } = (if to_device { s } else { d }) else {
                unreachable!("host_side found it")
            };
            let mut packed = vec![0u8; n * width];
            if to_device {
                for r in 0..n {
                    // SAFETY: as the caller promised.
                    let row = unsafe { caller::bytes((ptr + r * pitch) as *const u8, width) }?;
                    packed[r * width..(r + 1) * width].copy_from_slice(row);
                }
                let req = op(CopyPlace::Frame, d.place(), n, 1);
                call_with(&req, &packed, Sink::None)?;
            } else {
                let req = op(s.place(), CopyPlace::Frame, n, 1);
                call_with(&req, &[], Sink::Into(&mut packed))?;
                for r in 0..n {
                    // SAFETY: as the caller promised.
                    let row = unsafe { caller::bytes_mut((ptr + r * pitch) as *mut u8, width) }?;
                    row.copy_from_slice(&packed[r * width..(r + 1) * width]);
                }
            }
            y += n;
        }
    }
    Ok(())
}

/// A pointer side of a copy, by the copy's direction.
fn pointer_side(ptr: usize, pitch: usize, rows: usize, device: bool) -> Side {
    match device {
        true => Side::Device { ptr, pitch, rows },
        false => Side::Host { ptr, pitch, rows },
    }
}

/// An array side at element `x_bytes` (already in bytes), row `y`, slice `z`.
fn array_side(array: RawHandle, x: usize, y: usize, z: usize) -> Result<(Side, ArrayInfo)> {
    let info = array_info(array)?;
    let side = Side::Array {
        array: array as u64,
        x,
        y,
        z,
    };
    Ok((side, info))
}

/// Whether the pointer side of a copy between `ptr` and an array is device memory, by
/// the copy's kind (`cudaMemcpyDefault`: where the pointer lives).
fn pointer_is_device(kind: u32, ptr: usize, to_array: bool) -> Result<bool> {
    Ok(match kind {
        // Host to device, device to host: the pointer is the host side.
        1 => !to_array,
        2 => to_array,
        3 => true,
        4 => crate::driver::inner::device_of_ptr(ptr).is_some(),
        _ => return Err(CudaStatus::ErrorInvalidMemcpyDirection),
    })
}

fn array_to_array(
    dst: RawHandle,
    dst_at: (usize, usize),
    src: RawHandle,
    src_at: (usize, usize),
    width: usize,
    height: usize,
    stream: StreamHandle,
) -> Result<()> {
    let (d, _) = array_side(dst, dst_at.0, dst_at.1, 0)?;
    let (s, _) = array_side(src, src_at.0, src_at.1, 0)?;
    // SAFETY: neither side is host memory.
    unsafe { copy(s, d, width, height, 1, stream, false) }
}

/// The pieces of a 1D copy of `count` bytes from byte `x` of row `y` of rows
/// `row` bytes long: (x, y, width, rows) each, a partial first row, whole rows, a
/// partial last row.
fn linear_pieces(
    x: usize,
    y: usize,
    count: usize,
    row: usize,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    if x >= row && count > 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let mut pieces = Vec::new();
    let (mut x, mut y, mut left) = (x, y, count);
    if x > 0 && left > 0 {
        let n = left.min(row - x);
        pieces.push((x, y, n, 1));
        left -= n;
        x = 0;
        y += 1;
    }
    if left >= row {
        let rows = left / row;
        pieces.push((0, y, row, rows));
        left -= rows * row;
        y += rows;
    }
    if left > 0 {
        pieces.push((x, y, left, 1));
    }
    Ok(pieces)
}

/// `cudaMemcpyToArray`, `cudaMemcpyFromArray`: `count` bytes in the array's row order.
///
/// # Safety
/// `host` is the program's memory of `count` bytes (readable to the array, writable
/// from it).
#[allow(clippy::too_many_arguments)]
unsafe fn linear_with_array(
    array: RawHandle,
    x: usize,
    y: usize,
    ptr: usize,
    count: usize,
    kind: u32,
    to_array: bool,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let info = array_info(array)?;
    let (row, _, _) = info
        .desc
        .extent_bytes()
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    let device = pointer_is_device(kind, ptr, to_array)?;
    let mut done = 0;
    for (px, py, width, rows) in linear_pieces(x, y, count, row as usize)? {
        let (a, _) = array_side(array, px, py, 0)?;
        let p = pointer_side(ptr + done, width, rows, device);
        let (s, d) = if to_array { (p, a) } else { (a, p) };
        // SAFETY: as the caller promised.
        unsafe { copy(s, d, width, rows, 1, stream, is_async) }?;
        done += width * rows;
    }
    Ok(())
}

macro_rules! export_linear_array {
    ($name:ident, to, $per_thread:expr, $is_async:expr $(, $stream:ident)?) => {
        pub extern "C" fn $name(
            dst: RawHandle,
            x: usize,
            y: usize,
            src: *const c_void,
            count: usize,
            kind: u32,
            $($stream: RawHandle,)?
        ) -> cudaError_t {
            guard(stringify!($name), || {
                #[allow(unused_variables)]
                let stream: RawHandle = std::ptr::null_mut();
                $(let stream = $stream;)?
                // SAFETY: by its contract `src` holds `count` bytes.
                unsafe {
                    linear_with_array(dst, x, y, src as usize, count, kind, true,
                        stream_handle(stream, $per_thread), $is_async)
                }
            })
        }
    };
    ($name:ident, from, $per_thread:expr, $is_async:expr $(, $stream:ident)?) => {
        pub extern "C" fn $name(
            dst: *mut c_void,
            src: RawHandle,
            x: usize,
            y: usize,
            count: usize,
            kind: u32,
            $($stream: RawHandle,)?
        ) -> cudaError_t {
            guard(stringify!($name), || {
                #[allow(unused_variables)]
                let stream: RawHandle = std::ptr::null_mut();
                $(let stream = $stream;)?
                // SAFETY: by its contract `dst` holds `count` bytes.
                unsafe {
                    linear_with_array(src, x, y, dst as usize, count, kind, false,
                        stream_handle(stream, $per_thread), $is_async)
                }
            })
        }
    };
}
export_linear_array!(cudaMemcpyToArray, to, false, false);
export_linear_array!(cudaMemcpyToArrayAsync, to, false, true, stream);
export_linear_array!(cudaMemcpyToArrayAsync_ptsz, to, true, true, stream);
export_linear_array!(cudaMemcpyFromArray, from, false, false);
export_linear_array!(cudaMemcpyFromArrayAsync, from, false, true, stream);
export_linear_array!(cudaMemcpyFromArrayAsync_ptsz, from, true, true, stream);

fn array_to_array_linear(
    dst: RawHandle,
    dst_at: (usize, usize),
    src: RawHandle,
    src_at: (usize, usize),
    count: usize,
    stream: StreamHandle,
) -> Result<()> {
    // Both arrays' rows must line up: whole rows from the start of both, or one row.
    let (drow, _, _) = array_info(dst)?
        .desc
        .extent_bytes()
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    let (srow, _, _) = array_info(src)?
        .desc
        .extent_bytes()
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    if dst_at.0 + count <= drow as usize && src_at.0 + count <= srow as usize {
        return array_to_array(dst, dst_at, src, src_at, count, 1, stream);
    }
    if dst_at.0 == 0 && src_at.0 == 0 && drow == srow && count.is_multiple_of(drow as usize) {
        let rows = count / drow as usize;
        return array_to_array(dst, dst_at, src, src_at, drow as usize, rows, stream);
    }
    Err(crate::notice::refuse(
        "cudaMemcpyArrayToArray across rows of unlike arrays",
        "is not supported by vmcuda",
    ))
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaMemcpyArrayToArray(
    dst: RawHandle,
    dx: usize,
    dy: usize,
    src: RawHandle,
    sx: usize,
    sy: usize,
    count: usize,
    _kind: u32,
) -> cudaError_t {
    guard("cudaMemcpyArrayToArray", || {
        array_to_array_linear(dst, (dx, dy), src, (sx, sy), count, StreamHandle::LEGACY)
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaMemcpyArrayToArray_ptds(
    dst: RawHandle,
    dx: usize,
    dy: usize,
    src: RawHandle,
    sx: usize,
    sy: usize,
    count: usize,
    _kind: u32,
) -> cudaError_t {
    guard("cudaMemcpyArrayToArray_ptds", || {
        let stream = stream_handle(std::ptr::null_mut(), true);
        array_to_array_linear(dst, (dx, dy), src, (sx, sy), count, stream)
    })
}

// ---- 3D copies and memory -------------------------------------------------------------

/// A side of a `cudaMemcpy3DParms` copy, and the element size its extent counts in.
fn parms_side(array: RawHandle, pos: Pos, ptr: PitchedPtr, device: bool) -> Result<(Side, usize)> {
    if !array.is_null() {
        let info = array_info(array)?;
        let elem = info
            .desc
            .element_bytes()
            .ok_or(CudaStatus::ErrorInvalidValue)? as usize;
        let (side, _) = array_side(array, pos.x * elem, pos.y, pos.z)?;
        return Ok((side, elem));
    }
    let rows = ptr.ysize.max(1);
    let base = ptr.ptr as usize + pos.z * ptr.pitch * rows + pos.y * ptr.pitch + pos.x;
    Ok((pointer_side(base, ptr.pitch, rows, device), 1))
}

/// `cudaMemcpy3D(Async)`: with an array on either side, one op; between linear memory,
/// pitched 2D copies.
///
/// # Safety
/// A host side holds the whole extent (the program's memory).
pub(crate) unsafe fn memcpy_3d(
    p: &Memcpy3DParms,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if p.src_array.is_null() && p.dst_array.is_null() {
        return super::memory::copy::memcpy_3d_linear(p, stream, is_async);
    }
    let (src_ptr, dst_ptr) = (p.src_ptr.ptr as usize, p.dst_ptr.ptr as usize);
    // The pointer side of a copy to an array is its source, of one from an array its
    // destination.
    let src_device = p.src_array.is_null() && pointer_is_device(p.kind, src_ptr, true)?;
    let dst_device = p.dst_array.is_null() && pointer_is_device(p.kind, dst_ptr, false)?;
    let (s, selem) = parms_side(p.src_array, p.src_pos, p.src_ptr, src_device)?;
    let (d, delem) = parms_side(p.dst_array, p.dst_pos, p.dst_ptr, dst_device)?;
    let elem = if p.src_array.is_null() { delem } else { selem };
    let e = p.extent;
    // SAFETY: as the caller promised.
    unsafe {
        copy(
            s,
            d,
            e.width * elem,
            e.height.max(1),
            e.depth.max(1),
            stream,
            is_async,
        )
    }
}

mod batch;
mod textures;
pub use batch::*;
pub(crate) use textures::*;

#[cfg(test)]
mod tests;
