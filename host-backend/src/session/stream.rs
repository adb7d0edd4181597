//! Streams and events, named by the guest and mapped here onto the executor's.

use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::{nothing, Session};
use crate::executor::StreamAttrValue;

/// `cudaStreamAttributeAccessPolicyWindow`: its value starts with a device address and
/// a length.
const ATTR_ACCESS_POLICY_WINDOW: u32 = 1;

impl Session {
    /// A launch attribute's value from the guest (a stream's or a kernel node's): its
    /// exact size, and an access policy window, which names device memory, only over
    /// the guest's own.
    pub(super) fn checked_attr_value(
        &self,
        attr: u32,
        bytes: &[u8],
    ) -> Result<StreamAttrValue, CudaStatus> {
        let value: StreamAttrValue = bytes
            .try_into()
            .map_err(|_| CudaStatus::ErrorInvalidValue)?;
        self.check_access_window(attr, &value)?;
        Ok(value)
    }

    /// An access policy window among launch attributes (a stream's, a kernel node's, a
    /// launch's own) only over the guest's own memory. A launch's value may be shorter
    /// than CUDA's union: what it leaves out is zero.
    pub(super) fn check_access_window(&self, attr: u32, value: &[u8]) -> Result<(), CudaStatus> {
        if attr != ATTR_ACCESS_POLICY_WINDOW {
            return Ok(());
        }
        let word = |at: usize| {
            let mut bytes = [0u8; 8];
            let have = value.get(at..).unwrap_or(&[]);
            let n = have.len().min(8);
            bytes[..n].copy_from_slice(&have[..n]);
            u64::from_le_bytes(bytes)
        };
        let (base, len) = (word(0), word(8));
        if len > 0 {
            self.check_range(base, len)?;
        }
        Ok(())
    }
}

impl StreamOps for Session {
    fn stream_create(
        &mut self,
        ctx: &CallContext,
        req: StreamCreate,
        _: &[u8],
    ) -> HandlerResult<()> {
        if req.stream.is_default()
            || req.stream.0 == 1
            || self.handles.streams.contains_key(&req.stream)
        {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.accounts
            .check_count("stream", self.handles.streams.len(), self.grant.max_streams)?;
        let s = self.exec.stream_create(req.flags, req.priority)?;
        self.handles.streams.insert(req.stream, s);
        self.handles.stream_device.insert(req.stream, ctx.device);
        nothing()
    }

    fn stream_destroy(
        &mut self,
        ctx: &CallContext,
        req: StreamDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self
            .handles
            .streams
            .remove(&req.stream)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        self.handles.stream_device.remove(&req.stream);
        // A capture begun on the stream goes with it, and its graph's memory too.
        if self.exec.stream_capturing(s).unwrap_or(false) {
            self.abandon_capture(Some(ctx.device), s);
        }
        self.exec.stream_destroy(s)?;
        nothing()
    }

    fn stream_synchronize(
        &mut self,
        _: &CallContext,
        req: StreamSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.exec.stream_synchronize(s)?;
        nothing()
    }

    fn stream_query(&mut self, _: &CallContext, req: StreamQuery, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.exec.stream_query(s)?;
        nothing()
    }

    fn stream_wait_event(
        &mut self,
        _: &CallContext,
        req: StreamWaitEvent,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let e = self.handles.event(req.event)?;
        self.exec.stream_wait_event(s, e, req.flags)?;
        nothing()
    }

    fn stream_set_attribute(
        &mut self,
        _: &CallContext,
        req: StreamSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let value = self.checked_attr_value(req.attr, &req.value)?;
        self.exec.stream_set_attribute(s, req.attr, &value)?;
        nothing()
    }

    fn stream_get_attribute(
        &mut self,
        _: &CallContext,
        req: StreamGetAttribute,
        _: &[u8],
    ) -> HandlerResult<StreamAttribute> {
        let s = self.handles.stream(req.stream)?;
        let value = self.exec.stream_get_attribute(s, req.attr)?;
        Ok((
            StreamAttribute {
                value: value.to_vec(),
            },
            Vec::new(),
        ))
    }

    fn stream_copy_attributes(
        &mut self,
        _: &CallContext,
        req: StreamCopyAttributes,
        _: &[u8],
    ) -> HandlerResult<()> {
        let dst = self.handles.stream(req.dst)?;
        let src = self.handles.stream(req.src)?;
        self.exec.stream_copy_attributes(dst, src)?;
        nothing()
    }

    fn event_create(&mut self, ctx: &CallContext, req: EventCreate, _: &[u8]) -> HandlerResult<()> {
        if req.event.0 == 0 || self.handles.events.contains_key(&req.event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.accounts
            .check_count("event", self.handles.events.len(), self.grant.max_events)?;
        let e = self.exec.event_create(req.flags)?;
        self.handles.events.insert(req.event, e);
        self.handles.event_device.insert(req.event, ctx.device);
        if req.flags & super::ipc::EVENT_INTERPROCESS != 0 {
            self.ipc.interprocess_events.insert(req.event);
        }
        nothing()
    }

    fn ipc_get_event_handle(
        &mut self,
        _: &CallContext,
        req: IpcGetEventHandle,
        _: &[u8],
    ) -> HandlerResult<IpcToken> {
        let token = self.ipc_get_event_handle_now(req)?;
        Ok((IpcToken { token }, Vec::new()))
    }

    fn ipc_open_event_handle(
        &mut self,
        ctx: &CallContext,
        req: IpcOpenEventHandle,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.ipc_open_event_handle_now(ctx.device, req)?;
        nothing()
    }

    fn event_destroy(&mut self, _: &CallContext, req: EventDestroy, _: &[u8]) -> HandlerResult<()> {
        let e = self
            .handles
            .events
            .remove(&req.event)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        self.handles.event_device.remove(&req.event);
        self.ipc_withdraw_event(req.event);
        self.exec.event_destroy(e)?;
        nothing()
    }

    fn event_record(&mut self, _: &CallContext, req: EventRecord, _: &[u8]) -> HandlerResult<()> {
        let e = self.handles.event(req.event)?;
        let s = self.handles.stream(req.stream)?;
        self.exec.event_record(e, s, req.flags)?;
        nothing()
    }

    /// The event must be the context's (its device's), as the driver requires.
    fn ctx_record_event(
        &mut self,
        ctx: &CallContext,
        req: CtxRecordEvent,
        _: &[u8],
    ) -> HandlerResult<()> {
        let e = self.context_event(ctx, req.event)?;
        self.exec.ctx_record_event(e)?;
        nothing()
    }

    fn ctx_wait_event(
        &mut self,
        ctx: &CallContext,
        req: CtxWaitEvent,
        _: &[u8],
    ) -> HandlerResult<()> {
        let e = self.context_event(ctx, req.event)?;
        self.exec.ctx_wait_event(e)?;
        nothing()
    }

    fn event_synchronize(
        &mut self,
        _: &CallContext,
        req: EventSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        let e = self.handles.event(req.event)?;
        self.exec.event_synchronize(e)?;
        nothing()
    }

    fn event_query(&mut self, _: &CallContext, req: EventQuery, _: &[u8]) -> HandlerResult<()> {
        let e = self.handles.event(req.event)?;
        self.exec.event_query(e)?;
        nothing()
    }

    fn event_elapsed_time(
        &mut self,
        _: &CallContext,
        req: EventElapsedTime,
        _: &[u8],
    ) -> HandlerResult<ElapsedTime> {
        let a = self.handles.event(req.start)?;
        let b = self.handles.event(req.end)?;
        Ok((
            ElapsedTime {
                ms: self.exec.event_elapsed_ms(a, b)?,
            },
            Vec::new(),
        ))
    }

    fn stream_write_value32(
        &mut self,
        _: &CallContext,
        req: StreamWriteValue32,
        _: &[u8],
    ) -> HandlerResult<()> {
        let stream = self.handles.stream(req.stream)?;
        self.check_range(req.addr, 4)?;
        self.exec
            .stream_write_value32(stream, req.addr, req.value, req.flags)?;
        nothing()
    }

    fn stream_write_value64(
        &mut self,
        _: &CallContext,
        req: StreamWriteValue64,
        _: &[u8],
    ) -> HandlerResult<()> {
        let stream = self.handles.stream(req.stream)?;
        // CU_STREAM_WRITE_VALUE_DEFAULT or _NO_MEMORY_BARRIER; 8-byte aligned.
        if req.flags & !1 != 0 || !req.addr.is_multiple_of(8) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_range(req.addr, 8)?;
        self.exec
            .stream_write_value64(stream, req.addr, req.value, req.flags)?;
        nothing()
    }

    fn stream_wait_value(
        &mut self,
        _: &CallContext,
        req: StreamWaitValue,
        _: &[u8],
    ) -> HandlerResult<()> {
        let stream = self.handles.stream(req.stream)?;
        let width = u64::from(req.width);
        if !matches!(req.width, 4 | 8)
            || !req.addr.is_multiple_of(width)
            || !vmcuda_wire::driver::wait_value::valid(req.flags)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.check_range(req.addr, width)?;
        self.exec
            .stream_wait_value(stream, req.addr, req.value, req.width, req.flags)?;
        nothing()
    }

    /// Every buffer of every decompression inside the guest's memory, with its size
    /// (the output's too: the driver takes it as a hint only, so a guest that names
    /// none is refused rather than trusted), and the batch bounded.
    fn mem_batch_decompress(
        &mut self,
        _: &CallContext,
        req: MemBatchDecompress,
        _: &[u8],
    ) -> HandlerResult<DecompressAnswer> {
        let stream = self.handles.stream(req.stream)?;
        if req.flags != 0
            || req.ops.is_empty()
            || req.ops.len() > vmcuda_wire::driver::MAX_DECOMPRESS_OPS
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        for op in &req.ops {
            if op.src_bytes == 0 || op.dst_bytes == 0 {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            self.check_range(op.src, op.src_bytes)?;
            self.check_range(op.dst, op.dst_bytes)?;
            self.check_range(op.dst_act_bytes, 4)?;
        }
        let (status, error_index) = self.exec.mem_batch_decompress(stream, &req.ops)?;
        Ok((
            DecompressAnswer {
                status: status.0,
                error_index,
            },
            Vec::new(),
        ))
    }

    /// Every operation checked as its single call is (words inside the guest's memory,
    /// aligned, with valid flags), and the batch's size bounded, before any reaches
    /// the executor.
    fn stream_batch_mem_op(
        &mut self,
        _: &CallContext,
        req: StreamBatchMemOp,
        _: &[u8],
    ) -> HandlerResult<()> {
        let stream = self.handles.stream(req.stream)?;
        if req.flags != 0
            || req.ops.len() > vmcuda_wire::driver::mem_op::MAX_COUNT
            || !req.ops.iter().all(vmcuda_wire::driver::MemOp::is_valid)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        for (addr, len) in req.ops.iter().filter_map(vmcuda_wire::driver::MemOp::word) {
            self.check_range(addr, len)?;
        }
        self.exec.stream_batch_mem_op(stream, &req.ops)?;
        nothing()
    }
}

impl Session {
    /// Event `event` of the calling thread's current device: another device's is
    /// `cudaErrorInvalidResourceHandle` (`CUDA_ERROR_INVALID_HANDLE`), as the driver
    /// answers for an event of another context.
    fn context_event(
        &self,
        ctx: &CallContext,
        event: EventHandle,
    ) -> Result<crate::executor::ExecEvent, CudaStatus> {
        let e = self.handles.event(event)?;
        match self.handles.event_device.get(&event) {
            Some(d) if *d != ctx.device => Err(CudaStatus::ErrorInvalidResourceHandle),
            _ => Ok(e),
        }
    }
}
