//! CUDA arrays, 3D copies, texture and surface objects on real GPUs.
//!
//! The driver's descriptors hold C enums; they are passed here as structs of our own
//! with the same layout and plain integers (`abi.rs`, checked field by field against
//! cudarc's), so no value the session has not checked is ever an invalid Rust enum. Arrays, mipmapped arrays, textures and surfaces live in tables (id = the
//! driver's value -> device index), so that nothing the guest names reaches the
//! driver unless this executor made it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;
use vmcuda_wire::array::{ArrayDesc, TexRefState, TextureDesc, ViewDesc};
use vmcuda_wire::CudaStatus;

use super::super::array::{
    ArrayExec, ExecArray, ExecMipmap, ExecTexRef, ExecTexRefSetting, ExecTexResource, Extent3,
    Place,
};
use super::super::{ExecFunction, ExecModule, ExecResult, StreamOrder, LEGACY_STREAM};
use super::abi::{Array3DDesc, ResourceDesc, TexDesc, ViewDescC};
use super::{check, to_usize, CudaExecutor};

/// `CUresourcetype`.
const RESOURCE_ARRAY: u32 = 0;
const RESOURCE_MIPMAPPED: u32 = 1;
const RESOURCE_LINEAR: u32 = 2;
const RESOURCE_PITCH2D: u32 = 3;

impl Array3DDesc {
    fn from(desc: &ArrayDesc) -> ExecResult<Array3DDesc> {
        Ok(Array3DDesc {
            width: to_usize(desc.width)?,
            height: to_usize(desc.height)?,
            depth: to_usize(desc.depth)?,
            format: desc.format,
            channels: desc.channels,
            flags: desc.flags,
        })
    }
}

impl ResourceDesc {
    fn new(res_type: u32) -> ResourceDesc {
        ResourceDesc {
            res_type,
            union: [0; 16],
            flags: 0,
        }
    }
}

/// Arrays, mipmapped arrays and the objects made of them (value -> device index);
/// the arrays a mipmapped array owns are apart, destroyed with it.
#[derive(Default)]
pub(super) struct CudaArrays {
    arrays: HashMap<ExecArray, usize>,
    levels: HashMap<ExecArray, ExecMipmap>,
    pub(super) mipmaps: HashMap<ExecMipmap, usize>,
    textures: HashMap<u64, usize>,
    surfaces: HashMap<u64, usize>,
    /// Texture and surface references (see `texref`).
    pub(super) texrefs: HashMap<u64, (usize, super::texref::RefKind)>,
}

impl CudaExecutor {
    pub(super) fn array_of(&self, array: ExecArray) -> ExecResult<sys::CUarray> {
        if self.array_tables.arrays.contains_key(&array)
            || self.array_tables.levels.contains_key(&array)
        {
            Ok(array as usize as sys::CUarray)
        } else {
            Err(CudaStatus::ErrorInvalidValue)
        }
    }

    /// Destroy the arrays and objects of device `idx` (its context is current).
    pub(super) fn arrays_destroy_device(&mut self, idx: usize) {
        let t = &mut self.array_tables;
        t.textures.retain(|&tex, d| {
            if *d == idx {
                // SAFETY: made by tex_create, destroyed once (leaving the table).
                let _ = unsafe { sys::cuTexObjectDestroy(tex) };
            }
            *d != idx
        });
        t.surfaces.retain(|&surf, d| {
            if *d == idx {
                // SAFETY: made by surf_create, destroyed once (leaving the table).
                let _ = unsafe { sys::cuSurfObjectDestroy(surf) };
            }
            *d != idx
        });
        t.arrays.retain(|&a, d| {
            if *d == idx {
                // SAFETY: made by array_create, destroyed once (leaving the table).
                let _ = unsafe { sys::cuArrayDestroy(a as usize as sys::CUarray) };
            }
            *d != idx
        });
        let gone: Vec<ExecMipmap> = t
            .mipmaps
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&m, _)| m)
            .collect();
        for m in gone {
            t.mipmaps.remove(&m);
            t.levels.retain(|_, owner| *owner != m);
            // SAFETY: made by mipmapped_create, destroyed once (leaving the table).
            let _ = unsafe { sys::cuMipmappedArrayDestroy(m as usize as sys::CUmipmappedArray) };
        }
    }

    /// One side of a copy, in the driver's terms.
    fn place(
        &self,
        place: Place,
    ) -> ExecResult<(
        sys::CUmemorytype,
        u64,
        *mut c_void,
        sys::CUarray,
        [usize; 5],
    )> {
        use sys::CUmemorytype as M;
        // (type, device pointer, host pointer, array, [x, y, z, pitch, height])
        Ok(match place {
            Place::Device { ptr, pitch, slice } => {
                let height = slice.checked_div(pitch).unwrap_or(0);
                let shape = [0, 0, 0, to_usize(pitch)?, to_usize(height)?];
                (
                    M::CU_MEMORYTYPE_DEVICE,
                    ptr,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    shape,
                )
            }
            Place::Host { addr, pitch, slice } => {
                let height = slice.checked_div(pitch).unwrap_or(0);
                let shape = [0, 0, 0, to_usize(pitch)?, to_usize(height)?];
                let host = addr as usize as *mut c_void;
                (M::CU_MEMORYTYPE_HOST, 0, host, ptr::null_mut(), shape)
            }
            Place::Array { array, x, y, z } => {
                let a = self.array_of(array)?;
                let shape = [to_usize(x)?, to_usize(y)?, to_usize(z)?, 0, 0];
                (M::CU_MEMORYTYPE_ARRAY, 0, ptr::null_mut(), a, shape)
            }
        })
    }
}

impl ArrayExec for CudaExecutor {
    fn array_create(&mut self, desc: &ArrayDesc) -> ExecResult<ExecArray> {
        let idx = self.bind()?;
        let d = Array3DDesc::from(desc)?;
        let mut a: sys::CUarray = ptr::null_mut();
        // SAFETY: `d` has the driver's descriptor layout with values the session
        // checked; out-pointer to a local.
        check(unsafe { sys::cuArray3DCreate_v2(&mut a, (&d as *const Array3DDesc).cast()) })?;
        let id = a as usize as ExecArray;
        self.array_tables.arrays.insert(id, idx);
        Ok(id)
    }

    fn array_destroy(&mut self, array: ExecArray) -> ExecResult<()> {
        self.bind()?;
        if self.array_tables.arrays.remove(&array).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: made by array_create, destroyed once (it has left the table).
        check(unsafe { sys::cuArrayDestroy(array as usize as sys::CUarray) })
    }

    fn mipmapped_create(&mut self, desc: &ArrayDesc, levels: u32) -> ExecResult<ExecMipmap> {
        let idx = self.bind()?;
        let d = Array3DDesc::from(desc)?;
        let mut m: sys::CUmipmappedArray = ptr::null_mut();
        // SAFETY: as in array_create.
        check(unsafe {
            sys::cuMipmappedArrayCreate(&mut m, (&d as *const Array3DDesc).cast(), levels)
        })?;
        let id = m as usize as ExecMipmap;
        self.array_tables.mipmaps.insert(id, idx);
        Ok(id)
    }

    fn mipmapped_level(
        &mut self,
        mipmap: ExecMipmap,
        level: u32,
    ) -> ExecResult<(ExecArray, ArrayDesc)> {
        self.bind()?;
        if !self.array_tables.mipmaps.contains_key(&mipmap) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut a: sys::CUarray = ptr::null_mut();
        // SAFETY: a live mipmapped array of this executor; out-pointer to a local.
        check(unsafe {
            sys::cuMipmappedArrayGetLevel(&mut a, mipmap as usize as sys::CUmipmappedArray, level)
        })?;
        let mut d = Array3DDesc::default();
        // SAFETY: `a` is the level just given; `d` has the descriptor's layout.
        check(unsafe { sys::cuArray3DGetDescriptor_v2((&mut d as *mut Array3DDesc).cast(), a) })?;
        let id = a as usize as ExecArray;
        self.array_tables.levels.insert(id, mipmap);
        let desc = ArrayDesc {
            width: d.width as u64,
            height: d.height as u64,
            depth: d.depth as u64,
            format: d.format,
            channels: d.channels,
            flags: d.flags,
        };
        Ok((id, desc))
    }

    fn mipmapped_destroy(&mut self, mipmap: ExecMipmap) -> ExecResult<()> {
        self.bind()?;
        if self.array_tables.mipmaps.remove(&mipmap).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.array_tables.levels.retain(|_, owner| *owner != mipmap);
        // SAFETY: made by mipmapped_create, destroyed once (it has left the table).
        check(unsafe { sys::cuMipmappedArrayDestroy(mipmap as usize as sys::CUmipmappedArray) })
    }

    fn copy_3d(
        &mut self,
        src: Place,
        dst: Place,
        extent: Extent3,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        let (st, sd, sh, sa, [sx, sy, sz, sp, shh]) = self.place(src)?;
        let (dt, dd, dh, da, [dx, dy, dz, dp, dhh]) = self.place(dst)?;
        // A slice's height matters across slices only; for one slice the driver wants
        // none given or one that holds the rows (0, as the runtime passes).
        let (shh, dhh) = if extent.depth <= 1 {
            (0, 0)
        } else {
            (shh, dhh)
        };
        // Every field named: the memory types are C enums with no zero value, so the
        // struct cannot start all-zero.
        let c = sys::CUDA_MEMCPY3D {
            srcXInBytes: sx,
            srcY: sy,
            srcZ: sz,
            srcLOD: 0,
            srcMemoryType: st,
            srcHost: sh,
            srcDevice: sd,
            srcArray: sa,
            reserved0: ptr::null_mut(),
            srcPitch: sp,
            srcHeight: shh,
            dstXInBytes: dx,
            dstY: dy,
            dstZ: dz,
            dstLOD: 0,
            dstMemoryType: dt,
            dstHost: dh,
            dstDevice: dd,
            dstArray: da,
            reserved1: ptr::null_mut(),
            dstPitch: dp,
            dstHeight: dhh,
            WidthInBytes: to_usize(extent.width)?,
            Height: to_usize(extent.height)?,
            Depth: to_usize(extent.depth)?,
        };
        let host_side = matches!(src, Place::Host { .. }) || matches!(dst, Place::Host { .. });
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: the session checked both sides hold the whole extent; host
            // memory stays valid for the call, which is synchronous.
            return check(unsafe { sys::cuMemcpy3D_v2(&c) });
        }
        // SAFETY: as above; `s` is checked.
        check(unsafe { sys::cuMemcpy3DAsync_v2(&c, s) })?;
        if host_side || !is_async {
            // The host side is the session's to free when this returns.
            // SAFETY: `s` is checked.
            check(unsafe { sys::cuStreamSynchronize(s) })?;
        }
        Ok(())
    }

    fn tex_create(
        &mut self,
        resource: ExecTexResource,
        texture: &TextureDesc,
        view: Option<&ViewDesc>,
    ) -> ExecResult<u64> {
        let idx = self.bind()?;
        let mut res = match resource {
            ExecTexResource::Array(a) => {
                let mut r = ResourceDesc::new(RESOURCE_ARRAY);
                r.union[0] = self.array_of(a)? as usize as u64;
                r
            }
            ExecTexResource::Mipmapped(m) => {
                if !self.array_tables.mipmaps.contains_key(&m) {
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                let mut r = ResourceDesc::new(RESOURCE_MIPMAPPED);
                r.union[0] = m;
                r
            }
            ExecTexResource::Linear {
                ptr,
                format,
                channels,
                bytes,
            } => {
                let mut r = ResourceDesc::new(RESOURCE_LINEAR);
                r.union[0] = ptr;
                r.union[1] = u64::from(format) | (u64::from(channels) << 32);
                r.union[2] = bytes;
                r
            }
            ExecTexResource::Pitch2D {
                ptr,
                format,
                channels,
                width,
                height,
                pitch,
            } => {
                let mut r = ResourceDesc::new(RESOURCE_PITCH2D);
                r.union[0] = ptr;
                r.union[1] = u64::from(format) | (u64::from(channels) << 32);
                (r.union[2], r.union[3], r.union[4]) = (width, height, pitch);
                r
            }
        };
        res.flags = 0;
        let tex = TexDesc {
            address_mode: texture.address_mode,
            filter_mode: texture.filter_mode,
            flags: texture.flags,
            max_anisotropy: texture.max_anisotropy,
            mipmap_filter_mode: texture.mipmap_filter_mode,
            mipmap_level_bias: texture.mipmap_level_bias,
            min_mipmap_level_clamp: texture.min_mipmap_level_clamp,
            max_mipmap_level_clamp: texture.max_mipmap_level_clamp,
            border_color: texture.border_color,
            reserved: [0; 12],
        };
        let view = view
            .map(|v| {
                Ok::<_, CudaStatus>(ViewDescC {
                    format: v.format,
                    width: to_usize(v.width)?,
                    height: to_usize(v.height)?,
                    depth: to_usize(v.depth)?,
                    first_mipmap_level: v.first_mipmap_level,
                    last_mipmap_level: v.last_mipmap_level,
                    first_layer: v.first_layer,
                    last_layer: v.last_layer,
                    reserved: [0; 16],
                })
            })
            .transpose()?;
        let view_ptr = view
            .as_ref()
            .map_or(ptr::null(), |v| (v as *const ViewDescC).cast());
        let mut t: sys::CUtexObject = 0;
        // SAFETY: the three descriptors have the driver's layouts, hold values the
        // session checked (enums in range, memory the guest's own) and objects of this
        // executor; out-pointer to a local.
        check(unsafe {
            sys::cuTexObjectCreate(
                &mut t,
                (&res as *const ResourceDesc).cast(),
                (&tex as *const TexDesc).cast(),
                view_ptr,
            )
        })?;
        self.array_tables.textures.insert(t, idx);
        Ok(t)
    }

    fn tex_destroy(&mut self, tex: u64) -> ExecResult<()> {
        self.bind()?;
        if self.array_tables.textures.remove(&tex).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: made by tex_create, destroyed once (it has left the table).
        check(unsafe { sys::cuTexObjectDestroy(tex) })
    }

    fn surf_create(&mut self, array: ExecArray) -> ExecResult<u64> {
        let idx = self.bind()?;
        let mut r = ResourceDesc::new(RESOURCE_ARRAY);
        r.union[0] = self.array_of(array)? as usize as u64;
        let mut surf: sys::CUsurfObject = 0;
        // SAFETY: the descriptor has the driver's layout and names an array of this
        // executor; out-pointer to a local.
        check(unsafe { sys::cuSurfObjectCreate(&mut surf, (&r as *const ResourceDesc).cast()) })?;
        self.array_tables.surfaces.insert(surf, idx);
        Ok(surf)
    }

    fn surf_destroy(&mut self, surf: u64) -> ExecResult<()> {
        self.bind()?;
        if self.array_tables.surfaces.remove(&surf).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: made by surf_create, destroyed once (it has left the table).
        check(unsafe { sys::cuSurfObjectDestroy(surf) })
    }

    fn module_tex_ref(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecTexRef, TexRefState)> {
        self.texref_from_module(module, name)
    }

    fn module_surf_ref(&mut self, module: ExecModule, name: &str) -> ExecResult<ExecTexRef> {
        self.surfref_from_module(module, name)
    }

    fn tex_ref_create(&mut self) -> ExecResult<(ExecTexRef, TexRefState)> {
        self.texref_create()
    }

    fn tex_ref_destroy(&mut self, texref: ExecTexRef) -> ExecResult<()> {
        self.texref_destroy(texref)
    }

    fn tex_ref_set(&mut self, texref: ExecTexRef, setting: ExecTexRefSetting) -> ExecResult<u64> {
        self.texref_set(texref, setting)
    }

    fn surf_ref_set_array(
        &mut self,
        surfref: ExecTexRef,
        array: ExecArray,
        flags: u32,
    ) -> ExecResult<()> {
        self.surfref_set_array(surfref, array, flags)
    }

    fn param_set_tex_ref(
        &mut self,
        function: ExecFunction,
        texunit: i32,
        texref: ExecTexRef,
    ) -> ExecResult<()> {
        self.param_tex_ref(function, texunit, texref)
    }
}
