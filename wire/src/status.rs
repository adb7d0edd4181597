//! CUDA runtime status codes (`cudaError_t`) as they travel on the wire.
//!
//! Driver (`CUresult`) and runtime codes share their numbers for every condition the
//! bridge can report, so the host maps a driver failure to the runtime code with the
//! same number; the few runtime-only codes are produced by the guest or the host-memory
//! executor directly.

use serde::{Deserialize, Serialize};

/// A `cudaError_t` value. Kept open (a newtype, not an enum) because a newer host may
/// report codes this build does not name, and the guest must pass them on unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CudaStatus(pub u32);

macro_rules! statuses {
    ($($code:literal $name:ident $msg:literal;)*) => {
        #[allow(non_upper_case_globals)]
        impl CudaStatus {
            $(pub const $name: CudaStatus = CudaStatus($code);)*
        }
        /// (code, name, message) for every status this build knows.
        pub const TABLE: &[(u32, &str, &str)] = &[$(($code, concat!("cuda", stringify!($name)), $msg),)*];
    };
}

statuses! {
    0 Success "no error";
    1 ErrorInvalidValue "invalid argument";
    2 ErrorMemoryAllocation "out of memory";
    3 ErrorInitializationError "initialization error";
    4 ErrorCudartUnloading "driver shutting down";
    5 ErrorProfilerDisabled "profiler disabled while using external profiling tool";
    6 ErrorProfilerNotInitialized "profiler not initialized: call cudaProfilerInitialize()";
    7 ErrorProfilerAlreadyStarted "profiler already started";
    8 ErrorProfilerAlreadyStopped "profiler already stopped";
    9 ErrorInvalidConfiguration "invalid configuration argument";
    12 ErrorInvalidPitchValue "invalid pitch argument";
    13 ErrorInvalidSymbol "invalid device symbol";
    16 ErrorInvalidHostPointer "invalid host pointer";
    17 ErrorInvalidDevicePointer "invalid device pointer";
    18 ErrorInvalidTexture "invalid texture reference";
    19 ErrorInvalidTextureBinding "texture is not bound to a pointer";
    20 ErrorInvalidChannelDescriptor "invalid channel descriptor";
    21 ErrorInvalidMemcpyDirection "invalid copy direction for memcpy";
    22 ErrorAddressOfConstant "invalid address of constant";
    23 ErrorTextureFetchFailed "fetch from texture failed";
    24 ErrorTextureNotBound "cannot fetch from a texture that is not bound";
    25 ErrorSynchronizationError "incorrect use of __syncthreads()";
    26 ErrorInvalidFilterSetting "linear filtering not supported for non-float type";
    27 ErrorInvalidNormSetting "read as normalized float not supported for 32-bit non float type";
    28 ErrorMixedDeviceExecution "mixing of device and device emulation code not allowed";
    31 ErrorNotYetImplemented "feature not yet implemented";
    32 ErrorMemoryValueTooLarge "memory size or pointer value too large to fit in 32 bit";
    34 ErrorStubLibrary "CUDA driver is a stub library";
    35 ErrorInsufficientDriver "CUDA driver version is insufficient for CUDA runtime version";
    36 ErrorCallRequiresNewerDriver "API call is not supported in the installed CUDA driver";
    37 ErrorInvalidSurface "invalid surface reference";
    43 ErrorDuplicateVariableName "duplicate global variable looked up by string name";
    44 ErrorDuplicateTextureName "duplicate texture looked up by string name";
    45 ErrorDuplicateSurfaceName "duplicate surface looked up by string name";
    46 ErrorDevicesUnavailable "CUDA-capable device(s) is/are busy or unavailable";
    49 ErrorIncompatibleDriverContext "incompatible driver context";
    52 ErrorMissingConfiguration "__global__ function call is not configured";
    53 ErrorPriorLaunchFailure "unspecified launch failure in prior launch";
    65 ErrorLaunchMaxDepthExceeded "launch would exceed maximum depth of nested launches";
    66 ErrorLaunchFileScopedTex "launch failed because kernel uses unsupported, file-scoped textures (texture objects are supported)";
    67 ErrorLaunchFileScopedSurf "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are supported)";
    68 ErrorSyncDepthExceeded "cudaDeviceSynchronize failed because caller's grid depth exceeds cudaLimitDevRuntimeSyncDepth";
    69 ErrorLaunchPendingCountExceeded "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount";
    98 ErrorInvalidDeviceFunction "invalid device function";
    100 ErrorNoDevice "no CUDA-capable device is detected";
    101 ErrorInvalidDevice "invalid device ordinal";
    102 ErrorDeviceNotLicensed "device doesn't have valid Grid license";
    103 ErrorSoftwareValidityNotEstablished "integrity checks failed";
    127 ErrorStartupFailure "startup failure in cuda runtime";
    200 ErrorInvalidKernelImage "device kernel image is invalid";
    201 ErrorDeviceUninitialized "invalid device context";
    205 ErrorMapBufferObjectFailed "mapping of buffer object failed";
    206 ErrorUnmapBufferObjectFailed "unmapping of buffer object failed";
    207 ErrorArrayIsMapped "array is mapped";
    208 ErrorAlreadyMapped "resource already mapped";
    209 ErrorNoKernelImageForDevice "no kernel image is available for execution on the device";
    210 ErrorAlreadyAcquired "resource already acquired";
    211 ErrorNotMapped "resource not mapped";
    212 ErrorNotMappedAsArray "resource not mapped as array";
    213 ErrorNotMappedAsPointer "resource not mapped as pointer";
    214 ErrorECCUncorrectable "uncorrectable ECC error encountered";
    215 ErrorUnsupportedLimit "limit is not supported on this architecture";
    216 ErrorDeviceAlreadyInUse "exclusive-thread device already in use by a different thread";
    217 ErrorPeerAccessUnsupported "peer access is not supported between these two devices";
    218 ErrorInvalidPtx "a PTX JIT compilation failed";
    219 ErrorInvalidGraphicsContext "invalid OpenGL or DirectX context";
    220 ErrorNvlinkUncorrectable "uncorrectable NVLink error detected during the execution";
    221 ErrorJitCompilerNotFound "PTX JIT compiler library not found";
    222 ErrorUnsupportedPtxVersion "the provided PTX was compiled with an unsupported toolchain.";
    223 ErrorJitCompilationDisabled "PTX JIT compilation was disabled";
    224 ErrorUnsupportedExecAffinity "the provided execution affinity is not supported";
    225 ErrorUnsupportedDevSideSync "cudaDeviceSynchronize is deprecated and not supported from device code";
    226 ErrorContained "an exception occurred on the device that is contained";
    300 ErrorInvalidSource "device kernel image is invalid";
    301 ErrorFileNotFound "file not found";
    302 ErrorSharedObjectSymbolNotFound "shared object symbol not found";
    303 ErrorSharedObjectInitFailed "shared object initialization failed";
    304 ErrorOperatingSystem "OS call failed or operation not supported on this OS";
    400 ErrorInvalidResourceHandle "invalid resource handle";
    401 ErrorIllegalState "the operation cannot be performed in the present state";
    402 ErrorLossyQuery "attempted introspection would yield lossy results";
    500 ErrorSymbolNotFound "named symbol not found";
    600 ErrorNotReady "device not ready";
    700 ErrorIllegalAddress "an illegal memory access was encountered";
    701 ErrorLaunchOutOfResources "too many resources requested for launch";
    702 ErrorLaunchTimeout "the launch timed out and was terminated";
    703 ErrorLaunchIncompatibleTexturing "launch uses incompatible texturing mode";
    704 ErrorPeerAccessAlreadyEnabled "peer access is already enabled";
    705 ErrorPeerAccessNotEnabled "peer access has not been enabled";
    708 ErrorSetOnActiveProcess "cannot set while device is active in this process";
    709 ErrorContextIsDestroyed "context is destroyed";
    710 ErrorAssert "device-side assert triggered";
    711 ErrorTooManyPeers "peer mapping resources exhausted";
    712 ErrorHostMemoryAlreadyRegistered "part or all of the requested memory range is already mapped";
    713 ErrorHostMemoryNotRegistered "pointer does not correspond to a registered memory region";
    714 ErrorHardwareStackError "hardware stack error";
    715 ErrorIllegalInstruction "an illegal instruction was encountered";
    716 ErrorMisalignedAddress "misaligned address";
    717 ErrorInvalidAddressSpace "operation not supported on global/shared address space";
    718 ErrorInvalidPc "invalid program counter";
    719 ErrorLaunchFailure "unspecified launch failure";
    720 ErrorCooperativeLaunchTooLarge "too many blocks in cooperative launch";
    721 ErrorTensorMemoryLeak "tensor memory not completely freed";
    800 ErrorNotPermitted "operation not permitted";
    801 ErrorNotSupported "operation not supported";
    802 ErrorSystemNotReady "system not yet initialized";
    803 ErrorSystemDriverMismatch "system has unsupported display driver / cuda driver combination";
    804 ErrorCompatNotSupportedOnDevice "forward compatibility was attempted on non supported HW";
    805 ErrorMpsConnectionFailed "MPS client failed to connect to the MPS control daemon or the MPS server";
    806 ErrorMpsRpcFailure "the remote procedural call between the MPS server and the MPS client failed";
    807 ErrorMpsServerNotReady "MPS server is not ready to accept new MPS client requests";
    808 ErrorMpsMaxClientsReached "the hardware resources required to create MPS client have been exhausted";
    809 ErrorMpsMaxConnectionsReached "the hardware resources required to support device connections have been exhausted";
    810 ErrorMpsClientTerminated "the MPS client has been terminated by the server";
    811 ErrorCdpNotSupported "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it";
    812 ErrorCdpVersionMismatch "unsupported interaction between different versions of CUDA Dynamic Parallelism";
    900 ErrorStreamCaptureUnsupported "operation not permitted when stream is capturing";
    901 ErrorStreamCaptureInvalidated "operation failed due to a previous error during capture";
    902 ErrorStreamCaptureMerge "operation would result in a merge of separate capture sequences";
    903 ErrorStreamCaptureUnmatched "capture was not ended in the same stream as it began";
    904 ErrorStreamCaptureUnjoined "capturing stream has unjoined work";
    905 ErrorStreamCaptureIsolation "dependency created on uncaptured work in another stream";
    906 ErrorStreamCaptureImplicit "operation would make the legacy stream depend on a capturing blocking stream";
    907 ErrorCapturedEvent "operation not permitted on an event last recorded in a capturing stream";
    908 ErrorStreamCaptureWrongThread "attempt to terminate a thread-local capture sequence from another thread";
    909 ErrorTimeout "wait operation timed out";
    910 ErrorGraphExecUpdateFailure "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    911 ErrorExternalDevice "an async error has occured in external entity outside of CUDA";
    912 ErrorInvalidClusterSize "a kernel launch error has occurred due to cluster misconfiguration";
    913 ErrorFunctionNotLoaded "the function handle is not loaded when calling an API that requires a loaded function";
    914 ErrorInvalidResourceType "one or more resources passed in are not valid resource types for the operation";
    915 ErrorInvalidResourceConfiguration "one or more resources are insufficient or non-applicable for the operation";
    999 ErrorUnknown "unknown error";
}

/// What `cudaGetErrorName`/`cudaGetErrorString` answer for a code they do not know.
pub const UNRECOGNIZED: &str = "unrecognized error code";

impl CudaStatus {
    pub fn is_success(self) -> bool {
        self.0 == 0
    }

    /// The `cudaError_t` enumerator name, e.g. `cudaErrorInvalidValue`.
    pub fn name(self) -> &'static str {
        lookup(self.0).map_or(UNRECOGNIZED, |e| e.1)
    }

    /// The runtime's human-readable message, e.g. `invalid argument`.
    pub fn message(self) -> &'static str {
        lookup(self.0).map_or(UNRECOGNIZED, |e| e.2)
    }

    /// Errors after which the context is unusable: every later call in the process
    /// reports them again (CUDA calls them sticky).
    pub fn is_sticky(self) -> bool {
        matches!(self.0, 700 | 710 | 714 | 715 | 716 | 717 | 718 | 719 | 999)
    }

    /// Map a driver `CUresult` number to the runtime code. The numbering is shared
    /// for every condition the driver reports to the bridge.
    pub fn from_driver(code: u32) -> Self {
        match code {
            // CUDA_ERROR_NOT_INITIALIZED / DEINITIALIZED have runtime twins of their own.
            3 => Self::ErrorInitializationError,
            4 => Self::ErrorCudartUnloading,
            // CUDA_ERROR_INVALID_CONTEXT (201) is reported by cudart as a device error.
            other => CudaStatus(other),
        }
    }

    pub fn result(self) -> Result<(), CudaStatus> {
        if self.is_success() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl std::fmt::Display for CudaStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.0, self.message())
    }
}

impl std::error::Error for CudaStatus {}

fn lookup(code: u32) -> Option<&'static (u32, &'static str, &'static str)> {
    TABLE
        .binary_search_by_key(&code, |e| e.0)
        .ok()
        .map(|i| &TABLE[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique_so_lookup_works() {
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn names_and_messages() {
        assert_eq!(CudaStatus(1).name(), "cudaErrorInvalidValue");
        assert_eq!(
            CudaStatus::ErrorAssert.message(),
            "device-side assert triggered"
        );
        assert_eq!(CudaStatus(0).name(), "cudaSuccess");
        assert_eq!(CudaStatus(12345).name(), UNRECOGNIZED);
        assert_eq!(CudaStatus(12345).message(), UNRECOGNIZED);
    }

    #[test]
    fn sticky_errors() {
        assert!(CudaStatus::ErrorIllegalAddress.is_sticky());
        assert!(!CudaStatus::ErrorInvalidValue.is_sticky());
    }
}
