//! Devices and their primary contexts: start-up, binding, device properties, limits,
//! cache configuration, peer access, reset and teardown.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{result, sys};
use tracing::{debug, warn};
use vmcuda_wire::op::{DeviceProperties, GpuStatus};
use vmcuda_wire::CudaStatus;

use crate::compute::Drainer;
use crate::policy::GpuSelection;

use super::super::{
    DeviceRange, ExecEvent, ExecResult, ExecStream, LEGACY_STREAM, PER_THREAD_STREAM,
};
use super::launch::LaunchLimits;
use super::staging::{QueuedCopies, StagingState};
use super::symbols::DRIVER_SYMBOLS;
use super::uuid::{device_uuid, format_uuid};
use super::{check, status, to_usize, CudaExecutor};
use crate::executor::DeviceExec;

/// `cuDeviceGetAttribute` with plain integers, so that probing every attribute number
/// never materialises an invalid `CUdevice_attribute` enum value.
pub(super) type RawDeviceGetAttribute =
    unsafe extern "C" fn(*mut c_int, c_int, sys::CUdevice) -> c_uint;

pub(super) struct Device {
    pub(super) handle: sys::CUdevice,
    pub(super) name: String,
    /// The retained primary context, once made.
    pub(super) ctx: Option<sys::CUcontext>,
    pub(super) staging: StagingState,
    pub(super) limits: Option<LaunchLimits>,
    /// A non-blocking stream of our own for zeroing fresh allocations, so the zeroing
    /// waits for none of the guest's work and none of it waits for the zeroing.
    pub(super) scrub_stream: Option<sys::CUstream>,
    /// The module and kernel that zero graph memory (`zero.rs`), loaded on first use.
    pub(super) zero_kernel: Option<(sys::CUmodule, sys::CUfunction)>,
    /// A non-blocking stream of our own and an event, made on first use, on which a
    /// device synchronize's done word is written once every guest stream got there
    /// (`device_write_done`).
    pub(super) done_signal: Option<(sys::CUstream, sys::CUevent)>,
}

/// The contexts an executor holds, for its worker's turn keeper to synchronize from
/// its own thread (`keeper_drain`; a context may be current on several threads). The
/// keeper synchronizes them under this lock, and a context leaves the list, under it,
/// before it is reset or released: so none is used once gone, and a reset or release
/// waits for a drain under way.
#[derive(Clone, Default)]
pub(super) struct HeldContexts(Arc<Mutex<Vec<HeldContext>>>);

struct HeldContext(sys::CUcontext);

// SAFETY: a context handle may be made current and synchronized on any thread (the
// driver API is thread-safe); `HeldContexts` keeps it from being used once released.
unsafe impl Send for HeldContext {}

impl HeldContexts {
    fn lock(&self) -> MutexGuard<'_, Vec<HeldContext>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The list becomes `devices`' contexts.
    fn publish(&self, devices: &[Device]) {
        *self.lock() = devices
            .iter()
            .filter_map(|d| d.ctx)
            .map(HeldContext)
            .collect();
    }

    /// Empty the list (once any drain under way is done).
    fn clear(&self) {
        self.lock().clear();
    }

    fn drainer(&self) -> Drainer {
        let held = self.clone();
        Arc::new(move || {
            let list = held.lock();
            for c in list.iter() {
                // SAFETY: a primary context the executor retained; it stays retained
                // while it is in the list, and the list is locked.
                let r = unsafe { result::ctx::set_current(c.0) }
                    .and_then(|()| result::ctx::synchronize());
                if let Err(e) = r {
                    // The guest sees the error at its next synchronizing call.
                    debug!(%e, "waiting for the GPU's work before handing the turn on");
                }
            }
            if !list.is_empty() {
                // SAFETY: unbinding only: this thread keeps no context current once
                // the list lets go of it.
                let _ = unsafe { result::ctx::set_current(ptr::null_mut()) };
            }
        })
    }
}

/// The runtime's `cudaLimit` numbers are `CUlimit`'s.
pub(super) fn limit_from(limit: u32) -> Option<sys::CUlimit> {
    enum_from_u32!(
        limit,
        CUlimit,
        [
            CU_LIMIT_STACK_SIZE,
            CU_LIMIT_PRINTF_FIFO_SIZE,
            CU_LIMIT_MALLOC_HEAP_SIZE,
            CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH,
            CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT,
            CU_LIMIT_MAX_L2_FETCH_GRANULARITY,
            CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
        ]
    )
}

/// A device's name. Raw: cudarc's wrapper reads at most 128 bytes and panics on a
/// name without a terminator; this keeps the 256-byte buffer and lossy decoding.
fn device_name(handle: sys::CUdevice) -> ExecResult<String> {
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer has the length passed; the driver NUL-terminates.
    check(unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, handle) })?;
    let bytes: Vec<u8> = name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl CudaExecutor {
    /// Initialises the driver. Fails (without panicking) when libcuda is missing or
    /// too old, when `cuInit` fails, or when there is no device.
    /// Only the GPUs `gpus` selects are visible, in its order: the guest's device i
    /// is the host's `gpus[i]`.
    pub fn new(gpus: &GpuSelection) -> Result<CudaExecutor, CudaStatus> {
        // SAFETY: only dlopens candidate library names and closes them again.
        if !unsafe { sys::is_culib_present() } {
            debug!("libcuda not found");
            return Err(CudaStatus::ErrorNoDevice);
        }
        match std::panic::catch_unwind(|| Self::init(gpus)) {
            Ok(result) => result,
            Err(_) => {
                warn!("the CUDA driver library panicked while loading");
                Err(CudaStatus::ErrorNoDevice)
            }
        }
    }

    fn init(gpus: &GpuSelection) -> Result<CudaExecutor, CudaStatus> {
        // SAFETY: `is_culib_present` succeeded, so cudarc finds the library again.
        let lib = unsafe { sys::culib() };
        // On a machine with no NVIDIA driver but vmcuda's guest package, the loader
        // hands out vmcuda's own libcuda.so.1: serving through it would send every
        // guest's calls back to a bridge. It is told by its own entry points.
        // SAFETY: only looks a symbol up; the pointer is not used.
        if unsafe { lib.get::<*const c_void>(b"__vmcuda_cuInit") }.is_ok() {
            warn!("libcuda.so.1 here is vmcuda's guest driver, not NVIDIA's: no GPU to serve with");
            return Err(CudaStatus::ErrorNoDevice);
        }
        // SAFETY: only looks symbols up; the pointers are not used.
        let missing: Vec<&str> = DRIVER_SYMBOLS
            .iter()
            .copied()
            .filter(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
            .collect();
        if !missing.is_empty() {
            warn!(
                ?missing,
                "the CUDA driver lacks entry points this executor needs"
            );
            return Err(CudaStatus::ErrorInsufficientDriver);
        }
        // SAFETY: the symbol exists (checked above) and has this C signature, with
        // plain integers for the enum argument and the result.
        let get_attribute_raw: RawDeviceGetAttribute = unsafe {
            match lib.get::<RawDeviceGetAttribute>(b"cuDeviceGetAttribute") {
                Ok(f) => *f,
                Err(_) => return Err(CudaStatus::ErrorInsufficientDriver),
            }
        };

        result::init().map_err(status)?;
        let mut driver_version = 0;
        // SAFETY: out-pointer to a local (cudarc's result layer has no wrapper).
        check(unsafe { sys::cuDriverGetVersion(&mut driver_version) })?;
        let count = result::device::get_count().map_err(status)?;
        if count <= 0 {
            return Err(CudaStatus::ErrorNoDevice);
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let handle = result::device::get(ordinal).map_err(status)?;
            devices.push(Device {
                handle,
                name: device_name(handle)?,
                ctx: None,
                staging: StagingState::Untried,
                limits: None,
                scrub_stream: None,
                zero_kernel: None,
                done_signal: None,
            });
        }
        let uuids = devices
            .iter()
            .map(|d| device_uuid(d.handle).map(|u| format_uuid(&u)))
            .collect::<Result<Vec<_>, _>>()?;
        let picked = gpus.resolve(&uuids).map_err(|msg| {
            warn!("{msg}");
            CudaStatus::ErrorNoDevice
        })?;
        let mut all: Vec<Option<Device>> = devices.into_iter().map(Some).collect();
        let devices: Vec<Device> = picked.iter().filter_map(|&i| all[i].take()).collect();
        if devices.is_empty() {
            return Err(CudaStatus::ErrorNoDevice);
        }
        debug!(
            driver_version,
            devices = devices.len(),
            "CUDA driver initialised"
        );
        Ok(CudaExecutor {
            driver_version,
            devices,
            current: 0,
            get_attribute_raw,
            streams: HashMap::new(),
            dying_streams: Vec::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            module_by_digest: HashMap::new(),
            next_module: 1,
            functions: HashMap::new(),
            function_cache: HashMap::new(),
            registered: Vec::new(),
            queued: QueuedCopies::default(),
            graph_tables: Default::default(),
            array_tables: Default::default(),
            batch: Default::default(),
            held_contexts: HeldContexts::default(),
        })
    }

    pub(super) fn device_index(&self, device: i32) -> ExecResult<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&i| i < self.devices.len())
            .ok_or(CudaStatus::ErrorInvalidDevice)
    }

    /// The retained primary context of device `idx`, retaining it on first use.
    pub(super) fn context(&mut self, idx: usize) -> ExecResult<sys::CUcontext> {
        let dev = self
            .devices
            .get_mut(idx)
            .ok_or(CudaStatus::ErrorInvalidDevice)?;
        if let Some(ctx) = dev.ctx {
            return Ok(ctx);
        }
        // SAFETY: `handle` came from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(dev.handle) }.map_err(status)?;
        debug!(device = idx, "retained the primary context");
        dev.ctx = Some(ctx);
        self.held_contexts.publish(&self.devices);
        Ok(ctx)
    }

    /// Makes the current device's primary context current on this thread (skipped
    /// when it already is) and returns the device index.
    pub(super) fn bind(&mut self) -> ExecResult<usize> {
        let idx = self.current;
        let ctx = self.context(idx)?;
        let now = result::ctx::get_current().map_err(status)?;
        if now != Some(ctx) {
            // SAFETY: `ctx` is a primary context this executor retained and holds.
            unsafe { result::ctx::set_current(ctx) }.map_err(status)?;
        }
        Ok(idx)
    }

    pub(super) fn banner(&self) -> String {
        let first = &self.devices[0].name;
        let names = if self.devices.iter().all(|d| &d.name == first) {
            format!("{} x {}", self.devices.len(), first)
        } else {
            self.devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("CUDA executor: {names} (driver {})", self.driver_version)
    }

    /// Destroys the streams, events and staging buffer of device `idx`, whose context
    /// must be current. Errors are ignored: this is cleanup.
    pub(super) fn destroy_device_objects(&mut self, idx: usize) {
        // Graphs first: they use the streams below.
        self.batch.forget_device(idx);
        self.graphs_destroy_device(idx);
        self.arrays_destroy_device(idx);
        self.forget_queued(idx);
        if let Some(s) = self.devices[idx].scrub_stream.take() {
            // SAFETY: made by scrub_stream and destroyed once (it has left the device).
            let _ = unsafe { result::stream::destroy(s) };
        }
        if let Some((s, e)) = self.devices[idx].done_signal.take() {
            // SAFETY: made by done_signal and destroyed once (they have left the device).
            let _ = unsafe { result::stream::destroy(s) };
            // SAFETY: as above.
            let _ = unsafe { result::event::destroy(e) };
        }
        if let Some((module, _)) = self.devices[idx].zero_kernel.take() {
            // SAFETY: loaded by zero_kernel in this context and unloaded once (it has
            // left the device); graphs that used it went above.
            let _ = unsafe { sys::cuModuleUnload(module) };
        }
        let streams: Vec<ExecStream> = self
            .streams
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&s, _)| s)
            .collect();
        for id in streams {
            self.streams.remove(&id);
            // SAFETY: the stream was created by stream_create and is destroyed once.
            let _ = unsafe { result::stream::destroy(id as usize as sys::CUstream) };
        }
        let (dying, live): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dying_streams)
            .into_iter()
            .partition(|(d, _)| *d == idx);
        self.dying_streams = live;
        for (_, s) in dying {
            // SAFETY: a stream the guest destroyed, kept until now, destroyed once.
            let _ = unsafe { result::stream::destroy(s) };
        }
        let events: Vec<ExecEvent> = self
            .events
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&e, _)| e)
            .collect();
        for id in events {
            self.events.remove(&id);
            // SAFETY: the event was created by event_create and is destroyed once.
            let _ = unsafe { result::event::destroy(id as usize as sys::CUevent) };
        }
        if let StagingState::Ready(st) =
            std::mem::replace(&mut self.devices[idx].staging, StagingState::Untried)
        {
            st.destroy();
        }
        self.function_cache.retain(|&(_, d), _| d != idx);
    }

    /// Everything this executor holds, released (its `Drop`).
    /// The default streams, every stream made on device `idx`, and those destroyed
    /// while they worked: what a synchronize of the context would wait for that the
    /// guest put there.
    pub(super) fn guest_streams(&self, idx: usize) -> ExecResult<Vec<sys::CUstream>> {
        let made = self
            .streams
            .iter()
            .filter(|(_, &d)| d == idx)
            .map(|(&s, _)| s);
        let mut all: Vec<sys::CUstream> = [LEGACY_STREAM, PER_THREAD_STREAM]
            .into_iter()
            .chain(made)
            .map(|s| self.stream(s))
            .collect::<ExecResult<_>>()?;
        all.extend(
            self.dying_streams
                .iter()
                .filter(|(d, _)| *d == idx)
                .map(|(_, s)| *s),
        );
        Ok(all)
    }

    /// Synchronize every guest stream of the current device that has finished its work
    /// (a query says so; busy streams are left alone), so that the driver has seen it
    /// finish: what it releases on a trim depends on that.
    pub(super) fn settle_finished_streams(&mut self) -> ExecResult<()> {
        let idx = self.bind()?;
        for s in self.guest_streams(idx)? {
            // SAFETY: a default stream, or one this executor made and has not destroyed.
            if unsafe { sys::cuStreamQuery(s) } == sys::CUresult::CUDA_SUCCESS {
                // SAFETY: as above; the stream has no work left, so this does not block.
                check(unsafe { sys::cuStreamSynchronize(s) })?;
            }
        }
        Ok(())
    }

    /// Device `idx`'s stream and event for done words (its context must be current),
    /// made on first use.
    fn done_signal(&mut self, idx: usize) -> ExecResult<(sys::CUstream, sys::CUevent)> {
        if let Some(pair) = self.devices[idx].done_signal {
            return Ok(pair);
        }
        let s = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(status)?;
        let e = match result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) {
            Ok(e) => e,
            Err(err) => {
                // SAFETY: made just above, used by nothing yet.
                let _ = unsafe { result::stream::destroy(s) };
                return Err(status(err));
            }
        };
        self.devices[idx].done_signal = Some((s, e));
        Ok((s, e))
    }

    pub(super) fn release_all(&mut self) {
        self.held_contexts.clear();
        for idx in 0..self.devices.len() {
            let Some(ctx) = self.devices[idx].ctx else {
                continue;
            };
            // SAFETY: `ctx` is a primary context this executor still holds.
            let _ = unsafe { result::ctx::set_current(ctx) };
            self.destroy_device_objects(idx);
        }
        self.drop_texrefs();
        self.unload_modules();
        // SAFETY: unbinding leaves no thread pointing at a context about to go.
        let _ = unsafe { result::ctx::set_current(ptr::null_mut()) };
        for dev in &mut self.devices {
            if dev.ctx.take().is_some() {
                // SAFETY: releases the one reference this executor retained.
                let _ = unsafe { result::primary_ctx::release(dev.handle) };
            }
        }
        debug!("CUDA executor released");
    }

    /// Reset the current device's primary context (see `device_reset`).
    fn reset_current(&mut self) -> ExecResult<()> {
        let idx = self.current;
        if self.devices[idx].ctx.is_none() {
            return Ok(()); // never initialised: nothing to reset
        }
        // Best effort: the objects are destroyed with the context anyway.
        let _ = self.bind();
        self.destroy_device_objects(idx);
        let handle = self.devices[idx].handle;
        // SAFETY: `handle` came from cuDeviceGet; every object of ours in that
        // context has just been destroyed.
        check(unsafe { sys::cuDevicePrimaryCtxReset_v2(handle) })?;
        // Resetting keeps our reference: take a fresh handle and drop the extra one.
        // SAFETY: `handle` came from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(handle) }.map_err(status)?;
        // SAFETY: balances the retain just above; our original reference remains.
        let _ = unsafe { result::primary_ctx::release(handle) };
        self.devices[idx].ctx = Some(ctx);
        debug!(device = idx, "device reset");
        // SAFETY: `ctx` is the retained primary context.
        unsafe { result::ctx::set_current(ctx) }.map_err(status)
    }
}

mod exec;

#[cfg(test)]
mod tests {
    use super::super::launch::cache_config_from;
    use super::*;

    #[test]
    fn runtime_numbers_map_to_driver_enums() {
        assert_eq!(limit_from(0), Some(sys::CUlimit::CU_LIMIT_STACK_SIZE));
        assert_eq!(
            limit_from(6),
            Some(sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        );
        assert_eq!(limit_from(4242), None);
        assert_eq!(
            cache_config_from(3),
            Some(sys::CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL)
        );
        assert_eq!(cache_config_from(4), None);
    }
}
