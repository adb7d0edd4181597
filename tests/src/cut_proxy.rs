//! A Unix socket relay between guests and a daemon that can cut every connection it
//! carries, as a VM's live migration or a network fault does: for testing that guests
//! come back to their sessions. Descriptors a guest passes (SCM_RIGHTS: its command
//! ring's and shared memory's) are passed on to the daemon.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vmcuda_wire::transport::{recv_keeping_fds, FdQueue};

/// The relay: guests connect to [`CutProxy::path`].
pub struct CutProxy {
    pub path: PathBuf,
    live: Arc<Mutex<Vec<(UnixStream, UnixStream)>>>,
    connections: Arc<AtomicU64>,
}

impl CutProxy {
    /// Relay connections to `listen` on to the daemon's socket `target`.
    pub fn start(listen: &Path, target: &Path) -> io::Result<CutProxy> {
        let _ = std::fs::remove_file(listen);
        let listener = UnixListener::bind(listen)?;
        let live: Arc<Mutex<Vec<(UnixStream, UnixStream)>>> = Arc::default();
        let connections = Arc::new(AtomicU64::new(0));
        let (l, c, target) = (live.clone(), connections.clone(), target.to_path_buf());
        std::thread::spawn(move || {
            for guest in listener.incoming() {
                let Ok(guest) = guest else { continue };
                let Ok(host) = UnixStream::connect(&target) else {
                    continue;
                };
                c.fetch_add(1, Ordering::Relaxed);
                if let (Ok(g), Ok(h)) = (guest.try_clone(), host.try_clone()) {
                    l.lock().unwrap().push((g, h));
                }
                relay(guest, host);
            }
        });
        Ok(CutProxy {
            path: listen.to_path_buf(),
            live,
            connections,
        })
    }

    /// Cut every connection now (both ends see it end); how many were cut.
    pub fn cut(&self) -> usize {
        let mut live = self.live.lock().unwrap();
        let n = live.len();
        for (g, h) in live.drain(..) {
            let _ = g.shutdown(std::net::Shutdown::Both);
            let _ = h.shutdown(std::net::Shutdown::Both);
        }
        n
    }

    /// Connections relayed so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// One connection both ways, each on a thread of its own; when either way ends, both
/// sockets are shut down.
fn relay(guest: UnixStream, host: UnixStream) {
    let (Ok(g2), Ok(h2)) = (guest.try_clone(), host.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = to_host(&guest, &host);
        let _ = guest.shutdown(std::net::Shutdown::Both);
        let _ = host.shutdown(std::net::Shutdown::Both);
    });
    std::thread::spawn(move || {
        let (mut from, mut to) = (h2, g2);
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
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
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
