use std::mem::{offset_of, size_of};

use cudarc::driver::sys::CUmemPoolProps;

use super::RawPoolProps;

/// Bytes no vmcuda export wrote are refused before anything reaches a host: a
/// descriptor that is not a pool's export, and pointer export data not of vmcuda's
/// shape (a memory handle's, forged bytes) are invalid values.
#[test]
fn what_is_no_export_is_refused_here() {
    use std::ffi::c_void;
    use std::os::fd::AsRawFd;
    use vmcuda_wire::CudaStatus;
    let other =
        nix::sys::memfd::memfd_create(c"not-an-export", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .unwrap();
    let mut pool: super::RawHandle = std::ptr::null_mut();
    let handle = other.as_raw_fd() as isize as *mut c_void;
    assert_eq!(
        super::cudaMemPoolImportFromShareableHandle(&mut pool, handle, 1, 0),
        CudaStatus::ErrorInvalidValue.0
    );
    // A physical allocation's descriptor is not a pool's.
    let allocation = crate::driver::inner::ipc::descriptor(3, [7; 16]).unwrap();
    let handle = allocation.as_raw_fd() as isize as *mut c_void;
    assert_eq!(
        super::cudaMemPoolImportFromShareableHandle(&mut pool, handle, 1, 0),
        CudaStatus::ErrorInvalidValue.0
    );
    assert_eq!(
        super::cudaMemPoolImportFromShareableHandle(&mut pool, handle, 3, 0),
        CudaStatus::ErrorInvalidValue.0,
        "no such handle type"
    );
    assert!(pool.is_null());
    let mut ptr: *mut c_void = std::ptr::null_mut();
    let mut memory = crate::abi::driver::IpcHandle::of(1, [5; 16]);
    let mut forged = crate::abi::driver::IpcHandle::of(super::KIND_POOL_POINTER, [5; 16]);
    forged.reserved[40] = 1;
    let mut zeros = [0u8; 64];
    for data in [
        (&mut memory as *mut crate::abi::driver::IpcHandle).cast::<c_void>(),
        (&mut forged as *mut crate::abi::driver::IpcHandle).cast::<c_void>(),
        zeros.as_mut_ptr().cast::<c_void>(),
    ] {
        assert_eq!(
            super::cudaMemPoolImportPointer(&mut ptr, std::ptr::null_mut(), data),
            CudaStatus::ErrorInvalidValue.0
        );
    }
    assert!(ptr.is_null());
}

/// Tokens drawn here for exports no registry names differ from each other.
#[test]
fn local_tokens_differ() {
    let a = super::local_token();
    let b = super::local_token();
    assert_ne!(a, b);
    assert_ne!(a, [0; 16]);
}

/// `cudaMemPoolProps` and the driver's `CUmemPoolProps` (CUDA 13's headers, as
/// cudarc binds them) share one layout, so `cuMemPoolCreate` is a twin.
#[test]
fn pool_props_are_laid_out_as_the_drivers() {
    assert_eq!(size_of::<RawPoolProps>(), size_of::<CUmemPoolProps>());
    assert_eq!(size_of::<RawPoolProps>(), 88);
    assert_eq!(
        offset_of!(RawPoolProps, handle_types),
        offset_of!(CUmemPoolProps, handleTypes)
    );
    assert_eq!(
        offset_of!(RawPoolProps, location_type),
        offset_of!(CUmemPoolProps, location)
    );
    assert_eq!(
        offset_of!(RawPoolProps, max_size),
        offset_of!(CUmemPoolProps, maxSize)
    );
    assert_eq!(
        offset_of!(RawPoolProps, usage),
        offset_of!(CUmemPoolProps, usage)
    );
}
