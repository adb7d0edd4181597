//! Copies between this host's devices and another host's, over the daemon's peer link
//! (see [`crate::peer`]): the guest's memory checked as for any copy, then moved a
//! chunk at a time between the device and the broker socket, in the device's legacy
//! stream order.

use crate::executor::StreamOrder;
use tracing::warn;
use vmcuda_wire::op::{PeerExpect, PeerReceive, PeerSend, PeerTicket, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::Session;
use crate::peer::{LinkError, PeerLink};
use crate::stats::Direction;

impl Session {
    fn link(&mut self) -> Result<&mut PeerLink, CudaStatus> {
        self.peer.as_mut().ok_or(CudaStatus::ErrorNotSupported)
    }

    /// A failed transfer's status for the guest; a broken socket ends the link.
    fn link_failed(&mut self, what: &str, e: LinkError) -> CudaStatus {
        warn!(client = %self.client, "peer {what} failed: {e}");
        if matches!(e, LinkError::Link(_)) {
            self.peer = None;
        }
        e.status()
    }

    pub(super) fn peer_expect_now(&mut self, req: PeerExpect) -> Result<PeerTicket, CudaStatus> {
        self.link()?;
        self.check_range(req.dst, req.size)?;
        match self.link()?.expect(req.size) {
            Ok((ticket, endpoint)) => Ok(PeerTicket { ticket, endpoint }),
            Err(e) => Err(self.link_failed("expect", e)),
        }
    }

    pub(super) fn peer_send_now(&mut self, req: PeerSend) -> Result<(), CudaStatus> {
        self.link()?;
        // Nothing to send: the guest asks whether this host has the link (and collects
        // the errors its posted calls owe) with this.
        if req.size == 0 {
            return Ok(());
        }
        self.check_range(req.src, req.size)?;
        let stream = self.handles.stream(StreamHandle::LEGACY)?;
        let mut link = self.peer.take().expect("checked above");
        let result = link.send(req.ticket, req.size, &req.endpoint, |offset, chunk| {
            let range = self.check_range(req.src + offset, chunk.len() as u64)?;
            self.exec
                .copy_dtoh(chunk, range, StreamOrder::Waited(stream))
        });
        self.peer = Some(link);
        match result {
            Ok(()) => {
                self.accounts
                    .stats
                    .copied(Direction::DeviceToHost, req.size);
                Ok(())
            }
            Err(e) => Err(self.link_failed("send", e)),
        }
    }

    pub(super) fn peer_receive_now(&mut self, req: PeerReceive) -> Result<(), CudaStatus> {
        self.link()?;
        self.check_range(req.dst, req.size)?;
        let stream = self.handles.stream(StreamHandle::LEGACY)?;
        let mut link = self.peer.take().expect("checked above");
        let result = link.receive(req.ticket, req.size, |offset, chunk| {
            let range = self.check_range(req.dst + offset, chunk.len() as u64)?;
            self.exec
                .copy_htod(range, chunk, StreamOrder::Waited(stream))
        });
        self.peer = Some(link);
        match result {
            Ok(()) => {
                self.accounts
                    .stats
                    .copied(Direction::HostToDevice, req.size);
                Ok(())
            }
            Err(e) => Err(self.link_failed("receive", e)),
        }
    }
}
