//! The older ABIs of driver functions whose current ABI vmcuda serves: the names
//! cuda.h maps to `_v2`, `_v3`... (`cuMemAlloc` for `cuMemAlloc_v2`), which old binaries
//! and programs built with `__CUDA_API_VERSION_INTERNAL` still call, and the
//! per-thread default stream variants the stream functions lacked.
//!
//! **CUDA 3.1's 32-bit ABI.** Before CUDA 3.2 device pointers (`CUdeviceptr_v1`) and
//! sizes were `unsigned int`. The real driver serves those entry points only in contexts
//! made for that API (`cuCtxCreate` v1, API version 3010, whose allocations lie below
//! 4 GiB); in a context of the current API they return `CUDA_ERROR_INVALID_CONTEXT`
//! (measured on the H200 with driver 580: `cuMemAlloc` and `cuMemGetInfo` in a primary
//! context), and so do the current ABI's functions in a 3010 context. vmcuda's
//! contexts are the current API's (the host allocates 64-bit addresses), so each of
//! them answers `CUDA_ERROR_INVALID_CONTEXT`, as the driver does there, with a line
//! naming it once. `cuDeviceTotalMem` has no pointer: its size is clamped to 32 bits,
//! as the driver clamps it.
//!
//! CUDA 3's `cuCtxDestroy` and `cuCtxPushCurrent` refuse a current-API context alike
//! (measured); its `cuCtxPopCurrent` pops it. `cuCtxCreate` (v1) makes the primary
//! context, as `cuCtxCreate_v4` does (natively it would make a CUDA 3 context).
//!
//! **Same arguments, older meaning.** CUDA 4.0's stream and event calls
//! (`cuStreamDestroy`...), CUDA 11's primary-context calls and the linker's calls
//! changed semantics in ways vmcuda's one-context-per-device model does not tell
//! apart: they are their successors, except that CUDA 11.0's
//! `cuDevicePrimaryCtxSetFlags` refuses an active primary context
//! (`CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`, measured).
//!
//! **Fewer arguments.** Graph calls before edge data (CUDA 12.3), kernel node
//! parameters before `CUkernel` (12.0), `cuGraphInstantiate` with its error log
//! (before 12.0), stream capture without a mode (10.0), batch copies with a failure
//! index (12.8): each converts to its successor's arguments.

use std::ffi::{c_char, c_void};

use vmcuda_wire::CudaStatus;

use super::context::{self, device_of, CUcontext};
use super::graph::{
    cuGraphAddKernelNode_v2, cuGraphExecKernelNodeSetParams_v2, cuGraphKernelNodeGetParams_v2,
    cuGraphKernelNodeSetParams_v2,
};
use super::result::{status, CUresult, CUDA_ERROR_INVALID_CONTEXT, CUDA_SUCCESS};
use super::{check_initialized, export, twins, Result};
use crate::abi::driver::DriverMemcpy3D;
use crate::abi::driver::{KernelNodeParams, KernelNodeParamsV1};
use crate::abi::runtime::{ExecUpdateResultInfo, InstantiateParams};
use crate::caller;
use crate::driver::inner::RawHandle;

/// `CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY`.
const UNSUPPORTED_EXEC_AFFINITY: CudaStatus = CudaStatus(224);
/// `CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`.
const CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: CUresult = 708;
/// `CU_STREAM_CAPTURE_MODE_GLOBAL`: what a capture begun without a mode is.
const CAPTURE_MODE_GLOBAL: u32 = 0;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: RawHandle = 2 as RawHandle;

/// The line a CUDA 3.1 ABI function prints (once).
pub fn v1_message(name: &str) -> String {
    format!(
        "vmcuda: {name} (libcuda.so.1) belongs to the CUDA 3 API (32-bit device pointers), which \
         the driver serves only in contexts made for it; vmcuda's contexts are the current \
         API's, so it returns CUDA_ERROR_INVALID_CONTEXT, as the driver does in such a context"
    )
}

fn v1_abi(name: &str) -> Result<()> {
    check_initialized()?;
    crate::notice::say_once(&v1_message(name));
    Err(status(CUDA_ERROR_INVALID_CONTEXT))
}

/// The CUDA 3.1 ABI functions (see the module documentation): each signature as
/// cuda.h declares it under `__CUDA_API_VERSION_INTERNAL`.
macro_rules! v1_abi {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            export! {
                fn $name($($arg: $ty),*) {
                    $(let _ = $arg;)*
                    v1_abi(stringify!($name))
                }
            }
        )*
        /// Their names and implementations.
        pub const V1_ABI: &[(&str, *const ())] = &[$((stringify!($name), $name as *const ())),*];
    };
}

v1_abi! {
    // CUDA 3's context calls taking a context: a current-API context is refused.
    cuCtxDestroy(ctx: CUcontext);
    cuCtxPushCurrent(ctx: CUcontext);
    cuMemGetInfo(free: *mut u32, total: *mut u32);
    cuMemAlloc(dptr: *mut u32, bytes: u32);
    cuMemAllocPitch(dptr: *mut u32, pitch: *mut u32, width: u32, height: u32, element: u32);
    cuMemFree(dptr: u32);
    cuMemGetAddressRange(base: *mut u32, size: *mut u32, dptr: u32);
    cuMemAllocHost(ptr: *mut *mut c_void, bytes: u32);
    cuMemHostGetDevicePointer(dptr: *mut u32, ptr: *mut c_void, flags: u32);
    cuModuleGetGlobal(dptr: *mut u32, bytes: *mut u32, module: *mut c_void, name: *const c_char);
    cuMemcpyHtoD(dst: u32, src: *const c_void, count: u32);
    cuMemcpyDtoH(dst: *mut c_void, src: u32, count: u32);
    cuMemcpyDtoD(dst: u32, src: u32, count: u32);
    cuMemcpyDtoA(dst: RawHandle, offset: u32, src: u32, count: u32);
    cuMemcpyAtoD(dst: u32, src: RawHandle, offset: u32, count: u32);
    cuMemcpyHtoA(dst: RawHandle, offset: u32, src: *const c_void, count: u32);
    cuMemcpyAtoH(dst: *mut c_void, src: RawHandle, offset: u32, count: u32);
    cuMemcpyAtoA(dst: RawHandle, dst_offset: u32, src: RawHandle, src_offset: u32, count: u32);
    cuMemcpyHtoAAsync(dst: RawHandle, offset: u32, src: *const c_void, count: u32, stream: RawHandle);
    cuMemcpyAtoHAsync(dst: *mut c_void, src: RawHandle, offset: u32, count: u32, stream: RawHandle);
    cuMemcpy2D(copy: *const c_void);
    cuMemcpy2DUnaligned(copy: *const c_void);
    cuMemcpy3D(copy: *const c_void);
    cuMemcpyHtoDAsync(dst: u32, src: *const c_void, count: u32, stream: RawHandle);
    cuMemcpyDtoHAsync(dst: *mut c_void, src: u32, count: u32, stream: RawHandle);
    cuMemcpyDtoDAsync(dst: u32, src: u32, count: u32, stream: RawHandle);
    cuMemcpy2DAsync(copy: *const c_void, stream: RawHandle);
    cuMemcpy3DAsync(copy: *const c_void, stream: RawHandle);
    cuMemsetD8(dst: u32, value: u8, count: u32);
    cuMemsetD16(dst: u32, value: u16, count: u32);
    cuMemsetD32(dst: u32, value: u32, count: u32);
    cuMemsetD2D8(dst: u32, pitch: u32, value: u8, width: u32, height: u32);
    cuMemsetD2D16(dst: u32, pitch: u32, value: u16, width: u32, height: u32);
    cuMemsetD2D32(dst: u32, pitch: u32, value: u32, width: u32, height: u32);
    cuArrayCreate(out: *mut RawHandle, desc: *const c_void);
    cuArrayGetDescriptor(out: *mut c_void, array: RawHandle);
    cuArray3DCreate(out: *mut RawHandle, desc: *const c_void);
    cuArray3DGetDescriptor(out: *mut c_void, array: RawHandle);
    cuTexRefSetAddress(offset: *mut u32, tex: RawHandle, dptr: u32, bytes: u32);
    cuTexRefSetAddress2D(tex: RawHandle, desc: *const c_void, dptr: u32, pitch: u32);
    cuTexRefGetAddress(dptr: *mut u32, tex: RawHandle);
}

export! {
    /// No pointer in it: the device's memory, clamped to 32 bits as the driver clamps it.
    fn cuDeviceTotalMem(bytes: *mut u32, device: i32) {
        let mut total = 0usize;
        done(context::cuDeviceTotalMem_v2(&mut total, device))?;
        // SAFETY: by cuDeviceTotalMem's contract `bytes` is NULL or writable.
        unsafe { caller::write(bytes, total.min(u32::MAX as usize) as u32) }
    }
}

/// A driver export's result as the guard's `Result`.
fn done(code: CUresult) -> Result<()> {
    match code {
        CUDA_SUCCESS => Ok(()),
        e => Err(status(e)),
    }
}

/// Older names with their successor's arguments (see the module documentation).
macro_rules! successors {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?) => $call:expr;)*) => {
        $(
            export! {
                fn $name($($arg: $ty),*) {
                    done($call)
                }
            }
        )*
        /// Their names and implementations.
        const SUCCESSORS: &[(&str, *const ())] = &[$((stringify!($name), $name as *const ())),*];
    };
}

successors! {
    cuCtxCreate(ctx: *mut CUcontext, flags: u32, device: i32)
        => context::cuCtxCreate_v4(ctx, std::ptr::null_mut(), flags, device);
    cuCtxCreate_v2(ctx: *mut CUcontext, flags: u32, device: i32)
        => context::cuCtxCreate_v4(ctx, std::ptr::null_mut(), flags, device);
    cuCtxPopCurrent(ctx: *mut CUcontext) => context::cuCtxPopCurrent_v2(ctx);
    cuDevicePrimaryCtxRelease(device: i32) => context::cuDevicePrimaryCtxRelease_v2(device);
    cuDevicePrimaryCtxReset(device: i32) => context::cuDevicePrimaryCtxReset_v2(device);
    cuDeviceGetUuid(uuid: *mut [u8; 16], device: i32) => context::cuDeviceGetUuid_v2(uuid, device);
    cuStreamDestroy(stream: RawHandle) => super::stream::cuStreamDestroy_v2(stream);
    cuEventDestroy(event: RawHandle) => super::stream::cuEventDestroy_v2(event);
    cuEventElapsedTime(ms: *mut f32, start: RawHandle, end: RawHandle)
        => super::stream::cuEventElapsedTime_v2(ms, start, end);
    cuLinkCreate(count: u32, options: *const u32, values: *const *mut c_void, out: *mut *mut c_void)
        => super::module::cuLinkCreate_v2(count, options, values, out);
    cuLinkAddData(
        link: *mut c_void, kind: u32, data: *const c_void, size: usize, name: *const c_char,
        count: u32, options: *const u32, values: *const *mut c_void,
    ) => super::module::cuLinkAddData_v2(link, kind, data, size, name, count, options, values);
    cuLinkAddFile(
        link: *mut c_void, kind: u32, path: *const c_char,
        count: u32, options: *const u32, values: *const *mut c_void,
    ) => super::module::cuLinkAddFile_v2(link, kind, path, count, options, values);
    cuMemHostRegister(ptr: *mut c_void, size: usize, flags: u32)
        => twins::cuMemHostRegister_v2(ptr, size, flags);
    cuStreamWriteValue32(stream: RawHandle, addr: u64, value: u32, flags: u32)
        => super::stream::cuStreamWriteValue32_v2(stream, addr, value, flags);
    cuStreamWriteValue32_ptsz(stream: RawHandle, addr: u64, value: u32, flags: u32)
        => twins::cuStreamWriteValue32_v2_ptsz(stream, addr, value, flags);
    cuStreamWriteValue64(stream: RawHandle, addr: u64, value: u64, flags: u32)
        => super::stream::cuStreamWriteValue64_v2(stream, addr, value, flags);
    cuStreamWriteValue64_ptsz(stream: RawHandle, addr: u64, value: u64, flags: u32)
        => twins::cuStreamWriteValue64_v2_ptsz(stream, addr, value, flags);
    cuStreamWaitValue32(stream: RawHandle, addr: u64, value: u32, flags: u32)
        => super::stream::cuStreamWaitValue32_v2(stream, addr, value, flags);
    cuStreamWaitValue32_ptsz(stream: RawHandle, addr: u64, value: u32, flags: u32)
        => twins::cuStreamWaitValue32_v2_ptsz(stream, addr, value, flags);
    cuStreamWaitValue64(stream: RawHandle, addr: u64, value: u64, flags: u32)
        => super::stream::cuStreamWaitValue64_v2(stream, addr, value, flags);
    cuStreamWaitValue64_ptsz(stream: RawHandle, addr: u64, value: u64, flags: u32)
        => twins::cuStreamWaitValue64_v2_ptsz(stream, addr, value, flags);
    cuStreamBatchMemOp(stream: RawHandle, count: u32, params: *const crate::abi::driver::RawMemOp, flags: u32)
        => super::stream::cuStreamBatchMemOp_v2(stream, count, params, flags);
    cuStreamBatchMemOp_ptsz(stream: RawHandle, count: u32, params: *const crate::abi::driver::RawMemOp, flags: u32)
        => twins::cuStreamBatchMemOp_v2_ptsz(stream, count, params, flags);
    cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64)
        => super::proc_address::cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut());
    cuStreamBeginCapture(stream: RawHandle) => twins::cuStreamBeginCapture_v2(stream, CAPTURE_MODE_GLOBAL);
    cuStreamBeginCapture_ptsz(stream: RawHandle)
        => twins::cuStreamBeginCapture_v2_ptsz(stream, CAPTURE_MODE_GLOBAL);
    cuStreamGetCaptureInfo(stream: RawHandle, status: *mut u32, id: *mut u64)
        => twins::cuStreamGetCaptureInfo_v3(stream, status, id, std::ptr::null_mut(),
            std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    cuStreamGetCaptureInfo_ptsz(stream: RawHandle, status: *mut u32, id: *mut u64)
        => twins::cuStreamGetCaptureInfo_v3_ptsz(stream, status, id, std::ptr::null_mut(),
            std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    cuStreamUpdateCaptureDependencies(stream: RawHandle, deps: *const RawHandle, count: usize, flags: u32)
        => twins::cuStreamUpdateCaptureDependencies_v2(stream, deps, std::ptr::null(), count, flags);
    cuStreamUpdateCaptureDependencies_ptsz(stream: RawHandle, deps: *const RawHandle, count: usize, flags: u32)
        => twins::cuStreamUpdateCaptureDependencies_v2_ptsz(stream, deps, std::ptr::null(), count, flags);
    cuStreamBeginCaptureToGraph_ptsz(
        stream: RawHandle, graph: RawHandle, deps: *const RawHandle, edges: *const u64, count: usize, mode: u32,
    ) => twins::cuStreamBeginCaptureToGraph(per_thread(stream), graph, deps, edges, count, mode);
    cuStreamGetCtx_ptsz(stream: RawHandle, ctx: *mut CUcontext)
        => twins::cuStreamGetCtx(per_thread(stream), ctx);
    cuStreamGetCtx_v2_ptsz(stream: RawHandle, ctx: *mut CUcontext, green: *mut RawHandle)
        => twins::cuStreamGetCtx_v2(per_thread(stream), ctx, green);
    cuMemcpy3DAsync_v2_ptsz(copy: *const DriverMemcpy3D, stream: RawHandle)
        => super::array::cuMemcpy3DAsync_v2(copy, per_thread(stream));
    cuGraphAddDependencies(graph: RawHandle, from: *const RawHandle, to: *const RawHandle, count: usize)
        => twins::cuGraphAddDependencies_v2(graph, from, to, std::ptr::null(), count);
    cuGraphRemoveDependencies(graph: RawHandle, from: *const RawHandle, to: *const RawHandle, count: usize)
        => twins::cuGraphRemoveDependencies_v2(graph, from, to, std::ptr::null(), count);
    cuGraphGetEdges(graph: RawHandle, from: *mut RawHandle, to: *mut RawHandle, count: *mut usize)
        => twins::cuGraphGetEdges_v2(graph, from, to, std::ptr::null_mut(), count);
    cuGraphNodeGetDependencies(node: RawHandle, deps: *mut RawHandle, count: *mut usize)
        => twins::cuGraphNodeGetDependencies_v2(node, deps, std::ptr::null_mut(), count);
    cuGraphNodeGetDependentNodes(node: RawHandle, nodes: *mut RawHandle, count: *mut usize)
        => twins::cuGraphNodeGetDependentNodes_v2(node, nodes, std::ptr::null_mut(), count);
    cuGraphAddNode(
        out: *mut RawHandle, graph: RawHandle, deps: *const RawHandle, count: usize,
        params: *mut crate::abi::runtime::GraphNodeParams,
    ) => super::graph::cuGraphAddNode_v2(out, graph, deps, std::ptr::null(), count, params);
}

/// A `_ptsz` stream argument: NULL is the thread's default stream.
fn per_thread(stream: RawHandle) -> RawHandle {
    if stream.is_null() {
        PER_THREAD
    } else {
        stream
    }
}

export! {
    /// Before CUDA 11.1 the flags of an active primary context could not change.
    fn cuDevicePrimaryCtxSetFlags(device: i32, flags: u32) {
        let (mut f, mut active) = (0u32, 0i32);
        done(context::cuDevicePrimaryCtxGetState(device, &mut f, &mut active))?;
        if active != 0 {
            return Err(status(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE));
        }
        done(context::cuDevicePrimaryCtxSetFlags_v2(device, flags))
    }
}

export! {
    /// CUDA 11.4's context creation with execution affinity: the primary context, as
    /// `cuCtxCreate_v4` makes it. SM-count affinity is not served
    /// (`cuDeviceGetExecAffinitySupport` reports none), so asking for it is
    /// `CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY`, as on a device without it.
    fn cuCtxCreate_v3(ctx: *mut CUcontext, params: *const c_void, count: i32, flags: u32, device: i32) {
        check_initialized()?;
        if count < 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if count > 0 && !params.is_null() {
            return Err(UNSUPPORTED_EXEC_AFFINITY);
        }
        done(context::cuCtxCreate_v4(ctx, std::ptr::null_mut(), flags, device))
    }
}

export! {
    /// CUDA 12.8's form, naming the context (NULL: the current one).
    fn cuCtxGetDevice_v2(device: *mut i32, ctx: CUcontext) {
        let d = if ctx.is_null() { context::current_device()? } else { device_of(ctx)? };
        // SAFETY: by cuCtxGetDevice_v2's contract `device` is NULL or writable.
        unsafe { caller::write(device, d) }
    }
}

export! {
    /// CUDA 12.8's form, naming the context (NULL: the current one): waits for its
    /// device's work.
    fn cuCtxSynchronize_v2(ctx: CUcontext) {
        let device = if ctx.is_null() { context::current_device()? } else { device_of(ctx)? };
        context::synchronize_device(device)
    }
}

/// The current form of a v1 kernel node's parameters.
///
/// # Safety
/// `p` is NULL or readable.
unsafe fn kernel_params(p: *const KernelNodeParamsV1) -> Result<KernelNodeParams> {
    // SAFETY: as the caller promised.
    let v1 = unsafe { caller::read(p) }?;
    Ok(KernelNodeParams {
        func: v1.func,
        grid: v1.grid,
        block: v1.block,
        shared_mem: v1.shared_mem,
        kernel_params: v1.kernel_params,
        extra: v1.extra,
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    })
}

export! {
    fn cuGraphAddKernelNode(
        out: *mut RawHandle,
        graph: RawHandle,
        deps: *const RawHandle,
        count: usize,
        params: *const KernelNodeParamsV1,
    ) {
        // SAFETY: by its contract `params` is NULL or readable.
        let p = unsafe { kernel_params(params) }?;
        done(cuGraphAddKernelNode_v2(out, graph, deps, count, &p))
    }
}

export! {
    fn cuGraphKernelNodeSetParams(node: RawHandle, params: *const KernelNodeParamsV1) {
        // SAFETY: by its contract `params` is NULL or readable.
        let p = unsafe { kernel_params(params) }?;
        done(cuGraphKernelNodeSetParams_v2(node, &p))
    }
}

export! {
    fn cuGraphExecKernelNodeSetParams(exec: RawHandle, node: RawHandle, params: *const KernelNodeParamsV1) {
        // SAFETY: by its contract `params` is NULL or readable.
        let p = unsafe { kernel_params(params) }?;
        done(cuGraphExecKernelNodeSetParams_v2(exec, node, &p))
    }
}

export! {
    fn cuGraphKernelNodeGetParams(node: RawHandle, out: *mut KernelNodeParamsV1) {
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: an all-zero `KernelNodeParams` is valid (NULL pointers, zeros).
        let mut p: KernelNodeParams = unsafe { std::mem::zeroed() };
        done(cuGraphKernelNodeGetParams_v2(node, &mut p))?;
        let v1 = KernelNodeParamsV1 {
            func: if p.func.is_null() { p.kern } else { p.func },
            grid: p.grid,
            block: p.block,
            shared_mem: p.shared_mem,
            kernel_params: p.kernel_params,
            extra: p.extra,
        };
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, v1) }
    }
}

export! {
    /// CUDA 10.2's form: the error node and the result through two pointers.
    fn cuGraphExecUpdate(exec: RawHandle, graph: RawHandle, error_node: *mut RawHandle, result: *mut u32) {
        let mut info = ExecUpdateResultInfo {
            result: 0,
            error_node: std::ptr::null_mut(),
            error_from_node: std::ptr::null_mut(),
        };
        let r = twins::cuGraphExecUpdate_v2(exec, graph, &mut info);
        // SAFETY: by cuGraphExecUpdate's contract both outputs are NULL or writable.
        unsafe {
            caller::write_opt(error_node, info.error_node);
            caller::write_opt(result, info.result);
        }
        done(r)
    }
}

/// `cuGraphInstantiate` before CUDA 12 (and its `_v2`): no flags, an error node and a
/// log buffer, which stays empty (vmcuda's instantiation reports its error by code).
///
/// # Safety
/// `error_node` is NULL or writable; `log` is NULL or writable for `size` bytes.
unsafe fn instantiate_with_log(
    exec: *mut RawHandle,
    graph: RawHandle,
    error_node: *mut RawHandle,
    log: *mut c_char,
    size: usize,
) -> Result<()> {
    let r = twins::cuGraphInstantiateWithFlags(exec, graph, 0);
    // SAFETY: as the caller promised.
    unsafe {
        caller::write_opt(error_node, std::ptr::null_mut());
        if size > 0 {
            caller::write_opt(log, 0);
        }
    }
    done(r)
}

export! {
    fn cuGraphInstantiate(exec: *mut RawHandle, graph: RawHandle, error_node: *mut RawHandle, log: *mut c_char, size: usize) {
        // SAFETY: by cuGraphInstantiate's contract its outputs are as required.
        unsafe { instantiate_with_log(exec, graph, error_node, log, size) }
    }
}

export! {
    fn cuGraphInstantiate_v2(exec: *mut RawHandle, graph: RawHandle, error_node: *mut RawHandle, log: *mut c_char, size: usize) {
        // SAFETY: by cuGraphInstantiate_v2's contract its outputs are as required.
        unsafe { instantiate_with_log(exec, graph, error_node, log, size) }
    }
}

export! {
    /// The upload stream, when an upload is asked for, NULL meaning the thread's stream.
    fn cuGraphInstantiateWithParams_ptsz(exec: *mut RawHandle, graph: RawHandle, params: *mut InstantiateParams) {
        // SAFETY: by its contract `params` is NULL or readable and writable.
        let mut p = unsafe { caller::read(params) }?;
        p.upload_stream = per_thread(p.upload_stream);
        let r = twins::cuGraphInstantiateWithParams(exec, graph, &mut p);
        // SAFETY: as above.
        unsafe { caller::write(params.cast::<u8>().wrapping_add(16).cast::<RawHandle>(), p.error_node) }?;
        // SAFETY: as above.
        unsafe { caller::write(params.cast::<u8>().wrapping_add(24).cast::<u32>(), p.result) }?;
        done(r)
    }
}

/// `SIZE_MAX`: a batch copy's failure not tied to one of its copies.
const NO_COPY: usize = usize::MAX;

/// A batch copy's result, with CUDA 12.8's failure index written on failure.
///
/// # Safety
/// `fail_index` is NULL or writable.
unsafe fn with_fail_index(code: CUresult, fail_index: *mut usize) -> Result<()> {
    if code != CUDA_SUCCESS {
        // SAFETY: as the caller promised.
        unsafe { caller::write_opt(fail_index, NO_COPY) };
    }
    done(code)
}

export! {
    fn cuMemcpyBatchAsync(
        dsts: *const *mut c_void, srcs: *const *const c_void, sizes: *const usize, count: usize,
        attrs: *mut c_void, attrs_idxs: *mut usize, num_attrs: usize, fail_index: *mut usize, stream: RawHandle,
    ) {
        let r = twins::cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream);
        // SAFETY: by its contract `fail_index` is NULL or writable.
        unsafe { with_fail_index(r, fail_index) }
    }
}

export! {
    fn cuMemcpyBatchAsync_ptsz(
        dsts: *const *mut c_void, srcs: *const *const c_void, sizes: *const usize, count: usize,
        attrs: *mut c_void, attrs_idxs: *mut usize, num_attrs: usize, fail_index: *mut usize, stream: RawHandle,
    ) {
        let r = twins::cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream);
        // SAFETY: by its contract `fail_index` is NULL or writable.
        unsafe { with_fail_index(r, fail_index) }
    }
}

export! {
    fn cuMemcpy3DBatchAsync(
        count: usize, ops: *const crate::abi::runtime::Memcpy3DBatchOp, fail_index: *mut usize, flags: u64, stream: RawHandle,
    ) {
        let r = twins::cuMemcpy3DBatchAsync_v2(count, ops, flags, stream);
        // SAFETY: by its contract `fail_index` is NULL or writable.
        unsafe { with_fail_index(r, fail_index) }
    }
}

export! {
    fn cuMemcpy3DBatchAsync_ptsz(
        count: usize, ops: *const crate::abi::runtime::Memcpy3DBatchOp, fail_index: *mut usize, flags: u64, stream: RawHandle,
    ) {
        let r = twins::cuMemcpy3DBatchAsync_v2_ptsz(count, ops, flags, stream);
        // SAFETY: by its contract `fail_index` is NULL or writable.
        unsafe { with_fail_index(r, fail_index) }
    }
}

/// Synchronous copies' `_ptds` variants: a synchronous copy on the legacy stream is
/// ordered with the thread's default stream too (that stream is a blocking one), so
/// each is its base function.
macro_rules! ptds_sync {
    ($($name:ident => $base:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            export! {
                fn $name($($arg: $ty),*) {
                    done(super::array::$base($($arg),*))
                }
            }
        )*
    };
}

ptds_sync! {
    cuMemcpy3D_v2_ptds => cuMemcpy3D_v2(copy: *const DriverMemcpy3D);
    cuMemcpyHtoA_v2_ptds => cuMemcpyHtoA_v2(array: RawHandle, offset: usize, src: *const c_void, count: usize);
    cuMemcpyAtoH_v2_ptds => cuMemcpyAtoH_v2(dst: *mut c_void, array: RawHandle, offset: usize, count: usize);
    cuMemcpyDtoA_v2_ptds => cuMemcpyDtoA_v2(array: RawHandle, offset: usize, src: u64, count: usize);
    cuMemcpyAtoD_v2_ptds => cuMemcpyAtoD_v2(dst: u64, array: RawHandle, offset: usize, count: usize);
}

/// The other functions defined here.
const CONVERTED: &[(&str, *const ())] = &[
    ("cuDeviceTotalMem", cuDeviceTotalMem as *const ()),
    (
        "cuDevicePrimaryCtxSetFlags",
        cuDevicePrimaryCtxSetFlags as *const (),
    ),
    ("cuCtxCreate_v3", cuCtxCreate_v3 as *const ()),
    ("cuCtxGetDevice_v2", cuCtxGetDevice_v2 as *const ()),
    ("cuCtxSynchronize_v2", cuCtxSynchronize_v2 as *const ()),
    ("cuGraphAddKernelNode", cuGraphAddKernelNode as *const ()),
    (
        "cuGraphKernelNodeSetParams",
        cuGraphKernelNodeSetParams as *const (),
    ),
    (
        "cuGraphExecKernelNodeSetParams",
        cuGraphExecKernelNodeSetParams as *const (),
    ),
    (
        "cuGraphKernelNodeGetParams",
        cuGraphKernelNodeGetParams as *const (),
    ),
    ("cuGraphExecUpdate", cuGraphExecUpdate as *const ()),
    ("cuGraphInstantiate", cuGraphInstantiate as *const ()),
    ("cuGraphInstantiate_v2", cuGraphInstantiate_v2 as *const ()),
    ("cuMemcpyBatchAsync", cuMemcpyBatchAsync as *const ()),
    ("cuMemcpy3DBatchAsync", cuMemcpy3DBatchAsync as *const ()),
];

/// A function of this module by its exported name (`cuGetProcAddress` maps base names
/// to the current ABI before it gets here).
pub fn lookup(name: &str) -> Option<*mut c_void> {
    [V1_ABI, SUCCESSORS, CONVERTED, PER_THREAD_NAMES]
        .iter()
        .flat_map(|names| names.iter())
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f.cast_mut().cast())
}

/// The per-thread variants defined here, by exported name, for `cuGetProcAddress`.
pub const PER_THREAD_NAMES: &[(&str, *const ())] = &[
    (
        "cuStreamBeginCapture_ptsz",
        cuStreamBeginCapture_ptsz as *const (),
    ),
    (
        "cuStreamGetCaptureInfo_ptsz",
        cuStreamGetCaptureInfo_ptsz as *const (),
    ),
    (
        "cuStreamUpdateCaptureDependencies_ptsz",
        cuStreamUpdateCaptureDependencies_ptsz as *const (),
    ),
    (
        "cuStreamBeginCaptureToGraph_ptsz",
        cuStreamBeginCaptureToGraph_ptsz as *const (),
    ),
    ("cuStreamGetCtx_ptsz", cuStreamGetCtx_ptsz as *const ()),
    (
        "cuStreamGetCtx_v2_ptsz",
        cuStreamGetCtx_v2_ptsz as *const (),
    ),
    (
        "cuMemcpy3DAsync_v2_ptsz",
        cuMemcpy3DAsync_v2_ptsz as *const (),
    ),
    (
        "cuGraphInstantiateWithParams_ptsz",
        cuGraphInstantiateWithParams_ptsz as *const (),
    ),
    (
        "cuMemcpyBatchAsync_ptsz",
        cuMemcpyBatchAsync_ptsz as *const (),
    ),
    (
        "cuMemcpy3DBatchAsync_ptsz",
        cuMemcpy3DBatchAsync_ptsz as *const (),
    ),
    ("cuMemcpy3D_v2_ptds", cuMemcpy3D_v2_ptds as *const ()),
    ("cuMemcpyHtoA_v2_ptds", cuMemcpyHtoA_v2_ptds as *const ()),
    ("cuMemcpyAtoH_v2_ptds", cuMemcpyAtoH_v2_ptds as *const ()),
    ("cuMemcpyDtoA_v2_ptds", cuMemcpyDtoA_v2_ptds as *const ()),
    ("cuMemcpyAtoD_v2_ptds", cuMemcpyAtoD_v2_ptds as *const ()),
    (
        "cuStreamWriteValue32_ptsz",
        cuStreamWriteValue32_ptsz as *const (),
    ),
    (
        "cuStreamWriteValue64_ptsz",
        cuStreamWriteValue64_ptsz as *const (),
    ),
    (
        "cuStreamWaitValue32_ptsz",
        cuStreamWaitValue32_ptsz as *const (),
    ),
    (
        "cuStreamWaitValue64_ptsz",
        cuStreamWaitValue64_ptsz as *const (),
    ),
    (
        "cuStreamBatchMemOp_ptsz",
        cuStreamBatchMemOp_ptsz as *const (),
    ),
];
