//! Capture of what the CUDA driver prints in the worker process (kernel `printf`,
//! device-side assert messages) so it reaches the guest's own stdout and stderr.
//!
//! The driver writes to the process's fd 1 and fd 2 through C stdio (made unbuffered
//! here, so its output reaches the descriptor at once). Both are pointed at memfds:
//! writes never block (a pipe could fill while the driver holds our only thread inside
//! a synchronize). Before each reply the worker looks at the first byte of each file
//! (mapped), and only when something came reads it and starts the file over. The
//! worker's own log goes to a duplicate of the original stderr, so it never mixes with
//! the guest's output.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

/// Bytes of each capture file the worker watches in memory: output starts at the
/// file's beginning, so its first byte is enough to see that something came.
const WATCHED: usize = 4096;

/// Every this many replies, the files are read whatever their first byte says: output
/// that starts with a zero byte is late by this many replies at most, never lost.
const FULL_CHECK_EVERY: u32 = 64;

pub struct ConsoleCapture {
    stdout: Capture,
    stderr: Capture,
    checks: u32,
}

/// Output captured since the last call.
#[derive(Default, Debug)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// One captured descriptor: a memfd the descriptor now writes to, from offset 0 (the
/// two share one file offset), and a view of its first bytes, which are zero until
/// something is written. Looking costs a memory load where a system call per reply
/// cost about a microsecond of every call that waits (bench/results/RESULTS.md).
struct Capture {
    file: File,
    view: NonNull<u8>,
}

impl Capture {
    fn on(name: &std::ffi::CStr, target: libc::c_int) -> io::Result<Capture> {
        // SAFETY: `name` is a valid NUL-terminated string; the returned descriptor, when
        // valid, is owned by nobody else.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned solely here.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(WATCHED as u64)?;
        // SAFETY: a new read-only shared view of the file's first bytes, where the
        // kernel chooses; it lives as long as this value, which unmaps it.
        let view = unsafe {
            nix::sys::mman::mmap(
                None,
                std::num::NonZeroUsize::new(WATCHED).expect("nonzero"),
                nix::sys::mman::ProtFlags::PROT_READ,
                nix::sys::mman::MapFlags::MAP_SHARED,
                &file,
                0,
            )
        }
        .map_err(io::Error::from)?;
        // SAFETY: dup2 onto a descriptor number the caller names; both are valid.
        if unsafe { libc::dup2(file.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Capture {
            file,
            view: view.cast(),
        })
    }

    /// Whether something was written since the last drain (unless it began with a
    /// zero byte).
    fn written(&self) -> bool {
        // SAFETY: the view's first byte lies in a live mapping of ours; the file is
        // never shorter than the view while it can be looked at (see `drain`).
        unsafe { std::ptr::read_volatile(self.view.as_ptr()) != 0 }
    }

    /// Everything written since the last drain; the file starts over, zeroed.
    fn drain(&mut self) -> io::Result<Vec<u8>> {
        // The shared offset is where the writes ended.
        let end = self.file.stream_position()?;
        if end == 0 {
            return Ok(Vec::new());
        }
        let mut out = vec![0; end as usize];
        self.file.read_exact_at(&mut out, 0)?;
        self.file.set_len(0)?;
        self.file.set_len(WATCHED as u64)?;
        self.file.seek(SeekFrom::Start(0))?;
        Ok(out)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the view this value made.
        let _ = unsafe { nix::sys::mman::munmap(self.view.cast(), WATCHED) };
    }
}

impl ConsoleCapture {
    /// Redirect fds 1 and 2. Returns the capture and a duplicate of the original
    /// stderr for the worker's own logging.
    pub fn install() -> io::Result<(ConsoleCapture, File)> {
        // SAFETY: duplicating fd 2, which is open in every process we start.
        let log_fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if log_fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `log_fd` was just created and is owned solely here.
        let log = File::from(unsafe { OwnedFd::from_raw_fd(log_fd) });
        let capture = ConsoleCapture::on(1, 2)?;
        extern "C" {
            static stdout: *mut libc::FILE;
        }
        // SAFETY: C's own `stdout` stream, before anything was written to it; no
        // buffer is passed.
        unsafe { libc::setvbuf(stdout, std::ptr::null_mut(), libc::_IONBF, 0) };
        Ok((capture, log))
    }

    /// Capture whatever is written to `stdout` and `stderr` (descriptor numbers).
    fn on(stdout: libc::c_int, stderr: libc::c_int) -> io::Result<ConsoleCapture> {
        Ok(ConsoleCapture {
            stdout: Capture::on(c"vmcuda-guest-stdout", stdout)?,
            stderr: Capture::on(c"vmcuda-guest-stderr", stderr)?,
            checks: 0,
        })
    }

    /// Everything written to the captured descriptors since the last call. C stdio
    /// buffers are flushed at each full check only: the driver's output that reaches
    /// the descriptor at once is seen at once.
    pub fn take(&mut self) -> io::Result<Captured> {
        self.checks = self.checks.wrapping_add(1);
        let full = self.checks.is_multiple_of(FULL_CHECK_EVERY);
        if full {
            // SAFETY: fflush(NULL) flushes every open C stdio stream; no pointer is
            // passed.
            unsafe { libc::fflush(std::ptr::null_mut()) };
        }
        let take = |c: &mut Capture| {
            if full || c.written() {
                c.drain()
            } else {
                Ok(Vec::new())
            }
        };
        Ok(Captured {
            stdout: take(&mut self.stdout)?,
            stderr: take(&mut self.stderr)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A free descriptor number to capture, standing in for fd 1 or 2 (a test must
    /// not take its harness's output).
    fn spare_fd() -> libc::c_int {
        // SAFETY: duplicating fd 0 to a new number this test owns.
        unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 100) }
    }

    fn write(fd: libc::c_int, bytes: &[u8]) {
        // SAFETY: writing a live buffer to a descriptor this test owns.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    /// Output is taken once, in order, both streams apart; a long one past the watched
    /// bytes whole; and one that starts with a zero byte at the next full check.
    #[test]
    fn output_is_taken_once_in_order_and_nothing_is_lost() {
        let (out, err) = (spare_fd(), spare_fd());
        let mut c = ConsoleCapture::on(out, err).unwrap();
        assert!(c.take().unwrap().stdout.is_empty());
        write(out, b"hello ");
        write(out, b"world\n");
        write(err, b"assert failed\n");
        let got = c.take().unwrap();
        assert_eq!(got.stdout, b"hello world\n");
        assert_eq!(got.stderr, b"assert failed\n");
        let again = c.take().unwrap();
        assert!(again.stdout.is_empty() && again.stderr.is_empty());
        let long: Vec<u8> = (0..3 * WATCHED).map(|i| b'a' + (i % 26) as u8).collect();
        write(out, &long);
        assert_eq!(c.take().unwrap().stdout, long);
        write(out, b"\0starts with zero");
        let mut seen = Vec::new();
        for _ in 0..FULL_CHECK_EVERY {
            seen.extend(c.take().unwrap().stdout);
        }
        assert_eq!(seen, b"\0starts with zero");
        // SAFETY: closing the test's own descriptors.
        unsafe {
            libc::close(out);
            libc::close(err);
        }
    }
}
