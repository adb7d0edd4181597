//! Driver result codes (`CUresult`) and the one mapping from runtime statuses to them.
//!
//! The values come from cudarc's `cudaError_enum` (cuda.h's), so they cannot drift from
//! the header. Inside the guest a driver failure travels as a [`CudaStatus`] like a
//! runtime one (the numbers agree for every condition both APIs have), and
//! [`cu_result`] turns it into the code a driver function returns.

use cudarc::driver::sys::cudaError_enum as E;
use vmcuda_wire::CudaStatus;

/// `CUresult`: a plain integer at the C boundary, since the host may report codes this
/// build does not name.
#[allow(non_camel_case_types)]
pub type CUresult = u32;

pub const CUDA_SUCCESS: CUresult = E::CUDA_SUCCESS as CUresult;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = E::CUDA_ERROR_INVALID_VALUE as CUresult;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = E::CUDA_ERROR_INVALID_CONTEXT as CUresult;
pub const CUDA_ERROR_FILE_NOT_FOUND: CUresult = E::CUDA_ERROR_FILE_NOT_FOUND as CUresult;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = E::CUDA_ERROR_INVALID_HANDLE as CUresult;
pub const CUDA_ERROR_NOT_FOUND: CUresult = E::CUDA_ERROR_NOT_FOUND as CUresult;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = E::CUDA_ERROR_NOT_SUPPORTED as CUresult;
pub const CUDA_ERROR_UNKNOWN: CUresult = E::CUDA_ERROR_UNKNOWN as CUresult;

/// A driver code carried through the guest's runtime-shaped `Result`s (see the module
/// documentation).
pub const fn status(code: CUresult) -> CudaStatus {
    CudaStatus(code)
}

/// The driver code for a runtime status (the numbers agree except for runtime-only
/// conditions).
pub fn cu_result(status: CudaStatus) -> CUresult {
    match status {
        // A function handle the driver does not know.
        CudaStatus::ErrorInvalidDeviceFunction => CUDA_ERROR_INVALID_HANDLE,
        // Argument errors the runtime names more finely (configuration, pitch, symbol,
        // host and device pointers, copy direction, missing configuration).
        CudaStatus::ErrorInvalidConfiguration
        | CudaStatus::ErrorInvalidPitchValue
        | CudaStatus::ErrorInvalidSymbol
        | CudaStatus::ErrorInvalidHostPointer
        | CudaStatus::ErrorInvalidDevicePointer
        | CudaStatus::ErrorInvalidMemcpyDirection
        | CudaStatus::ErrorMissingConfiguration => CUDA_ERROR_INVALID_VALUE,
        CudaStatus(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_cuda_h_values() {
        // cuda.h's numbers, written out: the protocol depends on them.
        assert_eq!(
            [
                CUDA_SUCCESS,
                CUDA_ERROR_INVALID_VALUE,
                CUDA_ERROR_INVALID_CONTEXT,
                CUDA_ERROR_FILE_NOT_FOUND,
                CUDA_ERROR_INVALID_HANDLE,
                CUDA_ERROR_NOT_FOUND,
                CUDA_ERROR_NOT_SUPPORTED,
                CUDA_ERROR_UNKNOWN,
            ],
            [0, 1, 201, 301, 400, 500, 801, 999]
        );
    }

    #[test]
    fn runtime_only_codes_become_driver_codes() {
        assert_eq!(cu_result(CudaStatus::ErrorInvalidDeviceFunction), 400);
        assert_eq!(cu_result(CudaStatus::ErrorInvalidResourceHandle), 400);
        assert_eq!(cu_result(CudaStatus::ErrorInvalidDevicePointer), 1);
        assert_eq!(cu_result(CudaStatus::ErrorMemoryAllocation), 2);
        assert_eq!(cu_result(CudaStatus::ErrorNotSupported), 801);
        for code in [9, 12, 13, 16, 17, 21, 52] {
            assert_eq!(
                cu_result(CudaStatus(code)),
                CUDA_ERROR_INVALID_VALUE,
                "{code}"
            );
        }
        assert_eq!(cu_result(CudaStatus(123_456)), 123_456);
    }
}
