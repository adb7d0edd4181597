//! The virtio-vsock stream protocol for one guest, as a pure state machine.
//!
//! Input: packets the guest put on its tx queue (a parsed [`Header`] plus the payload
//! bytes the descriptor chain really provided) and readiness of the host streams.
//! Output: packets for the guest's rx queue, pulled one at a time with
//! [`Muxer::next_rx_packet`] when the device holds an rx buffer, and actions on the host
//! streams through two small traits: [`Connector`] opens the host side of a new
//! connection (the real one spawns a `vmcuda-host worker`), [`HostStream`] is a
//! non-blocking byte stream (the real one is a Unix socket). Tests use in-memory doubles.
//!
//! Pull, not push: bytes from a worker are read from its socket only when the guest has
//! both an rx buffer for them and credit, so nothing from the host side is ever buffered
//! here; a worker that writes faster than the guest reads simply blocks on its socket.
//! Guest-to-host bytes are buffered only while the worker's socket would block, and never
//! more than the `buf_alloc` we advertise: a guest that sends beyond its credit is reset.
//! Control packets live as per-connection flags (bounded by the connection cap) plus a
//! bounded queue of resets for packets that match no connection.
//!
//! Connections are keyed by the guest's source port: every connection goes from the
//! guest's CID to the host CID on `port`, so the guest port alone names it.
//!
//! One file per concern: this one holds the configuration, the host-side traits and the
//! dispatch of guest packets (requests, resets, closing); `conn` is one connection's
//! state and credit arithmetic; `tx` the guest-to-host direction (buffering guest bytes
//! while the worker's socket is full, half-closing it); `rx` the host-to-guest direction
//! (the round-robin rx queue, control packets in protocol order, reads from the host
//! side).

mod conn;
mod rx;
mod tx;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::io;

use tracing::{debug, info, warn};

use crate::packet::{
    op_name, Header, HOST_CID, OP_CREDIT_REQUEST, OP_CREDIT_UPDATE, OP_REQUEST, OP_RST, OP_RW,
    OP_SHUTDOWN, TYPE_STREAM,
};

/// Identifies a connection for its whole life; never reused within one device.
pub type ConnId = u64;

/// Receive buffer we advertise per connection (`buf_alloc`): the most guest-to-host bytes
/// a connection may have buffered here while its worker is not reading.
pub const DEFAULT_BUF_ALLOC: u32 = 256 * 1024;
/// Concurrent connections per VM; requests beyond it are reset.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Largest payload in one packet, either way (Linux's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE).
pub const MAX_PAYLOAD: u32 = 64 * 1024;
/// Resets for packets that match no connection, waiting for an rx buffer. Beyond this
/// the oldest is dropped: a guest that floods bad packets without giving us rx buffers
/// only loses its own resets.
pub const MAX_PENDING_RESETS: usize = 1024;

/// Whether the `n`th occurrence of a guest-triggered complaint is logged: the first few,
/// then at powers of two, so a hostile guest cannot flood the host's log.
pub(crate) fn log_sampled(n: u64) -> bool {
    n <= 8 || n.is_power_of_two()
}

/// The host side of one connection: a non-blocking byte stream.
pub trait HostStream {
    /// Read what is there. `Ok(0)` is end of stream; `WouldBlock` means nothing now.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Write what fits. `WouldBlock` means no room now.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// The guest will send no more: half-close towards the host.
    fn shutdown_write(&mut self) -> io::Result<()>;
}

/// Opens the host side of a connection the guest asked for. Dropping the returned stream
/// closes it.
pub trait Connector {
    type Stream: HostStream;
    fn connect(&mut self, id: ConnId, guest_port: u32) -> io::Result<Self::Stream>;
    /// The guest's RAM regions changed (`SET_MEM_TABLE`): what later connections of
    /// privileged guest processes may be given (see [`crate::worker`]).
    fn guest_memory_changed(&mut self, _regions: Vec<GuestRamRegion>) {}
}

/// One guest RAM region as the VMM shared it: `len` bytes of guest-physical space from
/// `gpa`, backed by `file` from `offset`.
#[derive(Clone, Debug)]
pub struct GuestRamRegion {
    pub gpa: u64,
    pub len: u64,
    pub file: std::sync::Arc<std::fs::File>,
    pub offset: u64,
}

/// Guest source ports below this can only be bound by a privileged guest process
/// (Linux AF_VSOCK: ports up to 1023 need CAP_NET_BIND_SERVICE).
pub const FIRST_UNPRIVILEGED_PORT: u32 = 1024;

/// What the host side's readiness notification said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Data, end of stream or an error to read.
    pub readable: bool,
    /// Room to write (or an error to discover by writing).
    pub writable: bool,
}

#[derive(Clone, Debug)]
pub struct MuxerConfig {
    /// The guest's CID; packets claiming another source are dropped.
    pub guest_cid: u64,
    /// The host port that reaches vmcuda; requests to any other port are reset.
    pub port: u32,
    /// Our per-connection receive buffer (see [`DEFAULT_BUF_ALLOC`]).
    pub buf_alloc: u32,
    /// Cap on concurrent connections (see [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
}

impl MuxerConfig {
    pub fn new(guest_cid: u64, port: u32) -> MuxerConfig {
        MuxerConfig {
            guest_cid,
            port,
            buf_alloc: DEFAULT_BUF_ALLOC,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

use conn::Conn;

/// The protocol state for one guest.
pub struct Muxer<C: Connector> {
    cfg: MuxerConfig,
    connector: C,
    conns: HashMap<ConnId, Conn<C::Stream>>,
    by_port: HashMap<u32, ConnId>,
    /// Connections that may have a packet for the guest, in round-robin order.
    rxq: VecDeque<ConnId>,
    /// Resets owed to the guest for packets matching no (longer existing) connection.
    resets: VecDeque<Header>,
    next_id: ConnId,
    spoofed: u64,
    dropped_resets: u64,
    refused: u64,
}

impl<C: Connector> Muxer<C> {
    pub fn new(cfg: MuxerConfig, connector: C) -> Muxer<C> {
        Muxer {
            cfg,
            connector,
            conns: HashMap::new(),
            by_port: HashMap::new(),
            rxq: VecDeque::new(),
            resets: VecDeque::new(),
            next_id: 1,
            spoofed: 0,
            dropped_resets: 0,
            refused: 0,
        }
    }

    pub fn config(&self) -> &MuxerConfig {
        &self.cfg
    }

    pub fn connector(&self) -> &C {
        &self.connector
    }

    pub fn connector_mut(&mut self) -> &mut C {
        &mut self.connector
    }

    /// Open connections (including ones waiting for the guest's final reset).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Guest bytes buffered here, over all connections.
    pub fn buffered_bytes(&self) -> usize {
        self.conns.values().map(|c| c.to_host.len()).sum()
    }

    /// Resets waiting for an rx buffer.
    pub fn pending_resets(&self) -> usize {
        self.resets.len()
    }

    /// Packets dropped because their source CID was not the guest's.
    pub fn spoofed_packets(&self) -> u64 {
        self.spoofed
    }

    /// Whether [`Muxer::next_rx_packet`] may produce a packet.
    pub fn has_rx_work(&self) -> bool {
        !self.resets.is_empty() || !self.rxq.is_empty()
    }

    /// Close every connection without telling the guest (its driver was reset, or the
    /// VMM went away). Returns how many there were.
    pub fn reset(&mut self) -> usize {
        let n = self.conns.len();
        self.conns.clear();
        self.by_port.clear();
        self.rxq.clear();
        self.resets.clear();
        n
    }

    /// One packet from the guest's tx queue. `payload` holds the bytes that followed the
    /// header in the descriptor chain, at most `hdr.len` (the device never reads more);
    /// fewer than `hdr.len` means the guest lied about the length.
    pub fn handle_guest_packet(&mut self, hdr: &Header, payload: &[u8]) {
        if hdr.src_cid != self.cfg.guest_cid {
            self.spoofed += 1;
            if log_sampled(self.spoofed) {
                warn!(
                    src_cid = hdr.src_cid,
                    op = op_name(hdr.op),
                    total = self.spoofed,
                    "dropping packet with a spoofed source CID"
                );
            }
            return;
        }
        if hdr.op == OP_RST {
            // Never answer a reset; close the connection it names, if any.
            if hdr.type_ == TYPE_STREAM && self.addressed_to_us(hdr) {
                if let Some(&id) = self.by_port.get(&hdr.src_port) {
                    self.close(id, false, "guest reset");
                }
            }
            return;
        }
        if hdr.type_ != TYPE_STREAM {
            debug!(
                type_ = hdr.type_,
                "non-stream packet type; answering with a reset"
            );
            self.reset_reply(hdr);
            return;
        }
        if !self.addressed_to_us(hdr) {
            debug!(
                dst_cid = hdr.dst_cid,
                dst_port = hdr.dst_port,
                op = op_name(hdr.op),
                "nobody listens there; answering with a reset"
            );
            self.reset_reply(hdr);
            return;
        }
        let well_formed = payload.len() == hdr.len as usize
            && (hdr.op == OP_RW || hdr.len == 0)
            && hdr.len <= MAX_PAYLOAD;

        if hdr.op == OP_REQUEST {
            if !well_formed {
                warn!(
                    len = hdr.len,
                    got = payload.len(),
                    "malformed connection request"
                );
                self.reset_reply(hdr);
                return;
            }
            self.request(hdr);
            return;
        }

        let Some(&id) = self.by_port.get(&hdr.src_port) else {
            debug!(
                port = hdr.src_port,
                op = op_name(hdr.op),
                "packet for no connection; answering with a reset"
            );
            self.reset_reply(hdr);
            return;
        };
        if !well_formed {
            warn!(
                connection = id,
                op = op_name(hdr.op),
                len = hdr.len,
                got = payload.len(),
                "malformed packet (length does not match the buffer); resetting the connection"
            );
            self.close(id, true, "malformed packet");
            return;
        }
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        // Every packet carries the guest's current receive window.
        conn.peer_buf_alloc = hdr.buf_alloc;
        conn.peer_fwd_cnt = hdr.fwd_cnt;

        match hdr.op {
            OP_RW => self.guest_data(id, payload),
            OP_SHUTDOWN => self.guest_shutdown(id, hdr.flags),
            OP_CREDIT_UPDATE => self.enqueue(id),
            OP_CREDIT_REQUEST => {
                conn.want_credit_update = true;
                self.enqueue(id);
            }
            other => {
                warn!(
                    connection = id,
                    op = other,
                    name = op_name(other),
                    "unexpected op from the guest; resetting the connection"
                );
                self.close(id, true, "unexpected op");
            }
        }
    }

    /// Readiness of the host stream of connection `id` (stale ids are ignored).
    pub fn handle_host_ready(&mut self, id: ConnId, ready: Readiness) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if ready.readable {
            conn.host_readable = true;
        }
        if ready.writable {
            self.flush(id);
        }
        self.enqueue(id);
    }

    /// The next packet for the guest, if any, with at most `max_payload` payload bytes
    /// (written to `payload`, which is cleared first). `None` means nothing to send now.
    pub fn next_rx_packet(&mut self, max_payload: usize, payload: &mut Vec<u8>) -> Option<Header> {
        payload.clear();
        if let Some(rst) = self.resets.pop_front() {
            return Some(rst);
        }
        // Each queued connection gets one turn. One whose only work is data has nothing
        // for a buffer without room for payload; it goes back in the queue, and must not
        // be taken out again in this call (that spun forever on such a buffer).
        for _ in 0..self.rxq.len() {
            let Some(id) = self.rxq.pop_front() else {
                break;
            };
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            conn.queued = false;
            let pkt = self.conn_packet(id, max_payload, payload);
            self.enqueue(id);
            if pkt.is_some() {
                return pkt;
            }
        }
        None
    }

    fn addressed_to_us(&self, hdr: &Header) -> bool {
        hdr.dst_cid == HOST_CID && hdr.dst_port == self.cfg.port
    }

    fn request(&mut self, hdr: &Header) {
        let port = hdr.src_port;
        if let Some(&old) = self.by_port.get(&port) {
            // The guest never reuses the port of a live connection: the old one is dead
            // (the guest rebooted, or reset it in a packet we never saw).
            info!(
                connection = old,
                port, "new request on the port of an open connection; closing the old one"
            );
            self.close(old, false, "replaced by a new request on its port");
        }
        if self.conns.len() >= self.cfg.max_connections {
            self.refused += 1;
            if log_sampled(self.refused) {
                warn!(
                    port,
                    max = self.cfg.max_connections,
                    total = self.refused,
                    "too many connections; refusing"
                );
            }
            self.reset_reply(hdr);
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        match self.connector.connect(id, port) {
            Ok(stream) => {
                info!(connection = id, guest_port = port, "guest connected");
                self.conns.insert(id, Conn::new(port, stream, hdr));
                self.by_port.insert(port, id);
                self.enqueue(id);
            }
            Err(e) => {
                warn!(
                    connection = id,
                    guest_port = port,
                    "cannot start the host side: {e}"
                );
                self.reset_reply(hdr);
            }
        }
    }

    /// Forget connection `id` (closing its host stream); tell the guest with a reset if
    /// `rst`.
    fn close(&mut self, id: ConnId, rst: bool, why: &str) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        if self.by_port.get(&conn.guest_port) == Some(&id) {
            self.by_port.remove(&conn.guest_port);
        }
        info!(
            connection = id,
            guest_port = conn.guest_port,
            reset_sent = rst,
            "connection closed: {why}"
        );
        if rst {
            self.push_reset(Header {
                src_cid: HOST_CID,
                dst_cid: self.cfg.guest_cid,
                src_port: self.cfg.port,
                dst_port: conn.guest_port,
                len: 0,
                type_: TYPE_STREAM,
                op: OP_RST,
                flags: 0,
                buf_alloc: 0,
                fwd_cnt: 0,
            });
        }
        // Dropping `conn` closes the host stream: the worker sees end of input and exits.
    }
}
