//! CUDA arrays, 3D copies, texture and surface objects on the wire.
//!
//! Arrays and mipmapped arrays are host objects named by the host's session. A 3D copy
//! names each side as a place ([`CopyPlace`]): device memory, an array, the guest's
//! shared pinned memory, or the frame itself (the request's data to the device, the
//! reply's from it, rows packed). Texture and surface objects are the driver's own
//! 64-bit values, because kernels take them by value; the session only ever destroys
//! the ones it made, and a kernel of this guest can only reach objects of its own
//! context (its own worker process).

use serde::{Deserialize, Serialize};

use crate::handle::{DevicePtr, StreamHandle};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        pub struct $name(pub u64);
    };
}

handle!(
    /// A `cudaArray_t` / `CUarray`, named by the host.
    ArrayHandle
);
handle!(
    /// A `cudaMipmappedArray_t` / `CUmipmappedArray`, named by the host.
    MipmappedHandle
);

/// `CUarray_format` values and their element sizes.
pub mod format {
    pub const UNSIGNED_INT8: u32 = 0x01;
    pub const UNSIGNED_INT16: u32 = 0x02;
    pub const UNSIGNED_INT32: u32 = 0x03;
    pub const SIGNED_INT8: u32 = 0x08;
    pub const SIGNED_INT16: u32 = 0x09;
    pub const SIGNED_INT32: u32 = 0x0a;
    pub const HALF: u32 = 0x10;
    pub const FLOAT: u32 = 0x20;

    /// Bytes of one channel of `format`, for the formats forwarded.
    pub fn channel_bytes(format: u32) -> Option<u64> {
        Some(match format {
            UNSIGNED_INT8 | SIGNED_INT8 => 1,
            UNSIGNED_INT16 | SIGNED_INT16 | HALF => 2,
            UNSIGNED_INT32 | SIGNED_INT32 | FLOAT => 4,
            _ => return None,
        })
    }
}

/// `cudaArray*` / `CUDA_ARRAY3D_*` flags (numbered alike).
pub mod array_flags {
    pub const LAYERED: u32 = 0x01;
    pub const SURFACE_LOAD_STORE: u32 = 0x02;
    pub const CUBEMAP: u32 = 0x04;
    pub const TEXTURE_GATHER: u32 = 0x08;
    /// The flags forwarded.
    pub const KNOWN: u32 = LAYERED | SURFACE_LOAD_STORE | CUBEMAP | TEXTURE_GATHER;
}

/// `CUDA_ARRAY3D_DESCRIPTOR`: width in elements, height and depth (0 for fewer
/// dimensions; layers or cube faces for layered and cubemap arrays).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ArrayDesc {
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub format: u32,
    pub channels: u32,
    pub flags: u32,
}

impl ArrayDesc {
    /// Bytes of one element.
    pub fn element_bytes(&self) -> Option<u64> {
        if !matches!(self.channels, 1 | 2 | 4) {
            return None;
        }
        format::channel_bytes(self.format).map(|b| b * self.channels as u64)
    }

    /// Bytes of one row, rows of one slice, and slices (layers, faces).
    pub fn extent_bytes(&self) -> Option<(u64, u64, u64)> {
        let row = self.width.checked_mul(self.element_bytes()?)?;
        Some((row, self.height.max(1), self.depth.max(1)))
    }

    /// The array's bytes, as its extent says.
    pub fn bytes(&self) -> Option<u64> {
        let (row, rows, slices) = self.extent_bytes()?;
        row.checked_mul(rows)?.checked_mul(slices)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ArrayCreate {
    pub desc: ArrayDesc,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ArrayMade {
    pub array: ArrayHandle,
}
/// A mipmapped array of `levels` levels, the first of `desc`'s extent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MipmappedArrayCreate {
    pub desc: ArrayDesc,
    pub levels: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MipmappedMade {
    pub mipmap: MipmappedHandle,
}
/// One level of a mipmapped array: an array the mipmapped array owns, and its extent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LevelMade {
    pub array: ArrayHandle,
    pub desc: ArrayDesc,
}

/// One side of a 3D copy.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum CopyPlace {
    /// Device memory: rows `pitch` bytes apart, slices `height` rows apart.
    Device {
        ptr: DevicePtr,
        pitch: u64,
        height: u64,
    },
    /// An array, at byte `x` of row `y` of slice `z`.
    Array {
        array: ArrayHandle,
        x: u64,
        y: u64,
        z: u64,
    },
    /// The guest's shared pinned memory at its address, rows `pitch` apart, slices
    /// `height` rows apart.
    Shared { addr: u64, pitch: u64, height: u64 },
    /// The frame: the request's data (a source), or the reply's (a destination), rows
    /// packed.
    Frame,
}

/// A copy of `depth` slices of `height` rows of `width` bytes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Copy3D {
    pub src: CopyPlace,
    pub dst: CopyPlace,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}

impl Copy3D {
    /// The bytes the copy moves.
    pub fn bytes(&self) -> Option<u64> {
        self.width.checked_mul(self.height)?.checked_mul(self.depth)
    }
}

/// What a texture reads (`CUDA_RESOURCE_DESC`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum TexResource {
    Array(ArrayHandle),
    Mipmapped(MipmappedHandle),
    Linear {
        ptr: DevicePtr,
        format: u32,
        channels: u32,
        bytes: u64,
    },
    Pitch2D {
        ptr: DevicePtr,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
}

/// `CUDA_TEXTURE_DESC`, the driver's: address modes, filter, flags (`CU_TRSF_*`),
/// anisotropy, mipmap filter, bias and clamps, border color.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TextureDesc {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub flags: u32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: f32,
    pub min_mipmap_level_clamp: f32,
    pub max_mipmap_level_clamp: f32,
    pub border_color: [f32; 4],
}

/// `CUDA_RESOURCE_VIEW_DESC` (the runtime's `cudaResourceViewDesc` alike).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewDesc {
    pub format: u32,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub first_mipmap_level: u32,
    pub last_mipmap_level: u32,
    pub first_layer: u32,
    pub last_layer: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TexObjectCreate {
    pub resource: TexResource,
    pub texture: TextureDesc,
    pub view: Option<ViewDesc>,
}

/// A texture or surface reference (`CUtexref`, `CUsurfref`): named by the host's
/// session, never a host pointer.
pub type TexRefId = u64;

/// One setting of a texture reference, as one `cuTexRefSet*` call makes it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub enum TexRefSetting {
    /// `cuTexRefSetArray` (`flags` must be `CU_TRSA_OVERRIDE_FORMAT`, 1).
    Array {
        array: ArrayHandle,
        flags: u32,
    },
    /// `cuTexRefSetMipmappedArray` (flags as above).
    Mipmapped {
        mipmap: MipmappedHandle,
        flags: u32,
    },
    /// `cuTexRefSetAddress_v2`: `bytes` of linear memory; the reply's `offset` is the
    /// byte offset the driver answers.
    Address {
        ptr: DevicePtr,
        bytes: u64,
    },
    /// `cuTexRefSetAddress2D_v3`: pitched memory of `CUDA_ARRAY_DESCRIPTOR`'s shape.
    Address2D {
        ptr: DevicePtr,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
    /// `cuTexRefSetFormat`.
    Format {
        format: u32,
        channels: i32,
    },
    /// `cuTexRefSetAddressMode` of dimension `dim` (0 to 2).
    AddressMode {
        dim: i32,
        mode: u32,
    },
    FilterMode(u32),
    MipmapFilterMode(u32),
    MipmapLevelBias(f32),
    MipmapLevelClamp {
        min: f32,
        max: f32,
    },
    MaxAnisotropy(u32),
    BorderColor([f32; 4]),
    Flags(u32),
    /// No change (the default of the request struct).
    #[default]
    Nothing,
}

/// What a texture reference is bound to, as the guest's `Get` calls answer it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub enum TexRefBinding {
    #[default]
    None,
    Linear(DevicePtr),
    Array(ArrayHandle),
    Mipmapped(MipmappedHandle),
}

/// A texture reference's settings (the guest keeps them for the `cuTexRefGet*` calls):
/// those of a texture object, its format and channels, and its binding.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TexRefState {
    pub texture: TextureDesc,
    pub format: u32,
    pub channels: i32,
    pub bound: TexRefBinding,
}

impl TexRefState {
    /// The state after `setting` was made (by the driver, which checked it).
    pub fn apply(&mut self, setting: &TexRefSetting) {
        let t = &mut self.texture;
        match *setting {
            TexRefSetting::Array { array, .. } => self.bound = TexRefBinding::Array(array),
            TexRefSetting::Mipmapped { mipmap, .. } => {
                self.bound = TexRefBinding::Mipmapped(mipmap)
            }
            TexRefSetting::Address { ptr, .. } => self.bound = TexRefBinding::Linear(ptr),
            TexRefSetting::Address2D {
                ptr,
                format,
                channels,
                ..
            } => {
                self.bound = TexRefBinding::Linear(ptr);
                self.format = format;
                self.channels = channels as i32;
            }
            TexRefSetting::Format { format, channels } => {
                self.format = format;
                self.channels = channels;
            }
            TexRefSetting::AddressMode { dim, mode } => {
                if let Some(m) = usize::try_from(dim)
                    .ok()
                    .and_then(|d| t.address_mode.get_mut(d))
                {
                    *m = mode;
                }
            }
            TexRefSetting::FilterMode(m) => t.filter_mode = m,
            TexRefSetting::MipmapFilterMode(m) => t.mipmap_filter_mode = m,
            TexRefSetting::MipmapLevelBias(b) => t.mipmap_level_bias = b,
            TexRefSetting::MipmapLevelClamp { min, max } => {
                t.min_mipmap_level_clamp = min;
                t.max_mipmap_level_clamp = max;
            }
            TexRefSetting::MaxAnisotropy(a) => t.max_anisotropy = a,
            TexRefSetting::BorderColor(c) => t.border_color = c,
            TexRefSetting::Flags(f) => t.flags = f,
            TexRefSetting::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_extents_count_elements_and_refuse_unknown_formats() {
        let desc = ArrayDesc {
            width: 100,
            height: 0,
            depth: 0,
            format: format::FLOAT,
            channels: 4,
            flags: 0,
        };
        assert_eq!(desc.element_bytes(), Some(16));
        assert_eq!(desc.bytes(), Some(1600));
        let odd = ArrayDesc {
            channels: 3,
            ..desc
        };
        assert_eq!(odd.bytes(), None);
        let unknown = ArrayDesc {
            format: 0x77,
            ..desc
        };
        assert_eq!(unknown.bytes(), None);
        let huge = ArrayDesc {
            width: u64::MAX,
            ..desc
        };
        assert_eq!(huge.bytes(), None);
    }

    #[test]
    fn a_texture_references_state_follows_its_settings() {
        let mut s = TexRefState::default();
        s.apply(&TexRefSetting::AddressMode { dim: 2, mode: 3 });
        s.apply(&TexRefSetting::AddressMode { dim: 3, mode: 1 });
        s.apply(&TexRefSetting::Format {
            format: format::FLOAT,
            channels: 2,
        });
        s.apply(&TexRefSetting::MipmapLevelClamp { min: 1.0, max: 4.0 });
        s.apply(&TexRefSetting::Array {
            array: ArrayHandle(5),
            flags: 1,
        });
        assert_eq!(s.texture.address_mode, [0, 0, 3]);
        assert_eq!((s.format, s.channels), (format::FLOAT, 2));
        assert_eq!(s.texture.max_mipmap_level_clamp, 4.0);
        assert_eq!(s.bound, TexRefBinding::Array(ArrayHandle(5)));
        s.apply(&TexRefSetting::Address2D {
            ptr: 0x1000,
            format: format::FLOAT,
            channels: 4,
            width: 8,
            height: 8,
            pitch: 512,
        });
        assert_eq!((s.bound, s.channels), (TexRefBinding::Linear(0x1000), 4));
    }
}
