//! Virtual memory management: reservations, physical allocations, mappings.
//!
//! All of it is done by the host (which checks every range and handle against what
//! this connection holds, and counts physical memory against the guest's quota); the
//! guest enters each mapped range in its device-range registry, so copies, memsets and
//! pointer queries know it as device memory, and takes it out again at unmap.
//! Physical allocation handles are the host's per-connection ids. A physical
//! allocation made with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` passes to the VM's
//! other processes as a descriptor (docs/ipc.md); other handle types are
//! `CUDA_ERROR_NOT_SUPPORTED`, said once on stderr.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use vmcuda_wire::driver::{
    is_host_location, AccessDesc, AllocationHandle, AllocationProp, MemAddressFree,
    MemAddressReserve, MemCreate, MemGetAllocationGranularity, MemGetAllocationProperties, MemMap,
    MemRelease, MemRetainAllocationHandle, MemSetAccess, MemUnmap,
};
use vmcuda_wire::op::{MemExportShareable, MemImportShareable};
use vmcuda_wire::CudaStatus;

use super::result::{status, CUDA_ERROR_NOT_SUPPORTED};
use super::{check_initialized, export};
use crate::abi::driver::{AccessDescC, AllocationPropC, LocationC};
use crate::driver::inner::call;
use crate::{caller, state};

fn prop_from(c: &AllocationPropC) -> AllocationProp {
    AllocationProp {
        alloc_type: c.alloc_type,
        requested_handle_types: c.requested_handle_types,
        location_type: c.location_type,
        location_id: c.location_id,
        compression_type: c.compression_type,
        gpu_direct_rdma_capable: c.gpu_direct_rdma_capable,
        usage: c.usage,
    }
}

/// This process's mappings (start -> bytes), to take them out of the device-range
/// registry at unmap.
static MAPPINGS: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

fn mappings() -> std::sync::MutexGuard<'static, BTreeMap<u64, u64>> {
    MAPPINGS.lock().unwrap_or_else(|p| p.into_inner())
}

export! {
    fn cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) {
        check_initialized()?;
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let r = call(&MemAddressReserve { size: size as u64, alignment: alignment as u64, addr, flags })?;
        // SAFETY: by cuMemAddressReserve's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, r.ptr) }
    }
}

export! {
    fn cuMemAddressFree(ptr: u64, size: usize) {
        check_initialized()?;
        call(&MemAddressFree { ptr, size: size as u64 })
    }
}

export! {
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocationPropC, flags: u64) {
        check_initialized()?;
        // SAFETY: by cuMemCreate's contract `prop` is NULL or readable.
        let prop = prop_from(&unsafe { caller::read(prop) }?);
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if is_host_location(prop.location_type) {
            // The host's driver cannot allocate guest RAM. NCCL tries one such
            // allocation and, refused, keeps its host buffers in shared memory.
            eprintln!(
                "vmcuda: cuMemCreate: physical allocations in host memory \
                 (CU_MEM_LOCATION_TYPE_HOST*) are not supported"
            );
            return Err(CudaStatus::ErrorNotSupported);
        }
        let made = call(&MemCreate { size: size as u64, prop, flags })?;
        // SAFETY: by cuMemCreate's contract `handle` is NULL or writable.
        unsafe { caller::write(handle, made.handle.0) }
    }
}

export! {
    fn cuMemRelease(handle: u64) {
        check_initialized()?;
        call(&MemRelease { handle: AllocationHandle(handle) })
    }
}

export! {
    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        check_initialized()?;
        let handle = AllocationHandle(handle);
        call(&MemMap { ptr, size: size as u64, offset: offset as u64, handle, flags })?;
        let device = call(&MemGetAllocationProperties { handle })
            .map_or(state::current_device(), |p| p.location_id);
        mappings().insert(ptr, size as u64);
        state::registry().add_device_range(ptr, size as u64, device);
        Ok(())
    }
}

export! {
    fn cuMemUnmap(ptr: u64, size: usize) {
        check_initialized()?;
        call(&MemUnmap { ptr, size: size as u64 })?;
        let end = ptr.saturating_add(size as u64);
        let starts: Vec<u64> = mappings().range(ptr..end).map(|(s, _)| *s).collect();
        for start in starts {
            mappings().remove(&start);
            state::registry().remove_device_range(start);
        }
        Ok(())
    }
}

export! {
    fn cuMemSetAccess(ptr: u64, size: usize, desc: *const AccessDescC, count: usize) {
        check_initialized()?;
        // Far more descriptors than devices is a wild count, not a request.
        if count == 0 || count > 1024 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let descs = (0..count)
            .map(|i| {
                // SAFETY: by cuMemSetAccess's contract `desc.wrapping_add(i)` is NULL or
                // readable.
                let d = unsafe { caller::read(desc.wrapping_add(i)) }?;
                Ok(AccessDesc { location_type: d.location_type, location_id: d.location_id, flags: d.flags })
            })
            .collect::<Result<Vec<_>, CudaStatus>>()?;
        call(&MemSetAccess { ptr, size: size as u64, descs })
    }
}

export! {
    /// Sparse arrays' tiles mapped to physical memory. No array of vmcuda's is sparse:
    /// the host refuses `CUDA_ARRAY3D_SPARSE` and `_DEFERRED_MAPPING` when an array is
    /// made, so every entry names an array the driver cannot map into, and the batch
    /// is refused (`CUDA_ERROR_INVALID_VALUE`) as the driver refuses one for an array
    /// made without those flags; an empty batch maps nothing.
    fn cuMemMapArrayAsync(list: *mut c_void, count: u32, stream: crate::driver::inner::RawHandle) {
        check_initialized()?;
        let _ = stream;
        if count == 0 {
            return Ok(());
        }
        if list.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Err(CudaStatus::ErrorInvalidValue)
    }
}

export! {
    /// The access a device has to mapped memory (0 before `cuMemSetAccess` gave any).
    fn cuMemGetAccess(flags: *mut u64, location: *const LocationC, ptr: u64) {
        check_initialized()?;
        if flags.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuMemGetAccess's contract `location` is NULL or readable.
        let l = unsafe { caller::read(location) }?;
        let reply = call(&vmcuda_wire::op::MemGetAccess {
            ptr,
            location_type: l.location_type,
            location_id: l.location_id,
        })?;
        // SAFETY: by its contract `flags` is writable (checked not NULL above).
        unsafe { caller::write(flags, reply.flags) }
    }
}

export! {
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const AllocationPropC, option: u32) {
        check_initialized()?;
        // SAFETY: by cuMemGetAllocationGranularity's contract `prop` is NULL or readable.
        let prop = prop_from(&unsafe { caller::read(prop) }?);
        let g = call(&MemGetAllocationGranularity { prop, option })?;
        // SAFETY: by cuMemGetAllocationGranularity's contract `granularity` is NULL or
        // writable.
        unsafe { caller::write(granularity, g.bytes as usize) }
    }
}

export! {
    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut AllocationPropC, handle: u64) {
        check_initialized()?;
        let p = call(&MemGetAllocationProperties { handle: AllocationHandle(handle) })?;
        // SAFETY: by cuMemGetAllocationPropertiesFromHandle's contract `prop` is NULL or
        // writable.
        unsafe { caller::write(prop, AllocationPropC {
            alloc_type: p.alloc_type,
            requested_handle_types: p.requested_handle_types,
            location_type: p.location_type,
            location_id: p.location_id,
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: p.compression_type,
            gpu_direct_rdma_capable: p.gpu_direct_rdma_capable,
            usage: p.usage,
            reserved: [0; 4],
        }) }
    }
}

export! {
    fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) {
        check_initialized()?;
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let r = call(&MemRetainAllocationHandle { ptr: addr as u64 })?;
        // SAFETY: by cuMemRetainAllocationHandle's contract `handle` is NULL or writable.
        unsafe { caller::write(handle, r.handle.0) }
    }
}

static SHARING_REFUSED: AtomicBool = AtomicBool::new(false);

/// Handle types other than a POSIX descriptor (Win32 handles, fabric handles) do not
/// exist for a VM's processes: the driver's answer where they are unsupported.
fn sharing_not_supported(what: &str) -> Result<(), CudaStatus> {
    if !SHARING_REFUSED.swap(true, Ordering::Relaxed) {
        eprintln!("vmcuda: {what}: only POSIX file descriptors pass physical allocations between a VM's processes; reporting CUDA_ERROR_NOT_SUPPORTED");
    }
    Err(status(CUDA_ERROR_NOT_SUPPORTED))
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: u32 = 1;

export! {
    /// The descriptor is a sealed memfd of this library's holding the handle of
    /// `driver::ipc` (the host's token), which the program passes on as the driver's.
    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: u64, handle_type: u32, flags: u64) {
        check_initialized()?;
        if shareable.is_null() || flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // The host judges the type against the allocation's (a type it was not made
        // exportable as is invalid, as the driver has it); only descriptors pass.
        let exported = call(&MemExportShareable {
            handle: AllocationHandle(handle),
            handle_type,
        });
        let token = match exported {
            Err(CudaStatus::ErrorNotSupported) if handle_type != HANDLE_TYPE_POSIX_FD => {
                return sharing_not_supported("cuMemExportToShareableHandle");
            }
            other => other?.token,
        };
        let fd = super::ipc::allocation_descriptor(token)?;
        // SAFETY: by cuMemExportToShareableHandle's contract, for a POSIX descriptor
        // `shareable` points to an int (NULL refused).
        unsafe { caller::write(shareable.cast::<i32>(), fd) }
    }
}

export! {
    fn cuMemImportFromShareableHandle(handle: *mut u64, os_handle: *mut c_void, handle_type: u32) {
        check_initialized()?;
        if handle_type != HANDLE_TYPE_POSIX_FD {
            return sharing_not_supported("cuMemImportFromShareableHandle");
        }
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // A POSIX descriptor travels as the pointer's value.
        let token = super::ipc::allocation_token(os_handle as usize as i32)?;
        let made = call(&MemImportShareable { token, handle_type })?.handle;
        // SAFETY: by cuMemImportFromShareableHandle's contract `handle` is writable
        // (NULL refused).
        unsafe { caller::write(handle, made.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C layouts are cuda.h's (CUDA 13): sizes and the offsets that matter.
    #[test]
    fn c_layouts_match_cuda_h() {
        assert_eq!(std::mem::size_of::<AllocationPropC>(), 32);
        assert_eq!(std::mem::offset_of!(AllocationPropC, location_id), 12);
        assert_eq!(std::mem::offset_of!(AllocationPropC, compression_type), 24);
        assert_eq!(std::mem::size_of::<AccessDescC>(), 12);
    }
}
