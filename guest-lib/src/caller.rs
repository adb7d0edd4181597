//! The edge where the program's pointers are dereferenced. Every function here takes a
//! pointer the program passed through the CUDA API; the CUDA API contract makes the
//! program responsible for its validity, and each function that relies on it is an
//! `unsafe fn` whose `# Safety` section says what its caller promises. The `extern "C"`
//! exports make that promise, each call with a `SAFETY` comment naming the contract
//! (or pass it on as the `# Safety` section of an `unsafe fn` helper). Null pointers
//! are turned into `cudaErrorInvalidValue` here, so "NULL or valid" is all a caller
//! needs to know.

use std::ffi::{c_char, CStr};

use vmcuda_wire::CudaStatus;

type Result<T> = std::result::Result<T, CudaStatus>;

/// Store `value` through an output parameter.
///
/// # Safety
/// `ptr` is NULL (refused) or valid for writing a `T` (no alignment needed).
pub(crate) unsafe fn write<T>(ptr: *mut T, value: T) -> Result<()> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so writable by the caller's promise.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Store through an optional output parameter (CUDA lets some be NULL).
///
/// # Safety
/// `ptr` is NULL (skipped) or valid for writing a `T` (no alignment needed).
pub(crate) unsafe fn write_opt<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: non-null, so writable by the caller's promise.
        unsafe { ptr.write_unaligned(value) };
    }
}

/// Read an input struct.
///
/// # Safety
/// `ptr` is NULL (refused) or valid for reading an initialized `T` (no alignment
/// needed).
pub(crate) unsafe fn read<T: Copy>(ptr: *const T) -> Result<T> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so readable by the caller's promise.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Borrow `len` bytes of program memory.
///
/// # Safety
/// Unless `len` is 0, `ptr` is NULL (refused) or valid for reading `len` bytes, which
/// nothing writes while the returned slice lives (`'a`, chosen by the caller).
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so `len` readable bytes unchanged for 'a, by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrow `len` writable bytes of program memory.
///
/// # Safety
/// Unless `len` is 0, `ptr` is NULL (refused) or valid for writing `len` bytes, which
/// nothing else reads or writes while the returned slice lives (`'a`, chosen by the
/// caller).
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so `len` writable bytes used by no one else for 'a, by the
    // caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Read `n` values of a program array.
///
/// # Safety
/// Unless `n` is 0, `ptr` is NULL (refused) or valid for reading `n` initialized `T`s.
pub(crate) unsafe fn slice<T: Copy>(ptr: *const T, n: usize) -> Result<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so `n` readable values by the caller's promise.
    Ok((0..n)
        .map(|i| unsafe { ptr.add(i).read_unaligned() })
        .collect())
}

/// Write `values` to a program array.
///
/// # Safety
/// Unless `values` is empty, `ptr` is NULL (refused) or valid for writing
/// `values.len()` `T`s.
pub(crate) unsafe fn write_slice<T: Copy>(ptr: *mut T, values: &[T]) -> Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    for (i, v) in values.iter().enumerate() {
        // SAFETY: non-null, so writable for `values.len()` values by the caller's
        // promise.
        unsafe { ptr.add(i).write_unaligned(*v) };
    }
    Ok(())
}

/// Copy between two program buffers (host-to-host copies), which may overlap.
///
/// # Safety
/// Unless `len` is 0, `dst` and `src` are NULL (refused) or valid for writing and
/// reading `len` bytes.
pub(crate) unsafe fn copy_host(dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if dst.is_null() || src.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: both non-null, so valid for `len` bytes by the caller's promise.
    unsafe { std::ptr::copy(src, dst, len) };
    Ok(())
}

/// A C string argument.
///
/// # Safety
/// `ptr` is NULL (refused) or points to a NUL-terminated string.
pub(crate) unsafe fn string(ptr: *const c_char) -> Result<String> {
    if ptr.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so NUL-terminated by the caller's promise.
    Ok(unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned())
}

/// Kernel argument `i` of a `void** args` array: `size` bytes at `args[i]`.
///
/// # Safety
/// `args` is NULL (refused) or an array of more than `i` pointers, `args[i]` being
/// NULL (refused) or valid for reading `size` bytes that nothing writes during `'a`
/// (the launch contract: one pointer per kernel parameter).
pub(crate) unsafe fn kernel_arg<'a>(
    args: *const *const u8,
    i: usize,
    size: usize,
) -> Result<&'a [u8]> {
    if args.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: non-null, so an array of more than `i` pointers by the caller's promise.
    let arg = unsafe { *args.add(i) };
    // SAFETY: `args[i]` is valid for `size` bytes by the caller's promise.
    unsafe { bytes(arg, size) }
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
///
/// # Safety
/// The program handed in `f` and `user_data` to be called once like this, and this is
/// that call.
pub(crate) unsafe fn call_host_fn(
    f: unsafe extern "C" fn(*mut libc::c_void),
    user_data: *mut libc::c_void,
) {
    // SAFETY: the program's own function and argument, called as it asked (the caller's
    // promise).
    unsafe { f(user_data) }
}

/// Call a `cudaStreamCallback_t` the program registered.
///
/// # Safety
/// As for [`call_host_fn`]: the program's callback and argument, called once as asked.
pub(crate) unsafe fn call_stream_callback(
    f: unsafe extern "C" fn(*mut libc::c_void, u32, *mut libc::c_void),
    stream: *mut libc::c_void,
    status: u32,
    user_data: *mut libc::c_void,
) {
    // SAFETY: the program's own callback and argument, called as it asked (the caller's
    // promise).
    unsafe { f(stream, status, user_data) }
}
