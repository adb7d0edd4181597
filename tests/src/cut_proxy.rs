//! A relay between guests and a daemon that can cut every connection it carries, as a
//! VM's live migration or a network fault does: for testing that guests come back to
//! their sessions. On Unix sockets, descriptors a guest passes (SCM_RIGHTS: its
//! command ring's and shared memory's) are passed on to the daemon; on TCP (a `tls:`
//! or `tcp:` guest) the bytes go as they are, TLS records and all.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vmcuda_wire::transport::{recv_keeping_fds, FdQueue};

/// The relay: guests connect to [`CutProxy::address`].
pub struct CutProxy {
    /// Where guests connect: the Unix socket's path, or the TCP listener's HOST:PORT.
    pub address: String,
    /// Both sockets of each connection relayed now.
    live: Arc<Mutex<Vec<(OwnedFd, OwnedFd)>>>,
    connections: Arc<AtomicU64>,
}

impl CutProxy {
    /// Relay connections to `listen` on to the daemon's socket `target`.
    pub fn start(listen: &Path, target: &Path) -> io::Result<CutProxy> {
        let _ = std::fs::remove_file(listen);
        let listener = UnixListener::bind(listen)?;
        let proxy = CutProxy::new(listen.display().to_string());
        let target = target.to_path_buf();
        proxy.take_all(
            move || listener.accept().map(|(s, _)| s),
            move || UnixStream::connect(&target),
            relay,
        );
        Ok(proxy)
    }

    /// Relay TCP connections to a new loopback port on to the daemon's TCP listener
    /// `target` (HOST:PORT).
    pub fn start_tcp(target: &str) -> io::Result<CutProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let proxy = CutProxy::new(listener.local_addr()?.to_string());
        let target = target.to_string();
        proxy.take_all(
            move || listener.accept().map(|(s, _)| s),
            move || {
                let host = TcpStream::connect(&target)?;
                host.set_nodelay(true)?;
                Ok(host)
            },
            |guest, host| {
                let _ = guest.set_nodelay(true);
                let (Ok(g2), Ok(h2)) = (guest.try_clone(), host.try_clone()) else {
                    return;
                };
                std::thread::spawn(move || copy_then_shut(guest, host));
                std::thread::spawn(move || copy_then_shut(h2, g2));
            },
        );
        Ok(proxy)
    }

    /// On a thread of its own: each guest `accept` gives is connected to the daemon
    /// (`connect`), counted, kept for cutting and relayed (`relay`).
    fn take_all<S: AsFd + Send + 'static>(
        &self,
        accept: impl Fn() -> io::Result<S> + Send + 'static,
        connect: impl Fn() -> io::Result<S> + Send + 'static,
        relay: impl Fn(S, S) + Send + 'static,
    ) {
        let (live, count) = (self.live.clone(), self.connections.clone());
        std::thread::spawn(move || loop {
            let Ok(guest) = accept() else { continue };
            let Ok(host) = connect() else { continue };
            count.fetch_add(1, Ordering::Relaxed);
            let (g, h) = (
                guest.as_fd().try_clone_to_owned(),
                host.as_fd().try_clone_to_owned(),
            );
            if let (Ok(g), Ok(h)) = (g, h) {
                live.lock().unwrap().push((g, h));
            }
            relay(guest, host);
        });
    }

    fn new(address: String) -> CutProxy {
        CutProxy {
            address,
            live: Arc::default(),
            connections: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Cut every connection now (both ends see it end); how many were cut.
    pub fn cut(&self) -> usize {
        let mut live = self.live.lock().unwrap();
        let n = live.len();
        for (g, h) in live.drain(..) {
            shut(&g);
            shut(&h);
        }
        n
    }

    /// Connections relayed so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// One way of a connection; when it ends, both sockets are shut down.
fn copy_then_shut<S: Read + Write + AsFd>(mut from: S, mut to: S) {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    shut(&from);
    shut(&to);
}

/// Shut a socket down both ways: its peer sees the end at once.
fn shut(socket: &impl AsFd) {
    let _ =
        nix::sys::socket::shutdown(socket.as_fd().as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

/// One Unix connection both ways, each on a thread of its own; when either way ends,
/// both sockets are shut down.
fn relay(guest: UnixStream, host: UnixStream) {
    let (Ok(g2), Ok(h2)) = (guest.try_clone(), host.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = to_host(&guest, &host);
        shut(&guest);
        shut(&host);
    });
    std::thread::spawn(move || copy_then_shut(h2, g2));
}

/// The guest's bytes to the host, descriptors riding with the bytes they came with.
fn to_host(guest: &UnixStream, host: &UnixStream) -> io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    let fds = FdQueue::default();
    loop {
        let n = recv_keeping_fds(guest.as_fd(), &mut buf, &fds)?;
        if n == 0 {
            return Ok(());
        }
        let passed: Vec<OwnedFd> = fds.lock().unwrap().drain(..).collect();
        if passed.is_empty() {
            (&*host).write_all(&buf[..n])?;
            continue;
        }
        let raw: Vec<i32> = passed.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&raw)];
        let sent = nix::sys::socket::sendmsg::<()>(
            host.as_raw_fd(),
            &[io::IoSlice::new(&buf[..n])],
            &cmsg,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(io::Error::from)?;
        (&*host).write_all(&buf[sent..n])?;
    }
}
