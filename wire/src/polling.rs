//! Polling for a peer's next bytes before sleeping on them.
//!
//! A blocking read that finds the socket empty puts the thread to sleep, and waking it
//! when the bytes come costs microseconds, on both sides of every round trip: most of a
//! small call's latency. A [`PollingReader`] first polls the socket for a short window
//! and reads at once when bytes come within it, as CUDA's own waits spin before they
//! yield; past the window it sleeps in the read as before. A long wait costs the
//! window's CPU time once; the bytes read and their order are the same either way.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// How long to poll before sleeping, in microseconds, for the guest library and the
/// host's workers alike; `0` turns polling off.
pub const POLL_ENV: &str = "VMCUDA_POLL_US";

/// Fewer cores than this and polling is off unless asked for: the peer the poller
/// waits on may need the core it would spin on.
pub const MIN_CORES_TO_POLL: usize = 4;

/// The polling window: [`POLL_ENV`] when set, else `default` on a machine with
/// [`MIN_CORES_TO_POLL`] cores or more, else none.
pub fn window_from_env(default: Duration) -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    window(std::env::var(POLL_ENV).ok().as_deref(), default, cores)
}

fn window(setting: Option<&str>, default: Duration, cores: usize) -> Duration {
    match setting.map(|s| s.trim().parse::<u64>()) {
        Some(Ok(us)) => Duration::from_micros(us),
        Some(Err(_)) | None if cores >= MIN_CORES_TO_POLL => default,
        _ => Duration::ZERO,
    }
}

/// Poll `fd` until it is readable (or closed, or in error: the read that follows says
/// which) or `window` has passed. Returns whether it became ready in time.
pub fn wait_readable(fd: BorrowedFd<'_>, window: Duration) -> bool {
    let until = Instant::now() + window;
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) if n > 0 => return true,
            // A failed poll leaves the answer to the blocking read.
            Err(_) => return false,
            Ok(_) => {}
        }
        if Instant::now() >= until {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// A reader that polls its socket for a while before each read that would sleep.
pub struct PollingReader<R> {
    inner: R,
    /// A duplicate of the socket's descriptor, for polling only: `inner` may not
    /// expose its own (a reader that also takes passed descriptors, say).
    fd: Option<OwnedFd>,
    window: Duration,
}

impl<R: Read> PollingReader<R> {
    /// Poll `socket` for up to `window` before reads of `inner`, which reads the same
    /// socket. Without a socket to poll (or a duplicate of its descriptor: out of
    /// descriptors), or with a zero window, it reads as `inner` alone would.
    pub fn new(inner: R, socket: Option<BorrowedFd<'_>>, window: Duration) -> PollingReader<R> {
        let fd = socket
            .filter(|_| !window.is_zero())
            .and_then(|s| s.try_clone_to_owned().ok());
        PollingReader { inner, fd, window }
    }

    pub fn window(&self) -> Duration {
        if self.fd.is_some() {
            self.window
        } else {
            Duration::ZERO
        }
    }
}

impl<R: Read> Read for PollingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(fd) = &self.fd {
            wait_readable(fd.as_fd(), self.window);
        }
        self.inner.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_window_follows_the_setting_then_the_cores() {
        let d = Duration::from_micros(50);
        assert_eq!(window(Some("7"), d, 1), Duration::from_micros(7));
        assert_eq!(window(Some("0"), d, 64), Duration::ZERO);
        assert_eq!(window(None, d, 16), d);
        assert_eq!(window(None, d, 2), Duration::ZERO);
        // A setting that is not a number is ignored, not taken as zero.
        assert_eq!(window(Some("lots"), d, 16), d);
        assert_eq!(window(Some("lots"), d, 2), Duration::ZERO);
    }

    #[test]
    fn bytes_that_come_within_the_window_are_read_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut r = PollingReader::new(&a, Some(a.as_fd()), Duration::from_millis(500));
        assert_eq!(r.window(), Duration::from_millis(500));
        let writer = std::thread::spawn(move || {
            for i in 0..100u8 {
                b.write_all(&[i]).unwrap();
            }
        });
        let mut got = [0u8; 100];
        r.read_exact(&mut got).unwrap();
        writer.join().unwrap();
        assert!(got.iter().enumerate().all(|(i, &v)| v == i as u8));
    }

    #[test]
    fn a_read_past_the_window_still_waits_for_its_bytes() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut r = PollingReader::new(&a, Some(a.as_fd()), Duration::from_micros(10));
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            b.write_all(b"late").unwrap();
        });
        let mut got = [0u8; 4];
        r.read_exact(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(&got, b"late");
    }

    #[test]
    fn a_closed_peer_ends_the_poll_and_the_read_sees_the_end() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut r = PollingReader::new(&a, Some(a.as_fd()), Duration::from_secs(30));
        let t = Instant::now();
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).unwrap(), 0);
        assert!(t.elapsed() < Duration::from_secs(30));
        assert!(wait_readable(a.as_fd(), Duration::from_secs(30)));
    }

    #[test]
    fn a_zero_window_keeps_no_descriptor() {
        let (a, _b) = UnixStream::pair().unwrap();
        let r = PollingReader::new(&a, Some(a.as_fd()), Duration::ZERO);
        assert_eq!(r.window(), Duration::ZERO);
    }
}
