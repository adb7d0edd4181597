//! The worker's side of TLS on TCP listeners. The handshake runs here, in the
//! per-connection worker rather than the daemon, so a peer that stalls or a TLS failure
//! (or bug) ends only that one connection.
//!
//! A TLS listener tells TLS guests from plain ones by the connection's first byte:
//! both speak first, and no vmcuda frame starts with a TLS handshake record.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rustls::ServerConfig;
use vmcuda_wire::tls::{self, NoSigPipe, ServerStream, Shared, TlsError, TLS_HANDSHAKE_RECORD};

/// A peer that connects and sends nothing, or stalls mid-handshake, holds its worker
/// this long at most.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The `[tcp]` TLS settings a configuration resolved to.
#[derive(Clone, Debug)]
pub struct TlsServer {
    pub config: Arc<ServerConfig>,
    /// Whether plain-TCP guests are turned away (`[tcp] require_tls`).
    pub required: bool,
}

/// What a connection to a TLS listener turned out to be.
pub enum Accepted {
    /// A completed handshake; the protocol runs over it unchanged.
    Tls(Shared<ServerStream>),
    /// A plain-TCP guest, and plain TCP is allowed (`require_tls = false`).
    Plain(TcpStream),
    /// A plain-TCP guest where TLS is required: it is to be told so, in the protocol
    /// it speaks, and turned away.
    PlainRefused(TcpStream),
    /// The peer left before sending anything.
    Gone,
}

/// Look at the first byte and, for TLS, complete the server handshake.
pub fn accept(tcp: TcpStream, server: &TlsServer) -> Result<Accepted, TlsError> {
    let io = TlsError::Handshake;
    tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).map_err(io)? == 0 {
        return Ok(Accepted::Gone);
    }
    // Socket options belong to the socket, which this clone shares: it lifts the
    // timeout once the rustls stream has taken the original.
    let control = tcp.try_clone().map_err(io)?;
    let accepted = if first[0] == TLS_HANDSHAKE_RECORD {
        Accepted::Tls(tls::accept(tcp, server.config.clone())?)
    } else if server.required {
        // Only its hello is read, to answer it: that keeps the timeout.
        return Ok(Accepted::PlainRefused(tcp));
    } else {
        Accepted::Plain(tcp)
    };
    control.set_read_timeout(None).map_err(io)?;
    Ok(accepted)
}

/// The most plaintext taken from the session's side at once. Taken only when no
/// records wait to go, its records fit rustls's send buffer (64 KiB), so it is
/// accepted whole.
const RELAY_PIECE: usize = 16 << 10;

/// The guest's decrypted bytes held for the session's worker before the relay stops
/// reading the guest (the session's worker reads them as it serves).
const RELAY_BACKLOG: usize = 1 << 20;

/// Carry a TLS guest that came back to its session ([`crate::resume`]) to the
/// session's worker, which holds the other end of `plain`: the guest's records
/// decrypted onto `plain`, and what comes back on it encrypted to the guest, until
/// either side ends; then both are shut down (the session's worker sees a drop and
/// holds the session again). The connection's keys stay in this worker, the one
/// that made the handshake. One thread, neither socket blocking: neither direction
/// ever waits for the other.
pub fn relay(stream: ServerStream, plain: UnixStream) -> io::Result<()> {
    let rustls::StreamOwned { conn, sock } = stream;
    let ended = pump(conn, &sock, &plain);
    let _ = plain.shutdown(Shutdown::Both);
    let _ = sock.0.shutdown(Shutdown::Both);
    ended
}

fn pump(
    mut conn: rustls::ServerConnection,
    sock: &NoSigPipe<TcpStream>,
    mut plain: &UnixStream,
) -> io::Result<()> {
    sock.0.set_nonblocking(true)?;
    plain.set_nonblocking(true)?;
    let mut tcp = NoSigPipe(sock.0.try_clone()?);
    let blocked = |e: &io::Error| e.kind() == io::ErrorKind::WouldBlock;
    // The guest's plaintext not yet taken by the session's worker.
    let mut backlog: Vec<u8> = Vec::new();
    let mut piece = vec![0u8; RELAY_PIECE];
    // Whether the session's worker still has its end open.
    let mut session_open = true;
    loop {
        while conn.wants_write() {
            match conn.write_tls(&mut tcp) {
                Ok(_) => {}
                Err(e) if blocked(&e) => break,
                Err(e) => return Err(e),
            }
        }
        while !backlog.is_empty() {
            match plain.write(&backlog) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    backlog.drain(..n);
                }
                Err(e) if blocked(&e) => break,
                Err(e) => return Err(e),
            }
        }
        // The session's side ended and its close_notify went out.
        if !session_open && !conn.wants_write() {
            return Ok(());
        }
        let mut tcp_events = PollFlags::empty();
        if backlog.len() < RELAY_BACKLOG {
            tcp_events |= PollFlags::POLLIN;
        }
        if conn.wants_write() {
            tcp_events |= PollFlags::POLLOUT;
        }
        let mut plain_events = PollFlags::empty();
        if session_open && !conn.wants_write() {
            plain_events |= PollFlags::POLLIN;
        }
        if !backlog.is_empty() {
            plain_events |= PollFlags::POLLOUT;
        }
        // Only sockets with something to wait for are polled: a hung-up one left
        // in the set would wake the loop for nothing.
        let mut fds = Vec::with_capacity(2);
        if !tcp_events.is_empty() {
            fds.push(PollFd::new(sock.0.as_fd(), tcp_events));
        }
        if !plain_events.is_empty() {
            fds.push(PollFd::new(plain.as_fd(), plain_events));
        }
        match nix::poll::poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |events: PollFlags, at: usize| {
            let wake = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
            !events.is_empty() && fds[at].revents().is_some_and(|r| r.intersects(wake))
        };
        let (tcp_ready, plain_ready) = (
            ready(tcp_events, 0),
            ready(plain_events, usize::from(!tcp_events.is_empty())),
        );
        if tcp_ready && tcp_events.contains(PollFlags::POLLIN) {
            match conn.read_tls(&mut tcp) {
                // The guest's connection closed: it may come back on another.
                Ok(0) => return Ok(()),
                Ok(_) => {
                    // A bad record queues its alert: sent before the end.
                    if let Err(e) = conn.process_new_packets() {
                        let _ = conn.write_tls(&mut tcp);
                        return Err(io::Error::other(e));
                    }
                    loop {
                        match conn.reader().read(&mut piece) {
                            Ok(0) => return Ok(()),
                            Ok(n) => backlog.extend_from_slice(&piece[..n]),
                            Err(e) if blocked(&e) => break,
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) if blocked(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if plain_ready && plain_events.contains(PollFlags::POLLIN) {
            match plain.read(&mut piece) {
                Ok(0) => {
                    session_open = false;
                    conn.send_close_notify();
                }
                Ok(n) => conn.writer().write_all(&piece[..n])?,
                Err(e) if blocked(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use vmcuda_wire::frame::{self, FrameHeader, FLAG_REPLY};
    use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
    use vmcuda_wire::op::{Hello, HelloReply, Op};
    use vmcuda_wire::tls::testing::TestPki;
    use vmcuda_wire::CudaStatus;

    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use crate::session::Session;
    use crate::worker;

    /// One connection accepted on loopback and handed to [`accept`], as a worker does;
    /// a TLS or allowed plain guest is then served by the worker's frame loop.
    fn serve_one(
        server: TlsServer,
    ) -> (
        String,
        std::thread::JoinHandle<Result<&'static str, String>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let open = |_: &Hello| {
                let exec = HostMemoryExecutor::new(1 << 20, None).unwrap();
                Ok(Session::new(Box::new(exec), Grant::unlimited("test")))
            };
            let served =
                |r: Result<worker::Ended, vmcuda_wire::FrameError>| r.map_err(|e| e.to_string());
            Ok(match accept(tcp, &server).map_err(|e| e.to_string())? {
                Accepted::Tls(s) => served(worker::serve(
                    s.clone(),
                    s,
                    Default::default(),
                    open,
                    None,
                    None,
                ))
                .map(|_| "tls")?,
                Accepted::Plain(s) => served(worker::serve(
                    s.try_clone().unwrap(),
                    s,
                    Default::default(),
                    open,
                    None,
                    None,
                ))
                .map(|_| "plain")?,
                Accepted::PlainRefused(_) => "refused",
                Accepted::Gone => "gone",
            })
        });
        (addr, handle)
    }

    /// A hello, and the reply's status and (on success) device count.
    fn hello(s: &mut (impl Read + Write)) -> (CudaStatus, Option<i32>) {
        let meta = postcard::to_stdvec(&Hello {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
            capabilities: 0,
            token: vec![],
            client: "tls-test".into(),
            pid: 1,
        })
        .unwrap();
        let h = FrameHeader::new(Op::Hello.code(), 0, 1, meta.len(), 0);
        frame::write_frame(s, &h, &meta, &[]).unwrap();
        s.flush().unwrap();
        let (h, meta) = frame::read_head(s).unwrap();
        assert!(h.has(FLAG_REPLY));
        let status = CudaStatus(h.status.get());
        let devices = (status == CudaStatus::Success).then(|| {
            postcard::from_bytes::<HelloReply>(&meta)
                .unwrap()
                .device_count
        });
        (status, devices)
    }

    #[test]
    fn tls_guests_are_served_and_plain_ones_sorted_by_require_tls() {
        let dir = std::env::temp_dir().join(format!("vmcuda-host-tls-{}", std::process::id()));
        let pki = TestPki::new(&dir, &["127.0.0.1"]);
        let config = vmcuda_wire::tls::server_config(&pki.cert, &pki.key).unwrap();
        let server = |required| TlsServer {
            config: config.clone(),
            required,
        };
        let client = vmcuda_wire::tls::client_config(&pki.ca).unwrap();

        // The protocol runs unchanged over TLS: a hello and its reply.
        let (addr, worker) = serve_one(server(true));
        let mut s = vmcuda_wire::tls::connect(&addr, "127.0.0.1", client.clone()).unwrap();
        assert_eq!(hello(&mut s), (CudaStatus::Success, Some(1)));
        drop(s);
        assert_eq!(worker.join().unwrap(), Ok("tls"));

        // Plain TCP: turned away where TLS is required, served where it is not.
        let (addr, worker) = serve_one(server(true));
        let mut plain = std::net::TcpStream::connect(&addr).unwrap();
        plain.write_all(b"VMCU").unwrap();
        assert_eq!(worker.join().unwrap(), Ok("refused"));
        let (addr, worker) = serve_one(server(false));
        let mut plain = std::net::TcpStream::connect(&addr).unwrap();
        assert_eq!(hello(&mut plain), (CudaStatus::Success, Some(1)));
        drop(plain);
        assert_eq!(worker.join().unwrap(), Ok("plain"));

        // A peer that leaves at once, and one whose handshake fails.
        let (addr, worker) = serve_one(server(true));
        drop(std::net::TcpStream::connect(&addr).unwrap());
        assert_eq!(worker.join().unwrap(), Ok("gone"));
        let (addr, worker) = serve_one(server(true));
        let mut bogus = std::net::TcpStream::connect(&addr).unwrap();
        bogus
            .write_all(&[TLS_HANDSHAKE_RECORD, 0xff, 0xff, 0, 1, 0])
            .unwrap();
        let e = worker.join().unwrap().unwrap_err();
        assert!(!e.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A TLS guest on one side of [`relay`], a plain socket on the other: bytes both
    /// ways at once (more than any socket buffer holds, so a relay that let one
    /// direction wait for the other would stall), then each side's end seen by the
    /// other.
    #[test]
    fn the_relay_carries_both_ways_at_once_and_passes_each_end_on() {
        let dir = std::env::temp_dir().join(format!("vmcuda-host-relay-{}", std::process::id()));
        let pki = TestPki::new(&dir, &["127.0.0.1"]);
        let config = vmcuda_wire::tls::server_config(&pki.cert, &pki.key).unwrap();
        let client = vmcuda_wire::tls::client_config(&pki.ca).unwrap();
        let server = TlsServer {
            config,
            required: true,
        };
        let relayed = |server: TlsServer| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let (session_end, relay_end) = UnixStream::pair().unwrap();
            let relay = std::thread::spawn(move || {
                let (tcp, _) = listener.accept().unwrap();
                let Accepted::Tls(stream) = accept(tcp, &server).unwrap() else {
                    panic!("not TLS");
                };
                super::relay(stream.into_inner().unwrap(), relay_end)
            });
            (addr, session_end, relay)
        };
        const LEN: usize = 8 << 20;
        let pattern = |i: usize| (i * 7 % 251) as u8;

        // The session's side sends its 8 MiB while it reads the guest's; the guest
        // writes all of its own before it reads anything back: the guest's bytes must
        // get through while the other direction is backed up.
        let (addr, session_end, relay) = relayed(server.clone());
        let session = std::thread::spawn(move || {
            let mut w = session_end.try_clone().unwrap();
            let sender = std::thread::spawn(move || {
                let out: Vec<u8> = (0..LEN).map(|i| pattern(i + 1)).collect();
                w.write_all(&out).unwrap();
            });
            let mut got = Vec::new();
            (&session_end).read_to_end(&mut got).unwrap();
            sender.join().unwrap();
            got
        });
        let mut guest = vmcuda_wire::tls::connect(&addr, "127.0.0.1", client.clone()).unwrap();
        let sent: Vec<u8> = (0..LEN).map(pattern).collect();
        for chunk in sent.chunks(64 << 10) {
            guest.write_all(chunk).unwrap();
        }
        guest.flush().unwrap();
        let mut back = vec![0u8; LEN];
        guest.read_exact(&mut back).unwrap();
        assert!(
            back.iter().enumerate().all(|(i, b)| *b == pattern(i + 1)),
            "the session's bytes came to the guest changed"
        );
        // The guest leaves: the session's side sees its end, and the relay ends.
        drop(guest);
        assert!(
            session.join().unwrap() == sent,
            "the guest's bytes came changed"
        );
        relay.join().unwrap().unwrap();

        // The session's side leaves: the guest reads the TLS end (close_notify).
        let (addr, session_end, relay) = relayed(server);
        let mut guest = vmcuda_wire::tls::connect(&addr, "127.0.0.1", client).unwrap();
        (&session_end).write_all(b"bye").unwrap();
        drop(session_end);
        let mut rest = Vec::new();
        guest.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"bye");
        relay.join().unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
