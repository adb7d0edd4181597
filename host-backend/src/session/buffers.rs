//! The worker's frame I/O buffers as the session sees them: the page-locked receive
//! buffers copies go straight from, the page-locked reply area large reads land in, and
//! the reused reply buffer.

use tracing::debug;
use vmcuda_wire::CudaStatus;

use crate::pinned::PageBuffer;

use super::Session;

/// The slots of [`Session::pin_buffer`]: the worker's receive buffers, the reply area.
pub const RECEIVE_BUFFER: usize = 0;
pub(super) const REPLY_AREA: usize = 1;
pub const RECEIVE_BUFFER_2: usize = 2;
const RECEIVE_BUFFERS: [usize; 2] = [RECEIVE_BUFFER, RECEIVE_BUFFER_2];
/// Reads at most this large use ordinary reply buffers (the driver's own path is as
/// fast for them).
pub(super) const REPLY_AREA_MIN: usize = 256 << 10;

#[derive(Default)]
pub(super) struct FrameBuffers {
    /// The last reply's data buffer, reused so bulk copies do not fault in fresh memory
    /// for every chunk.
    pub(super) spare: Vec<u8>,
    /// The worker's bulk buffers page-locked with the executor, so the GPU copies
    /// straight from them: (start, length) per slot.
    pub(super) pinned: [Option<(u64, u64)>; 3],
    /// Page-locked memory large device-to-host reads land in, sent from there.
    pub(super) reply_area: Option<PageBuffer>,
    /// Set by a handler that left its reply data in `reply_area`: the length.
    pub(super) reply_in_area: Option<usize>,
    /// A synchronous copy queued from a receive buffer (that buffer), waited for
    /// before the next reply.
    pub(super) owed_copy: Option<usize>,
}

impl Session {
    /// A reply buffer of exactly `len` bytes, reusing the last one's memory.
    pub(super) fn reply_buffer(&mut self, len: usize) -> Result<Vec<u8>, CudaStatus> {
        let mut v = std::mem::take(&mut self.buffers.spare);
        if v.len() < len {
            v.try_reserve_exact(len - v.len())
                .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
            v.resize(len, 0);
        }
        v.truncate(len);
        Ok(v)
    }

    /// Page-lock `[start, start + len)`, whole pages of a bulk buffer that lives on (see
    /// `pinned`). The range must lie inside one allocation of the caller's: the driver
    /// refuses copies that straddle the edge of a registered range, so registering a
    /// neighbour's bytes would break the neighbour's copies. Best effort: when the
    /// executor cannot, copies are staged as before.
    pub fn pin_buffer(&mut self, slot: usize, start: u64, len: u64) {
        self.unpin_buffer(slot);
        if len == 0 {
            return;
        }
        match self.exec.host_register(start, len) {
            Ok(_) => self.buffers.pinned[slot] = Some((start, len)),
            Err(e) => debug!("bulk buffer not page-locked ({e}); copies are staged"),
        }
    }

    /// Undo [`Session::pin_buffer`] before the buffer is freed or moved.
    pub fn unpin_buffer(&mut self, slot: usize) {
        // No copy may still be using the pages.
        let _ = self.release_buffer(slot);
        if slot == REPLY_AREA {
            let _ = self.exec.dtoh_landed(usize::MAX);
        }
        if let Some((start, _)) = self.buffers.pinned[slot].take() {
            let _ = self.exec.host_unregister(start);
        }
    }

    /// Make the page-locked reply area hold at least `len` bytes; false when it cannot
    /// be (the caller then uses an ordinary reply buffer).
    pub(super) fn ensure_reply_area(&mut self, len: usize) -> bool {
        if self
            .buffers
            .reply_area
            .as_ref()
            .is_some_and(|a| a.len() >= len)
        {
            return true;
        }
        self.unpin_buffer(REPLY_AREA);
        self.buffers.reply_area = None;
        match PageBuffer::new(len) {
            Ok(area) => {
                self.pin_buffer(REPLY_AREA, area.start(), area.len() as u64);
                let pinned = self.buffers.pinned[REPLY_AREA].is_some();
                self.buffers.reply_area = Some(area);
                pinned
            }
            Err(e) => {
                debug!("no reply area ({e}); replies use ordinary buffers");
                false
            }
        }
    }

    /// The page-locked receive buffer `data` lies in, if it does.
    pub(super) fn receive_buffer_of(&self, data: &[u8]) -> Option<usize> {
        let (start, end) = (
            data.as_ptr() as u64,
            data.as_ptr() as u64 + data.len() as u64,
        );
        RECEIVE_BUFFERS.into_iter().find(|&slot| {
            self.buffers.pinned[slot].is_some_and(|(s, len)| start >= s && end <= s + len)
        })
    }

    /// Wait until no queued copy reads buffer `slot`, before the worker writes into it.
    pub fn release_buffer(&mut self, slot: usize) -> Result<(), CudaStatus> {
        if self.buffers.owed_copy == Some(slot) {
            self.buffers.owed_copy = None;
        }
        self.exec.release_buffer(slot)
    }

    /// Before a reply: wait for the synchronous copy queued by a request, if one is
    /// owed (its bytes must be in place when the guest's `cudaMemcpy` returns).
    pub fn finish_owed_copy(&mut self) -> Result<(), CudaStatus> {
        match self.buffers.owed_copy.take() {
            Some(slot) => self.exec.release_buffer(slot),
            None => Ok(()),
        }
    }

    /// The length of the reply the last handler is leaving in the reply area, if it is
    /// (see [`Session::area_piece`]); the area is the reply's until the next request.
    pub fn take_area_len(&mut self) -> Option<usize> {
        self.buffers.reply_in_area.take()
    }

    /// Bytes `[start, end)` of the reply area (within the length
    /// [`Session::take_area_len`] gave), after waiting for the copy to put them there:
    /// the wait's outcome, and the bytes, which are sent even when it failed (the
    /// guest expects that many).
    pub fn area_piece(&mut self, start: usize, end: usize) -> (Result<(), CudaStatus>, &[u8]) {
        let landed = self.exec.dtoh_landed(end);
        let bytes = self
            .buffers
            .reply_area
            .as_ref()
            .and_then(|a| a.as_slice().get(start..end))
            .unwrap_or_default();
        (landed, bytes)
    }

    /// Let go of reply buffers larger than `keep` bytes (the reply area unpinned first),
    /// so that one large read does not hold its memory for the connection's life.
    pub fn trim_reply_buffers(&mut self, keep: usize) {
        if self
            .buffers
            .reply_area
            .as_ref()
            .is_some_and(|a| a.len() > keep)
        {
            self.unpin_buffer(REPLY_AREA);
            self.buffers.reply_area = None;
        }
        if self.buffers.spare.capacity() > keep {
            self.buffers.spare = Vec::new();
        }
    }

    /// Hand a written reply's buffer back for the next reply.
    pub fn recycle(&mut self, data: Vec<u8>) {
        if data.capacity() > self.buffers.spare.capacity() {
            self.buffers.spare = data;
        }
    }
}
