//! The `peer` target: the daemon's side of the peer link (`vmcuda_host::peer::Broker`),
//! reached the two ways it is from outside: the messages workers send on their broker
//! sockets (a jailed worker runs guest work, so what it sends is as hostile as a
//! guest), and the connections other daemons make once their TLS handshake is done (a
//! transfer header, then the bytes).
//!
//! Input format: a run of actions, each a tag byte (modulo the number of actions) and
//! its fixed-size arguments, little-endian; missing bytes read as zero. Two workers
//! talk to one broker. Worker messages come either as raw bytes (a tag, the length the
//! header claims, a payload), which the broker's reader decodes, or as well-formed
//! requests that pick the tickets the broker handed out, so transfers get through.
//! Deliveries name a ticket handed out, with their header maybe damaged or cut short.
//!
//! Checked throughout: every answer the broker writes a worker is a well-formed
//! message, and the one the request calls for (a ticket, or why not); a ticket is
//! delivered once, only to the worker that registered it, with the bytes its sender
//! sent; a worker's tickets go with it.
//!
//! A send never reaches another daemon here: the only endpoint allowed is one nothing
//! listens on (the connect is refused at once), so sends end before their bytes. A
//! receive of a ticket nothing was delivered for would wait for the ticket's lifetime
//! (a minute): the harness never asks for one.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use vmcuda_host::peer::proto::{self, Msg, Outcome, Ticket, MAX_ENDPOINT, TRANSFER_HEADER_LEN};
use vmcuda_host::peer::Broker;
use vmcuda_host::source_log::Source;

use crate::{take_bytes, take_uint};

/// The endpoint the broker advertises with its tickets.
pub const ADVERTISED: &str = "receiver.fuzz:7732";
/// The one endpoint `[peers] allow` names: loopback's port 1, where nothing listens.
pub const ALLOWED: &str = "127.0.0.1:1";
/// Transfers one worker may have outstanding (the broker's bound).
const TICKETS_PER_WORKER: usize = 16;

/// One event at the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Bytes on worker `worker % 2`'s socket, read as one message: `tag`, the payload
    /// length the header claims, then the payload (up to `payload.len()` bytes).
    Raw {
        worker: u8,
        tag: u8,
        claimed: u32,
        payload: Vec<u8>,
    },
    /// Register a transfer of `size` bytes.
    Expect { worker: u8, size: u16 },
    /// Send `size` bytes for a ticket handed out (or a forged one when there is none)
    /// to the allowed endpoint (`to % 3` 0), another one (1) or an empty one (2).
    Send {
        worker: u8,
        ticket: u8,
        size: u16,
        to: u8,
    },
    /// Take in a ticket's bytes (skipped where the broker would wait for them).
    Receive { worker: u8, ticket: u8, size: u16 },
    /// Another daemon's connection for a ticket handed out: the header for `size`
    /// bytes, byte `damage % 40` of it flipped by `flip`, then `sent` bytes; or (`damage
    /// % 40` from 29 on) the header cut to `damage % 40 - 29` bytes and the connection
    /// closed.
    Deliver {
        ticket: u8,
        size: u16,
        damage: u8,
        flip: u8,
        sent: u16,
    },
    /// The worker's link closes; a new worker takes its place.
    Gone { worker: u8 },
}

const TAGS: u8 = 6;

impl Action {
    pub fn encode(actions: &[Action]) -> Vec<u8> {
        let mut out = Vec::new();
        for a in actions {
            match a {
                Action::Raw {
                    worker,
                    tag,
                    claimed,
                    payload,
                } => {
                    out.extend([0, *worker, *tag]);
                    out.extend_from_slice(&claimed.to_le_bytes());
                    let len = u16::try_from(payload.len()).expect("seed payloads fit in u16");
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(payload);
                }
                Action::Expect { worker, size } => {
                    out.extend([1, *worker]);
                    out.extend_from_slice(&size.to_le_bytes());
                }
                Action::Send {
                    worker,
                    ticket,
                    size,
                    to,
                } => {
                    out.extend([2, *worker, *ticket]);
                    out.extend_from_slice(&size.to_le_bytes());
                    out.push(*to);
                }
                Action::Receive {
                    worker,
                    ticket,
                    size,
                } => {
                    out.extend([3, *worker, *ticket]);
                    out.extend_from_slice(&size.to_le_bytes());
                }
                Action::Deliver {
                    ticket,
                    size,
                    damage,
                    flip,
                    sent,
                } => {
                    out.extend([4, *ticket]);
                    out.extend_from_slice(&size.to_le_bytes());
                    out.extend([*damage, *flip]);
                    out.extend_from_slice(&sent.to_le_bytes());
                }
                Action::Gone { worker } => out.extend([5, *worker]),
            }
        }
        out
    }

    pub fn decode(mut input: &[u8]) -> Vec<Action> {
        let mut actions = Vec::new();
        while let Some((&tag, rest)) = input.split_first() {
            input = rest;
            let i = &mut input;
            let b = |i: &mut &[u8]| take_uint(i, 1) as u8;
            let w = |i: &mut &[u8]| take_uint(i, 2) as u16;
            actions.push(match tag % TAGS {
                0 => {
                    let worker = b(i);
                    let tag = b(i);
                    let claimed = take_uint(i, 4) as u32;
                    let len = w(i) as usize;
                    Action::Raw {
                        worker,
                        tag,
                        claimed,
                        payload: take_bytes(i, len).to_vec(),
                    }
                }
                1 => Action::Expect {
                    worker: b(i),
                    size: w(i),
                },
                2 => Action::Send {
                    worker: b(i),
                    ticket: b(i),
                    size: w(i),
                    to: b(i),
                },
                3 => Action::Receive {
                    worker: b(i),
                    ticket: b(i),
                    size: w(i),
                },
                4 => Action::Deliver {
                    ticket: b(i),
                    size: w(i),
                    damage: b(i),
                    flip: b(i),
                    sent: w(i),
                },
                _ => Action::Gone { worker: b(i) },
            });
        }
        actions
    }
}

/// A ticket the broker handed out, and what the harness knows of it.
struct Handed {
    ticket: Ticket,
    owner: u64,
    size: u64,
    /// Still in the broker's table (not received, refused for another size, or gone
    /// with its worker).
    live: bool,
    /// A sender's connection was accepted for it, with these bytes after the header.
    delivered: Option<Vec<u8>>,
    /// What the broker wrote that connection (the outcome bytes).
    answers: Option<Arc<Mutex<Vec<u8>>>>,
}

/// A sending daemon's connection after its handshake, in memory.
struct Connection {
    incoming: io::Cursor<Vec<u8>>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.incoming.read(buf)
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The bytes a sender sends: not all alike, so a shifted or mixed-up copy shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// One broker and the two workers talking to it.
pub struct Run {
    broker: Broker,
    /// The connection number of each worker now.
    owners: [u64; 2],
    next_owner: u64,
    handed: Vec<Handed>,
}

impl Default for Run {
    fn default() -> Run {
        Run::new()
    }
}

impl Run {
    pub fn new() -> Run {
        let broker = Broker::new(ADVERTISED.into(), vec![ALLOWED.into()], client_config());
        Run {
            broker,
            owners: [1, 2],
            next_owner: 3,
            handed: Vec::new(),
        }
    }

    fn owner(&self, worker: u8) -> u64 {
        self.owners[usize::from(worker % 2)]
    }

    /// Serve `msg` from `worker`, with `follows` after it on the socket: what the
    /// broker answered, every answer a well-formed message, and whether the link stays.
    fn serve(&mut self, worker: u8, msg: Msg, follows: &[u8]) -> (Vec<Msg>, bool) {
        let owner = self.owner(worker);
        let mut out = Vec::new();
        let served = self
            .broker
            .serve_request(owner, msg, &mut &follows[..], &mut out);
        let mut answers = Vec::new();
        let mut r = &out[..];
        while !r.is_empty() {
            match proto::read_msg(&mut r) {
                Ok(m) => answers.push(m),
                Err(e) => panic!("the broker wrote a malformed message: {e} ({out:?})"),
            }
        }
        if served.is_err() {
            self.gone(worker);
        }
        (answers, served.is_ok())
    }

    /// The worker's link closed, as the broker's serve loop ends it.
    fn gone(&mut self, worker: u8) {
        let owner = self.owner(worker);
        self.broker.worker_gone(owner);
        for h in self.handed.iter_mut().filter(|h| h.owner == owner) {
            h.live = false;
        }
        self.owners[usize::from(worker % 2)] = self.next_owner;
        self.next_owner += 1;
    }

    fn pick(&self, i: u8) -> Option<usize> {
        (!self.handed.is_empty()).then(|| usize::from(i) % self.handed.len())
    }

    fn ticket(&self, i: u8) -> Ticket {
        self.pick(i).map_or([i; 16], |at| self.handed[at].ticket)
    }

    /// A request from `worker`, checked against what the broker must answer.
    fn request(&mut self, worker: u8, msg: Msg) {
        let owner = self.owner(worker);
        match msg {
            Msg::Expect { size } => {
                let mine = self
                    .handed
                    .iter()
                    .filter(|h| h.live && h.owner == owner)
                    .count();
                let (answers, kept) = self.serve(worker, Msg::Expect { size }, &[]);
                assert!(kept, "an expect closed the worker's link");
                match &answers[..] {
                    [Msg::Ticket { ticket, endpoint }] => {
                        assert!(mine < TICKETS_PER_WORKER, "a ticket past the bound");
                        assert_eq!(endpoint, ADVERTISED);
                        self.handed.push(Handed {
                            ticket: *ticket,
                            owner,
                            size,
                            live: true,
                            delivered: None,
                            answers: None,
                        });
                    }
                    [Msg::End(Outcome::TooMany)] => {
                        assert!(mine >= TICKETS_PER_WORKER, "refused below the bound")
                    }
                    other => panic!("an expect was answered {other:?}"),
                }
            }
            Msg::Send {
                ticket,
                size,
                endpoint,
            } => {
                let allowed = endpoint == ALLOWED;
                let msg = Msg::Send {
                    ticket,
                    size,
                    endpoint,
                };
                let (answers, kept) = self.serve(worker, msg, &[]);
                assert!(kept, "a refused send closed the worker's link");
                let want = if allowed {
                    Outcome::Unreachable
                } else {
                    Outcome::NotAllowed
                };
                assert_eq!(answers, [Msg::End(want)], "a send's answer");
            }
            Msg::Receive { ticket, size } => {
                let at = self.handed.iter().position(|h| {
                    h.live && h.ticket == ticket && h.owner == owner && h.size == size
                });
                if let Some(at) = at {
                    if self.handed[at].delivered.is_none() {
                        // The broker would wait a minute for a sender.
                        return;
                    }
                }
                let (answers, kept) = self.serve(worker, Msg::Receive { ticket, size }, &[]);
                assert!(kept, "a receive closed the worker's link");
                let Some(at) = at else {
                    assert_eq!(
                        answers,
                        [Msg::End(Outcome::UnknownTicket)],
                        "a receive of no ticket of this worker's"
                    );
                    return;
                };
                let h = &mut self.handed[at];
                h.live = false;
                let sent = h.delivered.as_deref().expect("checked above");
                let (end, data) = answers.split_last().expect("a receive is answered");
                let got: Vec<u8> = data
                    .iter()
                    .flat_map(|m| match m {
                        Msg::Data(d) => d.clone(),
                        other => panic!("a receive's answer held {other:?}"),
                    })
                    .collect();
                let whole = sent.len() as u64 >= size;
                let want_end = if whole {
                    Outcome::Done
                } else {
                    Outcome::Broken
                };
                assert_eq!(end, &Msg::End(want_end), "a receive's end");
                assert_eq!(
                    &got[..],
                    &sent[..got.len()],
                    "received bytes other than the sender's"
                );
                if whole {
                    assert_eq!(got.len() as u64, size, "a whole transfer cut short");
                    let answered = h.answers.as_ref().expect("delivered").lock().unwrap();
                    assert_eq!(
                        &answered[..],
                        &[Outcome::Done as u8; 2],
                        "the sender was not told its header and its bytes arrived"
                    );
                }
            }
            other => {
                // Only the broker sends these: the worker's link is out of step.
                let (answers, kept) = self.serve(worker, other, &[]);
                assert!(!kept && answers.is_empty(), "a broker's message was served");
            }
        }
    }

    pub fn act(&mut self, action: Action) {
        match action {
            Action::Raw {
                worker,
                tag,
                claimed,
                payload,
            } => {
                let mut bytes = vec![tag];
                bytes.extend_from_slice(&claimed.to_le_bytes());
                bytes.extend_from_slice(&payload);
                let mut r = &bytes[..];
                match proto::read_msg(&mut r) {
                    Ok(msg) => {
                        if let Msg::Send { endpoint, .. } | Msg::Ticket { endpoint, .. } = &msg {
                            assert!(endpoint.len() <= MAX_ENDPOINT);
                        }
                        self.request(worker, msg);
                    }
                    // The broker closes a link it cannot read.
                    Err(_) => self.gone(worker),
                }
            }
            Action::Expect { worker, size } => self.request(
                worker,
                Msg::Expect {
                    size: u64::from(size),
                },
            ),
            Action::Send {
                worker,
                ticket,
                size,
                to,
            } => {
                let endpoint = match to % 3 {
                    0 => ALLOWED.to_string(),
                    1 => "elsewhere.fuzz:7732".to_string(),
                    _ => String::new(),
                };
                let msg = Msg::Send {
                    ticket: self.ticket(ticket),
                    size: u64::from(size),
                    endpoint,
                };
                self.request(worker, msg);
            }
            Action::Receive {
                worker,
                ticket,
                size,
            } => {
                let msg = Msg::Receive {
                    ticket: self.ticket(ticket),
                    size: u64::from(size),
                };
                self.request(worker, msg);
            }
            Action::Deliver {
                ticket,
                size,
                damage,
                flip,
                sent,
            } => self.deliver(ticket, u64::from(size), damage, flip, sent),
            Action::Gone { worker } => self.gone(worker),
        }
    }

    fn deliver(&mut self, pick: u8, size: u64, damage: u8, flip: u8, sent: u16) {
        let ticket = self.ticket(pick);
        let mut header = proto::transfer_header(&ticket, size).to_vec();
        let damage = usize::from(damage % 40);
        if damage < TRANSFER_HEADER_LEN {
            header[damage] ^= flip;
        } else {
            header.truncate(damage - TRANSFER_HEADER_LEN);
        }
        let parsed = <[u8; TRANSFER_HEADER_LEN]>::try_from(&header[..])
            .ok()
            .and_then(|h| proto::parse_transfer_header(&h));
        // A header cut short is a connection that closed before its end: nothing
        // follows it.
        let data = if damage < TRANSFER_HEADER_LEN {
            pattern(usize::from(sent))
        } else {
            Vec::new()
        };
        let mut incoming = header.clone();
        incoming.extend_from_slice(&data);
        let written = Arc::new(Mutex::new(Vec::new()));
        let connection = Connection {
            incoming: io::Cursor::new(incoming),
            written: written.clone(),
        };
        self.broker
            .serve_transfer(connection, &Source::Unknown, "fuzz");
        let answered = written.lock().unwrap().clone();
        let Some((ticket, size)) = parsed else {
            assert!(answered.is_empty(), "a stranger's connection was answered");
            return;
        };
        let at = self
            .handed
            .iter()
            .position(|h| h.live && h.ticket == ticket && h.answers.is_none());
        match at {
            Some(at) if self.handed[at].size == size => {
                assert_eq!(answered, [Outcome::Done as u8], "a good header refused");
                let h = &mut self.handed[at];
                h.delivered = Some(data);
                h.answers = Some(written);
            }
            _ => {
                assert_eq!(answered, [Outcome::Refused as u8], "a bad header accepted");
                // A live ticket named with another size is spent.
                if let Some(at) = at {
                    self.handed[at].live = false;
                }
            }
        }
    }
}

/// The configuration the broker would reach other daemons with. No connection it
/// makes gets as far as TLS, so one that trusts no CA does.
fn client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    Arc::new(config)
}

/// Run `input` against a fresh broker, checking it throughout.
pub fn run(input: &[u8]) {
    let mut run = Run::new();
    for action in Action::decode(input) {
        run.act(action);
    }
}
