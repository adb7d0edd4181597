//! The worker's side of TLS on TCP listeners. The handshake runs here, in the
//! per-connection worker rather than the daemon, so a peer that stalls or a TLS failure
//! (or bug) ends only that one connection.
//!
//! A TLS listener tells TLS guests from plain ones by the connection's first byte:
//! both speak first, and no vmcuda frame starts with a TLS handshake record.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use vmcuda_wire::tls::{self, ServerStream, Shared, TlsError, TLS_HANDSHAKE_RECORD};

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
}
