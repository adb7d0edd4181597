//! The two small protocols of the peer link: a worker and its daemon's broker over
//! their socket pair, and two daemons over mutual TLS.
//!
//! Broker messages are a tag byte, a little-endian `u32` payload length and the
//! payload; a reader refuses a length over [`MAX_PAYLOAD`], so neither side can make
//! the other allocate what it likes.

use std::io::{self, Read, Write};

/// A transfer's name: 128 random bits the receiving daemon draws, handed to the guest
/// and by it to the sending host. Knowing one is the only way to deliver into it.
pub type Ticket = [u8; 16];

/// The most bytes one `Data` message carries.
pub const MAX_CHUNK: usize = 1 << 20;
/// The longest payload any message has (a chunk; an endpoint is far shorter).
pub const MAX_PAYLOAD: usize = MAX_CHUNK;
/// The longest endpoint a guest may name.
pub const MAX_ENDPOINT: usize = 255;

const EXPECT: u8 = 1;
const SEND: u8 = 2;
const RECEIVE: u8 = 3;
const ABORT: u8 = 4;
const DATA: u8 = 5;
const TICKET: u8 = 16;
const GO: u8 = 17;
const END: u8 = 18;

/// How a broker request ended (the `End` message; also the refusal byte between
/// daemons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    Done = 0,
    /// This daemon has no `[peers]`.
    NotConfigured = 1,
    /// The endpoint is not in `[peers] allow`.
    NotAllowed = 2,
    /// The other daemon could not be reached, or its certificate was refused.
    Unreachable = 3,
    /// The other daemon refused the ticket (unknown, used, expired, or another size).
    Refused = 4,
    /// A ticket this worker does not hold, or a size it was not registered with.
    UnknownTicket = 5,
    /// The other side did not come in time.
    TimedOut = 6,
    /// The connection broke mid-transfer.
    Broken = 7,
    /// The sending worker gave up (it could not read its device memory).
    Aborted = 8,
    /// Too many transfers outstanding.
    TooMany = 9,
}

impl Outcome {
    fn from_u8(b: u8) -> Outcome {
        match b {
            0 => Outcome::Done,
            1 => Outcome::NotConfigured,
            2 => Outcome::NotAllowed,
            3 => Outcome::Unreachable,
            4 => Outcome::Refused,
            5 => Outcome::UnknownTicket,
            6 => Outcome::TimedOut,
            8 => Outcome::Aborted,
            9 => Outcome::TooMany,
            _ => Outcome::Broken,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::NotConfigured => "this host has no [peers] link",
            Outcome::NotAllowed => "the endpoint is not in [peers] allow",
            Outcome::Unreachable => "the other host cannot be reached over the peer link",
            Outcome::Refused => "the other host refused the ticket",
            Outcome::UnknownTicket => "no such ticket for this connection",
            Outcome::TimedOut => "the other side did not come in time",
            Outcome::Broken => "the peer connection broke",
            Outcome::Aborted => "the sender gave up",
            Outcome::TooMany => "too many transfers outstanding",
        }
    }
}

/// One message between a worker and its broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Worker: register a transfer of `size` bytes into this worker.
    Expect { size: u64 },
    /// Worker: send `size` bytes to `endpoint` for `ticket`; `Data` follows once the
    /// broker says `Go`.
    Send {
        ticket: Ticket,
        size: u64,
        endpoint: String,
    },
    /// Worker: hand over the bytes of `ticket`'s transfer, as `Data`, then `End`.
    Receive { ticket: Ticket, size: u64 },
    /// Worker: no more `Data` for the current send.
    Abort,
    /// Either way: part of a transfer's bytes.
    Data(Vec<u8>),
    /// Broker: the registered ticket, and the endpoint the sender is to use.
    Ticket { ticket: Ticket, endpoint: String },
    /// Broker: the other daemon took the ticket; send the bytes.
    Go,
    /// Broker: the request is over.
    End(Outcome),
}

fn header(tag: u8, len: usize) -> [u8; 5] {
    let mut h = [0u8; 5];
    h[0] = tag;
    h[1..].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// Write a `Data` message of `bytes` without copying them into a message first.
pub fn write_data(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    debug_assert!(bytes.len() <= MAX_CHUNK);
    w.write_all(&header(DATA, bytes.len()))?;
    w.write_all(bytes)
}

pub fn write_msg(w: &mut impl Write, msg: &Msg) -> io::Result<()> {
    let mut payload = Vec::new();
    let tag = match msg {
        Msg::Expect { size } => {
            payload.extend_from_slice(&size.to_le_bytes());
            EXPECT
        }
        Msg::Send {
            ticket,
            size,
            endpoint,
        } => {
            payload.extend_from_slice(ticket);
            payload.extend_from_slice(&size.to_le_bytes());
            payload.extend_from_slice(endpoint.as_bytes());
            SEND
        }
        Msg::Receive { ticket, size } => {
            payload.extend_from_slice(ticket);
            payload.extend_from_slice(&size.to_le_bytes());
            RECEIVE
        }
        Msg::Abort => ABORT,
        Msg::Data(bytes) => return write_data(w, bytes),
        Msg::Ticket { ticket, endpoint } => {
            payload.extend_from_slice(ticket);
            payload.extend_from_slice(endpoint.as_bytes());
            TICKET
        }
        Msg::Go => GO,
        Msg::End(outcome) => {
            payload.push(*outcome as u8);
            END
        }
    };
    let mut out = header(tag, payload.len()).to_vec();
    out.extend_from_slice(&payload);
    w.write_all(&out)?;
    w.flush()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("peer broker: {what}"))
}

fn ticket_and_size(p: &[u8]) -> io::Result<(Ticket, u64, &[u8])> {
    if p.len() < 24 {
        return Err(bad("short message"));
    }
    let ticket: Ticket = p[..16].try_into().expect("16 bytes");
    let size = u64::from_le_bytes(p[16..24].try_into().expect("8 bytes"));
    Ok((ticket, size, &p[24..]))
}

fn endpoint(bytes: &[u8]) -> io::Result<String> {
    if bytes.len() > MAX_ENDPOINT {
        return Err(bad("endpoint too long"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| bad("endpoint is not UTF-8"))
}

/// Read one message; a length over [`MAX_PAYLOAD`] or an unknown tag is an error.
pub fn read_msg(r: &mut impl Read) -> io::Result<Msg> {
    let mut h = [0u8; 5];
    r.read_exact(&mut h)?;
    let len = u32::from_le_bytes(h[1..].try_into().expect("4 bytes")) as usize;
    if len > MAX_PAYLOAD {
        return Err(bad("message too long"));
    }
    let mut p = vec![0u8; len];
    r.read_exact(&mut p)?;
    let exact = |n: usize| {
        if p.len() == n {
            Ok(())
        } else {
            Err(bad("message of the wrong length"))
        }
    };
    Ok(match h[0] {
        EXPECT => {
            exact(8)?;
            Msg::Expect {
                size: u64::from_le_bytes(p[..8].try_into().expect("8 bytes")),
            }
        }
        SEND => {
            let (ticket, size, rest) = ticket_and_size(&p)?;
            Msg::Send {
                ticket,
                size,
                endpoint: endpoint(rest)?,
            }
        }
        RECEIVE => {
            exact(24)?;
            let (ticket, size, _) = ticket_and_size(&p)?;
            Msg::Receive { ticket, size }
        }
        ABORT => {
            exact(0)?;
            Msg::Abort
        }
        DATA => Msg::Data(p),
        TICKET => {
            if p.len() < 16 {
                return Err(bad("short message"));
            }
            Msg::Ticket {
                ticket: p[..16].try_into().expect("16 bytes"),
                endpoint: endpoint(&p[16..])?,
            }
        }
        GO => {
            exact(0)?;
            Msg::Go
        }
        END => {
            exact(1)?;
            Msg::End(Outcome::from_u8(p[0]))
        }
        _ => return Err(bad("unknown message")),
    })
}

/// What a sending daemon says first on a peer connection.
const MAGIC: &[u8; 4] = b"VMCP";
const VERSION: u8 = 1;
pub const TRANSFER_HEADER_LEN: usize = 4 + 1 + 16 + 8;

/// The opening of a peer connection: which transfer, and how many bytes follow.
pub fn transfer_header(ticket: &Ticket, size: u64) -> [u8; TRANSFER_HEADER_LEN] {
    let mut h = [0u8; TRANSFER_HEADER_LEN];
    h[..4].copy_from_slice(MAGIC);
    h[4] = VERSION;
    h[5..21].copy_from_slice(ticket);
    h[21..].copy_from_slice(&size.to_le_bytes());
    h
}

pub fn parse_transfer_header(h: &[u8; TRANSFER_HEADER_LEN]) -> Option<(Ticket, u64)> {
    if &h[..4] != MAGIC || h[4] != VERSION {
        return None;
    }
    let ticket = h[5..21].try_into().expect("16 bytes");
    Some((
        ticket,
        u64::from_le_bytes(h[21..].try_into().expect("8 bytes")),
    ))
}

/// The one byte a receiving daemon answers the header with, and again after the last
/// byte arrived: `Done`, or why not.
pub fn outcome_byte(b: u8) -> Outcome {
    Outcome::from_u8(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(msg: Msg) {
        let mut buf = Vec::new();
        write_msg(&mut buf, &msg).unwrap();
        assert_eq!(read_msg(&mut &buf[..]).unwrap(), msg);
    }

    #[test]
    fn every_message_reads_back_as_written() {
        let ticket = [7u8; 16];
        roundtrip(Msg::Expect { size: 1 << 40 });
        roundtrip(Msg::Send {
            ticket,
            size: 12,
            endpoint: "gpu-b.example:7732".into(),
        });
        roundtrip(Msg::Receive { ticket, size: 3 });
        roundtrip(Msg::Abort);
        roundtrip(Msg::Data(vec![1, 2, 3]));
        roundtrip(Msg::Data(vec![]));
        roundtrip(Msg::Ticket {
            ticket,
            endpoint: "[::1]:1".into(),
        });
        roundtrip(Msg::Go);
        for o in [
            Outcome::Done,
            Outcome::NotConfigured,
            Outcome::NotAllowed,
            Outcome::Unreachable,
            Outcome::Refused,
            Outcome::UnknownTicket,
            Outcome::TimedOut,
            Outcome::Broken,
            Outcome::Aborted,
            Outcome::TooMany,
        ] {
            roundtrip(Msg::End(o));
        }
    }

    #[test]
    fn oversized_unknown_and_malformed_messages_are_refused() {
        // A length over the bound is refused before anything is allocated for it.
        let mut h = header(DATA, 0).to_vec();
        h[1..5].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert!(read_msg(&mut &h[..]).is_err());
        assert!(read_msg(&mut &header(99, 0)[..]).is_err());
        // An Expect of 7 bytes, a Send too short for its ticket, a long endpoint.
        let mut m = header(EXPECT, 7).to_vec();
        m.extend_from_slice(&[0; 7]);
        assert!(read_msg(&mut &m[..]).is_err());
        let mut m = header(SEND, 10).to_vec();
        m.extend_from_slice(&[0; 10]);
        assert!(read_msg(&mut &m[..]).is_err());
        let mut long = Vec::new();
        write_msg(
            &mut long,
            &Msg::Send {
                ticket: [0; 16],
                size: 1,
                endpoint: "a".repeat(MAX_ENDPOINT + 1),
            },
        )
        .unwrap();
        assert!(read_msg(&mut &long[..]).is_err());
        // A message cut short.
        let mut cut = Vec::new();
        write_msg(&mut cut, &Msg::Expect { size: 1 }).unwrap();
        cut.pop();
        assert!(read_msg(&mut &cut[..]).is_err());
    }

    #[test]
    fn transfer_headers_read_back_and_strangers_are_refused() {
        let h = transfer_header(&[9; 16], 4096);
        assert_eq!(parse_transfer_header(&h), Some(([9; 16], 4096)));
        let mut wrong = h;
        wrong[0] = b'X';
        assert_eq!(parse_transfer_header(&wrong), None);
        let mut later = h;
        later[4] = VERSION + 1;
        assert_eq!(parse_transfer_header(&later), None);
    }
}
