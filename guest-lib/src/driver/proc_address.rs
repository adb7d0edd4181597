//! Driver functions by name (`cuGetProcAddress`, and the runtime's
//! `cudaGetDriverEntryPoint(ByVersion)`): one table, the same implementations as the
//! exports. Names are cuda.h's base names (`cuMemAlloc`); the exported versioned name
//! (`cuMemAlloc_v2`) is accepted too. Another export of the real driver gets its stub
//! (`CUDA_ERROR_NOT_SUPPORTED` when called; [`super::unsupported`] says why it is
//! handed out), except green contexts and multicast; anything else is "not found",
//! cleanly.
//!
//! `cuGetExportTable` (the undocumented tables NVIDIA's runtime asks for) is served by
//! [`super::export_table`]; this table hands out that implementation too.

use std::ffi::{c_char, c_void};

use super::array::*;
use super::context::*;
use super::coredump::*;
use super::export;
use super::export_table::cuGetExportTable;
use super::graph::*;
use super::ipc::*;
use super::launch_legacy::*;
use super::library::*;
use super::memory::*;
use super::module::*;
use super::stream::*;
use super::tensor_map::*;
use super::texref::*;
use super::vmm::*;
use super::{cuDriverGetVersion, cuGetErrorName, cuGetErrorString, cuInit};
use crate::caller;

macro_rules! table {
    ($($base:literal => $f:ident,)*) => {
        /// The implementation for a base or exported name.
        pub fn lookup(name: &str) -> Option<*mut c_void> {
            Some(match name {
                $($base | stringify!($f) => $f as *mut c_void,)*
                // Functions that are nothing but their op: the op table's exports;
                // else the real driver's other exports, as stubs (see `unsupported`).
                // Exports NVIDIA's cuGetProcAddress does not hand out (measured on
                // driver 580: "symbol not found"), although they are exported.
                n if NOT_HANDED_OUT.contains(&n) => return None,
                _ => return super::twins::lookup(name)
                    .or_else(|| super::table::lookup(name))
                    .or_else(|| super::legacy::lookup(name))
                    .or_else(|| per_thread_lookup(name))
                    .or_else(|| super::unsupported::lookup(name)),
            })
        }

        /// Every (base name, exported name) pair, for tests and tools.
        pub const NAMES: &[(&str, &str)] = &[$(($base, stringify!($f)),)*];
    };
}

/// The exports `cuGetProcAddress` does not find, as NVIDIA's does not: the deprecated
/// `cuMemGetAttribute` pair (tests/apps/driver_api.cu compares the answers).
const NOT_HANDED_OUT: &[&str] = &["cuMemGetAttribute", "cuMemGetAttribute_v2"];

table! {
    "cuInit" => cuInit,
    "cuDriverGetVersion" => cuDriverGetVersion,
    "cuGetErrorName" => cuGetErrorName,
    "cuGetErrorString" => cuGetErrorString,
    "cuGetProcAddress" => cuGetProcAddress_v2,
    "cuGetExportTable" => cuGetExportTable,
    "cuArrayCreate" => cuArrayCreate_v2,
    "cuArray3DCreate" => cuArray3DCreate_v2,
    "cuArrayDestroy" => cuArrayDestroy,
    "cuDeviceGetTexture1DLinearMaxWidth" => cuDeviceGetTexture1DLinearMaxWidth,
    "cuArrayGetDescriptor" => cuArrayGetDescriptor_v2,
    "cuArray3DGetDescriptor" => cuArray3DGetDescriptor_v2,
    "cuMemcpy3D" => cuMemcpy3D_v2,
    "cuMemcpy3DAsync" => cuMemcpy3DAsync_v2,
    "cuMemcpyHtoA" => cuMemcpyHtoA_v2,
    "cuMemcpyAtoH" => cuMemcpyAtoH_v2,
    "cuMemcpyDtoA" => cuMemcpyDtoA_v2,
    "cuMemcpyAtoD" => cuMemcpyAtoD_v2,
    "cuMemcpyAtoA" => cuMemcpyAtoA_v2,
    "cuMemcpyHtoAAsync" => cuMemcpyHtoAAsync_v2,
    "cuMemcpyAtoHAsync" => cuMemcpyAtoHAsync_v2,
    "cuMemcpy3DPeer" => cuMemcpy3DPeer,
    "cuMemcpy3DPeerAsync" => cuMemcpy3DPeerAsync,
    "cuMipmappedArrayCreate" => cuMipmappedArrayCreate,
    "cuMipmappedArrayGetLevel" => cuMipmappedArrayGetLevel,
    "cuMipmappedArrayDestroy" => cuMipmappedArrayDestroy,
    "cuTexObjectCreate" => cuTexObjectCreate,
    "cuTexObjectGetResourceDesc" => cuTexObjectGetResourceDesc,
    "cuTexObjectGetTextureDesc" => cuTexObjectGetTextureDesc,
    "cuTexObjectGetResourceViewDesc" => cuTexObjectGetResourceViewDesc,
    "cuSurfObjectGetResourceDesc" => cuSurfObjectGetResourceDesc,
    "cuTexObjectDestroy" => cuTexObjectDestroy,
    "cuSurfObjectCreate" => cuSurfObjectCreate,
    "cuSurfObjectDestroy" => cuSurfObjectDestroy,
    "cuGraphAddKernelNode" => cuGraphAddKernelNode_v2,
    "cuGraphKernelNodeSetParams" => cuGraphKernelNodeSetParams_v2,
    "cuGraphExecKernelNodeSetParams" => cuGraphExecKernelNodeSetParams_v2,
    "cuGraphKernelNodeGetParams" => cuGraphKernelNodeGetParams_v2,
    "cuGraphAddMemcpyNode" => cuGraphAddMemcpyNode,
    "cuGraphMemcpyNodeSetParams" => cuGraphMemcpyNodeSetParams,
    "cuGraphExecMemcpyNodeSetParams" => cuGraphExecMemcpyNodeSetParams,
    "cuGraphMemcpyNodeGetParams" => cuGraphMemcpyNodeGetParams,
    "cuGraphAddNode" => cuGraphAddNode_v2,
    "cuGraphNodeSetParams" => cuGraphNodeSetParams,
    "cuGraphExecNodeSetParams" => cuGraphExecNodeSetParams,
    "cuDeviceGet" => cuDeviceGet,
    "cuDeviceGetCount" => cuDeviceGetCount,
    "cuDeviceGetName" => cuDeviceGetName,
    "cuDeviceGetAttribute" => cuDeviceGetAttribute,
    "cuDeviceTotalMem" => cuDeviceTotalMem_v2,
    "cuDeviceGetUuid" => cuDeviceGetUuid_v2,
    "cuDeviceGetLuid" => cuDeviceGetLuid,
    "cuDeviceGetPCIBusId" => cuDeviceGetPCIBusId,
    "cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain,
    "cuDevicePrimaryCtxRelease" => cuDevicePrimaryCtxRelease_v2,
    "cuDevicePrimaryCtxGetState" => cuDevicePrimaryCtxGetState,
    "cuDevicePrimaryCtxSetFlags" => cuDevicePrimaryCtxSetFlags_v2,
    "cuDevicePrimaryCtxReset" => cuDevicePrimaryCtxReset_v2,
    "cuCtxCreate" => cuCtxCreate_v4,
    "cuCtxDestroy" => cuCtxDestroy_v2,
    "cuCtxGetCurrent" => cuCtxGetCurrent,
    "cuCtxSetCurrent" => cuCtxSetCurrent,
    "cuCtxPushCurrent" => cuCtxPushCurrent_v2,
    "cuCtxPopCurrent" => cuCtxPopCurrent_v2,
    "cuCtxGetDevice" => cuCtxGetDevice,
    "cuCtxGetLimit" => cuCtxGetLimit,
    "cuCtxSynchronize" => cuCtxSynchronize,
    "cuCtxGetApiVersion" => cuCtxGetApiVersion,
    "cuCtxAttach" => cuCtxAttach,
    "cuCtxDetach" => cuCtxDetach,
    "cuCtxRecordEvent" => cuCtxRecordEvent,
    "cuCtxWaitEvent" => cuCtxWaitEvent,
    "cuCtxGetExecAffinity" => cuCtxGetExecAffinity,
    "cuModuleLoad" => cuModuleLoad,
    "cuModuleLoadData" => cuModuleLoadData,
    "cuModuleLoadDataEx" => cuModuleLoadDataEx,
    "cuModuleLoadFatBinary" => cuModuleLoadFatBinary,
    "cuModuleUnload" => cuModuleUnload,
    "cuModuleGetLoadingMode" => cuModuleGetLoadingMode,
    "cuModuleGetFunction" => cuModuleGetFunction,
    "cuModuleGetGlobal" => cuModuleGetGlobal_v2,
    "cuModuleGetFunctionCount" => cuModuleGetFunctionCount,
    "cuModuleEnumerateFunctions" => cuModuleEnumerateFunctions,
    "cuLinkCreate" => cuLinkCreate_v2,
    "cuLinkAddData" => cuLinkAddData_v2,
    "cuLinkAddFile" => cuLinkAddFile_v2,
    "cuLinkComplete" => cuLinkComplete,
    "cuLinkDestroy" => cuLinkDestroy,
    "cuFuncGetAttribute" => cuFuncGetAttribute,
    "cuFuncGetName" => cuFuncGetName,
    "cuFuncGetParamInfo" => cuFuncGetParamInfo,
    "cuFuncGetModule" => cuFuncGetModule,
    "cuFuncIsLoaded" => cuFuncIsLoaded,
    "cuFuncLoad" => cuFuncLoad,
    "cuLibraryLoadData" => cuLibraryLoadData,
    "cuLibraryLoadFromFile" => cuLibraryLoadFromFile,
    "cuLibraryUnload" => cuLibraryUnload,
    "cuLibraryGetKernel" => cuLibraryGetKernel,
    "cuLibraryGetKernelCount" => cuLibraryGetKernelCount,
    "cuLibraryEnumerateKernels" => cuLibraryEnumerateKernels,
    "cuLibraryGetModule" => cuLibraryGetModule,
    "cuLibraryGetGlobal" => cuLibraryGetGlobal,
    "cuLibraryGetManaged" => cuLibraryGetManaged,
    "cuLibraryGetUnifiedFunction" => cuLibraryGetUnifiedFunction,
    "cuKernelGetFunction" => cuKernelGetFunction,
    "cuKernelGetLibrary" => cuKernelGetLibrary,
    "cuKernelGetAttribute" => cuKernelGetAttribute,
    "cuKernelSetAttribute" => cuKernelSetAttribute,
    "cuKernelSetCacheConfig" => cuKernelSetCacheConfig,
    "cuKernelGetName" => cuKernelGetName,
    "cuKernelGetParamInfo" => cuKernelGetParamInfo,
    "cuFuncSetAttribute" => cuFuncSetAttribute,
    "cuFuncSetCacheConfig" => cuFuncSetCacheConfig,
    "cuLaunchKernel" => cuLaunchKernel,
    "cuLaunchCooperativeKernel" => cuLaunchCooperativeKernel,
    "cuLaunchKernelEx" => cuLaunchKernelEx,
    "cuFuncSetBlockShape" => cuFuncSetBlockShape,
    "cuFuncSetSharedSize" => cuFuncSetSharedSize,
    "cuParamSetSize" => cuParamSetSize,
    "cuParamSeti" => cuParamSeti,
    "cuParamSetf" => cuParamSetf,
    "cuParamSetv" => cuParamSetv,
    "cuLaunch" => cuLaunch,
    "cuLaunchGrid" => cuLaunchGrid,
    "cuLaunchGridAsync" => cuLaunchGridAsync,
    "cuLaunchCooperativeKernelMultiDevice" => cuLaunchCooperativeKernelMultiDevice,
    "cuOccupancyMaxActiveClusters" => cuOccupancyMaxActiveClusters,
    "cuOccupancyMaxPotentialClusterSize" => cuOccupancyMaxPotentialClusterSize,
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" => cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
    "cuOccupancyAvailableDynamicSMemPerBlock" => cuOccupancyAvailableDynamicSMemPerBlock,
    "cuMemcpy2D" => cuMemcpy2D_v2,
    "cuMemcpy2DUnaligned" => cuMemcpy2DUnaligned_v2,
    "cuMemcpy2DAsync" => cuMemcpy2DAsync_v2,
    "cuMemAllocPitch" => cuMemAllocPitch_v2,
    "cuMemcpyPeer" => cuMemcpyPeer,
    "cuMemcpyPeerAsync" => cuMemcpyPeerAsync,
    "cuPointerGetAttributes" => cuPointerGetAttributes,
    "cuOccupancyMaxActiveBlocksPerMultiprocessor" => cuOccupancyMaxActiveBlocksPerMultiprocessor,
    "cuMemAlloc" => cuMemAlloc_v2,
    "cuMemFree" => cuMemFree_v2,
    "cuMemGetInfo" => cuMemGetInfo_v2,
    "cuMemGetAddressRange" => cuMemGetAddressRange_v2,
    "cuMemAllocHost" => cuMemAllocHost_v2,
    "cuMemHostAlloc" => cuMemHostAlloc,
    "cuMemFreeHost" => cuMemFreeHost,
    "cuMemcpy" => cuMemcpy,
    "cuMemcpyAsync" => cuMemcpyAsync,
    "cuMemcpyHtoD" => cuMemcpyHtoD_v2,
    "cuMemcpyDtoH" => cuMemcpyDtoH_v2,
    "cuMemcpyDtoD" => cuMemcpyDtoD_v2,
    "cuMemcpyHtoDAsync" => cuMemcpyHtoDAsync_v2,
    "cuMemcpyDtoHAsync" => cuMemcpyDtoHAsync_v2,
    "cuMemcpyDtoDAsync" => cuMemcpyDtoDAsync_v2,
    "cuMemsetD8" => cuMemsetD8_v2,
    "cuMemsetD16" => cuMemsetD16_v2,
    "cuMemsetD32" => cuMemsetD32_v2,
    "cuMemsetD8Async" => cuMemsetD8Async,
    "cuMemsetD16Async" => cuMemsetD16Async,
    "cuMemsetD32Async" => cuMemsetD32Async,
    "cuMemsetD2D16" => cuMemsetD2D16_v2,
    "cuMemsetD2D32" => cuMemsetD2D32_v2,
    "cuMemsetD2D16Async" => cuMemsetD2D16Async,
    "cuMemsetD2D32Async" => cuMemsetD2D32Async,
    "cuDeviceComputeCapability" => cuDeviceComputeCapability,
    "cuDeviceGetProperties" => cuDeviceGetProperties,
    "cuProfilerInitialize" => cuProfilerInitialize,
    "cuDeviceGetExecAffinitySupport" => cuDeviceGetExecAffinitySupport,
    "cuCoredumpGetAttribute" => cuCoredumpGetAttribute,
    "cuCoredumpGetAttributeGlobal" => cuCoredumpGetAttributeGlobal,
    "cuCoredumpSetAttribute" => cuCoredumpSetAttribute,
    "cuCoredumpSetAttributeGlobal" => cuCoredumpSetAttributeGlobal,
    "cuPointerGetAttribute" => cuPointerGetAttribute,
    "cuPointerSetAttribute" => cuPointerSetAttribute,
    "cuStreamCreate" => cuStreamCreate,
    "cuStreamCreateWithPriority" => cuStreamCreateWithPriority,
    "cuStreamDestroy" => cuStreamDestroy_v2,
    "cuStreamSynchronize" => cuStreamSynchronize,
    "cuStreamQuery" => cuStreamQuery,
    "cuStreamWaitEvent" => cuStreamWaitEvent,
    "cuStreamWriteValue32" => cuStreamWriteValue32_v2,
    "cuStreamWriteValue64" => cuStreamWriteValue64_v2,
    "cuStreamWaitValue32" => cuStreamWaitValue32_v2,
    "cuStreamWaitValue64" => cuStreamWaitValue64_v2,
    "cuStreamBatchMemOp" => cuStreamBatchMemOp_v2,
    "cuMemBatchDecompressAsync" => cuMemBatchDecompressAsync,
    "cuGraphAddBatchMemOpNode" => cuGraphAddBatchMemOpNode,
    "cuGraphBatchMemOpNodeGetParams" => cuGraphBatchMemOpNodeGetParams,
    "cuGraphBatchMemOpNodeSetParams" => cuGraphBatchMemOpNodeSetParams,
    "cuGraphExecBatchMemOpNodeSetParams" => cuGraphExecBatchMemOpNodeSetParams,
    "cuStreamGetGreenCtx" => cuStreamGetGreenCtx,
    "cuEventCreate" => cuEventCreate,
    "cuIpcGetMemHandle" => cuIpcGetMemHandle,
    "cuIpcOpenMemHandle" => cuIpcOpenMemHandle_v2,
    "cuIpcCloseMemHandle" => cuIpcCloseMemHandle,
    "cuIpcGetEventHandle" => cuIpcGetEventHandle,
    "cuIpcOpenEventHandle" => cuIpcOpenEventHandle,
    "cuEventDestroy" => cuEventDestroy_v2,
    "cuEventRecord" => cuEventRecord,
    "cuEventSynchronize" => cuEventSynchronize,
    "cuEventQuery" => cuEventQuery,
    "cuEventElapsedTime" => cuEventElapsedTime_v2,
    "cuTensorMapEncodeTiled" => cuTensorMapEncodeTiled,
    "cuTensorMapEncodeIm2col" => cuTensorMapEncodeIm2col,
    "cuTensorMapEncodeIm2colWide" => cuTensorMapEncodeIm2colWide,
    "cuTensorMapReplaceAddress" => cuTensorMapReplaceAddress,
    "cuModuleGetTexRef" => cuModuleGetTexRef,
    "cuModuleGetSurfRef" => cuModuleGetSurfRef,
    "cuTexRefCreate" => cuTexRefCreate,
    "cuTexRefDestroy" => cuTexRefDestroy,
    "cuTexRefSetArray" => cuTexRefSetArray,
    "cuTexRefSetMipmappedArray" => cuTexRefSetMipmappedArray,
    "cuTexRefSetAddress" => cuTexRefSetAddress_v2,
    "cuTexRefSetAddress2D" => cuTexRefSetAddress2D_v3,
    "cuTexRefSetFormat" => cuTexRefSetFormat,
    "cuTexRefSetAddressMode" => cuTexRefSetAddressMode,
    "cuTexRefSetFilterMode" => cuTexRefSetFilterMode,
    "cuTexRefSetMipmapFilterMode" => cuTexRefSetMipmapFilterMode,
    "cuTexRefSetMipmapLevelBias" => cuTexRefSetMipmapLevelBias,
    "cuTexRefSetMipmapLevelClamp" => cuTexRefSetMipmapLevelClamp,
    "cuTexRefSetMaxAnisotropy" => cuTexRefSetMaxAnisotropy,
    "cuTexRefSetBorderColor" => cuTexRefSetBorderColor,
    "cuTexRefSetFlags" => cuTexRefSetFlags,
    "cuTexRefGetAddress" => cuTexRefGetAddress_v2,
    "cuTexRefGetArray" => cuTexRefGetArray,
    "cuTexRefGetMipmappedArray" => cuTexRefGetMipmappedArray,
    "cuTexRefGetAddressMode" => cuTexRefGetAddressMode,
    "cuTexRefGetFilterMode" => cuTexRefGetFilterMode,
    "cuTexRefGetMipmapFilterMode" => cuTexRefGetMipmapFilterMode,
    "cuTexRefGetFormat" => cuTexRefGetFormat,
    "cuTexRefGetMipmapLevelBias" => cuTexRefGetMipmapLevelBias,
    "cuTexRefGetMipmapLevelClamp" => cuTexRefGetMipmapLevelClamp,
    "cuTexRefGetMaxAnisotropy" => cuTexRefGetMaxAnisotropy,
    "cuTexRefGetBorderColor" => cuTexRefGetBorderColor,
    "cuTexRefGetFlags" => cuTexRefGetFlags,
    "cuSurfRefSetArray" => cuSurfRefSetArray,
    "cuSurfRefGetArray" => cuSurfRefGetArray,
    "cuParamSetTexRef" => cuParamSetTexRef,
    "cuMemAddressReserve" => cuMemAddressReserve,
    "cuMemAddressFree" => cuMemAddressFree,
    "cuMemCreate" => cuMemCreate,
    "cuMemRelease" => cuMemRelease,
    "cuMemMap" => cuMemMap,
    "cuMemUnmap" => cuMemUnmap,
    "cuMemSetAccess" => cuMemSetAccess,
    "cuMemGetAccess" => cuMemGetAccess,
    "cuMemMapArrayAsync" => cuMemMapArrayAsync,
    "cuMemGetAllocationGranularity" => cuMemGetAllocationGranularity,
    "cuMemGetAllocationPropertiesFromHandle" => cuMemGetAllocationPropertiesFromHandle,
    "cuMemRetainAllocationHandle" => cuMemRetainAllocationHandle,
    "cuMemExportToShareableHandle" => cuMemExportToShareableHandle,
    "cuMemImportFromShareableHandle" => cuMemImportFromShareableHandle,
}

/// Every `_ptsz` and `_ptds` variant, by exported name.
fn per_thread_names() -> impl Iterator<Item = &'static (&'static str, *const ())> {
    super::twins::PER_THREAD_NAMES
        .iter()
        .flat_map(|list| list.iter())
        .chain(super::legacy::PER_THREAD_NAMES)
        .chain(super::array::PER_THREAD_NAMES)
}

/// A `_ptsz` or `_ptds` variant by its exported name.
fn per_thread_lookup(name: &str) -> Option<*mut c_void> {
    per_thread_names()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f as *mut c_void)
}

/// The per-thread default stream variant of a driver function, by its base or
/// exported name, for `cuGetProcAddress` with
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`; None where the function has none.
fn per_thread_variant(exported: &str) -> Option<*mut c_void> {
    ["_ptsz", "_ptds"]
        .iter()
        .find_map(|suffix| per_thread_lookup(&format!("{exported}{suffix}")))
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// A driver function as `cuGetProcAddress` hands it out: with the per-thread default
/// stream asked for, the function's `_ptsz`/`_ptds` variant where it has one.
fn lookup_with(name: &str, flags: u64) -> Option<*mut c_void> {
    if flags & PER_THREAD_DEFAULT_STREAM != 0 {
        let exported = NAMES
            .iter()
            .chain(super::twins::NAMES)
            .find(|(base, _)| *base == name)
            .map_or(name, |(_, exported)| exported);
        if let Some(f) = per_thread_variant(exported) {
            return Some(f);
        }
    }
    lookup(name)
}

/// `CUdriverProcAddressQueryResult`.
const PROC_ADDRESS_SUCCESS: i32 = 0;
const PROC_ADDRESS_SYMBOL_NOT_FOUND: i32 = 1;

export! {
    /// CUDA 12+'s signature (with the query result). The version selects nothing
    /// here: every name has one implementation, the current ABI's. The flags select
    /// the per-thread default stream variants.
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        _cuda_version: i32,
        flags: u64,
        status: *mut i32,
    ) {
        // SAFETY: by cuGetProcAddress_v2's contract `symbol` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(symbol) }?;
        match lookup_with(&name, flags) {
            Some(f) => {
                // SAFETY: by cuGetProcAddress_v2's contract `pfn` is NULL or writable.
                unsafe { caller::write(pfn, f) }?;
                // SAFETY: by cuGetProcAddress_v2's contract `status` is NULL or writable.
                unsafe { caller::write_opt(status, PROC_ADDRESS_SUCCESS) };
                Ok(())
            }
            None => {
                // (NVIDIA's runtime probes with an empty name: nothing to say.)
                if !name.is_empty() && std::env::var_os("VMCUDA_VERBOSE").is_some() {
                    eprintln!("vmcuda: driver function {name} is not implemented");
                }
                // As the real driver answers (measured on the H200): success, with the
                // query result saying the symbol was not found and a NULL pointer.
                // SAFETY: by cuGetProcAddress_v2's contract `pfn` is NULL or writable.
                unsafe { caller::write(pfn, std::ptr::null_mut()) }?;
                // SAFETY: by cuGetProcAddress_v2's contract `status` is NULL or writable.
                unsafe { caller::write_opt(status, PROC_ADDRESS_SYMBOL_NOT_FOUND) };
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_and_exported_names_resolve_to_one_function() {
        for (base, exported) in NAMES {
            assert_eq!(lookup(base), lookup(exported), "{base}");
            assert!(lookup(base).is_some());
        }
        assert!(lookup("cuGreenCtxCreate").is_none());
    }

    /// Every driver function torch's libc10_cuda resolves by name is found, except
    /// green contexts and multicast, which answer "not found" (torch copes).
    #[test]
    fn torch_entry_points_resolve() {
        let list = include_str!("../../exports/torch-2.11.0+cu130-imports.txt");
        let optional = [
            "cuCtxFromGreenCtx",
            "cuDevResource",
            "cuDevSm",
            "cuDeviceGetDevResource",
            "cuGreenCtx",
            "cuMulticast",
        ];
        let mut checked = 0;
        for name in list.lines().filter_map(|l| l.strip_prefix("entry-point ")) {
            if optional.iter().any(|o| name.starts_with(o)) {
                assert!(lookup(name).is_none(), "{name}");
                continue;
            }
            assert!(lookup(name).is_some(), "{name} is not resolved");
            checked += 1;
        }
        assert!(checked >= 20, "{checked}");
    }

    /// With the per-thread default stream asked for, a function with a `_ptsz` or
    /// `_ptds` variant is handed out as that variant; without, as itself.
    #[test]
    fn per_thread_flag_selects_the_per_thread_variants() {
        let per_thread = PER_THREAD_DEFAULT_STREAM;
        let variant = |name| super::super::twins::lookup(name).expect(name);
        assert_eq!(
            lookup_with("cuMemcpyHtoD", per_thread),
            Some(variant("cuMemcpyHtoD_v2_ptds"))
        );
        assert_eq!(lookup_with("cuMemcpyHtoD", 0), lookup("cuMemcpyHtoD_v2"));
        assert_eq!(
            lookup_with("cuStreamQuery", per_thread),
            Some(variant("cuStreamQuery_ptsz"))
        );
        assert_eq!(
            lookup_with("cuLaunchKernelEx", per_thread),
            Some(variant("cuLaunchKernelEx_ptsz"))
        );
        assert_ne!(
            lookup_with("cuLaunchKernel", per_thread),
            lookup("cuLaunchKernel")
        );
        // No variant: the function itself.
        assert_eq!(lookup_with("cuMemAlloc", per_thread), lookup("cuMemAlloc"));
        // Every variant is a name of the real driver.
        for (name, _) in super::per_thread_names() {
            assert!(
                crate::driver::unsupported::export_names().any(|n| n == *name),
                "{name} is not a libcuda.so.1 export"
            );
        }
    }

    /// The older launch ABI, context calls and copies that left the stub list resolve
    /// to their implementations, and their per-thread variants with the flag.
    #[test]
    fn the_older_entry_points_resolve_to_implementations() {
        for name in [
            "cuFuncSetBlockShape",
            "cuFuncSetSharedSize",
            "cuParamSetSize",
            "cuParamSeti",
            "cuParamSetf",
            "cuParamSetv",
            "cuLaunch",
            "cuLaunchGrid",
            "cuLaunchGridAsync",
            "cuLaunchCooperativeKernelMultiDevice",
            "cuCtxAttach",
            "cuCtxDetach",
            "cuCtxRecordEvent",
            "cuCtxWaitEvent",
            "cuCtxGetExecAffinity",
            "cuDeviceGetLuid",
            "cuMemcpyAtoA",
            "cuMemcpyHtoAAsync",
            "cuMemcpyAtoHAsync",
            "cuMemcpy3DPeer",
            "cuMemcpy3DPeerAsync",
        ] {
            let f = lookup(name).expect(name);
            assert_ne!(Some(f), crate::driver::unsupported::lookup(name), "{name}");
        }
        let per_thread = PER_THREAD_DEFAULT_STREAM;
        for (base, variant) in [
            ("cuMemcpyAtoA", "cuMemcpyAtoA_v2_ptds"),
            ("cuMemcpyHtoAAsync", "cuMemcpyHtoAAsync_v2_ptsz"),
            ("cuMemcpyAtoHAsync", "cuMemcpyAtoHAsync_v2_ptsz"),
            ("cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds"),
            ("cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz"),
        ] {
            let want = lookup(variant).expect(variant);
            assert_eq!(lookup_with(base, per_thread), Some(want), "{base}");
            assert_ne!(lookup_with(base, 0), Some(want), "{base}");
        }
    }

    #[test]
    fn unknown_names_are_not_found_with_null() {
        let mut f = std::ptr::dangling_mut::<c_void>();
        let mut status = -1;
        let r = cuGetProcAddress_v2(c"cuMulticastCreate".as_ptr(), &mut f, 13000, 0, &mut status);
        assert_eq!(r, 0, "success, as the real driver answers");
        assert!(f.is_null());
        assert_eq!(status, PROC_ADDRESS_SYMBOL_NOT_FOUND);
    }
}
