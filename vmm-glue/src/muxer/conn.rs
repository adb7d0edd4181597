//! One connection's state: what each side has sent and consumed, the control packets
//! owed to the guest, and the credit arithmetic that bounds both directions.

use std::collections::VecDeque;

use crate::packet::{Header, SHUTDOWN_RCV};

use super::HostStream;

pub(super) struct Conn<S> {
    pub(super) guest_port: u32,
    pub(super) stream: S,

    // Guest -> host.
    /// Payload accepted from the guest but not yet taken by the host stream.
    pub(super) to_host: VecDeque<u8>,
    /// Bytes the host stream has taken (the `fwd_cnt` we report).
    pub(super) fwd_cnt: u32,
    /// `fwd_cnt` as last told to the guest.
    pub(super) fwd_cnt_told: u32,
    /// The host stream failed on write: guest data is discarded from now on.
    pub(super) host_write_failed: bool,
    /// We half-closed the host stream after the guest's SHUTDOWN(send).
    pub(super) host_write_shut: bool,

    // Host -> guest.
    /// Bytes sent to the guest.
    pub(super) tx_cnt: u32,
    pub(super) peer_buf_alloc: u32,
    pub(super) peer_fwd_cnt: u32,
    /// Edge-triggered readiness: set by a notification, cleared when a read would block.
    pub(super) host_readable: bool,
    /// The host stream reached its end (or failed on read).
    pub(super) host_eof: bool,

    /// SHUTDOWN flags the guest has sent so far.
    pub(super) guest_shutdown: u32,

    // Control packets owed to the guest.
    pub(super) want_response: bool,
    pub(super) want_credit_update: bool,
    pub(super) want_shutdown: bool,
    pub(super) shutdown_sent: bool,

    /// In the rx work queue.
    pub(super) queued: bool,
}

impl<S: HostStream> Conn<S> {
    pub(super) fn new(guest_port: u32, stream: S, peer: &Header) -> Conn<S> {
        Conn {
            guest_port,
            stream,
            to_host: VecDeque::new(),
            fwd_cnt: 0,
            fwd_cnt_told: 0,
            host_write_failed: false,
            host_write_shut: false,
            tx_cnt: 0,
            peer_buf_alloc: peer.buf_alloc,
            peer_fwd_cnt: peer.fwd_cnt,
            host_readable: false,
            host_eof: false,
            guest_shutdown: 0,
            want_response: true,
            want_credit_update: false,
            want_shutdown: false,
            shutdown_sent: false,
            queued: false,
        }
    }

    /// How many more bytes the guest can take from us.
    pub(super) fn peer_credit(&self) -> u32 {
        let in_flight = self.tx_cnt.wrapping_sub(self.peer_fwd_cnt);
        // A guest reporting more consumed than we sent gets no credit (its own loss).
        self.peer_buf_alloc.saturating_sub(in_flight)
    }

    pub(super) fn can_read_host(&self) -> bool {
        self.host_readable
            && !self.host_eof
            && self.guest_shutdown & SHUTDOWN_RCV == 0
            && self.peer_credit() > 0
    }

    pub(super) fn has_rx_work(&self) -> bool {
        self.want_response
            || (self.want_shutdown && !self.shutdown_sent)
            || self.want_credit_update
            || self.can_read_host()
    }
}
