//! Streams and events: the executor's tables of them and their driver calls.

use std::ptr;

use cudarc::driver::{result, sys};
use tracing::debug;
use vmcuda_wire::CudaStatus;

use super::super::{
    ExecEvent, ExecResult, ExecStream, StreamAttrValue, IPC_HANDLE_LEN, LEGACY_STREAM,
    PER_THREAD_STREAM, STREAM_ATTR_LEN,
};
use super::{check, status, CudaExecutor};
use crate::executor::StreamExec;

// The attribute value crosses as its bytes.
const _: () = assert!(std::mem::size_of::<sys::CUstreamAttrValue>() == STREAM_ATTR_LEN);

/// A launch attribute's value (`CUstreamAttrValue`, `CUkernelNodeAttrValue`: one
/// union) from its bytes.
pub(super) fn attr_value_from(bytes: &StreamAttrValue) -> sys::CUlaunchAttributeValue {
    // SAFETY: the union is plain data, valid zeroed.
    let mut v: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    // SAFETY: the union is exactly STREAM_ATTR_LEN bytes (asserted above) and `v` a
    // local of it.
    unsafe {
        ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (&mut v as *mut sys::CUlaunchAttributeValue).cast::<u8>(),
            STREAM_ATTR_LEN,
        )
    };
    v
}

/// The bytes of a launch attribute's value.
pub(super) fn attr_value_bytes(v: &sys::CUlaunchAttributeValue) -> StreamAttrValue {
    let mut out = [0u8; STREAM_ATTR_LEN];
    // SAFETY: `v` is STREAM_ATTR_LEN bytes of plain data.
    unsafe {
        ptr::copy_nonoverlapping(
            (v as *const sys::CUlaunchAttributeValue).cast::<u8>(),
            out.as_mut_ptr(),
            STREAM_ATTR_LEN,
        )
    };
    out
}

/// `CU_STREAM_PER_THREAD` (`(CUstream)0x2` in cuda.h).
const CU_STREAM_PER_THREAD: usize = 0x2;

/// The most streams kept for their work to finish before they are destroyed (see
/// `stream_destroy`); beyond it a busy stream is destroyed at once, as the driver
/// allows.
const MAX_DYING_STREAMS: usize = 64;

impl CudaExecutor {
    /// Destroy the streams of the current device that the guest destroyed while busy
    /// and whose work is now done.
    fn destroy_idle_streams(&mut self) {
        let idx = self.current;
        self.dying_streams.retain(|&(d, s)| {
            // SAFETY: a stream kept by stream_destroy, still undestroyed, of the
            // current device (bound by the caller).
            if d != idx || unsafe { sys::cuStreamQuery(s) } == sys::CUresult::CUDA_ERROR_NOT_READY {
                return true;
            }
            // SAFETY: as above; it leaves the list, so it is destroyed once.
            let _ = unsafe { result::stream::destroy(s) };
            false
        });
    }
}

impl CudaExecutor {
    /// The driver stream for an executor stream id.
    pub(super) fn stream(&self, id: ExecStream) -> ExecResult<sys::CUstream> {
        match id {
            LEGACY_STREAM => Ok(ptr::null_mut()),
            PER_THREAD_STREAM => Ok(CU_STREAM_PER_THREAD as sys::CUstream),
            _ if self.streams.contains_key(&id) => Ok(id as usize as sys::CUstream),
            _ => Err(CudaStatus::ErrorInvalidResourceHandle),
        }
    }

    pub(super) fn event(&self, id: ExecEvent) -> ExecResult<sys::CUevent> {
        if self.events.contains_key(&id) {
            Ok(id as usize as sys::CUevent)
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }
}

impl StreamExec for CudaExecutor {
    fn stream_create(&mut self, flags: u32, priority: i32) -> ExecResult<ExecStream> {
        let idx = self.bind()?;
        self.destroy_idle_streams();
        let mut s: sys::CUstream = ptr::null_mut();
        // SAFETY: out-pointer to a local; a context is current. Raw: the guest's flags
        // go to the driver as the integer they are.
        check(unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, priority) })?;
        let id = s as usize as ExecStream;
        self.streams.insert(id, idx);
        debug!(stream = id, device = idx, flags, priority, "stream created");
        Ok(id)
    }

    fn stream_destroy(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let Some(idx) = self.streams.remove(&stream) else {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        };
        debug!(stream, "stream destroyed");
        self.batch.forget_stream(stream);
        self.destroy_idle_streams();
        let s = stream as usize as sys::CUstream;
        // The driver gives a destroyed stream's resources to the next stream created,
        // even while the work in it still runs; that stream's work then queues behind
        // it. A thread that exits while its default stream still works (its stream goes
        // with it) would so hold up the next thread's. Such a stream is destroyed once
        // its work is done, up to a bound.
        // A stream in a capture holds no work, and asking it would end the capture
        // (cuStreamQuery is not allowed there): it goes at once.
        let mut capture = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: `s` was created by stream_create and has just left the table;
        // out-pointer to a local.
        let capturing = unsafe { sys::cuStreamIsCapturing(s, &mut capture) }
            == sys::CUresult::CUDA_SUCCESS
            && capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: as above.
        let busy =
            !capturing && unsafe { sys::cuStreamQuery(s) } == sys::CUresult::CUDA_ERROR_NOT_READY;
        if busy && self.dying_streams.len() < MAX_DYING_STREAMS {
            self.dying_streams.push((idx, s));
            return Ok(());
        }
        // SAFETY: as above; destroyed once (it is in neither list any more).
        unsafe { result::stream::destroy(s) }.map_err(status)
    }

    fn stream_synchronize(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        unsafe { result::stream::synchronize(s) }.map_err(status)
    }

    fn stream_query(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        // SAFETY: as above. CUDA_ERROR_NOT_READY maps to ErrorNotReady.
        check(unsafe { sys::cuStreamQuery(s) })
    }

    fn stream_wait_event(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
        flags: u32,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let e = self.event(event)?;
        // SAFETY: `s` and `e` are checked handles of this executor (or a default
        // stream). Raw: the guest's flags go to the driver as the integer they are.
        check(unsafe { sys::cuStreamWaitEvent(s, e, flags) })
    }

    fn stream_set_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let id =
            super::launch::launch_attribute_id_from(attr).ok_or(CudaStatus::ErrorInvalidValue)?;
        let v = attr_value_from(value);
        // SAFETY: `s` is a checked stream of this executor or a default stream; `id` a
        // valid attribute id; `v` a local the driver only reads.
        check(unsafe { sys::cuStreamSetAttribute(s, id, &v) })
    }

    fn stream_get_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
    ) -> ExecResult<StreamAttrValue> {
        self.bind()?;
        let s = self.stream(stream)?;
        let id =
            super::launch::launch_attribute_id_from(attr).ok_or(CudaStatus::ErrorInvalidValue)?;
        let mut v = attr_value_from(&[0; STREAM_ATTR_LEN]);
        // SAFETY: as in stream_set_attribute; the driver writes `v`.
        check(unsafe { sys::cuStreamGetAttribute(s, id, &mut v) })?;
        Ok(attr_value_bytes(&v))
    }

    fn stream_copy_attributes(&mut self, dst: ExecStream, src: ExecStream) -> ExecResult<()> {
        self.bind()?;
        let (d, s) = (self.stream(dst)?, self.stream(src)?);
        // SAFETY: both are checked streams of this executor or default streams.
        check(unsafe { sys::cuStreamCopyAttributes(d, s) })
    }

    fn event_create(&mut self, flags: u32) -> ExecResult<ExecEvent> {
        let idx = self.bind()?;
        let mut e: sys::CUevent = ptr::null_mut();
        // SAFETY: out-pointer to a local; a context is current. Raw: the guest's
        // flags may combine several `CUevent_flags`, which no one enum value is.
        check(unsafe { sys::cuEventCreate(&mut e, flags) })?;
        let id = e as usize as ExecEvent;
        self.events.insert(id, idx);
        debug!(event = id, device = idx, flags, "event created");
        Ok(id)
    }

    fn ipc_export_event(&mut self, event: ExecEvent) -> ExecResult<Vec<u8>> {
        self.bind()?;
        let e = self.event(event)?;
        let mut handle = sys::CUipcEventHandle {
            reserved: [0; IPC_HANDLE_LEN],
        };
        // SAFETY: out-pointer to a local handle; `e` is a checked event of this
        // executor (the driver refuses one made without CU_EVENT_INTERPROCESS).
        check(unsafe { sys::cuIpcGetEventHandle(&mut handle, e) })?;
        Ok(handle.reserved.iter().map(|&b| b as u8).collect())
    }

    fn ipc_open_event(&mut self, handle: &[u8]) -> ExecResult<ExecEvent> {
        let idx = self.bind()?;
        let handle = sys::CUipcEventHandle {
            reserved: super::memory::ipc_handle_bytes(handle)?,
        };
        let mut e: sys::CUevent = ptr::null_mut();
        // SAFETY: out-pointer to a local; the handle is another worker's driver's
        // (through the daemon, never from the guest), which the driver validates; a
        // context is current.
        check(unsafe { sys::cuIpcOpenEventHandle(&mut e, handle) })?;
        let id = e as usize as ExecEvent;
        self.events.insert(id, idx);
        debug!(event = id, device = idx, "interprocess event opened");
        Ok(id)
    }

    fn event_destroy(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        if self.events.remove(&event).is_none() {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // SAFETY: the event was created by event_create and is destroyed once (it
        // has just left the table).
        unsafe { result::event::destroy(event as usize as sys::CUevent) }.map_err(status)
    }

    fn event_record(&mut self, event: ExecEvent, stream: ExecStream, flags: u32) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        let s = self.stream(stream)?;
        // SAFETY: `e` and `s` are checked handles of this executor (or a default
        // stream).
        check(unsafe { sys::cuEventRecordWithFlags(e, s, flags) })
    }

    fn ctx_record_event(&mut self, event: ExecEvent) -> ExecResult<()> {
        let idx = self.bind()?;
        let ctx = self.context(idx)?;
        let e = self.event(event)?;
        // SAFETY: `ctx` is the primary context this executor holds for the device and
        // `e` a checked event of this executor.
        check(unsafe { sys::cuCtxRecordEvent(ctx, e) })
    }

    fn ctx_wait_event(&mut self, event: ExecEvent) -> ExecResult<()> {
        let idx = self.bind()?;
        let ctx = self.context(idx)?;
        let e = self.event(event)?;
        // SAFETY: as in `ctx_record_event`.
        check(unsafe { sys::cuCtxWaitEvent(ctx, e) })
    }

    fn event_synchronize(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        // SAFETY: `e` is a checked event of this executor.
        unsafe { result::event::synchronize(e) }.map_err(status)
    }

    fn event_query(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.bind()?;
        let e = self.event(event)?;
        // SAFETY: as above. CUDA_ERROR_NOT_READY maps to ErrorNotReady.
        unsafe { result::event::query(e) }.map_err(status)
    }

    fn event_elapsed_ms(&mut self, start: ExecEvent, end: ExecEvent) -> ExecResult<f32> {
        self.bind()?;
        let a = self.event(start)?;
        let b = self.event(end)?;
        // SAFETY: both events are checked events of this executor.
        unsafe { result::event::elapsed(a, b) }.map_err(status)
    }
}
