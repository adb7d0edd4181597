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

use std::collections::{HashMap, VecDeque};
use std::io;

use tracing::{debug, info, warn};

use crate::packet::{
    op_name, Header, HOST_CID, OP_CREDIT_REQUEST, OP_CREDIT_UPDATE, OP_REQUEST, OP_RESPONSE,
    OP_RST, OP_RW, OP_SHUTDOWN, SHUTDOWN_BOTH, SHUTDOWN_RCV, SHUTDOWN_SEND, TYPE_STREAM,
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

struct Conn<S> {
    guest_port: u32,
    stream: S,

    // Guest -> host.
    /// Payload accepted from the guest but not yet taken by the host stream.
    to_host: VecDeque<u8>,
    /// Bytes the host stream has taken (the `fwd_cnt` we report).
    fwd_cnt: u32,
    /// `fwd_cnt` as last told to the guest.
    fwd_cnt_told: u32,
    /// The host stream failed on write: guest data is discarded from now on.
    host_write_failed: bool,
    /// We half-closed the host stream after the guest's SHUTDOWN(send).
    host_write_shut: bool,

    // Host -> guest.
    /// Bytes sent to the guest.
    tx_cnt: u32,
    peer_buf_alloc: u32,
    peer_fwd_cnt: u32,
    /// Edge-triggered readiness: set by a notification, cleared when a read would block.
    host_readable: bool,
    /// The host stream reached its end (or failed on read).
    host_eof: bool,

    /// SHUTDOWN flags the guest has sent so far.
    guest_shutdown: u32,

    // Control packets owed to the guest.
    want_response: bool,
    want_credit_update: bool,
    want_shutdown: bool,
    shutdown_sent: bool,

    /// In the rx work queue.
    queued: bool,
}

impl<S: HostStream> Conn<S> {
    fn new(guest_port: u32, stream: S, peer: &Header) -> Conn<S> {
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
    fn peer_credit(&self) -> u32 {
        let in_flight = self.tx_cnt.wrapping_sub(self.peer_fwd_cnt);
        // A guest reporting more consumed than we sent gets no credit (its own loss).
        self.peer_buf_alloc.saturating_sub(in_flight)
    }

    fn can_read_host(&self) -> bool {
        self.host_readable
            && !self.host_eof
            && self.guest_shutdown & SHUTDOWN_RCV == 0
            && self.peer_credit() > 0
    }

    fn has_rx_work(&self) -> bool {
        self.want_response
            || (self.want_shutdown && !self.shutdown_sent)
            || self.want_credit_update
            || self.can_read_host()
    }
}

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

    fn guest_data(&mut self, id: ConnId, payload: &[u8]) {
        let buf_alloc = self.cfg.buf_alloc as usize;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.guest_shutdown & SHUTDOWN_SEND != 0 {
            warn!(
                connection = id,
                "data after the guest's SHUTDOWN(send); resetting"
            );
            self.close(id, true, "data after the guest's SHUTDOWN(send)");
            return;
        }
        if conn.to_host.len().saturating_add(payload.len()) > buf_alloc {
            warn!(
                connection = id,
                buffered = conn.to_host.len(),
                len = payload.len(),
                buf_alloc,
                "guest exceeded the credit we gave it; resetting the connection"
            );
            self.close(id, true, "credit violation");
            return;
        }
        if conn.host_write_failed {
            // Nobody takes it any more; count it as consumed so the guest is not stuck.
            conn.fwd_cnt = conn.fwd_cnt.wrapping_add(payload.len() as u32);
        } else {
            conn.to_host.extend(payload);
        }
        self.flush(id);
    }

    fn guest_shutdown(&mut self, id: ConnId, flags: u32) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.guest_shutdown |= flags & SHUTDOWN_BOTH;
        debug!(connection = id, flags, "guest shutdown");
        if conn.guest_shutdown == SHUTDOWN_BOTH {
            // The guest is closing its socket and waits for our reset.
            self.close(id, true, "guest closed");
            return;
        }
        self.flush(id);
    }

    /// Push buffered guest bytes into the host stream; half-close it once the guest has
    /// said it sends no more; owe the guest a credit update when enough room was freed.
    fn flush(&mut self, id: ConnId) {
        let threshold = (self.cfg.buf_alloc / 4).max(1);
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        while !conn.to_host.is_empty() && !conn.host_write_failed {
            let (front, _) = conn.to_host.as_slices();
            match conn.stream.write(front) {
                Ok(0) => break,
                Ok(n) => {
                    let n = n.min(front.len());
                    conn.to_host.drain(..n);
                    conn.fwd_cnt = conn.fwd_cnt.wrapping_add(n as u32);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(
                        connection = id,
                        "host stream write failed: {e}; discarding guest data"
                    );
                    conn.host_write_failed = true;
                    conn.fwd_cnt = conn.fwd_cnt.wrapping_add(conn.to_host.len() as u32);
                    conn.to_host = VecDeque::new();
                }
            }
        }
        if conn.to_host.is_empty() {
            if conn.to_host.capacity() > MAX_PAYLOAD as usize {
                conn.to_host = VecDeque::new();
            }
            if conn.guest_shutdown & SHUTDOWN_SEND != 0 && !conn.host_write_shut {
                conn.host_write_shut = true;
                if let Err(e) = conn.stream.shutdown_write() {
                    debug!(connection = id, "half-closing the host stream: {e}");
                }
            }
        }
        if conn.fwd_cnt.wrapping_sub(conn.fwd_cnt_told) >= threshold {
            conn.want_credit_update = true;
        }
        self.enqueue(id);
    }

    /// Produce one packet for connection `id`, in protocol order: RESPONSE before any
    /// data, data before SHUTDOWN, credit updates whenever owed (any packet carries one).
    fn conn_packet(
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

    fn enqueue(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            if !conn.queued && conn.has_rx_work() {
                conn.queued = true;
                self.rxq.push_back(id);
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

    /// Answer a packet that no connection takes with a reset (never a reset to a reset).
    fn reset_reply(&mut self, hdr: &Header) {
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

    fn push_reset(&mut self, rst: Header) {
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

#[cfg(test)]
pub(crate) mod testing {
    //! In-memory doubles for the host side, shared by the muxer and device tests.

    use super::*;
    use std::sync::{Arc, Mutex};

    /// One connection's host side as the test sees it.
    #[derive(Default, Debug)]
    pub struct Wire {
        /// Bytes the host side received from the guest.
        pub received: Vec<u8>,
        /// Bytes the host side will send to the guest.
        pub to_send: VecDeque<u8>,
        /// How many more bytes the host side accepts before writes would block.
        pub room: usize,
        /// The host side closed its end (reads see end of stream once `to_send` is empty).
        pub eof: bool,
        pub write_shut: bool,
        /// The stream was dropped by the muxer.
        pub closed: bool,
        /// Writes fail with a broken pipe.
        pub broken: bool,
    }

    pub type WireRef = Arc<Mutex<Wire>>;

    pub struct FakeStream(pub WireRef);

    impl HostStream for FakeStream {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let mut w = self.0.lock().unwrap();
            if w.to_send.is_empty() {
                return if w.eof {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = buf.len().min(w.to_send.len());
            for (dst, src) in buf.iter_mut().zip(w.to_send.drain(..n)) {
                *dst = src;
            }
            Ok(n)
        }

        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut w = self.0.lock().unwrap();
            if w.broken {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if w.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(w.room);
            w.room -= n;
            w.received.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn shutdown_write(&mut self) -> io::Result<()> {
            self.0.lock().unwrap().write_shut = true;
            Ok(())
        }
    }

    impl Drop for FakeStream {
        fn drop(&mut self) {
            // Never panic in a destructor, even after a failed assertion poisoned the lock.
            self.0.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        }
    }

    /// Hands out [`FakeStream`]s and remembers their wires by connection id.
    #[derive(Clone, Default)]
    pub struct FakeConnector {
        pub wires: Arc<Mutex<Vec<(ConnId, u32, WireRef)>>>,
        pub fail: Arc<Mutex<bool>>,
        /// Room each new wire starts with.
        pub initial_room: usize,
    }

    impl FakeConnector {
        pub fn new() -> FakeConnector {
            FakeConnector {
                initial_room: usize::MAX,
                ..Default::default()
            }
        }

        pub fn wire(&self, id: ConnId) -> WireRef {
            let wires = self.wires.lock().unwrap();
            wires
                .iter()
                .find(|(i, _, _)| *i == id)
                .map(|(_, _, w)| w.clone())
                .expect("no such connection")
        }

        pub fn last_id(&self) -> ConnId {
            self.wires.lock().unwrap().last().expect("no connection").0
        }
    }

    impl Connector for FakeConnector {
        type Stream = FakeStream;

        fn connect(&mut self, id: ConnId, guest_port: u32) -> io::Result<FakeStream> {
            if *self.fail.lock().unwrap() {
                return Err(io::Error::other("spawn failed"));
            }
            let wire = Arc::new(Mutex::new(Wire {
                room: self.initial_room,
                ..Default::default()
            }));
            self.wires
                .lock()
                .unwrap()
                .push((id, guest_port, wire.clone()));
            Ok(FakeStream(wire))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    const GUEST: u64 = 3;
    const PORT: u32 = 7731;
    const GPORT: u32 = 40000;

    fn muxer() -> (Muxer<FakeConnector>, FakeConnector) {
        let conn = FakeConnector::new();
        let mut cfg = MuxerConfig::new(GUEST, PORT);
        cfg.buf_alloc = 4096;
        cfg.max_connections = 4;
        (Muxer::new(cfg, conn.clone()), conn)
    }

    fn guest(op: u16, src_port: u32, len: u32) -> Header {
        Header {
            src_cid: GUEST,
            dst_cid: HOST_CID,
            src_port,
            dst_port: PORT,
            len,
            type_: TYPE_STREAM,
            op,
            flags: 0,
            buf_alloc: 65536,
            fwd_cnt: 0,
        }
    }

    /// Drain every packet the muxer has for the guest.
    fn drain(m: &mut Muxer<FakeConnector>, max_payload: usize) -> Vec<(Header, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(h) = m.next_rx_packet(max_payload, &mut buf) {
            assert_eq!(h.len as usize, buf.len(), "header len matches payload");
            out.push((h, buf.clone()));
            assert!(out.len() < 10_000, "muxer keeps producing packets");
        }
        assert!(!m.has_rx_work() || m.next_rx_packet(max_payload, &mut buf).is_none());
        out
    }

    fn ops(pkts: &[(Header, Vec<u8>)]) -> Vec<u16> {
        pkts.iter().map(|(h, _)| h.op).collect()
    }

    /// Connect from `port` and check the RESPONSE; returns the connection id.
    fn connect(m: &mut Muxer<FakeConnector>, c: &FakeConnector, port: u32) -> ConnId {
        m.handle_guest_packet(&guest(OP_REQUEST, port, 0), &[]);
        let pkts = drain(m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RESPONSE]);
        let h = pkts[0].0;
        assert_eq!(
            (h.src_cid, h.dst_cid, h.src_port, h.dst_port, h.type_),
            (HOST_CID, GUEST, PORT, port, TYPE_STREAM)
        );
        assert_eq!(h.buf_alloc, 4096);
        c.last_id()
    }

    #[test]
    fn connect_is_accepted_and_starts_a_host_side() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        assert_eq!(m.connection_count(), 1);
        let wires = c.wires.lock().unwrap();
        assert_eq!(wires.len(), 1);
        assert_eq!((wires[0].0, wires[0].1), (id, GPORT));
    }

    #[test]
    fn request_to_other_port_or_cid_is_reset() {
        let (mut m, c) = muxer();
        let mut h = guest(OP_REQUEST, GPORT, 0);
        h.dst_port = 22;
        m.handle_guest_packet(&h, &[]);
        let mut h2 = guest(OP_REQUEST, GPORT + 1, 0);
        h2.dst_cid = 7;
        m.handle_guest_packet(&h2, &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RST, OP_RST]);
        let r = pkts[0].0;
        assert_eq!(
            (r.src_cid, r.dst_cid, r.src_port, r.dst_port),
            (HOST_CID, GUEST, 22, GPORT)
        );
        let r = pkts[1].0;
        assert_eq!((r.src_cid, r.dst_cid, r.dst_port), (7, GUEST, GPORT + 1));
        assert_eq!(m.connection_count(), 0);
        assert!(
            c.wires.lock().unwrap().is_empty(),
            "no worker for refused requests"
        );
    }

    #[test]
    fn non_stream_types_are_reset_and_resets_are_never_answered() {
        let (mut m, c) = muxer();
        let mut h = guest(OP_REQUEST, GPORT, 0);
        h.type_ = 2; // SEQPACKET
        m.handle_guest_packet(&h, &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RST]);
        assert_eq!(pkts[0].0.type_, 2);
        assert!(c.wires.lock().unwrap().is_empty());

        // A reset for nothing, of any type, gets no answer.
        m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
        let mut h = guest(OP_RST, GPORT, 0);
        h.type_ = 9;
        m.handle_guest_packet(&h, &[]);
        assert!(drain(&mut m, 4096).is_empty());
    }

    #[test]
    fn packets_for_unknown_connections_are_reset() {
        let (mut m, _c) = muxer();
        for op in [
            OP_SHUTDOWN,
            OP_CREDIT_UPDATE,
            OP_CREDIT_REQUEST,
            OP_RESPONSE,
            99,
        ] {
            m.handle_guest_packet(&guest(op, GPORT, 0), &[]);
        }
        m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST; 6]);
    }

    #[test]
    fn data_flows_both_ways_with_credit_accounting() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);

        // Guest -> host.
        m.handle_guest_packet(&guest(OP_RW, GPORT, 5), b"hello");
        assert_eq!(wire.lock().unwrap().received, b"hello");

        // Host -> guest, limited by the guest's window: buf_alloc 10, nothing consumed.
        wire.lock()
            .unwrap()
            .to_send
            .extend(b"0123456789abcdef".iter());
        let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
        h.buf_alloc = 10;
        m.handle_guest_packet(&h, &[]);
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        let pkts = drain(&mut m, 4);
        assert_eq!(ops(&pkts), vec![OP_RW, OP_RW, OP_RW]);
        let data: Vec<u8> = pkts.iter().flat_map(|(_, p)| p.clone()).collect();
        assert_eq!(
            data, b"0123456789",
            "exactly the guest's credit, in max_payload pieces"
        );
        assert!(pkts
            .iter()
            .all(|(h, _)| h.fwd_cnt == 5 && h.buf_alloc == 4096));
        assert!(!m.has_rx_work(), "no credit left: wait for the guest");

        // The guest consumes 6 bytes: 6 more may flow.
        let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
        h.buf_alloc = 10;
        h.fwd_cnt = 6;
        m.handle_guest_packet(&h, &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RW]);
        assert_eq!(pkts[0].1, b"abcdef");

        // All read: the next read would block, so no more work until the next readiness.
        assert!(drain(&mut m, 4096).is_empty());
    }

    #[test]
    fn guest_data_is_buffered_while_the_host_is_full_then_credit_is_returned() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        wire.lock().unwrap().room = 100;

        let chunk = vec![7u8; 1000];
        for _ in 0..4 {
            m.handle_guest_packet(&guest(OP_RW, GPORT, 1000), &chunk);
        }
        assert_eq!(wire.lock().unwrap().received.len(), 100);
        assert_eq!(m.buffered_bytes(), 3900);
        assert!(
            drain(&mut m, 4096).is_empty(),
            "nothing freed enough for an update"
        );

        // The host drains: room for everything; fwd_cnt reaches 4000 and an update is owed.
        wire.lock().unwrap().room = usize::MAX;
        m.handle_host_ready(
            id,
            Readiness {
                readable: false,
                writable: true,
            },
        );
        assert_eq!(m.buffered_bytes(), 0);
        assert_eq!(wire.lock().unwrap().received.len(), 4000);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
        assert_eq!(pkts[0].0.fwd_cnt, 4000);
        assert_eq!(pkts[0].0.buf_alloc, 4096);
    }

    #[test]
    fn credit_violation_resets_the_connection() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        wire.lock().unwrap().room = 0; // the worker is not reading

        let chunk = vec![1u8; 4096];
        m.handle_guest_packet(&guest(OP_RW, GPORT, 4096), &chunk); // exactly the credit
        assert_eq!(m.buffered_bytes(), 4096);
        assert!(drain(&mut m, 4096).is_empty());
        m.handle_guest_packet(&guest(OP_RW, GPORT, 1), &[1]); // one byte too many
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RST]);
        assert_eq!(pkts[0].0.dst_port, GPORT);
        assert_eq!(m.connection_count(), 0);
        assert_eq!(m.buffered_bytes(), 0);
        assert!(wire.lock().unwrap().closed, "host side closed");
    }

    #[test]
    fn credit_request_gets_a_credit_update() {
        let (mut m, c) = muxer();
        let _ = connect(&mut m, &c, GPORT);
        m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
        m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
        assert_eq!((pkts[0].0.buf_alloc, pkts[0].0.fwd_cnt), (4096, 3));
    }

    #[test]
    fn guest_shutdown_send_half_closes_after_flushing() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        wire.lock().unwrap().room = 2;
        m.handle_guest_packet(&guest(OP_RW, GPORT, 4), b"abcd");
        let mut h = guest(OP_SHUTDOWN, GPORT, 0);
        h.flags = SHUTDOWN_SEND;
        m.handle_guest_packet(&h, &[]);
        assert!(!wire.lock().unwrap().write_shut, "data still buffered");
        wire.lock().unwrap().room = 100;
        m.handle_host_ready(
            id,
            Readiness {
                readable: false,
                writable: true,
            },
        );
        let w = wire.lock().unwrap();
        assert_eq!(w.received, b"abcd");
        assert!(w.write_shut);
        assert!(!w.closed, "the host may still answer");
        drop(w);

        // The host can still send to the guest.
        wire.lock().unwrap().to_send.extend(b"reply".iter());
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RW]);
        assert_eq!(pkts[0].1, b"reply");

        // More data after SHUTDOWN(send) is a protocol violation.
        m.handle_guest_packet(&guest(OP_RW, GPORT, 1), b"x");
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn guest_shutdown_rcv_stops_reading_the_host() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        let mut h = guest(OP_SHUTDOWN, GPORT, 0);
        h.flags = SHUTDOWN_RCV;
        m.handle_guest_packet(&h, &[]);
        wire.lock().unwrap().to_send.extend(b"unwanted".iter());
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        assert!(drain(&mut m, 4096).is_empty());
        assert_eq!(wire.lock().unwrap().to_send.len(), 8, "nothing read");
        // Guest -> host still works.
        m.handle_guest_packet(&guest(OP_RW, GPORT, 2), b"ok");
        assert_eq!(wire.lock().unwrap().received, b"ok");

        // The second flag completes the shutdown: reset and close.
        let mut h = guest(OP_SHUTDOWN, GPORT, 0);
        h.flags = SHUTDOWN_SEND;
        m.handle_guest_packet(&h, &[]);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert!(wire.lock().unwrap().closed);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn guest_full_shutdown_is_answered_with_a_reset_and_closes() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let mut h = guest(OP_SHUTDOWN, GPORT, 0);
        h.flags = SHUTDOWN_BOTH;
        m.handle_guest_packet(&h, &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RST]);
        assert_eq!(pkts[0].0.dst_port, GPORT);
        assert!(c.wire(id).lock().unwrap().closed);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn host_eof_sends_data_then_shutdown_and_waits_for_the_guest_reset() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        {
            let mut w = wire.lock().unwrap();
            w.to_send.extend(b"last words".iter());
            w.eof = true;
        }
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RW, OP_SHUTDOWN]);
        assert_eq!(pkts[0].1, b"last words");
        assert_eq!(pkts[1].0.flags, SHUTDOWN_BOTH);
        assert_eq!(m.connection_count(), 1, "waiting for the guest");

        // A second readiness does not repeat the shutdown.
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: true,
            },
        );
        assert!(drain(&mut m, 4096).is_empty());

        m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
        assert!(drain(&mut m, 4096).is_empty(), "no answer to a reset");
        assert_eq!(m.connection_count(), 0);
        assert!(wire.lock().unwrap().closed);
    }

    #[test]
    fn guest_reset_closes_immediately() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        c.wire(id).lock().unwrap().room = 0;
        m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
        m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
        assert_eq!(m.connection_count(), 0);
        assert_eq!(m.buffered_bytes(), 0);
        assert!(c.wire(id).lock().unwrap().closed);
        assert!(drain(&mut m, 4096).is_empty());
        // Later packets on that port are answered with a reset.
        m.handle_guest_packet(&guest(OP_RW, GPORT, 1), b"z");
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    }

    #[test]
    fn bad_lengths_never_panic_and_reset() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        // The header claims 100 bytes, the chain held 10.
        m.handle_guest_packet(&guest(OP_RW, GPORT, 100), &[0u8; 10]);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert!(
            c.wire(id).lock().unwrap().received.is_empty(),
            "nothing forwarded"
        );
        assert_eq!(m.connection_count(), 0);

        // Absurd lengths on requests and other ops.
        m.handle_guest_packet(&guest(OP_REQUEST, GPORT, u32::MAX), &[]);
        m.handle_guest_packet(&guest(OP_REQUEST, GPORT + 1, 4), b"junk");
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST, OP_RST]);
        assert_eq!(m.connection_count(), 0);

        let _ = connect(&mut m, &c, GPORT + 2);
        m.handle_guest_packet(&guest(OP_CREDIT_UPDATE, GPORT + 2, 8), b"12345678");
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        let _ = connect(&mut m, &c, GPORT + 3);
        let big = vec![0u8; MAX_PAYLOAD as usize + 1];
        m.handle_guest_packet(&guest(OP_RW, GPORT + 3, big.len() as u32), &big);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn unknown_op_on_a_connection_resets_it() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        m.handle_guest_packet(&guest(42, GPORT, 0), &[]);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert!(c.wire(id).lock().unwrap().closed);
        // The guest answering a RESPONSE we never asked for is also a violation.
        let _ = connect(&mut m, &c, GPORT);
        m.handle_guest_packet(&guest(OP_RESPONSE, GPORT, 0), &[]);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn spoofed_source_cid_is_dropped_silently() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        for op in [OP_REQUEST, OP_RW, OP_RST, OP_SHUTDOWN] {
            let mut h = guest(op, GPORT, if op == OP_RW { 3 } else { 0 });
            h.src_cid = 4;
            h.flags = SHUTDOWN_BOTH;
            m.handle_guest_packet(&h, if op == OP_RW { b"bad" } else { &[] });
        }
        assert_eq!(m.spoofed_packets(), 4);
        assert!(drain(&mut m, 4096).is_empty(), "no answer at all");
        assert_eq!(m.connection_count(), 1, "the real connection is untouched");
        assert!(c.wire(id).lock().unwrap().received.is_empty());
        assert!(!c.wire(id).lock().unwrap().closed);
    }

    #[test]
    fn connection_cap_resets_beyond_it() {
        let (mut m, c) = muxer(); // cap 4
        for p in 0..4 {
            connect(&mut m, &c, GPORT + p);
        }
        m.handle_guest_packet(&guest(OP_REQUEST, GPORT + 10, 0), &[]);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RST]);
        assert_eq!(pkts[0].0.dst_port, GPORT + 10);
        assert_eq!(m.connection_count(), 4);
        assert_eq!(
            c.wires.lock().unwrap().len(),
            4,
            "no worker spawned beyond the cap"
        );
        // Closing one makes room.
        m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
        connect(&mut m, &c, GPORT + 10);
        assert_eq!(m.connection_count(), 4);
    }

    #[test]
    fn failing_host_side_refuses_the_connection() {
        let (mut m, c) = muxer();
        *c.fail.lock().unwrap() = true;
        m.handle_guest_packet(&guest(OP_REQUEST, GPORT, 0), &[]);
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
        assert_eq!(m.connection_count(), 0);
    }

    #[test]
    fn rerequest_on_a_live_port_replaces_the_old_connection() {
        let (mut m, c) = muxer();
        let old = connect(&mut m, &c, GPORT);
        let new = connect(&mut m, &c, GPORT);
        assert_ne!(old, new);
        assert!(c.wire(old).lock().unwrap().closed);
        assert!(!c.wire(new).lock().unwrap().closed);
        assert_eq!(m.connection_count(), 1);
    }

    #[test]
    fn broken_host_side_discards_data_but_keeps_credit_flowing() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        c.wire(id).lock().unwrap().broken = true;
        let chunk = vec![0u8; 2048];
        for _ in 0..8 {
            m.handle_guest_packet(&guest(OP_RW, GPORT, 2048), &chunk);
        }
        assert_eq!(m.buffered_bytes(), 0);
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
        assert_eq!(pkts[0].0.fwd_cnt, 8 * 2048);
    }

    #[test]
    fn a_connection_that_never_closes_stays_bounded() {
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        let wire = c.wire(id);
        wire.lock().unwrap().room = 0; // a worker that never reads
                                       // A well-behaved guest fills its credit and then only asks for more.
        let chunk = vec![9u8; 1024];
        for _ in 0..4 {
            m.handle_guest_packet(&guest(OP_RW, GPORT, 1024), &chunk);
        }
        for _ in 0..10_000 {
            m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
            m.handle_host_ready(
                id,
                Readiness {
                    readable: true,
                    writable: true,
                },
            );
        }
        assert_eq!(m.buffered_bytes(), 4096, "never more than buf_alloc");
        // All those requests collapse into one owed update.
        assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_CREDIT_UPDATE]);

        // A worker that never stops talking to a guest that never reads: nothing piles
        // up here, the bytes stay in the worker's socket.
        wire.lock()
            .unwrap()
            .to_send
            .extend(std::iter::repeat_n(1u8, 1 << 20));
        let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
        h.buf_alloc = 1000;
        m.handle_guest_packet(&h, &[]);
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        let sent: usize = drain(&mut m, 4096).iter().map(|(_, p)| p.len()).sum();
        assert_eq!(sent, 1000);
        assert_eq!(wire.lock().unwrap().to_send.len(), (1 << 20) - 1000);
        assert_eq!(m.buffered_bytes(), 4096);

        // A guest flooding bad requests without giving rx buffers: resets are bounded.
        for p in 0..(3 * MAX_PENDING_RESETS as u32) {
            let mut h = guest(OP_REQUEST, p, 0);
            h.dst_port = 1;
            m.handle_guest_packet(&h, &[]);
        }
        assert_eq!(m.pending_resets(), MAX_PENDING_RESETS);

        // A guest that ignores its credit is reset, never buffered beyond buf_alloc.
        m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
        let mut c2 = c.clone();
        c2.initial_room = 0;
        let mut m2 = Muxer::new(m.config().clone(), c2.clone());
        m2.handle_guest_packet(&guest(OP_REQUEST, GPORT, 0), &[]);
        for _ in 0..100 {
            m2.handle_guest_packet(&guest(OP_RW, GPORT, 1024), &chunk);
            assert!(m2.buffered_bytes() <= 4096);
        }
        assert_eq!(m2.connection_count(), 0);
    }

    #[test]
    fn rx_buffer_without_room_for_data_is_declined() {
        // Found by the vsock_packet fuzz target: a 44-byte rx buffer (header only) while
        // the host side had data made next_rx_packet spin forever.
        let (mut m, c) = muxer();
        let id = connect(&mut m, &c, GPORT);
        c.wire(id).lock().unwrap().to_send.extend(b"data".iter());
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
        let mut payload = Vec::new();
        assert_eq!(m.next_rx_packet(0, &mut payload), None);
        assert!(m.has_rx_work(), "the data still waits for a buffer");
        // Control packets need no payload room and still go out.
        m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
        let hdr = m.next_rx_packet(0, &mut payload).expect("a credit update");
        assert_eq!(hdr.op, OP_CREDIT_UPDATE);
        // A real buffer gets the data.
        let pkts = drain(&mut m, 4096);
        assert_eq!(ops(&pkts), vec![OP_RW]);
        assert_eq!(pkts[0].1, b"data");
    }

    #[test]
    fn rx_work_is_shared_round_robin() {
        let (mut m, c) = muxer();
        let a = connect(&mut m, &c, GPORT);
        let b = connect(&mut m, &c, GPORT + 1);
        for id in [a, b] {
            c.wire(id).lock().unwrap().to_send.extend([0u8; 64]);
            m.handle_host_ready(
                id,
                Readiness {
                    readable: true,
                    writable: false,
                },
            );
        }
        let pkts = drain(&mut m, 16);
        let ports: Vec<u32> = pkts.iter().map(|(h, _)| h.dst_port).collect();
        assert_eq!(ports.len(), 8);
        assert_eq!(&ports[..4], &[GPORT, GPORT + 1, GPORT, GPORT + 1]);
    }

    #[test]
    fn reset_forgets_everything_and_closes_host_sides() {
        let (mut m, c) = muxer();
        let a = connect(&mut m, &c, GPORT);
        m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
        assert_eq!(m.reset(), 1);
        assert!(c.wire(a).lock().unwrap().closed);
        assert!(!m.has_rx_work());
        assert_eq!(m.connection_count(), 0);
    }
}
