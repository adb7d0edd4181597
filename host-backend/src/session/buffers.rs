//! The worker's frame I/O buffers as the session sees them: the page-locked receive
//! buffers copies go straight from, the page-locked reply area large reads land in, and
//! the reused reply buffer. The reply buffers are counted against the VM's
//! `buffer_memory` in the connection's [`BufferBudget`], with the receive buffers: a
//! read that would go over it is refused with cudaErrorMemoryAllocation.

use tracing::{debug, warn};
use vmcuda_wire::CudaStatus;

use crate::ledger::LedgerAccount;
use crate::pinned::PageBuffer;

use super::Session;

/// What a connection's frame buffers (receive and reply) may hold: `limit` bytes,
/// shared with the VM's other connections through `account` when there is one. Its
/// one owner is the connection's session ([`Session::with_buffer_budget`]); what it
/// still holds when dropped is given back.
pub struct BufferBudget {
    limit: u64,
    held: u64,
    account: Option<LedgerAccount>,
}

impl BufferBudget {
    pub fn new(limit: u64, account: Option<LedgerAccount>) -> BufferBudget {
        BufferBudget {
            limit,
            held: 0,
            account,
        }
    }

    /// No limit, counted here only (tests, and sessions made without a grant's).
    pub fn unlimited() -> BufferBudget {
        BufferBudget::new(u64::MAX, None)
    }

    /// Take `bytes` more, unless that would go over the limit. An account that cannot
    /// be read refuses: the VM's limit cannot be shown to hold.
    pub(crate) fn take(&mut self, bytes: u64) -> bool {
        if self.held.checked_add(bytes).is_none_or(|h| h > self.limit) {
            return false;
        }
        if let Some(account) = &self.account {
            match account.charge(bytes, self.limit) {
                Ok(true) => {}
                Ok(false) => return false,
                Err(e) => {
                    warn!("{e}; frame buffer refused");
                    return false;
                }
            }
        }
        self.held += bytes;
        true
    }

    pub(crate) fn give_back(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
        if let Some(account) = &self.account {
            if let Err(e) = account.refund(bytes) {
                warn!("{e}");
            }
        }
    }

    /// What this connection's buffers hold now.
    pub fn held(&self) -> u64 {
        self.held
    }
}

impl Default for BufferBudget {
    fn default() -> BufferBudget {
        BufferBudget::unlimited()
    }
}

impl Drop for BufferBudget {
    fn drop(&mut self) {
        let held = self.held;
        self.give_back(held);
    }
}

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
    /// Bytes taken from `budget` for the reply buffer: at least the capacity of
    /// `spare`, or of the buffer out with the worker until it is recycled or dropped.
    spare_charged: u64,
    /// The worker's bulk buffers page-locked with the executor, so the GPU copies
    /// straight from them: (start, length) per slot.
    pub(super) pinned: [Option<(u64, u64)>; 3],
    /// Page-locked memory large device-to-host reads land in, sent from there; its
    /// length is taken from `budget` while it lives.
    pub(super) reply_area: Option<PageBuffer>,
    /// Set by a handler that left its reply data in `reply_area`: the length.
    pub(super) reply_in_area: Option<usize>,
    /// A synchronous copy queued from a receive buffer (that buffer), waited for
    /// before the next reply.
    pub(super) owed_copy: Option<usize>,
    /// What the connection's frame buffers, the worker's receive buffers and these
    /// reply buffers, may hold. Dropped after the buffers (field order), giving back
    /// whatever is still counted.
    budget: BufferBudget,
}

impl Session {
    /// Count this connection's frame buffers against `budget` (the VM's
    /// `buffer_memory`); unlimited otherwise.
    pub fn with_buffer_budget(mut self, budget: BufferBudget) -> Self {
        self.buffers.budget = budget;
        self
    }

    /// What the connection's frame buffers may hold, and hold now.
    pub fn buffer_budget(&self) -> &BufferBudget {
        &self.buffers.budget
    }

    /// Count `bytes` more of frame buffers against the VM's `buffer_memory` and its
    /// `host_memory`; false, and nothing counted, when either would be exceeded.
    pub(crate) fn take_buffer_bytes(&mut self, bytes: u64) -> bool {
        if self.accounts.host.charge(bytes, "frame buffer").is_err() {
            return false;
        }
        if !self.buffers.budget.take(bytes) {
            self.accounts.host.refund(bytes);
            return false;
        }
        true
    }

    /// Give back `bytes` of frame buffers to both.
    pub(crate) fn give_back_buffer_bytes(&mut self, bytes: u64) {
        self.buffers.budget.give_back(bytes);
        self.accounts.host.refund(bytes);
    }

    /// A reply buffer of exactly `len` bytes, reusing the last one's memory; refused
    /// when a larger one would take the VM over its `buffer_memory`.
    pub(super) fn reply_buffer(&mut self, len: usize) -> Result<Vec<u8>, CudaStatus> {
        let mut v = std::mem::take(&mut self.buffers.spare);
        if v.capacity() < len {
            // The old buffer goes, and its charge with it, before the larger one is
            // counted: the two are never held together.
            drop(v);
            let charged = std::mem::take(&mut self.buffers.spare_charged);
            self.give_back_buffer_bytes(charged);
            v = Vec::new();
            v.try_reserve_exact(len)
                .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
            let capacity = v.capacity() as u64;
            if !self.take_buffer_bytes(capacity) {
                debug!(
                    bytes = capacity,
                    held = self.buffers.budget.held(),
                    "reply refused: over the VM's buffer_memory"
                );
                return Err(CudaStatus::ErrorMemoryAllocation);
            }
            self.buffers.spare_charged = capacity;
        }
        v.resize(len, 0);
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
    /// be, for want of memory or of room in the budget (the caller then uses an
    /// ordinary reply buffer, which the budget refuses alike).
    pub(super) fn ensure_reply_area(&mut self, len: usize) -> bool {
        if self
            .buffers
            .reply_area
            .as_ref()
            .is_some_and(|a| a.len() >= len)
        {
            return true;
        }
        self.drop_reply_area();
        match PageBuffer::new(len) {
            Ok(area) if !self.take_buffer_bytes(area.len() as u64) => {
                debug!("no reply area: over the VM's buffer_memory");
                false
            }
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

    /// Unpin and free the reply area, giving its bytes back to the budget.
    fn drop_reply_area(&mut self) {
        self.unpin_buffer(REPLY_AREA);
        if let Some(area) = self.buffers.reply_area.take() {
            self.give_back_buffer_bytes(area.len() as u64);
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
            self.drop_reply_area();
        }
        if self.buffers.spare_charged > keep as u64 {
            self.buffers.spare = Vec::new();
            let charged = std::mem::take(&mut self.buffers.spare_charged);
            self.give_back_buffer_bytes(charged);
        }
    }

    /// Hand a written reply's buffer back for the next reply. Only a buffer the charge
    /// covers is kept (a handler's own reply data may be larger than anything counted).
    pub fn recycle(&mut self, data: Vec<u8>) {
        let capacity = data.capacity();
        if capacity > self.buffers.spare.capacity() && capacity as u64 <= self.buffers.spare_charged
        {
            self.buffers.spare = data;
        }
    }
}

#[cfg(test)]
mod tests {
    use vmcuda_wire::op::{CallContext, CopyOps, MemAlloc, MemcpyDtoH, MemoryOps, StreamHandle};

    use super::*;
    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::ledger::Ledger;
    use crate::policy::Grant;

    const CTX: CallContext = CallContext { device: 0 };

    fn session(budget: BufferBudget) -> Session {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        Session::new(Box::new(exec), Grant::unlimited("test")).with_buffer_budget(budget)
    }

    fn alloc(s: &mut Session, size: u64) -> u64 {
        let (allocated, _) = s.mem_alloc(&CTX, MemAlloc { size }, &[]).unwrap();
        allocated.ptr
    }

    /// A read of `size` bytes, sent on as the worker does: its bytes, from the reply
    /// area or the reply buffer, which is then recycled.
    fn read(s: &mut Session, src: u64, size: u64) -> Result<usize, CudaStatus> {
        let req = MemcpyDtoH {
            src,
            size,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        let ((), data) = s.memcpy_dtoh(&CTX, req, &[])?;
        match s.take_area_len() {
            Some(len) => {
                let (landed, bytes) = s.area_piece(0, len);
                landed?;
                Ok(bytes.len())
            }
            None => {
                let len = data.len();
                s.recycle(data);
                Ok(len)
            }
        }
    }

    /// Reply buffers draw on the connection's budget: a read over it is refused, one
    /// under it is counted, and trimming gives its bytes back.
    #[test]
    fn reads_are_counted_against_the_buffer_budget() {
        let mut s = session(BufferBudget::new(8 << 20, None));
        let dev = alloc(&mut s, 16 << 20);
        // Over the budget, through the reply area and through a reply buffer alike.
        assert_eq!(
            read(&mut s, dev, 12 << 20),
            Err(CudaStatus::ErrorMemoryAllocation)
        );
        assert_eq!(s.buffer_budget().held(), 0);
        // Large (reply area) and small (reply buffer) reads under it are counted.
        let large = (8 << 20) - (128 << 10);
        assert_eq!(read(&mut s, dev, large), Ok(large as usize));
        assert!(s.buffer_budget().held() >= large);
        assert_eq!(read(&mut s, dev, 4096), Ok(4096));
        assert!(s.buffer_budget().held() >= large + 4096);
        // Both together may not pass the budget: the area holds all but 128 KiB.
        let area = s.buffer_budget().held();
        assert_eq!(
            read(&mut s, dev, 200 << 10),
            Err(CudaStatus::ErrorMemoryAllocation)
        );
        assert!(s.buffer_budget().held() <= area);
        s.trim_reply_buffers(0);
        assert_eq!(s.buffer_budget().held(), 0);
        // With the area gone, the 12 MiB read is still over; 8 MiB fits exactly.
        assert_eq!(read(&mut s, dev, 8 << 20), Ok(8 << 20));
        s.trim_reply_buffers(0);
        assert_eq!(s.buffer_budget().held(), 0);
    }

    /// A reply's buffer the worker drops instead of recycling (a posted read) does not
    /// leave its charge behind, and handler data larger than the charge is not kept.
    #[test]
    fn dropped_and_foreign_reply_buffers_leave_no_charge() {
        let mut s = session(BufferBudget::new(1 << 20, None));
        let dev = alloc(&mut s, 1 << 20);
        for _ in 0..8 {
            let req = MemcpyDtoH {
                src: dev,
                size: 200 << 10,
                stream: StreamHandle::LEGACY,
                is_async: false,
            };
            let ((), data) = s.memcpy_dtoh(&CTX, req, &[]).unwrap();
            drop(data);
        }
        assert!(s.buffer_budget().held() <= 200 << 10);
        s.recycle(vec![0u8; 4 << 20]);
        assert!(s.buffers.spare.capacity() <= 200 << 10);
        s.trim_reply_buffers(0);
        assert_eq!(s.buffer_budget().held(), 0);
    }

    /// What a session's reply buffers hold is given back to the VM's ledger when the
    /// session ends, untrimmed.
    #[test]
    fn a_sessions_end_gives_its_reply_buffers_back_to_the_vm() {
        let dir = std::env::temp_dir().join(format!("vmcuda-reply-budget-{}", std::process::id()));
        let ledger = Ledger::join(&dir, "vm", 4).unwrap();
        let limit = 8 << 20;
        let mut s = session(BufferBudget::new(limit, Some(ledger.buffers())));
        let dev = alloc(&mut s, 8 << 20);
        assert_eq!(read(&mut s, dev, 6 << 20), Ok(6 << 20));
        assert_eq!(read(&mut s, dev, 64 << 10), Ok(64 << 10));
        // The VM's account holds them: the whole limit cannot be taken beside them.
        assert_eq!(ledger.buffers().charge(limit, limit).ok(), Some(false));
        drop(s);
        assert_eq!(ledger.buffers().charge(limit, limit).ok(), Some(true));
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
