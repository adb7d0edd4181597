//! Writes that never raise `SIGPIPE`, for every stream the transports carry (plain
//! sockets and the TCP under TLS).

use std::io::{self, Read, Write};

/// A socket written without `SIGPIPE`: the guest library lives in programs that keep
/// the signal's default action, which kills the program when it writes to a connection
/// whose host has gone (a worker killed, a host restarted). Written with
/// `MSG_NOSIGNAL`, the write fails with `EPIPE` instead, and the CUDA call reports the
/// lost connection (`cudaErrorDevicesUnavailable`). Reads are the socket's own.
#[derive(Debug)]
pub struct NoSigPipe<S>(pub S);

/// Send `bufs` on `fd` with `MSG_NOSIGNAL` (see [`NoSigPipe`]).
pub fn send_nosignal(
    fd: std::os::fd::BorrowedFd<'_>,
    bufs: &[io::IoSlice<'_>],
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    nix::sys::socket::sendmsg::<()>(
        fd.as_raw_fd(),
        bufs,
        &[],
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)
}

impl<S: std::os::fd::AsFd> Write for NoSigPipe<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send_nosignal(self.0.as_fd(), &[io::IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        send_nosignal(self.0.as_fd(), bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: Read> Read for NoSigPipe<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}
