//! Guest RAM for every process of a VM guest: the guest's RAM broker and its clients.
//!
//! The host's worker can copy to and from guest pages (and hold a command ring there)
//! only by their guest-physical addresses, which only a privileged process may read,
//! and only over a connection from a reserved vsock port, which only a privileged
//! process may bind. So a privileged guest service, the broker (`vmcuda
//! guest-ram-broker`, started by the guest package), does both for unprivileged
//! processes that ask on its socket ([`BROKER_SOCKET`]):
//!
//! 1. it makes a memfd of huge pages for the process alone, sealed so that it can
//!    neither shrink nor grow, and hands it over; the process maps it;
//! 2. once the process says it has, the broker seals the memfd against writes through
//!    any *new* means (`F_SEAL_FUTURE_WRITE`), which also refuses punching holes, so
//!    from then on no page of it can be freed while the broker holds it; then it reads
//!    the pages' guest-physical addresses;
//! 3. it connects to the host from a reserved port, names those pages as the only ones
//!    the connection may use ([`GuestPagesGrant`], the connection's first frame), and
//!    hands the connection to the process, which says its hello and goes on as any
//!    other;
//! 4. when the process goes (its socket to the broker closes), the broker half-closes
//!    the host connection, waits for the host to close it (the worker closes it only
//!    after its last copy), and only then lets go of the pages.
//!
//! A process never learns or names another process's pages, and its pages are never
//! given back to the guest's kernel while the host may still touch them. Why this holds
//! is argued in docs/security.md.

use std::io::{self, IoSlice, IoSliceMut};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::socket::{self as sock, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use vmcuda_wire::frame::{self, FrameHeader};
use vmcuda_wire::op::{GuestPagesGrant, Op};

/// Where the broker listens.
pub const BROKER_SOCKET: &str = "/run/vmcuda/guest-ram.sock";
/// Names another socket for the library to ask (`0`: do not ask).
pub const BROKER_ENV: &str = "VMCUDA_GUEST_RAM_BROKER";

/// What one process asks for: its command ring (one huge page) and its staging area.
pub fn area_len() -> usize {
    crate::pages::HUGE_PAGE + crate::sizes::staging_len()
}

/// A request on the broker's socket.
#[derive(Debug, Serialize, Deserialize)]
enum Request {
    /// Pages for a connection to the host at vsock `cid`:`port`.
    Area { bytes: u64, cid: u32, port: u32 },
    /// The process has mapped the memfd it was handed.
    Mapped,
    /// More pages for the same connection (pinned memory), after `Connected`.
    More { bytes: u64 },
    /// Ordinary pages for memory the process registers (`cudaHostRegister`): it moves
    /// its own pages onto them, in place, so they cannot be huge pages. The broker
    /// pins them, so the guest's kernel cannot move them while the host may use them.
    Register { bytes: u64 },
    /// The process's connection to the host dropped (a VM's live migration resets
    /// vsock connections): another one, from the broker's reserved port, with the same
    /// grant as the first, so that the session's worker takes the process back. Its
    /// answer is `Connected`, with the new connection.
    Reconnect,
}

/// The broker's answers.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    /// The memfd comes with this one.
    Memory {
        len: u64,
        page_size: u64,
    },
    /// The connection comes with this one; its pages, in the memfd's order.
    Connected {
        pages: Vec<u64>,
    },
    /// The pages of a `More` memfd, and the broker's seal on them for the host
    /// ([`GuestPagesExtend`]).
    Extended {
        pages: Vec<u64>,
        seal: [u8; 32],
    },
    Refused(String),
}

/// How long either side waits for the other's next message while an area is being set
/// up: a peer that says nothing holds no thread of the broker, and no program, for ever.
const SETUP_WAIT: Duration = Duration::from_secs(10);

/// Wait at most `wait` in each read of `socket` (`None`: for ever).
fn read_timeout(socket: BorrowedFd<'_>, wait: Option<Duration>) -> io::Result<()> {
    let tv = wait.map_or(nix::sys::time::TimeVal::new(0, 0), |w| {
        nix::sys::time::TimeVal::new(w.as_secs() as i64, 0)
    });
    sock::setsockopt(&socket, sock::sockopt::ReceiveTimeout, &tv)?;
    Ok(())
}

/// A Unix socket of the broker's kind: messages keep their bounds, descriptors ride
/// with them.
pub fn seqpacket() -> nix::Result<OwnedFd> {
    sock::socket(
        sock::AddressFamily::Unix,
        sock::SockType::SeqPacket,
        sock::SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// A new shared, writable, populated mapping of `memfd`'s first `length` bytes, where
/// the kernel chooses; the caller owns it (`munmap` undoes it).
fn map_populated(memfd: &OwnedFd, length: NonZeroUsize) -> nix::Result<NonNull<libc::c_void>> {
    use nix::sys::mman::{mmap, MapFlags, ProtFlags};
    // SAFETY: a fresh mapping where the kernel chooses, over nothing of ours; its
    // ownership goes to the caller.
    unsafe {
        mmap(
            None,
            length,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED | MapFlags::MAP_POPULATE,
            memfd,
            0,
        )
    }
}

/// Largest message on the broker's socket (a page list of 8192 huge pages fits).
const MAX_MESSAGE: usize = 64 << 10;

fn send(
    socket: BorrowedFd<'_>,
    msg: &impl Serialize,
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let bytes = postcard::to_stdvec(msg).map_err(io::Error::other)?;
    let fds = fd.map(|f| [f.as_raw_fd()]);
    let cmsg: Vec<ControlMessage<'_>> = fds.iter().map(|f| ControlMessage::ScmRights(f)).collect();
    sock::sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// One message and the descriptor that came with it, if any. `Ok(None)` at the end.
fn receive<T: for<'de> Deserialize<'de>>(
    socket: BorrowedFd<'_>,
) -> io::Result<Option<(T, Option<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = loop {
        match sock::recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r?,
        }
    };
    let mut fd = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for raw in fds {
                // SAFETY: the kernel just installed `raw` in this process for us.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                fd.get_or_insert(owned);
            }
        }
    }
    let n = msg.bytes;
    if n == 0 {
        return Ok(None);
    }
    let value = postcard::from_bytes(&buf[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((value, fd)))
}

/// Guest pages the host may map by guest-physical address.
pub struct HostPages {
    pub at: NonNull<u8>,
    pub len: usize,
    pub page_size: u64,
    pub pages: Vec<u64>,
    /// Whether the mapping is the caller's own (huge pages it made), to unmap when it
    /// gives them up; otherwise a piece of the broker's area, mapped for the life of
    /// the process.
    pub owned: bool,
}

impl HostPages {
    /// `len` bytes of guest pages: from the guest RAM the broker gave this process
    /// (`area`), else huge pages of its own, whose addresses only a privileged process
    /// can read.
    pub fn take(len: usize, area: Option<&GuestArea>) -> Result<HostPages, String> {
        if let Some(area) = area {
            let (at, len, pages) = area
                .carve(len)
                .ok_or("no room left in the guest RAM the broker gave")?;
            return Ok(HostPages {
                at,
                len,
                page_size: area.page_size() as u64,
                pages,
                owned: false,
            });
        }
        let (at, len, pages) = crate::pages::huge_pages(len)?;
        Ok(HostPages {
            at: at.cast(),
            len,
            page_size: crate::pages::HUGE_PAGE as u64,
            pages,
            owned: true,
        })
    }

    /// Unmap them if they are the caller's own; a piece of the broker's area stays.
    pub fn give_up(self) {
        if self.owned {
            // SAFETY: unmapping the caller's own mapping of these pages, which nothing
            // else uses.
            let _ = unsafe { nix::sys::mman::munmap(self.at.cast(), self.len) };
        }
    }
}

/// A process's share of guest RAM: its mapping of the broker's memfd, the page size and
/// each page's guest-physical address. Lives as long as the process.
pub struct GuestArea {
    base: NonNull<u8>,
    len: usize,
    page_size: usize,
    pages: Vec<u64>,
    used: Mutex<usize>,
    /// The socket to the broker, which holds the pages while it is open (for the
    /// process's life: areas are never dropped but in tests); locked while more pages
    /// are asked for on it.
    broker: Mutex<OwnedFd>,
}

/// More guest RAM for the same connection ([`GuestArea::more`]): this process's mapping
/// (kept for its life), the page size, the pages, and the broker's seal on them.
pub struct MorePages {
    pub at: NonNull<u8>,
    pub len: usize,
    pub page_size: u64,
    pub pages: Vec<u64>,
    pub seal: [u8; 32],
}

// SAFETY: the area is plain shared memory handed out in disjoint pieces under `used`'s
// lock; nothing here dereferences it.
unsafe impl Send for GuestArea {}
// SAFETY: as above.
unsafe impl Sync for GuestArea {}

impl GuestArea {
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// `len` bytes (rounded up to whole pages) not handed out before: their address in
    /// this process and their pages' guest-physical addresses.
    pub fn carve(&self, len: usize) -> Option<(NonNull<u8>, usize, Vec<u64>)> {
        let len = len.next_multiple_of(self.page_size);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if len == 0 || *used + len > self.len {
            return None;
        }
        let first = *used / self.page_size;
        let pages = self.pages[first..first + len / self.page_size].to_vec();
        // SAFETY: `*used + len <= self.len`: inside the mapping.
        let at = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(*used)) };
        *used += len;
        Some((at, len, pages))
    }
}

impl GuestArea {
    /// Ask the broker for `bytes` more guest RAM (rounded up to whole pages) for this
    /// connection. The caller hands the pages and their seal to the host
    /// ([`GuestPagesExtend`]) before naming them. Pages, once given, stay this
    /// process's until it ends.
    pub fn more(&self, bytes: usize) -> Result<MorePages, String> {
        let request = Request::More {
            bytes: bytes as u64,
        };
        self.ask(request, |memfd, length| {
            // Kept for the life of the process.
            map_populated(memfd, length)
                .map_err(|e| format!("cannot map the guest RAM the broker gave ({e})"))
        })
    }

    /// A new connection to the host for this process, after its own dropped: the
    /// broker makes it from its reserved port and sends it the first connection's
    /// grant again (the same pages, under the same key), so the session's worker can
    /// take it back (docs/survival.md). The caller says its `SessionResume` next.
    pub fn reconnect(&self) -> Result<OwnedFd, String> {
        let broker = self.broker.lock().unwrap_or_else(|p| p.into_inner());
        let said = |e: io::Error| format!("the guest's RAM broker: {e}");
        send(broker.as_fd(), &Request::Reconnect, None).map_err(said)?;
        match receive::<Reply>(broker.as_fd()).map_err(said)? {
            Some((Reply::Connected { pages }, Some(fd))) if pages == self.pages => Ok(fd),
            Some((Reply::Refused(why), _)) => Err(format!("the guest's RAM broker said no: {why}")),
            _ => Err("the guest's RAM broker answered out of turn".into()),
        }
    }

    /// Move the whole pages `[start, start + len)` of this process onto guest RAM the
    /// broker pins, in place and with their contents (for `cudaHostRegister`), and
    /// have them sealed for the host as [`GuestArea::more`]'s are.
    ///
    /// # Safety
    /// `[start, start + len)` is page-aligned, mapped, readable and writable memory of
    /// the program's, which nothing else has moved onto a file.
    pub unsafe fn register_in_place(&self, start: usize, len: usize) -> Result<MorePages, String> {
        let request = Request::Register { bytes: len as u64 };
        self.ask(request, |memfd, length| {
            if length.get() != len {
                return Err("the guest's RAM broker gave the wrong length".into());
            }
            // SAFETY: the caller's promise, passed on.
            unsafe { crate::pages::move_onto(memfd, start, len) }
        })
    }

    /// Ask for pages with `request`, `place` them in this process, and take the
    /// broker's seal on them.
    fn ask(
        &self,
        request: Request,
        place: impl FnOnce(&OwnedFd, NonZeroUsize) -> Result<NonNull<libc::c_void>, String>,
    ) -> Result<MorePages, String> {
        let broker = self.broker.lock().unwrap_or_else(|p| p.into_inner());
        let said = |e: io::Error| format!("the guest's RAM broker: {e}");
        send(broker.as_fd(), &request, None).map_err(said)?;
        let (len, page_size, memfd) = receive_memory(broker.as_fd())?;
        let length = NonZeroUsize::new(len).ok_or("the guest's RAM broker gave no memory")?;
        let at = match place(&memfd, length) {
            Ok(at) => at,
            Err(why) => {
                // The broker waits for `Mapped`: tell it no, by saying something else.
                let _ = send(broker.as_fd(), &Request::More { bytes: 0 }, None);
                let _ = receive::<Reply>(broker.as_fd());
                return Err(why);
            }
        };
        drop(memfd);
        send(broker.as_fd(), &Request::Mapped, None).map_err(said)?;
        match receive::<Reply>(broker.as_fd()).map_err(said)? {
            Some((Reply::Extended { pages, seal }, _)) if pages.len() * page_size == len => {
                Ok(MorePages {
                    at: at.cast(),
                    len,
                    page_size: page_size as u64,
                    pages,
                    seal,
                })
            }
            other => {
                // SAFETY: unmapping the mapping made above, which nothing uses yet.
                let _ = unsafe { nix::sys::mman::munmap(at, len) };
                Err(match other {
                    Some((Reply::Refused(why), _)) => {
                        format!("the guest's RAM broker said no: {why}")
                    }
                    _ => "the guest's RAM broker answered out of turn".into(),
                })
            }
        }
    }
}

/// The broker's answer to a request for memory: its length, page size and memfd.
fn receive_memory(socket: BorrowedFd<'_>) -> Result<(usize, usize, OwnedFd), String> {
    match receive::<Reply>(socket).map_err(|e| format!("the guest's RAM broker: {e}"))? {
        Some((Reply::Memory { len, page_size }, Some(fd))) if page_size > 0 => {
            Ok((len as usize, page_size as usize, fd))
        }
        Some((Reply::Refused(why), _)) => Err(format!("the guest's RAM broker said no: {why}")),
        _ => Err("the guest's RAM broker answered out of turn".into()),
    }
}

/// Ask the broker for guest RAM and a connection to the host at `cid`:`port`. The
/// connection's first frame (the grant) is sent; the caller says its hello next.
pub fn from_broker(cid: u32, port: u32) -> Result<(OwnedFd, GuestArea), String> {
    let path = std::env::var(BROKER_ENV).unwrap_or_else(|_| BROKER_SOCKET.into());
    let no_sharing = std::env::var("VMCUDA_SHARED_MEMORY").is_ok_and(|v| v == "0");
    if path == "0" || no_sharing {
        return Err("the guest's RAM broker is not to be asked".into());
    }
    let socket = seqpacket().map_err(|e| format!("no socket ({e})"))?;
    let addr = sock::UnixAddr::new(path.as_str()).map_err(|e| format!("{path}: {e}"))?;
    sock::connect(socket.as_raw_fd(), &addr)
        .map_err(|e| format!("no guest RAM broker at {path} ({e})"))?;
    read_timeout(socket.as_fd(), Some(SETUP_WAIT)).map_err(|e| format!("{path}: {e}"))?;
    let said = |e: io::Error| format!("the guest's RAM broker: {e}");
    send(
        socket.as_fd(),
        &Request::Area {
            bytes: area_len() as u64,
            cid,
            port,
        },
        None,
    )
    .map_err(said)?;
    let (len, page_size, memfd) = receive_memory(socket.as_fd())?;
    let length = NonZeroUsize::new(len).ok_or("the guest's RAM broker gave no memory")?;
    // Kept for the life of the process.
    let base = map_populated(&memfd, length)
        .map_err(|e| format!("cannot map the guest RAM the broker gave ({e})"))?;
    drop(memfd);
    send(socket.as_fd(), &Request::Mapped, None).map_err(said)?;
    let (pages, host) = match receive::<Reply>(socket.as_fd()).map_err(said)? {
        Some((Reply::Connected { pages }, Some(fd))) => (pages, fd),
        Some((Reply::Refused(why), _)) => {
            return Err(format!("the guest's RAM broker said no: {why}"))
        }
        _ => return Err("the guest's RAM broker answered out of turn".into()),
    };
    if pages.len() * page_size != len {
        return Err("the guest's RAM broker's pages do not match its memory".into());
    }
    // The broker holds the pages for as long as this socket is open; it may wait
    // between requests for ever.
    read_timeout(socket.as_fd(), None).map_err(|e| format!("{path}: {e}"))?;
    let area = GuestArea {
        base: base.cast(),
        len,
        page_size,
        pages,
        used: Mutex::new(0),
        broker: Mutex::new(socket),
    };
    Ok((host, area))
}

/// How the broker is set up.
pub struct BrokerConfig {
    /// The host's vsock address, the only one the broker connects to.
    pub host: (u32, u32),
    /// Huge pages (the guest's kernel never moves them); ordinary pages only for tests.
    pub huge_pages: bool,
    /// The most one process may have.
    pub max_area: usize,
    /// The most processes of one user served at once.
    pub max_per_user: usize,
}

/// How the broker reaches the host: a connection from a reserved vsock port in a VM.
pub type HostConnector = dyn Fn() -> io::Result<OwnedFd> + Send + Sync;

/// Serve processes on `listener` (a listening `SOCK_SEQPACKET` Unix socket) until it
/// fails, one thread each.
pub fn serve(
    listener: OwnedFd,
    config: BrokerConfig,
    connect: Box<HostConnector>,
) -> io::Result<()> {
    let shared = std::sync::Arc::new((
        config,
        connect,
        Mutex::new(std::collections::HashMap::new()),
    ));
    loop {
        let conn = match sock::accept(listener.as_raw_fd()) {
            Ok(fd) => {
                // SAFETY: `accept` just made this descriptor for us.
                unsafe { OwnedFd::from_raw_fd(fd) }
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::ECONNABORTED) => continue,
            Err(e) => return Err(e.into()),
        };
        let shared = shared.clone();
        std::thread::spawn(move || {
            let (config, connect, users) = &*shared;
            if read_timeout(conn.as_fd(), Some(SETUP_WAIT)).is_err() {
                return;
            }
            let uid = sock::getsockopt(&conn, sock::sockopt::PeerCredentials)
                .map(|c| c.uid())
                .unwrap_or(u32::MAX);
            let admitted = {
                let mut users = users.lock().unwrap_or_else(|p| p.into_inner());
                let n: &mut usize = users.entry(uid).or_default();
                (*n < config.max_per_user).then(|| *n += 1).is_some()
            };
            if !admitted {
                // Its request is read first: a socket closed on unread bytes resets.
                let _ = receive::<Request>(conn.as_fd());
                let _ = send(
                    conn.as_fd(),
                    &Reply::Refused(format!(
                        "user {uid} has {} areas already",
                        config.max_per_user
                    )),
                    None,
                );
                return;
            }
            if let Err(e) = serve_one(&conn, config, connect) {
                eprintln!("vmcuda guest-ram-broker: uid {uid}: {e}");
                let _ = send(conn.as_fd(), &Reply::Refused(e.to_string()), None);
            }
            let mut users = users.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = users.get_mut(&uid) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

/// The broker's mapping of a process's memfd: kept until the host is done with it.
struct Held {
    base: NonNull<libc::c_void>,
    len: usize,
    _memfd: OwnedFd,
    /// Holds ordinary pages in place (huge pages stay put by themselves); dropped
    /// before the mapping is.
    _pin: Option<crate::pages::pin::LongTermPin>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the broker's own mapping of the memfd.
        let _ = unsafe { nix::sys::mman::munmap(self.base, self.len) };
    }
}

fn refuse(why: impl Into<String>) -> io::Error {
    io::Error::other(why.into())
}

fn serve_one(conn: &OwnedFd, config: &BrokerConfig, connect: &HostConnector) -> io::Result<()> {
    let Some((Request::Area { bytes, cid, port }, _)) = receive::<Request>(conn.as_fd())? else {
        return Err(refuse("asked for nothing"));
    };
    if (cid, port) != config.host {
        return Err(refuse(format!(
            "the host is at vsock:{}:{}, not vsock:{cid}:{port}",
            config.host.0, config.host.1
        )));
    }
    let page = if config.huge_pages {
        crate::pages::HUGE_PAGE
    } else {
        4096
    };
    let (held, pages) = hand_out(conn, config, (page, config.huge_pages), bytes, 0)?;
    let mut given = held.len;
    let mut held = vec![held];
    let host = connect()?;
    // Seals the pages given later; the process never sees it (it cannot read what
    // was written to its connection before it had it).
    let key = vmcuda_wire::memory::grant_key()
        .map_err(|_| refuse("no randomness for the grant's key"))?;
    let grant = GuestPagesGrant {
        page_size: page as u64,
        pages,
        key,
    };
    let mut host = host;
    send_grant(&host, &grant)?;
    send(
        conn.as_fd(),
        &Reply::Connected {
            pages: grant.pages.clone(),
        },
        Some(host.as_fd()),
    )?;
    // Until the process goes: more pages when it asks (its pinned memory), each
    // sealed for the host under the grant's key. From here nothing may return early:
    // the pages go only after the host has closed the connection (below).
    loop {
        if read_timeout(conn.as_fd(), None).is_err() {
            break;
        }
        let (bytes, page, huge) = match receive::<Request>(conn.as_fd()) {
            Ok(Some((Request::More { bytes }, _))) => (bytes, page, config.huge_pages),
            // Registered memory is moved in place, page by page.
            Ok(Some((Request::Register { bytes }, _))) => (bytes, 4096, false),
            Ok(Some((Request::Reconnect, _))) => {
                // The old connection is dead to the process, and ends here too, so
                // that a grant has one connection at a time; the pages stay held
                // (below) until the host closes the one in use when the process goes.
                let _ = sock::shutdown(host.as_raw_fd(), sock::Shutdown::Both);
                let made = connect().and_then(|h| send_grant(&h, &grant).map(|()| h));
                let sent = match made {
                    Ok(h) => {
                        let sent = send(
                            conn.as_fd(),
                            &Reply::Connected {
                                pages: grant.pages.clone(),
                            },
                            Some(h.as_fd()),
                        );
                        host = h;
                        sent
                    }
                    Err(e) => send(conn.as_fd(), &Reply::Refused(e.to_string()), None),
                };
                if sent.is_err() {
                    break;
                }
                continue;
            }
            // Gone, or saying what it may not: it is done with the broker.
            _ => break,
        };
        if read_timeout(conn.as_fd(), Some(SETUP_WAIT)).is_err() {
            break;
        }
        let reply = match hand_out(conn, config, (page, huge), bytes, given) {
            Ok((more, pages)) => {
                let seal = vmcuda_wire::memory::grant_seal(&key, page as u64, &pages);
                given += more.len;
                held.push(more);
                Reply::Extended { pages, seal }
            }
            Err(e) => Reply::Refused(e.to_string()),
        };
        if send(conn.as_fd(), &reply, None).is_err() {
            break;
        }
    }
    // Its connection ends; the pages go only once the host has closed it.
    let mut buf = [0u8; 64];
    let _ = sock::shutdown(host.as_raw_fd(), sock::Shutdown::Write);
    let _ = sock::setsockopt(
        &host,
        sock::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(HOST_CLOSE_WAIT.as_secs() as i64, 0),
    );
    loop {
        match nix::unistd::read(&host, &mut buf) {
            Ok(0) | Err(nix::errno::Errno::ECONNRESET | nix::errno::Errno::ENOTCONN) => break,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                // The host never said it was done: keep the pages rather than give the
                // kernel pages the GPU may still write.
                eprintln!("vmcuda guest-ram-broker: the host did not close a connection ({e}); its {given} bytes stay held");
                std::mem::forget(held);
                return Ok(());
            }
        }
    }
    drop(held);
    Ok(())
}

/// Send `grant` on a new connection to the host: its first frame.
fn send_grant(host: &OwnedFd, grant: &GuestPagesGrant) -> io::Result<()> {
    let meta = postcard::to_stdvec(grant).map_err(io::Error::other)?;
    let header = FrameHeader::new(Op::GuestPagesGrant.code(), 0, 0, meta.len(), 0);
    let mut writer = vmcuda_wire::no_sigpipe::NoSigPipe(host.as_fd());
    frame::write_frame(&mut writer, &header, &meta, &[])
}

/// Make a memfd of `bytes` (whole pages of `page` bytes, huge pages or not) for the
/// process on `conn`, which has `given` bytes already, hand it over, and once the
/// process has mapped it, seal it so that no page can be freed, pin ordinary pages so
/// that none can move, and read the pages' guest-physical addresses.
fn hand_out(
    conn: &OwnedFd,
    config: &BrokerConfig,
    (page, huge): (usize, bool),
    bytes: u64,
    given: usize,
) -> io::Result<(Held, Vec<u64>)> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let room = config.max_area.saturating_sub(given);
    let len = usize::try_from(bytes)
        .ok()
        .filter(|b| *b > 0 && b.next_multiple_of(page) <= room)
        .ok_or_else(|| {
            refuse(format!(
                "{bytes} more bytes beside {given} is over the {} a process may have",
                config.max_area
            ))
        })?
        .next_multiple_of(page);
    let mut flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    if huge {
        flags |= MFdFlags::MFD_HUGETLB;
    }
    let memfd = memfd_create(c"vmcuda-guest-ram", flags)
        .map_err(|e| refuse(format!("no memory ({e}; boot with hugepages=N)")))?;
    nix::unistd::ftruncate(&memfd, len as i64).map_err(|e| refuse(format!("no memory ({e})")))?;
    fcntl(
        &memfd,
        FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW),
    )?;
    let length = NonZeroUsize::new(len).ok_or_else(|| refuse("empty"))?;
    // Owned by `Held`, which unmaps it.
    let base = map_populated(&memfd, length)
        .map_err(|e| refuse(format!("no memory ({e}; boot with hugepages=N)")))?;
    let mut held = Held {
        base,
        len,
        _memfd: memfd,
        _pin: None,
    };
    send(
        conn.as_fd(),
        &Reply::Memory {
            len: len as u64,
            page_size: page as u64,
        },
        Some(held._memfd.as_fd()),
    )?;
    match receive::<Request>(conn.as_fd())? {
        Some((Request::Mapped, _)) => {}
        _ => return Err(refuse("did not map its memory")),
    }
    // From here no page of the file can be freed (no hole punched, no truncation) while
    // the broker holds it; the process keeps the writable mapping it made.
    fcntl(
        &held._memfd,
        FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_FUTURE_WRITE | SealFlag::F_SEAL_SEAL),
    )
    .map_err(|e| refuse(format!("cannot seal the memory ({e})")))?;
    if !huge {
        // The guest's kernel may move or reclaim ordinary pages, but not pinned ones.
        held._pin = Some(
            crate::pages::pin::LongTermPin::new(held.base, len)
                .map_err(|e| refuse(format!("cannot pin the pages ({e})")))?,
        );
    }
    let pages =
        crate::pages::read_pagemap_pages(held.base.as_ptr() as usize, len, page).map_err(refuse)?;
    Ok((held, pages))
}

/// How long the broker waits for the host to close a connection whose process left.
const HOST_CLOSE_WAIT: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests;
