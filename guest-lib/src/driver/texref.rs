//! Texture and surface references (the driver's deprecated `cuTexRef*`, `cuSurfRef*`
//! and `cuParamSetTexRef`), which programs built for old PTX (`.texref`, `.surfref`)
//! still call.
//!
//! A reference is named by the host's session; the program's `CUtexref` /
//! `CUsurfref` is that name. Every `Set` call crosses (the host's driver checks and
//! makes it, so kernels that read the reference see it); the `Get` calls are answered
//! here from what the guest keeps: the settings the host answered when the reference
//! was found or made, and every setting made since.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::array::{
    ArrayHandle, MipmappedHandle, TexRefBinding, TexRefId, TexRefSetting, TexRefState,
};
use vmcuda_wire::op::{
    ModuleGetSurfRef, ModuleGetTexRef, ParamSetTexRef, SurfRefSetArray, TexRefCreate,
    TexRefDestroy, TexRefSet,
};
use vmcuda_wire::CudaStatus;

use super::module::{function, module_handle};
use super::{check_initialized, export, Result};
use crate::abi::driver::ArrayDescriptor;
use crate::caller;
use crate::driver::inner::{call, RawHandle};

#[derive(Default)]
struct References {
    textures: HashMap<TexRefId, TexRefState>,
    /// Surface references and the array each is bound to, if any.
    surfaces: HashMap<TexRefId, Option<ArrayHandle>>,
}

static REFERENCES: Mutex<Option<References>> = Mutex::new(None);

struct Guard(MutexGuard<'static, Option<References>>);

impl std::ops::Deref for Guard {
    type Target = References;
    fn deref(&self) -> &References {
        self.0.as_ref().expect("initialised by references()")
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut References {
        self.0.as_mut().expect("initialised by references()")
    }
}

fn references() -> Guard {
    let mut g = REFERENCES.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(References::default);
    Guard(g)
}

/// A texture reference's state as kept (`CUDA_ERROR_INVALID_VALUE` for one this
/// process was not given).
fn state(texref: RawHandle) -> Result<TexRefState> {
    references()
        .textures
        .get(&(texref as u64))
        .copied()
        .ok_or(CudaStatus::ErrorInvalidValue)
}

/// A known texture reference's name.
fn texture(texref: RawHandle) -> Result<TexRefId> {
    state(texref).map(|_| texref as u64)
}

/// One setting made by the host, then kept; its answer (`cuTexRefSetAddress`'s
/// offset).
fn set(texref: RawHandle, setting: TexRefSetting) -> Result<u64> {
    check_initialized()?;
    let id = texture(texref)?;
    let reply = call(&TexRefSet {
        texref: id,
        setting,
    })?;
    if let Some(s) = references().textures.get_mut(&id) {
        s.apply(&setting);
    }
    Ok(reply.offset)
}

/// A module's reference by name, as the host finds it.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn module_name(
    module: *mut c_void,
    name: *const c_char,
) -> Result<(vmcuda_wire::op::ModuleHandle, String)> {
    check_initialized()?;
    // SAFETY: as the caller promised.
    let name = unsafe { caller::string(name) }?;
    Ok((module_handle(module)?, name))
}

export! {
    fn cuModuleGetTexRef(out: *mut RawHandle, module: *mut c_void, name: *const c_char) {
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuModuleGetTexRef's contract `name` is a NUL-terminated string.
        let (module, name) = unsafe { module_name(module, name) }?;
        let made = call(&ModuleGetTexRef { module, name })?;
        references()
            .textures
            .entry(made.texref)
            .or_insert(made.state);
        // SAFETY: by its contract `out` is writable (checked not NULL above).
        unsafe { caller::write(out, made.texref as RawHandle) }
    }
}

export! {
    fn cuModuleGetSurfRef(out: *mut RawHandle, module: *mut c_void, name: *const c_char) {
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuModuleGetSurfRef's contract `name` is a NUL-terminated string.
        let (module, name) = unsafe { module_name(module, name) }?;
        let made = call(&ModuleGetSurfRef { module, name })?;
        references().surfaces.entry(made.surfref).or_insert(None);
        // SAFETY: by its contract `out` is writable (checked not NULL above).
        unsafe { caller::write(out, made.surfref as RawHandle) }
    }
}

export! {
    fn cuTexRefCreate(out: *mut RawHandle) {
        check_initialized()?;
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = call(&TexRefCreate {})?;
        references().textures.insert(made.texref, made.state);
        // SAFETY: by its contract `out` is writable (checked not NULL above).
        unsafe { caller::write(out, made.texref as RawHandle) }
    }
}

export! {
    fn cuTexRefDestroy(texref: RawHandle) {
        check_initialized()?;
        let id = texture(texref)?;
        call(&TexRefDestroy { texref: id })?;
        references().textures.remove(&id);
        Ok(())
    }
}

export! {
    /// Binds the array (`flags`: `CU_TRSA_OVERRIDE_FORMAT`).
    fn cuTexRefSetArray(texref: RawHandle, array: RawHandle, flags: u32) {
        let array = ArrayHandle(array as u64);
        set(texref, TexRefSetting::Array { array, flags }).map(drop)
    }
}

export! {
    fn cuTexRefSetMipmappedArray(texref: RawHandle, mipmap: RawHandle, flags: u32) {
        let mipmap = MipmappedHandle(mipmap as u64);
        set(texref, TexRefSetting::Mipmapped { mipmap, flags }).map(drop)
    }
}

export! {
    /// Binds `bytes` of linear memory at `ptr`; `offset` (if not NULL) gets the
    /// driver's byte offset (0 for an aligned address).
    fn cuTexRefSetAddress_v2(offset: *mut usize, texref: RawHandle, ptr: u64, bytes: usize) {
        let at = set(texref, TexRefSetting::Address { ptr, bytes: bytes as u64 })?;
        // SAFETY: by its contract `offset` is NULL or writable.
        unsafe { caller::write_opt(offset, at as usize) };
        Ok(())
    }
}

/// `cuTexRefSetAddress2D`: pitched memory of the descriptor's shape.
///
/// # Safety
/// `desc` is NULL or readable.
unsafe fn set_2d(
    texref: RawHandle,
    desc: *const ArrayDescriptor,
    ptr: u64,
    pitch: usize,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let d = unsafe { caller::read(desc) }?;
    let setting = TexRefSetting::Address2D {
        ptr,
        format: d.format,
        channels: d.channels,
        width: d.width as u64,
        height: d.height as u64,
        pitch: pitch as u64,
    };
    set(texref, setting).map(drop)
}

export! {
    fn cuTexRefSetAddress2D_v3(texref: RawHandle, desc: *const ArrayDescriptor, ptr: u64, pitch: usize) {
        // SAFETY: by its contract `desc` is readable.
        unsafe { set_2d(texref, desc, ptr, pitch) }
    }
}

export! {
    /// CUDA 4's name of the same call (the same arguments).
    fn cuTexRefSetAddress2D_v2(texref: RawHandle, desc: *const ArrayDescriptor, ptr: u64, pitch: usize) {
        // SAFETY: by its contract `desc` is readable.
        unsafe { set_2d(texref, desc, ptr, pitch) }
    }
}

export! {
    fn cuTexRefSetFormat(texref: RawHandle, format: u32, channels: i32) {
        set(texref, TexRefSetting::Format { format, channels }).map(drop)
    }
}

export! {
    fn cuTexRefSetAddressMode(texref: RawHandle, dim: i32, mode: u32) {
        set(texref, TexRefSetting::AddressMode { dim, mode }).map(drop)
    }
}

export! {
    fn cuTexRefSetFilterMode(texref: RawHandle, mode: u32) {
        set(texref, TexRefSetting::FilterMode(mode)).map(drop)
    }
}

export! {
    fn cuTexRefSetMipmapFilterMode(texref: RawHandle, mode: u32) {
        set(texref, TexRefSetting::MipmapFilterMode(mode)).map(drop)
    }
}

export! {
    fn cuTexRefSetMipmapLevelBias(texref: RawHandle, bias: f32) {
        set(texref, TexRefSetting::MipmapLevelBias(bias)).map(drop)
    }
}

export! {
    fn cuTexRefSetMipmapLevelClamp(texref: RawHandle, min: f32, max: f32) {
        set(texref, TexRefSetting::MipmapLevelClamp { min, max }).map(drop)
    }
}

export! {
    fn cuTexRefSetMaxAnisotropy(texref: RawHandle, max: u32) {
        set(texref, TexRefSetting::MaxAnisotropy(max)).map(drop)
    }
}

export! {
    fn cuTexRefSetBorderColor(texref: RawHandle, color: *const f32) {
        // SAFETY: by its contract `color` holds four floats.
        let color = unsafe { caller::read(color.cast::<[f32; 4]>()) }?;
        set(texref, TexRefSetting::BorderColor(color)).map(drop)
    }
}

export! {
    fn cuTexRefSetFlags(texref: RawHandle, flags: u32) {
        set(texref, TexRefSetting::Flags(flags)).map(drop)
    }
}

export! {
    /// The linear memory bound (`CUDA_ERROR_INVALID_VALUE` if none is).
    fn cuTexRefGetAddress_v2(out: *mut u64, texref: RawHandle) {
        check_initialized()?;
        let TexRefBinding::Linear(ptr) = state(texref)?.bound else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, ptr) }
    }
}

export! {
    /// The array bound (`CUDA_ERROR_INVALID_VALUE` if none is).
    fn cuTexRefGetArray(out: *mut RawHandle, texref: RawHandle) {
        check_initialized()?;
        let TexRefBinding::Array(a) = state(texref)?.bound else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, a.0 as RawHandle) }
    }
}

export! {
    fn cuTexRefGetMipmappedArray(out: *mut RawHandle, texref: RawHandle) {
        check_initialized()?;
        let TexRefBinding::Mipmapped(m) = state(texref)?.bound else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, m.0 as RawHandle) }
    }
}

export! {
    fn cuTexRefGetAddressMode(out: *mut u32, texref: RawHandle, dim: i32) {
        check_initialized()?;
        let modes = state(texref)?.texture.address_mode;
        let mode = usize::try_from(dim)
            .ok()
            .and_then(|d| modes.get(d).copied())
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, mode) }
    }
}

export! {
    fn cuTexRefGetFilterMode(out: *mut u32, texref: RawHandle) {
        check_initialized()?;
        let mode = state(texref)?.texture.filter_mode;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, mode) }
    }
}

export! {
    fn cuTexRefGetMipmapFilterMode(out: *mut u32, texref: RawHandle) {
        check_initialized()?;
        let mode = state(texref)?.texture.mipmap_filter_mode;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, mode) }
    }
}

export! {
    fn cuTexRefGetFormat(format: *mut u32, channels: *mut i32, texref: RawHandle) {
        check_initialized()?;
        let s = state(texref)?;
        if format.is_null() || channels.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract both are writable (checked not NULL above).
        unsafe {
            caller::write(format, s.format)?;
            caller::write(channels, s.channels)
        }
    }
}

export! {
    fn cuTexRefGetMipmapLevelBias(out: *mut f32, texref: RawHandle) {
        check_initialized()?;
        let bias = state(texref)?.texture.mipmap_level_bias;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, bias) }
    }
}

export! {
    fn cuTexRefGetMipmapLevelClamp(min: *mut f32, max: *mut f32, texref: RawHandle) {
        check_initialized()?;
        let t = state(texref)?.texture;
        if min.is_null() || max.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract both are writable (checked not NULL above).
        unsafe {
            caller::write(min, t.min_mipmap_level_clamp)?;
            caller::write(max, t.max_mipmap_level_clamp)
        }
    }
}

export! {
    fn cuTexRefGetMaxAnisotropy(out: *mut i32, texref: RawHandle) {
        check_initialized()?;
        let max = state(texref)?.texture.max_anisotropy;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, i32::try_from(max).unwrap_or(i32::MAX)) }
    }
}

export! {
    fn cuTexRefGetBorderColor(out: *mut f32, texref: RawHandle) {
        check_initialized()?;
        let color = state(texref)?.texture.border_color;
        // SAFETY: by its contract `out` has room for four floats.
        unsafe { caller::write(out.cast::<[f32; 4]>(), color) }
    }
}

export! {
    fn cuTexRefGetFlags(out: *mut u32, texref: RawHandle) {
        check_initialized()?;
        let flags = state(texref)?.texture.flags;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, flags) }
    }
}

export! {
    /// Binds the array (`flags` 0) to the surface reference.
    fn cuSurfRefSetArray(surfref: RawHandle, array: RawHandle, flags: u32) {
        check_initialized()?;
        let id = surfref as u64;
        if !references().surfaces.contains_key(&id) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let array = ArrayHandle(array as u64);
        call(&SurfRefSetArray { surfref: id, array, flags })?;
        references().surfaces.insert(id, Some(array));
        Ok(())
    }
}

export! {
    /// The array bound (`CUDA_ERROR_INVALID_VALUE` if none is).
    fn cuSurfRefGetArray(out: *mut RawHandle, surfref: RawHandle) {
        check_initialized()?;
        let bound = references().surfaces.get(&(surfref as u64)).copied().flatten();
        let array = bound.ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `out` is NULL or writable.
        unsafe { caller::write(out, array.0 as RawHandle) }
    }
}

export! {
    /// `texunit` must be `CU_PARAM_TR_DEFAULT` (-1), as the driver requires.
    fn cuParamSetTexRef(f: *mut c_void, texunit: i32, texref: RawHandle) {
        check_initialized()?;
        let (function, _) = function(f)?;
        let texref = texture(texref)?;
        call(&ParamSetTexRef { function, texunit, texref })
    }
}
