//! The worker's side: the socket to its daemon's registry, inherited at
//! [`REGISTRY_FD`].

use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

use vmcuda_wire::CudaStatus;

use super::proto::{self, Export, Refusal, Reply, Request, Token};

/// Where a worker the daemon starts finds its registry socket (after the admission
/// channel at 3 and the peer broker's at 4); the vhost-user device names its own.
pub const REGISTRY_FD: i32 = 5;

/// Why the registry did not do what was asked.
#[derive(Debug)]
pub enum IpcError {
    Refused(Refusal),
    /// The socket failed: the link is gone for this worker.
    Link(io::Error),
}

impl From<io::Error> for IpcError {
    fn from(e: io::Error) -> Self {
        IpcError::Link(e)
    }
}

impl IpcError {
    /// The CUDA error the guest gets: a handle the VM cannot open is an invalid value
    /// whatever the reason, so that nothing is learnt of other VMs; a process opening
    /// its own export is what the driver calls an invalid context
    /// (`cudaErrorDeviceUninitialized`, 201, is `CUDA_ERROR_INVALID_CONTEXT`).
    pub fn status(&self) -> CudaStatus {
        match self {
            IpcError::Refused(Refusal::Unknown) => CudaStatus::ErrorInvalidValue,
            IpcError::Refused(Refusal::OwnExport) => CudaStatus::ErrorDeviceUninitialized,
            IpcError::Refused(Refusal::TooMany) => CudaStatus::ErrorMemoryAllocation,
            IpcError::Refused(Refusal::NotAdmitted | Refusal::Broken) | IpcError::Link(_) => {
                CudaStatus::ErrorOperatingSystem
            }
        }
    }
}

impl std::fmt::Display for IpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpcError::Refused(r) => f.write_str(r.describe()),
            IpcError::Link(e) => write!(f, "the link to the daemon's registry failed: {e}"),
        }
    }
}

/// This worker's socket to its daemon's registry.
pub struct IpcLink {
    socket: OwnedFd,
}

impl IpcLink {
    pub fn new(socket: OwnedFd) -> IpcLink {
        IpcLink { socket }
    }

    /// Take the registry socket this process inherited at `fd`, if that descriptor is
    /// a socket.
    pub fn take_inherited(fd: i32) -> Option<IpcLink> {
        if fd <= 2 {
            return None;
        }
        // SAFETY: fstat only reads into a stat buffer; a closed descriptor answers EBADF.
        let is_socket = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
        };
        if !is_socket {
            return None;
        }
        // SAFETY: the spawner put the registry socket at this descriptor for this
        // purpose (and said so with --ipc-registry); nothing else in the worker uses
        // it, so it is owned from here on.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let _ = nix::fcntl::fcntl(
            &owned,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        Some(IpcLink::new(owned))
    }

    fn ask(
        &mut self,
        request: &Request,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(Reply, Option<OwnedFd>), IpcError> {
        proto::send(self.socket.as_fd(), &request.encode(), fd)?;
        let (bytes, fd) = proto::receive(self.socket.as_fd())?.ok_or_else(|| {
            IpcError::Link(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the registry closed the link",
            ))
        })?;
        match Reply::decode(&bytes)? {
            Reply::Refused(r) => Err(IpcError::Refused(r)),
            reply => Ok((reply, fd)),
        }
    }

    /// Register an export; its token.
    pub fn export(
        &mut self,
        export: Export,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Token, IpcError> {
        match self.ask(&Request::Export(export), fd)? {
            (Reply::Token(t), _) => Ok(t),
            (other, _) => Err(unexpected(&other)),
        }
    }

    /// Another worker's export of this VM, and its shared memory if it has one.
    pub fn import(&mut self, token: Token) -> Result<(Export, Option<OwnedFd>), IpcError> {
        match self.ask(&Request::Import(token), None)? {
            (Reply::Exported(e), fd) => Ok((e, fd)),
            (other, _) => Err(unexpected(&other)),
        }
    }

    /// Withdraw this worker's export `token`.
    pub fn withdraw(&mut self, token: Token) -> Result<(), IpcError> {
        match self.ask(&Request::Withdraw(token), None)? {
            (Reply::Done, _) => Ok(()),
            (other, _) => Err(unexpected(&other)),
        }
    }
}

fn unexpected(reply: &Reply) -> IpcError {
    IpcError::Link(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the registry sent {reply:?}"),
    ))
}
