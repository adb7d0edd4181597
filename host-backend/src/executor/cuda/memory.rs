//! Device memory: allocation, fills, host registration and pointer attributes.

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::result::stream::StreamKind;
use cudarc::driver::{result, sys};
use vmcuda_wire::op::{DevicePtr, PointerAttributes};

use super::super::{DeviceRange, ExecResult, ExecStream, PitchedRange, StreamOrder, LEGACY_STREAM};
use super::{check, status, to_usize, CudaExecutor};
use crate::executor::{IpcExported, MemoryExec, IPC_HANDLE_LEN};
use std::os::fd::OwnedFd;

/// `CU_DEVICE_INVALID` (`(CUdevice)-2` in cuda.h): the device ordinal the driver
/// reports for a pointer it does not know.
const CU_DEVICE_INVALID: c_int = -2;

/// A driver IPC handle (`CUipcMemHandle`, `CUipcEventHandle`: 64 `c_char`s) from its
/// bytes; any other length is refused.
pub(super) fn ipc_handle_bytes(handle: &[u8]) -> ExecResult<[std::ffi::c_char; IPC_HANDLE_LEN]> {
    let bytes: &[u8; IPC_HANDLE_LEN] = handle
        .try_into()
        .map_err(|_| vmcuda_wire::CudaStatus::ErrorInvalidValue)?;
    Ok(bytes.map(|b| b as std::ffi::c_char))
}

impl CudaExecutor {
    /// Whether `[ptr, ptr + len)` lies inside one registered (page-locked) range.
    pub(super) fn page_locked(&self, ptr: usize, len: usize) -> bool {
        self.registered
            .iter()
            .any(|(s, l)| ptr >= *s && ptr + len <= s + l)
    }

    /// Device `idx`'s scrub stream (its context must be current), made on first use.
    fn scrub_stream(&mut self, idx: usize) -> ExecResult<sys::CUstream> {
        if let Some(s) = self.devices[idx].scrub_stream {
            return Ok(s);
        }
        // A context is current; CU_STREAM_NON_BLOCKING.
        let s = result::stream::create(StreamKind::NonBlocking).map_err(status)?;
        self.devices[idx].scrub_stream = Some(s);
        Ok(s)
    }
}

impl MemoryExec for CudaExecutor {
    fn ipc_export_memory(&mut self, ptr: DevicePtr) -> ExecResult<IpcExported> {
        self.bind()?;
        let mut handle = sys::CUipcMemHandle {
            reserved: [0; IPC_HANDLE_LEN],
        };
        // SAFETY: out-pointer to a local handle; the driver validates the pointer (the
        // start of an allocation of this guest's, as the session checked); a context
        // is current.
        check(unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) })?;
        Ok(IpcExported {
            handle: handle.reserved.iter().map(|&b| b as u8).collect(),
            shared: None,
        })
    }

    fn ipc_open_memory(
        &mut self,
        handle: &[u8],
        _size: u64,
        flags: u32,
        _shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr> {
        self.bind()?;
        let handle = sys::CUipcMemHandle {
            reserved: ipc_handle_bytes(handle)?,
        };
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the handle is the bytes another worker's
        // driver gave for its export (through the daemon, never from the guest), which
        // the driver validates; a context is current.
        check(unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, handle, flags) })?;
        Ok(ptr)
    }

    fn ipc_close_memory(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        self.bind()?;
        // SAFETY: `ptr` is one ipc_open_memory returned (the session checked), closed
        // once; a context is current.
        check(unsafe { sys::cuIpcCloseMemHandle(ptr) })
    }

    fn mem_info(&mut self) -> ExecResult<(u64, u64)> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(status)?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&mut self, size: u64) -> ExecResult<DevicePtr> {
        self.bind()?;
        if size == 0 {
            return Ok(0);
        }
        let size = to_usize(size)?;
        // SAFETY: a context is current; the memory is zeroed (zero_fill) before the
        // guest hears of it.
        unsafe { result::malloc_sync(size) }.map_err(status)
    }

    fn free(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        self.bind()?;
        if ptr == 0 {
            return Ok(());
        }
        // SAFETY: the driver validates the pointer; a context is current.
        unsafe { result::free_sync(ptr) }.map_err(status)
    }

    fn alloc_pitch(&mut self, width: u64, height: u64) -> ExecResult<(DevicePtr, u64)> {
        self.bind()?;
        if width == 0 || height == 0 {
            return Ok((0, 0));
        }
        let (width, height) = (to_usize(width)?, to_usize(height)?);
        let mut ptr: sys::CUdeviceptr = 0;
        let mut pitch: usize = 0;
        // SAFETY: out-pointers to locals; a context is current.
        check(unsafe { sys::cuMemAllocPitch_v2(&mut ptr, &mut pitch, width, height, 16) })?;
        Ok((ptr, pitch as u64))
    }

    fn memset(&mut self, dst: DeviceRange, value: u8, order: StreamOrder) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let (dst, size) = (dst.ptr(), dst.len_usize());
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: the device range is validated by the driver.
            return unsafe { result::memset_d8_sync(dst, value, size) }.map_err(status);
        }
        // SAFETY: as above; `s` is checked.
        unsafe { result::memset_d8_async(dst, value, size, s) }.map_err(status)
    }

    fn zero_in_capture(&mut self, dst: DeviceRange, stream: ExecStream) -> ExecResult<()> {
        self.zero_by_kernel(dst, stream)
    }

    fn zero_fill(&mut self, dst: DevicePtr, size: u64) -> ExecResult<()> {
        let idx = self.bind()?;
        if size == 0 {
            return Ok(());
        }
        let size = to_usize(size)?;
        let s = self.scrub_stream(idx)?;
        // SAFETY: `dst` is an allocation the driver just made; `s` is ours.
        unsafe { result::memset_d8_async(dst, 0, size, s) }.map_err(status)?;
        // SAFETY: as above. Waiting here means the zeroes are in place before the
        // guest hears of the allocation, whatever stream it then uses.
        unsafe { result::stream::synchronize(s) }.map_err(status)
    }

    fn memset_2d(&mut self, dst: PitchedRange, value: u8, order: StreamOrder) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        if dst.width() == 0 || dst.height() == 0 {
            return Ok(());
        }
        let ptr = dst.ptr();
        let (pitch, width, height) = (
            to_usize(dst.pitch())?,
            to_usize(dst.width())?,
            to_usize(dst.height())?,
        );
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: the session checked the range is the guest's own device memory.
            return check(unsafe { sys::cuMemsetD2D8_v2(ptr, pitch, value, width, height) });
        }
        // SAFETY: as above; `s` is checked.
        check(unsafe { sys::cuMemsetD2D8Async(ptr, pitch, value, width, height, s) })
    }

    fn host_register(&mut self, ptr: u64, size: u64) -> ExecResult<DevicePtr> {
        self.bind()?;
        let size = to_usize(size)?;
        // Portable (every context) and mapped (reachable from kernels), as CUDA 13 treats
        // all pinned memory.
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the session mapped `[ptr, ptr + size)` into this process (shared
        // with the guest) before calling, and keeps it mapped until host_unregister.
        check(unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, size, flags) })?;
        self.registered.push((ptr as usize, size));
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` was registered just above; the driver writes one CUdeviceptr.
        let r =
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, ptr as *mut c_void, 0) };
        if let Err(e) = check(r) {
            // SAFETY: undoing the registration made above.
            unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) };
            self.registered.retain(|(p, _)| *p != ptr as usize);
            return Err(e);
        }
        Ok(device_ptr)
    }

    fn host_unregister(&mut self, ptr: u64) -> ExecResult<()> {
        self.bind()?;
        self.registered.retain(|(p, _)| *p != ptr as usize);
        // SAFETY: the driver checks that `ptr` starts a registered range.
        check(unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) })
    }

    /// For a pointer the driver does not know, the answer is what the driver fills in
    /// (memory type 0 = `cudaMemoryTypeUnregistered`, device `CU_DEVICE_INVALID` = -2,
    /// device pointer 0), which is what the runtime reports from it.
    fn pointer_attributes(&mut self, ptr: DevicePtr) -> ExecResult<PointerAttributes> {
        self.bind()?;
        let mut memory_type: c_uint = 0;
        // Written as a C bool (one byte) or int: zeroed either way.
        let mut is_managed: c_uint = 0;
        let mut ordinal: c_int = CU_DEVICE_INVALID;
        let mut device_pointer: sys::CUdeviceptr = 0;
        use sys::CUpointer_attribute as P;
        let mut attributes = [
            P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            P::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        ];
        let mut data: [*mut c_void; 4] = [
            (&mut memory_type as *mut c_uint).cast(),
            (&mut is_managed as *mut c_uint).cast(),
            (&mut ordinal as *mut c_int).cast(),
            (&mut device_pointer as *mut sys::CUdeviceptr).cast(),
        ];
        // SAFETY: four attributes, each with a data pointer to a local of at least
        // the size the driver writes for it (unsigned int, bool, int, CUdeviceptr).
        let r = unsafe {
            sys::cuPointerGetAttributes(
                attributes.len() as c_uint,
                attributes.as_mut_ptr(),
                data.as_mut_ptr(),
                ptr,
            )
        };
        check(r)?;
        // CUmemorytype: 1 host, 2 device; cudaMemoryType: 1 host, 2 device, 3 managed.
        let memory_type = if is_managed != 0 {
            3
        } else {
            i32::try_from(memory_type).unwrap_or(0)
        };
        Ok(PointerAttributes {
            memory_type,
            device: ordinal,
            device_pointer,
        })
    }
}
