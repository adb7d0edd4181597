//! The edge where the program's pointers are dereferenced. Every function here takes a
//! pointer the program passed through the CUDA API; the CUDA API contract makes the
//! program responsible for its validity (that is the invariant each `SAFETY` comment
//! relies on); null pointers are turned into `cudaErrorInvalidValue` here.

use std::ffi::{c_char, CStr};

use vmcuda_wire::CudaStatus;

type Result<T> = std::result::Result<T, CudaStatus>;

/// Store `value` through an output parameter.
pub(crate) fn write<T>(ptr: *mut T, value: T) -> Result<()> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, and the API contract says it points to a writable T.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Store through an optional output parameter (CUDA lets some be NULL).
pub(crate) fn write_opt<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: non-null, and the API contract says it points to a writable T.
        unsafe { ptr.write_unaligned(value) };
    }
}

/// Read an input struct.
pub(crate) fn read<T: Copy>(ptr: *const T) -> Result<T> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, and the API contract says it points to a readable T.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Borrow `len` bytes of program memory.
pub(crate) fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null; the program passed `ptr` as a buffer of at least `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrow `len` writable bytes of program memory.
pub(crate) fn bytes_mut<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null; the program passed `ptr` as a writable buffer of `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Copy between two program buffers (host-to-host copies), which may overlap.
pub(crate) fn copy_host(dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if dst.is_null() || src.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: both non-null and, by the API contract, valid for `len` bytes.
    unsafe { std::ptr::copy(src, dst, len) };
    Ok(())
}

/// A C string argument.
pub(crate) fn string(ptr: *const c_char) -> Result<String> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null and, by the API contract, NUL-terminated.
    Ok(unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned())
}

/// Kernel argument `i` of a `void** args` array: `size` bytes at `args[i]`.
pub(crate) fn kernel_arg<'a>(args: *const *const u8, i: usize, size: usize) -> Result<&'a [u8]> {
    if args.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: the launch contract gives one valid pointer per kernel parameter.
    let arg = unsafe { *args.add(i) };
    bytes(arg, size)
}

/// Read `N` bytes from program memory that may not be mapped (a fatbinary's
/// neighbourhood): goes through `process_vm_readv`, which fails cleanly instead of
/// faulting.
pub(crate) fn try_read_array<const N: usize>(addr: usize) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: N,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: N,
    };
    // SAFETY: the kernel checks the remote range; `local` is our own buffer of N bytes.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == N as isize).then_some(out)
}

/// Call a host function the program registered (stream callbacks).
pub(crate) fn call_host_fn(
    f: unsafe extern "C" fn(*mut libc::c_void),
    user_data: *mut libc::c_void,
) {
    // SAFETY: the program handed us this function and its argument to call once.
    unsafe { f(user_data) }
}

/// Call a `cudaStreamCallback_t` the program registered.
pub(crate) fn call_stream_callback(
    f: unsafe extern "C" fn(*mut libc::c_void, u32, *mut libc::c_void),
    stream: *mut libc::c_void,
    status: u32,
    user_data: *mut libc::c_void,
) {
    // SAFETY: the program handed us this callback and its argument to call once.
    unsafe { f(stream, status, user_data) }
}
