//! A stand-in for the daemon's peer-link broker, for the `session` target: it answers a
//! worker's link (`vmcuda_host::peer::PeerLink`) from memory, speaking the broker's own
//! messages (`vmcuda_host::peer::proto`), as a broker would whose one allowed endpoint,
//! [`ENDPOINT`], is its own host: a send there delivers to a ticket this host handed
//! out. So a session's peer ops run to their end at once, with whatever arguments the
//! guest gave: tickets, sends with their bytes, receives of what was sent or of what
//! another host delivered ([`FakeBroker::deliver`]). The real broker is fuzzed on its
//! own (the `peer` target); what this one does differently is only that no network is
//! involved, and that a receive of a ticket nothing was delivered for is answered at
//! once as timed out, where the real one would wait for the ticket's lifetime.
//!
//! A worker that breaks the protocol has its link closed, as the real broker does; so
//! does [`FakeBroker::cut`], a daemon gone.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use vmcuda_host::peer::proto::{self, Msg, Outcome, Ticket, MAX_CHUNK};
use vmcuda_host::peer::PeerLink;

/// The endpoint the broker advertises with its tickets, and the only one it sends to.
pub const ENDPOINT: &str = "self.fuzz:7732";
/// Transfers outstanding at once (the real broker's bound per worker).
pub const MAX_TICKETS: usize = 16;

/// A transfer registered by the worker.
struct Expected {
    size: u64,
    /// What a sender delivered for it (at most `size` bytes; fewer: it broke off).
    bytes: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    tickets: HashMap<Ticket, Expected>,
    drawn: u64,
}

/// The broker's side of one worker's link, served from a thread of its own.
pub struct FakeBroker {
    state: Arc<Mutex<State>>,
    /// The broker's end of the socket (a clone), to cut the link with.
    socket: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl FakeBroker {
    /// A broker and the worker's end of its link.
    pub fn start() -> (FakeBroker, PeerLink) {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        let state = Arc::new(Mutex::new(State::default()));
        let socket = ours.try_clone().expect("a socket clone");
        let served = state.clone();
        let thread = std::thread::spawn(move || serve(ours, &served));
        let link = PeerLink::new(theirs).expect("a link");
        let broker = FakeBroker {
            state,
            socket,
            thread: Some(thread),
        };
        (broker, link)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Another host's sender delivers `bytes` for `ticket`, announcing `size`: taken
    /// when the ticket is outstanding with that size and nothing was delivered yet (a
    /// size other than registered spends the ticket, as the real broker has it).
    /// Whether it was taken.
    pub fn deliver(&self, ticket: &Ticket, size: u64, mut bytes: Vec<u8>) -> bool {
        let mut state = self.state();
        match state.tickets.get_mut(ticket) {
            Some(e) if e.bytes.is_none() && e.size == size => {
                bytes.truncate(size.min(usize::MAX as u64) as usize);
                e.bytes = Some(bytes);
                true
            }
            Some(e) if e.bytes.is_none() => {
                state.tickets.remove(ticket);
                false
            }
            _ => false,
        }
    }

    /// What was delivered for `ticket`, while it is outstanding.
    pub fn delivered(&self, ticket: &Ticket) -> Option<Vec<u8>> {
        self.state().tickets.get(ticket)?.bytes.clone()
    }

    /// Whether `ticket` is outstanding.
    pub fn holds(&self, ticket: &Ticket) -> bool {
        self.state().tickets.contains_key(ticket)
    }

    /// The daemon is gone: the link breaks.
    pub fn cut(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Serve the worker's messages until its link closes or breaks the protocol.
fn serve(socket: UnixStream, state: &Mutex<State>) {
    let Ok(read) = socket.try_clone() else {
        return;
    };
    let mut r = BufReader::new(read);
    let mut w = socket;
    while let Ok(msg) = proto::read_msg(&mut r) {
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        let served = match msg {
            Msg::Expect { size } => expect(&mut state, size, &mut w),
            Msg::Send {
                ticket,
                size,
                endpoint,
            } => send(&mut state, ticket, size, &endpoint, &mut r, &mut w),
            Msg::Receive { ticket, size } => receive(&mut state, ticket, size, &mut w),
            // Only a broker sends the others: the worker is out of step.
            _ => Err(()),
        };
        if served.is_err() {
            break;
        }
    }
    let _ = w.shutdown(std::net::Shutdown::Both);
}

type Served = Result<(), ()>;

fn answer(w: &mut impl Write, msg: &Msg) -> Served {
    proto::write_msg(w, msg).map_err(drop)
}

fn expect(state: &mut State, size: u64, w: &mut impl Write) -> Served {
    if state.tickets.len() >= MAX_TICKETS {
        return answer(w, &Msg::End(Outcome::TooMany));
    }
    state.drawn += 1;
    let mut ticket = [0xA5u8; 16];
    ticket[..8].copy_from_slice(&state.drawn.to_le_bytes());
    state.tickets.insert(ticket, Expected { size, bytes: None });
    let endpoint = ENDPOINT.to_string();
    answer(w, &Msg::Ticket { ticket, endpoint })
}

fn send(
    state: &mut State,
    ticket: Ticket,
    size: u64,
    endpoint: &str,
    r: &mut impl Read,
    w: &mut impl Write,
) -> Served {
    if endpoint != ENDPOINT {
        return answer(w, &Msg::End(Outcome::NotAllowed));
    }
    // The receiving side (this host) reads the header: an unknown, delivered or
    // differently sized ticket is refused, the last one spent.
    match state.tickets.get(&ticket) {
        Some(e) if e.bytes.is_none() && e.size == size => {}
        Some(e) if e.bytes.is_none() => {
            state.tickets.remove(&ticket);
            return answer(w, &Msg::End(Outcome::Refused));
        }
        _ => return answer(w, &Msg::End(Outcome::Refused)),
    }
    answer(w, &Msg::Go)?;
    let mut bytes = Vec::new();
    let mut left = size;
    while left > 0 {
        match proto::read_msg(r).map_err(drop)? {
            Msg::Data(chunk) if chunk.len() as u64 <= left => {
                left -= chunk.len() as u64;
                bytes.extend_from_slice(&chunk);
            }
            // The sender gave up: what it sent so far is what arrived.
            Msg::Abort => {
                if let Some(e) = state.tickets.get_mut(&ticket) {
                    e.bytes = Some(bytes);
                }
                return answer(w, &Msg::End(Outcome::Aborted));
            }
            _ => return Err(()),
        }
    }
    if let Some(e) = state.tickets.get_mut(&ticket) {
        e.bytes = Some(bytes);
    }
    answer(w, &Msg::End(Outcome::Done))
}

fn receive(state: &mut State, ticket: Ticket, size: u64, w: &mut impl Write) -> Served {
    match state.tickets.get(&ticket) {
        Some(e) if e.size == size => {}
        _ => return answer(w, &Msg::End(Outcome::UnknownTicket)),
    }
    let Some(e) = state.tickets.remove(&ticket) else {
        return answer(w, &Msg::End(Outcome::UnknownTicket));
    };
    let Some(bytes) = e.bytes else {
        // The real broker waits for a sender until the ticket expires.
        return answer(w, &Msg::End(Outcome::TimedOut));
    };
    for chunk in bytes.chunks(MAX_CHUNK) {
        proto::write_data(w, chunk).map_err(drop)?;
    }
    let end = if bytes.len() as u64 == size {
        Outcome::Done
    } else {
        Outcome::Broken
    };
    answer(w, &Msg::End(end))
}
