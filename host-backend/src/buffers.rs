//! A worker's frame buffers: where each request's data lands, page-locked so the GPU
//! copies straight out of it, and what they may cost the host.
//!
//! Buffers up to [`KEEP`] bytes live on between frames (re-registering pages with the
//! driver costs more than the copy of a 4 MiB chunk). A larger frame gets a buffer of
//! its own that is let go as soon as that frame is done with. Every byte is counted
//! against the VM's `buffer_memory` ([`BufferBudget`], held by the session, which
//! counts its reply buffers there too), across its connections where the VM has a
//! ledger, and against its `host_memory` with everything else a worker keeps for its
//! guest (see `Session::take_buffer_bytes`); a frame that would go over either is read
//! and dropped, and its request answered with cudaErrorMemoryAllocation.

use vmcuda_wire::CudaStatus;

use crate::pinned::PageBuffer;
use crate::session::{Session, RECEIVE_BUFFER, RECEIVE_BUFFER_2};

/// Buffers this large or smaller are kept for the next frames; larger ones are freed
/// once their frame is done. Four times the guest's default copy chunk.
pub const KEEP: usize = 16 << 20;

/// The session's pin slots of the receive buffers, used in turn.
pub const RECEIVE_SLOTS: [usize; 2] = [RECEIVE_BUFFER, RECEIVE_BUFFER_2];

/// Receive buffers for the connection's life, used in turn by frames that carry data:
/// a host-to-device copy may still be reading one (see
/// [`crate::executor::Executor::copy_htod_queued`]) while the next frame arrives in
/// the other. Never zeroed (each frame's bytes overwrite what they use); each owns
/// whole pages, page-locked so the GPU copies straight out of them.
#[derive(Default)]
pub struct ReceiveBuffers {
    pages: [Option<PageBuffer>; 2],
    /// Index of the buffer the last frame with data used.
    last: usize,
}

impl ReceiveBuffers {
    /// The buffer the next frame's `len` data bytes go into, once no copy reads it: `None`
    /// when the session's buffer budget has no room for it. A failure of the copy that was reading it is
    /// owed to the guest's next call.
    pub fn next(
        &mut self,
        len: usize,
        session: &mut Session,
        deferred: &mut Option<CudaStatus>,
    ) -> std::io::Result<Option<&mut [u8]>> {
        if len == 0 {
            return Ok(Some(&mut []));
        }
        let i = (self.last + 1) % RECEIVE_SLOTS.len();
        self.last = i;
        let slot = RECEIVE_SLOTS[i];
        if let Err(status) = session.release_buffer(slot) {
            deferred.get_or_insert(status);
        }
        if self.pages[i].as_ref().is_none_or(|p| p.len() < len) {
            // Growing moves the buffer: page-lock it again where it now lives.
            self.free(i, session);
            let pages = PageBuffer::new(len)?;
            if !session.take_buffer_bytes(pages.len() as u64) {
                return Ok(None);
            }
            session.pin_buffer(slot, pages.start(), pages.len() as u64);
            self.pages[i] = Some(pages);
        }
        let pages = self.pages[i].as_mut().expect("sized above");
        Ok(Some(&mut pages.as_mut_slice()[..len]))
    }

    /// After a frame: let go of buffers larger than [`KEEP`], once no copy reads them.
    pub fn trim(&mut self, session: &mut Session, deferred: &mut Option<CudaStatus>) {
        for (i, slot) in RECEIVE_SLOTS.into_iter().enumerate() {
            if self.pages[i].as_ref().is_some_and(|p| p.len() > KEEP) {
                if let Err(status) = session.release_buffer(slot) {
                    deferred.get_or_insert(status);
                }
                self.free(i, session);
            }
        }
    }

    /// Free buffer `i` (unpinned first: the driver lets go of the pages before they
    /// are unmapped).
    fn free(&mut self, i: usize, session: &mut Session) {
        session.unpin_buffer(RECEIVE_SLOTS[i]);
        if let Some(pages) = self.pages[i].take() {
            session.give_back_buffer_bytes(pages.len() as u64);
        }
    }

    /// Free both buffers at the connection's end.
    pub fn release_all(&mut self, session: &mut Session) {
        for i in 0..RECEIVE_SLOTS.len() {
            self.free(i, session);
        }
    }

    /// Bytes the buffers hold now.
    pub fn held(&self) -> usize {
        self.pages.iter().flatten().map(PageBuffer::len).sum()
    }
}
