//! The worker's side of the peer link: the socket to its daemon's broker, inherited at
//! [`BROKER_FD`], over which it registers, sends and receives transfers. The worker
//! never opens a connection itself (its system call filter forbids it).

use std::io::{self, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use vmcuda_wire::CudaStatus;

use super::proto::{self, Msg, Outcome, Ticket, MAX_CHUNK};

/// Where a worker finds its broker socket (after the admission channel at 3).
pub const BROKER_FD: i32 = 4;

/// Why a transfer did not happen.
#[derive(Debug)]
pub enum LinkError {
    /// The broker, or the other daemon, said no (or the link broke there).
    Outcome(Outcome),
    /// This worker's device memory failed it.
    Cuda(CudaStatus),
    /// The socket to the broker failed: the link is gone for this worker.
    Link(io::Error),
}

impl From<io::Error> for LinkError {
    fn from(e: io::Error) -> Self {
        LinkError::Link(e)
    }
}

impl LinkError {
    /// The CUDA error the guest gets.
    pub fn status(&self) -> CudaStatus {
        match self {
            LinkError::Cuda(s) => *s,
            LinkError::Outcome(Outcome::NotConfigured) => CudaStatus::ErrorNotSupported,
            LinkError::Outcome(Outcome::NotAllowed) => CudaStatus::ErrorNotPermitted,
            LinkError::Outcome(Outcome::Refused | Outcome::UnknownTicket | Outcome::TooMany) => {
                CudaStatus::ErrorInvalidValue
            }
            LinkError::Outcome(_) | LinkError::Link(_) => CudaStatus::ErrorDevicesUnavailable,
        }
    }
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Outcome(o) => f.write_str(o.describe()),
            LinkError::Cuda(s) => write!(f, "{s}"),
            LinkError::Link(e) => write!(f, "the link to the daemon failed: {e}"),
        }
    }
}

/// This worker's socket to its daemon's broker.
pub struct PeerLink {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl PeerLink {
    pub fn new(socket: UnixStream) -> io::Result<PeerLink> {
        Ok(PeerLink {
            reader: BufReader::new(socket.try_clone()?),
            writer: socket,
        })
    }

    /// Take the broker socket this process inherited at [`BROKER_FD`], if that
    /// descriptor is a socket.
    pub fn take_inherited() -> Option<PeerLink> {
        // SAFETY: fstat only reads into a stat buffer; a closed descriptor answers EBADF.
        let is_socket = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(BROKER_FD, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
        };
        if !is_socket {
            return None;
        }
        // SAFETY: the daemon put the broker socket at this descriptor for this purpose;
        // nothing else in the worker uses it, so it is owned from here on.
        let owned = unsafe { OwnedFd::from_raw_fd(BROKER_FD) };
        let _ = nix::fcntl::fcntl(
            &owned,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        PeerLink::new(UnixStream::from(owned)).ok()
    }

    fn end(&mut self) -> Result<(), LinkError> {
        match proto::read_msg(&mut self.reader)? {
            Msg::End(Outcome::Done) => Ok(()),
            Msg::End(o) => Err(LinkError::Outcome(o)),
            other => Err(unexpected(&other)),
        }
    }

    /// Register a transfer of `size` bytes into this worker: its ticket, and the
    /// endpoint the sender is to deliver to.
    pub fn expect(&mut self, size: u64) -> Result<(Ticket, String), LinkError> {
        proto::write_msg(&mut self.writer, &Msg::Expect { size })?;
        match proto::read_msg(&mut self.reader)? {
            Msg::Ticket { ticket, endpoint } => Ok((ticket, endpoint)),
            Msg::End(o) => Err(LinkError::Outcome(o)),
            other => Err(unexpected(&other)),
        }
    }

    /// Send `size` bytes to `endpoint` for `ticket`; `fill(offset, chunk)` reads each
    /// chunk of them.
    pub fn send(
        &mut self,
        ticket: Ticket,
        size: u64,
        endpoint: &str,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<(), CudaStatus>,
    ) -> Result<(), LinkError> {
        let msg = Msg::Send {
            ticket,
            size,
            endpoint: endpoint.into(),
        };
        proto::write_msg(&mut self.writer, &msg)?;
        match proto::read_msg(&mut self.reader)? {
            Msg::Go => {}
            Msg::End(o) => return Err(LinkError::Outcome(o)),
            other => return Err(unexpected(&other)),
        }
        let mut buf = vec![0u8; MAX_CHUNK.min(size as usize)];
        let mut done = 0;
        while done < size {
            let n = (size - done).min(buf.len() as u64) as usize;
            if let Err(status) = fill(done, &mut buf[..n]) {
                proto::write_msg(&mut self.writer, &Msg::Abort)?;
                let _ = self.end();
                return Err(LinkError::Cuda(status));
            }
            proto::write_data(&mut self.writer, &buf[..n])?;
            done += n as u64;
        }
        self.end()
    }

    /// Receive `ticket`'s `size` bytes; `store(offset, chunk)` puts each chunk away
    /// as it arrives.
    pub fn receive(
        &mut self,
        ticket: Ticket,
        size: u64,
        mut store: impl FnMut(u64, &[u8]) -> Result<(), CudaStatus>,
    ) -> Result<(), LinkError> {
        proto::write_msg(&mut self.writer, &Msg::Receive { ticket, size })?;
        let mut done = 0u64;
        let mut failed = None;
        loop {
            match proto::read_msg(&mut self.reader)? {
                Msg::Data(bytes) if done + bytes.len() as u64 <= size => {
                    // Once storing failed, the rest is read and dropped: the socket
                    // stays in step.
                    if failed.is_none() {
                        if let Err(status) = store(done, &bytes) {
                            failed = Some(status);
                        }
                    }
                    done += bytes.len() as u64;
                }
                Msg::End(Outcome::Done) if done == size => {
                    return failed.map_or(Ok(()), |s| Err(LinkError::Cuda(s)))
                }
                Msg::End(o) if o != Outcome::Done => return Err(LinkError::Outcome(o)),
                other => return Err(unexpected(&other)),
            }
        }
    }
}

fn unexpected(msg: &Msg) -> LinkError {
    let what = match msg {
        Msg::Data(d) => format!("{} bytes more than expected", d.len()),
        other => format!("{other:?}"),
    };
    LinkError::Link(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the broker sent {what}"),
    ))
}
