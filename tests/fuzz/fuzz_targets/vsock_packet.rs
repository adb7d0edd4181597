//! The virtio-vsock side: packet headers decoded from raw bytes, and the connection
//! muxer driven through a script of guest packets, rx buffers and host-socket events
//! (see `vmcuda_fuzz::vsock`). Besides never panicking or spinning, the muxer must
//! keep its bounds: connections within the cap, buffered bytes within the credit it
//! advertises, pending resets within their queue, one open host stream per connection,
//! and packets that fit the rx buffers they were asked for.
#![no_main]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use vmcuda_fuzz::vsock::{decode, Action, GUEST_CID, PORT};
use vmcuda_vmm_glue::muxer::{
    ConnId, Connector, HostStream, Muxer, MuxerConfig, Readiness, MAX_PAYLOAD, MAX_PENDING_RESETS,
};
use vmcuda_vmm_glue::packet::{Header, OP_RW};

const BUF_ALLOC: u32 = 4096;
const MAX_CONNECTIONS: usize = 4;
/// Host bytes one run may queue for the guest: many packets' worth, but bounded so a
/// run stays fast.
const HOST_SEND_BUDGET: usize = 1 << 20;

/// One host socket as the fuzzer plays it.
#[derive(Default)]
struct Socket {
    to_guest: VecDeque<u8>,
    room: usize,
    eof: bool,
    broken: bool,
    write_shut: bool,
    closed: bool,
}

type SocketRef = Rc<RefCell<Socket>>;

struct Stream(SocketRef);

impl HostStream for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self.0.borrow_mut();
        if s.to_guest.is_empty() && !s.eof {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        io::Read::read(&mut s.to_guest, buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self.0.borrow_mut();
        assert!(!s.write_shut, "write after the host stream was half-closed");
        if s.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if s.room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(s.room);
        s.room -= n;
        Ok(n)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        let mut s = self.0.borrow_mut();
        assert!(!s.write_shut, "host stream half-closed twice");
        s.write_shut = true;
        Ok(())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.borrow_mut().closed = true;
    }
}

/// Hands out sockets and remembers them, in connection order, for the script.
#[derive(Clone, Default)]
struct Spawner {
    sockets: Rc<RefCell<Vec<(ConnId, SocketRef)>>>,
    fail: Rc<Cell<bool>>,
}

impl Connector for Spawner {
    type Stream = Stream;

    fn connect(&mut self, id: ConnId, _guest_port: u32) -> io::Result<Stream> {
        if self.fail.get() {
            return Err(io::Error::other("spawn failed"));
        }
        let socket = Rc::new(RefCell::new(Socket {
            room: usize::MAX,
            ..Default::default()
        }));
        self.sockets.borrow_mut().push((id, socket.clone()));
        Ok(Stream(socket))
    }
}

impl Spawner {
    fn socket(&self, conn: u8) -> Option<(ConnId, SocketRef)> {
        let sockets = self.sockets.borrow();
        if sockets.is_empty() {
            return None;
        }
        Some(sockets[usize::from(conn) % sockets.len()].clone())
    }

    fn open(&self) -> usize {
        self.sockets
            .borrow()
            .iter()
            .filter(|(_, s)| !s.borrow().closed)
            .count()
    }
}

fn check_bounds(m: &Muxer<Spawner>, spawner: &Spawner) {
    let conns = m.connection_count();
    assert!(conns <= MAX_CONNECTIONS);
    assert!(m.buffered_bytes() <= conns * BUF_ALLOC as usize);
    assert!(m.pending_resets() <= MAX_PENDING_RESETS);
    assert_eq!(
        spawner.open(),
        conns,
        "host streams open without a connection, or the reverse"
    );
}

/// Offer one rx buffer; check the packet that fills it.
fn rx(m: &mut Muxer<Spawner>, max_payload: usize, payload: &mut Vec<u8>) -> Option<Header> {
    let had_work = m.has_rx_work();
    let hdr = m.next_rx_packet(max_payload, payload)?;
    assert!(had_work, "a packet from a muxer that said it had none");
    assert_eq!(hdr.len as usize, payload.len());
    assert!(payload.len() <= max_payload.min(MAX_PAYLOAD as usize));
    assert_eq!(hdr.dst_cid, GUEST_CID);
    assert_eq!(
        hdr.op == OP_RW,
        !payload.is_empty(),
        "data packets carry data, others none"
    );
    assert_eq!(Header::from_bytes(&hdr.to_bytes()), hdr);
    Some(hdr)
}

fuzz_target!(|input: &[u8]| {
    let spawner = Spawner::default();
    let mut cfg = MuxerConfig::new(GUEST_CID, PORT);
    cfg.buf_alloc = BUF_ALLOC;
    cfg.max_connections = MAX_CONNECTIONS;
    let mut m = Muxer::new(cfg, spawner.clone());
    let mut payload = Vec::new();
    let mut budget = HOST_SEND_BUDGET;

    for action in decode(input) {
        match action {
            Action::Raw {
                header,
                payload: bytes,
            } => {
                let hdr = Header::from_bytes(&header);
                assert_eq!(
                    hdr.to_bytes(),
                    header,
                    "header decoding is not the inverse of encoding"
                );
                m.handle_guest_packet(&hdr, &bytes);
            }
            Action::Packet {
                op,
                port,
                flags,
                buf_alloc,
                fwd_cnt,
                len,
                fill,
            } => {
                let hdr = Action::packet_header(op, port, flags, buf_alloc, fwd_cnt, len);
                m.handle_guest_packet(&hdr, &vec![fill; usize::from(len)]);
            }
            Action::Ready {
                conn,
                readable,
                writable,
            } => {
                if let Some((id, _)) = spawner.socket(conn) {
                    m.handle_host_ready(id, Readiness { readable, writable });
                }
            }
            Action::HostSend { conn, len } => {
                if let Some((_, s)) = spawner.socket(conn) {
                    let len = usize::from(len).min(budget);
                    budget -= len;
                    let mut s = s.borrow_mut();
                    let queued = s.to_guest.len();
                    s.to_guest.resize(queued + len, conn);
                }
            }
            Action::HostRoom { conn, room } => {
                if let Some((_, s)) = spawner.socket(conn) {
                    s.borrow_mut().room = usize::from(room);
                }
            }
            Action::HostEof { conn } => {
                if let Some((_, s)) = spawner.socket(conn) {
                    s.borrow_mut().eof = true;
                }
            }
            Action::HostBroken { conn } => {
                if let Some((_, s)) = spawner.socket(conn) {
                    s.borrow_mut().broken = true;
                }
            }
            Action::Rx { max_payload } => {
                rx(&mut m, usize::from(max_payload), &mut payload);
            }
            Action::Reset => {
                m.reset();
            }
            Action::ConnectFails(fails) => spawner.fail.set(fails),
        }
        check_bounds(&m, &spawner);
    }

    // The guest gives generous rx buffers until the muxer has nothing more to say,
    // which must happen: host data is bounded by the budget and the guest's credit.
    let mut packets = 0;
    while rx(&mut m, MAX_PAYLOAD as usize, &mut payload).is_some() {
        packets += 1;
        assert!(packets < 100_000, "the muxer never runs out of packets");
    }
    check_bounds(&m, &spawner);
});
