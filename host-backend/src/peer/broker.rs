//! The daemon's side of the peer link: a broker thread for each worker's socket, the
//! table of transfers workers expect, and the mutual-TLS listener other daemons
//! deliver to.
//!
//! Workers cannot open connections (their system call filter forbids it); the daemon
//! opens them for them, only to the endpoints `[peers] allow` names, and delivers an
//! incoming transfer only to the worker that registered its ticket, once.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::{ClientConfig, ServerConfig};
use tracing::{info, warn};
use vmcuda_wire::tls::{self, Shared};

use super::proto::{self, Msg, Outcome, Ticket, MAX_CHUNK, TRANSFER_HEADER_LEN};
use crate::admission::Pending;
use crate::source_log::Source;
use crate::source_log::{self, SourceLog};

/// How long a registered ticket waits for its sender, and a sender's bytes for the
/// receiving worker.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(60);
/// A peer connection that stalls this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Transfers one worker may have registered at once, and all workers together.
const MAX_TICKETS_PER_WORKER: usize = 16;
const MAX_TICKETS: usize = 4096;
/// Peer connections being served at once (each holds a thread), and how many of them
/// one source (an IPv4 address, an IPv6 /64) may hold: a host that floods the port
/// leaves the rest to the other daemons.
const MAX_PEER_CONNECTIONS: u32 = 256;
const MAX_PEER_CONNECTIONS_PER_SOURCE: u32 = 64;
/// How long a connection has for its whole TLS handshake: a daemon's takes
/// milliseconds, and one that says nothing holds its place no longer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// A `tracing` event about a connection to the peer port from `$source`, under the
/// broker's [`Broker::port_log`]: anyone who can reach the port can cause these lines
/// (refused, failed handshakes, bad headers), so each source is held to its share.
macro_rules! peer_port {
    ($log:expr, $source:expr, $level:ident, $($arg:tt)+) => {
        if $log.allow($source) {
            tracing::$level!($($arg)+);
        }
    };
}

/// A sending daemon's connection once its TLS handshake is done: what the receiving
/// worker's bytes are read from, and its answers written to.
pub trait Transfer: Read + Write + Send {}
impl<T: Read + Write + Send> Transfer for T {}

type Incoming = Box<dyn Transfer>;

/// A transfer a worker registered.
struct Expected {
    /// The daemon's number for the worker's connection.
    owner: u64,
    size: u64,
    deadline: Instant,
    /// A sender came for it: the ticket is spent, whatever happens next.
    claimed: bool,
    /// The sender's connection, once its header was accepted.
    stream: Option<Incoming>,
}

/// What the daemon needs for the peer link, from `[peers]`.
pub struct Broker {
    advertise: String,
    allow: Vec<String>,
    client: Arc<ClientConfig>,
    expected: Mutex<HashMap<Ticket, Expected>>,
    arrived: Condvar,
    /// The limits on lines about connections to the peer port.
    port_log: SourceLog,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("advertise", &self.advertise)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl Broker {
    pub fn new(advertise: String, allow: Vec<String>, client: Arc<ClientConfig>) -> Broker {
        Broker {
            advertise,
            allow,
            client,
            expected: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
            port_log: SourceLog::new("peer port connections"),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Ticket, Expected>> {
        self.expected.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serve one worker's socket until the worker is gone; its tickets go with it.
    pub fn serve_worker(&self, socket: UnixStream, owner: u64) {
        let mut reader = match socket.try_clone() {
            Ok(r) => io::BufReader::new(r),
            Err(e) => {
                warn!(connection = owner, "peer broker: {e}");
                return;
            }
        };
        let mut writer = socket;
        loop {
            let msg = match proto::read_msg(&mut reader) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => {
                    warn!(
                        connection = owner,
                        "peer broker: {e}; the worker's link is closed"
                    );
                    break;
                }
            };
            if let Err(e) = self.serve_request(owner, msg, &mut reader, &mut writer) {
                warn!(
                    connection = owner,
                    "peer broker: {e}; the worker's link is closed"
                );
                break;
            }
        }
        self.worker_gone(owner);
    }

    /// Serve one message the worker `owner` sent, reading what follows it (a send's
    /// bytes) from `r` and answering on `w`. An error means the worker's link is out
    /// of step: it is to be closed.
    pub fn serve_request(
        &self,
        owner: u64,
        msg: Msg,
        r: &mut impl Read,
        w: &mut impl Write,
    ) -> io::Result<()> {
        match msg {
            Msg::Expect { size } => self.expect(owner, size, w),
            Msg::Send {
                ticket,
                size,
                endpoint,
            } => self.send(owner, &ticket, size, &endpoint, r, w),
            Msg::Receive { ticket, size } => self.receive(owner, &ticket, size, w),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected {other:?}"),
            )),
        }
    }

    /// The worker `owner` is gone: its tickets go with it.
    pub fn worker_gone(&self, owner: u64) {
        self.table().retain(|_, e| e.owner != owner);
    }

    fn expect(&self, owner: u64, size: u64, w: &mut impl Write) -> io::Result<()> {
        let now = Instant::now();
        let mut table = self.table();
        table.retain(|_, e| e.deadline > now);
        let mine = table.values().filter(|e| e.owner == owner).count();
        if mine >= MAX_TICKETS_PER_WORKER || table.len() >= MAX_TICKETS {
            drop(table);
            warn!(
                connection = owner,
                "peer transfer refused: too many transfers outstanding"
            );
            return proto::write_msg(w, &Msg::End(Outcome::TooMany));
        }
        let mut ticket = [0u8; 16];
        if let Err(e) = tls::random_bytes(&mut ticket) {
            drop(table);
            warn!(connection = owner, "peer transfer refused: {e}");
            return proto::write_msg(w, &Msg::End(Outcome::Broken));
        }
        table.insert(
            ticket,
            Expected {
                owner,
                size,
                deadline: now + TICKET_LIFETIME,
                claimed: false,
                stream: None,
            },
        );
        drop(table);
        proto::write_msg(
            w,
            &Msg::Ticket {
                ticket,
                endpoint: self.advertise.clone(),
            },
        )
    }

    /// Open the link to `endpoint` and say which transfer follows.
    fn open(
        &self,
        ticket: &Ticket,
        size: u64,
        endpoint: &str,
    ) -> Result<TlsOut, (Outcome, String)> {
        let unreachable = |e: String| (Outcome::Unreachable, e);
        let addr = endpoint
            .to_socket_addrs()
            .map_err(|e| unreachable(e.to_string()))?
            .next()
            .ok_or_else(|| unreachable("no address".into()))?;
        let tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| unreachable(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(IO_TIMEOUT))
            .and_then(|()| tcp.set_write_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| unreachable(e.to_string()))?;
        let mut out = tls::connect_over(tcp, tls::host_of(endpoint), self.client.clone())
            .map_err(|e| unreachable(e.to_string()))?;
        let mut answer = [0u8; 1];
        out.write_all(&proto::transfer_header(ticket, size))
            .and_then(|()| out.flush())
            .and_then(|()| out.read_exact(&mut answer))
            .map_err(|e| (Outcome::Refused, e.to_string()))?;
        match proto::outcome_byte(answer[0]) {
            Outcome::Done => Ok(out),
            o => Err((o, o.describe().into())),
        }
    }

    fn send(
        &self,
        owner: u64,
        ticket: &Ticket,
        size: u64,
        endpoint: &str,
        r: &mut impl Read,
        w: &mut impl Write,
    ) -> io::Result<()> {
        // The guest chose the endpoint: only those the administrator named are tried.
        if !self.allow.iter().any(|a| a == endpoint) {
            warn!(connection = owner, endpoint = ?endpoint,
                "peer transfer refused: the endpoint is not in [peers] allow");
            return proto::write_msg(w, &Msg::End(Outcome::NotAllowed));
        }
        let mut out = match self.open(ticket, size, endpoint) {
            Ok(out) => out,
            Err((outcome, why)) => {
                warn!(connection = owner, endpoint = ?endpoint, "peer transfer not sent: {why}");
                return proto::write_msg(w, &Msg::End(outcome));
            }
        };
        proto::write_msg(w, &Msg::Go)?;
        // Every byte the worker announced is read, even once the link broke, so the
        // worker's socket stays in step; none beyond `size` is taken.
        let mut left = size;
        let mut failed: Option<Outcome> = None;
        while left > 0 {
            match proto::read_msg(r)? {
                Msg::Data(bytes) if bytes.len() as u64 <= left => {
                    left -= bytes.len() as u64;
                    if failed.is_none() {
                        if let Err(e) = out.write_all(&bytes) {
                            warn!(connection = owner, endpoint = ?endpoint, "peer transfer broke: {e}");
                            failed = Some(Outcome::Broken);
                        }
                    }
                }
                Msg::Abort => {
                    failed.get_or_insert(Outcome::Aborted);
                    break;
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "more bytes than the transfer's size, or no bytes",
                    ))
                }
            }
        }
        let outcome = match failed {
            Some(o) => o,
            None => {
                let mut done = [0u8; 1];
                match out.flush().and_then(|()| out.read_exact(&mut done)) {
                    Ok(()) => proto::outcome_byte(done[0]),
                    Err(e) => {
                        warn!(connection = owner, endpoint = ?endpoint, "peer transfer broke: {e}");
                        Outcome::Broken
                    }
                }
            }
        };
        if outcome == Outcome::Done {
            info!(connection = owner, endpoint = ?endpoint, bytes = size, "peer transfer sent");
        } else {
            warn!(connection = owner, endpoint = ?endpoint, bytes = size,
                "peer transfer failed: {}", outcome.describe());
        }
        proto::write_msg(w, &Msg::End(outcome))
    }

    fn receive(
        &self,
        owner: u64,
        ticket: &Ticket,
        size: u64,
        w: &mut impl Write,
    ) -> io::Result<()> {
        let mut table = self.table();
        match table.get(ticket) {
            Some(e) if e.owner == owner && e.size == size => {}
            _ => {
                drop(table);
                warn!(
                    connection = owner,
                    "peer receive refused: no such ticket for this connection"
                );
                return proto::write_msg(w, &Msg::End(Outcome::UnknownTicket));
            }
        }
        // Wait for the sender's connection, until the ticket expires.
        let stream = loop {
            // Gone: expired and pruned, or spent by a sender of another size.
            let Some(entry) = table.get_mut(ticket) else {
                break None;
            };
            if let Some(s) = entry.stream.take() {
                table.remove(ticket);
                break Some(s);
            }
            let now = Instant::now();
            if now >= entry.deadline {
                table.remove(ticket);
                break None;
            }
            let wait = entry.deadline - now;
            table = self
                .arrived
                .wait_timeout(table, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        drop(table);
        let Some(mut stream) = stream else {
            warn!(
                connection = owner,
                bytes = size,
                "peer transfer expected but no sender delivered it in time"
            );
            return proto::write_msg(w, &Msg::End(Outcome::TimedOut));
        };
        let mut buf = vec![0u8; MAX_CHUNK.min(size as usize)];
        let mut left = size;
        while left > 0 {
            let want = (left as usize).min(buf.len());
            match stream.read(&mut buf[..want]) {
                Ok(0) | Err(_) => {
                    warn!(
                        connection = owner,
                        bytes = size,
                        got = size - left,
                        "peer transfer broke before its last byte"
                    );
                    return proto::write_msg(w, &Msg::End(Outcome::Broken));
                }
                Ok(n) => {
                    proto::write_data(w, &buf[..n])?;
                    left -= n as u64;
                }
            }
        }
        // The sender learns the bytes are here; the worker learns they are whole.
        let _ = stream
            .write_all(&[Outcome::Done as u8])
            .and_then(|()| stream.flush());
        info!(connection = owner, bytes = size, "peer transfer received");
        proto::write_msg(w, &Msg::End(Outcome::Done))
    }

    /// A sender's header for `ticket`: whether it may deliver. Spends the ticket
    /// either way it matches, so it is never delivered twice.
    fn claim(&self, ticket: &Ticket, size: u64) -> Result<(), Outcome> {
        let now = Instant::now();
        let mut table = self.table();
        match table.get_mut(ticket) {
            Some(e) if !e.claimed && e.deadline > now && e.size == size => {
                e.claimed = true;
                Ok(())
            }
            // A size other than registered spends it too: someone holds the ticket and
            // is not the guest's own sender.
            Some(e) if !e.claimed && e.deadline > now => {
                table.remove(ticket);
                Err(Outcome::Refused)
            }
            _ => Err(Outcome::Refused),
        }
    }

    /// Hand a claimed transfer's connection to the worker waiting for it.
    fn deliver(&self, ticket: &Ticket, stream: Incoming) {
        let mut table = self.table();
        if let Some(e) = table.get_mut(ticket) {
            e.stream = Some(stream);
            self.arrived.notify_all();
        }
    }

    /// Serve one connection from another daemon: mutual TLS, then the header.
    fn serve_peer(&self, tcp: TcpStream, source: &Source, server: Arc<ServerConfig>) {
        let from = tcp.peer_addr().map_or("?".into(), |a| a.to_string());
        let _ = tcp.set_nodelay(true);
        if let Err(e) = tcp
            .set_read_timeout(Some(IO_TIMEOUT))
            .and_then(|()| tcp.set_write_timeout(Some(IO_TIMEOUT)))
        {
            peer_port!(self.port_log, source, warn, %from, "peer connection dropped: {e}");
            return;
        }
        let stream = match tls::accept_within(tcp, server, HANDSHAKE_TIMEOUT) {
            Ok(s) => s,
            Err(e) => {
                peer_port!(self.port_log, source, warn, %from, "peer connection refused: {e}");
                return;
            }
        };
        self.serve_transfer(stream, source, &from);
    }

    /// Serve a sending daemon's connection `from` (of `source`) once its TLS handshake
    /// is done: its header, then the claimed transfer handed to the worker that
    /// registered it.
    pub fn serve_transfer(&self, mut stream: impl Transfer + 'static, source: &Source, from: &str) {
        let mut header = [0u8; TRANSFER_HEADER_LEN];
        if let Err(e) = stream.read_exact(&mut header) {
            peer_port!(self.port_log, source, warn, %from,
                "peer connection dropped before its header: {e}");
            return;
        }
        let Some((ticket, size)) = proto::parse_transfer_header(&header) else {
            peer_port!(self.port_log, source, warn, %from,
                "peer connection refused: not a transfer header");
            return;
        };
        if let Err(outcome) = self.claim(&ticket, size) {
            peer_port!(self.port_log, source, warn, %from, bytes = size,
                "peer transfer refused: unknown, used or expired ticket, or another size");
            let _ = stream
                .write_all(&[outcome as u8])
                .and_then(|()| stream.flush());
            return;
        }
        if stream
            .write_all(&[Outcome::Done as u8])
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
        self.deliver(&ticket, Box::new(stream));
    }
}

/// The sending daemon's TLS stream.
type TlsOut = Shared<tls::ClientStream>;

/// The mutual-TLS configurations `[peers]` resolved to.
#[derive(Clone, Debug)]
pub struct PeerTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

/// Accept other daemons' connections on `addr` forever (`[peers] listen`).
pub fn listen(
    broker: Arc<Broker>,
    addr: &str,
    server: Arc<ServerConfig>,
) -> io::Result<(std::net::SocketAddr, thread::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    info!(addr = %local, advertise = %broker.advertise, "listening for peer daemons (mutual TLS)");
    let active = Pending::new(MAX_PEER_CONNECTIONS, MAX_PEER_CONNECTIONS_PER_SOURCE);
    // What the limits dropped is said even when the sources say nothing more.
    let summaries = Arc::downgrade(&broker);
    thread::spawn(move || loop {
        thread::sleep(source_log::SUMMARY_EVERY);
        match summaries.upgrade() {
            Some(broker) => broker.port_log.summarize(),
            None => return,
        }
    });
    let handle = thread::spawn(move || {
        for conn in listener.incoming() {
            let tcp = match conn {
                Ok(tcp) => tcp,
                Err(e) => {
                    peer_port!(
                        broker.port_log,
                        &Source::Unknown,
                        warn,
                        "peer accept failed: {e}"
                    );
                    continue;
                }
            };
            let source = tcp
                .peer_addr()
                .map_or(Source::Unknown, |a| Source::of_ip(a.ip()));
            let place = match active.enter(source.clone()) {
                Ok(place) => place,
                Err(why) => {
                    peer_port!(broker.port_log, &source, warn, %source, ?why,
                        "peer connection closed: too many at once");
                    continue;
                }
            };
            let (broker, server) = (broker.clone(), server.clone());
            thread::spawn(move || {
                broker.serve_peer(tcp, &source, server);
                drop(place);
            });
        }
    });
    Ok((local, handle))
}
