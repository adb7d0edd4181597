//! The runtime API's structs (`driver_types.h`, `vector_types.h`; CUDA 13), as its
//! callers lay them out. The driver's code reads several of them too: the two APIs share
//! a layout for memory pools, locations and launch attributes.

use std::ffi::c_void;

/// `dim3`, passed by value in the C ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// `cudaLaunchConfig_t` (CUDA 13 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchConfigC {
    pub grid: Dim3,
    pub block: Dim3,
    pub dynamic_smem: usize,
    pub stream: *mut c_void,
    pub attrs: *const u8,
    pub num_attrs: u32,
}

/// `cudaFuncAttributes` (CUDA 13 layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct FuncAttributesC {
    pub shared_size_bytes: usize,
    pub const_size_bytes: usize,
    pub local_size_bytes: usize,
    pub max_threads_per_block: i32,
    pub num_regs: i32,
    pub ptx_version: i32,
    pub binary_version: i32,
    pub cache_mode_ca: i32,
    pub max_dynamic_shared_size_bytes: i32,
    pub preferred_shmem_carveout: i32,
    pub cluster_dim_must_be_set: i32,
    pub required_cluster_width: i32,
    pub required_cluster_height: i32,
    pub required_cluster_depth: i32,
    pub cluster_scheduling_policy_preference: i32,
    pub non_portable_cluster_size_allowed: i32,
    pub reserved: [i32; 16],
}

/// `sizeof(cudaLaunchAttribute)`: u32 id, 4 bytes padding, 64-byte value union.
pub const LAUNCH_ATTRIBUTE_LEN: usize = 72;

/// `sizeof(cudaStreamAttrValue)`.
pub const STREAM_ATTR_LEN: usize = 64;

/// `struct cudaDeviceProp`, CUDA 13 layout (1008 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DevicePropC {
    pub name: [u8; 256],
    pub uuid: [u8; 16],
    pub luid: [u8; 8],
    pub luid_device_node_mask: u32,
    pub total_global_mem: usize,
    pub shared_mem_per_block: usize,
    pub regs_per_block: i32,
    pub warp_size: i32,
    pub mem_pitch: usize,
    pub max_threads_per_block: i32,
    pub max_threads_dim: [i32; 3],
    pub max_grid_size: [i32; 3],
    pub total_const_mem: usize,
    pub major: i32,
    pub minor: i32,
    pub texture_alignment: usize,
    pub texture_pitch_alignment: usize,
    pub multi_processor_count: i32,
    pub integrated: i32,
    pub can_map_host_memory: i32,
    pub max_texture_1d: i32,
    pub max_texture_1d_mipmap: i32,
    pub max_texture_2d: [i32; 2],
    pub max_texture_2d_mipmap: [i32; 2],
    pub max_texture_2d_linear: [i32; 3],
    pub max_texture_2d_gather: [i32; 2],
    pub max_texture_3d: [i32; 3],
    pub max_texture_3d_alt: [i32; 3],
    pub max_texture_cubemap: i32,
    pub max_texture_1d_layered: [i32; 2],
    pub max_texture_2d_layered: [i32; 3],
    pub max_texture_cubemap_layered: [i32; 2],
    pub max_surface_1d: i32,
    pub max_surface_2d: [i32; 2],
    pub max_surface_3d: [i32; 3],
    pub max_surface_1d_layered: [i32; 2],
    pub max_surface_2d_layered: [i32; 3],
    pub max_surface_cubemap: i32,
    pub max_surface_cubemap_layered: [i32; 2],
    pub surface_alignment: usize,
    pub concurrent_kernels: i32,
    pub ecc_enabled: i32,
    pub pci_bus_id: i32,
    pub pci_device_id: i32,
    pub pci_domain_id: i32,
    pub tcc_driver: i32,
    pub async_engine_count: i32,
    pub unified_addressing: i32,
    pub memory_bus_width: i32,
    pub l2_cache_size: i32,
    pub persisting_l2_cache_max_size: i32,
    pub max_threads_per_multiprocessor: i32,
    pub stream_priorities_supported: i32,
    pub global_l1_cache_supported: i32,
    pub local_l1_cache_supported: i32,
    pub shared_mem_per_multiprocessor: usize,
    pub regs_per_multiprocessor: i32,
    pub managed_memory: i32,
    pub is_multi_gpu_board: i32,
    pub multi_gpu_board_group_id: i32,
    pub host_native_atomic_supported: i32,
    pub pageable_memory_access: i32,
    pub concurrent_managed_access: i32,
    pub compute_preemption_supported: i32,
    pub can_use_host_pointer_for_registered_mem: i32,
    pub cooperative_launch: i32,
    pub shared_mem_per_block_optin: usize,
    pub pageable_memory_access_uses_host_page_tables: i32,
    pub direct_managed_mem_access_from_host: i32,
    pub max_blocks_per_multiprocessor: i32,
    pub access_policy_max_window_size: i32,
    pub reserved_shared_mem_per_block: usize,
    pub host_register_supported: i32,
    pub sparse_cuda_array_supported: i32,
    pub host_register_read_only_supported: i32,
    pub timeline_semaphore_interop_supported: i32,
    pub memory_pools_supported: i32,
    pub gpu_direct_rdma_supported: i32,
    pub gpu_direct_rdma_flush_writes_options: u32,
    pub gpu_direct_rdma_writes_ordering: i32,
    pub memory_pool_supported_handle_types: u32,
    pub deferred_mapping_cuda_array_supported: i32,
    pub ipc_event_supported: i32,
    pub cluster_launch: i32,
    pub unified_function_pointers: i32,
    pub device_numa_config: i32,
    pub device_numa_id: i32,
    pub mps_enabled: i32,
    pub host_numa_id: i32,
    pub gpu_pci_device_id: u32,
    pub gpu_pci_subsystem_id: u32,
    pub host_numa_multinode_ipc_supported: i32,
    pub reserved: [i32; 56],
}

/// `cudaChannelFormatDesc`: bits per channel and the kind (signed 0, unsigned 1,
/// float 2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelFormatDesc {
    pub x: i32,
    pub y: i32,
    pub z: i32,
    pub w: i32,
    pub kind: u32,
}

/// `cudaMemcpy3DOperand`: its type, then a union of four words: for a pointer
/// (`cudaMemcpyOperandTypePointer`, 1) the pointer, its row length and layer height in
/// elements (0: packed) and a location hint; for an array (2) the array and the offset
/// of the copy in it, in elements.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DOperand {
    pub kind: u32,
    pub op: [usize; 4],
}

/// `cudaMemcpy3DBatchOp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DBatchOp {
    pub src: Memcpy3DOperand,
    pub dst: Memcpy3DOperand,
    pub extent: Extent,
    pub src_access_order: u32,
    pub flags: u32,
}

/// `cudaMemcpy3DPeerParms`: a 3D copy's parameters with a device on each side.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DPeerParms {
    pub src_array: *mut c_void,
    pub src_pos: Pos,
    pub src_ptr: PitchedPtr,
    pub src_device: i32,
    pub dst_array: *mut c_void,
    pub dst_pos: Pos,
    pub dst_ptr: PitchedPtr,
    pub dst_device: i32,
    pub extent: Extent,
}

/// `cudaResourceDesc`: the type, a union (at 8), flags (at 136).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ResourceDescC {
    pub res_type: u32,
    pub union: [u64; 16],
    pub flags: u32,
}

/// `cudaTextureDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TextureDescC {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub read_mode: u32,
    pub srgb: i32,
    pub border_color: [f32; 4],
    pub normalized_coords: i32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: f32,
    pub min_mipmap_level_clamp: f32,
    pub max_mipmap_level_clamp: f32,
    pub disable_trilinear_optimization: i32,
    pub seamless_cubemap: i32,
}

/// `cudaResourceViewDesc` (the driver's alike).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ViewDescC {
    pub format: u32,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub first_mipmap_level: u32,
    pub last_mipmap_level: u32,
    pub first_layer: u32,
    pub last_layer: u32,
    pub reserved: [u32; 16],
}

/// `cudaKernelNodeParams` (and the leading fields of `cudaKernelNodeParamsV2`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParams {
    pub func: *mut c_void,
    pub grid: Dim3,
    pub block: Dim3,
    pub shared_mem: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `cudaMemsetParams` (and the leading fields of `cudaMemsetParamsV2`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemsetParams {
    pub dst: *mut c_void,
    pub pitch: usize,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
}

/// `cudaPos`: a hand copy for its `Default`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Pos {
    pub x: usize,
    pub y: usize,
    pub z: usize,
}

/// `cudaPitchedPtr` and `cudaExtent`: the bindings' own (no enums; only the fields are
/// read).
pub use cudarc::runtime::sys::{cudaExtent as Extent, cudaPitchedPtr as PitchedPtr};

/// `cudaMemcpy3DParms`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DParms {
    pub src_array: *mut c_void,
    pub src_pos: Pos,
    pub src_ptr: PitchedPtr,
    pub dst_array: *mut c_void,
    pub dst_pos: Pos,
    pub dst_ptr: PitchedPtr,
    pub extent: Extent,
    pub kind: u32,
}

/// `cudaMemAllocNodeParams`: the pool properties (88 bytes, of which the location
/// matters here), the access descriptors, the size, and the address it gives.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAllocNodeParams {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location_type: i32,
    pub location_id: i32,
    pub rest_of_props: [u8; 72],
    pub access_descs: *const c_void,
    pub access_desc_count: usize,
    pub bytesize: usize,
    pub dptr: *mut c_void,
}

/// `cudaGraphNodeParams`: the type, and the union of every node type's parameters at
/// offset 16 (256 bytes in all).
#[repr(C)]
pub struct GraphNodeParams {
    pub ty: u32,
    pub reserved0: [i32; 3],
    pub params: [u64; 29],
    pub reserved2: i64,
}

/// `cudaConditionalNodeParams`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConditionalParams {
    pub handle: u64,
    pub kind: u32,
    pub size: u32,
    pub _bodies_out: *mut *mut c_void,
}

/// `cudaHostNodeParams`: the function and its argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HostNodeParams {
    pub f: Option<unsafe extern "C" fn(*mut c_void)>,
    pub data: *mut c_void,
}

/// `cudaChildGraphNodeParams`: the graph, and whether the node gets a copy of it or
/// the graph itself.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ChildGraphParams {
    pub graph: *mut c_void,
    pub ownership: u32,
}

/// `cudaGraphExecUpdateResultInfo`.
#[repr(C)]
pub struct ExecUpdateResultInfo {
    pub result: u32,
    pub error_node: *mut c_void,
    pub error_from_node: *mut c_void,
}

/// `cudaGraphInstantiateParams`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InstantiateParams {
    pub flags: u64,
    pub upload_stream: *mut c_void,
    pub error_node: *mut c_void,
    pub result: u32,
}

/// `cudaMemPoolProps` (laid out as the driver's `CUmemPoolProps`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawPoolProps {
    pub(crate) alloc_type: i32,
    pub(crate) handle_types: i32,
    pub(crate) location_type: i32,
    pub(crate) location_id: i32,
    pub(crate) win32_security_attributes: *mut c_void,
    pub(crate) max_size: usize,
    pub(crate) usage: u16,
    pub(crate) reserved: [u8; 54],
}

/// `cudaMemAccessDesc`: a `cudaMemLocation` (type, id) and the access flags.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawAccessDesc {
    pub(crate) location_type: i32,
    pub(crate) location_id: i32,
    pub(crate) flags: u32,
}

/// `cudaMemLocation`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    pub kind: u32,
    pub id: i32,
}

/// `struct cudaPointerAttributes` (CUDA 13 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PointerAttributesC {
    pub memory_type: i32,
    pub device: i32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub reserved: [i64; 8],
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use cudarc::driver::sys as cu;
    use cudarc::runtime::sys;

    use super::*;

    #[test]
    fn the_launch_and_device_types_are_laid_out_as_the_headers() {
        same_layout!(Dim3, sys::dim3, x => x, y => y, z => z);
        same_layout!(LaunchConfigC, sys::cudaLaunchConfig_t,
            grid => gridDim, block => blockDim, dynamic_smem => dynamicSmemBytes,
            stream => stream, attrs => attrs, num_attrs => numAttrs);
        // A launch attribute travels as its id (at 0) and its value's bytes (from 8).
        assert_eq!(LAUNCH_ATTRIBUTE_LEN, size_of::<sys::cudaLaunchAttribute>());
        assert_eq!(LAUNCH_ATTRIBUTE_LEN, size_of::<cu::CUlaunchAttribute>());
        assert_eq!(offset_of!(sys::cudaLaunchAttribute, val), 8);
        assert_eq!(offset_of!(cu::CUlaunchAttribute, value), 8);
        // `cudaStreamAttrValue` is a macro naming `cudaLaunchAttributeValue`.
        assert_eq!(STREAM_ATTR_LEN, size_of::<sys::cudaLaunchAttributeValue>());
        assert_eq!(STREAM_ATTR_LEN, size_of::<cu::CUstreamAttrValue>());
        same_layout!(FuncAttributesC, sys::cudaFuncAttributes,
            shared_size_bytes => sharedSizeBytes, const_size_bytes => constSizeBytes,
            local_size_bytes => localSizeBytes, max_threads_per_block => maxThreadsPerBlock,
            num_regs => numRegs, ptx_version => ptxVersion, binary_version => binaryVersion,
            cache_mode_ca => cacheModeCA,
            max_dynamic_shared_size_bytes => maxDynamicSharedSizeBytes,
            preferred_shmem_carveout => preferredShmemCarveout,
            cluster_dim_must_be_set => clusterDimMustBeSet,
            required_cluster_width => requiredClusterWidth,
            required_cluster_height => requiredClusterHeight,
            required_cluster_depth => requiredClusterDepth,
            cluster_scheduling_policy_preference => clusterSchedulingPolicyPreference,
            non_portable_cluster_size_allowed => nonPortableClusterSizeAllowed,
            reserved => reserved);
        same_layout!(DevicePropC, sys::cudaDeviceProp,
            name => name, uuid => uuid, luid => luid, luid_device_node_mask => luidDeviceNodeMask,
            total_global_mem => totalGlobalMem, shared_mem_per_block => sharedMemPerBlock,
            regs_per_block => regsPerBlock, warp_size => warpSize, mem_pitch => memPitch,
            max_threads_per_block => maxThreadsPerBlock, max_threads_dim => maxThreadsDim,
            max_grid_size => maxGridSize, total_const_mem => totalConstMem, major => major,
            minor => minor, texture_alignment => textureAlignment,
            texture_pitch_alignment => texturePitchAlignment,
            multi_processor_count => multiProcessorCount, integrated => integrated,
            can_map_host_memory => canMapHostMemory, max_texture_1d => maxTexture1D,
            max_texture_1d_mipmap => maxTexture1DMipmap, max_texture_2d => maxTexture2D,
            max_texture_2d_mipmap => maxTexture2DMipmap,
            max_texture_2d_linear => maxTexture2DLinear,
            max_texture_2d_gather => maxTexture2DGather, max_texture_3d => maxTexture3D,
            max_texture_3d_alt => maxTexture3DAlt, max_texture_cubemap => maxTextureCubemap,
            max_texture_1d_layered => maxTexture1DLayered,
            max_texture_2d_layered => maxTexture2DLayered,
            max_texture_cubemap_layered => maxTextureCubemapLayered,
            max_surface_1d => maxSurface1D, max_surface_2d => maxSurface2D,
            max_surface_3d => maxSurface3D, max_surface_1d_layered => maxSurface1DLayered,
            max_surface_2d_layered => maxSurface2DLayered,
            max_surface_cubemap => maxSurfaceCubemap,
            max_surface_cubemap_layered => maxSurfaceCubemapLayered,
            surface_alignment => surfaceAlignment, concurrent_kernels => concurrentKernels,
            ecc_enabled => ECCEnabled, pci_bus_id => pciBusID, pci_device_id => pciDeviceID,
            pci_domain_id => pciDomainID, tcc_driver => tccDriver,
            async_engine_count => asyncEngineCount, unified_addressing => unifiedAddressing,
            memory_bus_width => memoryBusWidth, l2_cache_size => l2CacheSize,
            persisting_l2_cache_max_size => persistingL2CacheMaxSize,
            max_threads_per_multiprocessor => maxThreadsPerMultiProcessor,
            stream_priorities_supported => streamPrioritiesSupported,
            global_l1_cache_supported => globalL1CacheSupported,
            local_l1_cache_supported => localL1CacheSupported,
            shared_mem_per_multiprocessor => sharedMemPerMultiprocessor,
            regs_per_multiprocessor => regsPerMultiprocessor, managed_memory => managedMemory,
            is_multi_gpu_board => isMultiGpuBoard,
            multi_gpu_board_group_id => multiGpuBoardGroupID,
            host_native_atomic_supported => hostNativeAtomicSupported,
            pageable_memory_access => pageableMemoryAccess,
            concurrent_managed_access => concurrentManagedAccess,
            compute_preemption_supported => computePreemptionSupported,
            can_use_host_pointer_for_registered_mem => canUseHostPointerForRegisteredMem,
            cooperative_launch => cooperativeLaunch,
            shared_mem_per_block_optin => sharedMemPerBlockOptin,
            pageable_memory_access_uses_host_page_tables => pageableMemoryAccessUsesHostPageTables,
            direct_managed_mem_access_from_host => directManagedMemAccessFromHost,
            max_blocks_per_multiprocessor => maxBlocksPerMultiProcessor,
            access_policy_max_window_size => accessPolicyMaxWindowSize,
            reserved_shared_mem_per_block => reservedSharedMemPerBlock,
            host_register_supported => hostRegisterSupported,
            sparse_cuda_array_supported => sparseCudaArraySupported,
            host_register_read_only_supported => hostRegisterReadOnlySupported,
            timeline_semaphore_interop_supported => timelineSemaphoreInteropSupported,
            memory_pools_supported => memoryPoolsSupported,
            gpu_direct_rdma_supported => gpuDirectRDMASupported,
            gpu_direct_rdma_flush_writes_options => gpuDirectRDMAFlushWritesOptions,
            gpu_direct_rdma_writes_ordering => gpuDirectRDMAWritesOrdering,
            memory_pool_supported_handle_types => memoryPoolSupportedHandleTypes,
            deferred_mapping_cuda_array_supported => deferredMappingCudaArraySupported,
            ipc_event_supported => ipcEventSupported, cluster_launch => clusterLaunch,
            unified_function_pointers => unifiedFunctionPointers,
            device_numa_config => deviceNumaConfig, device_numa_id => deviceNumaId,
            mps_enabled => mpsEnabled, host_numa_id => hostNumaId,
            gpu_pci_device_id => gpuPciDeviceID, gpu_pci_subsystem_id => gpuPciSubsystemID,
            host_numa_multinode_ipc_supported => hostNumaMultinodeIpcSupported,
            reserved => reserved);
    }

    #[test]
    fn the_copy_and_texture_types_are_laid_out_as_the_headers() {
        same_layout!(Pos, sys::cudaPos, x => x, y => y, z => z);
        same_layout!(ChannelFormatDesc, sys::cudaChannelFormatDesc,
            x => x, y => y, z => z, w => w, kind => f);
        same_layout!(Memcpy3DParms, sys::cudaMemcpy3DParms,
            src_array => srcArray, src_pos => srcPos, src_ptr => srcPtr,
            dst_array => dstArray, dst_pos => dstPos, dst_ptr => dstPtr, extent => extent,
            kind => kind);
        same_layout!(Memcpy3DPeerParms, sys::cudaMemcpy3DPeerParms,
            src_array => srcArray, src_pos => srcPos, src_ptr => srcPtr,
            src_device => srcDevice, dst_array => dstArray, dst_pos => dstPos,
            dst_ptr => dstPtr, dst_device => dstDevice, extent => extent);
        same_layout!(Memcpy3DOperand, sys::cudaMemcpy3DOperand, kind => type_, op => op);
        same_layout!(Memcpy3DOperand, cu::CUmemcpy3DOperand, kind => type_, op => op);
        same_layout!(Memcpy3DBatchOp, sys::cudaMemcpy3DBatchOp,
            src => src, dst => dst, extent => extent, src_access_order => srcAccessOrder,
            flags => flags);
        same_layout!(Memcpy3DBatchOp, cu::CUDA_MEMCPY3D_BATCH_OP,
            src => src, dst => dst, extent => extent, src_access_order => srcAccessOrder,
            flags => flags);
        same_layout!(ResourceDescC, sys::cudaResourceDesc,
            res_type => resType, union => res, flags => flags);
        same_layout!(ResourceDescC, cu::CUDA_RESOURCE_DESC,
            res_type => resType, union => res, flags => flags);
        same_layout!(TextureDescC, sys::cudaTextureDesc,
            address_mode => addressMode, filter_mode => filterMode, read_mode => readMode,
            srgb => sRGB, border_color => borderColor, normalized_coords => normalizedCoords,
            max_anisotropy => maxAnisotropy, mipmap_filter_mode => mipmapFilterMode,
            mipmap_level_bias => mipmapLevelBias, min_mipmap_level_clamp => minMipmapLevelClamp,
            max_mipmap_level_clamp => maxMipmapLevelClamp,
            disable_trilinear_optimization => disableTrilinearOptimization,
            seamless_cubemap => seamlessCubemap);
        same_layout!(ViewDescC, sys::cudaResourceViewDesc,
            format => format, width => width, height => height, depth => depth,
            first_mipmap_level => firstMipmapLevel, last_mipmap_level => lastMipmapLevel,
            first_layer => firstLayer, last_layer => lastLayer, reserved => reserved);
        same_layout!(ViewDescC, cu::CUDA_RESOURCE_VIEW_DESC,
            format => format, width => width, height => height, depth => depth,
            first_mipmap_level => firstMipmapLevel, last_mipmap_level => lastMipmapLevel,
            first_layer => firstLayer, last_layer => lastLayer, reserved => reserved);
    }

    #[test]
    fn the_graph_types_are_laid_out_as_the_headers() {
        same_layout!(KernelNodeParams, sys::cudaKernelNodeParams,
            func => func, grid => gridDim, block => blockDim, shared_mem => sharedMemBytes,
            kernel_params => kernelParams, extra => extra);
        same_layout!(MemsetParams, sys::cudaMemsetParams,
            dst => dst, pitch => pitch, value => value, element_size => elementSize,
            width => width, height => height);
        same_layout!(MemsetParams, cu::CUDA_MEMSET_NODE_PARAMS,
            dst => dst, pitch => pitch, value => value, element_size => elementSize,
            width => width, height => height);
        same_layout!(MemAllocNodeParams, sys::cudaMemAllocNodeParams,
            alloc_type => poolProps.allocType, handle_types => poolProps.handleTypes,
            location_type => poolProps.location.type_, location_id => poolProps.location.id,
            rest_of_props => poolProps.win32SecurityAttributes,
            access_descs => accessDescs, access_desc_count => accessDescCount,
            bytesize => bytesize, dptr => dptr);
        same_layout!(MemAllocNodeParams, cu::CUDA_MEM_ALLOC_NODE_PARAMS_v1,
            alloc_type => poolProps.allocType, handle_types => poolProps.handleTypes,
            location_type => poolProps.location.type_, location_id => poolProps.location.id,
            rest_of_props => poolProps.win32SecurityAttributes,
            access_descs => accessDescs, access_desc_count => accessDescCount,
            bytesize => bytesize, dptr => dptr);
        same_layout!(GraphNodeParams, sys::cudaGraphNodeParams,
            ty => type_, reserved0 => reserved0, params => __bindgen_anon_1,
            reserved2 => reserved2);
        same_layout!(GraphNodeParams, cu::CUgraphNodeParams,
            ty => type_, reserved0 => reserved0, params => __bindgen_anon_1,
            reserved2 => reserved2);
        same_layout!(ConditionalParams, sys::cudaConditionalNodeParams,
            handle => handle, kind => type_, size => size, _bodies_out => phGraph_out);
        same_layout!(HostNodeParams, sys::cudaHostNodeParams, f => fn_, data => userData);
        same_layout!(HostNodeParams, cu::CUDA_HOST_NODE_PARAMS, f => fn_, data => userData);
        same_layout!(ChildGraphParams, sys::cudaChildGraphNodeParams,
            graph => graph, ownership => ownership);
        same_layout!(ExecUpdateResultInfo, sys::cudaGraphExecUpdateResultInfo,
            result => result, error_node => errorNode, error_from_node => errorFromNode);
        same_layout!(ExecUpdateResultInfo, cu::CUgraphExecUpdateResultInfo,
            result => result, error_node => errorNode, error_from_node => errorFromNode);
        same_layout!(InstantiateParams, sys::cudaGraphInstantiateParams,
            flags => flags, upload_stream => uploadStream, error_node => errNode_out,
            result => result_out);
        same_layout!(InstantiateParams, cu::CUDA_GRAPH_INSTANTIATE_PARAMS,
            flags => flags, upload_stream => hUploadStream, error_node => hErrNode_out,
            result => result_out);
    }

    #[test]
    fn the_memory_types_are_laid_out_as_the_headers() {
        same_layout!(RawPoolProps, sys::cudaMemPoolProps,
            alloc_type => allocType, handle_types => handleTypes,
            location_type => location.type_, location_id => location.id,
            win32_security_attributes => win32SecurityAttributes, max_size => maxSize,
            usage => usage, reserved => reserved);
        same_layout!(RawPoolProps, cu::CUmemPoolProps,
            alloc_type => allocType, handle_types => handleTypes,
            location_type => location.type_, location_id => location.id,
            win32_security_attributes => win32SecurityAttributes, max_size => maxSize,
            usage => usage, reserved => reserved);
        same_layout!(RawAccessDesc, sys::cudaMemAccessDesc,
            location_type => location.type_, location_id => location.id, flags => flags);
        same_layout!(MemLocation, sys::cudaMemLocation, kind => type_, id => id);
        same_layout!(MemLocation, cu::CUmemLocation, kind => type_, id => id);
        same_layout!(PointerAttributesC, sys::cudaPointerAttributes,
            memory_type => type_, device => device, device_pointer => devicePointer,
            host_pointer => hostPointer, reserved => reserved);
    }
}
