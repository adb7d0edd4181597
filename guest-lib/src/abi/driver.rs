//! `cuda.h`'s structs, as the driver's callers lay them out (CUDA 13).

use std::ffi::c_void;

use vmcuda_wire::driver::mem_op;

/// `CUmemAllocationProp` (CUDA 13 layout, 32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AllocationPropC {
    pub alloc_type: u32,
    pub requested_handle_types: u32,
    pub location_type: u32,
    pub location_id: i32,
    pub win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AccessDescC {
    pub location_type: u32,
    pub location_id: i32,
    pub flags: u32,
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LocationC {
    pub location_type: u32,
    pub location_id: i32,
}

/// `CUDA_LAUNCH_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchParams {
    pub function: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: *mut c_void,
    pub kernel_params: *const *const u8,
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub channels: u32,
    pub flags: u32,
}

/// `CUDA_TEXTURE_DESC`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DriverTextureDesc {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub flags: u32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: f32,
    pub min_mipmap_level_clamp: f32,
    pub max_mipmap_level_clamp: f32,
    pub border_color: [f32; 4],
    pub reserved: [i32; 12],
}

/// `CUDA_KERNEL_NODE_PARAMS_v1`: CUDA 11's kernel node, without `kern` and `ctx`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParamsV1 {
    pub func: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub kernel_params: *const *const u8,
    pub extra: *const *const c_void,
}

/// `CUipcMemHandle` / `CUipcEventHandle` (and a pool pointer's `CUmemPoolPtrExportData`):
/// 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    pub reserved: [u8; 64],
}

/// `CUdevprop`: CUDA 2's device properties.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct DevProp {
    pub max_threads_per_block: i32,
    pub max_threads_dim: [i32; 3],
    pub max_grid_size: [i32; 3],
    pub shared_mem_per_block: i32,
    pub total_constant_memory: i32,
    pub simd_width: i32,
    pub mem_pitch: i32,
    pub regs_per_block: i32,
    pub clock_rate: i32,
    pub texture_align: i32,
}

/// `CUexecAffinityParam`: its type and, for `CU_EXEC_AFFINITY_TYPE_SM_COUNT`, the
/// SM count.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExecAffinityParam {
    pub kind: u32,
    pub sm_count: u32,
}

/// `CUDA_MEMCPY2D`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: u64,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: u64,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchConfigC {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: *mut c_void,
    pub attrs: *const u8,
    pub num_attrs: u32,
}

/// `CUDA_KERNEL_NODE_PARAMS` (v2): a function or a library kernel, the launch's shape
/// and its arguments.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParams {
    pub func: *mut c_void,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub kernel_params: *const *const u8,
    pub extra: *const *const c_void,
    pub kern: *mut c_void,
    pub ctx: *mut c_void,
}

/// One `CUstreamBatchMemOpParams`, as bytes (the C union of six words).
pub(crate) type RawMemOp = [u8; mem_op::PARAMS_LEN];

/// `CUDA_BATCH_MEM_OP_NODE_PARAMS` (v1 and v2 are one layout).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchMemOpNodeParams {
    pub ctx: *mut c_void,
    pub count: u32,
    pub param_array: *mut RawMemOp,
    pub flags: u32,
}

/// `CUmemDecompressParams`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DecompressParamsC {
    pub src_bytes: usize,
    pub dst_bytes: usize,
    pub dst_act_bytes: u64,
    pub src: u64,
    pub dst: u64,
    pub algo: u32,
    pub padding: [u8; 20],
}

/// `CUDA_MEMCPY3D`: the driver's 3D copy, each side a memory type and its place.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DriverMemcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: u64,
    pub src_array: *mut c_void,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: u64,
    pub dst_array: *mut c_void,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

#[cfg(test)]
mod tests {
    use cudarc::driver::sys;

    use super::*;

    #[test]
    fn the_memory_types_are_laid_out_as_cuda_h() {
        same_layout!(AllocationPropC, sys::CUmemAllocationProp,
            alloc_type => type_, requested_handle_types => requestedHandleTypes,
            location_type => location.type_, location_id => location.id,
            win32_handle_meta_data => win32HandleMetaData,
            compression_type => allocFlags.compressionType,
            gpu_direct_rdma_capable => allocFlags.gpuDirectRDMACapable,
            usage => allocFlags.usage, reserved => allocFlags.reserved);
        same_layout!(AccessDescC, sys::CUmemAccessDesc,
            location_type => location.type_, location_id => location.id, flags => flags);
        same_layout!(LocationC, sys::CUmemLocation, location_type => type_, location_id => id);
        same_layout!(IpcHandle, sys::CUipcMemHandle, reserved => reserved);
        same_layout!(IpcHandle, sys::CUipcEventHandle, reserved => reserved);
        same_layout!(IpcHandle, sys::CUmemPoolPtrExportData, reserved => reserved);
        same_layout!(DecompressParamsC, sys::CUmemDecompressParams,
            src_bytes => srcNumBytes, dst_bytes => dstNumBytes, dst_act_bytes => dstActBytes,
            src => src, dst => dst, algo => algo, padding => padding);
        assert_eq!(
            size_of::<RawMemOp>(),
            size_of::<sys::CUstreamBatchMemOpParams>()
        );
        same_layout!(BatchMemOpNodeParams, sys::CUDA_BATCH_MEM_OP_NODE_PARAMS_v1,
            ctx => ctx, count => count, param_array => paramArray, flags => flags);
        same_layout!(BatchMemOpNodeParams, sys::CUDA_BATCH_MEM_OP_NODE_PARAMS_v2,
            ctx => ctx, count => count, param_array => paramArray, flags => flags);
        // A tensor map travels as its bytes.
        assert_eq!(
            vmcuda_wire::driver::TENSOR_MAP_LEN,
            size_of::<sys::CUtensorMap>()
        );
    }

    #[test]
    fn the_copy_and_array_types_are_laid_out_as_cuda_h() {
        same_layout!(Memcpy2D, sys::CUDA_MEMCPY2D,
            src_x_in_bytes => srcXInBytes, src_y => srcY, src_memory_type => srcMemoryType,
            src_host => srcHost, src_device => srcDevice, src_array => srcArray,
            src_pitch => srcPitch, dst_x_in_bytes => dstXInBytes, dst_y => dstY,
            dst_memory_type => dstMemoryType, dst_host => dstHost, dst_device => dstDevice,
            dst_array => dstArray, dst_pitch => dstPitch, width_in_bytes => WidthInBytes,
            height => Height);
        same_layout!(DriverMemcpy3D, sys::CUDA_MEMCPY3D,
            src_x_in_bytes => srcXInBytes, src_y => srcY, src_z => srcZ, src_lod => srcLOD,
            src_memory_type => srcMemoryType, src_host => srcHost, src_device => srcDevice,
            src_array => srcArray, reserved0 => reserved0, src_pitch => srcPitch,
            src_height => srcHeight, dst_x_in_bytes => dstXInBytes, dst_y => dstY,
            dst_z => dstZ, dst_lod => dstLOD, dst_memory_type => dstMemoryType,
            dst_host => dstHost, dst_device => dstDevice, dst_array => dstArray,
            reserved1 => reserved1, dst_pitch => dstPitch, dst_height => dstHeight,
            width_in_bytes => WidthInBytes, height => Height, depth => Depth);
        same_layout!(ArrayDescriptor, sys::CUDA_ARRAY_DESCRIPTOR,
            width => Width, height => Height, format => Format, channels => NumChannels);
        same_layout!(Array3DDescriptor, sys::CUDA_ARRAY3D_DESCRIPTOR,
            width => Width, height => Height, depth => Depth, format => Format,
            channels => NumChannels, flags => Flags);
        same_layout!(DriverTextureDesc, sys::CUDA_TEXTURE_DESC,
            address_mode => addressMode, filter_mode => filterMode, flags => flags,
            max_anisotropy => maxAnisotropy, mipmap_filter_mode => mipmapFilterMode,
            mipmap_level_bias => mipmapLevelBias, min_mipmap_level_clamp => minMipmapLevelClamp,
            max_mipmap_level_clamp => maxMipmapLevelClamp, border_color => borderColor,
            reserved => reserved);
    }

    #[test]
    fn the_launch_and_context_types_are_laid_out_as_cuda_h() {
        same_layout!(LaunchParams, sys::CUDA_LAUNCH_PARAMS,
            function => function, grid => gridDimX, block => blockDimX,
            shared_mem => sharedMemBytes, stream => hStream, kernel_params => kernelParams);
        same_layout!(LaunchConfigC, sys::CUlaunchConfig,
            grid => gridDimX, block => blockDimX, shared_mem => sharedMemBytes,
            stream => hStream, attrs => attrs, num_attrs => numAttrs);
        same_layout!(KernelNodeParams, sys::CUDA_KERNEL_NODE_PARAMS_v2,
            func => func, grid => gridDimX, block => blockDimX, shared_mem => sharedMemBytes,
            kernel_params => kernelParams, extra => extra, kern => kern, ctx => ctx);
        same_layout!(KernelNodeParamsV1, sys::CUDA_KERNEL_NODE_PARAMS_v1,
            func => func, grid => gridDimX, block => blockDimX, shared_mem => sharedMemBytes,
            kernel_params => kernelParams, extra => extra);
        same_layout!(DevProp, sys::CUdevprop,
            max_threads_per_block => maxThreadsPerBlock, max_threads_dim => maxThreadsDim,
            max_grid_size => maxGridSize, shared_mem_per_block => sharedMemPerBlock,
            total_constant_memory => totalConstantMemory, simd_width => SIMDWidth,
            mem_pitch => memPitch, regs_per_block => regsPerBlock, clock_rate => clockRate,
            texture_align => textureAlign);
        same_layout!(ExecAffinityParam, sys::CUexecAffinityParam,
            kind => type_, sm_count => param.smCount.val);
    }
}
