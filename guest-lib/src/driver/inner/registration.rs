//! The entry points nvcc's generated code calls at program start to register its
//! device code, and the lazy loading of that code on the host on first use.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};

use sha2::{Digest, Sha256};
use vmcuda_wire::fatbin::{self, CONTAINER_HEADER_LEN, WRAPPER_LEN};
use vmcuda_wire::handshake::caps;
use vmcuda_wire::module::INLINE_IMAGE_MAX;
use vmcuda_wire::op::{
    FunctionHandle, ModuleGetFunction, ModuleGetGlobal, ModuleHandle, ModuleLoad, ModuleLoadCached,
    ModuleLoadedCached, ParamInfo,
};
use vmcuda_wire::CudaStatus;

use super::{call, call_with, Result};
use crate::client::Sink;
use crate::state::{registry, Fatbin, Kernel, Variable};
use crate::{caller, state};

pub extern "C" fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void {
    // The handle must be real and stable: the exit handler hands it back. A leaked
    // two-word cell is both; it also keeps the wrapper address for debugging.
    let handle: &'static mut [usize; 2] = Box::leak(Box::new([fat_cubin as usize, 0]));
    let key = handle.as_ptr() as usize;
    // SAFETY: by __cudaRegisterFatBinary's contract `fat_cubin.cast()` is NULL or readable.
    let data = unsafe { caller::read::<[u8; WRAPPER_LEN]>(fat_cubin.cast()) }
        .ok()
        .and_then(|raw| fatbin::parse_wrapper(&raw).ok())
        .map(|w| w.data as usize);
    match data {
        Some(data) => {
            registry().fatbins.insert(key, Fatbin {
                    data,
                    modules: HashMap::new(),
                });
        }
        None => eprintln!("vmcuda: __cudaRegisterFatBinary got something that is not a fatbinary; its kernels will not launch"),
    }
    key as *mut *mut c_void
}

pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

/// The real `libcudart.so.13`'s `__cudaGetProcAddress` answers NULL whatever it is
/// asked (its whole body, read from 13.0's library); so does this one.
pub extern "C" fn __cudaGetProcAddress() -> *mut c_void {
    std::ptr::null_mut()
}

pub extern "C" fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) {
    // At exit: forget it locally; the host unloads everything when the connection
    // closes, so nothing is sent from inside exit handlers.
    if let Ok(mut reg) = std::panic::catch_unwind(registry) {
        let key = handle as usize;
        reg.fatbins.remove(&key);
        reg.kernels.retain(|_, k| k.fatbin != key);
        reg.variables.retain(|_, v| v.fatbin != key);
    }
}

/// Load a fatbinary's module on the current device and give the program the
/// addresses of its `__managed__` variables (nvcc's code calls this before the
/// first use of one). 1 on success.
pub extern "C" fn __cudaInitModule(handle: *mut *mut c_void) -> c_char {
    let loaded = std::panic::catch_unwind(|| {
        let managed: Vec<usize> = registry()
            .variables
            .iter()
            .filter(|(key, v)| v.fatbin == handle as usize && v.managed == Some(**key))
            .map(|(key, _)| *key)
            .collect();
        module(handle as usize)?;
        managed
            .into_iter()
            .try_for_each(|key| variable(key).map(|_| ()))
    });
    match loaded {
        Ok(Ok(())) => 1,
        Ok(Err(e)) => {
            eprintln!("vmcuda: __cudaInitModule: {e}");
            0
        }
        Err(_) => 0,
    }
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: i32,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block_dim: *mut c_void,
    _grid_dim: *mut c_void,
    _warp_size: *mut i32,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: by __cudaRegisterFunction's contract `device_name` is NULL or a
        // NUL-terminated string.
        if let Ok(name) = unsafe { caller::string(device_name) } {
            registry().kernels.insert(
                host_fun as usize,
                Kernel {
                    fatbin: handle as usize,
                    name,
                    resolved: HashMap::new(),
                },
            );
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    size: usize,
    _constant: i32,
    _global: i32,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: by __cudaRegisterVar's contract `device_name` is NULL or a NUL-terminated
        // string.
        if let Ok(name) = unsafe { caller::string(device_name) } {
            registry().variables.insert(
                host_var as usize,
                Variable {
                    fatbin: handle as usize,
                    name,
                    size,
                    resolved: HashMap::new(),
                    managed: None,
                },
            );
        }
    });
}

/// The line `__cudaRegisterUnifiedTable` says, once.
const UNIFIED_TABLE_LINE: &str = "vmcuda: __cudaRegisterUnifiedTable: a host function and \
    data table for the module loader (the driver's CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE, \
    reserved for NVIDIA's use) holds this process's addresses, which cannot reach the host's \
    driver; the module loads without it";

/// NVIDIA's runtime keeps four pointers with the fatbinary's registration and passes
/// them to `cuLibraryLoadData` as the library option
/// `CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE`, which the driver reserves for
/// NVIDIA's internal use; nvcc 13.0 emits no call to it. Its addresses are the guest
/// process's, meaningless to the host's driver, so the table is not passed on: the
/// call says so once (it returns nothing, and leaves the last error alone, as the real
/// one does for a registered module).
pub extern "C" fn __cudaRegisterUnifiedTable(
    handle: *mut *mut c_void,
    _table0: *mut c_void,
    _table1: *mut c_void,
    _table2: *mut c_void,
    _table3: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if !handle.is_null() {
            crate::notice::say_once(UNIFIED_TABLE_LINE);
        }
    });
}

/// A `__managed__` variable: registered like a device variable, keyed by where the
/// program's code keeps its address, which [`__cudaInitModule`] (called by that code
/// before its first use) fills in.
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __cudaRegisterManagedVar(
    handle: *mut *mut c_void,
    host_var_ptr: *mut *mut c_void,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    size: usize,
    _constant: i32,
    _global: i32,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: by __cudaRegisterManagedVar's contract `device_name` is NULL or a
        // NUL-terminated string.
        if let Ok(name) = unsafe { caller::string(device_name) } {
            registry().variables.insert(
                host_var_ptr as usize,
                Variable {
                    fatbin: handle as usize,
                    name,
                    size,
                    resolved: HashMap::new(),
                    managed: Some(host_var_ptr as usize),
                },
            );
        }
    });
}

pub extern "C" fn __cudaRegisterHostVar(
    _handle: *mut *mut c_void,
    _name: *const c_char,
    _var: *mut c_char,
    _size: usize,
) {
}

/// The bytes of a registered fatbinary: its containers back to back, up to the start
/// of another registration's data or the first thing that is not a container.
///
/// # Safety
/// `data` is the start of fatbinary data the program registered, which stays mapped
/// and unchanged for as long as the process runs.
unsafe fn fatbin_image(data: usize, other_starts: &[usize]) -> Result<&'static [u8]> {
    let mut len = 0usize;
    loop {
        let at = data + len;
        if len > 0 && other_starts.contains(&at) {
            break;
        }
        let Some(header) = caller::try_read_array::<CONTAINER_HEADER_LEN>(at) else {
            break;
        };
        let Ok(total) = fatbin::container_total_len(&header) else {
            break;
        };
        len += total as usize;
    }
    if len == 0 {
        return Err(CudaStatus::ErrorInvalidKernelImage);
    }
    // SAFETY: as `fatbin_image`'s caller promised.
    unsafe { caller::bytes(data as *const u8, len) }
}

/// Loads a module image on the host: the runtime's registered fatbinaries and the
/// driver's module and library images alike. Of a fatbinary, only what the current
/// device can load crosses (see [`fatbin::for_device`]: libraries ship code for every
/// GPU), and one it can load nothing of is refused here with the driver's
/// `CUDA_ERROR_NO_BINARY_FOR_GPU` (`cudaErrorNoKernelImageForDevice`), as the driver
/// refuses it.
pub fn load_image(image: &[u8]) -> Result<ModuleHandle> {
    let mut kept = None;
    if image.get(..4) == Some(&fatbin::CONTAINER_MAGIC.to_le_bytes()[..]) {
        let props = super::device::properties(state::current_device())?;
        // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / MINOR.
        let sm = props.attribute(75).unwrap_or(0) * 10 + props.attribute(76).unwrap_or(0);
        match fatbin::for_device(image, sm as u32) {
            Ok(fatbin::ForDevice::Some(bytes)) => kept = Some(bytes),
            Ok(fatbin::ForDevice::Nothing) => return Err(CudaStatus::ErrorNoKernelImageForDevice),
            // All of it, or a fatbinary the host's driver will judge.
            Ok(fatbin::ForDevice::All) | Err(_) => {}
        }
    }
    let image = kept.as_deref().unwrap_or(image);
    let hosts = crate::client::client()?;
    if hosts.capabilities_of(state::current_device()) & caps::MODULE_CACHE == 0
        || !module_cache_wanted()
    {
        let loaded = call_with(&ModuleLoad, image, Sink::None)?;
        crate::done_word::note_module(loaded.prints);
        return Ok(loaded.module);
    }
    load_by_hash(image, |req, data| {
        let loaded = call_with(req, data, Sink::None)?;
        crate::done_word::note_module(loaded.prints);
        Ok(loaded)
    })
}

/// Whether images go by their hash to hosts that keep a module cache (unless
/// `VMCUDA_MODULE_CACHE=0`).
fn module_cache_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var("VMCUDA_MODULE_CACHE").map_or(true, |v| v != "0"))
}

/// Load `image` on a host with a module cache, through `send` (one waited
/// `ModuleLoadCached` each). A small image goes with its hash at once: one round trip
/// whether the host has it or not. A larger one is named by its hash alone first, and
/// only when the host lacks it (its VM never sent it, or it was evicted) does it follow
/// in a second request: a hit costs one round trip and no bytes, a miss one round trip
/// more than a plain load, which is small beside the bytes it carries.
fn load_by_hash(
    image: &[u8],
    mut send: impl FnMut(&ModuleLoadCached, &[u8]) -> Result<ModuleLoadedCached>,
) -> Result<ModuleHandle> {
    let req = ModuleLoadCached {
        sha256: Sha256::digest(image).into(),
    };
    if image.len() > INLINE_IMAGE_MAX {
        if let Some(module) = send(&req, &[])?.module {
            return Ok(module);
        }
    }
    // A host that answers an image it was sent with "send it" breaks the protocol.
    send(&req, image)?
        .module
        .ok_or(CudaStatus::ErrorInvalidKernelImage)
}

/// Which of the program's hosts serves the current device (0 with one host).
fn current_host() -> Result<usize> {
    Ok(crate::client::client()?.host_of(state::current_device()))
}

/// The host module of a registered fatbinary on the current device's host, loading it
/// there on first use.
fn module(fatbin: usize) -> Result<ModuleHandle> {
    let host = current_host()?;
    let (data, others) = {
        let reg = registry();
        let f = reg
            .fatbins
            .get(&fatbin)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        if let Some(m) = f.modules.get(&host) {
            return *m;
        }
        let others: Vec<usize> = reg
            .fatbins
            .values()
            .map(|f| f.data)
            .filter(|d| *d != f.data)
            .collect();
        (f.data, others)
    };
    // SAFETY: `data` was handed to __cudaRegisterFatBinary, whose contract makes it the
    // program's fatbinary, mapped and unchanged for as long as the process runs.
    let result = unsafe { fatbin_image(data, &others) }.and_then(load_image);
    if let Some(f) = registry().fatbins.get_mut(&fatbin) {
        f.modules.insert(host, result);
    }
    result
}

/// A registered kernel's host handle and parameter layout (cached after first use).
/// The device name a kernel's host stub was registered with.
pub fn kernel_name(host_fun: usize) -> Option<String> {
    registry().kernels.get(&host_fun).map(|k| k.name.clone())
}

pub fn kernel(host_fun: usize) -> Result<(FunctionHandle, Vec<ParamInfo>)> {
    let host = current_host()?;
    let (fatbin, name) = {
        let reg = registry();
        let k = reg
            .kernels
            .get(&host_fun)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        if let Some(r) = k.resolved.get(&host) {
            return Ok(r.clone());
        }
        (k.fatbin, k.name.clone())
    };
    let module = module(fatbin)?;
    let info = call(&ModuleGetFunction { module, name })?;
    let resolved = (info.function, info.params);
    if let Some(k) = registry().kernels.get_mut(&host_fun) {
        k.resolved.insert(host, resolved.clone());
    }
    Ok(resolved)
}

/// A kernel's attributes on the current device ([`crate::function_facts`]).
pub fn kernel_limits(host_fun: usize) -> Result<vmcuda_wire::op::FuncAttributes> {
    let (function, _) = kernel(host_fun)?;
    crate::function_facts::attributes(function)
}

/// Whether `host_fun` is a registered kernel stub.
pub fn is_kernel(host_fun: usize) -> bool {
    registry().kernels.contains_key(&host_fun)
}

/// A registered variable's device address and size (cached after first use).
pub fn variable(host_var: usize) -> Result<(u64, usize)> {
    let device = state::current_device();
    let (fatbin, name, size) = {
        let reg = registry();
        let v = reg
            .variables
            .get(&host_var)
            .ok_or(CudaStatus::ErrorInvalidSymbol)?;
        if let Some(ptr) = v.resolved.get(&device) {
            return Ok((*ptr, v.size));
        }
        (v.fatbin, v.name.clone(), v.size)
    };
    let module = module(fatbin)?;
    let global = call(&ModuleGetGlobal { module, name })?;
    let managed = {
        let mut reg = registry();
        reg.add_device_range(global.ptr, global.size.max(size as u64), device);
        let Some(v) = reg.variables.get_mut(&host_var) else {
            return Ok((global.ptr, size));
        };
        v.resolved.insert(device, global.ptr);
        v.managed.map(|at| (at, v.clone()))
    };
    if global.managed {
        // The CPU reaches it at the same address.
        super::memory::mirror_variable(global.ptr, size)?;
    }
    if let Some((at, v)) = managed {
        // Symbol calls may name it by that address too (`cudaMemcpyToSymbol(var, ...)`
        // passes `&var`).
        // SAFETY: `at` is the `void **` nvcc registered for this variable, which its
        // code reads the variable's address from.
        unsafe { caller::write(at as *mut u64, global.ptr) }?;
        let alias = Variable { managed: None, ..v };
        registry().variables.insert(global.ptr as usize, alias);
    }
    Ok((global.ptr, size))
}

/// After `cudaDeviceReset`, device addresses of variables are stale.
pub fn forget_device_state() {
    let mut reg = registry();
    for v in reg.variables.values_mut() {
        v.resolved.clear();
    }
    reg.clear_device_ranges();
    reg.streams.clear();
    reg.events.clear();
}

#[cfg(test)]
mod unified_table_tests {
    /// A module's unified table is not passed on: the call says so once, whatever
    /// the number of modules, and sets no error.
    #[test]
    fn a_unified_table_is_named_once_and_sets_no_error() {
        let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
        let none = std::ptr::null_mut();
        super::__cudaRegisterUnifiedTable(std::ptr::null_mut(), none, none, none, none);
        assert!(!crate::notice::said(super::UNIFIED_TABLE_LINE));
        for _ in 0..2 {
            super::__cudaRegisterUnifiedTable(&mut handle, none, none, none, none);
        }
        assert!(crate::notice::said(super::UNIFIED_TABLE_LINE));
        assert_eq!(crate::state::peek_last_error(), 0);
    }
}

#[cfg(test)]
mod load_by_hash_tests {
    use super::*;

    /// A host that has the images in `cached` (by hash), and keeps what it is sent;
    /// every request's data length is noted.
    fn host<'a>(
        cached: &'a mut Vec<[u8; 32]>,
        sent: &'a mut Vec<usize>,
    ) -> impl FnMut(&ModuleLoadCached, &[u8]) -> Result<ModuleLoadedCached> + 'a {
        move |req, data| {
            sent.push(data.len());
            if !data.is_empty() {
                assert_eq!(Sha256::digest(data).as_slice(), req.sha256);
                cached.push(req.sha256);
            } else if !cached.contains(&req.sha256) {
                return Ok(ModuleLoadedCached::default());
            }
            Ok(ModuleLoadedCached {
                module: Some(ModuleHandle(7)),
                prints: false,
            })
        }
    }

    #[test]
    fn a_large_image_goes_by_its_hash_and_its_bytes_only_on_a_miss() {
        let image = vec![3u8; INLINE_IMAGE_MAX + 1];
        let (mut cached, mut sent) = (Vec::new(), Vec::new());
        assert_eq!(
            load_by_hash(&image, host(&mut cached, &mut sent)),
            Ok(ModuleHandle(7))
        );
        assert_eq!(sent, [0, image.len()], "a miss: the hash, then the bytes");
        let mut again = Vec::new();
        assert_eq!(
            load_by_hash(&image, host(&mut cached, &mut again)),
            Ok(ModuleHandle(7))
        );
        assert_eq!(again, [0], "a hit: one round trip, no bytes");
    }

    #[test]
    fn a_small_image_goes_with_its_hash_in_one_round_trip() {
        let image = vec![5u8; 1000];
        let (mut cached, mut sent) = (Vec::new(), Vec::new());
        load_by_hash(&image, host(&mut cached, &mut sent)).unwrap();
        assert_eq!(sent, [1000]);
    }

    #[test]
    fn a_host_that_wants_an_image_it_was_sent_is_an_error() {
        let image = vec![1u8; 10];
        let refuse = |_: &ModuleLoadCached, _: &[u8]| Ok(ModuleLoadedCached::default());
        assert_eq!(
            load_by_hash(&image, refuse),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
        let failing = |_: &ModuleLoadCached, _: &[u8]| Err(CudaStatus::ErrorInvalidKernelImage);
        assert_eq!(
            load_by_hash(&image, failing),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
    }
}
