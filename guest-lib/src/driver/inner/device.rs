//! Device management and properties. Properties are fetched once per device and
//! answered from the guest's cache after that.

use std::ffi::c_char;

use cudarc::driver::sys::CUdevice_attribute as A;
use vmcuda_wire::op::{
    CacheConfig, DeviceCanAccessPeer, DeviceDisablePeerAccess, DeviceEnablePeerAccess,
    DeviceGetAtomicCapabilities, DeviceGetCacheConfig, DeviceGetLimit, DeviceGetP2PAttribute,
    DeviceGetProperties, DeviceGetStreamPriorityRange, DeviceProperties, DeviceSynchronize,
    DeviceWriteDone, MemGetInfo, PriorityRange,
};
use vmcuda_wire::CudaStatus;

use super::{call, guard, Result};
use crate::abi::runtime::DevicePropC;
use crate::state::{self, registry};
use crate::{caller, client, cudaError_t};

/// The number of devices the host lets this guest see.
pub fn device_count() -> Result<i32> {
    Ok(client::client()?.hello.device_count)
}

pub(crate) fn check_device(device: i32) -> Result<()> {
    if device < 0 || device >= device_count()? {
        return Err(CudaStatus::ErrorInvalidDevice);
    }
    Ok(())
}

/// A device's properties, from the cache or fetched once.
pub fn properties(device: i32) -> Result<DeviceProperties> {
    if let Some(p) = registry().properties.get(&device) {
        return Ok(p.clone());
    }
    check_device(device)?;
    let local = super::local_device(device)?;
    let mut p = super::on_host_of(Some(device), || {
        call(&DeviceGetProperties { device: local })
    })?;
    crate::managed::guest_view(&mut p);
    crate::pci_place::guest_view(&mut p);
    registry().properties.insert(device, p.clone());
    Ok(p)
}

/// A limit of the current device's context: the ones no worker changes
/// ([`vmcuda_wire::device::fixed_limit`]) are answered here, the rest by the host.
pub(crate) fn device_limit(value: *mut usize, limit: u32) -> Result<()> {
    if value.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let v = match vmcuda_wire::device::fixed_limit(limit) {
        Some(v) => {
            // As the host would: only with a connection.
            client::client()?;
            v
        }
        None => call(&DeviceGetLimit { limit })?.value,
    };
    let v = usize::try_from(v).map_err(|_| CudaStatus::ErrorInvalidValue)?;
    // SAFETY: checked non-null above; by the CUDA contract `value` is writable.
    unsafe { caller::write(value, v) }
}

pub extern "C" fn cudaGetDeviceCount(count: *mut i32) -> cudaError_t {
    guard("cudaGetDeviceCount", || match device_count() {
        // SAFETY: by cudaGetDeviceCount's contract `count` is NULL or writable.
        Ok(n) => unsafe { caller::write(count, n) },
        Err(e) => {
            // SAFETY: by cudaGetDeviceCount's contract `count` is NULL or writable.
            unsafe { caller::write_opt(count, 0) };
            Err(e)
        }
    })
}

pub extern "C" fn cudaSetDevice(device: i32) -> cudaError_t {
    guard("cudaSetDevice", || {
        check_device(device)?;
        state::set_current_device(device);
        // CUDA 12+ brings the primary context up here and makes it current.
        state::note_runtime_context();
        Ok(())
    })
}

pub extern "C" fn cudaSetDeviceFlags(flags: u32) -> cudaError_t {
    guard("cudaSetDeviceFlags", || {
        if flags & !0x1f != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        registry()
            .device_flags
            .insert(state::current_device(), flags);
        Ok(())
    })
}

pub extern "C" fn cudaGetDeviceFlags(flags: *mut u32) -> cudaError_t {
    guard("cudaGetDeviceFlags", || {
        // cudaDeviceMapHost (8) is always on in CUDA 13.
        let f = registry()
            .device_flags
            .get(&state::current_device())
            .copied()
            .unwrap_or(0);
        // SAFETY: by cudaGetDeviceFlags's contract `flags` is NULL or writable.
        unsafe { caller::write(flags, f | 8) }
    })
}

pub extern "C" fn cudaDeviceSynchronize() -> cudaError_t {
    guard("cudaDeviceSynchronize", || {
        let queued = crate::gate::sync_all();
        let capturing = crate::capture::any();
        // The GPU's word first, where there is one (not in a capture, which the request
        // would join).
        let watched = (!capturing)
            .then(|| {
                crate::done_word::watch(|done| super::post_now(&DeviceWriteDone { done }, &[]))
            })
            .flatten();
        if let Some(seen) = watched {
            if seen? {
                return queued;
            }
        }
        // With other threads making calls, wait by queries (a query of a stream in a
        // capture would end it: not then), which do not hold the connection against
        // them: once a query finds every stream of the guest's on the device done
        // (the host sends the launches it holds first), a synchronize would find the
        // same, one round trip later.
        if state::other_threads() && !capturing {
            super::wait_by_queries(|| call(&vmcuda_wire::op::DeviceQuery {}))?;
            return queued;
        }
        call(&DeviceSynchronize)?;
        queued
    })
}

pub extern "C" fn cudaDeviceGetCacheConfig(config: *mut u32) -> cudaError_t {
    guard("cudaDeviceGetCacheConfig", || {
        // SAFETY: by cudaDeviceGetCacheConfig's contract `config` is NULL or writable.
        unsafe { caller::write(config, call(&DeviceGetCacheConfig)?.config) }
    })
}

pub extern "C" fn cudaDeviceSetCacheConfig(config: u32) -> cudaError_t {
    guard("cudaDeviceSetCacheConfig", || {
        // Functions without a preference of their own follow the device's.
        crate::function_facts::forget_occupancy();
        call(&CacheConfig { config })
    })
}

/// The stream priority range, cached (streams clamp their priority into it).
pub fn priority_range() -> Result<PriorityRange> {
    let device = state::current_device();
    if let Some(r) = registry().priority_ranges.get(&device) {
        return Ok(r.clone());
    }
    let r = call(&DeviceGetStreamPriorityRange)?;
    registry().priority_ranges.insert(device, r.clone());
    Ok(r)
}

pub extern "C" fn cudaDeviceGetStreamPriorityRange(
    least: *mut i32,
    greatest: *mut i32,
) -> cudaError_t {
    guard("cudaDeviceGetStreamPriorityRange", || {
        let r = priority_range()?;
        // SAFETY: by cudaDeviceGetStreamPriorityRange's contract `least` is NULL or
        // writable.
        unsafe { caller::write_opt(least, r.least) };
        // SAFETY: by cudaDeviceGetStreamPriorityRange's contract `greatest` is NULL or
        // writable.
        unsafe { caller::write_opt(greatest, r.greatest) };
        Ok(())
    })
}

pub extern "C" fn cudaDeviceCanAccessPeer(can: *mut i32, device: i32, peer: i32) -> cudaError_t {
    guard("cudaDeviceCanAccessPeer", || {
        check_device(device)?;
        check_device(peer)?;
        // GPUs of two hosts never reach each other's memory.
        let can_access = !super::on_different_hosts(device, peer)? && {
            let req = DeviceCanAccessPeer {
                device: super::local_device(device)?,
                peer: super::local_device(peer)?,
            };
            super::on_host_of(Some(device), || call(&req))?.can_access
        };
        // SAFETY: by cudaDeviceCanAccessPeer's contract `can` is NULL or writable.
        unsafe { caller::write(can, can_access as i32) }
    })
}

/// `cudaDevP2PAttrPerformanceRank` ... `cudaDevP2PAttrOnlyPartialNativeAtomicSupported`.
const P2P_ATTRIBUTES: std::ops::RangeInclusive<u32> = 1..=5;

pub extern "C" fn cudaDeviceGetP2PAttribute(
    value: *mut i32,
    attr: u32,
    src_device: i32,
    dst_device: i32,
) -> cudaError_t {
    guard("cudaDeviceGetP2PAttribute", || {
        if value.is_null() || !P2P_ATTRIBUTES.contains(&attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        check_device(src_device)?;
        check_device(dst_device)?;
        if src_device == dst_device {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // GPUs of two hosts have no link: every attribute is 0, as the driver says for
        // GPUs without one. Otherwise the devices' host answers, in its own numbers.
        let v = if super::on_different_hosts(src_device, dst_device)? {
            0
        } else {
            let req = DeviceGetP2PAttribute {
                attr,
                src_device: super::local_device(src_device)?,
                dst_device: super::local_device(dst_device)?,
            };
            super::on_host_of(Some(src_device), || call(&req))?.value
        };
        // SAFETY: by cudaDeviceGetP2PAttribute's contract `value` is NULL or writable.
        unsafe { caller::write(value, v) }
    })
}

/// The `cudaAtomicCapability` bits of each of `count` operations, for atomics from
/// `device` to host memory (`dst` `None`) or to device `dst`.
fn atomic_capabilities(
    capabilities: *mut u32,
    operations: *const u32,
    count: u32,
    device: i32,
    dst: Option<i32>,
) -> Result<()> {
    check_device(device)?;
    // A longer list is not one a program makes; the host refuses it too.
    if count > vmcuda_wire::device::MAX_ATOMIC_QUERY {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: by the caller's contract `operations` holds `count` operations.
    let operations = unsafe { caller::slice(operations, count as usize) }?;
    let req = match dst {
        None => DeviceGetAtomicCapabilities {
            operations,
            to_host: true,
            dst_device: 0,
        },
        Some(dst) => {
            check_device(dst)?;
            if dst == device {
                return Err(CudaStatus::ErrorInvalidDevice);
            }
            // GPUs of two hosts have no link, so no atomics between them.
            if super::on_different_hosts(device, dst)? {
                let none = vec![0; operations.len()];
                // SAFETY: by the caller's contract `capabilities` holds `count` values.
                return unsafe { caller::write_slice(capabilities, &none) };
            }
            DeviceGetAtomicCapabilities {
                operations,
                to_host: false,
                dst_device: super::local_device(dst)?,
            }
        }
    };
    let r = state::as_device(device, || call(&req))?;
    if r.capabilities.len() != count as usize {
        return Err(CudaStatus::ErrorUnknown);
    }
    // SAFETY: by the caller's contract `capabilities` holds `count` values.
    unsafe { caller::write_slice(capabilities, &r.capabilities) }
}

pub extern "C" fn cudaDeviceGetHostAtomicCapabilities(
    capabilities: *mut u32,
    operations: *const u32,
    count: u32,
    device: i32,
) -> cudaError_t {
    guard("cudaDeviceGetHostAtomicCapabilities", || {
        atomic_capabilities(capabilities, operations, count, device, None)
    })
}

pub extern "C" fn cudaDeviceGetP2PAtomicCapabilities(
    capabilities: *mut u32,
    operations: *const u32,
    count: u32,
    src_device: i32,
    dst_device: i32,
) -> cudaError_t {
    guard("cudaDeviceGetP2PAtomicCapabilities", || {
        atomic_capabilities(
            capabilities,
            operations,
            count,
            src_device,
            Some(dst_device),
        )
    })
}

pub extern "C" fn cudaDeviceEnablePeerAccess(peer: i32, flags: u32) -> cudaError_t {
    guard("cudaDeviceEnablePeerAccess", || {
        if super::on_different_hosts(state::current_device(), peer)? {
            return Err(CudaStatus::ErrorPeerAccessUnsupported);
        }
        call(&DeviceEnablePeerAccess {
            peer: super::local_device(peer)?,
            flags,
        })
    })
}

pub extern "C" fn cudaDeviceDisablePeerAccess(peer: i32) -> cudaError_t {
    guard("cudaDeviceDisablePeerAccess", || {
        if super::on_different_hosts(state::current_device(), peer)? {
            return Err(CudaStatus::ErrorPeerAccessNotEnabled);
        }
        call(&DeviceDisablePeerAccess {
            peer: super::local_device(peer)?,
        })
    })
}

pub extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> cudaError_t {
    guard("cudaMemGetInfo", || {
        let info = call(&MemGetInfo)?;
        // SAFETY: by cudaMemGetInfo's contract `free` is NULL or writable.
        unsafe { caller::write(free, info.free as usize) }?;
        // SAFETY: by cudaMemGetInfo's contract `total` is NULL or writable.
        unsafe { caller::write(total, info.total as usize) }
    })
}

fn pci_ids(device: i32) -> Result<(i32, i32, i32)> {
    let p = properties(device)?;
    let get = |a: A| p.attribute(a as u32).unwrap_or(0);
    Ok((
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ))
}

pub extern "C" fn cudaDeviceGetByPCIBusId(device: *mut i32, id: *const c_char) -> cudaError_t {
    guard("cudaDeviceGetByPCIBusId", || {
        // SAFETY: by cudaDeviceGetByPCIBusId's contract `id` is NULL or a NUL-terminated
        // string.
        let text = unsafe { caller::string(id) }?;
        let parse = |s: &str| -> Option<(i32, i32, i32)> {
            let (rest, _func) = s.rsplit_once('.')?;
            let parts: Vec<&str> = rest.split(':').collect();
            let (d, b, v) = match parts.as_slice() {
                [d, b, v] => (*d, *b, *v),
                [b, v] => ("0", *b, *v),
                _ => return None,
            };
            Some((
                i32::from_str_radix(d, 16).ok()?,
                i32::from_str_radix(b, 16).ok()?,
                i32::from_str_radix(v, 16).ok()?,
            ))
        };
        let wanted = parse(&text).ok_or(CudaStatus::ErrorInvalidValue)?;
        for d in 0..device_count()? {
            if pci_ids(d)? == wanted {
                // SAFETY: by cudaDeviceGetByPCIBusId's contract `device` is NULL or
                // writable.
                return unsafe { caller::write(device, d) };
            }
        }
        Err(CudaStatus::ErrorInvalidDevice)
    })
}

impl DevicePropC {
    /// Fill the struct from the device's attributes, field by field as cudart does.
    pub fn from_properties(p: &DeviceProperties) -> Self {
        let a = |attr: A| p.attribute(attr as u32).unwrap_or(0);
        let z = |attr: A| a(attr) as usize;
        let mut name = [0u8; 256];
        let n = p.name.len().min(255);
        name[..n].copy_from_slice(&p.name.as_bytes()[..n]);
        use A::*;
        DevicePropC {
            name,
            uuid: p.uuid,
            luid: p.luid,
            luid_device_node_mask: p.luid_device_node_mask,
            total_global_mem: p.total_global_mem as usize,
            shared_mem_per_block: z(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
            regs_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
            warp_size: a(CU_DEVICE_ATTRIBUTE_WARP_SIZE),
            mem_pitch: z(CU_DEVICE_ATTRIBUTE_MAX_PITCH),
            max_threads_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            max_threads_dim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
            ],
            max_grid_size: [
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
            ],
            total_const_mem: z(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
            major: a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            minor: a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            texture_alignment: z(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
            texture_pitch_alignment: z(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT),
            multi_processor_count: a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            integrated: a(CU_DEVICE_ATTRIBUTE_INTEGRATED),
            can_map_host_memory: a(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
            max_texture_1d: a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH),
            max_texture_1d_mipmap: a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH),
            max_texture_2d: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT),
            ],
            max_texture_2d_mipmap: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT),
            ],
            max_texture_2d_linear: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH),
            ],
            max_texture_2d_gather: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT),
            ],
            max_texture_3d: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH),
            ],
            max_texture_3d_alt: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE),
            ],
            max_texture_cubemap: a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH),
            max_texture_1d_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS),
            ],
            max_texture_2d_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS),
            ],
            max_texture_cubemap_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS),
            ],
            max_surface_1d: a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH),
            max_surface_2d: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT),
            ],
            max_surface_3d: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH),
            ],
            max_surface_1d_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS),
            ],
            max_surface_2d_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS),
            ],
            max_surface_cubemap: a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH),
            max_surface_cubemap_layered: [
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH),
                a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS),
            ],
            surface_alignment: z(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT),
            concurrent_kernels: a(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
            ecc_enabled: a(CU_DEVICE_ATTRIBUTE_ECC_ENABLED),
            pci_bus_id: a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            pci_device_id: a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
            pci_domain_id: a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            tcc_driver: a(CU_DEVICE_ATTRIBUTE_TCC_DRIVER),
            async_engine_count: a(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
            unified_addressing: a(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
            memory_bus_width: a(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            l2_cache_size: a(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            persisting_l2_cache_max_size: a(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE),
            max_threads_per_multiprocessor: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
            stream_priorities_supported: a(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED),
            global_l1_cache_supported: a(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED),
            local_l1_cache_supported: a(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED),
            shared_mem_per_multiprocessor: z(
                CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            ),
            regs_per_multiprocessor: a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
            managed_memory: a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
            is_multi_gpu_board: a(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD),
            multi_gpu_board_group_id: a(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID),
            host_native_atomic_supported: a(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED),
            pageable_memory_access: a(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS),
            concurrent_managed_access: a(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS),
            compute_preemption_supported: a(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED),
            can_use_host_pointer_for_registered_mem: a(
                CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
            ),
            cooperative_launch: a(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH),
            shared_mem_per_block_optin: z(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            pageable_memory_access_uses_host_page_tables: a(
                CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
            ),
            direct_managed_mem_access_from_host: a(
                CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST,
            ),
            max_blocks_per_multiprocessor: a(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
            access_policy_max_window_size: a(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE),
            reserved_shared_mem_per_block: z(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK),
            host_register_supported: a(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED),
            sparse_cuda_array_supported: a(CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED),
            host_register_read_only_supported: a(
                CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
            ),
            timeline_semaphore_interop_supported: a(
                CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED,
            ),
            memory_pools_supported: a(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
            gpu_direct_rdma_supported: a(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
            gpu_direct_rdma_flush_writes_options: a(
                CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
            ) as u32,
            gpu_direct_rdma_writes_ordering: a(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
            memory_pool_supported_handle_types: a(
                CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
            ) as u32,
            deferred_mapping_cuda_array_supported: a(
                CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED,
            ),
            ipc_event_supported: a(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED),
            cluster_launch: a(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH),
            unified_function_pointers: a(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS),
            device_numa_config: a(CU_DEVICE_ATTRIBUTE_NUMA_CONFIG),
            device_numa_id: a(CU_DEVICE_ATTRIBUTE_NUMA_ID),
            mps_enabled: a(CU_DEVICE_ATTRIBUTE_MPS_ENABLED),
            host_numa_id: a(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID),
            gpu_pci_device_id: a(CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID) as u32,
            gpu_pci_subsystem_id: a(CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID) as u32,
            host_numa_multinode_ipc_supported: a(
                CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED,
            ),
            reserved: [0; 56],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Sizes and offsets measured with gcc against the CUDA 13.0 headers.
    #[test]
    fn device_prop_layout_matches_cuda_13() {
        assert_eq!(std::mem::size_of::<DevicePropC>(), 1008);
        assert_eq!(offset_of!(DevicePropC, uuid), 256);
        assert_eq!(offset_of!(DevicePropC, total_global_mem), 288);
        assert_eq!(offset_of!(DevicePropC, major), 360);
        assert_eq!(offset_of!(DevicePropC, multi_processor_count), 384);
        assert_eq!(offset_of!(DevicePropC, pci_bus_id), 568);
        assert_eq!(offset_of!(DevicePropC, l2_cache_size), 596);
        assert_eq!(offset_of!(DevicePropC, shared_mem_per_block_optin), 672);
        assert_eq!(offset_of!(DevicePropC, cluster_launch), 748);
        assert_eq!(offset_of!(DevicePropC, reserved), 784);
    }
}
