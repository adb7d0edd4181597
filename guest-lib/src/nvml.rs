//! The guest's NVML (`libnvidia-ml.so.1`): what `nvidia-smi`-like tools, pynvml,
//! torch and NCCL ask NVML, answered from the host and limited to this guest's view.
//!
//! Devices are the guest's (the same numbering as CUDA's, over every host it uses).
//! Names, UUIDs, PCI positions and compute capabilities come from the device
//! properties the runtime already caches; live readings (utilization, temperature,
//! power, clocks) and the guest's share of the device come from the host
//! (`DeviceGetStatus`), kept for a moment so a tool's burst of queries costs one round
//! trip. Memory is the guest's view: its total is the guest's quota where it has one,
//! and used memory is its own programs'. The running processes are its own.
//!
//! `libnvidia-ml.so.1` (guest-lib/build-libs.sh) exports every function of the list
//! in guest-lib/exports/libnvidia-ml.so.1.txt; the ones implemented here jump to
//! their `__vmcuda_` implementation, every other one passes its index to
//! [`nvml_not_supported`]: functions that would change the GPU answer
//! `NVML_ERROR_NO_PERMISSION`, the rest `NVML_ERROR_NOT_SUPPORTED` (a reading this
//! guest cannot have), as NVML answers for what a GPU does not offer.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use vmcuda_wire::op::{DeviceGetStatus, DeviceProperties, GpuStatus};

use crate::abi::nvml::{FieldValue, MemoryV2, PciInfo, ProcessInfo, ProcessInfoV1, TemperatureV1};
use crate::caller;
use crate::client::{self, Sink};
use crate::driver::inner;

pub type NvmlReturn = c_uint;
pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const ERROR_UNKNOWN: NvmlReturn = 999;

/// The export list: stubs are numbered in its order by build-libs.sh.
const EXPORTS: &str = include_str!("../exports/libnvidia-ml.so.1.txt");

/// The name of function `index` of the export list.
pub fn function_name(index: u32) -> Option<&'static str> {
    crate::notice::listed_names(EXPORTS).nth(index as usize)
}

/// Whether a function would change the GPU's state (which a guest may not).
pub fn changes_state(name: &str) -> bool {
    let verb = name
        .strip_prefix("nvmlDevice")
        .or_else(|| name.strip_prefix("nvmlSystem"))
        .or_else(|| name.strip_prefix("nvmlUnit"))
        .or_else(|| name.strip_prefix("nvmlGpuInstance"))
        .or_else(|| name.strip_prefix("nvmlVgpuInstance"))
        .unwrap_or(name);
    [
        "Set", "Reset", "Clear", "Create", "Destroy", "Modify", "Register", "Discover",
    ]
    .iter()
    .any(|v| verb.starts_with(v))
}

/// Every function this library does not answer from the guest's view.
#[export_name = "__vmcuda_nvml_not_supported"]
pub extern "C" fn nvml_not_supported(index: u32) -> NvmlReturn {
    let name = function_name(index).unwrap_or("an NVML function");
    if std::env::var_os("VMCUDA_VERBOSE").is_some() {
        let _ = catch_unwind(|| eprintln!("vmcuda: NVML {name} is not available in the guest"));
    }
    if changes_state(name) {
        ERROR_NO_PERMISSION
    } else {
        ERROR_NOT_SUPPORTED
    }
}

/// Run an NVML export: no unwinding into C (a panic is `NVML_ERROR_UNKNOWN`), and
/// nothing but `nvmlInit` and the version queries before initialization.
fn guard(needs_init: bool, body: impl FnOnce() -> Result<(), NvmlReturn>) -> NvmlReturn {
    if needs_init && INITS.load(Ordering::Acquire) == 0 {
        return ERROR_UNINITIALIZED;
    }
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(r)) => r,
        Err(_) => ERROR_UNKNOWN,
    }
}

/// `nvmlInit` calls not yet matched by `nvmlShutdown`.
static INITS: AtomicU32 = AtomicU32::new(0);

fn init() -> NvmlReturn {
    guard(false, || {
        // The host must answer: NVML without a driver fails its init the same way.
        client::client().map_err(|_| ERROR_DRIVER_NOT_LOADED)?;
        INITS.fetch_add(1, Ordering::AcqRel);
        Ok(())
    })
}

#[export_name = "__vmcuda_nvmlInit"]
pub extern "C" fn nvml_init() -> NvmlReturn {
    init()
}

#[export_name = "__vmcuda_nvmlInit_v2"]
pub extern "C" fn nvml_init_v2() -> NvmlReturn {
    init()
}

#[export_name = "__vmcuda_nvmlInitWithFlags"]
pub extern "C" fn nvml_init_with_flags(_flags: c_uint) -> NvmlReturn {
    init()
}

#[export_name = "__vmcuda_nvmlShutdown"]
pub extern "C" fn nvml_shutdown() -> NvmlReturn {
    guard(true, || {
        INITS.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

#[export_name = "__vmcuda_nvmlErrorString"]
pub extern "C" fn nvml_error_string(r: NvmlReturn) -> *const c_char {
    let text: &'static [u8] = match r {
        SUCCESS => b"Success\0",
        ERROR_UNINITIALIZED => b"Uninitialized\0",
        ERROR_INVALID_ARGUMENT => b"Invalid Argument\0",
        ERROR_NOT_SUPPORTED => b"Not Supported\0",
        ERROR_NO_PERMISSION => b"Insufficient Permissions\0",
        ERROR_NOT_FOUND => b"Not Found\0",
        ERROR_INSUFFICIENT_SIZE => b"Insufficient Size\0",
        ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        ERROR_GPU_IS_LOST => b"GPU is lost\0",
        ERROR_ARGUMENT_VERSION_MISMATCH => b"Argument version mismatch\0",
        _ => b"Unknown Error\0",
    };
    text.as_ptr().cast()
}

// ---- devices and their handles ----

/// Devices this library hands out handles for (a handle is the address of its slot).
const MAX_DEVICES: usize = 64;
static HANDLES: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

type Handle = *const c_void;

fn handle_of(index: usize) -> Handle {
    (&HANDLES[index] as *const u8).cast()
}

fn index_of(handle: Handle) -> Result<i32, NvmlReturn> {
    let base = HANDLES.as_ptr() as usize;
    let at = (handle as usize).wrapping_sub(base);
    if handle.is_null() || at >= MAX_DEVICES || at as i32 >= device_count()? {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    Ok(at as i32)
}

fn device_count() -> Result<i32, NvmlReturn> {
    let n = inner::device::device_count().map_err(|_| ERROR_DRIVER_NOT_LOADED)?;
    Ok(n.min(MAX_DEVICES as i32))
}

fn properties(device: i32) -> Result<DeviceProperties, NvmlReturn> {
    inner::device::properties(device).map_err(|_| ERROR_GPU_IS_LOST)
}

/// How long the host's readings are reused: a tool's burst of queries for one
/// refresh costs one round trip, and no reading is older than this.
const FRESH_FOR: Duration = Duration::from_millis(200);

static STATUS: Mutex<Option<HashMap<i32, (Instant, GpuStatus)>>> = Mutex::new(None);

/// The host's readings of `device` (recent ones reused).
fn status(device: i32) -> Result<GpuStatus, NvmlReturn> {
    {
        let cache = STATUS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, s)) = cache.as_ref().and_then(|c| c.get(&device)) {
            if at.elapsed() < FRESH_FOR {
                return Ok(s.clone());
            }
        }
    }
    let hosts = client::client().map_err(|_| ERROR_DRIVER_NOT_LOADED)?;
    let local = crate::request::local_device(device).map_err(|_| ERROR_INVALID_ARGUMENT)?;
    let mut s = hosts
        .call(device, &DeviceGetStatus { device: local }, &[], Sink::None)
        .map_err(|_| ERROR_GPU_IS_LOST)?;
    // A process that only asks NVML is no GPU process (natively it has no context), but
    // its connection is one: it is left out of its own list while it holds no memory.
    let me = std::process::id();
    s.processes.retain(|p| p.pid != me || p.used_memory > 0);
    STATUS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(device, (Instant::now(), s.clone()));
    Ok(s)
}

/// A reading the GPU offers, or "not supported".
fn reading<T>(r: Option<T>) -> Result<T, NvmlReturn> {
    r.ok_or(ERROR_NOT_SUPPORTED)
}

/// Copy `text` and its terminator into a caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` is NULL (refused) or writable for `len` bytes.
unsafe fn write_text(buf: *mut c_char, len: c_uint, text: &str) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    if text.len() + 1 > len as usize {
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` is writable for `len` bytes (the caller's promise), checked above.
    let out = unsafe { caller::bytes_mut(buf.cast(), text.len() + 1) }
        .map_err(|_| ERROR_INVALID_ARGUMENT)?;
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[text.len()] = 0;
    Ok(())
}

/// Store through an output parameter, NULL refused as NVML refuses it.
///
/// # Safety
/// `ptr` is NULL or writable for a `T`.
unsafe fn put<T>(ptr: *mut T, value: T) -> Result<(), NvmlReturn> {
    // SAFETY: as this function's caller promised.
    unsafe { caller::write(ptr, value) }.map_err(|_| ERROR_INVALID_ARGUMENT)
}

// ---- system ----

/// The host driver's version, as nvidia-smi prints it.
fn driver_version() -> Result<String, NvmlReturn> {
    if device_count()? == 0 {
        return Ok("vmcuda".into());
    }
    let v = status(0)?.driver_version;
    Ok(if v.is_empty() { "vmcuda".into() } else { v })
}

#[export_name = "__vmcuda_nvmlSystemGetDriverVersion"]
pub extern "C" fn nvml_system_get_driver_version(buf: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: by the function's contract `buf` is writable for `len` bytes.
    guard(true, || unsafe { write_text(buf, len, &driver_version()?) })
}

#[export_name = "__vmcuda_nvmlSystemGetNVMLVersion"]
pub extern "C" fn nvml_system_get_nvml_version(buf: *mut c_char, len: c_uint) -> NvmlReturn {
    guard(true, || {
        let major = client::client().map_or(13, |c| c.hello.driver_version / 1000);
        // SAFETY: by the function's contract `buf` is writable for `len` bytes.
        unsafe { write_text(buf, len, &format!("{major}.{}", driver_version()?)) }
    })
}

fn cuda_driver_version(version: *mut c_int) -> NvmlReturn {
    guard(false, || {
        let v = client::client()
            .map_err(|_| ERROR_DRIVER_NOT_LOADED)?
            .hello
            .driver_version;
        // SAFETY: by the function's contract `version` is NULL or writable.
        unsafe { put(version, v) }
    })
}

#[export_name = "__vmcuda_nvmlSystemGetCudaDriverVersion"]
pub extern "C" fn nvml_system_get_cuda_driver_version(version: *mut c_int) -> NvmlReturn {
    cuda_driver_version(version)
}

#[export_name = "__vmcuda_nvmlSystemGetCudaDriverVersion_v2"]
pub extern "C" fn nvml_system_get_cuda_driver_version_v2(version: *mut c_int) -> NvmlReturn {
    cuda_driver_version(version)
}

// ---- finding devices ----

fn get_count(count: *mut c_uint) -> NvmlReturn {
    // SAFETY: by the function's contract `count` is NULL or writable.
    guard(true, || unsafe { put(count, device_count()? as c_uint) })
}

#[export_name = "__vmcuda_nvmlDeviceGetCount"]
pub extern "C" fn nvml_device_get_count(count: *mut c_uint) -> NvmlReturn {
    get_count(count)
}

#[export_name = "__vmcuda_nvmlDeviceGetCount_v2"]
pub extern "C" fn nvml_device_get_count_v2(count: *mut c_uint) -> NvmlReturn {
    get_count(count)
}

fn by_index(index: c_uint, device: *mut Handle) -> NvmlReturn {
    guard(true, || {
        if index as i64 >= i64::from(device_count()?) {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: by the function's contract `device` is NULL or writable.
        unsafe { put(device, handle_of(index as usize)) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetHandleByIndex"]
pub extern "C" fn nvml_device_get_handle_by_index(
    index: c_uint,
    device: *mut Handle,
) -> NvmlReturn {
    by_index(index, device)
}

#[export_name = "__vmcuda_nvmlDeviceGetHandleByIndex_v2"]
pub extern "C" fn nvml_device_get_handle_by_index_v2(
    index: c_uint,
    device: *mut Handle,
) -> NvmlReturn {
    by_index(index, device)
}

/// The first device whose `key` (from its properties) matches `wanted`.
fn find(
    wanted: *const c_char,
    device: *mut Handle,
    key: impl Fn(i32, &DeviceProperties) -> Vec<String>,
) -> NvmlReturn {
    guard(true, || {
        // SAFETY: by the function's contract `wanted` is NULL or a C string.
        let wanted = unsafe { caller::string(wanted) }.map_err(|_| ERROR_INVALID_ARGUMENT)?;
        let wanted = wanted.trim().to_ascii_lowercase();
        for d in 0..device_count()? {
            let p = properties(d)?;
            if key(d, &p).iter().any(|k| k.to_ascii_lowercase() == wanted) {
                // SAFETY: by the function's contract `device` is NULL or writable.
                return unsafe { put(device, handle_of(d as usize)) };
            }
        }
        Err(ERROR_NOT_FOUND)
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetHandleByUUID"]
pub extern "C" fn nvml_device_get_handle_by_uuid(
    uuid: *const c_char,
    device: *mut Handle,
) -> NvmlReturn {
    find(uuid, device, |_, p| vec![uuid_text(&p.uuid)])
}

fn by_pci(bus_id: *const c_char, device: *mut Handle) -> NvmlReturn {
    // Bus ids are given with a 4- or 8-digit domain.
    find(bus_id, device, |_, p| {
        let pci = Pci::of(p);
        vec![pci.bus_id(), pci.legacy_bus_id()]
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetHandleByPciBusId"]
pub extern "C" fn nvml_device_get_handle_by_pci_bus_id(
    bus_id: *const c_char,
    device: *mut Handle,
) -> NvmlReturn {
    by_pci(bus_id, device)
}

#[export_name = "__vmcuda_nvmlDeviceGetHandleByPciBusId_v2"]
pub extern "C" fn nvml_device_get_handle_by_pci_bus_id_v2(
    bus_id: *const c_char,
    device: *mut Handle,
) -> NvmlReturn {
    by_pci(bus_id, device)
}

#[export_name = "__vmcuda_nvmlDeviceGetIndex"]
pub extern "C" fn nvml_device_get_index(device: Handle, index: *mut c_uint) -> NvmlReturn {
    // SAFETY: by the function's contract `index` is NULL or writable.
    guard(true, || unsafe { put(index, index_of(device)? as c_uint) })
}

#[export_name = "__vmcuda_nvmlDeviceGetMinorNumber"]
pub extern "C" fn nvml_device_get_minor_number(device: Handle, minor: *mut c_uint) -> NvmlReturn {
    // SAFETY: by the function's contract `minor` is NULL or writable.
    guard(true, || unsafe { put(minor, index_of(device)? as c_uint) })
}

// ---- identity ----

/// A UUID as NVML writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[export_name = "__vmcuda_nvmlDeviceGetName"]
pub extern "C" fn nvml_device_get_name(
    device: Handle,
    name: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    guard(true, || {
        let p = properties(index_of(device)?)?;
        // SAFETY: by the function's contract `name` is writable for `len` bytes.
        unsafe { write_text(name, len, &p.name) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetUUID"]
pub extern "C" fn nvml_device_get_uuid(
    device: Handle,
    uuid: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    guard(true, || {
        let p = properties(index_of(device)?)?;
        // SAFETY: by the function's contract `uuid` is writable for `len` bytes.
        unsafe { write_text(uuid, len, &uuid_text(&p.uuid)) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetCudaComputeCapability"]
pub extern "C" fn nvml_device_get_cuda_compute_capability(
    device: Handle,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    guard(true, || {
        let (ma, mi) = compute_capability(&properties(index_of(device)?)?);
        // SAFETY: by the function's contract both are NULL or writable.
        unsafe {
            put(major, ma)?;
            put(minor, mi)
        }
    })
}

fn compute_capability(p: &DeviceProperties) -> (i32, i32) {
    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / MINOR.
    (p.attribute(75).unwrap_or(0), p.attribute(76).unwrap_or(0))
}

#[export_name = "__vmcuda_nvmlDeviceGetArchitecture"]
pub extern "C" fn nvml_device_get_architecture(device: Handle, arch: *mut c_uint) -> NvmlReturn {
    guard(true, || {
        // nvmlDeviceArchitecture_t from the compute capability.
        let a = match compute_capability(&properties(index_of(device)?)?) {
            (3, _) => 2,
            (5, _) => 3,
            (6, _) => 4,
            (7, 5) => 6,
            (7, _) => 5,
            (8, 9) => 8,
            (8, _) => 7,
            (9, _) => 9,
            (10.., _) => 10,
            _ => 0xffff_ffff,
        };
        // SAFETY: by the function's contract `arch` is NULL or writable.
        unsafe { put(arch, a) }
    })
}

// ---- PCI ----

/// A device's place on the PCI bus, from its properties and the host's readings.
struct Pci {
    domain: u32,
    bus: u32,
    device: u32,
}

impl Pci {
    fn of(p: &DeviceProperties) -> Pci {
        // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID / PCI_BUS_ID / PCI_DEVICE_ID.
        let get = |a| p.attribute(a).unwrap_or(0) as u32;
        Pci {
            domain: get(50),
            bus: get(33),
            device: get(34),
        }
    }

    fn bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    fn legacy_bus_id(&self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
}

fn fixed<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

fn pci_info(device: Handle) -> Result<PciInfo, NvmlReturn> {
    let d = index_of(device)?;
    let pci = Pci::of(&properties(d)?);
    let s = status(d)?;
    Ok(PciInfo {
        bus_id_legacy: fixed(&pci.legacy_bus_id()),
        domain: pci.domain,
        bus: pci.bus,
        device: pci.device,
        pci_device_id: s.pci_device_id,
        pci_subsystem_id: s.pci_subsystem_id,
        bus_id: fixed(&pci.bus_id()),
    })
}

/// Write the first `len` bytes of `info` (the caller's struct version's size).
///
/// # Safety
/// `out` is NULL or writable for `len` bytes.
unsafe fn put_prefix<T>(out: *mut T, info: &T, len: usize) -> Result<(), NvmlReturn> {
    // SAFETY: `out` is writable for `len` bytes by the caller's promise; `len` is at most
    // `size_of::<T>()`, all readable from `info`.
    let dst = unsafe { caller::bytes_mut(out.cast(), len) }.map_err(|_| ERROR_INVALID_ARGUMENT)?;
    let len = len.min(std::mem::size_of::<T>());
    // SAFETY: `info` is a plain `repr(C)` value of at least `len` bytes.
    let src = unsafe { std::slice::from_raw_parts((info as *const T).cast::<u8>(), len) };
    dst[..len].copy_from_slice(src);
    Ok(())
}

#[export_name = "__vmcuda_nvmlDeviceGetPciInfo"]
pub extern "C" fn nvml_device_get_pci_info(device: Handle, out: *mut c_void) -> NvmlReturn {
    // SAFETY: by the function's contract `out` is writable for the old 32-byte struct.
    guard(true, || unsafe {
        put_prefix(out.cast::<PciInfo>(), &pci_info(device)?, 32)
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetPciInfo_v2"]
pub extern "C" fn nvml_device_get_pci_info_v2(device: Handle, out: *mut c_void) -> NvmlReturn {
    // SAFETY: by the function's contract `out` is writable for an `nvmlPciInfo_t`.
    guard(true, || unsafe {
        put_prefix(out.cast::<PciInfo>(), &pci_info(device)?, 68)
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetPciInfo_v3"]
pub extern "C" fn nvml_device_get_pci_info_v3(device: Handle, out: *mut c_void) -> NvmlReturn {
    // SAFETY: by the function's contract `out` is writable for an `nvmlPciInfo_t`.
    guard(true, || unsafe {
        put_prefix(out.cast::<PciInfo>(), &pci_info(device)?, 68)
    })
}

// ---- memory ----

/// (total, free, used) as this guest sees the device: the quota as the total where
/// there is one, its own programs' memory as used, and free what it may still take.
fn memory(device: Handle) -> Result<(u64, u64, u64), NvmlReturn> {
    Ok(memory_view(&status(index_of(device)?)?))
}

fn memory_view(s: &GpuStatus) -> (u64, u64, u64) {
    let total = s
        .memory_quota
        .map_or(s.memory_total, |q| q.min(s.memory_total));
    let used = s.guest_memory_used.min(total);
    let free = (total - used).min(s.memory_free.unwrap_or(u64::MAX));
    (total, free, used)
}

/// One device as the guest's NVML shows it (what `vmcuda smi` prints).
pub struct DeviceView {
    pub name: String,
    pub uuid: String,
    pub bus_id: String,
    /// (total, free, used) bytes, the guest's view (see [`memory`]).
    pub memory: (u64, u64, u64),
    pub status: GpuStatus,
}

/// The guest's devices as its NVML shows them (connecting on first use).
pub fn device_views() -> Result<Vec<DeviceView>, NvmlReturn> {
    (0..device_count()?)
        .map(|d| {
            let p = properties(d)?;
            let status = status(d)?;
            Ok(DeviceView {
                name: p.name.clone(),
                uuid: uuid_text(&p.uuid),
                bus_id: Pci::of(&p).bus_id(),
                memory: memory_view(&status),
                status,
            })
        })
        .collect()
}

#[export_name = "__vmcuda_nvmlDeviceGetMemoryInfo"]
pub extern "C" fn nvml_device_get_memory_info(device: Handle, out: *mut [u64; 3]) -> NvmlReturn {
    guard(true, || {
        let (total, free, used) = memory(device)?;
        // SAFETY: by the function's contract `out` is NULL or a writable nvmlMemory_t.
        unsafe { put(out, [total, free, used]) }
    })
}

/// `nvmlMemory_v2`: the struct's version and size, as the caller sets it.
const MEMORY_V2: c_uint = 0x0200_0028;

#[export_name = "__vmcuda_nvmlDeviceGetMemoryInfo_v2"]
pub extern "C" fn nvml_device_get_memory_info_v2(device: Handle, out: *mut MemoryV2) -> NvmlReturn {
    guard(true, || {
        // SAFETY: by the function's contract `out` is NULL or a readable nvmlMemory_v2_t.
        let given = unsafe { caller::read(out) }.map_err(|_| ERROR_INVALID_ARGUMENT)?;
        if given.version != MEMORY_V2 {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, free, used) = memory(device)?;
        let m = MemoryV2 {
            version: MEMORY_V2,
            total,
            reserved: 0,
            free,
            used,
        };
        // SAFETY: as above, writable.
        unsafe { put(out, m) }
    })
}

mod readings;

#[cfg(test)]
mod tests;
