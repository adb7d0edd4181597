//! The connection to the host backend.
//!
//! One connection per process, opened on first need and shared by all threads under a
//! lock (a request and its reply are one critical section). Kernel console output the
//! host sends ahead of a reply is written to this process's own C `stdout`/`stderr`,
//! where a native run's driver would have written it.

mod connection;
mod console;
mod credentials;
mod hosts;
mod resume;
mod ring;
mod servers;

use connection::frame_bytes;
pub(crate) use console::write_console;
pub use credentials::*;
pub use hosts::Hosts;
pub use servers::*;

use std::io::{self, BufReader, IoSlice, Read};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use zerocopy::IntoBytes;

use crate::posted::PostedFrames;

use vmcuda_wire::frame::{
    self, FrameError, FrameHeader, FLAG_EVENT, FLAG_FD, FLAG_NO_REPLY, FLAG_REPLY, HEADER_LEN,
};
use vmcuda_wire::handshake::{caps, PROTOCOL_VERSION, RUNTIME_VERSION, WELL_KNOWN_PORT};
use vmcuda_wire::op::{Console, Hello, HelloReply, Op, Request, OP_CONSOLE};
use vmcuda_wire::polling::{self, PollingReader};
use vmcuda_wire::ring::{RingReader, RingWriter};
use vmcuda_wire::tls::TlsError;
use vmcuda_wire::transport::{
    AddrError, ConnectError, ServerAddr, Stream, DEFAULT_UNIX_PATH, HOST_CID,
};
use vmcuda_wire::CudaStatus;

/// What must happen before a request is sent, which a layer above the connection sets:
/// managed memory settles its pages before device work ([`crate::managed::before_op`],
/// set once the program has managed memory). The connection itself knows nothing of it.
static BEFORE_SEND: OnceLock<fn(Op) -> Result<(), CudaStatus>> = OnceLock::new();

/// Have `hook` run before every request from now on (the first one set stays).
pub fn set_before_send(hook: fn(Op) -> Result<(), CudaStatus>) {
    let _ = BEFORE_SEND.set(hook);
}

fn before_send(op: Op) -> Result<(), CudaStatus> {
    BEFORE_SEND.get().map_or(Ok(()), |hook| hook(op))
}

/// Copies on the socket travel in frames of at most this many bytes (`VMCUDA_CHUNK`
/// to measure others). Each frame costs the host some 25-45 us besides its bytes (the
/// wait for its header, starting its DMA), so fewer frames move more: on the H200,
/// pinned copies with every byte on a Unix socket went 5.6 / 5.2 / 4.6 GB/s (4, 16,
/// 64 MiB) in 1 MiB frames and 5.9 / 6.5 / 5.3 in 4 MiB frames; 2 and 8 MiB were
/// within noise of 4. Copies larger than a frame still overlap socket and DMA.
pub fn chunk() -> usize {
    static CHUNK: OnceLock<usize> = OnceLock::new();
    *CHUNK.get_or_init(|| {
        std::env::var("VMCUDA_CHUNK")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(4 << 20, |n| n.clamp(64 << 10, 64 << 20))
    })
}

impl Sink<'_> {
    /// The same place, for reading a reply again (after a drop).
    fn again(&mut self) -> Sink<'_> {
        match self {
            Sink::None => Sink::None,
            Sink::Into(buf) => Sink::Into(buf),
            Sink::Grow(buf) => Sink::Grow(buf),
        }
    }
}

/// Where a reply's data section goes.
pub enum Sink<'a> {
    /// The reply carries no data.
    None,
    /// Read the data straight into this buffer; its length must match exactly.
    Into(&'a mut [u8]),
    /// Replace this vector's contents with the data, whatever its length (within the
    /// frame's limit): for replies whose size only the host knows (a linked cubin).
    Grow(&'a mut Vec<u8>),
}

struct Connection {
    reader: BufReader<Incoming>,
    writer: Outgoing,
    next_id: u64,
    broken: bool,
    /// Sticky errors seen per device: the context is unusable and every later call
    /// reports them, including the calls the guest answers without the host.
    sticky: std::collections::HashMap<i32, CudaStatus>,
    /// What the host said about its last error reply, when it said anything.
    reason: Option<String>,
    /// Posted frames not written yet (see [`crate::posted`]).
    posted: PostedFrames,
    /// Set while the flusher thread sleeps until told the queue has something.
    flusher_idle: bool,
    /// The last reply's data length and the worker's time on it (for the profile).
    last_reply_size: (u64, Duration),
    /// What it takes to come back to the host's session after a drop (see
    /// [`resume`]); None where the host holds no sessions.
    resume: Option<resume::Returning>,
    /// Requests sent and not known taken, for sending again after a drop.
    journal: resume::Journal,
    /// The id of the last reply read whole.
    last_reply: u64,
    /// The command ring went with a dropped connection: attach another at the next
    /// call.
    reattach: bool,
}

/// Where replies come from: the socket, or the command ring once attached.
enum Incoming {
    Socket(PollingReader<Stream>),
    Ring(RingReader),
}

impl Read for Incoming {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Incoming::Socket(s) => s.read(buf),
            Incoming::Ring(r) => r.read(buf),
        }
    }
}

/// Where requests go: the socket, or the command ring once attached (the socket then
/// carries only descriptors and doorbells).
struct Outgoing {
    socket: Stream,
    ring: Option<RingWriter>,
}

impl io::Write for Outgoing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.ring {
            Some(r) => r.write(buf),
            None => self.socket.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.ring {
            Some(r) => r.write_vectored(bufs),
            None => self.socket.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.ring {
            Some(r) => r.flush(),
            None => self.socket.flush(),
        }
    }
}

impl Outgoing {
    /// Write one frame with a descriptor: in the same message on the socket, or, with
    /// a ring, the descriptor on the socket first and the frame (marked [`FLAG_FD`])
    /// in the ring, where the host reads the socket for it.
    fn send_with_fd(
        &mut self,
        header: &mut FrameHeader,
        meta: &[u8],
        data: &[u8],
        fd: BorrowedFd<'_>,
    ) -> io::Result<()> {
        match &mut self.ring {
            None => {
                let bufs = [
                    IoSlice::new(header.as_bytes()),
                    IoSlice::new(meta),
                    IoSlice::new(data),
                ];
                self.socket.send_with_fd(&bufs, fd)
            }
            Some(ring) => {
                self.socket.send_with_fd(&[IoSlice::new(&[0])], fd)?;
                header.flags = (header.flags.get() | FLAG_FD).into();
                frame::write_frame(ring, header, meta, data)
            }
        }
    }
}

/// Error replies carry at most a sentence or two of explanation.
const MAX_REASON_LEN: u64 = 4096;

pub struct Client {
    conn: Mutex<Connection>,
    /// Wakes the flusher thread: the posted queue is no longer empty.
    posted_waiting: Condvar,
    flusher: std::sync::Once,
    pub hello: HelloReply,
    pub addr: ServerAddr,
    /// Guest RAM the guest's RAM broker gave this connection (a VM guest's
    /// unprivileged process): its command ring and staging area are carved from it.
    pub area: Option<std::sync::Arc<crate::guest_ram::GuestArea>>,
}

static CLIENT: OnceLock<Result<Hosts, CudaStatus>> = OnceLock::new();

/// Why no connection to the host could be made, in the words the library prints
/// (after `vmcuda: `) and `vmcuda doctor` sorts into findings.
#[derive(Debug, thiserror::Error)]
pub enum ConnectFailure {
    #[error("VMCUDA_SERVER={value}: {source}")]
    BadAddress { value: String, source: AddrError },
    /// The guest's own TLS settings are unusable (the CA file, most often).
    #[error(
        "TLS to {host_port} failed: {source} (VMCUDA_TLS_CA names the CA certificate, PEM, \
         that signed the host's)"
    )]
    TlsSettings {
        host_port: String,
        source: Box<TlsError>,
    },
    /// The TCP connection was made but the TLS handshake failed.
    #[error("TLS to {host_port} failed: {source}{hint}")]
    Tls {
        host_port: String,
        // Boxed: a TLS error is large and every result of connecting carries it.
        source: Box<TlsError>,
        hint: String,
    },
    #[error(
        "no vmcuda host answers at {addr}: {source}. Start `vmcuda-host serve` on the host, \
         or point VMCUDA_SERVER at it (unix:PATH, tcp:HOST:PORT, tls:HOST:PORT or vsock:CID:PORT)."
    )]
    Unreachable { addr: ServerAddr, source: io::Error },
    #[error("cannot use the connection to {addr}: {source}")]
    Setup { addr: ServerAddr, source: io::Error },
    /// Connected, but the peer hung up or answered something other than a hello reply.
    #[error("lost the connection to the vmcuda host at {addr} during the handshake ({source})")]
    Handshake {
        addr: ServerAddr,
        source: FrameError,
    },
    /// The host answered the hello with an error: policy, versions or limits.
    #[error("the host at {addr} refused this program: {}", refusal_text(.reason, *.status))]
    Refused {
        addr: ServerAddr,
        status: CudaStatus,
        reason: Option<String>,
    },
}

fn refusal_text(reason: &Option<String>, status: CudaStatus) -> String {
    match reason {
        Some(reason) => format!("{reason} ({status})"),
        None => status.to_string(),
    }
}

/// How long a call polls for its reply before sleeping (see [`polling`]): longer than
/// the host takes over a launch and synchronize, a small copy or a 1 MiB pinned one,
/// short next to the calls that wait on real GPU work.
const REPLY_POLL_WINDOW: Duration = Duration::from_micros(100);

/// How long a call polls its command ring for the reply before sleeping until a
/// doorbell: polling memory costs no system call, and waking a sleeping thread costs
/// microseconds (on the H100, 16 MiB pinned copies ran at 0.95x native with 100 us of
/// polling, their replies coming after the guest slept). The CUDA driver itself spins
/// through a synchronization where it has cores to spare.
const RING_REPLY_POLL_WINDOW: Duration = Duration::from_millis(2);

/// The process's hosts, connecting on first use. A failure is reported once on
/// stderr and then answered as "no device" for the rest of the process.
pub fn client() -> Result<&'static Hosts, CudaStatus> {
    CLIENT
        .get_or_init(|| {
            let client = connect()?;
            // SAFETY: registers a function that never unwinds (it catches panics) and
            // lives as long as this library's code.
            unsafe { libc::atexit(flush_at_exit) };
            Ok(client)
        })
        .as_ref()
        .map_err(|e| *e)
        .inspect(|c| c.start_flusher())
}

/// The process's hosts if it has connected already (without connecting): calls about
/// memory, streams or events the program already has find their host here.
pub fn connected_hosts() -> Option<&'static Hosts> {
    CLIENT.get().and_then(|c| c.as_ref().ok())
}

/// Whether the process is connected to the host already (the runtime or the driver
/// has been used), without connecting.
pub fn connected() -> bool {
    matches!(CLIENT.get(), Some(Ok(_)))
}

/// At exit, send what the program posted and never waited for: its kernels still run
/// on the host (as a native program's pending work runs until the context goes away).
extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(client)) = CLIENT.get() {
            client.leave(Duration::from_millis(200));
        }
    });
}

fn connect() -> Result<Hosts, CudaStatus> {
    let token = token();
    let connected = servers().and_then(|servers| match servers {
        Servers::Named(addrs) => Hosts::connect(&addrs, &token),
        Servers::Default(candidates) => connect_first(&candidates, |addr| {
            Hosts::connect(std::slice::from_ref(addr), &token)
        }),
    });
    match connected {
        Ok(hosts) => {
            // Whatever VMCUDA_VERBOSE says: results from the test double are not computed.
            for addr in hosts.test_doubles() {
                crate::notice::say_once(&test_double_notice(addr));
            }
            if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                let addrs: Vec<String> = hosts.addrs().map(ToString::to_string).collect();
                eprintln!(
                    "vmcuda: connected to {}: {}",
                    addrs.join(","),
                    hosts.hello.banner
                );
            }
            Ok(hosts)
        }
        Err(e) => {
            eprintln!("vmcuda: {e}");
            Err(CudaStatus::ErrorNoDevice)
        }
    }
}

/// The line every program connected to the test double prints once.
pub fn test_double_notice(addr: &ServerAddr) -> String {
    format!(
        "vmcuda: connected to a TEST DOUBLE (host-memory executor) at {addr}: kernels do not \
         run, results are not computed"
    )
}

fn program_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

impl Client {
    /// Connect to `addr` and exchange hellos, presenting `token`. `tls:` addresses
    /// take their TLS settings from the environment ([`GuestTls::from_env`]).
    pub fn connect(addr: ServerAddr, token: Vec<u8>) -> Result<Client, ConnectFailure> {
        let tls = match &addr {
            ServerAddr::Tls(host_port) => {
                Some(
                    GuestTls::from_env().map_err(|source| ConnectFailure::TlsSettings {
                        host_port: host_port.clone(),
                        source: Box::new(source),
                    })?,
                )
            }
            _ => None,
        };
        // An unprivileged process in a VM gets its connection, and guest RAM, from the
        // guest's RAM broker (see crate::guest_ram); a privileged one makes its own.
        let mut area = None;
        let brokered = match &addr {
            ServerAddr::Vsock { cid, port } => {
                match vmcuda_wire::transport::connect_vsock_from_reserved_port(*cid, *port) {
                    Some(s) => Some(Stream::Vsock(s)),
                    None => match crate::guest_ram::from_broker(*cid, *port) {
                        Ok((fd, a)) => {
                            area = Some(std::sync::Arc::new(a));
                            Some(Stream::vsock_from(fd))
                        }
                        Err(why) => {
                            if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                                eprintln!("vmcuda: {why}; copies and calls travel on the socket");
                            }
                            None
                        }
                    },
                }
            }
            _ => None,
        };
        let connected = match brokered {
            Some(s) => Ok(s),
            None => Stream::connect(&addr, tls.as_ref().map(|t| &t.client)),
        };
        let stream = match connected {
            Ok(s) => s,
            Err(ConnectError::Tls(source)) => {
                return Err(ConnectFailure::Tls {
                    host_port: addr.host_port().unwrap_or_default().to_string(),
                    hint: tls.as_ref().map(|t| t.hint(&source)).unwrap_or_default(),
                    source: Box::new(source),
                })
            }
            Err(ConnectError::Io(source)) => {
                return Err(ConnectFailure::Unreachable { addr, source })
            }
            // Not reached: `tls:` addresses always come with settings above.
            Err(e @ ConnectError::NoTlsSettings) => {
                return Err(ConnectFailure::Setup {
                    addr,
                    source: io::Error::other(e),
                })
            }
        };
        let poll_for = polling::window_from_env(REPLY_POLL_WINDOW);
        let reader = match stream.try_clone() {
            Ok(r) => PollingReader::new(r, stream.socket_fd(), poll_for),
            Err(source) => return Err(ConnectFailure::Setup { addr, source }),
        };
        let mut conn = Connection {
            reader: BufReader::with_capacity(frame::READ_AHEAD, Incoming::Socket(reader)),
            writer: Outgoing {
                socket: stream,
                ring: None,
            },
            next_id: 1,
            broken: false,
            sticky: std::collections::HashMap::new(),
            reason: None,
            posted: PostedFrames::default(),
            flusher_idle: false,
            last_reply_size: (0, Duration::ZERO),
            resume: None,
            journal: Default::default(),
            last_reply: 0,
            reattach: false,
        };
        let resumable = if resume::wanted() { caps::RESUMABLE } else { 0 };
        let hello = Hello {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
            capabilities: caps::CONSOLE | caps::ASYNC_REQUESTS | resumable,
            token,
            client: program_name(),
            pid: std::process::id(),
        };
        match conn.exchange_inner(0, &hello, &[], Sink::None, None) {
            Ok(Ok(reply)) => {
                conn.start_resumable(
                    &addr,
                    tls.as_ref().map(|t| &t.client),
                    area.clone(),
                    &hello,
                    reply.capabilities,
                );
                conn.attach_ring(
                    &addr,
                    polling::window_from_env(RING_REPLY_POLL_WINDOW),
                    area.as_deref(),
                );
                Ok(Client {
                    conn: Mutex::new(conn),
                    posted_waiting: Condvar::new(),
                    flusher: std::sync::Once::new(),
                    hello: reply,
                    addr,
                    area,
                })
            }
            Ok(Err(status)) => Err(ConnectFailure::Refused {
                addr,
                status,
                reason: conn.reason.take(),
            }),
            Err(source) => Err(ConnectFailure::Handshake { addr, source }),
        }
    }

    /// Send one request on behalf of the calling thread (whose current device travels
    /// along) and wait for its reply. `data` is the request's bulk section.
    pub fn call<R: Request>(
        &self,
        device: i32,
        req: &R,
        data: &[u8],
        sink: Sink<'_>,
    ) -> Result<R::Reply, CudaStatus> {
        before_send(R::OP)?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.exchange(device, req, data, sink, None)
    }

    /// Like [`Client::call`], passing a file descriptor along (Unix sockets only).
    pub fn call_with_fd<R: Request>(
        &self,
        device: i32,
        req: &R,
        fd: BorrowedFd<'_>,
    ) -> Result<R::Reply, CudaStatus> {
        before_send(R::OP)?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.exchange(device, req, &[], Sink::None, Some(fd))
    }

    /// Send a request CUDA does not make the caller wait for, without waiting for its
    /// reply: the host sends none, and a failure is reported by the reply to this
    /// process's next waited-for call (as CUDA reports asynchronous errors).
    pub fn post<R: Request>(&self, device: i32, req: &R, data: &[u8]) -> Result<(), CudaStatus> {
        self.post_inner(device, req, data, false)
    }

    /// [`Client::post`], writing the queue at once instead of within
    /// [`crate::posted::FLUSH_DELAY`]: for work whose result the program may look for
    /// in its own memory soon (a copy into pinned host memory), which natively starts
    /// at once.
    pub fn post_now<R: Request>(
        &self,
        device: i32,
        req: &R,
        data: &[u8],
    ) -> Result<(), CudaStatus> {
        self.post_inner(device, req, data, true)
    }

    /// Post `req` (no data) if the connection is free now, else leave it: for clean-up
    /// at a thread's exit, which must not wait behind another thread's long call (the
    /// process may be exiting under it). Whether it was posted.
    pub fn post_if_free<R: Request>(&self, device: i32, req: &R) -> Result<bool, CudaStatus> {
        let conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
        self.post_locked(conn, device, req, &[], false)
            .map(|()| true)
    }

    fn post_inner<R: Request>(
        &self,
        device: i32,
        req: &R,
        data: &[u8],
        now: bool,
    ) -> Result<(), CudaStatus> {
        before_send(R::OP)?;
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.post_locked(conn, device, req, data, now)
    }

    fn post_locked<R: Request>(
        &self,
        mut conn: std::sync::MutexGuard<'_, Connection>,
        device: i32,
        req: &R,
        data: &[u8],
        now: bool,
    ) -> Result<(), CudaStatus> {
        if conn.broken {
            return Err(CudaStatus::ErrorDevicesUnavailable);
        }
        if let Some(status) = conn.sticky.get(&device) {
            return Err(*status);
        }
        let id = conn.next_id;
        conn.next_id += 1;
        let meta = postcard::to_stdvec(req).expect("requests always encode");
        let header = FrameHeader::new(R::OP.code(), FLAG_NO_REPLY, id, meta.len(), data.len())
            .with_device(device);
        if let Some(p) = crate::profile::get() {
            p.posted(R::OP, frame_bytes(&meta, data));
        }
        let conn = &mut *conn;
        conn.journal.record(&header, &meta, data);
        let posted = if conn.writer.ring.is_some() {
            // A frame in the ring costs no system call: it goes at once, and the worker
            // starts on it while the program prepares its next call.
            conn.posted
                .write_with(&mut conn.writer, &header, &meta, data)
                .map(|()| false)
        } else {
            conn.posted.post(&mut conn.writer, &header, &meta, data)
        };
        match posted {
            Ok(_) if now => {
                conn.flush_posted();
                if conn.broken {
                    return Err(CudaStatus::ErrorDevicesUnavailable);
                }
                Ok(())
            }
            Ok(first) => {
                if first && conn.flusher_idle {
                    self.posted_waiting.notify_one();
                }
                if let Err(e) = conn.trim_journal() {
                    return Err(conn.lost(e));
                }
                Ok(())
            }
            // Kept in the journal: sent again on the connection come back on.
            Err(e) => match conn.recover(e.into()) {
                Ok(_) => Ok(()),
                Err(e) => Err(conn.lost(e)),
            },
        }
    }

    /// Start the thread that writes posted frames nobody else writes within
    /// [`crate::posted::FLUSH_DELAY`] (once per client; without it, posted frames go
    /// out with the next waited-for call or when the queue fills).
    pub fn start_flusher(&'static self) {
        self.flusher.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("vmcuda-flush".into())
                .spawn(move || self.flush_when_due());
            if let Err(e) = spawned {
                eprintln!("vmcuda: no flusher thread ({e}); asynchronous calls go out with the next synchronizing call");
            }
        });
    }

    fn flush_when_due(&self) {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let Some(due) = conn.posted.due().filter(|_| !conn.broken) else {
                conn.flusher_idle = true;
                conn = self
                    .posted_waiting
                    .wait(conn)
                    .unwrap_or_else(|p| p.into_inner());
                conn.flusher_idle = false;
                continue;
            };
            let now = Instant::now();
            if now < due {
                conn = self
                    .posted_waiting
                    .wait_timeout(conn, due - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            conn.flush_posted();
        }
    }

    /// Write the posted queue now, waiting at most `patience` for the connection (a
    /// thread blocked in a long call holds it; its own write sent the queue already).
    pub fn flush_posted(&self, patience: Duration) {
        self.with_conn_within(patience, Connection::flush_posted);
    }

    /// The program leaves: what it posted goes, and the host need not hold its
    /// session after the connection closes.
    pub fn leave(&self, patience: Duration) {
        self.with_conn_within(patience, |c| {
            c.flush_posted();
            c.leave();
        });
    }

    fn with_conn_within(&self, patience: Duration, f: impl FnOnce(&mut Connection)) {
        let until = Instant::now() + patience;
        loop {
            match self.conn.try_lock() {
                Ok(mut conn) => return f(&mut conn),
                Err(std::sync::TryLockError::Poisoned(p)) => return f(&mut p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        }
    }

    /// Several requests of one kind, sent together; their replies' data lands in the
    /// given buffers. Returns the first failure.
    pub fn call_many<R: Request>(
        &self,
        device: i32,
        requests: Vec<(R, &mut [u8])>,
    ) -> Result<(), CudaStatus> {
        before_send(R::OP)?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if conn.broken {
            return Err(CudaStatus::ErrorDevicesUnavailable);
        }
        match conn.exchange_many(device, requests) {
            Ok(r) => {
                if let Err(status) = r {
                    if status.is_sticky() {
                        conn.sticky.insert(device, status);
                    }
                }
                r
            }
            Err(e) => Err(conn.lost(e)),
        }
    }

    /// `n` requests of one kind, each sent up to `depth` ahead of its reply, all under
    /// one hold of the connection: `prepare(i)` makes request `i` just before it goes
    /// (filling its staging slot, say) and `finish(i)` runs once its reply is in (and
    /// may empty the slot), so the host works on one request while the guest prepares
    /// or finishes another. Every reply is read; returns the first failure.
    pub fn pipeline<R: Request<Reply = ()>>(
        &self,
        device: i32,
        n: usize,
        depth: usize,
        mut prepare: impl FnMut(usize) -> R,
        mut finish: impl FnMut(usize),
    ) -> Result<(), CudaStatus> {
        before_send(R::OP)?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if conn.broken {
            return Err(CudaStatus::ErrorDevicesUnavailable);
        }
        if let Some(status) = conn.sticky.get(&device) {
            return Err(*status);
        }
        let depth = depth.max(1);
        let mut result = Ok(());
        let io = conn.run_pipeline::<R>(device, n, depth, &mut prepare, &mut |i, r| match r {
            Ok(()) => finish(i),
            Err(e) => result = result.and(Err(e)),
        });
        if let Err(e) = io {
            conn.broken = true;
            eprintln!("vmcuda: lost the connection to the vmcuda host ({e}); CUDA calls now fail");
            return Err(CudaStatus::ErrorDevicesUnavailable);
        }
        if let Err(status) = result {
            if status.is_sticky() {
                conn.sticky.insert(device, status);
            }
        }
        result
    }

    /// Whether the host is reached over vsock (a VM guest; see [`crate::guest_pages`]).
    pub fn is_vsock(&self) -> bool {
        matches!(self.addr, ServerAddr::Vsock { .. })
    }

    /// Whether descriptors (and so shared memory) can be passed to this host.
    pub fn can_pass_fds(&self) -> bool {
        matches!(self.addr, ServerAddr::Unix(_))
    }
}

#[cfg(test)]
mod tests;
