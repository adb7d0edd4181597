//! Streams and events on the host-memory test double: work completes in issue order,
//! so every stream is idle and every recorded event complete.

use std::time::Instant;

use vmcuda_wire::CudaStatus;

use super::super::{
    ExecEvent, ExecResult, ExecStream, StreamAttrValue, LEGACY_STREAM, PER_THREAD_STREAM,
    STREAM_ATTR_LEN,
};
use super::{Event, HostMemoryExecutor};
use crate::executor::StreamExec;

/// The attributes a stream has (`CUstreamAttrID`): access policy window,
/// synchronization policy, priority, memory synchronization domain map and domain.
const STREAM_ATTRIBUTES: [u32; 5] = [1, 3, 8, 9, 10];
const ATTR_PRIORITY: u32 = 8;
/// `cudaEventDisableTiming`, `cudaEventInterprocess`.
const EVENT_DISABLE_TIMING: u32 = 2;
const EVENT_INTERPROCESS: u32 = 4;

impl HostMemoryExecutor {
    pub(super) fn check_stream(&self, stream: ExecStream) -> ExecResult<()> {
        if stream == LEGACY_STREAM
            || stream == PER_THREAD_STREAM
            || self.streams.contains_key(&stream)
        {
            Ok(())
        } else {
            Err(CudaStatus::ErrorInvalidResourceHandle)
        }
    }
}

impl StreamExec for HostMemoryExecutor {
    fn stream_create(&mut self, flags: u32, priority: i32) -> ExecResult<ExecStream> {
        if flags > 1 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        // Priorities are clamped into the advertised range, as CUDA does.
        self.streams.insert(id, (flags, priority.clamp(-5, 0)));
        self.device_of.insert(id, self.current);
        Ok(id)
    }

    fn stream_destroy(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.device_of.remove(&stream);
        self.streams
            .remove(&stream)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn stream_synchronize(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)
    }

    fn stream_query(&mut self, stream: ExecStream) -> ExecResult<()> {
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)
    }

    fn stream_wait_event(
        &mut self,
        stream: ExecStream,
        event: ExecEvent,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if !self.events.contains_key(&event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.wait_event_in_capture(stream, event)
    }

    fn stream_set_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
        value: &StreamAttrValue,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if !STREAM_ATTRIBUTES.contains(&attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.stream_attributes.insert((stream, attr), *value);
        Ok(())
    }

    fn stream_get_attribute(
        &mut self,
        stream: ExecStream,
        attr: u32,
    ) -> ExecResult<StreamAttrValue> {
        self.check_stream(stream)?;
        if !STREAM_ATTRIBUTES.contains(&attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut value = self
            .stream_attributes
            .get(&(stream, attr))
            .copied()
            .unwrap_or([0; STREAM_ATTR_LEN]);
        if attr == ATTR_PRIORITY && !self.stream_attributes.contains_key(&(stream, attr)) {
            let priority = self.streams.get(&stream).map_or(0, |s| s.1);
            value[..4].copy_from_slice(&priority.to_le_bytes());
        }
        Ok(value)
    }

    fn stream_copy_attributes(&mut self, dst: ExecStream, src: ExecStream) -> ExecResult<()> {
        self.check_stream(dst)?;
        self.check_stream(src)?;
        let copied: Vec<_> = self
            .stream_attributes
            .iter()
            .filter(|((s, _), _)| *s == src)
            .map(|((_, a), v)| (*a, *v))
            .collect();
        for (attr, value) in copied {
            self.stream_attributes.insert((dst, attr), value);
        }
        Ok(())
    }

    fn event_create(&mut self, flags: u32) -> ExecResult<ExecEvent> {
        if flags & !0xf != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = self.fresh_id();
        self.device_of.insert(id, self.current);
        self.events.insert(
            id,
            Event {
                timing: flags & 2 == 0,
                recorded_at: None,
            },
        );
        Ok(id)
    }

    fn event_destroy(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.device_of.remove(&event);
        self.events
            .remove(&event)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn event_record(
        &mut self,
        event: ExecEvent,
        stream: ExecStream,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let e = self
            .events
            .get_mut(&event)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        e.recorded_at = Some(Instant::now());
        self.record_event_in_capture(event, stream);
        Ok(())
    }

    /// The double's work is done when it returns: the event is recorded now.
    fn ctx_record_event(&mut self, event: ExecEvent) -> ExecResult<()> {
        let e = self
            .events
            .get_mut(&event)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        e.recorded_at = Some(Instant::now());
        Ok(())
    }

    fn ctx_wait_event(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.event_synchronize(event)
    }

    fn event_synchronize(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.events
            .get(&event)
            .map(|_| ())
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    fn event_query(&mut self, event: ExecEvent) -> ExecResult<()> {
        self.event_synchronize(event)
    }

    fn ipc_export_event(&mut self, event: ExecEvent) -> ExecResult<Vec<u8>> {
        if !self.events.contains_key(&event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        let mut handle = vec![0u8; crate::executor::IPC_HANDLE_LEN];
        handle[..8].copy_from_slice(&event.to_le_bytes());
        Ok(handle)
    }

    fn ipc_open_event(&mut self, _handle: &[u8]) -> ExecResult<ExecEvent> {
        // Work here is done when it is issued, so the other process's event has
        // completed whenever this one is asked: an event of its flags stands for it.
        self.event_create(EVENT_DISABLE_TIMING | EVENT_INTERPROCESS)
    }

    fn event_elapsed_ms(&mut self, start: ExecEvent, end: ExecEvent) -> ExecResult<f32> {
        let (a, b) = match (self.events.get(&start), self.events.get(&end)) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(CudaStatus::ErrorInvalidResourceHandle),
        };
        if !a.timing || !b.timing {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        match (a.recorded_at, b.recorded_at) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f32() * 1000.0),
            _ => Err(CudaStatus::ErrorInvalidResourceHandle),
        }
    }
}
