//! Libraries and kernels (`cuLibrary*`, `cuKernel*`, and the `cuFunc*` queries that
//! go with them): how NVIDIA's own runtime loads a program's kernels, so every program
//! with the runtime linked in statically (nvcc's default) and every NVIDIA library
//! comes through here.
//!
//! A library is a module (see [`super::module`]) loaded on its first use, as the
//! driver loads lazily by default, on each of the program's hosts that uses it. Its
//! `CUkernel`s are the first such module's `CUfunction`s, the same ids, because there is
//! one context per device in the guest and a kernel has one function in it; used on
//! another host's device, a kernel id launches that host's copy. So
//! `cuKernelGetFunction` is the identity, and a `CUkernel` passed where a `CUfunction`
//! goes (which CUDA allows) just works.
//!
//! JIT and library options are the host's business (its driver loads with its
//! defaults), as for `cuModuleLoadDataEx`. Managed variables wait for managed memory.

use std::ffi::{c_char, c_void};

use vmcuda_wire::CudaStatus;

use super::context::check_device;
use super::module::{
    add_library, enumerate_functions, function_by_name, function_count, function_facts,
    get_attribute, global, image, library_module, library_of, remove_library, set_attribute,
    set_cache_config,
};
use super::result::{status, CUDA_ERROR_FILE_NOT_FOUND, CUDA_ERROR_NOT_FOUND};
use super::{check_initialized, export, Result};
use crate::caller;

/// `CU_FUNCTION_LOADING_STATE_LOADED`.
const LOADING_STATE_LOADED: i32 = 1;

/// `CU_LIBRARY_BINARY_IS_PRESERVED`.
const BINARY_IS_PRESERVED: u32 = 1;

/// Whether the library options promise that the image stays where it is.
///
/// # Safety
/// `options` and `values` are NULL or hold `count` entries.
unsafe fn preserved(options: *const u32, values: *const *mut c_void, count: u32) -> Result<bool> {
    let mut preserved = false;
    for i in 0..count as usize {
        // SAFETY: as `preserved`'s caller promised.
        let option = unsafe { caller::read(options.add(i)) }?;
        // NVIDIA's libraries pass options without values (measured: cuBLAS, with
        // `libraryOptionValues` NULL), which the driver takes as no value.
        let value = if values.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: as `preserved`'s caller promised.
            unsafe { caller::read(values.add(i)) }?
        };
        if option == BINARY_IS_PRESERVED {
            preserved = value as usize != 0;
        }
    }
    Ok(preserved)
}

/// Registers a library; its image goes to the host when it is first used, as the
/// driver loads lazily (CUDA's default): a library of hundreds of kernels of which a
/// program launches a few costs nothing until then.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn load_library(out: *mut *mut c_void, image: &[u8], preserved: bool) -> Result<()> {
    check_initialized()?;
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let library = add_library(image, preserved);
    // SAFETY: as `load_library`'s caller promised.
    unsafe { caller::write(out, library as *mut c_void) }
}

export! {
    fn cuLibraryLoadData(
        library: *mut *mut c_void,
        code: *const c_void,
        _jit_options: *mut u32,
        _jit_values: *mut *mut c_void,
        _num_jit_options: u32,
        library_options: *mut u32,
        library_values: *mut *mut c_void,
        num_library_options: u32,
    ) {
        // SAFETY: by cuLibraryLoadData's contract the option arrays hold
        // `num_library_options` entries.
        let preserved = unsafe { preserved(library_options, library_values, num_library_options) }?;
        // SAFETY: by cuLibraryLoadData's contract `code` is a module image the program
        // holds and `library` is NULL or writable.
        unsafe { load_library(library, image(code)?, preserved) }
    }
}

export! {
    fn cuLibraryLoadFromFile(
        library: *mut *mut c_void,
        file_name: *const c_char,
        _jit_options: *mut u32,
        _jit_values: *mut *mut c_void,
        _num_jit_options: u32,
        _library_options: *mut u32,
        _library_values: *mut *mut c_void,
        _num_library_options: u32,
    ) {
        // SAFETY: by cuLibraryLoadFromFile's contract `file_name` is NULL or a
        // NUL-terminated string.
        let path = unsafe { caller::string(file_name) }?;
        let bytes = std::fs::read(&path).map_err(|_| status(CUDA_ERROR_FILE_NOT_FOUND))?;
        // SAFETY: by cuLibraryLoadFromFile's contract `library` is NULL or writable.
        unsafe { load_library(library, &bytes, false) }
    }
}

export! {
    fn cuLibraryUnload(library: *mut c_void) {
        check_initialized()?;
        remove_library(library)
    }
}

export! {
    fn cuLibraryGetKernel(kernel: *mut *mut c_void, library: *mut c_void, name: *const c_char) {
        let module = library_module(library)?;
        // SAFETY: by cuLibraryGetKernel's contract `name` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(name) }?;
        let id = function_by_name(module, name)?;
        // SAFETY: by cuLibraryGetKernel's contract `kernel` is NULL or writable.
        unsafe { caller::write(kernel, id as *mut c_void) }
    }
}

export! {
    fn cuLibraryGetModule(module: *mut *mut c_void, library: *mut c_void) {
        let m = library_module(library)?;
        // SAFETY: by cuLibraryGetModule's contract `module` is NULL or writable.
        unsafe { caller::write(module, m as *mut c_void) }
    }
}

export! {
    fn cuLibraryGetKernelCount(count: *mut u32, library: *mut c_void) {
        let n = function_count(library_module(library)?)?;
        // SAFETY: by cuLibraryGetKernelCount's contract `count` is NULL or writable.
        unsafe { caller::write(count, n) }
    }
}

export! {
    fn cuLibraryEnumerateKernels(kernels: *mut *mut c_void, num_kernels: u32, library: *mut c_void) {
        let module = library_module(library)?;
        // SAFETY: by cuLibraryEnumerateKernels's contract `kernels` has room for
        // `num_kernels` handles.
        unsafe { enumerate_functions(module, kernels, num_kernels) }
    }
}

export! {
    fn cuLibraryGetGlobal(dptr: *mut u64, bytes: *mut usize, library: *mut c_void, name: *const c_char) {
        let module = library_module(library)?;
        // SAFETY: by cuLibraryGetGlobal's contract `name` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(name) }?;
        let (ptr, size) = global(module, name)?;
        // SAFETY: by cuLibraryGetGlobal's contract `dptr` is NULL or writable.
        unsafe { caller::write_opt(dptr, ptr) };
        // SAFETY: by cuLibraryGetGlobal's contract `bytes` is NULL or writable.
        unsafe { caller::write_opt(bytes, size as usize) };
        Ok(())
    }
}

export! {
    /// A `__managed__` variable: its address, which the CPU reaches too once mirrored.
    fn cuLibraryGetManaged(dptr: *mut u64, bytes: *mut usize, library: *mut c_void, name: *const c_char) {
        let module = library_module(library)?;
        // SAFETY: by cuLibraryGetManaged's contract `name` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(name) }?;
        // `global` mirrors a managed variable's pages.
        let (ptr, size) = global(module, name)?;
        // SAFETY: by cuLibraryGetManaged's contract `dptr` is NULL or writable.
        unsafe { caller::write_opt(dptr, ptr) };
        // SAFETY: by cuLibraryGetManaged's contract `bytes` is NULL or writable.
        unsafe { caller::write_opt(bytes, size as usize) };
        Ok(())
    }
}

export! {
    /// Unified functions are host functions a library exports to device code: CUDA
    /// 13 images built by nvcc have none, so every name is not found.
    fn cuLibraryGetUnifiedFunction(fptr: *mut *mut c_void, library: *mut c_void, name: *const c_char) {
        library_module(library)?;
        // SAFETY: by cuLibraryGetUnifiedFunction's contract `name` is NULL or a
        // NUL-terminated string.
        unsafe { caller::string(name) }?;
        if fptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Err(status(CUDA_ERROR_NOT_FOUND))
    }
}

export! {
    fn cuKernelGetFunction(function: *mut *mut c_void, kernel: *mut c_void) {
        function_facts(kernel)?;
        // SAFETY: by cuKernelGetFunction's contract `function` is NULL or writable.
        unsafe { caller::write(function, kernel) }
    }
}

export! {
    fn cuKernelGetLibrary(library: *mut *mut c_void, kernel: *mut c_void) {
        let l = library_of(kernel)?.ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        // SAFETY: by cuKernelGetLibrary's contract `library` is NULL or writable.
        unsafe { caller::write(library, l as *mut c_void) }
    }
}

export! {
    /// Kernels load on the current device: the device named must be one of this
    /// guest's, and the attributes are the current device's.
    fn cuKernelGetAttribute(value: *mut i32, attrib: i32, kernel: *mut c_void, device: i32) {
        check_device(device)?;
        let v = get_attribute(kernel, attrib)?;
        // SAFETY: by cuKernelGetAttribute's contract `value` is NULL or writable.
        unsafe { caller::write(value, v) }
    }
}

export! {
    fn cuKernelSetAttribute(attrib: i32, value: i32, kernel: *mut c_void, device: i32) {
        check_device(device)?;
        set_attribute(kernel, attrib, value)
    }
}

export! {
    fn cuKernelSetCacheConfig(kernel: *mut c_void, config: u32, device: i32) {
        check_device(device)?;
        set_cache_config(kernel, config)
    }
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn write_name(out: *mut *const c_char, f: *mut c_void) -> Result<()> {
    let (_, name, _) = function_facts(f)?;
    // SAFETY: as `write_name`'s caller promised.
    unsafe { caller::write(out, name) }
}

export! {
    fn cuKernelGetName(name: *mut *const c_char, kernel: *mut c_void) {
        // SAFETY: by cuKernelGetName's contract `name` is NULL or writable.
        unsafe { write_name(name, kernel) }
    }
}

export! {
    fn cuFuncGetName(name: *mut *const c_char, function: *mut c_void) {
        // SAFETY: by cuFuncGetName's contract `name` is NULL or writable.
        unsafe { write_name(name, function) }
    }
}

/// # Safety
/// `offset` and `size` are NULL or writable.
unsafe fn param_info(
    f: *mut c_void,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> Result<()> {
    let (_, _, params) = function_facts(f)?;
    let p = params.get(index).ok_or(CudaStatus::ErrorInvalidValue)?;
    if offset.is_null() && size.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as `param_info`'s caller promised.
    unsafe { caller::write_opt(offset, p.offset as usize) };
    // SAFETY: as `param_info`'s caller promised.
    unsafe { caller::write_opt(size, p.size as usize) };
    Ok(())
}

export! {
    fn cuKernelGetParamInfo(kernel: *mut c_void, index: usize, offset: *mut usize, size: *mut usize) {
        // SAFETY: by cuKernelGetParamInfo's contract the out-pointers are NULL or writable.
        unsafe { param_info(kernel, index, offset, size) }
    }
}

export! {
    fn cuFuncGetParamInfo(function: *mut c_void, index: usize, offset: *mut usize, size: *mut usize) {
        // SAFETY: by cuFuncGetParamInfo's contract the out-pointers are NULL or writable.
        unsafe { param_info(function, index, offset, size) }
    }
}

export! {
    fn cuFuncGetModule(module: *mut *mut c_void, function: *mut c_void) {
        let (m, _, _) = function_facts(function)?;
        // SAFETY: by cuFuncGetModule's contract `module` is NULL or writable.
        unsafe { caller::write(module, m as *mut c_void) }
    }
}

export! {
    /// Functions are loaded with their module (the host's driver loads the rest of a
    /// lazily loaded library on first use).
    fn cuFuncIsLoaded(state: *mut i32, function: *mut c_void) {
        function_facts(function)?;
        // SAFETY: by cuFuncIsLoaded's contract `state` is NULL or writable.
        unsafe { caller::write(state, LOADING_STATE_LOADED) }
    }
}

export! {
    fn cuFuncLoad(function: *mut c_void) {
        function_facts(function)?;
        Ok(())
    }
}
