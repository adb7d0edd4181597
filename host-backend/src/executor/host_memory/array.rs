//! CUDA arrays, 3D copies, texture and surface objects on the host-memory test double.
//!
//! An array is its bytes, slice after slice of packed rows; a mipmapped array is its
//! levels, each an array of half the extent of the one before. Textures and surfaces
//! are ids that name their resource; kernels never run here, so nothing reads them.

use std::collections::{HashMap, HashSet};

use vmcuda_wire::array::{ArrayDesc, TexRefState, TextureDesc, ViewDesc};
use vmcuda_wire::cubin::Cubin;
use vmcuda_wire::CudaStatus;

use super::super::array::{
    ArrayExec, ExecArray, ExecMipmap, ExecTexRef, ExecTexRefSetting, ExecTexResource, Extent3,
    Place,
};
use super::super::{ExecFunction, ExecModule, ExecResult, StreamOrder};
use super::HostMemoryExecutor;

#[derive(Default)]
pub(super) struct HostArrays {
    arrays: HashMap<ExecArray, (ArrayDesc, Vec<u8>)>,
    /// Levels, by mipmapped array (destroyed with it).
    mipmaps: HashMap<ExecMipmap, Vec<ExecArray>>,
    textures: HashSet<u64>,
    surfaces: HashSet<u64>,
    /// Texture and surface references: whether each is a surface's, and whether it
    /// is one of `tex_ref_create`'s (a module's otherwise). Their settings are the
    /// guest's to keep; kernels never read them here.
    references: HashMap<u64, (bool, bool)>,
}

/// Where the row `y` of slice `z` of a place starts (a byte address, or an offset in
/// an array's bytes), `x` bytes in.
fn row_start(place: &Place, desc: Option<&ArrayDesc>, y: u64, z: u64) -> Option<u64> {
    match *place {
        Place::Device { ptr, pitch, slice } => ptr.checked_add(z * slice + y * pitch),
        Place::Host { addr, pitch, slice } => addr.checked_add(z * slice + y * pitch),
        Place::Array {
            x, y: y0, z: z0, ..
        } => {
            let (row, rows, _) = desc?.extent_bytes()?;
            ((z0 + z) * rows + y0 + y).checked_mul(row)?.checked_add(x)
        }
    }
}

impl HostMemoryExecutor {
    fn desc_of(&self, place: &Place) -> ExecResult<Option<ArrayDesc>> {
        match place {
            Place::Array { array, .. } => self
                .arrays
                .arrays
                .get(array)
                .map(|(d, _)| Some(*d))
                .ok_or(CudaStatus::ErrorInvalidValue),
            _ => Ok(None),
        }
    }

    fn read_row(&self, place: &Place, at: u64, len: u64) -> ExecResult<Vec<u8>> {
        Ok(match place {
            Place::Device { .. } => self.slice(at, len)?.to_vec(),
            Place::Host { .. } => {
                // SAFETY: the session checked the copy lies in memory of this process
                // (a shared mapping or the frame's bytes) that outlives the call.
                unsafe { std::slice::from_raw_parts(at as usize as *const u8, len as usize) }
                    .to_vec()
            }
            Place::Array { array, .. } => {
                let bytes = &self.arrays.arrays[array].1;
                bytes
                    .get(at as usize..(at + len) as usize)
                    .ok_or(CudaStatus::ErrorInvalidValue)?
                    .to_vec()
            }
        })
    }

    fn write_row(&mut self, place: &Place, at: u64, row: &[u8]) -> ExecResult<()> {
        match place {
            Place::Device { .. } => self.slice_mut(at, row.len() as u64)?.copy_from_slice(row),
            Place::Host { .. } => {
                // SAFETY: as in read_row, and the memory is writable.
                unsafe {
                    std::ptr::copy_nonoverlapping(row.as_ptr(), at as usize as *mut u8, row.len())
                }
            }
            Place::Array { array, .. } => {
                let bytes = &mut self.arrays.arrays.get_mut(array).expect("checked").1;
                bytes
                    .get_mut(at as usize..at as usize + row.len())
                    .ok_or(CudaStatus::ErrorInvalidValue)?
                    .copy_from_slice(row);
            }
        }
        Ok(())
    }

    fn new_array(&mut self, desc: &ArrayDesc) -> ExecResult<ExecArray> {
        let bytes = desc.bytes().ok_or(CudaStatus::ErrorInvalidValue)?;
        let id = self.fresh_id();
        self.arrays
            .arrays
            .insert(id, (*desc, vec![0; bytes as usize]));
        Ok(id)
    }
}

impl ArrayExec for HostMemoryExecutor {
    fn array_create(&mut self, desc: &ArrayDesc) -> ExecResult<ExecArray> {
        self.new_array(desc)
    }

    fn array_destroy(&mut self, array: ExecArray) -> ExecResult<()> {
        let owned = self.arrays.mipmaps.values().any(|l| l.contains(&array));
        if owned || self.arrays.arrays.remove(&array).is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    fn mipmapped_create(&mut self, desc: &ArrayDesc, levels: u32) -> ExecResult<ExecMipmap> {
        let mut level = *desc;
        let mut made = Vec::new();
        for _ in 0..levels.max(1) {
            made.push(self.new_array(&level)?);
            level.width = (level.width / 2).max(1);
            level.height = if level.height == 0 {
                0
            } else {
                (level.height / 2).max(1)
            };
            level.depth = if level.depth == 0 {
                0
            } else {
                (level.depth / 2).max(1)
            };
        }
        let id = self.fresh_id();
        self.arrays.mipmaps.insert(id, made);
        Ok(id)
    }

    fn mipmapped_level(
        &mut self,
        mipmap: ExecMipmap,
        level: u32,
    ) -> ExecResult<(ExecArray, ArrayDesc)> {
        let levels = self
            .arrays
            .mipmaps
            .get(&mipmap)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let array = *levels
            .get(level as usize)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        Ok((array, self.arrays.arrays[&array].0))
    }

    fn mipmapped_destroy(&mut self, mipmap: ExecMipmap) -> ExecResult<()> {
        let levels = self
            .arrays
            .mipmaps
            .remove(&mipmap)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        for l in levels {
            self.arrays.arrays.remove(&l);
        }
        Ok(())
    }

    fn copy_3d(
        &mut self,
        src: Place,
        dst: Place,
        extent: Extent3,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        let (sd, dd) = (self.desc_of(&src)?, self.desc_of(&dst)?);
        for z in 0..extent.depth {
            for y in 0..extent.height {
                let from =
                    row_start(&src, sd.as_ref(), y, z).ok_or(CudaStatus::ErrorInvalidValue)?;
                let to = row_start(&dst, dd.as_ref(), y, z).ok_or(CudaStatus::ErrorInvalidValue)?;
                let row = self.read_row(&src, from, extent.width)?;
                self.write_row(&dst, to, &row)?;
            }
        }
        Ok(())
    }

    fn tex_create(
        &mut self,
        resource: ExecTexResource,
        _texture: &TextureDesc,
        _view: Option<&ViewDesc>,
    ) -> ExecResult<u64> {
        let known = match resource {
            ExecTexResource::Array(a) => self.arrays.arrays.contains_key(&a),
            ExecTexResource::Mipmapped(m) => self.arrays.mipmaps.contains_key(&m),
            ExecTexResource::Linear { ptr, bytes, .. } => self.slice(ptr, bytes).is_ok(),
            ExecTexResource::Pitch2D {
                ptr, height, pitch, ..
            } => self.slice(ptr, pitch.saturating_mul(height)).is_ok(),
        };
        if !known {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        self.arrays.textures.insert(id);
        Ok(id)
    }

    fn tex_destroy(&mut self, tex: u64) -> ExecResult<()> {
        match self.arrays.textures.remove(&tex) {
            true => Ok(()),
            false => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn surf_create(&mut self, array: ExecArray) -> ExecResult<u64> {
        if !self.arrays.arrays.contains_key(&array) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        self.arrays.surfaces.insert(id);
        Ok(id)
    }

    fn surf_destroy(&mut self, surf: u64) -> ExecResult<()> {
        match self.arrays.surfaces.remove(&surf) {
            true => Ok(()),
            false => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn module_tex_ref(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecTexRef, TexRefState)> {
        let id = self.module_reference(module, name, false)?;
        Ok((id, TexRefState::default()))
    }

    fn module_surf_ref(&mut self, module: ExecModule, name: &str) -> ExecResult<ExecTexRef> {
        self.module_reference(module, name, true)
    }

    fn tex_ref_create(&mut self) -> ExecResult<(ExecTexRef, TexRefState)> {
        let id = self.fresh_id();
        self.arrays.references.insert(id, (false, true));
        Ok((id, TexRefState::default()))
    }

    fn tex_ref_destroy(&mut self, texref: ExecTexRef) -> ExecResult<()> {
        match self.arrays.references.get(&texref) {
            Some((false, true)) => {
                self.arrays.references.remove(&texref);
                Ok(())
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn tex_ref_set(&mut self, texref: ExecTexRef, setting: ExecTexRefSetting) -> ExecResult<u64> {
        if !matches!(self.arrays.references.get(&texref), Some((false, _))) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if let ExecTexRefSetting::Bind { resource, .. } = setting {
            let known = match resource {
                ExecTexResource::Array(a) => self.arrays.arrays.contains_key(&a),
                ExecTexResource::Mipmapped(m) => self.arrays.mipmaps.contains_key(&m),
                // The session checked the memory is the guest's.
                ExecTexResource::Linear { .. } | ExecTexResource::Pitch2D { .. } => true,
            };
            if !known {
                return Err(CudaStatus::ErrorInvalidValue);
            }
        }
        Ok(0)
    }

    fn surf_ref_set_array(
        &mut self,
        surfref: ExecTexRef,
        array: ExecArray,
        _flags: u32,
    ) -> ExecResult<()> {
        let surface = matches!(self.arrays.references.get(&surfref), Some((true, _)));
        if !surface || !self.arrays.arrays.contains_key(&array) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    fn param_set_tex_ref(
        &mut self,
        function: ExecFunction,
        _texunit: i32,
        texref: ExecTexRef,
    ) -> ExecResult<()> {
        if !self.functions.contains_key(&function) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        if !matches!(self.arrays.references.get(&texref), Some((false, _))) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }
}

impl HostMemoryExecutor {
    /// A module's reference named `name`, as its cubin declares it; the same id again
    /// for the same reference.
    fn module_reference(
        &mut self,
        module: ExecModule,
        name: &str,
        surface: bool,
    ) -> ExecResult<u64> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let declared = Cubin::parse(m.cubin()).is_ok_and(|c| c.has_reference(name, surface));
        if !declared {
            return Err(CudaStatus::ErrorSymbolNotFound);
        }
        let key = (module, name.to_string(), surface);
        if let Some(&id) = self.reference_ids.get(&key) {
            return Ok(id);
        }
        let id = self.fresh_id();
        self.reference_ids.insert(key, id);
        self.arrays.references.insert(id, (surface, false));
        Ok(id)
    }
}
