//! Server addresses and the blocking byte streams both sides speak frames over.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

use crate::handshake::WELL_KNOWN_PORT;
use crate::no_sigpipe::{send_nosignal, NoSigPipe};
use crate::tls::{self, ClientStream, Shared, TlsError};

/// Where the host backend listens, as written in `VMCUDA_SERVER`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddr {
    /// `unix:PATH`
    Unix(String),
    /// `tcp:HOST:PORT`
    Tcp(String),
    /// `tls:HOST:PORT`: TCP with TLS; the host's certificate must be issued for HOST
    /// (or the name the guest is told to expect instead).
    Tls(String),
    /// `vsock:CID:PORT` (virtio-vsock; the host is CID 2)
    Vsock { cid: u32, port: u32 },
}

/// Used when `VMCUDA_SERVER` is unset: the host daemon's default Unix socket.
pub const DEFAULT_UNIX_PATH: &str = "/run/vmcuda/vmcuda.sock";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AddrError {
    #[error(
        "server address `{0}` has no scheme; expected unix:PATH, tcp:HOST:PORT, tls:HOST:PORT or vsock:CID:PORT"
    )]
    NoScheme(String),
    #[error("unknown scheme `{0}`; expected unix, tcp, tls or vsock")]
    UnknownScheme(String),
    #[error("tcp and tls addresses need HOST:PORT, not `{0}`")]
    BadTcp(String),
    #[error("empty unix socket path")]
    EmptyPath,
    #[error("vsock address `{0}` needs CID[:PORT] with numbers")]
    BadVsock(String),
    #[error("{0} hosts named; at most {MAX_HOSTS} are served to one program")]
    TooManyHosts(usize),
}

/// Hosts one program may use at once (a handle's top byte names its host).
pub const MAX_HOSTS: usize = 16;

impl FromStr for ServerAddr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, AddrError> {
        let (scheme, rest) = s
            .split_once(':')
            .ok_or_else(|| AddrError::NoScheme(s.into()))?;
        match scheme {
            "unix" if rest.is_empty() => Err(AddrError::EmptyPath),
            "unix" => Ok(ServerAddr::Unix(rest.into())),
            "tcp" => host_port(rest).map(ServerAddr::Tcp),
            "tls" => host_port(rest).map(ServerAddr::Tls),
            "vsock" => {
                let bad = || AddrError::BadVsock(rest.into());
                let (cid, port) = match rest.split_once(':') {
                    Some((c, p)) => (c.parse().map_err(|_| bad())?, p.parse().map_err(|_| bad())?),
                    None => (rest.parse().map_err(|_| bad())?, u32::from(WELL_KNOWN_PORT)),
                };
                Ok(ServerAddr::Vsock { cid, port })
            }
            other => Err(AddrError::UnknownScheme(other.into())),
        }
    }
}

impl ServerAddr {
    /// Several addresses, comma-separated (whitespace around each is ignored): the
    /// hosts whose GPUs one program sees, in order.
    pub fn parse_list(s: &str) -> Result<Vec<ServerAddr>, AddrError> {
        let addrs = s
            .split(',')
            .map(|a| a.trim().parse())
            .collect::<Result<Vec<_>, _>>()?;
        if addrs.len() > MAX_HOSTS {
            return Err(AddrError::TooManyHosts(addrs.len()));
        }
        Ok(addrs)
    }
}

/// `HOST:PORT`, or a bare host (a name, an IPv4 address or a bracketed IPv6 one)
/// meaning the well-known port.
fn host_port(rest: &str) -> Result<String, AddrError> {
    if !rest.is_empty() && (!rest.contains(':') || rest.starts_with('[') && rest.ends_with(']')) {
        return Ok(format!("{rest}:{WELL_KNOWN_PORT}"));
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(rest.into()),
        _ => Err(AddrError::BadTcp(rest.into())),
    }
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Unix(p) => write!(f, "unix:{p}"),
            ServerAddr::Tcp(a) => write!(f, "tcp:{a}"),
            ServerAddr::Tls(a) => write!(f, "tls:{a}"),
            ServerAddr::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
        }
    }
}

/// Reserved vsock ports a privileged guest process connects from, highest first.
pub const RESERVED_SOURCE_PORTS: std::ops::RangeInclusive<u32> = 512..=1023;

/// A TCP connection to `to` (`HOST:PORT`, IPv4) from the local address `from`: a
/// chosen source, as a listener that shares its places per source sees it.
pub fn connect_tcp_from(from: std::net::Ipv4Addr, to: &str) -> io::Result<TcpStream> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::net::SocketAddrV4;
    use std::os::fd::AsRawFd;
    let to: SocketAddrV4 = to
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(from, 0)),
    )?;
    socket::connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

/// Connect from a reserved source port (below 1024), which Linux lets only a process
/// with CAP_NET_BIND_SERVICE bind: the vhost-user device trusts such a connection with
/// the guest's RAM (see docs/security.md). `None` when this process may not bind one,
/// all are taken, or `VMCUDA_SHARED_MEMORY=0`: the caller connects as usual.
pub fn connect_vsock_from_reserved_port(cid: u32, port: u32) -> Option<vsock::VsockStream> {
    use nix::errno::Errno;
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, VsockAddr};
    if std::env::var("VMCUDA_SHARED_MEMORY").is_ok_and(|v| v == "0") {
        return None;
    }
    const VMADDR_CID_ANY: u32 = u32::MAX;
    for source in RESERVED_SOURCE_PORTS.rev() {
        let sock = socket(
            AddressFamily::Vsock,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .ok()?;
        match bind(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            &VsockAddr::new(VMADDR_CID_ANY, source),
        ) {
            Ok(()) => {}
            Err(Errno::EADDRINUSE) => continue,
            // EACCES: not privileged. Anything else: no reserved port either.
            Err(_) => return None,
        }
        return connect(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            &VsockAddr::new(cid, port),
        )
        .ok()
        .map(|()| vsock::VsockStream::from(sock));
    }
    None
}

/// The host's vsock CID, as seen from a guest.
pub const HOST_CID: u32 = 2;

impl ServerAddr {
    /// `HOST:PORT` of a `tcp:` or `tls:` address.
    pub fn host_port(&self) -> Option<&str> {
        match self {
            ServerAddr::Tcp(a) | ServerAddr::Tls(a) => Some(a),
            _ => None,
        }
    }
}

/// This machine's vsock CID (`IOCTL_VM_SOCKETS_GET_LOCAL_CID` on /dev/vsock). Fails
/// when /dev/vsock is absent, that is when no vsock module is loaded.
pub fn local_vsock_cid() -> io::Result<u32> {
    vsock::get_local_cid()
}

/// Whether a local CID is a VM guest's: guests get 3 and up; 2 is the host and
/// `VMADDR_CID_ANY` (`u32::MAX`) means vsock is loaded without a guest transport.
pub fn is_guest_cid(cid: u32) -> bool {
    cid > HOST_CID && cid != u32::MAX
}

/// Bind a listening Unix socket at `path`, replacing a stale socket file.
///
/// The socket is bound and listening under a private name first, then renamed into
/// place: the file appears only once it accepts, so a client or a readiness check
/// that waits for the file never meets a bound-but-not-listening socket (which
/// refuses connections).
pub fn bind_unix_listener(path: &Path) -> io::Result<UnixListener> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(format!(".{}.tmp", std::process::id()));
    let staging = PathBuf::from(staging);
    let _ = std::fs::remove_file(&staging);
    let listener = UnixListener::bind(&staging)?;
    if let Err(e) = std::fs::rename(&staging, path) {
        let _ = std::fs::remove_file(&staging);
        return Err(e);
    }
    Ok(listener)
}

/// A connected stream of any kind.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    /// Its clones share one TLS session (see [`Shared`]).
    Tls(Shared<ClientStream>),
    Vsock(vsock::VsockStream),
}

/// How a guest speaks TLS: the configuration (its trusted CAs) and, when the host's
/// certificate names something other than the address's host, that name.
#[derive(Clone, Debug)]
pub struct TlsClient {
    pub config: std::sync::Arc<rustls::ClientConfig>,
    pub server_name: Option<String>,
}

/// Why [`Stream::connect`] failed.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// Nobody answers, or the socket could not be made.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The TCP connection was made, but the TLS handshake failed (or could not start).
    #[error("{0}")]
    Tls(TlsError),
    #[error("tls: addresses need the guest's TLS settings")]
    NoTlsSettings,
}

impl Stream {
    /// Connect to `addr`; `tls` is needed for `tls:` addresses only.
    pub fn connect(addr: &ServerAddr, tls: Option<&TlsClient>) -> Result<Stream, ConnectError> {
        match addr {
            ServerAddr::Unix(path) => Ok(UnixStream::connect(path).map(Stream::Unix)?),
            ServerAddr::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                // Requests are small and latency-bound.
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            ServerAddr::Tls(a) => {
                let tls = tls.ok_or(ConnectError::NoTlsSettings)?;
                let name = tls.server_name.as_deref().unwrap_or(tls::host_of(a));
                match tls::connect(a, name, tls.config.clone()) {
                    Ok(s) => Ok(Stream::Tls(s)),
                    // Nobody answering is the same failure as on plain TCP.
                    Err(TlsError::Connect(e)) => Err(ConnectError::Io(e)),
                    Err(e) => Err(ConnectError::Tls(e)),
                }
            }
            ServerAddr::Vsock { cid, port } => {
                if let Some(s) = connect_vsock_from_reserved_port(*cid, *port) {
                    return Ok(Stream::Vsock(s));
                }
                Ok(vsock::VsockStream::connect_with_cid_port(*cid, *port).map(Stream::Vsock)?)
            }
        }
    }

    /// The socket's descriptor, for polling; `None` for TLS, whose buffered records
    /// make the socket's readiness a poor guide to what can be read.
    pub fn socket_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Stream::Unix(s) => Some(s.as_fd()),
            Stream::Tcp(s) => Some(s.as_fd()),
            Stream::Tls(_) => None,
            Stream::Vsock(s) => Some(s.as_fd()),
        }
    }

    /// A connected vsock socket made elsewhere (by the guest's RAM broker).
    pub fn vsock_from(fd: std::os::fd::OwnedFd) -> Stream {
        Stream::Vsock(vsock::VsockStream::from(fd))
    }

    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Tls(s) => Stream::Tls(s.clone()),
            Stream::Vsock(s) => Stream::Vsock(s.try_clone()?),
        })
    }
}

impl Stream {
    /// Write `bufs` in one message carrying `fd` (SCM_RIGHTS). Only Unix sockets can
    /// pass descriptors; on TCP this is `ErrorKind::Unsupported`.
    pub fn send_with_fd(
        &self,
        bufs: &[io::IoSlice<'_>],
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> io::Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let Stream::Unix(s) = self else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        let fds = [fd.as_raw_fd()];
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let sent = nix::sys::socket::sendmsg::<()>(
            s.as_fd().as_raw_fd(),
            bufs,
            &cmsg,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(io::Error::from)?;
        // The descriptor travelled with the first byte; the rest is an ordinary write.
        let mut rest = Vec::with_capacity(total - sent);
        for b in bufs {
            rest.extend_from_slice(b);
        }
        NoSigPipe(s).write_all(&rest[sent..])
    }
}

/// A Unix stream reader that keeps the descriptors peers pass along (SCM_RIGHTS), in
/// arrival order, instead of letting plain reads discard them.
pub struct FdReader {
    stream: UnixStream,
    fds: FdQueue,
}

/// The queue of received descriptors, shared with whoever consumes them.
pub type FdQueue =
    std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<std::os::fd::OwnedFd>>>;

impl FdReader {
    pub fn new(stream: UnixStream) -> (FdReader, FdQueue) {
        let fds = FdQueue::default();
        (
            FdReader {
                stream,
                fds: fds.clone(),
            },
            fds,
        )
    }
}

/// At most this many descriptors are accepted per message.
const MAX_FDS_PER_MESSAGE: usize = 4;

/// Read what `socket` has into `buf`, keeping the descriptors that came with it in
/// `fds`, in order.
pub fn recv_keeping_fds(
    socket: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &FdQueue,
) -> io::Result<usize> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS_PER_MESSAGE]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = loop {
        match nix::sys::socket::recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let n = msg.bytes;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let nix::sys::socket::ControlMessageOwned::ScmRights(received) = c {
            let mut queue = fds.lock().unwrap_or_else(|p| p.into_inner());
            for fd in received {
                // SAFETY: the kernel just installed `fd` in this process for us;
                // nothing else owns it.
                queue.push_back(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok(n)
}

impl Read for FdReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        recv_keeping_fds(self.stream.as_fd(), buf, &self.fds)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Vsock(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        match self {
            Stream::Unix(s) => send_nosignal(s.as_fd(), bufs),
            Stream::Tcp(s) => send_nosignal(s.as_fd(), bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
            Stream::Vsock(s) => send_nosignal(s.as_fd(), bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            // TLS writes already go out whole; this reports a failure they hid.
            Stream::Tls(s) => s.flush(),
            // Sockets have no buffer of their own to flush.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_socket_file_always_accepts_and_replaces_a_stale_one() {
        let dir = std::env::temp_dir().join(format!("vmcuda-bind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        // A stale socket from a process that died: bound, nobody listening.
        drop(UnixListener::bind(&path).unwrap());
        assert!(UnixStream::connect(&path).is_err());

        let listener = bind_unix_listener(&path).unwrap();
        UnixStream::connect(&path).expect("the file appears only when it accepts");
        let (_conn, _) = listener.accept().unwrap();
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s.sock"], "no staging file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn descriptors_travel_with_the_bytes() {
        use std::io::IoSlice;
        use std::os::fd::AsFd;
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let sender = Stream::Unix(a);
        sender
            .send_with_fd(&[IoSlice::new(b"hel"), IoSlice::new(b"lo")], file.as_fd())
            .unwrap();
        let (mut reader, fds) = FdReader::new(b);
        let mut got = [0u8; 5];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        assert_eq!(fds.lock().unwrap().len(), 1);
    }

    #[test]
    fn parses_a_list_of_hosts_in_order() {
        assert_eq!(
            ServerAddr::parse_list("unix:/a, tls:h:1 ,vsock:2"),
            Ok(vec![
                ServerAddr::Unix("/a".into()),
                ServerAddr::Tls("h:1".into()),
                ServerAddr::Vsock {
                    cid: 2,
                    port: u32::from(WELL_KNOWN_PORT)
                },
            ])
        );
        assert_eq!(
            ServerAddr::parse_list("unix:/a,"),
            Err(AddrError::NoScheme("".into()))
        );
        let many = vec!["unix:/s"; MAX_HOSTS + 1].join(",");
        assert_eq!(
            ServerAddr::parse_list(&many),
            Err(AddrError::TooManyHosts(MAX_HOSTS + 1))
        );
    }

    #[test]
    fn parses_addresses() {
        assert_eq!("unix:/tmp/s".parse(), Ok(ServerAddr::Unix("/tmp/s".into())));
        assert_eq!(
            "tcp:10.0.0.1:99".parse(),
            Ok(ServerAddr::Tcp("10.0.0.1:99".into()))
        );
        assert_eq!(
            "tcp:gpuhost".parse(),
            Ok(ServerAddr::Tcp(format!("gpuhost:{WELL_KNOWN_PORT}")))
        );
        assert!(matches!(
            "nope".parse::<ServerAddr>(),
            Err(AddrError::NoScheme(_))
        ));
        assert!(matches!(
            "udp:x:1".parse::<ServerAddr>(),
            Err(AddrError::UnknownScheme(_))
        ));
        assert!(matches!(
            "tcp::1".parse::<ServerAddr>(),
            Err(AddrError::BadTcp(_))
        ));
        assert_eq!("unix:".parse::<ServerAddr>(), Err(AddrError::EmptyPath));
        assert_eq!(ServerAddr::Unix("/a".into()).to_string(), "unix:/a");
        assert_eq!(
            "tls:gpuhost:99".parse(),
            Ok(ServerAddr::Tls("gpuhost:99".into()))
        );
        assert_eq!(
            "tls:[::1]".parse(),
            Ok(ServerAddr::Tls(format!("[::1]:{WELL_KNOWN_PORT}")))
        );
        assert!(matches!(
            "tls:".parse::<ServerAddr>(),
            Err(AddrError::BadTcp(_))
        ));
        assert_eq!(ServerAddr::Tls("h:1".into()).to_string(), "tls:h:1");
        assert_eq!(
            "vsock:2:7731".parse(),
            Ok(ServerAddr::Vsock { cid: 2, port: 7731 })
        );
        assert_eq!(
            "vsock:2".parse(),
            Ok(ServerAddr::Vsock {
                cid: 2,
                port: u32::from(WELL_KNOWN_PORT)
            })
        );
        assert!(matches!(
            "vsock:host:1".parse::<ServerAddr>(),
            Err(AddrError::BadVsock(_))
        ));
        assert_eq!(
            ServerAddr::Vsock { cid: 3, port: 9 }.to_string(),
            "vsock:3:9"
        );
    }
}
