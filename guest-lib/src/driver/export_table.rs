//! `cuGetExportTable`: the driver's undocumented tables that NVIDIA's runtime (the
//! static one in every plain-`nvcc` program and library, and `libcudart.so.13`) asks
//! for at start-up.
//!
//! Each table is a `static` (its address is stable for the life of the process: the
//! integrity check hashes two of them): a size in bytes, then functions. What each slot
//! does is not documented by NVIDIA; the layouts served here are the ones public
//! projects that implemented these tables agree on (high confidence), and every slot
//! whose meaning is unknown is a stub that names its table and slot on stderr, once,
//! and answers `CUDA_ERROR_NOT_SUPPORTED`. Served:
//!
//! - `6bd5fb6c...` the runtime interface: loading the fatbinaries nvcc embeds goes to
//!   the guest's module loading (`cuModuleLoadData`), and the device's primary context;
//! - `a094798c...` tools callback hooks: two driver-owned buffers, no-op callbacks;
//! - `42d85a81...` tools TLS: the calling thread's current context;
//! - `c693336e...` context-local storage: the runtime's per-context state, kept here;
//! - `263e8860...` context checks: no context is a wrapped one;
//! - `d4082055...` the integrity check ([`super::integrity`]).
//!
//! Every other id is answered `CUDA_ERROR_NOT_FOUND` with NULL stored, and one stderr
//! line naming it (`f8cff951...`, asked by every runtime before `cuInit`, is refused
//! quietly: the runtime goes on without it). None of this crosses the VM boundary
//! except what the slots call. What must still be checked on the GPU: see
//! docs/driver-export-tables.md.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::io::Write;
use std::panic::catch_unwind;
use std::sync::Mutex;

use super::context::{
    check_device, context_of, cuCtxGetCurrent, cuDeviceGetAttribute, cuDeviceGetCount,
    cuDeviceGetUuid_v2, CUcontext,
};
use super::integrity::{self, CallFacts, DeviceFacts};
use super::module::{cuModuleLoadData, cuModuleUnload};
use super::result::{
    status, CUresult, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_SUPPORTED, CUDA_SUCCESS,
};
use super::{export, guard};
use crate::caller;
use crate::driver::inner::RawHandle;
use vmcuda_wire::CudaStatus;

/// A table id, the 16 bytes of the `CUuuid` as they lie in memory.
type Id = [u8; 16];

const fn id(hex: &str) -> Id {
    let h = hex.as_bytes();
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (nibble(h[2 * i]) << 4) | nibble(h[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("not a hex digit"),
    }
}

pub const CUDART_INTERFACE: Id = id("6bd5fb6c5bf4e74a8987d93912fd9df9");
pub const TOOLS_CALLBACK_HOOKS: Id = id("a094798c2e742e7493f20800200c0a66");
pub const TOOLS_TLS: Id = id("42d85a8123f6cb478298f6e78a3aecdc");
pub const CONTEXT_LOCAL_STORAGE: Id = id("c693336e1121df11a8c368f355d89593");
pub const CONTEXT_CHECKS: Id = id("263e88607cd2614392f6bbd5006dfa7e");
pub const INTEGRITY_CHECK: Id = id("d4082055bde6704b8d34ba123c66e1f2");
/// Tables NVIDIA's libraries (cuDNN, cuFFT, cuSOLVER, ...) ask for with their static
/// runtimes, and torch and CuPy: their slots are mostly unknown (see
/// docs/driver-export-tables.md), so each is served at its measured size with a stub
/// per slot that names itself once, except the slots known.
pub const CONTEXT_IDENTITY: Id = id("21318c60971432488ca641ff7324c8f2");
pub const FUNCTION_INTROSPECTION: Id = id("6e163fbeb958444d835ce182aff1991e");
pub const LIBRARY_TABLE_7: Id = id("da9151d33ae6cc41a5c04f26d533e328");
pub const LIBRARY_TABLE_34: Id = id("69a28e9f24498b47b030c5da330ea4e9");
/// Asked by torch's bf16 transformer step (cuBLASLt), which calls slots 4 and 13
/// natively and crashes when the table is refused.
pub const LIBRARY_TABLE_17: Id = id("1734dc26800d47458726c0f1e7dd8bca");
/// Asked first by every runtime; refused quietly (see the module documentation).
pub const REFUSED_QUIETLY: Id = id("f8cff95121468b4eb9e2fb469e7c0dd9");

/// The tables with stub slots, for the stubs' lines (index = the stub's `T`).
const STUB_TABLES: [Id; 8] = [
    CUDART_INTERFACE,
    CONTEXT_CHECKS,
    TOOLS_TLS,
    CONTEXT_IDENTITY,
    FUNCTION_INTROSPECTION,
    LIBRARY_TABLE_7,
    LIBRARY_TABLE_34,
    LIBRARY_TABLE_17,
];

fn hex(id: &Id) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lines already printed (a table and slot, or a table id), so each is said once.
static REPORTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn say_once(line: String) {
    let first = REPORTED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(line.clone());
    if first {
        // A closed stderr is no reason to fail differently.
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// A slot whose meaning is unknown: slot `S` of table `STUB_TABLES[T]`.
extern "C" fn unknown_slot<const T: usize, const S: usize>() -> CUresult {
    let _ = catch_unwind(|| {
        say_once(format!(
            "vmcuda: export table {} slot {S} is not implemented; it returns CUDA_ERROR_NOT_SUPPORTED",
            hex(&STUB_TABLES[T])
        ));
    });
    CUDA_ERROR_NOT_SUPPORTED
}

type Unknown = extern "C" fn() -> CUresult;

/// A callback the runtime makes that needs no answer.
extern "C" fn nothing() -> CUresult {
    CUDA_SUCCESS
}

/// The size word of a table of `words` machine words, the size word included.
const fn size_of_words(words: usize) -> usize {
    words * std::mem::size_of::<usize>()
}

// ---- 6bd5fb6c: the runtime interface ------------------------------------------------

#[repr(C)]
pub struct CudartInterface {
    size: usize,
    load_wrapper: extern "C" fn(*mut *mut c_void, *const c_void) -> CUresult,
    primary_context: extern "C" fn(*mut CUcontext, i32) -> CUresult,
    slot3: Unknown,
    slot4: Unknown,
    slot5: Unknown,
    load_wrapper_ext: extern "C" fn(*mut *mut c_void, *const c_void, usize, usize, u32) -> CUresult,
    unload: extern "C" fn(*mut c_void),
    load_container: extern "C" fn(*const c_void, *mut *mut c_void, usize, usize, u32) -> CUresult,
    slot9: Unknown,
    slot10: Unknown,
    slot11: Unknown,
    initialize: extern "C" fn() -> CUresult,
}

/// Slot 1: load the fatbinary wrapper nvcc embeds (`__fatBinC_Wrapper_t`); the guest's
/// module loading takes wrappers, containers and ELF images alike.
extern "C" fn load_wrapper(module: *mut *mut c_void, wrapper: *const c_void) -> CUresult {
    cuModuleLoadData(module, wrapper)
}

/// Slot 6: the same, with three arguments that are zero in every use seen; other values
/// (host variables registered with the module) are not understood.
extern "C" fn load_wrapper_ext(
    module: *mut *mut c_void,
    wrapper: *const c_void,
    a3: usize,
    a4: usize,
    a5: u32,
) -> CUresult {
    if a3 != 0 || a4 != 0 || a5 != 0 {
        say_once(format!(
            "vmcuda: export table {} slot 6 was called with arguments vmcuda does not understand; it returns CUDA_ERROR_NOT_SUPPORTED",
            hex(&CUDART_INTERFACE)
        ));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    cuModuleLoadData(module, wrapper)
}

/// Slot 8: load from the fatbinary container itself (note the argument order).
extern "C" fn load_container(
    header: *const c_void,
    module: *mut *mut c_void,
    a3: usize,
    a4: usize,
    a5: u32,
) -> CUresult {
    load_wrapper_ext(module, header, a3, a4, a5)
}

/// Slot 7: the runtime's module unregistration. A handle this guest does not hold is
/// ignored, as it is natively (the slot returns nothing).
extern "C" fn unload(module: *mut c_void) {
    let _ = cuModuleUnload(module);
}

/// Slot 2: the device's primary context. It takes no reference (as the public
/// implementations do): the guest's contexts are tokens naming their device.
extern "C" fn primary_context(ctx: *mut CUcontext, device: i32) -> CUresult {
    guard("cuGetExportTable: primary context", || {
        check_device(device)?;
        // SAFETY: the runtime passes a writable context pointer (or NULL, refused).
        unsafe { caller::write(ctx, context_of(device)) }
    })
}

pub static CUDART: CudartInterface = CudartInterface {
    size: size_of_words(13),
    load_wrapper,
    primary_context,
    slot3: unknown_slot::<0, 3>,
    slot4: unknown_slot::<0, 4>,
    slot5: unknown_slot::<0, 5>,
    load_wrapper_ext,
    unload,
    load_container,
    slot9: unknown_slot::<0, 9>,
    slot10: unknown_slot::<0, 10>,
    slot11: unknown_slot::<0, 11>,
    initialize: nothing,
};

// ---- a094798c: tools callback hooks -------------------------------------------------

/// A buffer the runtime writes into; only the runtime touches it, through the pointer.
#[repr(C, align(16))]
pub struct Buffer<const N: usize>(std::cell::UnsafeCell<[u8; N]>);
// SAFETY: the guest never reads or writes it; it only hands out its address.
unsafe impl<const N: usize> Sync for Buffer<N> {}

static HOOK_BUFFER: Buffer<1024> = Buffer(std::cell::UnsafeCell::new([0; 1024]));
static HOOK_BUFFER_SMALL: Buffer<14> = Buffer(std::cell::UnsafeCell::new([0; 14]));

fn hand_out<const N: usize>(b: &'static Buffer<N>, buf: *mut *mut c_void, size: *mut usize) {
    // SAFETY: the runtime passes writable pointers (NULL ones are skipped).
    unsafe {
        caller::write_opt(buf, b.0.get().cast::<c_void>());
        caller::write_opt(size, N);
    }
}

extern "C" fn hook_buffer(buf: *mut *mut c_void, size: *mut usize) {
    hand_out(&HOOK_BUFFER, buf, size)
}

extern "C" fn hook_buffer_small(buf: *mut *mut c_void, size: *mut usize) {
    hand_out(&HOOK_BUFFER_SMALL, buf, size)
}

#[repr(C)]
pub struct ToolsCallbackHooks {
    size: usize,
    slot1: Unknown,
    buffer: extern "C" fn(*mut *mut c_void, *mut usize),
    slot3: Unknown,
    slot4: Unknown,
    slot5: Unknown,
    small_buffer: extern "C" fn(*mut *mut c_void, *mut usize),
}

/// Slots 1, 3, 4 and 5 are tool callbacks the runtime makes (also when a lookup
/// finds nothing): they must be callable, and do nothing without a tool attached.
pub static HOOKS: ToolsCallbackHooks = ToolsCallbackHooks {
    size: size_of_words(7),
    slot1: nothing,
    buffer: hook_buffer,
    slot3: nothing,
    slot4: nothing,
    slot5: nothing,
    small_buffer: hook_buffer_small,
};

// ---- 42d85a81: tools TLS --------------------------------------------------------------

#[repr(C)]
pub struct ToolsTls {
    size: usize,
    slot1: Unknown,
    current_context: extern "C" fn(*mut CUcontext) -> CUresult,
}

pub static TLS: ToolsTls = ToolsTls {
    size: size_of_words(3),
    slot1: unknown_slot::<2, 1>,
    current_context: cuCtxGetCurrent,
};

// ---- 263e8860: context checks -----------------------------------------------------------

/// Slot 2: whether `ctx` wraps another context. None does here.
extern "C" fn is_wrapped(_ctx: CUcontext, wrapped: *mut u32, _inner: *mut CUcontext) -> CUresult {
    // SAFETY: the runtime passes a writable flag (NULL is skipped).
    unsafe { caller::write_opt(wrapped, 0) };
    CUDA_SUCCESS
}

extern "C" fn zero() -> u32 {
    0
}

#[repr(C)]
pub struct ContextChecks {
    size: usize,
    slot1: Unknown,
    is_wrapped: extern "C" fn(CUcontext, *mut u32, *mut CUcontext) -> CUresult,
    slot3: extern "C" fn() -> u32,
    rest: [Unknown; 11],
}

pub static CHECKS: ContextChecks = ContextChecks {
    size: size_of_words(15),
    slot1: unknown_slot::<1, 1>,
    is_wrapped,
    slot3: zero,
    rest: [
        unknown_slot::<1, 4>,
        unknown_slot::<1, 5>,
        unknown_slot::<1, 6>,
        unknown_slot::<1, 7>,
        unknown_slot::<1, 8>,
        unknown_slot::<1, 9>,
        unknown_slot::<1, 10>,
        unknown_slot::<1, 11>,
        unknown_slot::<1, 12>,
        unknown_slot::<1, 13>,
        unknown_slot::<1, 14>,
    ],
};

// ---- c693336e: context-local storage ----------------------------------------------------

type Destructor = Option<extern "C" fn(CUcontext, *mut c_void, *mut c_void)>;

/// The runtime's per-context state: (context, key) -> (value, destructor), as addresses.
type Storage = HashMap<(usize, usize), (usize, Destructor)>;
static STORAGE: Mutex<Option<Storage>> = Mutex::new(None);

fn with_storage<R>(f: impl FnOnce(&mut Storage) -> R) -> R {
    f(STORAGE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new))
}

/// `ctx`, or the calling thread's current context when NULL.
fn context_or_current(ctx: CUcontext) -> Result<usize, CUresult> {
    if !ctx.is_null() {
        return Ok(ctx as usize);
    }
    let mut current: CUcontext = std::ptr::null_mut();
    match cuCtxGetCurrent(&mut current) {
        CUDA_SUCCESS if !current.is_null() => Ok(current as usize),
        CUDA_SUCCESS => Err(CUDA_ERROR_INVALID_CONTEXT),
        e => Err(e),
    }
}

extern "C" fn storage_put(
    ctx: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    dtor: Destructor,
) -> CUresult {
    match context_or_current(ctx) {
        Ok(c) => {
            with_storage(|s| s.insert((c, key as usize), (value as usize, dtor)));
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

extern "C" fn storage_remove(ctx: CUcontext, key: *mut c_void) -> CUresult {
    match context_or_current(ctx) {
        Ok(c) => match with_storage(|s| s.remove(&(c, key as usize))) {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_HANDLE,
        },
        Err(e) => e,
    }
}

/// A missing entry is an error (the runtime then makes its state and stores it); the
/// real driver's code for it is to be measured, `CUDA_ERROR_INVALID_HANDLE` until then.
extern "C" fn storage_get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult {
    match context_or_current(ctx) {
        Ok(c) => match with_storage(|s| s.get(&(c, key as usize)).map(|e| e.0)) {
            Some(v) => {
                // SAFETY: the runtime passes a writable pointer (NULL is skipped).
                unsafe { caller::write_opt(value, v as *mut c_void) };
                CUDA_SUCCESS
            }
            None => CUDA_ERROR_INVALID_HANDLE,
        },
        Err(e) => e,
    }
}

#[repr(C)]
pub struct ContextLocalStorage {
    put: extern "C" fn(CUcontext, *mut c_void, *mut c_void, Destructor) -> CUresult,
    remove: extern "C" fn(CUcontext, *mut c_void) -> CUresult,
    get: extern "C" fn(*mut *mut c_void, CUcontext, *mut c_void) -> CUresult,
    /// The table has no size word; a NULL ends it.
    end: usize,
}

pub static STORAGE_TABLE: ContextLocalStorage = ContextLocalStorage {
    put: storage_put,
    remove: storage_remove,
    get: storage_get,
    end: 0,
};

// ---- d4082055: the integrity check --------------------------------------------------------

#[repr(C)]
pub struct IntegrityCheck {
    size: usize,
    answer: extern "C" fn(u32, u64, *mut [u64; 2]) -> CUresult,
    slot2: extern "C" fn() -> CUresult,
}

/// What the guest reports about its devices, in `cuDeviceGetCount` order.
fn device_facts() -> Vec<DeviceFacts> {
    let mut count = 0;
    if cuDeviceGetCount(&mut count) != CUDA_SUCCESS {
        return Vec::new();
    }
    let attribute = |attr: u32, d: i32| {
        let mut v = 0;
        cuDeviceGetAttribute(&mut v, attr, d);
        v
    };
    (0..count)
        .map(|d| {
            let mut uuid = [0u8; 16];
            cuDeviceGetUuid_v2(&mut uuid, d);
            DeviceFacts {
                uuid,
                pci_domain: attribute(ATTR_PCI_DOMAIN_ID, d),
                pci_bus: attribute(ATTR_PCI_BUS_ID, d),
                pci_device: attribute(ATTR_PCI_DEVICE_ID, d),
            }
        })
        .collect()
}

/// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`, `_PCI_BUS_ID`, `_PCI_DEVICE_ID`.
const ATTR_PCI_DOMAIN_ID: u32 = 50;
const ATTR_PCI_BUS_ID: u32 = 33;
const ATTR_PCI_DEVICE_ID: u32 = 34;

extern "C" fn integrity_answer(version: u32, unix_seconds: u64, out: *mut [u64; 2]) -> CUresult {
    guard("cuGetExportTable: integrity check", || {
        let client = crate::client::client()?;
        // SAFETY: pthread_self has no preconditions.
        let thread = unsafe { libc::pthread_self() } as u32;
        let call = CallFacts {
            driver_version: client.hello.driver_version as u32,
            version,
            pid: std::process::id(),
            thread,
            cudart_table: &CUDART as *const CudartInterface as u64,
            integrity_table: &INTEGRITY as *const IntegrityCheck as u64,
            // The address handed out in the table, as the runtime sees it.
            slot: INTEGRITY.answer as *const () as u64,
            unix_seconds,
        };
        let answer = integrity::answer(&call, &device_facts());
        // SAFETY: the runtime passes 16 writable bytes (NULL refused).
        unsafe { caller::write(out, answer) }
    })
}

pub static INTEGRITY: IntegrityCheck = IntegrityCheck {
    size: size_of_words(3),
    answer: integrity_answer,
    slot2: nothing,
};

/// The table for an id, as the address handed out.
pub fn table(id: &Id) -> Option<*const c_void> {
    let p: *const c_void = match *id {
        CUDART_INTERFACE => &CUDART as *const CudartInterface as *const c_void,
        TOOLS_CALLBACK_HOOKS => &HOOKS as *const ToolsCallbackHooks as *const c_void,
        TOOLS_TLS => &TLS as *const ToolsTls as *const c_void,
        CONTEXT_LOCAL_STORAGE => &STORAGE_TABLE as *const ContextLocalStorage as *const c_void,
        CONTEXT_CHECKS => &CHECKS as *const ContextChecks as *const c_void,
        INTEGRITY_CHECK => &INTEGRITY as *const IntegrityCheck as *const c_void,
        CONTEXT_IDENTITY => &CONTEXT_IDENTITY_TABLE as *const ContextIdentity as *const c_void,
        FUNCTION_INTROSPECTION => {
            &FUNCTION_INTROSPECTION_TABLE as *const FunctionIntrospection as *const c_void
        }
        LIBRARY_TABLE_7 => &LIBRARY_TABLE_7_TABLE as *const StubTable<6> as *const c_void,
        LIBRARY_TABLE_34 => &LIBRARY_TABLE_34_TABLE as *const StubTable<33> as *const c_void,
        LIBRARY_TABLE_17 => &LIBRARY_TABLE_17_TABLE as *const StubTable<16> as *const c_void,
        _ => return None,
    };
    Some(p)
}

export! {
    fn cuGetExportTable(table_out: *mut *const c_void, table_id: *const Id) {
        // SAFETY: by cuGetExportTable's contract `table_id` points to a CUuuid.
        let id = unsafe { caller::read(table_id) }?;
        match table(&id) {
            Some(p) => {
                // SAFETY: by cuGetExportTable's contract `table_out` is writable.
                unsafe { caller::write(table_out, p) }
            }
            None => {
                if id != REFUSED_QUIETLY {
                    say_once(format!(
                        "vmcuda: the driver's export table {} is not provided; cuGetExportTable returns CUDA_ERROR_NOT_FOUND",
                        hex(&id)
                    ));
                }
                // SAFETY: by cuGetExportTable's contract `table_out` is NULL or writable.
                unsafe { caller::write_opt(table_out, std::ptr::null()) };
                Err(status(CUDA_ERROR_NOT_FOUND))
            }
        }
    }
}

mod library;
pub use library::*;

#[cfg(test)]
mod tests;
