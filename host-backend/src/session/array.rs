//! CUDA arrays, 3D copies, texture and surface objects.
//!
//! Arrays and mipmapped arrays are named here and charged to the guest's quota (an
//! array its bytes rounded up to 64 KiB, the driver's padding; a mipmapped array
//! twice its first level's, which bounds every level together); the arrays a mipmapped
//! array owns are charged with it and are never the guest's to destroy. A 3D copy is
//! checked on both sides against its whole extent before the executor sees it: device
//! memory must be the guest's own, an array's extent must hold it, shared memory must
//! lie in one mapping, and the frame must carry exactly its bytes. Texture and surface
//! objects are the driver's values (kernels take them by value); the session keeps
//! the ones it made, destroys only those, and checks the memory a linear or pitched
//! texture reads. Everything goes when the session does.

use crate::executor::StreamOrder;
use std::collections::HashMap;

use tracing::{debug, warn};
use vmcuda_wire::array::{
    array_flags, format, ArrayDesc, CopyPlace, TexResource, TextureDesc, ViewDesc,
};
use vmcuda_wire::frame::MAX_DATA_LEN;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use crate::executor::array::{
    ExecArray, ExecMipmap, ExecTexRef, ExecTexRefSetting, ExecTexResource, Extent3, Place,
};

use super::{nothing, Session};

struct ArrayEntry {
    exec: ExecArray,
    desc: ArrayDesc,
    /// Bytes charged for it (0 for a mipmapped array's level).
    charged: u64,
    /// The mipmapped array that owns it, if it is a level.
    owner: Option<MipmappedHandle>,
    device: i32,
}

struct MipmapEntry {
    exec: ExecMipmap,
    charged: u64,
    device: i32,
}

#[derive(Default)]
pub(super) struct ArrayTables {
    arrays: HashMap<ArrayHandle, ArrayEntry>,
    mipmaps: HashMap<MipmappedHandle, MipmapEntry>,
    /// Texture and surface objects, and the device each was made on.
    textures: HashMap<u64, i32>,
    surfaces: HashMap<u64, i32>,
    /// Texture and surface references, named here, and the guest's name of each of
    /// the executor's (a module's reference asked for twice is one).
    references: HashMap<TexRefId, RefEntry>,
    reference_ids: HashMap<ExecTexRef, TexRefId>,
}

struct RefEntry {
    exec: ExecTexRef,
    surface: bool,
    /// Made by `cuTexRefCreate` (the guest's to destroy), not a module's.
    own: bool,
}

/// `CU_TRSA_OVERRIDE_FORMAT`, the one flag `cuTexRefSetArray` and
/// `cuSurfRefSetArray` take... and `CU_PARAM_TR_DEFAULT`, `cuParamSetTexRef`'s unit.
const TRSA_OVERRIDE_FORMAT: u32 = 1;
const PARAM_TR_DEFAULT: i32 = -1;

/// Arrays are padded by the driver: charged in 64 KiB steps.
const ARRAY_GRANULE: u64 = 64 << 10;

/// `CU_TRSF_*`: read as integer, normalized coordinates, sRGB, no trilinear
/// optimization, seamless cubemap.
const TEXTURE_FLAGS: u32 = 0x01 | 0x02 | 0x10 | 0x20 | 0x40;
/// `CU_TR_ADDRESS_MODE_BORDER`, `CU_TR_FILTER_MODE_LINEAR`, the last
/// `CUresourceViewFormat`.
const LAST_ADDRESS_MODE: u32 = 3;
const LAST_FILTER_MODE: u32 = 1;
const LAST_VIEW_FORMAT: u32 = 0x22;

fn refuse(session: &Session, what: &str) -> CudaStatus {
    warn!(client = %session.client, what, "refused an array request");
    CudaStatus::ErrorInvalidValue
}

impl Session {
    fn array_entry(&self, array: ArrayHandle) -> Result<&ArrayEntry, CudaStatus> {
        self.array_tables
            .arrays
            .get(&array)
            .ok_or_else(|| refuse(self, "an unknown array"))
    }

    /// A descriptor the executor may be handed: a forwarded format and channel count,
    /// known flags, an extent that can be counted.
    fn check_desc(&self, desc: &ArrayDesc) -> Result<u64, CudaStatus> {
        let bytes = desc.bytes().filter(|&b| b > 0 && desc.width > 0);
        let flags_ok = desc.flags & !array_flags::KNOWN == 0;
        let shape_ok = desc.height > 0 || desc.depth == 0 || desc.flags & array_flags::LAYERED != 0;
        match bytes {
            Some(b) if flags_ok && shape_ok => Ok(b),
            _ => Err(refuse(self, "an array descriptor")),
        }
    }

    fn count_objects(&mut self) -> Result<(), CudaStatus> {
        let t = &self.array_tables;
        let have = t.arrays.len()
            + t.mipmaps.len()
            + t.textures.len()
            + t.surfaces.len()
            + t.references.len();
        self.accounts
            .check_count("array or texture", have, self.grant.max_streams)
    }

    /// One side of a copy, checked against the whole extent.
    fn place(
        &self,
        place: CopyPlace,
        extent: Extent3,
        frame: Option<u64>,
    ) -> Result<Place, CudaStatus> {
        let Extent3 {
            width,
            height,
            depth,
        } = extent;
        // The bytes from the first row's start to the last row's end.
        let span = |pitch: u64, rows: u64| -> Result<(u64, u64), CudaStatus> {
            if (height > 1 || depth > 1) && pitch < width {
                return Err(CudaStatus::ErrorInvalidPitchValue);
            }
            if depth > 1 && rows < height {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            let slice = pitch
                .checked_mul(rows)
                .ok_or(CudaStatus::ErrorInvalidValue)?;
            let len = (depth - 1)
                .checked_mul(slice)
                .and_then(|s| s.checked_add((height - 1).checked_mul(pitch)?))
                .and_then(|s| s.checked_add(width))
                .ok_or(CudaStatus::ErrorInvalidValue)?;
            Ok((slice, len))
        };
        Ok(match place {
            CopyPlace::Device {
                ptr,
                pitch,
                height: rows,
            } => {
                let (slice, len) = span(pitch, rows)?;
                self.check_range(ptr, len)?;
                Place::Device { ptr, pitch, slice }
            }
            CopyPlace::Shared {
                addr,
                pitch,
                height: rows,
            } => {
                let (slice, len) = span(pitch, rows)?;
                let here = self.shared_here(addr, len)?;
                Place::Host {
                    addr: here,
                    pitch,
                    slice,
                }
            }
            CopyPlace::Array { array, x, y, z } => {
                let entry = self.array_entry(array)?;
                let (row, rows, slices) = entry
                    .desc
                    .extent_bytes()
                    .ok_or(CudaStatus::ErrorInvalidValue)?;
                let fits = |at: u64, n: u64, of: u64| at.checked_add(n).is_some_and(|e| e <= of);
                if !(fits(x, width, row) && fits(y, height, rows) && fits(z, depth, slices)) {
                    return Err(refuse(self, "a copy past an array's extent"));
                }
                Place::Array {
                    array: entry.exec,
                    x,
                    y,
                    z,
                }
            }
            CopyPlace::Frame => {
                let addr = frame.ok_or_else(|| refuse(self, "a copy from frame to frame"))?;
                Place::Host {
                    addr,
                    pitch: width,
                    slice: width * height,
                }
            }
        })
    }

    /// What a texture reads, checked.
    fn tex_resource(&mut self, resource: TexResource) -> Result<ExecTexResource, CudaStatus> {
        let element = |format: u32, channels: u32| -> Result<u64, CudaStatus> {
            match (format::channel_bytes(format), channels) {
                (Some(b), 1 | 2 | 4) => Ok(b * channels as u64),
                _ => Err(refuse(self, "a texture's format")),
            }
        };
        Ok(match resource {
            TexResource::Array(a) => ExecTexResource::Array(self.array_entry(a)?.exec),
            TexResource::Mipmapped(m) => ExecTexResource::Mipmapped(
                self.array_tables
                    .mipmaps
                    .get(&m)
                    .ok_or_else(|| refuse(self, "an unknown mipmapped array"))?
                    .exec,
            ),
            TexResource::Linear {
                ptr,
                format,
                channels,
                bytes,
            } => {
                let element = element(format, channels)?;
                // Wider than the device takes: refused, as the driver refuses it.
                if bytes / element > self.exec.texture_1d_linear_max_width(format, channels)? {
                    return Err(refuse(self, "a linear texture wider than the device takes"));
                }
                // The driver does not hold a linear texture to its allocation (NVIDIA's
                // convolutionFFT2D sample declares one past the end and reads inside):
                // it starts in the guest's memory and is cut at its end, so reads past
                // it see zeros, never memory that is not the guest's.
                let owned = self.owned_prefix(ptr, bytes);
                if owned == 0 && bytes != 0 {
                    self.check_range(ptr, bytes)?;
                }
                if owned < bytes {
                    debug!(client = %self.client, ptr = format_args!("{ptr:#x}"), bytes, owned,
                        "a linear texture reaching past the guest's memory is cut at its end");
                }
                ExecTexResource::Linear {
                    ptr,
                    format,
                    channels,
                    bytes: owned - owned % element,
                }
            }
            TexResource::Pitch2D {
                ptr,
                format,
                channels,
                width,
                height,
                pitch,
            } => {
                let row = width
                    .checked_mul(element(format, channels)?)
                    .ok_or(CudaStatus::ErrorInvalidValue)?;
                self.check_pitched(ptr, pitch, row, height)?;
                ExecTexResource::Pitch2D {
                    ptr,
                    format,
                    channels,
                    width,
                    height,
                    pitch,
                }
            }
        })
    }

    fn check_texture(&self, t: &TextureDesc, view: Option<&ViewDesc>) -> Result<(), CudaStatus> {
        let ok = t.address_mode.iter().all(|&m| m <= LAST_ADDRESS_MODE)
            && t.filter_mode <= LAST_FILTER_MODE
            && t.mipmap_filter_mode <= LAST_FILTER_MODE
            && t.flags & !TEXTURE_FLAGS == 0
            && view.is_none_or(|v| v.format <= LAST_VIEW_FORMAT);
        if ok {
            Ok(())
        } else {
            Err(refuse(self, "a texture descriptor"))
        }
    }

    /// The guest's name of one of the executor's references, made on first sight.
    fn name_reference(
        &mut self,
        exec: ExecTexRef,
        surface: bool,
        own: bool,
    ) -> Result<TexRefId, CudaStatus> {
        if let Some(&id) = self.array_tables.reference_ids.get(&exec) {
            return Ok(id);
        }
        self.count_objects()?;
        let id = self.handles.fresh();
        self.array_tables.reference_ids.insert(exec, id);
        self.array_tables
            .references
            .insert(id, RefEntry { exec, surface, own });
        Ok(id)
    }

    fn reference(&self, id: TexRefId, surface: bool) -> Result<&RefEntry, CudaStatus> {
        match self.array_tables.references.get(&id) {
            Some(r) if r.surface == surface => Ok(r),
            _ => Err(refuse(self, "an unknown texture or surface reference")),
        }
    }

    /// A texture reference's setting checked: known formats, modes and flags, and the
    /// memory it binds the guest's own (the whole range, an array or mipmapped array
    /// of its).
    fn checked_setting(&self, setting: TexRefSetting) -> Result<ExecTexRefSetting, CudaStatus> {
        let element = |format: u32, channels: u32| match (format::channel_bytes(format), channels) {
            (Some(b), 1 | 2 | 4) => Ok(b * u64::from(channels)),
            _ => Err(refuse(self, "a texture reference's format")),
        };
        let bind = |resource, flags| Ok(ExecTexRefSetting::Bind { resource, flags });
        match setting {
            TexRefSetting::Array { array, flags } => {
                if flags != TRSA_OVERRIDE_FORMAT {
                    return Err(refuse(self, "cuTexRefSetArray's flags"));
                }
                bind(ExecTexResource::Array(self.array_entry(array)?.exec), flags)
            }
            TexRefSetting::Mipmapped { mipmap, flags } => {
                if flags != TRSA_OVERRIDE_FORMAT {
                    return Err(refuse(self, "cuTexRefSetMipmappedArray's flags"));
                }
                let m = self
                    .array_tables
                    .mipmaps
                    .get(&mipmap)
                    .ok_or_else(|| refuse(self, "an unknown mipmapped array"))?;
                bind(ExecTexResource::Mipmapped(m.exec), flags)
            }
            TexRefSetting::Address { ptr, bytes } => {
                self.check_range(ptr, bytes)?;
                let resource = ExecTexResource::Linear {
                    ptr,
                    format: 0,
                    channels: 0,
                    bytes,
                };
                bind(resource, 0)
            }
            TexRefSetting::Address2D {
                ptr,
                format,
                channels,
                width,
                height,
                pitch,
            } => {
                let row = width
                    .checked_mul(element(format, channels)?)
                    .filter(|&row| row <= pitch)
                    .ok_or_else(|| refuse(self, "a pitched texture reference's rows"))?;
                self.check_pitched(ptr, pitch, row, height)?;
                let resource = ExecTexResource::Pitch2D {
                    ptr,
                    format,
                    channels,
                    width,
                    height,
                    pitch,
                };
                bind(resource, 0)
            }
            TexRefSetting::Format { format, channels } => {
                element(format, u32::try_from(channels).unwrap_or(0))?;
                Ok(ExecTexRefSetting::Other(setting))
            }
            TexRefSetting::AddressMode { dim, mode } => {
                if !(0..3).contains(&dim) || mode > LAST_ADDRESS_MODE {
                    return Err(refuse(self, "a texture reference's address mode"));
                }
                Ok(ExecTexRefSetting::Other(setting))
            }
            TexRefSetting::FilterMode(m) | TexRefSetting::MipmapFilterMode(m) => {
                if m > LAST_FILTER_MODE {
                    return Err(refuse(self, "a texture reference's filter mode"));
                }
                Ok(ExecTexRefSetting::Other(setting))
            }
            TexRefSetting::Flags(f) => {
                if f & !TEXTURE_FLAGS != 0 {
                    return Err(refuse(self, "a texture reference's flags"));
                }
                Ok(ExecTexRefSetting::Other(setting))
            }
            TexRefSetting::MipmapLevelBias(_)
            | TexRefSetting::MipmapLevelClamp { .. }
            | TexRefSetting::MaxAnisotropy(_)
            | TexRefSetting::BorderColor(_)
            | TexRefSetting::Nothing => Ok(ExecTexRefSetting::Other(setting)),
        }
    }

    /// Destroy every texture, surface and array, refunding them (the session ends).
    pub(super) fn arrays_drop_all(&mut self) {
        let tables = std::mem::take(&mut self.array_tables);
        for (tex, _) in tables.textures {
            let _ = self.exec.tex_destroy(tex);
        }
        for (surf, _) in tables.surfaces {
            let _ = self.exec.surf_destroy(surf);
        }
        for (_, r) in tables.references {
            if r.own {
                let _ = self.exec.tex_ref_destroy(r.exec);
            }
        }
        for (_, a) in tables.arrays {
            if a.owner.is_none() {
                let _ = self.exec.array_destroy(a.exec);
            }
            self.accounts.refund(a.charged);
        }
        for (_, m) in tables.mipmaps {
            let _ = self.exec.mipmapped_destroy(m.exec);
            self.accounts.refund(m.charged);
        }
    }

    /// `device` is being reset, which destroys its arrays and objects: forget them,
    /// refunded.
    pub(super) fn arrays_reset(&mut self, device: i32) {
        let t = &mut self.array_tables;
        let mut refund = 0;
        t.arrays.retain(|_, a| {
            if a.device == device {
                refund += a.charged;
            }
            a.device != device
        });
        t.mipmaps.retain(|_, m| {
            if m.device == device {
                refund += m.charged;
            }
            m.device != device
        });
        t.textures.retain(|_, d| *d != device);
        t.surfaces.retain(|_, d| *d != device);
        self.accounts.refund(refund);
    }
}

impl ArrayOps for Session {
    fn array_create(
        &mut self,
        ctx: &CallContext,
        req: ArrayCreate,
        _: &[u8],
    ) -> HandlerResult<ArrayMade> {
        let bytes = self.check_desc(&req.desc)?;
        self.count_objects()?;
        let charged = bytes.div_ceil(ARRAY_GRANULE) * ARRAY_GRANULE;
        self.accounts.charge(charged)?;
        let exec = match self.exec.array_create(&req.desc) {
            Ok(a) => a,
            Err(e) => {
                self.accounts.refund(charged);
                return Err(e);
            }
        };
        let array = ArrayHandle(self.handles.fresh());
        let entry = ArrayEntry {
            exec,
            desc: req.desc,
            charged,
            owner: None,
            device: ctx.device,
        };
        self.array_tables.arrays.insert(array, entry);
        Ok((ArrayMade { array }, Vec::new()))
    }

    fn array_destroy(&mut self, _: &CallContext, req: ArrayDestroy, _: &[u8]) -> HandlerResult<()> {
        let entry = self.array_entry(req.array)?;
        if entry.owner.is_some() {
            return Err(refuse(self, "destroying a mipmapped array's level"));
        }
        let (exec, charged) = (entry.exec, entry.charged);
        self.array_tables.arrays.remove(&req.array);
        let r = self.exec.array_destroy(exec);
        self.accounts.refund(charged);
        r?;
        nothing()
    }

    fn mipmapped_array_create(
        &mut self,
        ctx: &CallContext,
        req: MipmappedArrayCreate,
        _: &[u8],
    ) -> HandlerResult<MipmappedMade> {
        let bytes = self.check_desc(&req.desc)?;
        if req.levels == 0 || req.levels > 32 {
            return Err(refuse(self, "a mipmapped array's level count"));
        }
        self.count_objects()?;
        let charged = bytes
            .checked_mul(2)
            .ok_or(CudaStatus::ErrorMemoryAllocation)?
            .div_ceil(ARRAY_GRANULE)
            * ARRAY_GRANULE;
        self.accounts.charge(charged)?;
        let exec = match self.exec.mipmapped_create(&req.desc, req.levels) {
            Ok(m) => m,
            Err(e) => {
                self.accounts.refund(charged);
                return Err(e);
            }
        };
        let mipmap = MipmappedHandle(self.handles.fresh());
        self.array_tables.mipmaps.insert(
            mipmap,
            MipmapEntry {
                exec,
                charged,
                device: ctx.device,
            },
        );
        Ok((MipmappedMade { mipmap }, Vec::new()))
    }

    fn mipmapped_array_get_level(
        &mut self,
        ctx: &CallContext,
        req: MipmappedArrayGetLevel,
        _: &[u8],
    ) -> HandlerResult<LevelMade> {
        let Some(m) = self.array_tables.mipmaps.get(&req.mipmap) else {
            return Err(refuse(self, "an unknown mipmapped array"));
        };
        let (exec, desc) = self.exec.mipmapped_level(m.exec, req.level)?;
        let known = self
            .array_tables
            .arrays
            .iter()
            .find(|(_, a)| a.exec == exec && a.owner == Some(req.mipmap))
            .map(|(&h, _)| h);
        let array = match known {
            Some(h) => h,
            None => {
                self.count_objects()?;
                let h = ArrayHandle(self.handles.fresh());
                let entry = ArrayEntry {
                    exec,
                    desc,
                    charged: 0,
                    owner: Some(req.mipmap),
                    device: ctx.device,
                };
                self.array_tables.arrays.insert(h, entry);
                h
            }
        };
        Ok((LevelMade { array, desc }, Vec::new()))
    }

    fn mipmapped_array_destroy(
        &mut self,
        _: &CallContext,
        req: MipmappedArrayDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let Some(m) = self.array_tables.mipmaps.remove(&req.mipmap) else {
            return Err(refuse(self, "an unknown mipmapped array"));
        };
        self.array_tables
            .arrays
            .retain(|_, a| a.owner != Some(req.mipmap));
        let r = self.exec.mipmapped_destroy(m.exec);
        self.accounts.refund(m.charged);
        r?;
        nothing()
    }

    fn copy_3d(&mut self, _: &CallContext, req: Copy3D, data: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let bytes = req.bytes().ok_or(CudaStatus::ErrorInvalidValue)?;
        if bytes == 0 {
            return nothing();
        }
        let extent = Extent3 {
            width: req.width,
            height: req.height,
            depth: req.depth,
        };
        let frame_in = req.src == CopyPlace::Frame;
        let frame_out = req.dst == CopyPlace::Frame;
        if frame_in
            || frame_out
            || matches!(req.src, CopyPlace::Shared { .. })
            || matches!(req.dst, CopyPlace::Shared { .. })
        {
            // The host side is done with before the reply: not in a capture.
            self.refuse_if_capturing(s)?;
        }
        if frame_in && data.len() as u64 != bytes {
            return Err(refuse(self, "a copy whose bytes are not its extent's"));
        }
        if frame_out && bytes > MAX_DATA_LEN {
            return Err(refuse(self, "a copy too large for one reply"));
        }
        let mut reply = if frame_out {
            vec![0u8; bytes as usize]
        } else {
            Vec::new()
        };
        let src = self.place(req.src, extent, frame_in.then_some(data.as_ptr() as u64))?;
        let dst = self.place(
            req.dst,
            extent,
            frame_out.then_some(reply.as_mut_ptr() as u64),
        )?;
        self.exec
            .copy_3d(src, dst, extent, StreamOrder::of(s, req.is_async))?;
        Ok(((), reply))
    }

    fn tex_object_create(
        &mut self,
        ctx: &CallContext,
        req: TexObjectCreate,
        _: &[u8],
    ) -> HandlerResult<TexObject> {
        self.check_texture(&req.texture, req.view.as_ref())?;
        let resource = self.tex_resource(req.resource)?;
        self.count_objects()?;
        let tex = self
            .exec
            .tex_create(resource, &req.texture, req.view.as_ref())?;
        self.array_tables.textures.insert(tex, ctx.device);
        Ok((TexObject { tex }, Vec::new()))
    }

    fn tex_object_destroy(
        &mut self,
        _: &CallContext,
        req: TexObjectDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        if self.array_tables.textures.remove(&req.tex).is_none() {
            return Err(refuse(self, "an unknown texture object"));
        }
        self.exec.tex_destroy(req.tex)?;
        nothing()
    }

    fn surf_object_create(
        &mut self,
        ctx: &CallContext,
        req: SurfObjectCreate,
        _: &[u8],
    ) -> HandlerResult<SurfObject> {
        let array = self.array_entry(req.array)?.exec;
        self.count_objects()?;
        let surf = self.exec.surf_create(array)?;
        self.array_tables.surfaces.insert(surf, ctx.device);
        Ok((SurfObject { surf }, Vec::new()))
    }

    fn surf_object_destroy(
        &mut self,
        _: &CallContext,
        req: SurfObjectDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        if self.array_tables.surfaces.remove(&req.surf).is_none() {
            return Err(refuse(self, "an unknown surface object"));
        }
        self.exec.surf_destroy(req.surf)?;
        nothing()
    }

    fn module_get_tex_ref(
        &mut self,
        _: &CallContext,
        req: ModuleGetTexRef,
        _: &[u8],
    ) -> HandlerResult<TexRefMade> {
        let m = self.handles.module(req.module)?;
        let (exec, state) = self.exec.module_tex_ref(m, &req.name)?;
        let texref = self.name_reference(exec, false, false)?;
        Ok((TexRefMade { texref, state }, Vec::new()))
    }

    fn tex_ref_create(
        &mut self,
        _: &CallContext,
        _: TexRefCreate,
        _: &[u8],
    ) -> HandlerResult<TexRefMade> {
        self.count_objects()?;
        let (exec, state) = self.exec.tex_ref_create()?;
        let texref = match self.name_reference(exec, false, true) {
            Ok(id) => id,
            Err(e) => {
                let _ = self.exec.tex_ref_destroy(exec);
                return Err(e);
            }
        };
        Ok((TexRefMade { texref, state }, Vec::new()))
    }

    fn tex_ref_destroy(
        &mut self,
        _: &CallContext,
        req: TexRefDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let r = self.reference(req.texref, false)?;
        if !r.own {
            return Err(refuse(self, "destroying a module's texture reference"));
        }
        let exec = r.exec;
        self.array_tables.references.remove(&req.texref);
        self.array_tables.reference_ids.remove(&exec);
        self.exec.tex_ref_destroy(exec)?;
        nothing()
    }

    fn tex_ref_set(
        &mut self,
        _: &CallContext,
        req: TexRefSet,
        _: &[u8],
    ) -> HandlerResult<TexRefSetReply> {
        let exec = self.reference(req.texref, false)?.exec;
        let setting = self.checked_setting(req.setting)?;
        let offset = self.exec.tex_ref_set(exec, setting)?;
        Ok((TexRefSetReply { offset }, Vec::new()))
    }

    fn module_get_surf_ref(
        &mut self,
        _: &CallContext,
        req: ModuleGetSurfRef,
        _: &[u8],
    ) -> HandlerResult<SurfRefMade> {
        let m = self.handles.module(req.module)?;
        let exec = self.exec.module_surf_ref(m, &req.name)?;
        let surfref = self.name_reference(exec, true, false)?;
        Ok((SurfRefMade { surfref }, Vec::new()))
    }

    fn surf_ref_set_array(
        &mut self,
        _: &CallContext,
        req: SurfRefSetArray,
        _: &[u8],
    ) -> HandlerResult<()> {
        let exec = self.reference(req.surfref, true)?.exec;
        let array = self.array_entry(req.array)?.exec;
        if req.flags != 0 {
            return Err(refuse(self, "cuSurfRefSetArray's flags"));
        }
        self.exec.surf_ref_set_array(exec, array, req.flags)?;
        nothing()
    }

    fn param_set_tex_ref(
        &mut self,
        _: &CallContext,
        req: ParamSetTexRef,
        _: &[u8],
    ) -> HandlerResult<()> {
        let function = self.handles.function(req.function)?;
        let exec = self.reference(req.texref, false)?.exec;
        if req.texunit != PARAM_TR_DEFAULT {
            return Err(refuse(self, "cuParamSetTexRef's unit"));
        }
        self.exec.param_set_tex_ref(function, req.texunit, exec)?;
        nothing()
    }
}

#[cfg(test)]
mod tests;
