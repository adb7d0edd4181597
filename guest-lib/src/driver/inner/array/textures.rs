//! Texture and surface objects over arrays, mipmapped arrays and linear memory.

use super::*;

// ---- texture and surface objects ------------------------------------------------------

const _: () = {
    assert!(std::mem::size_of::<ResourceDescC>() == 144);
    assert!(std::mem::size_of::<TextureDescC>() == 72);
    assert!(std::mem::size_of::<ViewDescC>() == 112);
};

/// `cudaResourceType` (the driver's `CUresourcetype` alike).
const RESOURCE_ARRAY: u32 = 0;
const RESOURCE_MIPMAPPED: u32 = 1;
const RESOURCE_LINEAR: u32 = 2;
const RESOURCE_PITCH2D: u32 = 3;

impl ResourceDescC {
    /// The resource, from the driver's description (format and channels in one word).
    pub fn driver_resource(&self) -> Result<TexResource> {
        let u = &self.union;
        let (format, channels) = (u[1] as u32, (u[1] >> 32) as u32);
        Ok(match self.res_type {
            RESOURCE_ARRAY => TexResource::Array(ArrayHandle(u[0])),
            RESOURCE_MIPMAPPED => TexResource::Mipmapped(MipmappedHandle(u[0])),
            RESOURCE_LINEAR => TexResource::Linear {
                ptr: u[0],
                format,
                channels,
                bytes: u[2],
            },
            RESOURCE_PITCH2D => TexResource::Pitch2D {
                ptr: u[0],
                format,
                channels,
                width: u[2],
                height: u[3],
                pitch: u[4],
            },
            _ => return Err(CudaStatus::ErrorInvalidValue),
        })
    }
}

impl ViewDescC {
    pub fn wire(&self) -> ViewDesc {
        ViewDesc {
            format: self.format,
            width: self.width as u64,
            height: self.height as u64,
            depth: self.depth as u64,
            first_mipmap_level: self.first_mipmap_level,
            last_mipmap_level: self.last_mipmap_level,
            first_layer: self.first_layer,
            last_layer: self.last_layer,
        }
    }
}

/// Make a texture object.
pub(crate) fn create_texture(
    resource: TexResource,
    texture: TextureDesc,
    view: Option<ViewDesc>,
) -> Result<u64> {
    let made = call(&TexObjectCreate {
        resource,
        texture,
        view,
    })?;
    Ok(made.tex)
}

pub(crate) fn destroy_texture(tex: u64) -> Result<()> {
    if tex == 0 {
        return Ok(());
    }
    call(&TexObjectDestroy { tex })?;
    arrays(|a| a.textures.remove(&tex));
    Ok(())
}

/// Make a surface object over an array.
pub(crate) fn create_surface(array: u64) -> Result<u64> {
    Ok(call(&SurfObjectCreate {
        array: ArrayHandle(array),
    })?
    .surf)
}

pub(crate) fn destroy_surface(surf: u64) -> Result<()> {
    if surf == 0 {
        return Ok(());
    }
    call(&SurfObjectDestroy { surf })?;
    arrays(|a| a.surfaces.remove(&surf));
    Ok(())
}
