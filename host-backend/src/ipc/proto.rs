//! The messages between a worker and its daemon's IPC registry: one record each on a
//! `SOCK_SEQPACKET` socket pair (so a message never arrives in pieces), a tag byte and
//! fixed little-endian fields, with at most one descriptor riding along (SCM_RIGHTS:
//! the test double's shared memory).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use vmcuda_wire::transport::{recv_keeping_fds, FdQueue};

/// An export's name: 128 random bits the registry draws. The guest's 64-byte handle
/// carries it and nothing else of the host.
pub type Token = [u8; 16];

/// The bytes of a driver IPC handle (`CUipcMemHandle`, `CUipcEventHandle`), and of
/// a pool pointer's export data (`CUmemPoolPtrExportData`).
pub const HANDLE_LEN: usize = 64;

/// The longest message: a tag, a kind, a device, a size and a driver handle.
pub const MAX_MESSAGE: usize = 1 + 1 + 4 + 8 + HANDLE_LEN;

const EXPORT: u8 = 1;
const IMPORT: u8 = 2;
const WITHDRAW: u8 = 3;
const TOKEN: u8 = 16;
const EXPORTED: u8 = 17;
const DONE: u8 = 18;
const REFUSED: u8 = 19;

/// What is exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Memory = 1,
    Event = 2,
    /// A physical allocation (`cuMemCreate`), passed as a POSIX descriptor.
    Allocation = 3,
    /// A memory pool made with POSIX descriptor handles
    /// (`cuMemPoolExportToShareableHandle`): the driver's descriptor rides along.
    Pool = 4,
    /// An allocation from such a pool (`cuMemPoolExportPointer`): the driver's 64
    /// bytes of export data in place of a handle.
    PoolPointer = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Memory),
            2 => Some(Kind::Event),
            3 => Some(Kind::Allocation),
            4 => Some(Kind::Pool),
            5 => Some(Kind::PoolPointer),
            _ => None,
        }
    }
}

/// What the exporting worker's driver gave for an export, and what an importer needs
/// to open it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub kind: Kind,
    /// The exporter's device (the driver's ordinal in the worker).
    pub device: i32,
    /// The allocation's bytes (0 for an event or a pool).
    pub size: u64,
    /// The driver's handle (a pool pointer's export data); never shown to the guest.
    pub handle: [u8; HANDLE_LEN],
}

/// Why the registry said no.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// No export of this VM by that token: forged, another VM's, or withdrawn.
    Unknown = 1,
    /// The token is the asking worker's own export (a process opening its own handle).
    OwnExport = 2,
    /// The VM has `[ipc] max_exports` exports already.
    TooMany = 3,
    /// The worker has not been admitted (its VM is not known yet).
    NotAdmitted = 4,
    /// The registry could not serve it (no randomness, a bad message).
    Broken = 5,
}

impl Refusal {
    fn from_u8(b: u8) -> Refusal {
        match b {
            1 => Refusal::Unknown,
            2 => Refusal::OwnExport,
            3 => Refusal::TooMany,
            4 => Refusal::NotAdmitted,
            _ => Refusal::Broken,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Refusal::Unknown => {
                "no export of this VM has that handle (forged, another VM's, or closed)"
            }
            Refusal::OwnExport => "the handle is this connection's own export",
            Refusal::TooMany => "the VM has [ipc] max_exports exports already",
            Refusal::NotAdmitted => "the connection is not admitted",
            Refusal::Broken => "the registry could not serve the request",
        }
    }
}

/// Worker to registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Register an export (with the shared memory's descriptor on the test double).
    Export(Export),
    /// Open another worker's export: its `Export` comes back.
    Import(Token),
    /// The exporter's allocation or event is gone: no later import finds it.
    Withdraw(Token),
}

/// Registry to worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Token(Token),
    Exported(Export),
    Done,
    Refused(Refusal),
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("ipc registry: {what}"))
}

fn put_export(out: &mut Vec<u8>, e: &Export) {
    out.push(e.kind as u8);
    out.extend_from_slice(&e.device.to_le_bytes());
    out.extend_from_slice(&e.size.to_le_bytes());
    out.extend_from_slice(&e.handle);
}

fn get_export(p: &[u8]) -> io::Result<Export> {
    if p.len() != 1 + 4 + 8 + HANDLE_LEN {
        return Err(bad("export of the wrong length"));
    }
    Ok(Export {
        kind: Kind::from_u8(p[0]).ok_or_else(|| bad("unknown kind"))?,
        device: i32::from_le_bytes(p[1..5].try_into().expect("4 bytes")),
        size: u64::from_le_bytes(p[5..13].try_into().expect("8 bytes")),
        handle: p[13..].try_into().expect("64 bytes"),
    })
}

fn get_token(p: &[u8]) -> io::Result<Token> {
    p.try_into().map_err(|_| bad("token of the wrong length"))
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_MESSAGE);
        match self {
            Request::Export(e) => {
                out.push(EXPORT);
                put_export(&mut out, e);
            }
            Request::Import(t) => {
                out.push(IMPORT);
                out.extend_from_slice(t);
            }
            Request::Withdraw(t) => {
                out.push(WITHDRAW);
                out.extend_from_slice(t);
            }
        }
        out
    }

    pub fn decode(m: &[u8]) -> io::Result<Request> {
        let (tag, p) = m.split_first().ok_or_else(|| bad("empty message"))?;
        match *tag {
            EXPORT => Ok(Request::Export(get_export(p)?)),
            IMPORT => Ok(Request::Import(get_token(p)?)),
            WITHDRAW => Ok(Request::Withdraw(get_token(p)?)),
            _ => Err(bad("unknown request")),
        }
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_MESSAGE);
        match self {
            Reply::Token(t) => {
                out.push(TOKEN);
                out.extend_from_slice(t);
            }
            Reply::Exported(e) => {
                out.push(EXPORTED);
                put_export(&mut out, e);
            }
            Reply::Done => out.push(DONE),
            Reply::Refused(r) => {
                out.push(REFUSED);
                out.push(*r as u8);
            }
        }
        out
    }

    pub fn decode(m: &[u8]) -> io::Result<Reply> {
        let (tag, p) = m.split_first().ok_or_else(|| bad("empty message"))?;
        match *tag {
            TOKEN => Ok(Reply::Token(get_token(p)?)),
            EXPORTED => Ok(Reply::Exported(get_export(p)?)),
            DONE if p.is_empty() => Ok(Reply::Done),
            REFUSED if p.len() == 1 => Ok(Reply::Refused(Refusal::from_u8(p[0]))),
            _ => Err(bad("unknown reply")),
        }
    }
}

/// Send one record, with `fd` riding along when given.
pub fn send(socket: BorrowedFd<'_>, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = fd.map(|f| [f.as_raw_fd()]);
    let cmsg: Vec<ControlMessage<'_>> = fds.iter().map(|f| ControlMessage::ScmRights(f)).collect();
    let iov = [io::IoSlice::new(bytes)];
    loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(bad("short send")),
        }
    }
}

/// Receive one record and the descriptor that came with it, if any; `None` when the
/// other side closed. A record longer than [`MAX_MESSAGE`] is cut short and so fails to
/// decode; descriptors beyond the first are closed.
pub fn receive(socket: BorrowedFd<'_>) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
    let mut buf = [0u8; MAX_MESSAGE + 1];
    let fds = FdQueue::default();
    let n = recv_keeping_fds(socket, &mut buf, &fds)?;
    let mut fds = fds.lock().unwrap_or_else(|p| p.into_inner());
    let fd = fds.pop_front();
    fds.clear();
    if n == 0 && fd.is_none() {
        return Ok(None);
    }
    if n > MAX_MESSAGE {
        return Err(bad("message too long"));
    }
    Ok(Some((buf[..n].to_vec(), fd)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> Export {
        Export {
            kind: Kind::Memory,
            device: 1,
            size: 1 << 33,
            handle: [7; HANDLE_LEN],
        }
    }

    #[test]
    fn every_message_reads_back_as_written() {
        for r in [
            Request::Export(export()),
            Request::Import([3; 16]),
            Request::Withdraw([4; 16]),
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
            assert!(r.encode().len() <= MAX_MESSAGE);
        }
        for kind in [Kind::Allocation, Kind::Pool, Kind::PoolPointer] {
            let r = Request::Export(Export { kind, ..export() });
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        for r in [
            Reply::Token([5; 16]),
            Reply::Exported(Export {
                kind: Kind::Event,
                ..export()
            }),
            Reply::Exported(Export {
                kind: Kind::PoolPointer,
                ..export()
            }),
            Reply::Done,
            Reply::Refused(Refusal::Unknown),
            Reply::Refused(Refusal::OwnExport),
            Reply::Refused(Refusal::TooMany),
            Reply::Refused(Refusal::NotAdmitted),
            Reply::Refused(Refusal::Broken),
        ] {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[99]).is_err());
        assert!(Request::decode(&[IMPORT, 1, 2]).is_err());
        let mut e = Request::Export(export()).encode();
        e.pop();
        assert!(Request::decode(&e).is_err());
        let mut kind = Request::Export(export()).encode();
        kind[1] = 6;
        assert!(Request::decode(&kind).is_err());
        assert!(Reply::decode(&[DONE, 0]).is_err());
    }

    #[test]
    fn records_carry_a_descriptor_and_arrive_whole() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::os::fd::AsFd;
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        let msg = Request::Import([1; 16]).encode();
        send(a.as_fd(), &msg, Some(file.as_fd())).unwrap();
        send(a.as_fd(), &msg, None).unwrap();
        let (got, fd) = receive(b.as_fd()).unwrap().unwrap();
        assert_eq!(got, msg);
        assert!(fd.is_some());
        let (got, fd) = receive(b.as_fd()).unwrap().unwrap();
        assert_eq!(got, msg);
        assert!(fd.is_none());
        drop(a);
        assert!(receive(b.as_fd()).unwrap().is_none());
    }
}
