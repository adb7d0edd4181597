//! The C structs this executor hands the driver where cudarc's own types hold C
//! enums: the same layout with plain integers, so no value the session has not checked
//! is ever an invalid Rust enum. Each is checked against cudarc's `sys` type, field by
//! field, below (and its size at compile time).

use std::ffi::{c_int, c_uint, c_void};
use std::mem::size_of;

use cudarc::driver::sys;

/// `CUmemAllocationProp` with plain integers.
#[repr(C)]
pub(super) struct RawAllocationProp {
    pub(super) alloc_type: c_uint,
    pub(super) requested_handle_types: c_uint,
    pub(super) location_type: c_uint,
    pub(super) location_id: c_int,
    pub(super) win32_handle_meta_data: *mut c_void,
    pub(super) compression_type: u8,
    pub(super) gpu_direct_rdma_capable: u8,
    pub(super) usage: u16,
    pub(super) reserved: [u8; 4],
}

/// `CUmemAccessDesc` with plain integers.
#[repr(C)]
pub(super) struct RawAccessDesc {
    pub(super) location_type: c_uint,
    pub(super) location_id: c_int,
    pub(super) flags: c_uint,
}

/// `CUmemLocation`, its type a plain integer.
#[repr(C)]
pub(super) struct RawLocation {
    pub(super) location_type: c_uint,
    pub(super) location_id: c_int,
}

/// `CUmemDecompressParams`, its algorithm a plain integer.
#[repr(C)]
pub(super) struct RawDecompress {
    pub(super) src_bytes: usize,
    pub(super) dst_bytes: usize,
    pub(super) dst_act_bytes: *mut u32,
    pub(super) src: *const c_void,
    pub(super) dst: *mut c_void,
    pub(super) algo: c_uint,
    pub(super) padding: [u8; 20],
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Default)]
pub(super) struct Array3DDesc {
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) depth: usize,
    pub(super) format: u32,
    pub(super) channels: u32,
    pub(super) flags: u32,
}

/// `CUDA_RESOURCE_DESC`: the type, a 128-byte union, the flags.
#[repr(C)]
pub(super) struct ResourceDesc {
    pub(super) res_type: u32,
    pub(super) union: [u64; 16],
    pub(super) flags: u32,
}

/// `CUDA_TEXTURE_DESC`.
#[repr(C)]
pub(super) struct TexDesc {
    pub(super) address_mode: [u32; 3],
    pub(super) filter_mode: u32,
    pub(super) flags: u32,
    pub(super) max_anisotropy: u32,
    pub(super) mipmap_filter_mode: u32,
    pub(super) mipmap_level_bias: f32,
    pub(super) min_mipmap_level_clamp: f32,
    pub(super) max_mipmap_level_clamp: f32,
    pub(super) border_color: [f32; 4],
    pub(super) reserved: [i32; 12],
}

/// `CUDA_RESOURCE_VIEW_DESC`.
#[repr(C)]
pub(super) struct ViewDescC {
    pub(super) format: u32,
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) depth: usize,
    pub(super) first_mipmap_level: u32,
    pub(super) last_mipmap_level: u32,
    pub(super) first_layer: u32,
    pub(super) last_layer: u32,
    pub(super) reserved: [u32; 16],
}

/// `CUDA_ARRAY_DESCRIPTOR`, its format a plain integer.
#[repr(C)]
pub(super) struct ArrayDescC {
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) format: c_uint,
    pub(super) channels: c_uint,
}

const _: () = {
    assert!(size_of::<RawAllocationProp>() == size_of::<sys::CUmemAllocationProp>());
    assert!(size_of::<RawAccessDesc>() == size_of::<sys::CUmemAccessDesc>());
    assert!(size_of::<RawLocation>() == size_of::<sys::CUmemLocation>());
    assert!(size_of::<RawDecompress>() == size_of::<sys::CUmemDecompressParams>());
    assert!(size_of::<Array3DDesc>() == size_of::<sys::CUDA_ARRAY3D_DESCRIPTOR>());
    assert!(size_of::<ResourceDesc>() == size_of::<sys::CUDA_RESOURCE_DESC>());
    assert!(size_of::<TexDesc>() == size_of::<sys::CUDA_TEXTURE_DESC>());
    assert!(size_of::<ViewDescC>() == size_of::<sys::CUDA_RESOURCE_VIEW_DESC>());
    assert!(size_of::<ArrayDescC>() == size_of::<sys::CUDA_ARRAY_DESCRIPTOR>());
};

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::*;

    /// Each field where cudarc's type (the header's) has it.
    #[test]
    fn every_field_sits_where_the_drivers_header_puts_it() {
        type P = sys::CUmemAllocationProp;
        assert_eq!(
            offset_of!(RawAllocationProp, alloc_type),
            offset_of!(P, type_)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, requested_handle_types),
            offset_of!(P, requestedHandleTypes)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, location_type),
            offset_of!(P, location.type_)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, location_id),
            offset_of!(P, location.id)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, win32_handle_meta_data),
            offset_of!(P, win32HandleMetaData)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, compression_type),
            offset_of!(P, allocFlags.compressionType)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, gpu_direct_rdma_capable),
            offset_of!(P, allocFlags.gpuDirectRDMACapable)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, usage),
            offset_of!(P, allocFlags.usage)
        );
        assert_eq!(
            offset_of!(RawAllocationProp, reserved),
            offset_of!(P, allocFlags.reserved)
        );

        type A = sys::CUmemAccessDesc;
        assert_eq!(
            offset_of!(RawAccessDesc, location_type),
            offset_of!(A, location.type_)
        );
        assert_eq!(
            offset_of!(RawAccessDesc, location_id),
            offset_of!(A, location.id)
        );
        assert_eq!(offset_of!(RawAccessDesc, flags), offset_of!(A, flags));

        type L = sys::CUmemLocation;
        assert_eq!(offset_of!(RawLocation, location_type), offset_of!(L, type_));
        assert_eq!(offset_of!(RawLocation, location_id), offset_of!(L, id));

        type D = sys::CUmemDecompressParams;
        assert_eq!(
            offset_of!(RawDecompress, src_bytes),
            offset_of!(D, srcNumBytes)
        );
        assert_eq!(
            offset_of!(RawDecompress, dst_bytes),
            offset_of!(D, dstNumBytes)
        );
        assert_eq!(
            offset_of!(RawDecompress, dst_act_bytes),
            offset_of!(D, dstActBytes)
        );
        assert_eq!(offset_of!(RawDecompress, src), offset_of!(D, src));
        assert_eq!(offset_of!(RawDecompress, dst), offset_of!(D, dst));
        assert_eq!(offset_of!(RawDecompress, algo), offset_of!(D, algo));
        assert_eq!(offset_of!(RawDecompress, padding), offset_of!(D, padding));

        type A3 = sys::CUDA_ARRAY3D_DESCRIPTOR;
        assert_eq!(offset_of!(Array3DDesc, width), offset_of!(A3, Width));
        assert_eq!(offset_of!(Array3DDesc, height), offset_of!(A3, Height));
        assert_eq!(offset_of!(Array3DDesc, depth), offset_of!(A3, Depth));
        assert_eq!(offset_of!(Array3DDesc, format), offset_of!(A3, Format));
        assert_eq!(
            offset_of!(Array3DDesc, channels),
            offset_of!(A3, NumChannels)
        );
        assert_eq!(offset_of!(Array3DDesc, flags), offset_of!(A3, Flags));

        type R = sys::CUDA_RESOURCE_DESC;
        assert_eq!(offset_of!(ResourceDesc, res_type), offset_of!(R, resType));
        assert_eq!(offset_of!(ResourceDesc, union), offset_of!(R, res));
        assert_eq!(offset_of!(ResourceDesc, flags), offset_of!(R, flags));

        type T = sys::CUDA_TEXTURE_DESC;
        assert_eq!(
            offset_of!(TexDesc, address_mode),
            offset_of!(T, addressMode)
        );
        assert_eq!(offset_of!(TexDesc, filter_mode), offset_of!(T, filterMode));
        assert_eq!(offset_of!(TexDesc, flags), offset_of!(T, flags));
        assert_eq!(
            offset_of!(TexDesc, max_anisotropy),
            offset_of!(T, maxAnisotropy)
        );
        assert_eq!(
            offset_of!(TexDesc, mipmap_filter_mode),
            offset_of!(T, mipmapFilterMode)
        );
        assert_eq!(
            offset_of!(TexDesc, mipmap_level_bias),
            offset_of!(T, mipmapLevelBias)
        );
        assert_eq!(
            offset_of!(TexDesc, min_mipmap_level_clamp),
            offset_of!(T, minMipmapLevelClamp)
        );
        assert_eq!(
            offset_of!(TexDesc, max_mipmap_level_clamp),
            offset_of!(T, maxMipmapLevelClamp)
        );
        assert_eq!(
            offset_of!(TexDesc, border_color),
            offset_of!(T, borderColor)
        );
        assert_eq!(offset_of!(TexDesc, reserved), offset_of!(T, reserved));

        type V = sys::CUDA_RESOURCE_VIEW_DESC;
        assert_eq!(offset_of!(ViewDescC, format), offset_of!(V, format));
        assert_eq!(offset_of!(ViewDescC, width), offset_of!(V, width));
        assert_eq!(offset_of!(ViewDescC, height), offset_of!(V, height));
        assert_eq!(offset_of!(ViewDescC, depth), offset_of!(V, depth));
        assert_eq!(
            offset_of!(ViewDescC, first_mipmap_level),
            offset_of!(V, firstMipmapLevel)
        );
        assert_eq!(
            offset_of!(ViewDescC, last_mipmap_level),
            offset_of!(V, lastMipmapLevel)
        );
        assert_eq!(
            offset_of!(ViewDescC, first_layer),
            offset_of!(V, firstLayer)
        );
        assert_eq!(offset_of!(ViewDescC, last_layer), offset_of!(V, lastLayer));
        assert_eq!(offset_of!(ViewDescC, reserved), offset_of!(V, reserved));

        type AD = sys::CUDA_ARRAY_DESCRIPTOR;
        assert_eq!(offset_of!(ArrayDescC, width), offset_of!(AD, Width));
        assert_eq!(offset_of!(ArrayDescC, height), offset_of!(AD, Height));
        assert_eq!(offset_of!(ArrayDescC, format), offset_of!(AD, Format));
        assert_eq!(
            offset_of!(ArrayDescC, channels),
            offset_of!(AD, NumChannels)
        );
    }
}
