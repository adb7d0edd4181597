//! Allocations, copies, memsets and pointer queries. Most are the runtime's calls in
//! driver clothes (the same registry of device and pinned ranges serves both); 16- and
//! 32-bit memsets have their own op.

use std::ffi::c_void;

use vmcuda_wire::driver::{TensorMapEncodeTiled, TENSOR_MAP_LEN, TENSOR_MAP_MAX_RANK};
use vmcuda_wire::op::StreamHandle;
use vmcuda_wire::CudaStatus;

use super::context::{context_of, device_of, CUcontext};
use super::inner;
use super::result::{status, CUDA_ERROR_NOT_FOUND};
use super::{check_initialized, export, keeping_last_error, Result};
use crate::driver::inner::memory::memset_elements;
use crate::driver::inner::{stream_handle, RawHandle};
// The runtime's copies, so the driver's take the same routes (crate::copy_route).
use crate::abi::driver::Memcpy2D;
use crate::copy_route::{DEFAULT, DEVICE_TO_DEVICE, DEVICE_TO_HOST, HOST_TO_DEVICE};
use crate::{caller, state};

export! {
    fn cuMemAlloc_v2(ptr: *mut u64, size: usize) {
        check_initialized()?;
        if size == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        keeping_last_error(|| inner::memory::cudaMalloc(&mut p, size))?;
        // SAFETY: by cuMemAlloc_v2's contract `ptr` is NULL or writable.
        unsafe { caller::write(ptr, p as u64) }
    }
}

export! {
    fn cuMemFree_v2(ptr: u64) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaFree(ptr as *mut c_void))
    }
}

export! {
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        check_initialized()?;
        keeping_last_error(|| crate::driver::inner::device::cudaMemGetInfo(free, total))
    }
}

export! {
    fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, ptr: u64) {
        check_initialized()?;
        // Memory the driver did not allocate is not found.
        let (start, len, _) =
            state::registry().device_range(ptr).ok_or(status(CUDA_ERROR_NOT_FOUND))?;
        // SAFETY: by cuMemGetAddressRange_v2's contract `base` is NULL or writable.
        unsafe { caller::write_opt(base, start) };
        // SAFETY: by cuMemGetAddressRange_v2's contract `size` is NULL or writable.
        unsafe { caller::write_opt(size, len as usize) };
        Ok(())
    }
}

export! {
    fn cuMemAllocHost_v2(ptr: *mut *mut c_void, size: usize) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaMallocHost(ptr, size))
    }
}

export! {
    /// `CU_MEMHOSTALLOC_*` flags are the runtime's `cudaHostAlloc*` flags.
    fn cuMemHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaHostAlloc(ptr, size, flags))
    }
}

export! {
    fn cuMemFreeHost(ptr: *mut c_void) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaFreeHost(ptr))
    }
}

fn copy(dst: u64, src: u64, size: usize, kind: u32) -> Result<()> {
    check_initialized()?;
    keeping_last_error(|| {
        inner::memory::cudaMemcpy(dst as *mut c_void, src as *const c_void, size, kind)
    })
}

fn copy_async(dst: u64, src: u64, size: usize, kind: u32, stream: RawHandle) -> Result<()> {
    check_initialized()?;
    keeping_last_error(|| {
        inner::memory::cudaMemcpyAsync(dst as *mut c_void, src as *const c_void, size, kind, stream)
    })
}

export! {
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, size: usize) {
        copy(dst, src as u64, size, HOST_TO_DEVICE)
    }
}
export! {
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, size: usize) {
        copy(dst as u64, src, size, DEVICE_TO_HOST)
    }
}
export! {
    fn cuMemcpyDtoD_v2(dst: u64, src: u64, size: usize) {
        copy(dst, src, size, DEVICE_TO_DEVICE)
    }
}
export! {
    /// Unified addressing: the direction follows from the pointers.
    fn cuMemcpy(dst: u64, src: u64, size: usize) {
        copy(dst, src, size, DEFAULT)
    }
}
export! {
    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, size: usize, stream: RawHandle) {
        copy_async(dst, src as u64, size, HOST_TO_DEVICE, stream)
    }
}
export! {
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, size: usize, stream: RawHandle) {
        copy_async(dst as u64, src, size, DEVICE_TO_HOST, stream)
    }
}
export! {
    fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, size: usize, stream: RawHandle) {
        copy_async(dst, src, size, DEVICE_TO_DEVICE, stream)
    }
}
export! {
    fn cuMemcpyAsync(dst: u64, src: u64, size: usize, stream: RawHandle) {
        copy_async(dst, src, size, DEFAULT, stream)
    }
}

export! {
    fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaMemset(dst as *mut c_void, value as i32, count))
    }
}
export! {
    fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::memory::cudaMemsetAsync(dst as *mut c_void, value as i32, count, stream))
    }
}

export! {
    fn cuMemsetD16_v2(dst: u64, value: u16, count: usize) {
        memset_elements(dst, value as u32, 2, count, StreamHandle::LEGACY, false)
    }
}
export! {
    fn cuMemsetD32_v2(dst: u64, value: u32, count: usize) {
        memset_elements(dst, value, 4, count, StreamHandle::LEGACY, false)
    }
}
export! {
    fn cuMemsetD16Async(dst: u64, value: u16, count: usize, stream: RawHandle) {
        memset_elements(dst, value as u32, 2, count, stream_handle(stream, false), true)
    }
}
export! {
    fn cuMemsetD32Async(dst: u64, value: u32, count: usize, stream: RawHandle) {
        memset_elements(dst, value, 4, count, stream_handle(stream, false), true)
    }
}

/// A 2D memset of 16- or 32-bit elements: one request when the rows follow each other
/// (`pitch` is the row's width), else one per row, in stream order.
fn memset_2d_elements(
    dst: u64,
    pitch: usize,
    value: u32,
    element_size: u8,
    (width, height): (usize, usize),
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let row = width
        .checked_mul(element_size as usize)
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    if height > 1 && pitch < row {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if pitch == row || height == 1 {
        let count = width
            .checked_mul(height)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        return memset_elements(dst, value, element_size, count, stream, is_async);
    }
    for y in 0..height {
        let at = (y as u64)
            .checked_mul(pitch as u64)
            .and_then(|o| dst.checked_add(o))
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        memset_elements(at, value, element_size, width, stream, is_async)?;
    }
    Ok(())
}

export! {
    fn cuMemsetD2D16_v2(dst: u64, pitch: usize, value: u16, width: usize, height: usize) {
        memset_2d_elements(dst, pitch, value as u32, 2, (width, height), StreamHandle::LEGACY, false)
    }
}
export! {
    fn cuMemsetD2D32_v2(dst: u64, pitch: usize, value: u32, width: usize, height: usize) {
        memset_2d_elements(dst, pitch, value, 4, (width, height), StreamHandle::LEGACY, false)
    }
}
export! {
    fn cuMemsetD2D16Async(dst: u64, pitch: usize, value: u16, width: usize, height: usize, stream: RawHandle) {
        memset_2d_elements(dst, pitch, value as u32, 2, (width, height), stream_handle(stream, false), true)
    }
}
export! {
    fn cuMemsetD2D32Async(dst: u64, pitch: usize, value: u32, width: usize, height: usize, stream: RawHandle) {
        memset_2d_elements(dst, pitch, value, 4, (width, height), stream_handle(stream, false), true)
    }
}

/// `CUpointer_attribute`s. P2P tokens (5, the nv-p2p kernel interface of the host)
/// have no meaning in a guest and answer `CUDA_ERROR_INVALID_VALUE`.
const ATTR_CONTEXT: u32 = 1;
const ATTR_MEMORY_TYPE: u32 = 2;
const ATTR_DEVICE_POINTER: u32 = 3;
const ATTR_HOST_POINTER: u32 = 4;
const ATTR_SYNC_MEMOPS: u32 = 6;
const ATTR_BUFFER_ID: u32 = 7;
const ATTR_IS_MANAGED: u32 = 8;
const ATTR_DEVICE_ORDINAL: u32 = 9;
const ATTR_IS_LEGACY_CUDA_IPC_CAPABLE: u32 = 10;
const ATTR_RANGE_START_ADDR: u32 = 11;
const ATTR_RANGE_SIZE: u32 = 12;
const ATTR_MAPPED: u32 = 13;
const ATTR_ALLOWED_HANDLE_TYPES: u32 = 14;
const ATTR_IS_GPU_DIRECT_RDMA_CAPABLE: u32 = 15;
const ATTR_ACCESS_FLAGS: u32 = 16;
const ATTR_MEMPOOL_HANDLE: u32 = 17;
const ATTR_MAPPING_SIZE: u32 = 18;
const ATTR_MAPPING_BASE_ADDR: u32 = 19;
const ATTR_MEMORY_BLOCK_ID: u32 = 20;
const ATTR_IS_HW_DECOMPRESS_CAPABLE: u32 = 21;

/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAGS`: `CU_POINTER_ACCESS_FLAG_READWRITE`.
const ACCESS_READWRITE: u32 = 3;

/// The allocations (by buffer id) whose `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` was set.
/// Buffer ids are never reused, so a freed allocation's flag cannot pass to another.
static SYNC_MEMOPS: std::sync::Mutex<std::collections::BTreeSet<u64>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn sync_memops() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<u64>> {
    SYNC_MEMOPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the runtime knows of a pointer (memory type 0: nothing).
fn pointer_attributes(ptr: u64) -> Result<crate::abi::runtime::PointerAttributesC> {
    let mut a = crate::abi::runtime::PointerAttributesC {
        memory_type: 0,
        device: 0,
        device_pointer: std::ptr::null_mut(),
        host_pointer: std::ptr::null_mut(),
        reserved: [0; 8],
    };
    keeping_last_error(|| inner::memory::cudaPointerGetAttributes(&mut a, ptr as *const c_void))?;
    Ok(a)
}

/// The allocation a known pointer lies in: (start, size). A managed allocation's
/// range is what the program asked for; pinned host memory's is its registered range.
fn allocation_range(ptr: u64) -> Option<(u64, u64)> {
    match crate::managed::region_of(ptr as usize) {
        Some((start, _, _, crate::managed::Origin::Allocation { size, .. })) => {
            Some((start as u64, size as u64))
        }
        _ => {
            let reg = state::registry();
            reg.device_range(ptr)
                .map(|(start, size, _)| (start, size))
                .or_else(|| {
                    reg.host_range(ptr as usize)
                        .map(|(start, r)| (start as u64, r.size as u64))
                })
        }
    }
}

/// The buffer id of a known pointer's allocation.
fn buffer_id_of(ptr: u64) -> Result<u64> {
    let start = allocation_range(ptr)
        .ok_or(CudaStatus::ErrorInvalidValue)?
        .0;
    Ok(state::registry().buffer_id(start))
}

/// One attribute's value for a pointer the driver knows (`a`), as `cuPointerGetAttribute`
/// answers it: the value and its width in bytes (4 or 8).
fn known_attribute(
    attribute: u32,
    ptr: u64,
    a: &crate::abi::runtime::PointerAttributesC,
) -> Result<(u64, usize)> {
    let range = || allocation_range(ptr).ok_or(CudaStatus::ErrorInvalidValue);
    Ok(match attribute {
        ATTR_CONTEXT => (context_of(a.device) as u64, 8),
        // CU_MEMORYTYPE_HOST 1 / DEVICE 2, as cudaMemoryTypeHost / Device; managed
        // memory (the runtime's type 3) is device memory to the driver.
        ATTR_MEMORY_TYPE => (a.memory_type.min(2) as u64, 4),
        ATTR_DEVICE_POINTER => (a.device_pointer as u64, 8),
        ATTR_HOST_POINTER => (a.host_pointer as u64, 8),
        ATTR_SYNC_MEMOPS => {
            let id = buffer_id_of(ptr)?;
            (u64::from(sync_memops().contains(&id)), 4)
        }
        ATTR_BUFFER_ID | ATTR_MEMORY_BLOCK_ID => (buffer_id_of(ptr)?, 8),
        ATTR_IS_MANAGED => (u64::from(a.memory_type == 3), 4),
        ATTR_DEVICE_ORDINAL => (a.device as u32 as u64, 4),
        // Device memory goes to the VM's other processes through CUDA IPC (driver::ipc;
        // pools' allocations, which the guest does not tell apart, are refused when
        // exported). GPUDirect RDMA cannot cross the VM boundary; no memory a guest holds
        // is exportable as a shareable handle through this attribute, and none was
        // allocated with hardware decompression.
        ATTR_IS_LEGACY_CUDA_IPC_CAPABLE => (u64::from(a.memory_type == 2), 4),
        ATTR_IS_GPU_DIRECT_RDMA_CAPABLE | ATTR_IS_HW_DECOMPRESS_CAPABLE => (0, 4),
        // A 64-bit mask of `CUmemAllocationHandleType`s.
        ATTR_ALLOWED_HANDLE_TYPES => (0, 8),
        ATTR_MAPPED => (1, 4),
        ATTR_ACCESS_FLAGS => (u64::from(ACCESS_READWRITE), 4),
        // Pools' allocations are not told apart from others in the guest: no pool.
        ATTR_MEMPOOL_HANDLE => (0, 8),
        ATTR_RANGE_START_ADDR | ATTR_MAPPING_BASE_ADDR => (range()?.0, 8),
        ATTR_RANGE_SIZE | ATTR_MAPPING_SIZE => (range()?.1, 8),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// Write an attribute value of `width` bytes.
///
/// # Safety
/// `out` is NULL or writable for `width` bytes.
unsafe fn write_attribute(out: *mut c_void, (value, width): (u64, usize)) -> Result<()> {
    // SAFETY: as the caller promised, for the width written.
    unsafe {
        match width {
            4 => caller::write(out.cast::<u32>(), value as u32),
            _ => caller::write(out.cast::<u64>(), value),
        }
    }
}

export! {
    /// A pointer the driver does not know (unregistered host memory, an address
    /// nothing was allocated at) is `CUDA_ERROR_INVALID_VALUE`, as natively.
    fn cuPointerGetAttribute(data: *mut c_void, attribute: u32, ptr: u64) {
        check_initialized()?;
        let a = pointer_attributes(ptr)?;
        // cudaMemoryTypeUnregistered: the driver does not know the pointer.
        if a.memory_type == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let value = known_attribute(attribute, ptr, &a)?;
        // Device memory has no host address (cuPointerGetAttributes reports NULL).
        if attribute == ATTR_HOST_POINTER && value.0 == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuPointerGetAttribute's contract `data` is NULL or writable for
        // the attribute's type.
        unsafe { write_attribute(data, value) }
    }
}

export! {
    /// Only `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` can be set, on memory the driver
    /// knows. Setting it waits for the device's work first, as the driver waits for
    /// synchronous operations still pending on the region.
    fn cuPointerSetAttribute(value: *const c_void, attribute: u32, ptr: u64) {
        check_initialized()?;
        if attribute != ATTR_SYNC_MEMOPS {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuPointerSetAttribute's contract `value` points at an unsigned int.
        let on = unsafe { caller::read(value.cast::<u32>()) }? != 0;
        if pointer_attributes(ptr)?.memory_type == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = buffer_id_of(ptr)?;
        if on {
            keeping_last_error(|| crate::driver::inner::device::cudaDeviceSynchronize())?;
            sync_memops().insert(id);
        } else {
            sync_memops().remove(&id);
        }
        Ok(())
    }
}

/// `rank` values of a program array.
///
/// # Safety
/// `ptr` is NULL or readable for `n` values.
unsafe fn read_array<T: Copy>(ptr: *const T, n: usize) -> Result<Vec<T>> {
    // SAFETY: as `read_array`'s caller promised.
    (0..n)
        .map(|i| unsafe { caller::read(ptr.wrapping_add(i)) })
        .collect()
}

export! {
    /// Pure computation in the real driver, done by the host's driver: the map comes
    /// back as its 128 bytes.
    fn cuTensorMapEncodeTiled(
        map: *mut [u8; TENSOR_MAP_LEN],
        data_type: u32,
        rank: u32,
        global_address: *mut c_void,
        global_dim: *const u64,
        global_strides: *const u64,
        box_dim: *const u32,
        element_strides: *const u32,
        interleave: u32,
        swizzle: u32,
        l2_promotion: u32,
        oob_fill: u32,
    ) {
        check_initialized()?;
        let rank = rank as usize;
        if !(1..=TENSOR_MAP_MAX_RANK).contains(&rank) || map.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let req = TensorMapEncodeTiled {
            data_type,
            global_address: global_address as u64,
            // SAFETY: by cuTensorMapEncodeTiled's contract its pointer arguments are as
            // `read_array` requires.
            global_dim: unsafe { read_array(global_dim, rank) }?,
            // SAFETY: by cuTensorMapEncodeTiled's contract its pointer arguments are as
            // `read_array` requires.
            global_strides: unsafe { read_array(global_strides, rank - 1) }?,
            // SAFETY: by cuTensorMapEncodeTiled's contract its pointer arguments are as
            // `read_array` requires.
            box_dim: unsafe { read_array(box_dim, rank) }?,
            // SAFETY: by cuTensorMapEncodeTiled's contract its pointer arguments are as
            // `read_array` requires.
            element_strides: unsafe { read_array(element_strides, rank) }?,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        };
        let encoded = super::tensor_map::encoded(&req)?;
        // SAFETY: by cuTensorMapEncodeTiled's contract `map` is NULL or writable.
        unsafe { caller::write(map, encoded) }
    }
}

/// `CU_MEMORYTYPE_*`.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
const MEMORY_ARRAY: u32 = 3;
const MEMORY_UNIFIED: u32 = 4;

/// One side of a 2D copy: its first byte and pitch. Arrays are not served yet.
fn side(
    kind: u32,
    host: u64,
    device: u64,
    x: usize,
    y: usize,
    pitch: usize,
) -> Result<(u64, usize)> {
    let base = match kind {
        MEMORY_HOST => host,
        MEMORY_DEVICE | MEMORY_UNIFIED => device,
        MEMORY_ARRAY => return Err(CudaStatus::ErrorNotSupported),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    };
    let offset = y
        .checked_mul(pitch)
        .and_then(|o| o.checked_add(x))
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    Ok((base.wrapping_add(offset as u64), pitch))
}

/// A `CUDA_MEMCPY2D` as the runtime's 2D copy: (dst, dpitch, src, spitch, width, height).
///
/// # Safety
/// `copy` is NULL or a readable `CUDA_MEMCPY2D`.
unsafe fn memcpy_2d(copy: *const Memcpy2D) -> Result<(u64, usize, u64, usize, usize, usize)> {
    // SAFETY: as `memcpy_2d`'s caller promised.
    let c = unsafe { caller::read(copy) }?;
    let (src, spitch) = side(
        c.src_memory_type,
        c.src_host as u64,
        c.src_device,
        c.src_x_in_bytes,
        c.src_y,
        c.src_pitch,
    )?;
    let (dst, dpitch) = side(
        c.dst_memory_type,
        c.dst_host as u64,
        c.dst_device,
        c.dst_x_in_bytes,
        c.dst_y,
        c.dst_pitch,
    )?;
    Ok((dst, dpitch, src, spitch, c.width_in_bytes, c.height))
}

/// A `CUDA_MEMCPY2D` copy, waited for (`stream` None) or on a stream.
///
/// # Safety
/// `copy` is NULL or a readable `CUDA_MEMCPY2D`.
unsafe fn copy_2d(copy: *const Memcpy2D, stream: Option<RawHandle>) -> Result<()> {
    check_initialized()?;
    // SAFETY: as `copy_2d`'s caller promised.
    let c = unsafe { caller::read(copy) }?;
    if c.src_memory_type == super::array::ARRAY || c.dst_memory_type == super::array::ARRAY {
        let s = stream.unwrap_or(std::ptr::null_mut());
        // SAFETY: as `copy_2d`'s caller promised.
        return unsafe { super::array::memcpy_2d(&c, s, stream.is_some()) };
    }
    // SAFETY: as `copy_2d`'s caller promised.
    let (dst, dpitch, src, spitch, width, height) = unsafe { memcpy_2d(copy) }?;
    let (dst, src) = (dst as *mut c_void, src as *const c_void);
    keeping_last_error(|| match stream {
        None => inner::memory::cudaMemcpy2D(dst, dpitch, src, spitch, width, height, DEFAULT),
        Some(s) => {
            inner::memory::cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, DEFAULT, s)
        }
    })
}

export! {
    fn cuMemcpy2D_v2(copy: *const Memcpy2D) {
        // SAFETY: by cuMemcpy2D's contract `copy` is NULL or readable.
        unsafe { copy_2d(copy, None) }
    }
}
export! {
    /// The runtime's 2D copy has no alignment requirement to relax.
    fn cuMemcpy2DUnaligned_v2(copy: *const Memcpy2D) {
        // SAFETY: by cuMemcpy2DUnaligned's contract `copy` is NULL or readable.
        unsafe { copy_2d(copy, None) }
    }
}
export! {
    fn cuMemcpy2DAsync_v2(copy: *const Memcpy2D, stream: RawHandle) {
        // SAFETY: by cuMemcpy2DAsync's contract `copy` is NULL or readable.
        unsafe { copy_2d(copy, Some(stream)) }
    }
}

export! {
    /// The element size only bounds the pitch's alignment, which the runtime's
    /// pitch already meets for 4, 8 and 16 bytes.
    fn cuMemAllocPitch_v2(ptr: *mut u64, pitch: *mut usize, width: usize, height: usize, element_size: u32) {
        check_initialized()?;
        if ![4, 8, 16].contains(&element_size) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        keeping_last_error(|| inner::memory::cudaMallocPitch(ptr.cast(), pitch, width, height))
    }
}

export! {
    /// Contexts name devices (see the module documentation of `driver`).
    fn cuMemcpyPeer(dst: u64, dst_ctx: CUcontext, src: u64, src_ctx: CUcontext, size: usize) {
        check_initialized()?;
        let (dst_device, src_device) = (device_of(dst_ctx)?, device_of(src_ctx)?);
        keeping_last_error(|| {
            inner::memory::cudaMemcpyPeer(dst as *mut c_void, dst_device, src as *const c_void, src_device, size)
        })
    }
}
export! {
    fn cuMemcpyPeerAsync(dst: u64, dst_ctx: CUcontext, src: u64, src_ctx: CUcontext, size: usize, stream: RawHandle) {
        check_initialized()?;
        let (dst_device, src_device) = (device_of(dst_ctx)?, device_of(src_ctx)?);
        keeping_last_error(|| {
            inner::memory::cudaMemcpyPeerAsync(dst as *mut c_void, dst_device, src as *const c_void, src_device, size, stream)
        })
    }
}

/// What `cuPointerGetAttributes` writes for a pointer CUDA does not know: the
/// driver's "default NULL values" (a device ordinal of -2, `cudaInvalidDeviceId`; the
/// pointer itself as its host pointer; zero for everything else), by each attribute's
/// type, as measured on driver 580. The range's start and size are left as they were
/// (None), and P2P tokens are `CUDA_ERROR_INVALID_VALUE`, as there.
fn unknown_pointer_default(attribute: u32, ptr: u64) -> Result<Option<(u64, usize)>> {
    Ok(Some(match attribute {
        // The host pointer of host memory is the pointer itself.
        ATTR_HOST_POINTER => (ptr, 8),
        ATTR_DEVICE_ORDINAL => (-2i32 as u32 as u64, 4),
        ATTR_CONTEXT
        | ATTR_DEVICE_POINTER
        | ATTR_BUFFER_ID
        | ATTR_MEMPOOL_HANDLE
        | ATTR_MAPPING_SIZE
        | ATTR_MAPPING_BASE_ADDR
        | ATTR_MEMORY_BLOCK_ID
        | ATTR_ALLOWED_HANDLE_TYPES => (0, 8),
        ATTR_MEMORY_TYPE
        | ATTR_SYNC_MEMOPS
        | ATTR_IS_MANAGED
        | ATTR_IS_LEGACY_CUDA_IPC_CAPABLE
        | ATTR_MAPPED
        | ATTR_IS_GPU_DIRECT_RDMA_CAPABLE
        | ATTR_ACCESS_FLAGS
        | ATTR_IS_HW_DECOMPRESS_CAPABLE => (0, 4),
        ATTR_RANGE_START_ADDR | ATTR_RANGE_SIZE => return Ok(None),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    }))
}

export! {
    /// Each attribute as `cuPointerGetAttribute` answers it. Unlike that function, a
    /// pointer CUDA does not know is no error: its attributes get default values.
    fn cuPointerGetAttributes(count: u32, attributes: *const u32, data: *const *mut c_void, ptr: u64) {
        check_initialized()?;
        let a = pointer_attributes(ptr)?;
        for i in 0..count as usize {
            // SAFETY: by cuPointerGetAttributes's contract both arrays hold `count`
            // entries.
            let (attribute, out) = unsafe {
                (caller::read(attributes.add(i))?, caller::read(data.add(i))?)
            };
            let value = if a.memory_type == 0 {
                match unknown_pointer_default(attribute, ptr)? {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                known_attribute(attribute, ptr, &a)?
            };
            // SAFETY: by cuPointerGetAttributes's contract `out` is NULL or writable
            // for the attribute's type.
            unsafe { write_attribute(out, value) }?;
        }
        Ok(())
    }
}

// `cuMemGetAttribute` and `cuMemGetAttribute_v2` are deprecated exports with no
// signature in any public header. NVIDIA's driver (580.159.04 on the H200) answers
// CUDA_ERROR_NOT_SUPPORTED at once whatever it is passed: each body is
// `mov $0x321, %eax; ret` (tests/gpu/results/RESULTS-DRIVER-ANSWERS.md). These answer
// the same, reading no argument.
export! {
    fn cuMemGetAttribute() {
        Err(status(super::result::CUDA_ERROR_NOT_SUPPORTED))
    }
}

export! {
    fn cuMemGetAttribute_v2() {
        Err(status(super::result::CUDA_ERROR_NOT_SUPPORTED))
    }
}
