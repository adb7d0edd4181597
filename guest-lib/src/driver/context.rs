//! Devices, primary contexts and the per-thread context stack.
//!
//! A `CUcontext` is the address of one byte of [`CONTEXT_TOKENS`]: the byte's index is
//! the device. Each device has one context, its primary context (the host's worker
//! holds the real one); `cuCtxCreate` returns it too and `cuCtxDestroy` only pops it.
//! Making a context current makes its device the thread's current device for the
//! runtime and the driver alike.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use vmcuda_wire::CudaStatus;

use vmcuda_wire::op::{CtxGetExecAffinity, CtxRecordEvent, CtxWaitEvent, EventHandle};

use super::result::{status, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE};
use super::{check_initialized, export, keeping_last_error, stale, Result};
use crate::abi::driver::{DevProp, ExecAffinityParam};
use crate::driver::inner::device::{device_count, properties};
use crate::driver::inner::RawHandle;
use crate::{caller, state};

/// Devices a context token can name.
const MAX_DEVICES: usize = 64;
static CONTEXT_TOKENS: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

pub type CUcontext = *mut std::ffi::c_void;

thread_local! {
    static STACK: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// Per device: the usage count `cuCtxAttach` added to its context.
static ATTACHED: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);

fn with_attached<T>(f: impl FnOnce(&mut HashMap<i32, u32>) -> T) -> T {
    let mut guard = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Per device: primary-context retain count and flags.
static PRIMARY: Mutex<Option<HashMap<i32, (u32, u32)>>> = Mutex::new(None);

fn with_primary<T>(f: impl FnOnce(&mut HashMap<i32, (u32, u32)>) -> T) -> T {
    let mut guard = PRIMARY.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

pub fn context_of(device: i32) -> CUcontext {
    CONTEXT_TOKENS[device as usize..].as_ptr() as CUcontext
}

static STALE_CONTEXT: AtomicBool = AtomicBool::new(false);

/// The device a context token names.
pub fn device_of(ctx: CUcontext) -> Result<i32> {
    let base = CONTEXT_TOKENS.as_ptr() as usize;
    let at = (ctx as usize).wrapping_sub(base);
    if at >= MAX_DEVICES || at as i32 >= device_count()? {
        return Err(stale("context", &STALE_CONTEXT));
    }
    Ok(at as i32)
}

/// A device ordinal the host lets this guest see.
pub fn check_device(device: i32) -> Result<()> {
    check_initialized()?;
    if device < 0 || device >= device_count()? || device as usize >= MAX_DEVICES {
        return Err(CudaStatus::ErrorInvalidDevice);
    }
    Ok(())
}

/// The thread's current context's device, if a context is current.
fn current() -> Option<i32> {
    with_stack(|s| s.last().copied()).or_else(state::runtime_context)
}

/// The thread's context stack. Libraries' C++ destructors still call the driver at
/// process exit, after this thread's storage is gone: the stack is empty then.
fn with_stack<R: Default>(f: impl FnOnce(&mut Vec<i32>) -> R) -> R {
    STACK
        .try_with(|s| f(&mut s.borrow_mut()))
        .unwrap_or_default()
}

/// `f` with `device` as the calling thread's device, then the device it had.
fn on_device<T>(device: i32, f: impl FnOnce() -> T) -> T {
    let saved = state::current_device();
    state::set_current_device(device);
    let r = f();
    state::set_current_device(saved);
    r
}

/// Wait for the work of `device`, whichever device is the thread's.
pub(super) fn synchronize_device(device: i32) -> Result<()> {
    on_device(device, || {
        keeping_last_error(|| crate::driver::inner::device::cudaDeviceSynchronize())
    })
}

fn make_current(device: Option<i32>) {
    if let Some(d) = device {
        state::set_current_device(d);
    }
}

export! {
    fn cuDeviceGet(device: *mut i32, ordinal: i32) {
        check_device(ordinal)?;
        // SAFETY: by cuDeviceGet's contract `device` is NULL or writable.
        unsafe { caller::write(device, ordinal) }
    }
}

export! {
    /// The runtime's `cudaDeviceGetLimit` in the current context (the fixed limits are
    /// answered in the guest).
    fn cuCtxGetLimit(value: *mut usize, limit: u32) {
        current_device()?;
        crate::driver::inner::device::device_limit(value, limit)
    }
}

export! {
    fn cuDeviceGetCount(count: *mut i32) {
        check_initialized()?;
        // SAFETY: by cuDeviceGetCount's contract `count` is NULL or writable.
        unsafe { caller::write(count, device_count()?) }
    }
}

export! {
    fn cuDeviceGetName(name: *mut c_char, len: i32, device: i32) {
        check_device(device)?;
        let p = properties(device)?;
        let len = usize::try_from(len).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        if len == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuDeviceGetName's contract `name.cast()` is NULL or holds `len`
        // writable bytes.
        let out = unsafe { caller::bytes_mut(name.cast(), len) }?;
        let n = p.name.len().min(len - 1);
        out[..n].copy_from_slice(&p.name.as_bytes()[..n]);
        out[n] = 0;
        Ok(())
    }
}

export! {
    fn cuDeviceGetAttribute(value: *mut i32, attr: u32, device: i32) {
        check_device(device)?;
        let p = properties(device)?;
        // SAFETY: by cuDeviceGetAttribute's contract `value` is NULL or writable.
        unsafe { caller::write(value, p.attribute(attr).ok_or(CudaStatus::ErrorInvalidValue)?) }
    }
}

/// A device attribute (`CUdevice_attribute`) the guest's property cache answers.
fn attribute(device: i32, attr: u32) -> Result<i32> {
    properties(device)?
        .attribute(attr)
        .ok_or(CudaStatus::ErrorInvalidValue)
}

export! {
    /// Deprecated since CUDA 5: the device's `COMPUTE_CAPABILITY_MAJOR` / `_MINOR`
    /// attributes (75, 76).
    fn cuDeviceComputeCapability(major: *mut i32, minor: *mut i32, device: i32) {
        check_device(device)?;
        let (a, b) = (attribute(device, 75)?, attribute(device, 76)?);
        // SAFETY: by cuDeviceComputeCapability's contract both are NULL or writable.
        unsafe { caller::write(major, a) }?;
        // SAFETY: as above.
        unsafe { caller::write(minor, b) }
    }
}

export! {
    /// Deprecated since CUDA 5: `CUdevprop`, from the device attributes it was made of
    /// (`MAX_THREADS_PER_BLOCK` 1 ... `TEXTURE_ALIGNMENT` 14, in the struct's order).
    fn cuDeviceGetProperties(out: *mut DevProp, device: i32) {
        check_device(device)?;
        let a = |attr: u32| attribute(device, attr);
        let p = DevProp {
            max_threads_per_block: a(1)?,
            max_threads_dim: [a(2)?, a(3)?, a(4)?],
            max_grid_size: [a(5)?, a(6)?, a(7)?],
            shared_mem_per_block: a(8)?,
            total_constant_memory: a(9)?,
            simd_width: a(10)?,
            mem_pitch: a(11)?,
            regs_per_block: a(12)?,
            clock_rate: a(13)?,
            texture_align: a(14)?,
        };
        // SAFETY: by cuDeviceGetProperties's contract `out` is NULL or writable.
        unsafe { caller::write(out, p) }
    }
}

export! {
    /// Execution affinity (SM-count limits on a context) is not served: none is
    /// supported, so `cuCtxCreate_v3` with affinity is refused alike.
    fn cuDeviceGetExecAffinitySupport(supported: *mut i32, kind: u32, device: i32) {
        check_device(device)?;
        // CU_EXEC_AFFINITY_TYPE_SM_COUNT is the only type.
        if kind != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `supported` is NULL or writable.
        unsafe { caller::write(supported, 0) }
    }
}

export! {
    /// LUIDs are Windows's (they match a device with Direct3D's adapters): NVIDIA's
    /// Linux driver has none and answers `CUDA_ERROR_NOT_SUPPORTED` for a valid device
    /// and pointers, writing nothing, and `CUDA_ERROR_INVALID_VALUE` for a NULL pointer
    /// (as reported by others measuring it; tests/gpu/legacy_driver.cu checks it
    /// against the driver). vmcuda answers the same, without the stubs' line: this is
    /// the native behaviour, not a missing function.
    fn cuDeviceGetLuid(luid: *mut c_char, mask: *mut u32, device: i32) {
        check_initialized()?;
        if luid.is_null() || mask.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        check_device(device)?;
        Err(status(super::result::CUDA_ERROR_NOT_SUPPORTED))
    }
}

export! {
    /// The driver answers `CUDA_ERROR_NOT_SUPPORTED` (measured on driver 580): CUDA 12
    /// removed the command-line profiler this configured.
    fn cuProfilerInitialize(_config: *const c_char, _output: *const c_char, _mode: u32) {
        check_initialized()?;
        Err(status(super::result::CUDA_ERROR_NOT_SUPPORTED))
    }
}

export! {
    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: i32) {
        check_device(device)?;
        // SAFETY: by cuDeviceTotalMem_v2's contract `bytes` is NULL or writable.
        unsafe { caller::write(bytes, properties(device)?.total_global_mem as usize) }
    }
}

export! {
    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], device: i32) {
        check_device(device)?;
        // SAFETY: by cuDeviceGetUuid_v2's contract `uuid` is NULL or writable.
        unsafe { caller::write(uuid, properties(device)?.uuid) }
    }
}

/// Attribute numbers of the PCI location (`CU_DEVICE_ATTRIBUTE_PCI_*`).
const ATTR_PCI_BUS_ID: u32 = 33;
const ATTR_PCI_DEVICE_ID: u32 = 34;
const ATTR_PCI_DOMAIN_ID: u32 = 50;

export! {
    fn cuDeviceGetPCIBusId(out: *mut c_char, len: i32, device: i32) {
        check_device(device)?;
        let p = properties(device)?;
        let attr = |a| p.attribute(a).unwrap_or(0);
        let id = format!(
            "{:04x}:{:02x}:{:02x}.0",
            attr(ATTR_PCI_DOMAIN_ID),
            attr(ATTR_PCI_BUS_ID),
            attr(ATTR_PCI_DEVICE_ID)
        );
        let len = usize::try_from(len).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        if len == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cuDeviceGetPCIBusId's contract `out.cast()` is NULL or holds `len`
        // writable bytes.
        let buf = unsafe { caller::bytes_mut(out.cast(), len) }?;
        let n = id.len().min(len - 1);
        buf[..n].copy_from_slice(&id.as_bytes()[..n]);
        buf[n] = 0;
        Ok(())
    }
}

export! {
    fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: i32) {
        check_device(device)?;
        with_primary(|p| p.entry(device).or_default().0 += 1);
        // SAFETY: by cuDevicePrimaryCtxRetain's contract `ctx` is NULL or writable.
        unsafe { caller::write(ctx, context_of(device)) }
    }
}

export! {
    fn cuDevicePrimaryCtxRelease_v2(device: i32) {
        check_device(device)?;
        with_primary(|p| {
            let e = p.entry(device).or_default();
            if e.0 == 0 {
                return Err(status(CUDA_ERROR_INVALID_CONTEXT));
            }
            e.0 -= 1;
            Ok(())
        })
    }
}

export! {
    fn cuDevicePrimaryCtxGetState(device: i32, flags: *mut u32, active: *mut i32) {
        check_device(device)?;
        let (refs, f) = with_primary(|p| p.get(&device).copied().unwrap_or_default());
        // SAFETY: by cuDevicePrimaryCtxGetState's contract `flags` is NULL or writable.
        unsafe { caller::write(flags, f) }?;
        // SAFETY: by cuDevicePrimaryCtxGetState's contract `active` is NULL or writable.
        unsafe { caller::write(active, i32::from(refs > 0 || state::device_active(device))) }
    }
}

export! {
    fn cuDevicePrimaryCtxSetFlags_v2(device: i32, flags: u32) {
        check_device(device)?;
        // CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS, as the
        // runtime's cudaSetDeviceFlags accepts.
        if flags & !0x1f != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        with_primary(|p| p.entry(device).or_default().1 = flags);
        Ok(())
    }
}

export! {
    fn cuDevicePrimaryCtxReset_v2(device: i32) {
        check_device(device)?;
        let reset = on_device(device, || keeping_last_error(|| crate::driver::inner::reset::cudaDeviceReset()));
        with_primary(|p| p.remove(&device));
        reset
    }
}

export! {
    /// CUDA 13's cuCtxCreate (with `CUctxCreateParams`): the primary context, made
    /// current (vmcuda models one context per device).
    fn cuCtxCreate_v4(ctx: *mut CUcontext, _params: *mut std::ffi::c_void, _flags: u32, device: i32) {
        check_device(device)?;
        with_primary(|p| p.entry(device).or_default().0 += 1);
        with_stack(|s| s.push(device));
        make_current(Some(device));
        // SAFETY: by cuCtxCreate_v4's contract `ctx` is NULL or writable.
        unsafe { caller::write(ctx, context_of(device)) }
    }
}

export! {
    fn cuCtxDestroy_v2(ctx: CUcontext) {
        check_initialized()?;
        let device = device_of(ctx)?;
        // A context's destruction waits for its work, and the real driver prints what
        // its kernels wrote with `printf` then (here: when the host synchronizes).
        let _ = synchronize_device(device);
        with_primary(|p| {
            if let Some(e) = p.get_mut(&device) {
                e.0 = e.0.saturating_sub(1);
            }
        });
        with_stack(|s| {
            if s.last() == Some(&device) {
                s.pop();
            }
        });
        make_current(current());
        Ok(())
    }
}

export! {
    fn cuCtxGetCurrent(ctx: *mut CUcontext) {
        check_initialized()?;
        // SAFETY: by cuCtxGetCurrent's contract `ctx` is NULL or writable.
        unsafe { caller::write(ctx, current().map_or(std::ptr::null_mut(), context_of)) }
    }
}

export! {
    fn cuCtxSetCurrent(ctx: CUcontext) {
        check_initialized()?;
        let device = if ctx.is_null() { None } else { Some(device_of(ctx)?) };
        if device.is_none() {
            state::clear_runtime_context();
        }
        with_stack(|s| {
            s.pop();
            s.extend(device);
        });
        make_current(device);
        Ok(())
    }
}

export! {
    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        check_initialized()?;
        let device = device_of(ctx)?;
        with_stack(|s| s.push(device));
        make_current(Some(device));
        Ok(())
    }
}

export! {
    fn cuCtxPopCurrent_v2(ctx: *mut CUcontext) {
        check_initialized()?;
        let popped = with_stack(|s| s.pop()).or_else(|| {
            // The context the runtime made current is the bottom of the stack.
            let d = state::runtime_context();
            state::clear_runtime_context();
            d
        });
        let Some(device) = popped else {
            return Err(status(CUDA_ERROR_INVALID_CONTEXT));
        };
        // SAFETY: by cuCtxPopCurrent_v2's contract `ctx` is NULL or writable.
        unsafe { caller::write_opt(ctx, context_of(device)) };
        make_current(current());
        Ok(())
    }
}

/// The current context's device: `CUDA_ERROR_INVALID_CONTEXT` without one.
pub(crate) fn current_device() -> Result<i32> {
    check_initialized()?;
    current().ok_or(status(CUDA_ERROR_INVALID_CONTEXT))
}

export! {
    fn cuCtxGetDevice(device: *mut i32) {
        // SAFETY: by cuCtxGetDevice's contract `device` is NULL or writable.
        unsafe { caller::write(device, current_device()?) }
    }
}

export! {
    fn cuCtxSynchronize() {
        current_device()?;
        keeping_last_error(|| crate::driver::inner::device::cudaDeviceSynchronize())
    }
}

export! {
    fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut u32) {
        check_initialized()?;
        if !ctx.is_null() {
            device_of(ctx)?;
        } else {
            current_device()?;
        }
        // The API version of contexts made by a CUDA 13 driver.
        // SAFETY: by cuCtxGetApiVersion's contract `version` is NULL or writable.
        unsafe { caller::write(version, 13000) }
    }
}

export! {
    /// CUDA 1's usage count: the current context, its count raised by one. Flags must
    /// be 0; with no context current, `CUDA_ERROR_INVALID_CONTEXT`.
    fn cuCtxAttach(ctx: *mut CUcontext, flags: u32) {
        let device = current_device()?;
        if flags != 0 || ctx.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        with_attached(|a| *a.entry(device).or_default() += 1);
        // SAFETY: by cuCtxAttach's contract `ctx` is writable (checked not NULL).
        unsafe { caller::write(ctx, context_of(device)) }
    }
}

export! {
    /// Lowers the usage count of the current context `ctx` (another context is
    /// `CUDA_ERROR_INVALID_CONTEXT`). A count `cuCtxAttach` did not raise is the one
    /// `cuCtxCreate` gave: the context is then destroyed, as `cuCtxDestroy` does.
    fn cuCtxDetach(ctx: CUcontext) {
        check_initialized()?;
        let device = device_of(ctx)?;
        if current() != Some(device) {
            return Err(status(CUDA_ERROR_INVALID_CONTEXT));
        }
        let attached = with_attached(|a| match a.get_mut(&device) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        });
        if attached {
            return Ok(());
        }
        match cuCtxDestroy_v2(ctx) {
            0 => Ok(()),
            e => Err(status(e)),
        }
    }
}

/// The device of context `ctx` if `event` belongs to it, else
/// `CUDA_ERROR_INVALID_HANDLE`, as the driver answers for an event of another context.
fn context_and_event(ctx: CUcontext, event: RawHandle) -> Result<(i32, EventHandle)> {
    check_initialized()?;
    let device = device_of(ctx)?;
    match crate::driver::inner::device_of_event(event as u64) {
        Some(d) if d == device => Ok((device, EventHandle(event as u64))),
        _ => Err(status(CUDA_ERROR_INVALID_HANDLE)),
    }
}

export! {
    /// The host's `cuCtxRecordEvent` in the context's device's context (the one
    /// vmcuda models per device). Work the guest still holds behind a host function
    /// (`gate`) is handed to the host first, so the event captures it too.
    fn cuCtxRecordEvent(ctx: CUcontext, event: RawHandle) {
        let (device, event) = context_and_event(ctx, event)?;
        crate::gate::wait_all_submitted();
        state::as_device(device, || crate::driver::inner::call(&CtxRecordEvent { event }))
    }
}

export! {
    /// The host's `cuCtxWaitEvent`: the context's later work waits for the event's
    /// (once the guest has handed the host a record it still held back).
    fn cuCtxWaitEvent(ctx: CUcontext, event: RawHandle) {
        let (device, event) = context_and_event(ctx, event)?;
        crate::gate::wait_event_submitted(event);
        state::as_device(device, || crate::driver::inner::call(&CtxWaitEvent { event }))
    }
}

export! {
    /// The host's answer for the current context (vmcuda's contexts carry no affinity:
    /// `cuCtxCreate_v3` refuses one).
    fn cuCtxGetExecAffinity(out: *mut ExecAffinityParam, kind: u32) {
        current_device()?;
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let r = crate::driver::inner::call(&CtxGetExecAffinity { kind })?;
        // SAFETY: by cuCtxGetExecAffinity's contract `out` is writable (not NULL).
        unsafe { caller::write(out, ExecAffinityParam { kind, sm_count: r.sm_count }) }
    }
}
