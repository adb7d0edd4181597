//! The guest's handle tables: its streams and events (named by the guest), modules
//! and functions (named here), each mapped onto the executor's own ids. A guest can
//! only ever name what its own connection made.

use std::collections::HashMap;

use vmcuda_wire::op::{
    EventHandle, FunctionHandle, ModuleHandle, StreamHandle, HANDLE_SPACE_SHIFT,
};
use vmcuda_wire::CudaStatus;

use crate::executor::{
    ExecEvent, ExecFunction, ExecModule, ExecStream, LEGACY_STREAM, PER_THREAD_STREAM,
};

#[derive(Default)]
pub(super) struct Handles {
    pub(super) streams: HashMap<StreamHandle, ExecStream>,
    pub(super) events: HashMap<EventHandle, ExecEvent>,
    pub(super) modules: HashMap<ModuleHandle, ExecModule>,
    pub(super) functions: HashMap<FunctionHandle, ExecFunction>,
    /// The other way: one handle per executor function, found without a scan (cuDNN
    /// looks up thousands of functions).
    function_handles: HashMap<ExecFunction, FunctionHandle>,
    /// The device each stream and event was made on (a device reset destroys those of
    /// its device only).
    pub(super) stream_device: HashMap<StreamHandle, i32>,
    pub(super) event_device: HashMap<EventHandle, i32>,
    next_handle: u64,
}

impl Handles {
    /// A handle this session has never handed out.
    pub(super) fn fresh(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    /// Make later handles in host `host`'s space (a guest of several hosts): they
    /// carry the number in their top byte. Never goes back over handles handed out.
    pub(super) fn use_space(&mut self, host: u8) {
        let start = u64::from(host) << HANDLE_SPACE_SHIFT;
        self.next_handle = self.next_handle.max(start);
    }

    /// Forget the streams and events made on `device` (it was reset).
    pub(super) fn forget_device(&mut self, device: i32) {
        let on = |d: &i32| *d == device;
        let streams = &mut self.streams;
        self.stream_device.retain(|s, d| {
            if on(d) {
                streams.remove(s);
            }
            !on(d)
        });
        let events = &mut self.events;
        self.event_device.retain(|e, d| {
            if on(d) {
                events.remove(e);
            }
            !on(d)
        });
    }

    pub(super) fn stream(&self, s: StreamHandle) -> Result<ExecStream, CudaStatus> {
        if s == StreamHandle::LEGACY {
            return Ok(LEGACY_STREAM);
        }
        if s == StreamHandle::PER_THREAD {
            return Ok(PER_THREAD_STREAM);
        }
        self.streams
            .get(&s)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    pub(super) fn event(&self, e: EventHandle) -> Result<ExecEvent, CudaStatus> {
        self.events
            .get(&e)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    pub(super) fn module(&self, m: ModuleHandle) -> Result<ExecModule, CudaStatus> {
        self.modules
            .get(&m)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)
    }

    /// The handle of executor function `f`, made on first sight.
    pub(super) fn name_function(&mut self, f: ExecFunction) -> FunctionHandle {
        if let Some(h) = self.function_handles.get(&f) {
            return *h;
        }
        let h = FunctionHandle(self.fresh());
        self.functions.insert(h, f);
        self.function_handles.insert(f, h);
        h
    }

    pub(super) fn function(&self, f: FunctionHandle) -> Result<ExecFunction, CudaStatus> {
        self.functions
            .get(&f)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }
}
