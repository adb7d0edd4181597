//! Capture of what the CUDA driver prints in the worker process (kernel `printf`,
//! device-side assert messages) so it reaches the guest's own stdout and stderr.
//!
//! The driver writes to the process's fd 1 and fd 2 through C stdio. Both are pointed
//! at memfds opened with `O_APPEND`: writes never block (a pipe could fill while the
//! driver holds our only thread inside a synchronize), and after each call the worker
//! flushes stdio, takes whatever arrived, and truncates. The worker's own log goes to
//! a duplicate of the original stderr, so it never mixes with the guest's output.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct ConsoleCapture {
    stdout: File,
    stderr: File,
}

/// Output captured since the last call.
#[derive(Default, Debug)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

fn memfd(name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string; the returned descriptor, when
    // valid, is owned by nobody else.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned solely here.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // SAFETY: F_SETFL on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

fn redirect(file: &File, target: libc::c_int) -> io::Result<()> {
    // SAFETY: dup2 onto a standard descriptor number; both descriptors are valid.
    if unsafe { libc::dup2(file.as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
        let stdout = memfd(c"vmcuda-guest-stdout")?;
        let stderr = memfd(c"vmcuda-guest-stderr")?;
        redirect(&stdout, 1)?;
        redirect(&stderr, 2)?;
        Ok((ConsoleCapture { stdout, stderr }, log))
    }

    /// Everything written to fd 1 and fd 2 since the last call.
    pub fn take(&mut self) -> io::Result<Captured> {
        // SAFETY: fflush(NULL) flushes every open C stdio stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        Ok(Captured {
            stdout: drain(&mut self.stdout)?,
            stderr: drain(&mut self.stderr)?,
        })
    }
}

fn drain(file: &mut File) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(len as usize);
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut out)?;
    // O_APPEND makes the next write land at the new end, so truncating is enough.
    file.set_len(0)?;
    Ok(out)
}
