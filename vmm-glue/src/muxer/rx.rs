//! Host to guest: the round-robin queue of connections with something for the guest,
//! the packets they produce in protocol order, and the resets owed for packets that
//! match no connection. Host bytes are read only when the guest has an rx buffer and
//! credit for them, so nothing from the host side is buffered here.

use std::io;

use tracing::{debug, warn};

use crate::packet::{
    Header, HOST_CID, OP_CREDIT_UPDATE, OP_RESPONSE, OP_RST, OP_RW, OP_SHUTDOWN, SHUTDOWN_BOTH,
    TYPE_STREAM,
};

use super::conn::Conn;
use super::{log_sampled, ConnId, Connector, HostStream, Muxer, MAX_PAYLOAD, MAX_PENDING_RESETS};

impl<C: Connector> Muxer<C> {
    /// Produce one packet for connection `id`, in protocol order: RESPONSE before any
    /// data, data before SHUTDOWN, credit updates whenever owed (any packet carries one).
    pub(super) fn conn_packet(
        &mut self,
        id: ConnId,
        max_payload: usize,
        payload: &mut Vec<u8>,
    ) -> Option<Header> {
        let cfg = &self.cfg;
        let conn = self.conns.get_mut(&id)?;
        let (op, flags) = if conn.want_response {
            conn.want_response = false;
            (OP_RESPONSE, 0)
        } else if let Some(n) = read_host(id, conn, max_payload, payload) {
            conn.tx_cnt = conn.tx_cnt.wrapping_add(n);
            (OP_RW, 0)
        } else if conn.want_shutdown && !conn.shutdown_sent {
            conn.shutdown_sent = true;
            (OP_SHUTDOWN, SHUTDOWN_BOTH)
        } else if conn.want_credit_update {
            (OP_CREDIT_UPDATE, 0)
        } else {
            return None;
        };
        conn.want_credit_update = false;
        conn.fwd_cnt_told = conn.fwd_cnt;
        Some(Header {
            src_cid: HOST_CID,
            dst_cid: cfg.guest_cid,
            src_port: cfg.port,
            dst_port: conn.guest_port,
            len: payload.len() as u32,
            type_: TYPE_STREAM,
            op,
            flags,
            buf_alloc: cfg.buf_alloc,
            fwd_cnt: conn.fwd_cnt,
        })
    }

    pub(super) fn enqueue(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            if !conn.queued && conn.has_rx_work() {
                conn.queued = true;
                self.rxq.push_back(id);
            }
        }
    }

    /// Answer a packet that no connection takes with a reset (never a reset to a reset).
    pub(super) fn reset_reply(&mut self, hdr: &Header) {
        if hdr.op == OP_RST {
            return;
        }
        self.push_reset(Header {
            src_cid: hdr.dst_cid,
            dst_cid: self.cfg.guest_cid,
            src_port: hdr.dst_port,
            dst_port: hdr.src_port,
            len: 0,
            type_: hdr.type_,
            op: OP_RST,
            flags: 0,
            buf_alloc: 0,
            fwd_cnt: 0,
        });
    }

    pub(super) fn push_reset(&mut self, rst: Header) {
        if self.resets.len() >= MAX_PENDING_RESETS {
            self.resets.pop_front();
            self.dropped_resets += 1;
            if log_sampled(self.dropped_resets) {
                warn!(
                    total = self.dropped_resets,
                    "guest gives no rx buffers; dropping resets"
                );
            }
        }
        self.resets.push_back(rst);
    }
}

/// Read the next chunk of host bytes for the guest, within its credit and `max_payload`.
/// `Some(n)` with `n > 0` bytes in `payload`, or `None` (nothing now, or end of stream,
/// which also schedules our SHUTDOWN).
fn read_host<S: HostStream>(
    id: ConnId,
    conn: &mut Conn<S>,
    max_payload: usize,
    payload: &mut Vec<u8>,
) -> Option<u32> {
    if !conn.can_read_host() {
        return None;
    }
    let n = max_payload
        .min(conn.peer_credit() as usize)
        .min(MAX_PAYLOAD as usize);
    if n == 0 {
        return None;
    }
    payload.resize(n, 0);
    loop {
        match conn.stream.read(&mut payload[..n]) {
            Ok(0) => {
                debug!(
                    connection = id,
                    "host side closed; shutting the guest side down"
                );
                payload.clear();
                conn.host_eof = true;
                conn.want_shutdown = true;
                return None;
            }
            Ok(k) => {
                let k = k.min(n);
                payload.truncate(k);
                return Some(k as u32);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                payload.clear();
                conn.host_readable = false;
                return None;
            }
            Err(e) => {
                debug!(
                    connection = id,
                    "host stream read failed: {e}; shutting down"
                );
                payload.clear();
                conn.host_eof = true;
                conn.want_shutdown = true;
                return None;
            }
        }
    }
}
