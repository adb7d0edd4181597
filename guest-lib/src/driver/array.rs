//! The driver's arrays, 2D and 3D copies, texture and surface objects: the same ops
//! as the inner functions' (`inner::array`), from the driver's descriptors (array positions in
//! bytes, memory types named on each side).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::array::{ArrayDesc, TextureDesc};
use vmcuda_wire::CudaStatus;

use super::inner;
use super::{check_initialized, export, Result};
use crate::abi::driver::{Array3DDescriptor, ArrayDescriptor, DriverTextureDesc, Memcpy2D};
use crate::abi::runtime::{ResourceDescC, ViewDescC};
use crate::caller;
use crate::driver::inner::array::Side;
use crate::driver::inner::{stream_handle, RawHandle};

impl Array3DDescriptor {
    fn wire(&self) -> ArrayDesc {
        ArrayDesc {
            width: self.width as u64,
            height: self.height as u64,
            depth: self.depth as u64,
            format: self.format,
            channels: self.channels,
            flags: self.flags,
        }
    }
}

export! {
    fn cuArrayCreate_v2(out: *mut RawHandle, desc: *const ArrayDescriptor) {
        check_initialized()?;
        // SAFETY: by its contract `desc` is readable and `out` writable.
        unsafe {
            let d = caller::read(desc)?;
            let desc = Array3DDescriptor {
                width: d.width,
                height: d.height,
                depth: 0,
                format: d.format,
                channels: d.channels,
                flags: 0,
            };
            caller::write(out, inner::array::create_array(desc.wire())?)
        }
    }
}

export! {
    fn cuArray3DCreate_v2(out: *mut RawHandle, desc: *const Array3DDescriptor) {
        check_initialized()?;
        // SAFETY: by its contract `desc` is readable and `out` writable.
        unsafe { caller::write(out, inner::array::create_array(caller::read(desc)?.wire())?) }
    }
}

export! {
    fn cuDeviceGetTexture1DLinearMaxWidth(width: *mut usize, format: u32, channels: u32, device: i32) {
        super::context::check_device(device)?;
        let w = inner::array::texture_1d_linear_max_width(format, channels, device)?;
        // SAFETY: by its contract `width` is writable.
        unsafe { caller::write(width, w as usize) }
    }
}

export! {
    fn cuArrayDestroy(array: RawHandle) {
        check_initialized()?;
        super::keeping_last_error(|| inner::array::cudaFreeArray(array))
    }
}

export! {
    fn cuArrayGetDescriptor_v2(out: *mut ArrayDescriptor, array: RawHandle) {
        check_initialized()?;
        let d = inner::array::array_desc(array)?;
        let desc = ArrayDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            format: d.format,
            channels: d.channels,
        };
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, desc) }
    }
}

export! {
    fn cuArray3DGetDescriptor_v2(out: *mut Array3DDescriptor, array: RawHandle) {
        check_initialized()?;
        let d = inner::array::array_desc(array)?;
        let desc = Array3DDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            depth: d.depth as usize,
            format: d.format,
            channels: d.channels,
            flags: d.flags,
        };
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, desc) }
    }
}

export! {
    fn cuMipmappedArrayCreate(out: *mut RawHandle, desc: *const Array3DDescriptor, levels: u32) {
        check_initialized()?;
        // SAFETY: by its contract `desc` is readable and `out` writable.
        unsafe { caller::write(out, inner::array::create_mipmapped(caller::read(desc)?.wire(), levels)?) }
    }
}

export! {
    fn cuMipmappedArrayGetLevel(out: *mut RawHandle, mipmap: RawHandle, level: u32) {
        check_initialized()?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, inner::array::mipmapped_level(mipmap, level)?) }
    }
}

export! {
    fn cuMipmappedArrayDestroy(mipmap: RawHandle) {
        check_initialized()?;
        super::keeping_last_error(|| inner::array::cudaFreeMipmappedArray(mipmap))
    }
}

/// `CUmemorytype`.
const HOST: u32 = 1;
const DEVICE: u32 = 2;
pub(super) const ARRAY: u32 = 3;
const UNIFIED: u32 = 4;

/// One side of a driver copy: its type, places and pitch (`x` in bytes).
struct DriverSide {
    x: usize,
    y: usize,
    z: usize,
    memory_type: u32,
    host: usize,
    device: u64,
    array: RawHandle,
    pitch: usize,
    height: usize,
}

impl DriverSide {
    fn side(&self) -> Result<Side> {
        let linear = |ptr: usize| {
            ptr + self.z * self.pitch * self.height.max(1) + self.y * self.pitch + self.x
        };
        Ok(match self.memory_type {
            HOST => Side::Host {
                ptr: linear(self.host),
                pitch: self.pitch,
                rows: self.height.max(1),
            },
            DEVICE | UNIFIED => Side::Device {
                ptr: linear(self.device as usize),
                pitch: self.pitch,
                rows: self.height.max(1),
            },
            ARRAY => Side::Array {
                array: self.array as u64,
                x: self.x,
                y: self.y,
                z: self.z,
            },
            _ => return Err(CudaStatus::ErrorInvalidValue),
        })
    }
}

/// A `CUDA_MEMCPY2D` with an array on either side (`memory` does the others).
///
/// # Safety
/// A host side holds the whole copy (the program's memory).
pub(super) unsafe fn memcpy_2d(p: &Memcpy2D, stream: RawHandle, is_async: bool) -> Result<()> {
    check_initialized()?;
    let src = DriverSide {
        x: p.src_x_in_bytes,
        y: p.src_y,
        z: 0,
        memory_type: p.src_memory_type,
        host: p.src_host as usize,
        device: p.src_device,
        array: p.src_array,
        pitch: p.src_pitch,
        height: p.height,
    };
    let dst = DriverSide {
        x: p.dst_x_in_bytes,
        y: p.dst_y,
        z: 0,
        memory_type: p.dst_memory_type,
        host: p.dst_host as usize,
        device: p.dst_device,
        array: p.dst_array,
        pitch: p.dst_pitch,
        height: p.height,
    };
    let stream = stream_handle(stream, false);
    // SAFETY: as the caller promised.
    unsafe {
        inner::array::copy(
            src.side()?,
            dst.side()?,
            p.width_in_bytes,
            p.height,
            1,
            stream,
            is_async,
        )
    }
}

/// `CUDA_MEMCPY3D` (the graph code's description, shared).
use crate::abi::driver::DriverMemcpy3D as Memcpy3D;

/// # Safety
/// As for [`memcpy_2d`].
unsafe fn memcpy_3d(p: &Memcpy3D, stream: RawHandle, is_async: bool) -> Result<()> {
    check_initialized()?;
    let src = DriverSide {
        x: p.src_x_in_bytes,
        y: p.src_y,
        z: p.src_z,
        memory_type: p.src_memory_type,
        host: p.src_host as usize,
        device: p.src_device,
        array: p.src_array,
        pitch: p.src_pitch,
        height: p.src_height,
    };
    let dst = DriverSide {
        x: p.dst_x_in_bytes,
        y: p.dst_y,
        z: p.dst_z,
        memory_type: p.dst_memory_type,
        host: p.dst_host as usize,
        device: p.dst_device,
        array: p.dst_array,
        pitch: p.dst_pitch,
        height: p.dst_height,
    };
    let stream = stream_handle(stream, false);
    let (h, d) = (p.height.max(1), p.depth.max(1));
    // SAFETY: as the caller promised.
    unsafe {
        inner::array::copy(
            src.side()?,
            dst.side()?,
            p.width_in_bytes,
            h,
            d,
            stream,
            is_async,
        )
    }
}

export! {
    fn cuMemcpy3D_v2(p: *const Memcpy3D) {
        // SAFETY: by its contract `p` is readable and describes the program's memory.
        unsafe { memcpy_3d(&caller::read(p)?, std::ptr::null_mut(), false) }
    }
}

export! {
    fn cuMemcpy3DAsync_v2(p: *const Memcpy3D, stream: RawHandle) {
        // SAFETY: as cuMemcpy3D's.
        unsafe { memcpy_3d(&caller::read(p)?, stream, true) }
    }
}

/// A copy of `count` bytes between an array's row order and a pointer.
///
/// # Safety
/// A host pointer holds `count` bytes of the program's memory.
unsafe fn linear(
    array: RawHandle,
    offset: usize,
    ptr: usize,
    count: usize,
    kind: u32,
    to_array: bool,
) -> Result<()> {
    check_initialized()?;
    let f = if to_array {
        inner::array::cudaMemcpyToArray(array, offset, 0, ptr as *const c_void, count, kind)
    } else {
        inner::array::cudaMemcpyFromArray(ptr as *mut c_void, array, offset, 0, count, kind)
    };
    super::keeping_last_error(|| f)
}

export! {
    fn cuMemcpyHtoA_v2(array: RawHandle, offset: usize, src: *const c_void, count: usize) {
        // SAFETY: by its contract `src` holds `count` bytes.
        unsafe { linear(array, offset, src as usize, count, 1, true) }
    }
}

export! {
    fn cuMemcpyAtoH_v2(dst: *mut c_void, array: RawHandle, offset: usize, count: usize) {
        // SAFETY: by its contract `dst` holds `count` bytes.
        unsafe { linear(array, offset, dst as usize, count, 2, false) }
    }
}

export! {
    fn cuMemcpyDtoA_v2(array: RawHandle, offset: usize, src: u64, count: usize) {
        // SAFETY: a device pointer: no host memory is touched.
        unsafe { linear(array, offset, src as usize, count, 3, true) }
    }
}

export! {
    fn cuMemcpyAtoD_v2(dst: u64, array: RawHandle, offset: usize, count: usize) {
        // SAFETY: a device pointer: no host memory is touched.
        unsafe { linear(array, offset, dst as usize, count, 3, false) }
    }
}

/// An offset in an array's row order as (x in bytes, row).
fn array_place(array: RawHandle, offset: usize) -> Result<(usize, usize)> {
    let (row, _, _) = inner::array::array_desc(array)?
        .extent_bytes()
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    let row = usize::try_from(row)
        .ok()
        .filter(|r| *r > 0)
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    Ok((offset % row, offset / row))
}

/// NVIDIA's driver takes `cuMemcpyAtoA`, `cuMemcpyHtoAAsync` and `cuMemcpyAtoHAsync`
/// ranges within an array's first row only, as the 1D copies they are documented to be:
/// across the rows of a 2D array they answer `CUDA_ERROR_INVALID_VALUE` (measured on the
/// H200, tests/gpu/results/RESULTS-LEGACY.md).
fn within_first_row(array: RawHandle, offset: usize, count: usize) -> Result<()> {
    let (row, _, _) = inner::array::array_desc(array)?
        .extent_bytes()
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    let row = usize::try_from(row).map_err(|_| CudaStatus::ErrorInvalidValue)?;
    match offset.checked_add(count) {
        Some(end) if end <= row => Ok(()),
        _ => Err(CudaStatus::ErrorInvalidValue),
    }
}

/// `count` bytes from one array to another, both in row order from their offsets.
fn array_to_array(
    dst: RawHandle,
    dst_offset: usize,
    src: RawHandle,
    src_offset: usize,
    count: usize,
    per_thread: bool,
) -> Result<()> {
    check_initialized()?;
    within_first_row(dst, dst_offset, count)?;
    within_first_row(src, src_offset, count)?;
    let (dx, dy) = array_place(dst, dst_offset)?;
    let (sx, sy) = array_place(src, src_offset)?;
    // cudaMemcpyDeviceToDevice: both sides are arrays.
    let kind = 3;
    super::keeping_last_error(|| match per_thread {
        false => inner::array::cudaMemcpyArrayToArray(dst, dx, dy, src, sx, sy, count, kind),
        true => inner::array::cudaMemcpyArrayToArray_ptds(dst, dx, dy, src, sx, sy, count, kind),
    })
}

export! {
    fn cuMemcpyAtoA_v2(dst: RawHandle, dst_offset: usize, src: RawHandle, src_offset: usize, count: usize) {
        array_to_array(dst, dst_offset, src, src_offset, count, false)
    }
}

export! {
    fn cuMemcpyAtoA_v2_ptds(dst: RawHandle, dst_offset: usize, src: RawHandle, src_offset: usize, count: usize) {
        array_to_array(dst, dst_offset, src, src_offset, count, true)
    }
}

export! {
    fn cuMemcpyHtoAAsync_v2(array: RawHandle, offset: usize, src: *const c_void, count: usize, stream: RawHandle) {
        check_initialized()?;
        within_first_row(array, offset, count)?;
        // cudaMemcpyHostToDevice; `src` holds `count` bytes by the function's contract,
        // which the runtime's export relies on.
        super::keeping_last_error(|| inner::array::cudaMemcpyToArrayAsync(array, offset, 0, src, count, 1, stream))
    }
}

export! {
    fn cuMemcpyHtoAAsync_v2_ptsz(array: RawHandle, offset: usize, src: *const c_void, count: usize, stream: RawHandle) {
        check_initialized()?;
        within_first_row(array, offset, count)?;
        super::keeping_last_error(|| inner::array::cudaMemcpyToArrayAsync_ptsz(array, offset, 0, src, count, 1, stream))
    }
}

export! {
    fn cuMemcpyAtoHAsync_v2(dst: *mut c_void, array: RawHandle, offset: usize, count: usize, stream: RawHandle) {
        check_initialized()?;
        within_first_row(array, offset, count)?;
        // cudaMemcpyDeviceToHost; `dst` holds `count` bytes by the function's contract.
        super::keeping_last_error(|| inner::array::cudaMemcpyFromArrayAsync(dst, array, offset, 0, count, 2, stream))
    }
}

export! {
    fn cuMemcpyAtoHAsync_v2_ptsz(dst: *mut c_void, array: RawHandle, offset: usize, count: usize, stream: RawHandle) {
        check_initialized()?;
        within_first_row(array, offset, count)?;
        super::keeping_last_error(|| inner::array::cudaMemcpyFromArrayAsync_ptsz(dst, array, offset, 0, count, 2, stream))
    }
}

/// `CUDA_MEMCPY3D_PEER` is `CUDA_MEMCPY3D` with `srcContext` and `dstContext` where
/// that has its reserved pointers (`reserved0`, `reserved1`).
pub type Memcpy3DPeer = Memcpy3D;

/// A 3D copy between two contexts. Contexts name devices here, and with unified
/// addressing the host's copy reaches memory of either device of its host: the copy
/// is `cuMemcpy3D`'s once both contexts are checked. Devices of two hosts (several
/// hosts behind one guest) are refused with `CUDA_ERROR_NOT_SUPPORTED` and a line.
///
/// # Safety
/// `p` is NULL or a readable `CUDA_MEMCPY3D_PEER` whose host sides hold the copy.
unsafe fn memcpy_3d_peer(p: *const Memcpy3DPeer, stream: RawHandle, is_async: bool) -> Result<()> {
    check_initialized()?;
    // SAFETY: as the caller promised.
    let copy = unsafe { caller::read(p) }?;
    let src = super::context::device_of(copy.reserved0)?;
    let dst = super::context::device_of(copy.reserved1)?;
    if crate::driver::inner::on_different_hosts(src, dst)? {
        return Err(crate::notice::refuse(
            "cuMemcpy3DPeer between devices of two hosts",
            "is not supported by vmcuda",
        ));
    }
    // SAFETY: as the caller promised.
    unsafe { memcpy_3d(&copy, stream, is_async) }
}

export! {
    fn cuMemcpy3DPeer(p: *const Memcpy3DPeer) {
        // SAFETY: by its contract `p` is as `memcpy_3d_peer` requires.
        unsafe { memcpy_3d_peer(p, std::ptr::null_mut(), false) }
    }
}

export! {
    fn cuMemcpy3DPeerAsync(p: *const Memcpy3DPeer, stream: RawHandle) {
        // SAFETY: as cuMemcpy3DPeer's.
        unsafe { memcpy_3d_peer(p, stream, true) }
    }
}

/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: RawHandle = 2 as RawHandle;

/// A `_ptsz` stream: NULL is the thread's default stream.
fn per_thread(stream: RawHandle) -> RawHandle {
    if stream.is_null() {
        PER_THREAD
    } else {
        stream
    }
}

export! {
    fn cuMemcpy3DPeerAsync_ptsz(p: *const Memcpy3DPeer, stream: RawHandle) {
        // SAFETY: as cuMemcpy3DPeer's.
        unsafe { memcpy_3d_peer(p, per_thread(stream), true) }
    }
}

export! {
    /// A synchronous copy on the legacy stream is ordered with the thread's default
    /// stream too (a blocking stream), as the other synchronous copies' `_ptds`
    /// variants (`legacy`): the base function.
    fn cuMemcpy3DPeer_ptds(p: *const Memcpy3DPeer) {
        // SAFETY: as cuMemcpy3DPeer's.
        unsafe { memcpy_3d_peer(p, std::ptr::null_mut(), false) }
    }
}

/// The per-thread variants defined here, by exported name, for `cuGetProcAddress`.
pub const PER_THREAD_NAMES: &[(&str, *const ())] = &[
    ("cuMemcpyAtoA_v2_ptds", cuMemcpyAtoA_v2_ptds as *const ()),
    (
        "cuMemcpyHtoAAsync_v2_ptsz",
        cuMemcpyHtoAAsync_v2_ptsz as *const (),
    ),
    (
        "cuMemcpyAtoHAsync_v2_ptsz",
        cuMemcpyAtoHAsync_v2_ptsz as *const (),
    ),
    ("cuMemcpy3DPeer_ptds", cuMemcpy3DPeer_ptds as *const ()),
    (
        "cuMemcpy3DPeerAsync_ptsz",
        cuMemcpy3DPeerAsync_ptsz as *const (),
    ),
];

export! {
    fn cuTexObjectCreate(
        out: *mut u64,
        res: *const ResourceDescC,
        tex: *const DriverTextureDesc,
        view: *const ViewDescC,
    ) {
        check_initialized()?;
        // SAFETY: by its contract `res` and `tex` are readable, `view` NULL or readable,
        // `out` writable.
        unsafe {
            let r = caller::read(res)?;
            let t = caller::read(tex)?;
            let texture = TextureDesc {
                address_mode: t.address_mode,
                filter_mode: t.filter_mode,
                flags: t.flags,
                max_anisotropy: t.max_anisotropy,
                mipmap_filter_mode: t.mipmap_filter_mode,
                mipmap_level_bias: t.mipmap_level_bias,
                min_mipmap_level_clamp: t.min_mipmap_level_clamp,
                max_mipmap_level_clamp: t.max_mipmap_level_clamp,
                border_color: t.border_color,
            };
            let v = if view.is_null() { None } else { Some(caller::read(view)?) };
            let made = inner::array::create_texture(r.driver_resource()?, texture, v.map(|v| v.wire()))?;
            kept(|k| k.textures.insert(made, (r, t, v)));
            caller::write(out, made)
        }
    }
}

export! {
    fn cuTexObjectDestroy(tex: u64) {
        check_initialized()?;
        inner::array::destroy_texture(tex)?;
        kept(|k| k.textures.remove(&tex));
        Ok(())
    }
}

/// The descriptors objects were made with, for the driver's `Get` calls.
#[derive(Default)]
struct Kept {
    textures: HashMap<u64, (ResourceDescC, DriverTextureDesc, Option<ViewDescC>)>,
    surfaces: HashMap<u64, ResourceDescC>,
}

// SAFETY: the descriptors hold the program's handles and addresses as values only.
unsafe impl Send for Kept {}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

fn kept<T>(f: impl FnOnce(&mut Kept) -> T) -> T {
    f(KEPT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Kept::default))
}

export! {
    fn cuTexObjectGetResourceDesc(out: *mut ResourceDescC, tex: u64) {
        check_initialized()?;
        let r = kept(|k| k.textures.get(&tex).map(|t| t.0)).ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, r) }
    }
}

export! {
    fn cuTexObjectGetTextureDesc(out: *mut DriverTextureDesc, tex: u64) {
        check_initialized()?;
        let t = kept(|k| k.textures.get(&tex).map(|t| t.1)).ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, t) }
    }
}

export! {
    fn cuTexObjectGetResourceViewDesc(out: *mut ViewDescC, tex: u64) {
        check_initialized()?;
        let v = kept(|k| k.textures.get(&tex).and_then(|t| t.2)).ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, v) }
    }
}

export! {
    fn cuSurfObjectGetResourceDesc(out: *mut ResourceDescC, surf: u64) {
        check_initialized()?;
        let r = kept(|k| k.surfaces.get(&surf).copied()).ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, r) }
    }
}

export! {
    fn cuSurfObjectCreate(out: *mut u64, res: *const ResourceDescC) {
        check_initialized()?;
        // SAFETY: by its contract `res` is readable and `out` writable.
        unsafe {
            let r = caller::read(res)?;
            if r.res_type != 0 {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            let made = inner::array::create_surface(r.union[0])?;
            kept(|k| k.surfaces.insert(made, r));
            caller::write(out, made)
        }
    }
}

export! {
    fn cuSurfObjectDestroy(surf: u64) {
        check_initialized()?;
        inner::array::destroy_surface(surf)?;
        kept(|k| k.surfaces.remove(&surf));
        Ok(())
    }
}
