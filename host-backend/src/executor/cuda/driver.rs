//! The driver-API calls on a real GPU.
//!
//! The VMM family, the linker and tensor-map encoding take enum arguments; they are
//! called through raw entry points with plain integers (looked up in libcuda by name,
//! as `cuDeviceGetAttribute` is), so a number the guest sent never becomes an invalid
//! Rust enum value: the driver judges it and answers with its own error. Device
//! ordinals in allocation properties and access descriptors are the guest's and are
//! translated to this executor's devices.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;

use cudarc::driver::sys;
use tracing::warn;
use vmcuda_wire::driver::{
    is_host_location, mem_op, AccessDesc, AllocationProp, DecompressOp, Linked, MemOp,
    TensorMapEncodeIm2col, TensorMapEncodeTiled, TENSOR_MAP_LEN,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::driver::{Driver, ExecAllocation, LinkInputData};
use super::super::{ExecResult, ExecStream, StreamOrder, LEGACY_STREAM};
use super::abi::{RawAccessDesc, RawAllocationProp, RawDecompress, RawLocation};
use super::{check, to_usize, CudaExecutor};

type CuResult = c_uint;
type AddressReserve = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> CuResult;
type AddressFree = unsafe extern "C" fn(u64, usize) -> CuResult;
type Create = unsafe extern "C" fn(*mut u64, usize, *const RawAllocationProp, u64) -> CuResult;
type Release = unsafe extern "C" fn(u64) -> CuResult;
type Map = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> CuResult;
type Unmap = unsafe extern "C" fn(u64, usize) -> CuResult;
type SetAccess = unsafe extern "C" fn(u64, usize, *const RawAccessDesc, usize) -> CuResult;
type GetAccess = unsafe extern "C" fn(*mut u64, *const RawLocation, u64) -> CuResult;
type Granularity = unsafe extern "C" fn(*mut usize, *const RawAllocationProp, c_uint) -> CuResult;
type ExportShareable = unsafe extern "C" fn(*mut c_void, u64, c_uint, u64) -> CuResult;
type ImportShareable = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CuResult;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: c_uint = 1;
type LinkCreate =
    unsafe extern "C" fn(c_uint, *mut c_uint, *mut *mut c_void, *mut *mut c_void) -> CuResult;
type LinkAddData = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    *mut c_void,
    usize,
    *const c_char,
    c_uint,
    *mut c_uint,
    *mut *mut c_void,
) -> CuResult;
type LinkComplete = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut usize) -> CuResult;
type LinkDestroy = unsafe extern "C" fn(*mut c_void) -> CuResult;
type EncodeIm2col = unsafe extern "C" fn(
    *mut u8,
    c_uint,
    c_uint,
    *mut c_void,
    *const u64,
    *const u64,
    *const c_int,
    *const c_int,
    c_uint,
    c_uint,
    *const u32,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
) -> CuResult;
type EncodeIm2colWide = unsafe extern "C" fn(
    *mut u8,
    c_uint,
    c_uint,
    *mut c_void,
    *const u64,
    *const u64,
    c_int,
    c_int,
    c_uint,
    c_uint,
    *const u32,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
) -> CuResult;
type ReplaceAddress = unsafe extern "C" fn(*mut u8, *mut c_void) -> CuResult;
type BatchDecompress =
    unsafe extern "C" fn(*mut RawDecompress, usize, c_uint, *mut usize, sys::CUstream) -> CuResult;
type EncodeTiled = unsafe extern "C" fn(
    *mut u8,
    c_uint,
    c_uint,
    *mut c_void,
    *const u64,
    *const u64,
    *const u32,
    *const u32,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
) -> CuResult;

/// A driver entry point by name, with the C signature `F`; a driver without it
/// answers `cudaErrorNotSupported`.
///
/// # Safety
/// `F` must be the symbol's C signature.
unsafe fn entry<F: Copy>(name: &str) -> ExecResult<F> {
    // SAFETY: the executor exists, so cudarc found and loaded libcuda; the caller
    // vouches for the signature.
    unsafe { super::entry_point(sys::culib(), "libcuda", name) }
}

fn status(r: CuResult) -> ExecResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(CudaStatus::from_driver(r))
    }
}

/// The JIT options asking for the linker's logs (`CU_JIT_INFO_LOG_BUFFER` and
/// `CU_JIT_ERROR_LOG_BUFFER`, each with its size).
const LOG_LEN: usize = 16 << 10;

/// A NUL-terminated log buffer as text.
fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl CudaExecutor {
    /// The executor's device for a guest's ordinal.
    fn device_handle(&self, ordinal: i32) -> ExecResult<c_int> {
        Ok(self.devices[self.device_index(ordinal)?].handle)
    }

    fn raw_prop(&self, prop: &AllocationProp) -> ExecResult<RawAllocationProp> {
        Ok(RawAllocationProp {
            alloc_type: prop.alloc_type,
            requested_handle_types: prop.requested_handle_types,
            location_type: prop.location_type,
            // A host location's id is the host's NUMA node (or unused), no device.
            location_id: if is_host_location(prop.location_type) {
                prop.location_id
            } else {
                self.device_handle(prop.location_id)?
            },
            win32_handle_meta_data: ptr::null_mut(),
            compression_type: prop.compression_type,
            gpu_direct_rdma_capable: prop.gpu_direct_rdma_capable,
            usage: prop.usage,
            reserved: [0; 4],
        })
    }
}

impl Driver for CudaExecutor {
    fn memset_elements(
        &mut self,
        dst: DevicePtr,
        value: u32,
        element_size: u8,
        count: u64,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        let n = to_usize(count)?;
        let sync = !is_async && stream == LEGACY_STREAM;
        // SAFETY: the session checked the range lies in the guest's memory; `s` is a
        // checked stream.
        let r = unsafe {
            match (element_size, sync) {
                (2, true) => sys::cuMemsetD16_v2(dst, value as u16, n),
                (2, false) => sys::cuMemsetD16Async(dst, value as u16, n, s),
                (4, true) => sys::cuMemsetD32_v2(dst, value, n),
                (4, false) => sys::cuMemsetD32Async(dst, value, n, s),
                _ => return Err(CudaStatus::ErrorInvalidValue),
            }
        };
        check(r)
    }

    fn stream_write_value32(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u32,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: the session checked the 4 bytes lie in the guest's memory.
        check(unsafe { sys::cuStreamWriteValue32_v2(s, addr, value, flags) })
    }

    fn stream_write_value64(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: the session checked the 8 bytes lie in the guest's memory.
        check(unsafe { sys::cuStreamWriteValue64_v2(s, addr, value, flags) })
    }

    fn stream_wait_value(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        width: u8,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: the session checked the word lies in the guest's memory; the driver
        // only reads it (on the device, when the stream gets there).
        check(unsafe {
            match width {
                4 => sys::cuStreamWaitValue32_v2(s, addr, value as u32, flags),
                _ => sys::cuStreamWaitValue64_v2(s, addr, value, flags),
            }
        })
    }

    fn stream_batch_mem_op(&mut self, stream: ExecStream, ops: &[MemOp]) -> ExecResult<()> {
        const _: () =
            assert!(std::mem::size_of::<sys::CUstreamBatchMemOpParams>() == mem_op::PARAMS_LEN);
        self.bind()?;
        let s = self.stream(stream)?;
        let mut params: Vec<sys::CUstreamBatchMemOpParams> = ops
            .iter()
            .map(|op| {
                let raw = op.to_c();
                // SAFETY: the union is plain data of exactly these 48 bytes (asserted
                // above), laid out as `MemOp::to_c` writes them: cuda.h's layout.
                unsafe {
                    std::mem::transmute::<[u8; mem_op::PARAMS_LEN], sys::CUstreamBatchMemOpParams>(
                        raw,
                    )
                }
            })
            .collect();
        let count = c_uint::try_from(params.len()).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        // SAFETY: `params` holds `count` operations whose words the session checked lie
        // in the guest's memory; the driver copies the array before it returns.
        check(unsafe { sys::cuStreamBatchMemOp_v2(s, count, params.as_mut_ptr(), 0) })
    }

    fn mem_batch_decompress(
        &mut self,
        stream: ExecStream,
        ops: &[DecompressOp],
    ) -> ExecResult<(CudaStatus, u64)> {
        self.bind()?;
        let s = self.stream(stream)?;
        let mut raw = ops
            .iter()
            .map(|op| {
                Ok(RawDecompress {
                    src_bytes: to_usize(op.src_bytes)?,
                    dst_bytes: to_usize(op.dst_bytes)?,
                    dst_act_bytes: op.dst_act_bytes as usize as *mut u32,
                    src: op.src as usize as *const c_void,
                    dst: op.dst as usize as *mut c_void,
                    algo: op.algo,
                    padding: [0; 20],
                })
            })
            .collect::<ExecResult<Vec<_>>>()?;
        // SAFETY: the signature is cuMemBatchDecompressAsync's (the algorithm an
        // integer).
        let f: BatchDecompress = unsafe { entry("cuMemBatchDecompressAsync")? };
        let mut index = usize::MAX;
        // SAFETY: `raw` holds `raw.len()` operations whose buffers the session checked
        // lie in the guest's device memory; out-pointer to a local; a live stream.
        let r = unsafe { f(raw.as_mut_ptr(), raw.len(), 0, &mut index, s) };
        let index = if r == 0 || index == usize::MAX {
            u64::MAX
        } else {
            index as u64
        };
        Ok((CudaStatus::from_driver(r), index))
    }

    fn mem_address_reserve(
        &mut self,
        size: u64,
        alignment: u64,
        addr: DevicePtr,
        flags: u64,
    ) -> ExecResult<DevicePtr> {
        self.bind()?;
        // SAFETY: the signature is cuMemAddressReserve's.
        let f: AddressReserve = unsafe { entry("cuMemAddressReserve")? };
        let mut ptr = 0u64;
        // SAFETY: out-pointer to a local; the rest are plain values.
        status(unsafe { f(&mut ptr, to_usize(size)?, to_usize(alignment)?, addr, flags) })?;
        Ok(ptr)
    }

    fn mem_address_free(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        // SAFETY: the signature is cuMemAddressFree's.
        let f: AddressFree = unsafe { entry("cuMemAddressFree")? };
        // SAFETY: the session checked the guest reserved exactly this range.
        status(unsafe { f(ptr, to_usize(size)?) })
    }

    fn mem_create(&mut self, size: u64, prop: &AllocationProp) -> ExecResult<ExecAllocation> {
        self.bind()?;
        let raw = self.raw_prop(prop)?;
        // SAFETY: the signature is cuMemCreate's.
        let f: Create = unsafe { entry("cuMemCreate")? };
        let mut handle = 0u64;
        // SAFETY: out-pointer to a local; `raw` outlives the call.
        status(unsafe { f(&mut handle, to_usize(size)?, &raw, 0) })?;
        Ok(handle)
    }

    fn mem_release(&mut self, handle: ExecAllocation) -> ExecResult<()> {
        // SAFETY: the signature is cuMemRelease's.
        let f: Release = unsafe { entry("cuMemRelease")? };
        // SAFETY: the session releases each handle it made exactly once.
        status(unsafe { f(handle) })
    }

    fn mem_map(
        &mut self,
        ptr: DevicePtr,
        size: u64,
        offset: u64,
        handle: ExecAllocation,
    ) -> ExecResult<()> {
        // SAFETY: the signature is cuMemMap's.
        let f: Map = unsafe { entry("cuMemMap")? };
        // SAFETY: the session checked the range is inside a reservation of the guest's
        // and maps nothing yet, and that the handle is the guest's.
        status(unsafe { f(ptr, to_usize(size)?, to_usize(offset)?, handle, 0) })
    }

    fn mem_unmap(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        // SAFETY: the signature is cuMemUnmap's.
        let f: Unmap = unsafe { entry("cuMemUnmap")? };
        // SAFETY: the session checked the range is whole mappings of the guest's.
        status(unsafe { f(ptr, to_usize(size)?) })
    }

    fn mem_set_access(
        &mut self,
        ptr: DevicePtr,
        size: u64,
        descs: &[AccessDesc],
    ) -> ExecResult<()> {
        let raw = descs
            .iter()
            .map(|d| {
                Ok(RawAccessDesc {
                    location_type: d.location_type,
                    location_id: self.device_handle(d.location_id)?,
                    flags: d.flags,
                })
            })
            .collect::<ExecResult<Vec<_>>>()?;
        // SAFETY: the signature is cuMemSetAccess's.
        let f: SetAccess = unsafe { entry("cuMemSetAccess")? };
        // SAFETY: the session checked the range is mapped memory of the guest's; `raw`
        // holds `raw.len()` descriptors and outlives the call.
        status(unsafe { f(ptr, to_usize(size)?, raw.as_ptr(), raw.len()) })
    }

    fn mem_get_access(&mut self, ptr: DevicePtr, location_id: i32) -> ExecResult<u64> {
        let location = RawLocation {
            location_type: vmcuda_wire::driver::MEM_LOCATION_TYPE_DEVICE as c_uint,
            location_id: self.device_handle(location_id)?,
        };
        // SAFETY: the signature is cuMemGetAccess's (the location's type an integer).
        let f: GetAccess = unsafe { entry("cuMemGetAccess")? };
        let mut flags: u64 = 0;
        // SAFETY: out-pointer to a local; the location outlives the call; the session
        // checked `ptr` is mapped memory of the guest's.
        status(unsafe { f(&mut flags, &location, ptr) })?;
        Ok(flags)
    }

    fn mem_allocation_granularity(
        &mut self,
        prop: &AllocationProp,
        option: u32,
    ) -> ExecResult<u64> {
        let raw = self.raw_prop(prop)?;
        // SAFETY: the signature is cuMemGetAllocationGranularity's.
        let f: Granularity = unsafe { entry("cuMemGetAllocationGranularity")? };
        let mut bytes = 0usize;
        // SAFETY: out-pointer to a local; `raw` outlives the call.
        status(unsafe { f(&mut bytes, &raw, option) })?;
        Ok(bytes as u64)
    }

    fn mem_export_shareable(&mut self, handle: ExecAllocation) -> ExecResult<OwnedFd> {
        self.bind()?;
        // SAFETY: the signature is cuMemExportToShareableHandle's.
        let f: ExportShareable = unsafe { entry("cuMemExportToShareableHandle")? };
        let mut fd: c_int = -1;
        // SAFETY: for a POSIX descriptor the driver writes an int through the pointer,
        // a local here; the handle is the guest's (the session checked).
        status(unsafe {
            f(
                (&mut fd as *mut c_int).cast(),
                handle,
                HANDLE_TYPE_POSIX_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(CudaStatus::ErrorOperatingSystem);
        }
        // SAFETY: the driver just opened `fd` for this process and hands it over.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn mem_import_shareable(&mut self, shared: OwnedFd, _size: u64) -> ExecResult<ExecAllocation> {
        self.bind()?;
        // SAFETY: the signature is cuMemImportFromShareableHandle's.
        let f: ImportShareable = unsafe { entry("cuMemImportFromShareableHandle")? };
        let mut handle = 0u64;
        // SAFETY: out-pointer to a local; a POSIX descriptor travels as the pointer's
        // value; `shared` (another worker's export, through the daemon) stays open for
        // the call and is closed after it, as the driver keeps its own reference.
        status(unsafe {
            f(
                &mut handle,
                shared.as_raw_fd() as usize as *mut c_void,
                HANDLE_TYPE_POSIX_FD,
            )
        })?;
        Ok(handle)
    }

    fn link(
        &mut self,
        inputs: &[LinkInputData<'_>],
        extra: &[(u32, u32)],
    ) -> ExecResult<(Vec<u8>, Linked)> {
        self.bind()?;
        // SAFETY: each signature is its function's.
        let (create, add, complete, destroy): (LinkCreate, LinkAddData, LinkComplete, LinkDestroy) = unsafe {
            (
                entry("cuLinkCreate_v2")?,
                entry("cuLinkAddData_v2")?,
                entry("cuLinkComplete")?,
                entry("cuLinkDestroy")?,
            )
        };
        let mut info = vec![0u8; LOG_LEN];
        let mut error = vec![0u8; LOG_LEN];
        // The log buffers, the wall time (written back into its value slot when the
        // link completes), then the program's numeric options (values by value).
        let mut options: Vec<c_uint> = vec![3, 4, 5, 6, 2];
        let mut values: Vec<*mut c_void> = vec![
            info.as_mut_ptr().cast(),
            LOG_LEN as *mut c_void,
            error.as_mut_ptr().cast(),
            LOG_LEN as *mut c_void,
            ptr::null_mut(),
        ];
        for (option, value) in extra {
            options.push(*option);
            values.push(*value as usize as *mut c_void);
        }
        let mut state: *mut c_void = ptr::null_mut();
        // SAFETY: `options.len()` options with their values; the session let through
        // only options whose values are numbers; the log buffers and both arrays live
        // until the state is destroyed below.
        status(unsafe {
            create(
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
                &mut state,
            )
        })?;
        let result = (|| {
            for input in inputs {
                let name = CString::new(input.name).map_err(|_| CudaStatus::ErrorInvalidValue)?;
                // The driver reads PTX as a C string: give it a NUL-terminated copy.
                let mut bytes = input.bytes.to_vec();
                bytes.push(0);
                // SAFETY: `state` is live; `bytes` and `name` outlive the call; no
                // per-input options.
                status(unsafe {
                    add(
                        state,
                        input.kind,
                        bytes.as_mut_ptr().cast(),
                        input.bytes.len(),
                        name.as_ptr(),
                        0,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                })?;
            }
            let mut cubin: *mut c_void = ptr::null_mut();
            let mut size = 0usize;
            // SAFETY: out-pointers to locals; the cubin belongs to `state` and is
            // copied before the state is destroyed.
            status(unsafe { complete(state, &mut cubin, &mut size) })?;
            if cubin.is_null() {
                return Err(CudaStatus::ErrorInvalidKernelImage);
            }
            // SAFETY: the driver returned `size` bytes at `cubin`, alive until destroy.
            Ok(unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec())
        })();
        // SAFETY: `state` was created above and is destroyed once.
        let _ = unsafe { destroy(state) };
        // CU_JIT_WALL_TIME: a float in the low bytes of its value slot.
        let wall_time_ms = f32::from_bits(values[4] as usize as u32);
        let logs = Linked {
            info_log: log_text(&info),
            error_log: log_text(&error),
            wall_time_ms,
        };
        match result {
            Ok(cubin) => Ok((cubin, logs)),
            Err(e) => {
                warn!(error = %e, log = %logs.error_log, "link failed");
                Err(e)
            }
        }
    }

    fn tensor_map_encode_tiled(&mut self, req: &TensorMapEncodeTiled) -> ExecResult<Vec<u8>> {
        // SAFETY: the signature is cuTensorMapEncodeTiled's.
        let f: EncodeTiled = unsafe { entry("cuTensorMapEncodeTiled")? };
        // CUtensorMap is 64-byte aligned.
        #[repr(C, align(64))]
        struct Map([u8; TENSOR_MAP_LEN]);
        let mut map = Map([0; TENSOR_MAP_LEN]);
        let rank = req.global_dim.len() as c_uint;
        // SAFETY: the session checked the shape (rank entries in each array, rank - 1
        // strides); the map is 128 aligned bytes; encoding only computes, it touches
        // no memory at the global address.
        status(unsafe {
            f(
                map.0.as_mut_ptr(),
                req.data_type,
                rank,
                req.global_address as *mut c_void,
                req.global_dim.as_ptr(),
                req.global_strides.as_ptr(),
                req.box_dim.as_ptr(),
                req.element_strides.as_ptr(),
                req.interleave,
                req.swizzle,
                req.l2_promotion,
                req.oob_fill,
            )
        })?;
        Ok(map.0.to_vec())
    }

    fn tensor_map_encode_im2col(&mut self, req: &TensorMapEncodeIm2col) -> ExecResult<Vec<u8>> {
        let mut map = AlignedMap([0; TENSOR_MAP_LEN]);
        let rank = req.global_dim.len() as c_uint;
        // SAFETY: (both arms) the signatures are the driver's, enums as integers; the
        // session checked the shape (rank entries, rank - 1 strides, rank - 2 corners
        // or none for the wide encoding); the map is 128 aligned bytes; encoding only
        // computes, it touches no memory at the global address.
        status(unsafe {
            match req.wide {
                None => {
                    let f: EncodeIm2col = entry("cuTensorMapEncodeIm2col")?;
                    f(
                        map.0.as_mut_ptr(),
                        req.data_type,
                        rank,
                        req.global_address as *mut c_void,
                        req.global_dim.as_ptr(),
                        req.global_strides.as_ptr(),
                        req.lower_corner.as_ptr(),
                        req.upper_corner.as_ptr(),
                        req.channels_per_pixel,
                        req.pixels_per_column,
                        req.element_strides.as_ptr(),
                        req.interleave,
                        req.swizzle,
                        req.l2_promotion,
                        req.oob_fill,
                    )
                }
                Some(w) => {
                    let f: EncodeIm2colWide = entry("cuTensorMapEncodeIm2colWide")?;
                    f(
                        map.0.as_mut_ptr(),
                        req.data_type,
                        rank,
                        req.global_address as *mut c_void,
                        req.global_dim.as_ptr(),
                        req.global_strides.as_ptr(),
                        w.lower_width,
                        w.upper_width,
                        req.channels_per_pixel,
                        req.pixels_per_column,
                        req.element_strides.as_ptr(),
                        req.interleave,
                        w.mode,
                        req.swizzle,
                        req.l2_promotion,
                        req.oob_fill,
                    )
                }
            }
        })?;
        Ok(map.0.to_vec())
    }

    fn tensor_map_replace_address(
        &mut self,
        map: &[u8; TENSOR_MAP_LEN],
        global_address: DevicePtr,
    ) -> ExecResult<Vec<u8>> {
        let mut copy = AlignedMap(*map);
        // SAFETY: the signature is cuTensorMapReplaceAddress's.
        let f: ReplaceAddress = unsafe { entry("cuTensorMapReplaceAddress")? };
        // SAFETY: the copy is 128 aligned bytes of this process's; the driver checks
        // the map it is given and only computes.
        status(unsafe { f(copy.0.as_mut_ptr(), global_address as *mut c_void) })?;
        Ok(copy.0.to_vec())
    }
}

/// A `CUtensorMap`: 128 bytes, 64-byte aligned.
#[repr(C, align(64))]
struct AlignedMap([u8; TENSOR_MAP_LEN]);
