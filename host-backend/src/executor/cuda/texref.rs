//! Texture and surface references on real GPUs (the driver's deprecated
//! `cuTexRef*` / `cuSurfRef*` API), which kernels of old PTX still read.
//!
//! A reference is the driver's pointer value; the executor hands out only those it
//! found in its modules or made, kept in a table, so nothing the guest names reaches
//! the driver unless this executor had it from the driver. The calls whose C
//! signatures hold enums (formats, address and filter modes) are looked up by name
//! with plain integers in their place, as the session checked them.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::ptr;

use cudarc::driver::sys;
use vmcuda_wire::array::{TexRefSetting, TexRefState, TextureDesc};
use vmcuda_wire::CudaStatus;

use super::super::array::{ExecTexRef, ExecTexRefSetting, ExecTexResource};
use super::super::{ExecFunction, ExecModule, ExecResult};
use super::abi::ArrayDescC;
use super::{check, to_usize, CudaExecutor};

type CuResult = c_uint;
type TexRef = sys::CUtexref;
type SetFormat = unsafe extern "C" fn(TexRef, c_uint, c_int) -> CuResult;
type SetAddressMode = unsafe extern "C" fn(TexRef, c_int, c_uint) -> CuResult;
type SetMode = unsafe extern "C" fn(TexRef, c_uint) -> CuResult;
type SetAddress2D = unsafe extern "C" fn(TexRef, *const ArrayDescC, u64, usize) -> CuResult;
type GetAddressMode = unsafe extern "C" fn(*mut c_uint, TexRef, c_int) -> CuResult;
type GetMode = unsafe extern "C" fn(*mut c_uint, TexRef) -> CuResult;
type GetFormat = unsafe extern "C" fn(*mut c_uint, *mut c_int, TexRef) -> CuResult;

/// What a reference in the table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RefKind {
    /// A module's texture reference (the module's to free).
    ModuleTexture,
    /// One of `cuTexRefCreate`'s, destroyed by `tex_ref_destroy`.
    OwnTexture,
    Surface,
}

fn status(r: CuResult) -> ExecResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(CudaStatus::from_driver(r))
    }
}

/// # Safety
/// `F` is the C signature of the driver's `name`.
unsafe fn entry<F: Copy>(name: &str) -> ExecResult<F> {
    // SAFETY: the executor exists, so cudarc found and loaded libcuda; the caller
    // vouches for the signature.
    unsafe { super::entry_point(sys::culib(), "libcuda", name) }
}

impl CudaExecutor {
    /// A reference of the table, of one of `kinds`.
    fn reference(&self, r: ExecTexRef, kinds: &[RefKind]) -> ExecResult<TexRef> {
        match self.array_tables.texrefs.get(&r) {
            Some((_, kind)) if kinds.contains(kind) => Ok(r as usize as TexRef),
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn texture(&self, r: ExecTexRef) -> ExecResult<TexRef> {
        self.reference(r, &[RefKind::ModuleTexture, RefKind::OwnTexture])
    }

    /// A texture reference's settings as the driver has them (any the driver does
    /// not answer stays at its default).
    fn tex_ref_state(&self, t: TexRef) -> TexRefState {
        let mut s = TexRefState::default();
        let d: &mut TextureDesc = &mut s.texture;
        // SAFETY: (each call) `t` is a live reference from the driver; the out-pointers
        // are locals of the C types (enums as their integers); the signatures are the
        // driver's.
        unsafe {
            if let Ok(f) = entry::<GetAddressMode>("cuTexRefGetAddressMode") {
                for (dim, mode) in d.address_mode.iter_mut().enumerate() {
                    f(mode, t, dim as c_int);
                }
            }
            if let Ok(f) = entry::<GetMode>("cuTexRefGetFilterMode") {
                f(&mut d.filter_mode, t);
            }
            if let Ok(f) = entry::<GetMode>("cuTexRefGetMipmapFilterMode") {
                f(&mut d.mipmap_filter_mode, t);
            }
            if let Ok(f) = entry::<GetFormat>("cuTexRefGetFormat") {
                f(&mut s.format, &mut s.channels, t);
            }
            sys::cuTexRefGetFlags(&mut d.flags, t);
            let mut aniso: c_int = 0;
            sys::cuTexRefGetMaxAnisotropy(&mut aniso, t);
            d.max_anisotropy = aniso.max(0) as u32;
            sys::cuTexRefGetMipmapLevelBias(&mut d.mipmap_level_bias, t);
            sys::cuTexRefGetMipmapLevelClamp(
                &mut d.min_mipmap_level_clamp,
                &mut d.max_mipmap_level_clamp,
                t,
            );
            sys::cuTexRefGetBorderColor(d.border_color.as_mut_ptr(), t);
        }
        s
    }

    /// The `CUmodule`s of a module in the current context, one per library.
    fn cu_modules(&self, module: ExecModule) -> ExecResult<Vec<sys::CUmodule>> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        m.libraries()
            .iter()
            .map(|&library| {
                let mut cu: sys::CUmodule = ptr::null_mut();
                // SAFETY: `library` is loaded; out-pointer to a local.
                check(unsafe { sys::cuLibraryGetModule(&mut cu, library) })?;
                Ok(cu)
            })
            .collect()
    }

    /// A reference named `name` in one of the module's libraries.
    fn find_reference(
        &mut self,
        module: ExecModule,
        name: &str,
        surface: bool,
    ) -> ExecResult<(usize, u64)> {
        let idx = self.bind()?;
        let cname = CString::new(name).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        for cu in self.cu_modules(module)? {
            let mut found: *mut c_void = ptr::null_mut();
            // SAFETY: `cu` is a loaded module; out-pointers to a local of the
            // reference's pointer type; `cname` outlives the call.
            let r = unsafe {
                if surface {
                    sys::cuModuleGetSurfRef(
                        (&mut found as *mut *mut c_void).cast(),
                        cu,
                        cname.as_ptr(),
                    )
                } else {
                    sys::cuModuleGetTexRef(
                        (&mut found as *mut *mut c_void).cast(),
                        cu,
                        cname.as_ptr(),
                    )
                }
            };
            if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                continue;
            }
            check(r)?;
            return Ok((idx, found as usize as u64));
        }
        Err(CudaStatus::ErrorSymbolNotFound)
    }

    pub(super) fn texref_from_module(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecTexRef, TexRefState)> {
        let (idx, id) = self.find_reference(module, name, false)?;
        self.array_tables
            .texrefs
            .insert(id, (idx, RefKind::ModuleTexture));
        Ok((id, self.tex_ref_state(id as usize as TexRef)))
    }

    pub(super) fn surfref_from_module(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<ExecTexRef> {
        let (idx, id) = self.find_reference(module, name, true)?;
        self.array_tables
            .texrefs
            .insert(id, (idx, RefKind::Surface));
        Ok(id)
    }

    pub(super) fn texref_create(&mut self) -> ExecResult<(ExecTexRef, TexRefState)> {
        let idx = self.bind()?;
        let mut t: TexRef = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuTexRefCreate(&mut t) })?;
        let id = t as usize as u64;
        self.array_tables
            .texrefs
            .insert(id, (idx, RefKind::OwnTexture));
        Ok((id, self.tex_ref_state(t)))
    }

    pub(super) fn texref_destroy(&mut self, texref: ExecTexRef) -> ExecResult<()> {
        self.bind()?;
        let t = self.reference(texref, &[RefKind::OwnTexture])?;
        self.array_tables.texrefs.remove(&texref);
        // SAFETY: made by cuTexRefCreate, destroyed once (it has left the table).
        check(unsafe { sys::cuTexRefDestroy(t) })
    }

    pub(super) fn texref_set(
        &mut self,
        texref: ExecTexRef,
        setting: ExecTexRefSetting,
    ) -> ExecResult<u64> {
        self.bind()?;
        let t = self.texture(texref)?;
        let mut offset: usize = 0;
        // SAFETY: (every arm) `t` is a live reference of the table; arrays are this
        // executor's (array_of, the mipmap table); memory ranges were checked by the
        // session; the enum arguments are plain integers the session checked, through
        // signatures that are the driver's with integers for enums.
        let r = unsafe {
            match setting {
                ExecTexRefSetting::Bind { resource, flags } => match resource {
                    ExecTexResource::Array(a) => {
                        sys::cuTexRefSetArray(t, self.array_of(a)?, flags) as CuResult
                    }
                    ExecTexResource::Mipmapped(m) => {
                        if !self.array_tables.mipmaps.contains_key(&m) {
                            return Err(CudaStatus::ErrorInvalidValue);
                        }
                        sys::cuTexRefSetMipmappedArray(
                            t,
                            m as usize as sys::CUmipmappedArray,
                            flags,
                        ) as CuResult
                    }
                    ExecTexResource::Linear { ptr, bytes, .. } => {
                        sys::cuTexRefSetAddress_v2(&mut offset, t, ptr, to_usize(bytes)?)
                            as CuResult
                    }
                    ExecTexResource::Pitch2D {
                        ptr,
                        format,
                        channels,
                        width,
                        height,
                        pitch,
                    } => {
                        let desc = ArrayDescC {
                            width: to_usize(width)?,
                            height: to_usize(height)?,
                            format,
                            channels,
                        };
                        entry::<SetAddress2D>("cuTexRefSetAddress2D_v3")?(
                            t,
                            &desc,
                            ptr,
                            to_usize(pitch)?,
                        )
                    }
                },
                ExecTexRefSetting::Other(s) => match s {
                    TexRefSetting::Format { format, channels } => {
                        entry::<SetFormat>("cuTexRefSetFormat")?(t, format, channels)
                    }
                    TexRefSetting::AddressMode { dim, mode } => {
                        entry::<SetAddressMode>("cuTexRefSetAddressMode")?(t, dim, mode)
                    }
                    TexRefSetting::FilterMode(m) => {
                        entry::<SetMode>("cuTexRefSetFilterMode")?(t, m)
                    }
                    TexRefSetting::MipmapFilterMode(m) => {
                        entry::<SetMode>("cuTexRefSetMipmapFilterMode")?(t, m)
                    }
                    TexRefSetting::MipmapLevelBias(b) => {
                        sys::cuTexRefSetMipmapLevelBias(t, b) as CuResult
                    }
                    TexRefSetting::MipmapLevelClamp { min, max } => {
                        sys::cuTexRefSetMipmapLevelClamp(t, min, max) as CuResult
                    }
                    TexRefSetting::MaxAnisotropy(a) => {
                        sys::cuTexRefSetMaxAnisotropy(t, a) as CuResult
                    }
                    TexRefSetting::BorderColor(mut c) => {
                        sys::cuTexRefSetBorderColor(t, c.as_mut_ptr()) as CuResult
                    }
                    TexRefSetting::Flags(f) => sys::cuTexRefSetFlags(t, f) as CuResult,
                    TexRefSetting::Nothing => 0,
                    // The binding settings come as Bind, with their memory checked.
                    _ => return Err(CudaStatus::ErrorInvalidValue),
                },
            }
        };
        status(r)?;
        Ok(offset as u64)
    }

    pub(super) fn surfref_set_array(
        &mut self,
        surfref: ExecTexRef,
        array: super::super::array::ExecArray,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.reference(surfref, &[RefKind::Surface])? as sys::CUsurfref;
        let a = self.array_of(array)?;
        // SAFETY: a live surface reference of the table and an array of this executor.
        check(unsafe { sys::cuSurfRefSetArray(s, a, flags) })
    }

    pub(super) fn param_tex_ref(
        &mut self,
        function: ExecFunction,
        texunit: i32,
        texref: ExecTexRef,
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let t = self.texture(texref)?;
        let f = self.function_in_context(function, idx)?;
        // SAFETY: a function of a loaded module in the current context and a live
        // texture reference of the table.
        check(unsafe { sys::cuParamSetTexRef(f, texunit, t) })
    }

    /// Forgets the modules' references (their modules are unloaded).
    pub(super) fn forget_module_refs(&mut self) {
        self.array_tables
            .texrefs
            .retain(|_, (_, kind)| *kind == RefKind::OwnTexture);
    }

    /// Destroys the references `cuTexRefCreate` made and forgets the rest (the
    /// session ends, or its modules are unloaded).
    pub(super) fn drop_texrefs(&mut self) {
        for (id, (_, kind)) in std::mem::take(&mut self.array_tables.texrefs) {
            if kind == RefKind::OwnTexture {
                // SAFETY: made by cuTexRefCreate and destroyed once (the table is gone).
                let _ = unsafe { sys::cuTexRefDestroy(id as usize as TexRef) };
            }
        }
    }
}
