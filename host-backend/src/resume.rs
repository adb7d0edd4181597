//! Coming back to a session over a new connection (docs/survival.md, "Reconnect").
//!
//! A guest that said it can resume ([`caps::RESUMABLE`]) gets a ticket to its session
//! ([`ResumePoint::ticket`]): the session's number and 256 random bits. When its
//! connection drops, its worker keeps the session (GPU memory, handles, quota) for
//! [`ReconnectPolicy::hold`](crate::policy::ReconnectPolicy::hold) and waits. The guest
//! connects again, as any guest does, and sends [`SessionResume`] in place of a hello.
//! The worker spawned for that new connection admits it as usual (so the caller must
//! still be the same VM by the host's policy), then hands the connection over to the
//! session's worker through the session's resume point ([`hand_over`]): a Unix
//! `SOCK_SEQPACKET` socket in the state directory, bound before the worker was jailed,
//! that only the daemon's user can reach. The session's worker checks the VM, the
//! session and the secret (in constant time), spends the ticket (single use: a replay
//! of it is refused) and takes the connection over; the worker that brought it exits.
//!
//! The guest's side keeps every request after the last reply it read and sends again
//! those the worker had not taken (the worker says which); the worker keeps its recent
//! replies ([`Replay`]) and sends again those the guest had not read. So work posted
//! before a drop runs once, and a call in flight gets its reply.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tracing::{info, warn};
use vmcuda_wire::handshake::{SessionTicket, TICKET_SECRET_LEN};
use vmcuda_wire::op::GuestPagesGrant;
use vmcuda_wire::transport::{recv_keeping_fds, FdQueue};

use crate::spawn::TransportKind;

/// The state directory's folder of resume points (mode 0700).
pub const SESSIONS_DIR: &str = "sessions";

/// The longest handoff message read (a guest page grant may name many pages).
const MAX_HANDOFF: usize = 256 << 10;

/// How long either side of a handoff waits for the other.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(5);

/// The resume point's listening socket, once bound: the one descriptor the jailed
/// worker may `accept` on (see `jail::seccomp`). -1: none.
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);

/// The descriptor [`crate::jail`]'s filter lets `accept4` take connections on.
pub fn listener_fd() -> Option<i32> {
    Some(LISTENER_FD.load(Ordering::Relaxed)).filter(|fd| *fd >= 0)
}

/// What the worker that took a returning guest's connection tells the session's
/// worker, with the connection's descriptor riding along.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Handoff {
    /// The VM the returning connection was admitted as.
    pub vm: String,
    pub session: u64,
    pub secret: [u8; TICKET_SECRET_LEN],
    pub last_reply: u64,
    /// The resume request's id, for its reply.
    pub request_id: u64,
    pub transport: TransportKind,
    /// The guest page grant the returning connection came with (an unprivileged VM
    /// process's connection, made by the guest's RAM broker).
    pub grant: Option<GuestPagesGrant>,
    /// The process at the other end of a Unix connection (its host pid, as the
    /// daemon read it).
    pub peer_pid: Option<i32>,
}

/// A guest come back: its new connection, taken over.
pub struct Arrival {
    pub conn: OwnedFd,
    pub transport: TransportKind,
    pub last_reply: u64,
    pub request_id: u64,
    pub grant: Option<GuestPagesGrant>,
    pub peer_pid: Option<i32>,
}

/// What the accepting thread and the serving loop share.
struct Shared {
    /// The secrets that let a guest back in ([`Tickets`]).
    secrets: Mutex<Tickets>,
    /// The connection served now: shut down when its guest comes back on another
    /// (the old one may not have noticed its end yet).
    current: Mutex<Option<OwnedFd>>,
}

type Secret = [u8; TICKET_SECRET_LEN];

/// Tickets offered at most while the guest has shown it holds none of them.
const MAX_OFFERED: usize = 4;

/// The tickets a guest may hold. It holds the last one it came back with, or one
/// offered since: an answer carrying a ticket may be lost with a connection that drops
/// before the guest reads it, and a session slow to see a drop may offer several before
/// one gets through. Once the guest shows it read one (its first request on the
/// connection it came back on), that one alone is good.
#[derive(Default)]
struct Tickets {
    /// The secret of the last connection taken back, until the guest confirms a newer.
    presented: Option<Secret>,
    /// Tickets given after it, oldest first.
    offered: VecDeque<Secret>,
}

impl Tickets {
    fn is_empty(&self) -> bool {
        self.presented.is_none() && self.offered.is_empty()
    }

    /// Whether `secret` is one of them (every one compared, in constant time each).
    fn holds(&self, secret: &Secret) -> bool {
        let known = self
            .presented
            .iter()
            .chain(self.offered.iter())
            .fold(subtle::Choice::from(0), |any, s| any | s.ct_eq(secret));
        bool::from(known)
    }

    /// The guest came back with `secret`: it holds that one or a later one.
    fn presented(&mut self, secret: Secret) {
        if let Some(at) = self.offered.iter().position(|s| *s == secret) {
            self.offered.drain(..=at);
        } else if self.presented != Some(secret) {
            return;
        }
        self.presented = Some(secret);
    }

    fn offer(&mut self, secret: Secret) {
        self.offered.push_back(secret);
        while self.offered.len() > MAX_OFFERED {
            self.offered.pop_front();
        }
    }

    /// The guest read the last ticket offered: the others are spent.
    fn confirm(&mut self) {
        if let Some(last) = self.offered.pop_back() {
            self.offered.clear();
            self.presented = None;
            self.offered.push_back(last);
        }
    }

    /// A ticket that never reached the guest (its answer could not be written).
    fn withdraw(&mut self, secret: &Secret) {
        self.offered.retain(|s| s != secret);
    }

    fn clear(&mut self) {
        *self = Tickets::default();
    }
}

/// A session's resume point: made at admission, before the jail.
pub struct ResumePoint {
    session: u64,
    path: PathBuf,
    hold: Duration,
    shared: Arc<Shared>,
    arrivals: mpsc::Receiver<Arrival>,
    /// Whether a ticket was ever given: only then is a dropped session held.
    issued: bool,
    /// The local program at the other end (a Unix connection's peer, by host pid):
    /// once it is gone, nobody comes back.
    peer_pid: Option<i32>,
}

/// How long a dropped session looks for its local program's end before it holds.
const EXIT_SEEN_WITHIN: Duration = Duration::from_millis(500);

/// Whether host process `pid` has ended (gone, or a zombie: its sockets are closed).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| matches!(state, "Z" | "X" | "x")),
        Err(_) => true,
    }
}

/// Where session `session`'s resume point is.
pub fn point_path(state_dir: &Path, session: u64) -> PathBuf {
    state_dir
        .join(SESSIONS_DIR)
        .join(format!("{session:016x}.sock"))
}

fn random_secret() -> io::Result<[u8; TICKET_SECRET_LEN]> {
    let mut secret = [0u8; TICKET_SECRET_LEN];
    vmcuda_wire::tls::random_bytes(&mut secret).map_err(io::Error::other)?;
    Ok(secret)
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; a non-negative result is a new
    // descriptor that nothing else owns.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unix_addr(path: &Path) -> io::Result<nix::sys::socket::UnixAddr> {
    nix::sys::socket::UnixAddr::new(path).map_err(io::Error::from)
}

impl ResumePoint {
    /// Bind session resume point for VM `vm` in `state_dir`, and start the thread that
    /// takes returning connections for it.
    pub fn open(
        state_dir: &Path,
        vm: &str,
        hold: Duration,
        peer_pid: Option<i32>,
    ) -> io::Result<ResumePoint> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = state_dir.join(SESSIONS_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let mut id = [0u8; 8];
        vmcuda_wire::tls::random_bytes(&mut id).map_err(io::Error::other)?;
        let session = u64::from_le_bytes(id);
        let path = point_path(state_dir, session);
        let listener = seqpacket()?;
        nix::sys::socket::bind(listener.as_raw_fd(), &unix_addr(&path)?)?;
        nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(4)?)?;
        LISTENER_FD.store(listener.as_raw_fd(), Ordering::Relaxed);
        let shared = Arc::new(Shared {
            secrets: Mutex::new(Tickets::default()),
            current: Mutex::new(None),
        });
        let (tx, arrivals) = mpsc::channel();
        let vm = vm.to_string();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("vmcuda-resume".into())
            .spawn(move || take_returning(listener, &vm, session, &thread_shared, &tx))?;
        Ok(ResumePoint {
            session,
            path,
            hold,
            shared,
            arrivals,
            issued: false,
            peer_pid,
        })
    }

    /// A new ticket to this session: the ones out before it are spent once the guest
    /// shows it has this one ([`ResumePoint::confirm`]).
    pub fn ticket(&mut self) -> io::Result<SessionTicket> {
        let secret = random_secret()?;
        self.tickets().offer(secret);
        self.issued = true;
        Ok(SessionTicket {
            session: self.session,
            secret,
            hold_ms: u64::try_from(self.hold.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Whether a ticket is out (the guest may come back).
    pub fn issued(&self) -> bool {
        self.issued
    }

    /// The guest made a request after the last ticket was given: it holds that one,
    /// and the ones before are spent.
    pub fn confirm(&self) {
        self.tickets().confirm();
    }

    /// `ticket` never reached the guest: the answer that carried it could not be
    /// written, so it is no longer good (and evicts none the guest holds).
    pub fn withdraw(&self, ticket: &SessionTicket) {
        self.tickets().withdraw(&ticket.secret);
    }

    fn tickets(&self) -> std::sync::MutexGuard<'_, Tickets> {
        self.shared
            .secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The guest left for good: a drop from now on ends the session.
    pub fn close(&mut self) {
        self.issued = false;
        self.shared
            .secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The connection served from now on (a copy of its descriptor).
    pub fn serving(&self, conn: BorrowedFd<'_>) {
        *self
            .shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = conn.try_clone_to_owned().ok();
    }

    /// The connection dropped: wait for the guest to come back, if it holds a ticket.
    pub fn wait(&mut self) -> Option<Arrival> {
        if !self.issued {
            return None;
        }
        // A local program that was killed or crashed: its end closed the connection. One
        // that comes back meanwhile is alive, and is taken back at once.
        let mut came_back = None;
        if let Some(pid) = self.peer_pid.filter(|p| *p > 0) {
            let until = std::time::Instant::now() + EXIT_SEEN_WITHIN;
            while came_back.is_none() && std::time::Instant::now() < until {
                if ended(pid) {
                    info!(
                        pid,
                        "connection dropped and its program has ended; the session is not held"
                    );
                    return None;
                }
                match self.arrivals.recv_timeout(Duration::from_millis(20)) {
                    Ok(arrival) => came_back = Some(arrival),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                }
            }
        }
        *self
            .shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        let mut arrival = match came_back {
            Some(arrival) => arrival,
            None => {
                info!(
                    hold_ms = self.hold.as_millis() as u64,
                    "connection dropped; holding the session for its guest"
                );
                self.arrivals.recv_timeout(self.hold).ok()?
            }
        };
        // A guest that tried again meanwhile: its latest connection is the live one.
        while let Ok(later) = self.arrivals.try_recv() {
            arrival = later;
        }
        self.peer_pid = arrival.peer_pid;
        Some(arrival)
    }
}

impl Drop for ResumePoint {
    fn drop(&mut self) {
        LISTENER_FD.store(-1, Ordering::Relaxed);
        // Inside the jail the folder may not be reachable: a stale file is swept by
        // the next handoff that finds nobody behind it.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The resume point's thread: every connection to it is a worker with a returning
/// guest; one at a time, each given [`HANDOFF_TIMEOUT`] to say its piece.
fn take_returning(
    listener: OwnedFd,
    vm: &str,
    session: u64,
    shared: &Shared,
    arrivals: &mpsc::Sender<Arrival>,
) {
    loop {
        let conn = match nix::sys::socket::accept4(
            listener.as_raw_fd(),
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        ) {
            // SAFETY: accept4 returned a new descriptor owned by nobody else.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::ECONNABORTED) => continue,
            Err(e) => {
                warn!("the session's resume point stopped taking connections: {e}");
                return;
            }
        };
        let _ = set_timeout(conn.as_fd());
        let verdict = match receive_handoff(conn.as_fd()) {
            Ok((h, Some(fd))) => check(&h, vm, session, shared).map(|()| {
                shared
                    .secrets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .presented(h.secret);
                (h, fd)
            }),
            Ok((_, None)) => Err("no connection came with it"),
            Err(e) => {
                warn!("unreadable handoff to the resume point: {e}");
                Err("unreadable")
            }
        };
        match verdict {
            Ok((h, fd)) => {
                // The old connection, should it still look alive, ends now.
                if let Some(old) = shared
                    .current
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                {
                    // SAFETY: shutdown(2) on a descriptor this thread owns.
                    unsafe { libc::shutdown(old.as_raw_fd(), libc::SHUT_RDWR) };
                }
                let arrival = Arrival {
                    conn: fd,
                    transport: h.transport,
                    last_reply: h.last_reply,
                    request_id: h.request_id,
                    grant: h.grant,
                    peer_pid: h.peer_pid,
                };
                let _ = crate::ipc::proto::send(conn.as_fd(), &[1], None);
                if arrivals.send(arrival).is_err() {
                    return;
                }
            }
            Err(why) => {
                warn!("a returning connection was refused: {why}");
                let _ = crate::ipc::proto::send(conn.as_fd(), &[0], None);
            }
        }
    }
}

/// Whether a handoff is this session's own: its VM, and a ticket not spent.
fn check(h: &Handoff, vm: &str, session: u64, shared: &Shared) -> Result<(), &'static str> {
    if h.session != session {
        return Err("another session's number");
    }
    if h.vm != vm {
        return Err("admitted as another VM");
    }
    let secrets = shared.secrets.lock().unwrap_or_else(|p| p.into_inner());
    if secrets.is_empty() {
        return Err("no ticket out (the guest left, or never asked for one)");
    }
    if secrets.holds(&h.secret) {
        Ok(())
    } else {
        Err("a wrong or spent ticket")
    }
}

fn set_timeout(fd: BorrowedFd<'_>) -> io::Result<()> {
    let tv = nix::sys::time::TimeVal::new(HANDOFF_TIMEOUT.as_secs() as i64, 0);
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &tv)?;
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::SendTimeout, &tv)?;
    Ok(())
}

fn receive_handoff(fd: BorrowedFd<'_>) -> io::Result<(Handoff, Option<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_HANDOFF + 1];
    let fds = FdQueue::default();
    let n = recv_keeping_fds(fd, &mut buf, &fds)?;
    let mut fds = fds.lock().unwrap_or_else(|p| p.into_inner());
    let conn = fds.pop_front();
    fds.clear();
    if n > MAX_HANDOFF {
        return Err(io::Error::other("handoff too long"));
    }
    let h = postcard::from_bytes(&buf[..n]).map_err(io::Error::other)?;
    Ok((h, conn))
}

/// Why a returning connection could not be handed to its session.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("no such session (it ended, or its hold ran out)")]
    NoSession,
    #[error("the session refused the ticket")]
    Refused,
    #[error("cannot reach the session: {0}")]
    Io(#[from] io::Error),
}

/// Hand the returning connection `conn` to its session's worker.
pub fn hand_over(state_dir: &Path, h: &Handoff, conn: BorrowedFd<'_>) -> Result<(), HandoffError> {
    let path = point_path(state_dir, h.session);
    let socket = seqpacket()?;
    match nix::sys::socket::connect(socket.as_raw_fd(), &unix_addr(&path)?) {
        Ok(()) => {}
        Err(nix::errno::Errno::ENOENT) => return Err(HandoffError::NoSession),
        Err(nix::errno::Errno::ECONNREFUSED) => {
            // Its worker is gone and could not remove the file from inside its jail.
            let _ = std::fs::remove_file(&path);
            return Err(HandoffError::NoSession);
        }
        Err(e) => return Err(io::Error::from(e).into()),
    }
    set_timeout(socket.as_fd())?;
    let bytes = postcard::to_stdvec(h).map_err(io::Error::other)?;
    crate::ipc::proto::send(socket.as_fd(), &bytes, Some(conn))?;
    let mut answer = [0u8; 1];
    // SAFETY: recv(2) into a live one-byte buffer.
    let n = unsafe { libc::recv(socket.as_raw_fd(), answer.as_mut_ptr().cast(), 1, 0) };
    match (n, answer[0]) {
        (1, 1) => Ok(()),
        (1, _) | (0, _) => Err(HandoffError::Refused),
        _ => Err(io::Error::last_os_error().into()),
    }
}

/// The largest reply data kept for sending again; larger replies are kept as their
/// request, when it is a read that may run again ([`Replay::rerun_ok`]).
pub const KEPT_DATA_MAX: usize = 64 << 10;
/// How many replies are kept, and how many bytes in all.
pub const KEPT_REPLIES: usize = 1024;
pub const KEPT_BYTES: usize = 8 << 20;

/// A waited-for request's answer, kept for a guest that may not have read it.
pub enum Kept {
    /// The reply frame, whole.
    Reply(Vec<u8>),
    /// A read whose reply is too large to keep: run again (its request's header and
    /// arguments).
    Rerun(vmcuda_wire::frame::FrameHeader, Vec<u8>),
    /// Too large to keep and not a read: a guest that needs it cannot come back.
    Lost,
}

/// The worker's side of the sequence: the last request taken and the recent replies.
#[derive(Default)]
pub struct Replay {
    /// The id of the last request taken (run, or refused).
    pub last_request: u64,
    /// Since the first resume, requests at or below `last_request` are duplicates and
    /// are not run again.
    pub resumed: bool,
    /// Whether the guest has made a request since the last resume (so holds the
    /// ticket it was given then).
    pub confirmed: bool,
    kept: VecDeque<(u64, Kept)>,
    bytes: usize,
    /// The highest request id whose reply was dropped from `kept`.
    forgotten: u64,
}

impl Replay {
    /// Whether a request of op `code` with too large a reply may run again in place of
    /// its kept reply: device-to-host copies, whose sources the guest's later requests
    /// (sent only after it read this reply) cannot have changed.
    pub fn rerun_ok(code: u16) -> bool {
        use vmcuda_wire::op::Op;
        matches!(Op::from_code(code), Some(Op::MemcpyDtoH | Op::Memcpy2DDtoH))
    }

    /// A request was taken.
    pub fn took(&mut self, id: u64) {
        self.last_request = self.last_request.max(id);
    }

    /// Keep the answer to waited-for request `id`; what is kept.
    pub fn keep(&mut self, id: u64, kept: Kept) -> &Kept {
        let len = match &kept {
            Kept::Reply(f) => f.len(),
            Kept::Rerun(_, m) => m.len() + vmcuda_wire::frame::HEADER_LEN,
            Kept::Lost => 0,
        };
        self.kept.push_back((id, kept));
        self.bytes += len;
        while self.kept.len() > KEPT_REPLIES || self.bytes > KEPT_BYTES {
            let Some((old, k)) = self.kept.pop_front() else {
                break;
            };
            self.bytes -= match &k {
                Kept::Reply(f) => f.len(),
                Kept::Rerun(_, m) => m.len() + vmcuda_wire::frame::HEADER_LEN,
                Kept::Lost => 0,
            };
            self.forgotten = self.forgotten.max(old);
        }
        // The newest is never dropped: it alone is within both bounds.
        &self.kept.back().expect("just kept").1
    }

    /// The answers a guest that read every reply up to `last_reply` lacks, oldest
    /// first; `None` when one of them is no longer kept.
    pub fn owed(&self, last_reply: u64) -> Option<Vec<&Kept>> {
        if last_reply < self.forgotten {
            return None;
        }
        let owed: Vec<&Kept> = self
            .kept
            .iter()
            .filter(|(id, _)| *id > last_reply)
            .map(|(_, k)| k)
            .collect();
        if owed.iter().any(|k| matches!(k, Kept::Lost)) {
            return None;
        }
        Some(owed)
    }
}

#[cfg(test)]
mod tests;
