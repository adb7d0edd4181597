//! Modules, functions, launches and the linker.
//!
//! An image handed to `cuModuleLoadData` comes without its length: it is measured
//! here from its own headers (ELF cubin: the furthest section or header table; fatbin
//! wrapper or container: the size of the one container it names; anything else is PTX
//! text, up to its NUL), read through [`caller::try_read_array`] so a wild pointer fails cleanly. The
//! host loads all three kinds (the GPU executor JIT-compiles PTX; the host-memory test
//! executor refuses PTX as an invalid image, since it cannot compile it).
//!
//! A module stays loaded on the host until the connection ends (the host keeps each
//! distinct image once); `cuModuleUnload` drops the guest's handle and its functions.
//!
//! Linking is done by the host in one request at `cuLinkComplete`: the inputs are
//! gathered here (files read in the guest), the linked cubin comes back and lives in
//! the link state until `cuLinkDestroy`, as the driver's does.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::driver::{Link, LinkInput, LINK_OPTIONS};
use vmcuda_wire::fatbin::{self, CONTAINER_HEADER_LEN, WRAPPER_LEN};
use vmcuda_wire::op::{
    FuncAttributes, FunctionHandle, FunctionInfo, LaunchAttribute, LaunchKernel,
    ModuleFunctionNames, ModuleFunctions, ModuleGetFunction, ModuleGetGlobal, ModuleHandle,
    OccupancyAvailableDynamicSmem, OccupancyMaxActiveClusters, OccupancyMaxPotentialClusterSize,
    ParamInfo,
};
use vmcuda_wire::CudaStatus;

use super::result::{status, CUDA_ERROR_FILE_NOT_FOUND, CUDA_ERROR_NOT_FOUND};

use super::{check_initialized, export, stale, Result};
use crate::abi::driver::{KernelNodeParams, LaunchConfigC};
use crate::client::Sink;
use crate::driver::inner::graph_build;
use crate::driver::inner::{call, call_with, known_stream, post, stream_handle, RawHandle};
use crate::{caller, function_facts, gate, state};

struct Function {
    module: u64,
    function: FunctionHandle,
    /// Its mangled name, NUL-terminated for `cuFuncGetName` (the heap buffer stays put
    /// while the function is registered).
    name: std::ffi::CString,
    params: Vec<ParamInfo>,
}

/// A link in progress: its inputs, where the program wants the logs, and the
/// linked image once complete.
#[derive(Default)]
struct LinkState {
    inputs: Vec<(LinkInput, Vec<u8>)>,
    /// (buffer, its size) for the info and error logs.
    info_log: Option<(usize, usize)>,
    error_log: Option<(usize, usize)>,
    /// The numeric options the host's linker gets (`LINK_OPTIONS`), and where the
    /// program wants the wall time (its value slot in the array it passed).
    options: Vec<(u32, u32)>,
    wall_time: Option<usize>,
    cubin: Vec<u8>,
}

/// A library's code.
#[derive(Clone)]
enum LibraryCode {
    /// The program keeps the image where it is (`CU_LIBRARY_BINARY_IS_PRESERVED`).
    Preserved { at: usize, len: usize },
    /// A copy, where the program may free or reuse its image.
    Copied(std::sync::Arc<[u8]>),
}

/// A library: its code, and its module on each host that used it. A library belongs to
/// no context, and each of the program's hosts has its own (several hosts: one program's
/// devices on several machines), so it is loaded on each host on its first use there.
struct Library {
    code: LibraryCode,
    /// Host index -> the module loaded there.
    modules: HashMap<usize, u64>,
}

impl Library {
    fn holds(&self, module: u64) -> bool {
        self.modules.values().any(|m| *m == module)
    }
}

#[derive(Default)]
struct Modules {
    modules: HashMap<u64, ModuleHandle>,
    functions: HashMap<u64, Function>,
    /// (module, name) -> function id, so a kernel has one `CUfunction`.
    by_name: HashMap<(u64, String), u64>,
    links: HashMap<u64, LinkState>,
    /// `CUlibrary` -> its module (a library is a module whose kernels are found by
    /// name; its `CUkernel`s are that module's `CUfunction`s), loaded on first use.
    libraries: HashMap<u64, Library>,
}

static MODULES: Mutex<Option<Modules>> = Mutex::new(None);

fn modules() -> impl std::ops::DerefMut<Target = Modules> {
    struct Guard(MutexGuard<'static, Option<Modules>>);
    impl std::ops::Deref for Guard {
        type Target = Modules;
        fn deref(&self) -> &Modules {
            self.0.as_ref().expect("initialised")
        }
    }
    impl std::ops::DerefMut for Guard {
        fn deref_mut(&mut self) -> &mut Modules {
            self.0.as_mut().expect("initialised")
        }
    }
    let mut g = MODULES.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(Modules::default);
    Guard(g)
}

static STALE_MODULE: AtomicBool = AtomicBool::new(false);
static STALE_FUNCTION: AtomicBool = AtomicBool::new(false);
static STALE_LINK: AtomicBool = AtomicBool::new(false);
static STALE_LIBRARY: AtomicBool = AtomicBool::new(false);

pub(super) fn module_handle(m: *mut c_void) -> Result<ModuleHandle> {
    modules()
        .modules
        .get(&(m as u64))
        .copied()
        .ok_or_else(|| stale("module", &STALE_MODULE))
}

pub(super) fn function(f: *mut c_void) -> Result<(FunctionHandle, Vec<ParamInfo>)> {
    let found = modules()
        .functions
        .get(&(f as u64))
        .map(|x| (x.function, x.params.clone(), x.module));
    let (function, params, module) = found.ok_or_else(|| stale("function", &STALE_FUNCTION))?;
    match kernel_on_current_host(f as u64, function, module)? {
        Some(there) => self::function(there as *mut c_void),
        None => Ok((function, params)),
    }
}

/// A library's kernel used on a device of another host than the one whose module it
/// came from: the same kernel of the library's module on the current device's host
/// (loaded there now on its first use), as the driver loads a library in each context
/// that uses it. None when the kernel is the current host's, or a module's (a module
/// belongs to the context it was loaded in).
fn kernel_on_current_host(f: u64, function: FunctionHandle, module: u64) -> Result<Option<u64>> {
    let Some(hosts) = crate::client::connected_hosts() else {
        return Ok(None);
    };
    if hosts.count() < 2
        || hosts.host_of_handle(function.0) == hosts.host_of(state::current_device())
    {
        return Ok(None);
    }
    let found = {
        let m = modules();
        let library = m
            .libraries
            .iter()
            .find(|(_, l)| l.holds(module))
            .map(|(id, _)| *id);
        let name = m
            .functions
            .get(&f)
            .map(|x| x.name.to_string_lossy().into_owned());
        library.zip(name)
    };
    let Some((library, name)) = found else {
        return Ok(None);
    };
    let there = library_module(library as *mut c_void)?;
    Ok(Some(function_by_name(there, name)?))
}

const ELF_MAGIC: [u8; 4] = *b"\x7fELF";
const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
const WRAPPER_MAGIC: u32 = 0x466243B1;
/// Images larger than this are refused. Only what the device loads of a fatbinary
/// crosses (see [`load_bytes`]), under the frame's data limit.
const MAX_IMAGE: usize = 1 << 30;

/// The length of an ELF image: the furthest byte any header or section reaches.
fn elf_len(at: usize) -> Result<usize> {
    let bad = CudaStatus::ErrorInvalidKernelImage;
    let h = caller::try_read_array::<64>(at).ok_or(bad)?;
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes")) as usize;
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]) as usize;
    if h[4] != 2 {
        return Err(bad); // 64-bit ELF only, as every CUDA 13 cubin is
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3A), u16_at(0x3C));
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let mut end = shoff
        .saturating_add(shentsize * shnum)
        .max(phoff.saturating_add(phentsize * phnum))
        .max(64);
    if shentsize != 64 {
        return Err(bad);
    }
    for i in 0..shnum {
        let sh = caller::try_read_array::<64>(at.saturating_add(shoff + i * 64)).ok_or(bad)?;
        let kind = u32::from_le_bytes(sh[4..8].try_into().expect("4 bytes"));
        let off = u64::from_le_bytes(sh[0x18..0x20].try_into().expect("8 bytes")) as usize;
        let size = u64::from_le_bytes(sh[0x20..0x28].try_into().expect("8 bytes")) as usize;
        if kind != 8 {
            // SHT_NOBITS occupies no file bytes.
            end = end.max(off.saturating_add(size));
        }
    }
    if end > MAX_IMAGE {
        return Err(bad);
    }
    Ok(end)
}

/// The length of the fatbinary container at `at`: the one the driver reads. A
/// library's containers lie back to back in its `.nv_fatbin` section (libtorch_cuda:
/// thousands, most of a GiB), each registered on its own, so only the first is the
/// image.
fn container_len(at: usize) -> Result<usize> {
    let header =
        caller::try_read_array::<CONTAINER_HEADER_LEN>(at).ok_or(CudaStatus::ErrorInvalidValue)?;
    let total =
        fatbin::container_total_len(&header).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
    let len = usize::try_from(total).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
    if len > MAX_IMAGE {
        return Err(CudaStatus::ErrorInvalidKernelImage);
    }
    Ok(len)
}

/// The bytes of a module image (see the module documentation).
///
/// # Safety
/// `ptr` is the start of a module image (ELF, fatbinary or NUL-terminated PTX) the
/// program holds, readable to its end and unchanged during `'a`.
pub(super) unsafe fn image<'a>(ptr: *const c_void) -> Result<&'a [u8]> {
    let at = ptr as usize;
    let head = caller::try_read_array::<4>(at).ok_or(CudaStatus::ErrorInvalidValue)?;
    let magic = u32::from_le_bytes(head);
    let (start, len) = if head == ELF_MAGIC {
        (at, elf_len(at)?)
    } else if magic == CONTAINER_MAGIC {
        (at, container_len(at)?)
    } else if magic == WRAPPER_MAGIC {
        let raw = caller::try_read_array::<WRAPPER_LEN>(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        let wrapper =
            fatbin::parse_wrapper(&raw).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
        let data = wrapper.data as usize;
        (data, container_len(data)?)
    } else {
        // PTX text: up to its NUL, which the host adds back.
        // SAFETY: as `image`'s caller promised.
        let text = unsafe { caller::string(ptr.cast()) }?;
        (at, text.len())
    };
    // SAFETY: as `image`'s caller promised.
    unsafe { caller::bytes(start as *const u8, len) }
}

/// Loads an image on the host (see [`crate::driver::inner::images::load_image`]) and
/// registers it: the module's id.
pub(super) fn load_bytes(bytes: &[u8]) -> Result<u64> {
    let module = crate::driver::inner::images::load_image(bytes)?;
    let id = state::fresh_id();
    modules().modules.insert(id, module);
    Ok(id)
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn load(out: *mut *mut c_void, bytes: &[u8]) -> Result<()> {
    check_initialized()?;
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let id = load_bytes(bytes)?;
    // SAFETY: as `load`'s caller promised.
    unsafe { caller::write(out, id as *mut c_void) }
}

/// Forgets a module and its functions (the host keeps the image until the end).
pub(super) fn unload(id: u64) -> Result<()> {
    let mut m = modules();
    if m.modules.remove(&id).is_none() {
        return Err(stale("module", &STALE_MODULE));
    }
    let gone: Vec<FunctionHandle> = m
        .functions
        .values()
        .filter(|f| f.module == id)
        .map(|f| f.function)
        .collect();
    m.functions.retain(|_, f| f.module != id);
    crate::function_facts::forget(gone);
    m.by_name.retain(|(module, _), _| *module != id);
    m.libraries.retain(|_, l| !l.holds(id));
    Ok(())
}

/// The function `name` of module `module` (one id per kernel); a name the module
/// lacks is `CUDA_ERROR_NOT_FOUND`.
pub(super) fn function_by_name(module: u64, name: String) -> Result<u64> {
    let handle = module_handle(module as *mut c_void)?;
    let key = (module, name.clone());
    if let Some(id) = modules().by_name.get(&key) {
        return Ok(*id);
    }
    let info = call(&ModuleGetFunction {
        module: handle,
        name: name.clone(),
    })
    .map_err(|e| {
        if e == CudaStatus::ErrorInvalidDeviceFunction {
            status(CUDA_ERROR_NOT_FOUND)
        } else {
            e
        }
    })?;
    remember_function(module, name, info)
}

/// Register a function the host named: its id (the one it already has if another
/// thread found it meanwhile: one id per kernel).
fn remember_function(module: u64, name: String, info: FunctionInfo) -> Result<u64> {
    let c_name = std::ffi::CString::new(name.clone()).map_err(|_| CudaStatus::ErrorInvalidValue)?;
    let key = (module, name);
    let mut m = modules();
    if let Some(id) = m.by_name.get(&key) {
        return Ok(*id);
    }
    let id = state::fresh_id();
    m.functions.insert(
        id,
        Function {
            module,
            function: info.function,
            name: c_name,
            params: info.params,
        },
    );
    m.by_name.insert(key, id);
    Ok(id)
}

/// The names of a module's kernels, as the host's driver enumerates them.
fn function_names(module: u64) -> Result<Vec<String>> {
    let handle = module_handle(module as *mut c_void)?;
    Ok(call(&ModuleFunctionNames { module: handle })?.names)
}

/// How many kernels a module holds.
pub(super) fn function_count(module: u64) -> Result<u32> {
    Ok(function_names(module)?.len() as u32)
}

/// Up to `count` of a module's kernels, as function ids, into `out`.
///
/// # Safety
/// `out` is NULL (refused) or has room for `count` handles.
pub(super) unsafe fn enumerate_functions(
    module: u64,
    out: *mut *mut c_void,
    count: u32,
) -> Result<()> {
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    for (i, id) in function_ids(module)?
        .into_iter()
        .take(count as usize)
        .enumerate()
    {
        // SAFETY: as `enumerate_functions`'s caller promised.
        unsafe { caller::write(out.add(i), id as *mut c_void) }?;
    }
    Ok(())
}

/// A module's kernels as function ids, in the order the host's driver lists them
/// (one round trip for all of them).
pub(super) fn function_ids(module: u64) -> Result<Vec<u64>> {
    let handle = module_handle(module as *mut c_void)?;
    call(&ModuleFunctions { module: handle })?
        .functions
        .into_iter()
        .map(|(name, info)| remember_function(module, name, info))
        .collect()
}

export! {
    fn cuModuleGetFunctionCount(count: *mut u32, module: *mut c_void) {
        let n = function_count(module as u64)?;
        // SAFETY: by cuModuleGetFunctionCount's contract `count` is NULL or writable.
        unsafe { caller::write(count, n) }
    }
}

export! {
    fn cuModuleEnumerateFunctions(functions: *mut *mut c_void, count: u32, module: *mut c_void) {
        // SAFETY: by cuModuleEnumerateFunctions's contract `functions` has room for
        // `count` handles.
        unsafe { enumerate_functions(module as u64, functions, count) }
    }
}

/// What the guest knows of a function: its module, its name (a pointer that stays
/// valid while the module is loaded) and its parameter layout.
pub(super) fn function_facts(f: *mut c_void) -> Result<(u64, *const c_char, Vec<ParamInfo>)> {
    modules()
        .functions
        .get(&(f as u64))
        .map(|x| (x.module, x.name.as_ptr(), x.params.clone()))
        .ok_or_else(|| stale("function", &STALE_FUNCTION))
}

/// The module of a library on the current device's host, loading it now if this is its
/// first use there.
pub(super) fn library_module(library: *mut c_void) -> Result<u64> {
    let id = library as u64;
    let host = crate::client::client()?.host_of(state::current_device());
    let code = match modules().libraries.get(&id) {
        None => return Err(stale("library", &STALE_LIBRARY)),
        Some(l) => match l.modules.get(&host) {
            Some(m) => return Ok(*m),
            None => l.code.clone(),
        },
    };
    let module = match code {
        LibraryCode::Copied(bytes) => load_bytes(&bytes)?,
        LibraryCode::Preserved { at, len } => {
            // SAFETY: the program promised (CU_LIBRARY_BINARY_IS_PRESERVED) that the
            // image stays where it was until the library is unloaded; the read is checked.
            let image = unsafe { caller::bytes(at as *const u8, len) }?;
            load_bytes(image)?
        }
    };
    let mut m = modules();
    match m.libraries.get_mut(&id) {
        // Another thread may have loaded it meanwhile: one module per library and host.
        Some(l) => Ok(*l.modules.entry(host).or_insert(module)),
        None => Err(stale("library", &STALE_LIBRARY)),
    }
}

/// Registers a library whose image is loaded on first use: the library's id.
pub(super) fn add_library(image: &[u8], preserved: bool) -> u64 {
    let code = if preserved {
        LibraryCode::Preserved {
            at: image.as_ptr() as usize,
            len: image.len(),
        }
    } else {
        LibraryCode::Copied(image.into())
    };
    let library = Library {
        code,
        modules: HashMap::new(),
    };
    let id = state::fresh_id();
    modules().libraries.insert(id, library);
    id
}

/// The library whose module holds function `f`, if it came from one.
pub(super) fn library_of(f: *mut c_void) -> Result<Option<u64>> {
    let (module, _, _) = function_facts(f)?;
    Ok(modules()
        .libraries
        .iter()
        .find(|(_, l)| l.holds(module))
        .map(|(l, _)| *l))
}

/// Forgets a library and the modules it loaded, where it was used.
pub(super) fn remove_library(library: *mut c_void) -> Result<()> {
    // (The registry's lock is let go before `unload` takes it again.)
    let removed = modules().libraries.remove(&(library as u64));
    match removed {
        None => Err(stale("library", &STALE_LIBRARY)),
        Some(l) => l.modules.into_values().try_for_each(unload),
    }
}

export! {
    fn cuModuleLoadData(module: *mut *mut c_void, image_ptr: *const c_void) {
        // SAFETY: by cuModuleLoadData's contract `image_ptr` is a module image the
        // program holds and `module` is NULL or writable.
        unsafe { load(module, image(image_ptr)?) }
    }
}

/// The output options of a module load (`cuModuleLoadDataEx`): the log buffers, the
/// slots their filled lengths go back into, and the wall time's slot.
#[derive(Default)]
struct JitOutputs {
    info_log: Option<(usize, usize)>,
    error_log: Option<(usize, usize)>,
    info_len_slot: Option<usize>,
    error_len_slot: Option<usize>,
    wall_time: Option<usize>,
}

impl JitOutputs {
    /// Reads the output options of a JIT option array; every other option goes to
    /// `other` with its value.
    ///
    /// # Safety
    /// `options` and `values` are NULL or hold `n` readable entries each.
    unsafe fn read(
        n: u32,
        options: *const u32,
        values: *const *mut c_void,
        mut other: impl FnMut(u32, usize),
    ) -> Result<Self> {
        let mut out = JitOutputs::default();
        let (mut info, mut error, mut info_len, mut error_len) = (0usize, 0usize, 0usize, 0usize);
        for i in 0..n as usize {
            // SAFETY: as `read`'s caller promised.
            let option = unsafe { caller::read(options.wrapping_add(i)) }?;
            let slot = values.wrapping_add(i);
            // SAFETY: as `read`'s caller promised.
            let value = unsafe { caller::read(slot) }? as usize;
            match option {
                JIT_INFO_LOG_BUFFER => info = value,
                JIT_INFO_LOG_BUFFER_SIZE_BYTES => {
                    (info_len, out.info_len_slot) = (value, Some(slot as usize))
                }
                JIT_ERROR_LOG_BUFFER => error = value,
                JIT_ERROR_LOG_BUFFER_SIZE_BYTES => {
                    (error_len, out.error_len_slot) = (value, Some(slot as usize))
                }
                JIT_WALL_TIME => out.wall_time = Some(slot as usize),
                o => other(o, value),
            }
        }
        out.info_log = (info != 0 && info_len > 0).then_some((info, info_len));
        out.error_log = (error != 0 && error_len > 0).then_some((error, error_len));
        Ok(out)
    }

    /// Fill the outputs after a load: an empty info log, and on failure an error log
    /// naming the host's answer (its driver compiled the image; its own logs stay there).
    ///
    /// # Safety
    /// The buffers and slots are the program's, as `read` found them.
    unsafe fn write(&self, failure: Option<CudaStatus>) -> Result<()> {
        let error = failure.map(|s| {
            let code = super::result::cu_result(s);
            let name = super::names::name(code).unwrap_or("an unnamed code");
            format!("vmcuda: the host's driver did not load this image: {name}")
        });
        // SAFETY: as `write`'s caller promised.
        unsafe { write_log(self.info_log, "") }?;
        // SAFETY: as `write`'s caller promised.
        unsafe { write_log(self.error_log, error.as_deref().unwrap_or("")) }?;
        let filled = |log: Option<(usize, usize)>, text: &str| {
            log.map_or(0, |(_, len)| text.len().min(len - 1))
        };
        if let Some(slot) = self.info_len_slot {
            // SAFETY: as `write`'s caller promised; the driver writes the filled length
            // into the size option's slot.
            unsafe { caller::write(slot as *mut usize, 0) }?;
        }
        if let Some(slot) = self.error_len_slot {
            let n = filled(self.error_log, error.as_deref().unwrap_or(""));
            // SAFETY: as above.
            unsafe { caller::write(slot as *mut usize, n) }?;
        }
        if let Some(slot) = self.wall_time {
            // SAFETY: as above; the time goes as a float at the start of its slot.
            unsafe { caller::write(slot as *mut f32, 0.0) }?;
        }
        Ok(())
    }
}

export! {
    /// The numeric JIT options are the host's business (its driver compiles with its
    /// defaults); the log buffers and the wall time are filled as the driver fills them.
    fn cuModuleLoadDataEx(
        module: *mut *mut c_void,
        image_ptr: *const c_void,
        num_options: u32,
        options: *mut u32,
        values: *mut *mut c_void,
    ) {
        // SAFETY: by cuModuleLoadDataEx's contract `options` and `values` hold
        // `num_options` entries each.
        let outputs = unsafe { JitOutputs::read(num_options, options, values, |_, _| {}) }?;
        // SAFETY: by cuModuleLoadDataEx's contract `image_ptr` is a module image the
        // program holds and `module` is NULL or writable.
        let loaded = unsafe { image(image_ptr).and_then(|i| load(module, i)) };
        // SAFETY: by cuModuleLoadDataEx's contract the log buffers are writable for
        // their sizes and the value slots are writable.
        unsafe { outputs.write(loaded.err()) }?;
        loaded
    }
}

export! {
    fn cuModuleLoadFatBinary(module: *mut *mut c_void, fat_cubin: *const c_void) {
        // SAFETY: by cuModuleLoadFatBinary's contract `fat_cubin` is a fatbinary the
        // program holds and `module` is NULL or writable.
        unsafe { load(module, image(fat_cubin)?) }
    }
}

export! {
    fn cuModuleLoad(module: *mut *mut c_void, fname: *const c_char) {
        // SAFETY: by cuModuleLoad's contract `fname` is NULL or a NUL-terminated string.
        let path = unsafe { caller::string(fname) }?;
        let bytes = std::fs::read(&path).map_err(|_| status(CUDA_ERROR_FILE_NOT_FOUND))?;
        // SAFETY: by cuModuleLoad's contract its pointer arguments are as `load` requires.
        unsafe { load(module, &bytes) }
    }
}

export! {
    fn cuModuleUnload(module: *mut c_void) {
        check_initialized()?;
        unload(module as u64)?;
        // The real driver prints what kernels wrote with `printf` at a module's unload;
        // here that output comes out of the host's driver when the host synchronizes.
        if crate::done_word::printing() {
            let _ = super::keeping_last_error(|| crate::driver::inner::device::cudaDeviceSynchronize());
        }
        Ok(())
    }
}

export! {
    fn cuModuleGetFunction(out: *mut *mut c_void, module: *mut c_void, name: *const c_char) {
        module_handle(module)?;
        // SAFETY: by cuModuleGetFunction's contract `name` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(name) }?;
        let id = function_by_name(module as u64, name)?;
        // SAFETY: by cuModuleGetFunction's contract `out` is NULL or writable.
        unsafe { caller::write(out, id as *mut c_void) }
    }
}

export! {
    fn cuModuleGetGlobal_v2(dptr: *mut u64, bytes: *mut usize, module: *mut c_void, name: *const c_char) {
        // SAFETY: by cuModuleGetGlobal_v2's contract `name` is NULL or a NUL-terminated
        // string.
        let name = unsafe { caller::string(name) }?;
        let (ptr, size) = global(module as u64, name)?;
        // SAFETY: by cuModuleGetGlobal_v2's contract `dptr` is NULL or writable.
        unsafe { caller::write_opt(dptr, ptr) };
        // SAFETY: by cuModuleGetGlobal_v2's contract `bytes` is NULL or writable.
        unsafe { caller::write_opt(bytes, size as usize) };
        Ok(())
    }
}

/// A module-scope variable's address and size; a name the module lacks is
/// `CUDA_ERROR_NOT_FOUND`.
pub(super) fn global(module: u64, name: String) -> Result<(u64, u64)> {
    let handle = module_handle(module as *mut c_void)?;
    let g = call(&ModuleGetGlobal {
        module: handle,
        name,
    })
    .map_err(|e| {
        if e == CudaStatus::ErrorInvalidSymbol {
            status(CUDA_ERROR_NOT_FOUND)
        } else {
            e
        }
    })?;
    state::registry().add_device_range(g.ptr, g.size, state::current_device());
    // A `__managed__` variable however it is reached (NVIDIA's runtime asks for
    // globals by name): the CPU reaches it at the same address.
    if g.managed {
        crate::driver::inner::memory::mirror_variable(g.ptr, g.size as usize)?;
    }
    Ok((g.ptr, g.size))
}

/// One `CUfunction_attribute` out of the function's attributes.
fn attribute(a: &FuncAttributes, attrib: i32) -> Option<i32> {
    Some(match attrib {
        0 => a.max_threads_per_block,
        1 => a.shared_size_bytes as i32,
        2 => a.const_size_bytes as i32,
        3 => a.local_size_bytes as i32,
        4 => a.num_regs,
        5 => a.ptx_version,
        6 => a.binary_version,
        7 => a.cache_mode_ca,
        8 => a.max_dynamic_shared_size_bytes,
        9 => a.preferred_shmem_carveout,
        10 => a.cluster_dim_must_be_set,
        11 => a.required_cluster_width,
        12 => a.required_cluster_height,
        13 => a.required_cluster_depth,
        14 => a.non_portable_cluster_size_allowed,
        15 => a.cluster_scheduling_policy_preference,
        _ => return None,
    })
}

export! {
    fn cuFuncGetAttribute(value: *mut i32, attrib: i32, f: *mut c_void) {
        let v = get_attribute(f, attrib)?;
        // SAFETY: by cuFuncGetAttribute's contract `value` is NULL or writable.
        unsafe { caller::write(value, v) }
    }
}

/// One attribute of a function (its attributes are asked of the host once:
/// [`crate::function_facts`]).
pub(super) fn get_attribute(f: *mut c_void, attrib: i32) -> Result<i32> {
    let (function, _) = function(f)?;
    attribute(&function_facts::attributes(function)?, attrib).ok_or(CudaStatus::ErrorInvalidValue)
}

/// Sets a function attribute (a value it already has is not sent again).
pub(super) fn set_attribute(f: *mut c_void, attrib: i32, value: i32) -> Result<()> {
    let (function, _) = function(f)?;
    function_facts::set_attribute(function, attrib, value)
}

pub(super) fn set_cache_config(f: *mut c_void, config: u32) -> Result<()> {
    let (function, _) = function(f)?;
    function_facts::set_cache_config(function, config)
}

export! {
    /// The driver's settable attributes share their numbers with the runtime's.
    fn cuFuncSetAttribute(f: *mut c_void, attrib: i32, value: i32) {
        set_attribute(f, attrib, value)
    }
}

export! {
    fn cuFuncSetCacheConfig(f: *mut c_void, config: u32) {
        set_cache_config(f, config)
    }
}

export! {
    fn cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks: *mut i32, f: *mut c_void, block_size: i32, dynamic_smem: usize) {
        let (function, _) = function(f)?;
        let r = function_facts::occupancy(function, block_size, dynamic_smem as u64, 0)?;
        // SAFETY: by cuOccupancyMaxActiveBlocksPerMultiprocessor's contract `blocks` is
        // NULL or writable.
        unsafe { caller::write(blocks, r) }
    }
}

/// `CU_MODULE_EAGER_LOADING` and `CU_MODULE_LAZY_LOADING`.
const CU_MODULE_EAGER_LOADING: u32 = 1;
const CU_MODULE_LAZY_LOADING: u32 = 2;

/// The loading mode `CUDA_MODULE_LOADING` asks for, as the driver reads it: `EAGER`,
/// or lazy (the default since CUDA 12.2).
fn loading_mode(setting: Option<&std::ffi::OsStr>) -> u32 {
    match setting.and_then(|s| s.to_str()) {
        Some("EAGER") => CU_MODULE_EAGER_LOADING,
        _ => CU_MODULE_LAZY_LOADING,
    }
}

export! {
    /// NVIDIA's runtime asks at start-up how modules load, and loads a program's
    /// modules and looks up all their kernels at once when told "eager" (cuDNN: 4,600
    /// libraries and 14,000 kernels before its first convolution). Libraries reach the
    /// host on first use either way (see [`super::library`]), so the guest answers as
    /// the driver does.
    fn cuModuleGetLoadingMode(mode: *mut u32) {
        let m = loading_mode(std::env::var_os("CUDA_MODULE_LOADING").as_deref());
        // SAFETY: by cuModuleGetLoadingMode's contract `mode` is NULL or writable.
        unsafe { caller::write(mode, m) }
    }
}

/// The program's `CUfunction` (or library kernel) for the host's function handle
/// `handle`, where it has one.
pub(crate) fn function_id_of(handle: FunctionHandle) -> Option<u64> {
    let m = modules();
    m.functions
        .iter()
        .filter(|(_, f)| f.function == handle)
        .map(|(id, _)| *id)
        .min()
}

mod launch;
pub(super) mod legacy_state;
mod link;
pub(crate) use launch::*;
pub(crate) use link::*;

#[cfg(test)]
mod tests;
