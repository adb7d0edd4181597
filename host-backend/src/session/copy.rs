//! Copies and memsets: every range checked against the guest's own memory first.

use crate::executor::StreamOrder;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::accounting::pitched_extent;
use super::buffers::REPLY_AREA_MIN;
use super::graph::unassigned::Span;
use super::host_memory::GRAPH_NODE_BYTES;
use crate::executor::{DeviceRange, PitchedRange};
use crate::stats::Direction;

use super::{nothing, Session};

impl CopyOps for Session {
    fn peer_expect(
        &mut self,
        _: &CallContext,
        req: PeerExpect,
        _: &[u8],
    ) -> HandlerResult<PeerTicket> {
        Ok((self.peer_expect_now(req)?, Vec::new()))
    }

    fn peer_send(&mut self, _: &CallContext, req: PeerSend, _: &[u8]) -> HandlerResult<()> {
        self.peer_send_now(req)?;
        nothing()
    }

    fn peer_receive(&mut self, _: &CallContext, req: PeerReceive, _: &[u8]) -> HandlerResult<()> {
        self.peer_receive_now(req)?;
        nothing()
    }

    fn memcpy_htod(&mut self, _: &CallContext, req: MemcpyHtoD, data: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        let dst = self.check_range(req.dst, data.len() as u64)?;
        match self.receive_buffer_of(data) {
            // Straight from the worker's page-locked buffer, which the worker leaves
            // alone until the copy is done: it reads the next request meanwhile.
            Some(slot) => {
                self.exec
                    .copy_htod_queued(dst, data, StreamOrder::of(s, req.is_async), slot)?;
                if !req.is_async {
                    self.buffers.owed_copy = Some(slot);
                }
            }
            None => self
                .exec
                .copy_htod(dst, data, StreamOrder::of(s, req.is_async))?,
        }
        self.accounts
            .stats
            .copied(Direction::HostToDevice, data.len() as u64);
        nothing()
    }

    fn memcpy_dtoh(&mut self, _: &CallContext, req: MemcpyDtoH, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        if req.size > vmcuda_wire::frame::MAX_DATA_LEN {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let src = self.check_range(req.src, req.size)?;
        let size = req.size as usize;
        if size > REPLY_AREA_MIN {
            // Large reads land in the page-locked reply area by DMA, and the worker
            // sends them from there: no staging copy, no reply buffer.
            if self.ensure_reply_area(size) {
                let area = self.buffers.reply_area.as_mut().expect("ensured above");
                // The worker sends the first bytes while the rest are still arriving.
                self.exec.copy_dtoh_queued(
                    &mut area.as_mut_slice()[..size],
                    src,
                    StreamOrder::of(s, req.is_async),
                )?;
                self.buffers.reply_in_area = Some(size);
                self.accounts
                    .stats
                    .copied(Direction::DeviceToHost, req.size);
                return nothing();
            }
        }
        let mut out = self.reply_buffer(size)?;
        if let Err(e) = self
            .exec
            .copy_dtoh(&mut out, src, StreamOrder::of(s, req.is_async))
        {
            self.recycle(out);
            return Err(e);
        }
        self.accounts
            .stats
            .copied(Direction::DeviceToHost, req.size);
        Ok(((), out))
    }

    fn memcpy_dtod(&mut self, _: &CallContext, req: MemcpyDtoD, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let dst = self.check_range(req.dst, req.size)?;
        let src = self.check_range(req.src, req.size)?;
        let graph = self.captured_node(s, GRAPH_NODE_BYTES)?;
        let r = self
            .exec
            .copy_dtod(dst, src, StreamOrder::of(s, req.is_async));
        self.node_made(graph, r)?;
        self.accounts
            .stats
            .copied(Direction::DeviceToDevice, req.size);
        nothing()
    }

    fn memcpy_2d_htod(
        &mut self,
        _: &CallContext,
        req: Memcpy2DHtoD,
        data: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        if req.width.checked_mul(req.height) != Some(data.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let dst = self.check_pitched(req.dst, req.dpitch, req.width, req.height)?;
        self.exec
            .copy_2d_htod(dst, data, StreamOrder::of(s, req.is_async))?;
        self.accounts
            .stats
            .copied(Direction::HostToDevice, data.len() as u64);
        nothing()
    }

    fn memcpy_2d_dtoh(
        &mut self,
        _: &CallContext,
        req: Memcpy2DDtoH,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        self.refuse_if_capturing(s)?;
        let len = req
            .width
            .checked_mul(req.height)
            .filter(|l| *l <= vmcuda_wire::frame::MAX_DATA_LEN)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let src = self.check_pitched(req.src, req.spitch, req.width, req.height)?;
        let mut out = self.reply_buffer(len as usize)?;
        let r = self
            .exec
            .copy_2d_dtoh(&mut out, src, StreamOrder::of(s, req.is_async));
        if let Err(e) = r {
            self.recycle(out);
            return Err(e);
        }
        self.accounts.stats.copied(Direction::DeviceToHost, len);
        Ok(((), out))
    }

    fn memcpy_2d_dtod(
        &mut self,
        _: &CallContext,
        req: Memcpy2DDtoD,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let dst = self.check_pitched(req.dst, req.dpitch, req.width, req.height)?;
        let src = self.check_pitched(req.src, req.spitch, req.width, req.height)?;
        let graph = self.captured_node(s, GRAPH_NODE_BYTES)?;
        let r = self
            .exec
            .copy_2d_dtod(dst, src, StreamOrder::of(s, req.is_async));
        self.node_made(graph, r)?;
        self.accounts.stats.copied(
            Direction::DeviceToDevice,
            req.width.saturating_mul(req.height),
        );
        nothing()
    }

    fn memset(&mut self, _: &CallContext, req: Memset, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let span = Span {
            ptr: req.dst,
            len: req.size,
        };
        // Unassigned: into a capture only, checked when its graph is instantiated.
        let unassigned = self.check_memset(s, span)?;
        let dst = DeviceRange::new(req.dst, req.size);
        let graph = self.captured_node(s, GRAPH_NODE_BYTES)?;
        let r = self
            .exec
            .memset(dst, req.value, StreamOrder::of(s, req.is_async));
        self.node_made(graph, r)?;
        if unassigned {
            self.memset_captured_unassigned(s, span);
        }
        nothing()
    }

    fn memset_2d(&mut self, _: &CallContext, req: Memset2D, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let span =
            pitched_extent(req.pitch, req.width, req.height)?.map(|len| Span { ptr: req.dst, len });
        // Unassigned: into a capture only, checked when its graph is instantiated.
        let unassigned = match span {
            Some(span) => self.check_memset(s, span)?,
            None => false,
        };
        let dst = PitchedRange::new(req.dst, req.pitch, req.width, req.height);
        let graph = self.captured_node(s, GRAPH_NODE_BYTES)?;
        let r = self
            .exec
            .memset_2d(dst, req.value, StreamOrder::of(s, req.is_async));
        self.node_made(graph, r)?;
        if let (true, Some(span)) = (unassigned, span) {
            self.memset_captured_unassigned(s, span);
        }
        nothing()
    }

    fn memcpy_peer(&mut self, ctx: &CallContext, req: MemcpyPeer, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        let dst = self.check_range(req.dst, req.size)?;
        let src = self.check_range(req.src, req.size)?;
        let r = self.exec.copy_peer(
            dst,
            req.dst_device,
            src,
            req.src_device,
            StreamOrder::of(s, req.is_async),
        );
        self.exec.set_device(ctx.device)?;
        r?;
        self.accounts
            .stats
            .copied(Direction::DeviceToDevice, req.size);
        nothing()
    }

    fn memcpy_shared(&mut self, _: &CallContext, req: MemcpyShared, _: &[u8]) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        // The host side must be shared guest memory mapped here, the device side the
        // guest's own memory: a copy naming anything else is never executed.
        let here = self.shared_here(req.host, req.size)?;
        let device = self.check_range(req.device, req.size)?;
        // The guest's word must be its own shared memory, checked before anything runs.
        if let Some(done) = req.done {
            self.check_range(done.addr, 4)?;
        }
        self.exec.copy_registered(
            device,
            here,
            req.to_device,
            StreamOrder::of(s, req.is_async),
        )?;
        if let Some(done) = req.done {
            // In stream order after the copy: the guest watching the word sees the copy
            // done (a copy that failed above writes none).
            self.exec
                .stream_write_value32(s, done.addr, done.value, 0)?;
        }
        let direction = if req.to_device {
            Direction::HostToDevice
        } else {
            Direction::DeviceToHost
        };
        self.accounts.stats.copied(direction, req.size);
        nothing()
    }

    fn memset_elements(
        &mut self,
        _: &CallContext,
        req: MemsetElements,
        _: &[u8],
    ) -> HandlerResult<()> {
        let bytes = req.byte_len().ok_or(CudaStatus::ErrorInvalidValue)?;
        let stream = self.handles.stream(req.stream)?;
        let span = Span {
            ptr: req.dst,
            len: bytes,
        };
        // Unassigned: into a capture only, checked when its graph is instantiated.
        let unassigned = self.check_memset(stream, span)?;
        let graph = self.captured_node(stream, GRAPH_NODE_BYTES)?;
        let r = self.exec.memset_elements(
            req.dst,
            req.value,
            req.element_size,
            req.count,
            StreamOrder::of(stream, req.is_async),
        );
        self.node_made(graph, r)?;
        if unassigned {
            self.memset_captured_unassigned(stream, span);
        }
        nothing()
    }
}
