//! Streams and events. Their ids are made in the guest (no round trip to create one)
//! and are what the program holds as `cudaStream_t` / `cudaEvent_t`.

use std::ffi::c_void;

use vmcuda_wire::op::{
    EventCreate, EventDestroy, EventElapsedTime, EventHandle, EventQuery, EventRecord,
    EventSynchronize, StreamCreate, StreamDestroy, StreamHandle, StreamQuery, StreamSynchronize,
    StreamWaitEvent,
};
use vmcuda_wire::CudaStatus;

use super::device::priority_range;
use super::{
    call, device_of_event, device_of_stream, guard, on_host_of, stream_handle, RawHandle, Result,
};
use crate::abi::runtime::STREAM_ATTR_LEN;
use crate::capture;
use crate::gate;
use crate::state::{self, registry, StreamInfo};
use crate::{caller, cudaError_t};

const STREAM_NON_BLOCKING: u32 = 1;

/// # Safety
/// `out` is NULL or writable.
unsafe fn stream_create(out: *mut RawHandle, flags: u32, priority: i32) -> Result<()> {
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if flags & !STREAM_NON_BLOCKING != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // CUDA clamps priorities into the device's range; so do we, so queries agree.
    let range = priority_range()?;
    let priority = priority.clamp(range.greatest, range.least);
    let id = state::fresh_id();
    // The id is made here and the arguments are checked: nothing is left for the host
    // to refuse synchronously, so creating a stream costs no round trip.
    let req = StreamCreate {
        stream: StreamHandle(id),
        flags,
        priority,
    };
    super::post(&req, &[])?;
    registry().streams.insert(
        id,
        StreamInfo {
            device: state::current_device(),
            flags,
            priority,
        },
    );
    // SAFETY: as `stream_create`'s caller promised.
    unsafe { caller::write(out, id as RawHandle) }
}

pub extern "C" fn cudaStreamCreateWithFlags(out: *mut RawHandle, flags: u32) -> cudaError_t {
    // SAFETY: by cudaStreamCreateWithFlags's contract its pointer arguments are as
    // `stream_create` requires.
    guard("cudaStreamCreateWithFlags", || unsafe {
        stream_create(out, flags, 0)
    })
}

pub extern "C" fn cudaStreamCreateWithPriority(
    out: *mut RawHandle,
    flags: u32,
    priority: i32,
) -> cudaError_t {
    guard("cudaStreamCreateWithPriority", || {
        // SAFETY: by cudaStreamCreateWithPriority's contract its pointer arguments are as
        // `stream_create` requires.
        unsafe { stream_create(out, flags, priority) }
    })
}

pub extern "C" fn cudaStreamDestroy(stream: RawHandle) -> cudaError_t {
    guard("cudaStreamDestroy", || {
        if super::is_default_stream(stream) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        let handle = stream_handle(stream, false);
        if handle.is_default() {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        if !registry().streams.contains_key(&handle.0) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // Destroying a stream with work queued lets that work finish first.
        on_host_of(device_of_stream(handle), || {
            gate::submit(handle, move || {
                let r = super::post(&StreamDestroy { stream: handle }, &[]);
                registry().streams.remove(&handle.0);
                r
            })
        })
    })
}

fn stream_synchronize(stream: RawHandle, per_thread: bool) -> Result<()> {
    let handle = stream_handle(stream, per_thread);
    capture::check_stream_sync(handle)?;
    let owner = device_of_stream(handle);
    on_host_of(owner, || {
        let queued = gate::sync_stream(handle);
        // The GPU's word first, where there is one: not in a capture (the write would
        // join it), and only for a stream of the current device (a stream operation
        // goes to a stream of the current context).
        let here = owner.is_none_or(|d| d == state::current_device());
        let watched = (here && !crate::capture::any())
            .then(|| crate::done_word::watch(|done| crate::done_word::write_after(handle, done)))
            .flatten();
        if let Some(seen) = watched {
            if seen? {
                return queued;
            }
        }
        if state::other_threads() && !crate::capture::any() {
            super::wait_by_queries(|| call(&StreamQuery { stream: handle }))?;
        } else {
            call(&StreamSynchronize { stream: handle })?;
        }
        queued
    })
}

fn stream_query(stream: RawHandle, per_thread: bool) -> Result<()> {
    let handle = stream_handle(stream, per_thread);
    capture::check_stream_sync(handle)?;
    if gate::stream_busy(handle) {
        return Err(CudaStatus::ErrorNotReady);
    }
    on_host_of(device_of_stream(handle), || {
        call(&StreamQuery { stream: handle })
    })
}

pub extern "C" fn cudaStreamSynchronize(stream: RawHandle) -> cudaError_t {
    guard("cudaStreamSynchronize", || {
        stream_synchronize(stream, false)
    })
}

pub extern "C" fn cudaStreamQuery(stream: RawHandle) -> cudaError_t {
    guard("cudaStreamQuery", || stream_query(stream, false))
}

pub(crate) fn stream_info(stream: RawHandle, per_thread: bool) -> Result<StreamInfo> {
    let h = stream_handle(stream, per_thread);
    if h.is_default() {
        return Ok(StreamInfo {
            device: state::current_device(),
            flags: 0,
            priority: 0,
        });
    }
    registry()
        .streams
        .get(&h.0)
        .copied()
        .ok_or(CudaStatus::ErrorInvalidResourceHandle)
}

pub extern "C" fn cudaStreamGetFlags(stream: RawHandle, flags: *mut u32) -> cudaError_t {
    guard("cudaStreamGetFlags", || {
        // SAFETY: by cudaStreamGetFlags's contract `flags` is NULL or writable.
        unsafe { caller::write(flags, stream_info(stream, false)?.flags) }
    })
}

pub extern "C" fn cudaStreamGetPriority(stream: RawHandle, priority: *mut i32) -> cudaError_t {
    guard("cudaStreamGetPriority", || {
        // SAFETY: by cudaStreamGetPriority's contract `priority` is NULL or writable.
        unsafe { caller::write(priority, stream_info(stream, false)?.priority) }
    })
}

pub extern "C" fn cudaStreamGetDevice(stream: RawHandle, device: *mut i32) -> cudaError_t {
    guard("cudaStreamGetDevice", || {
        // SAFETY: by cudaStreamGetDevice's contract `device` is NULL or writable.
        unsafe { caller::write(device, stream_info(stream, false)?.device) }
    })
}

pub extern "C" fn cudaStreamGetId(stream: RawHandle, id: *mut u64) -> cudaError_t {
    guard("cudaStreamGetId", || {
        stream_info(stream, false)?;
        // SAFETY: by cudaStreamGetId's contract `id` is NULL or writable.
        unsafe { caller::write(id, stream_handle(stream, false).0) }
    })
}

/// Run `f` on the host of `stream`'s device.
fn on_stream_host<T>(stream: StreamHandle, f: impl FnOnce() -> Result<T>) -> Result<T> {
    super::on_host_of(super::device_of_stream(stream), f)
}

/// Stream attributes (`cudaStreamAttrID`, the launch attributes' numbers) are the
/// host driver's: set and read there, the value as its 64 bytes.
pub extern "C" fn cudaStreamSetAttribute(
    stream: RawHandle,
    attr: u32,
    value: *const [u8; STREAM_ATTR_LEN],
) -> cudaError_t {
    guard("cudaStreamSetAttribute", || {
        // SAFETY: by cudaStreamSetAttribute's contract `value` is NULL or a readable
        // `cudaStreamAttrValue`.
        let value = unsafe { caller::read(value) }?.to_vec();
        let stream = stream_handle(stream, false);
        capture::check_stream_use(stream)?;
        on_stream_host(stream, || {
            call(&vmcuda_wire::op::StreamSetAttribute {
                stream,
                attr,
                value,
            })
        })
    })
}

pub extern "C" fn cudaStreamGetAttribute(
    stream: RawHandle,
    attr: u32,
    value: *mut [u8; STREAM_ATTR_LEN],
) -> cudaError_t {
    guard("cudaStreamGetAttribute", || {
        let stream = stream_handle(stream, false);
        let r = on_stream_host(stream, || {
            call(&vmcuda_wire::op::StreamGetAttribute { stream, attr })
        })?;
        let bytes: [u8; STREAM_ATTR_LEN] = r
            .value
            .as_slice()
            .try_into()
            .map_err(|_| CudaStatus::ErrorUnknown)?;
        // SAFETY: by cudaStreamGetAttribute's contract `value` is NULL or writable.
        unsafe { caller::write(value, bytes) }
    })
}

pub extern "C" fn cudaStreamCopyAttributes(dst: RawHandle, src: RawHandle) -> cudaError_t {
    guard("cudaStreamCopyAttributes", || {
        let (dst, src) = (stream_handle(dst, false), stream_handle(src, false));
        if super::on_different_hosts(
            super::device_of_stream(dst).unwrap_or_else(state::current_device),
            super::device_of_stream(src).unwrap_or_else(state::current_device),
        )? {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        on_stream_host(dst, || {
            call(&vmcuda_wire::op::StreamCopyAttributes { dst, src })
        })
    })
}

fn wait_event(stream: RawHandle, event: RawHandle, flags: u32, per_thread: bool) -> Result<()> {
    let stream = stream_handle(stream, per_thread);
    let event = EventHandle(event as u64);
    // Waiting for an event recorded in a capture joins that capture.
    capture::stream_waits(stream, event)?;
    let req = StreamWaitEvent {
        stream,
        event,
        flags,
    };
    let stream_device = device_of_stream(stream).unwrap_or_else(state::current_device);
    if let Some(event_device) = device_of_event(event.0) {
        if super::on_different_hosts(stream_device, event_device)? {
            // No stream of one host can wait on another's event: the guest waits for
            // the event, so the stream's later work still runs after it.
            gate::wait_event_submitted(event);
            return on_host_of(Some(event_device), || call(&EventSynchronize { event }));
        }
    }
    on_host_of(Some(stream_device), || wait_event_here(stream, event, req))
}

fn wait_event_here(stream: StreamHandle, event: EventHandle, req: StreamWaitEvent) -> Result<()> {
    // Posted, as a launch is, when the guest has made every check the driver makes
    // before it returns: a stream and an event it knows, default flags, and no capture
    // in the process (a wait could join one, or be an implicit synchronization with
    // one). Frameworks order their streams with a wait before nearly every step.
    let post = req.flags == 0
        && super::known_stream(stream)
        && super::device_of_event(event.0).is_some()
        && !crate::capture::any();
    let send = move || {
        if post {
            super::post(&req, &[])
        } else {
            call(&req)
        }
    };
    if gate::event_pending(event) {
        // The event's record is still queued behind a host function: so is this wait.
        return gate::submit_behind(stream, move || {
            gate::wait_event_submitted(event);
            send()
        });
    }
    gate::submit(stream, send)
}

pub extern "C" fn cudaStreamWaitEvent(
    stream: RawHandle,
    event: RawHandle,
    flags: u32,
) -> cudaError_t {
    guard("cudaStreamWaitEvent", || {
        wait_event(stream, event, flags, false)
    })
}

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;
type StreamCallback = Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>;

/// Host functions run once the stream's earlier work is done, and later work on the
/// stream waits for them: waiting for the stream here, then calling the function
/// before returning, keeps exactly that order.
///
/// # Safety
/// `f` and `user_data` are the program's host function and its argument, to be
/// called once when the stream gets there (`cudaLaunchHostFunc`'s contract).
unsafe fn launch_host_func(
    stream: RawHandle,
    f: HostFn,
    user_data: *mut c_void,
    per_thread: bool,
) -> Result<()> {
    let f = f.ok_or(CudaStatus::ErrorInvalidValue)?;
    let handle = stream_handle(stream, per_thread);
    let user_data = user_data as usize;
    if capture::is_capturing(handle) {
        // A host node of the graph being captured: its slot is watched here.
        capture::check_stream_use(handle)?;
        let at = crate::host_functions::new_slot(f, user_data)?;
        return crate::host_functions::signal(handle, at);
    }
    on_host_of(device_of_stream(handle), || {
        gate::host_function(handle, move |_| {
            // SAFETY: as `launch_host_func`'s caller promised.
            unsafe { caller::call_host_fn(f, user_data as *mut c_void) }
        });
        Ok(())
    })
}

pub extern "C" fn cudaLaunchHostFunc(
    stream: RawHandle,
    f: HostFn,
    user_data: *mut c_void,
) -> cudaError_t {
    guard("cudaLaunchHostFunc", || {
        // SAFETY: by cudaLaunchHostFunc's contract its pointer arguments are as
        // `launch_host_func` requires.
        unsafe { launch_host_func(stream, f, user_data, false) }
    })
}

/// # Safety
/// `cb` and `user_data` are the program's callback and its argument, to be called
/// once when the stream gets there (`cudaStreamAddCallback`'s contract).
unsafe fn add_callback(
    stream: RawHandle,
    cb: StreamCallback,
    user_data: *mut c_void,
    flags: u32,
    per_thread: bool,
) -> Result<()> {
    let cb = cb.ok_or(CudaStatus::ErrorInvalidValue)?;
    if flags != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let handle = stream_handle(stream, per_thread);
    if !handle.is_default() && !registry().streams.contains_key(&handle.0) {
        return Err(CudaStatus::ErrorInvalidResourceHandle);
    }
    capture::refuse_if_capturing(handle)?;
    let (stream, user_data) = (stream as usize, user_data as usize);
    // The callback learns the stream's status: errors of earlier work are reported to it.
    on_host_of(device_of_stream(handle), || {
        gate::host_function(handle, move |status| {
            let code = status.err().map_or(0, |s| s.0);
            // SAFETY: as `add_callback`'s caller promised.
            unsafe {
                caller::call_stream_callback(
                    cb,
                    stream as *mut c_void,
                    code,
                    user_data as *mut c_void,
                )
            }
        });
        Ok(())
    })
}

pub extern "C" fn cudaStreamAddCallback(
    stream: RawHandle,
    cb: StreamCallback,
    user_data: *mut c_void,
    flags: u32,
) -> cudaError_t {
    guard("cudaStreamAddCallback", || {
        // SAFETY: by cudaStreamAddCallback's contract its pointer arguments are as
        // `add_callback` requires.
        unsafe { add_callback(stream, cb, user_data, flags, false) }
    })
}

// ---- events ----

/// cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess.
const EVENT_FLAGS: u32 = 0x7;
const EVENT_INTERPROCESS: u32 = 0x4;

/// # Safety
/// `out` is NULL or writable.
unsafe fn event_create(out: *mut RawHandle, flags: u32) -> Result<()> {
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let id = state::fresh_id();
    let req = EventCreate {
        event: EventHandle(id),
        flags,
    };
    // Flags CUDA refuses are refused here; interprocess events (which a VM cannot
    // share anyway) are left to the host to answer.
    if flags & !EVENT_FLAGS != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if flags & EVENT_INTERPROCESS != 0 {
        call(&req)?;
    } else {
        super::post(&req, &[])?;
    }
    registry()
        .events
        .insert(id, (state::current_device(), flags));
    // SAFETY: as `event_create`'s caller promised.
    unsafe { caller::write(out, id as RawHandle) }
}

pub extern "C" fn cudaEventCreateWithFlags(out: *mut RawHandle, flags: u32) -> cudaError_t {
    // SAFETY: by cudaEventCreateWithFlags's contract its pointer arguments are as
    // `event_create` requires.
    guard("cudaEventCreateWithFlags", || unsafe {
        event_create(out, flags)
    })
}

pub extern "C" fn cudaEventDestroy(event: RawHandle) -> cudaError_t {
    guard("cudaEventDestroy", || {
        let req = EventDestroy {
            event: EventHandle(event as u64),
        };
        // An event this process made is destroyed without a round trip; anything else
        // is the host's to refuse.
        match registry().events.remove(&(event as u64)) {
            Some((device, _)) => on_host_of(Some(device), || super::post(&req, &[])),
            None => call(&req),
        }
    })
}

fn record(event: RawHandle, stream: RawHandle, flags: u32, per_thread: bool) -> Result<()> {
    let stream = stream_handle(stream, per_thread);
    let event = EventHandle(event as u64);
    capture::check_stream_use(stream)?;
    capture::event_recorded(event, stream);
    let req = EventRecord {
        event,
        stream,
        flags,
    };
    // cudaEventRecordExternal outside a capture is refused synchronously: ask then.
    let post =
        super::known_stream(stream) && registry().events.contains_key(&event.0) && flags == 0;
    on_host_of(device_of_stream(stream), || {
        gate::record_event(stream, event, move || {
            if post {
                super::post(&req, &[])
            } else {
                call(&req)
            }
        })
    })
}

pub extern "C" fn cudaEventRecord(event: RawHandle, stream: RawHandle) -> cudaError_t {
    guard("cudaEventRecord", || record(event, stream, 0, false))
}

pub extern "C" fn cudaEventRecordWithFlags(
    event: RawHandle,
    stream: RawHandle,
    flags: u32,
) -> cudaError_t {
    guard("cudaEventRecordWithFlags", || {
        record(event, stream, flags, false)
    })
}

pub extern "C" fn cudaEventSynchronize(event: RawHandle) -> cudaError_t {
    guard("cudaEventSynchronize", || {
        let event = EventHandle(event as u64);
        gate::wait_event_submitted(event);
        let by_queries = state::other_threads() && !crate::capture::any();
        on_host_of(device_of_event(event.0), || match by_queries {
            true => super::wait_by_queries(|| call(&EventQuery { event })),
            false => call(&EventSynchronize { event }),
        })
    })
}

pub extern "C" fn cudaEventQuery(event: RawHandle) -> cudaError_t {
    guard("cudaEventQuery", || {
        let event = EventHandle(event as u64);
        if gate::event_pending(event) {
            return Err(CudaStatus::ErrorNotReady);
        }
        on_host_of(device_of_event(event.0), || call(&EventQuery { event }))
    })
}

pub extern "C" fn cudaEventElapsedTime(
    ms: *mut f32,
    start: RawHandle,
    end: RawHandle,
) -> cudaError_t {
    guard("cudaEventElapsedTime", || {
        if ms.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (start, end) = (EventHandle(start as u64), EventHandle(end as u64));
        if gate::event_pending(start) || gate::event_pending(end) {
            return Err(CudaStatus::ErrorNotReady);
        }
        let r = on_host_of(device_of_event(start.0), || {
            call(&EventElapsedTime { start, end })
        })?;
        // SAFETY: by cudaEventElapsedTime's contract `ms` is NULL or writable.
        unsafe { caller::write(ms, r.ms) }
    })
}
