//! Coming back to the host's session after the connection drops (a VM's live
//! migration resets its vsock connections; a network cut; the host's listener
//! restarted).
//!
//! A host that holds sessions ([`caps::RESUMABLE`]) gives the guest a single-use
//! ticket at connect. Every request the guest sends is kept in a [`Journal`] until a
//! reply to it, or to a later request, has come (the worker takes requests in order).
//! When the connection drops, the guest connects again and presents the ticket with
//! the id of the last reply it read ([`SessionResume`]); the session's worker answers
//! with the id of the last request it took and a new ticket, then sends again the
//! replies the guest lacks. The guest sends again the requests the worker had not
//! taken, and the call that was waiting gets its reply. So nothing posted is lost or
//! run twice. The guest tries for as long as the host said it holds the session.

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use vmcuda_wire::frame::{self, FrameError, FrameHeader, FLAG_REPLY};
use vmcuda_wire::handshake::{caps, SessionResume, SessionResumed, SessionTicket};
use vmcuda_wire::op::{Hello, Op, SessionPing};
use vmcuda_wire::polling::{self, PollingReader};
use vmcuda_wire::transport::{ServerAddr, Stream, TlsClient};
use vmcuda_wire::CudaStatus;

use super::{Connection, Incoming, Outgoing, Sink, REPLY_POLL_WINDOW};

/// The journal's bounds: past either, the guest waits for one reply (a ping) so the
/// host's replies let it forget what it kept.
pub const JOURNAL_BYTES: usize = 64 << 20;
pub const JOURNAL_FRAMES: usize = 1 << 16;

/// Whether this process asks the host to hold its session across drops
/// (`VMCUDA_RECONNECT=0` says no).
pub fn wanted() -> bool {
    std::env::var("VMCUDA_RECONNECT").map_or(true, |v| v != "0")
}

/// Encoded requests sent and not known taken, oldest first.
#[derive(Default)]
pub struct Journal {
    frames: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
    /// Off until the host gave a ticket: nothing is kept for a session that cannot
    /// be come back to.
    on: bool,
}

impl Journal {
    pub fn start(&mut self) {
        self.on = true;
    }

    /// Keep request frame `header` (with `meta` and `data`) until it is known taken.
    pub fn record(&mut self, header: &FrameHeader, meta: &[u8], data: &[u8]) {
        if !self.on {
            return;
        }
        let mut f = Vec::with_capacity(frame::HEADER_LEN + meta.len() + data.len());
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(meta);
        f.extend_from_slice(data);
        self.bytes += f.len();
        self.frames.push_back((header.request_id.get(), f));
    }

    /// The worker took every request up to `id`.
    pub fn taken(&mut self, id: u64) {
        while self.frames.front().is_some_and(|(i, _)| *i <= id) {
            if let Some((_, f)) = self.frames.pop_front() {
                self.bytes -= f.len();
            }
        }
    }

    /// Whether it is time to ask for a reply, so as to forget.
    pub fn full(&self) -> bool {
        self.bytes > JOURNAL_BYTES || self.frames.len() > JOURNAL_FRAMES
    }

    fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.frames.iter().map(|(_, f)| &f[..])
    }
}

/// What it takes to come back to the session.
pub struct Returning {
    pub addr: ServerAddr,
    /// A `tls:` host's settings: the new connection makes its own handshake.
    pub tls: Option<TlsClient>,
    /// The guest RAM of an unprivileged process in a VM: its connection came from the
    /// guest's RAM broker, which makes the new one too (`GuestArea::reconnect`).
    pub broker: Option<std::sync::Arc<crate::guest_ram::GuestArea>>,
    pub hello: Hello,
    pub ticket: SessionTicket,
}

/// Whether a connection error is the transport's (a drop), not a broken protocol.
fn is_drop(e: &FrameError) -> bool {
    matches!(e, FrameError::Closed | FrameError::Io(_))
}

impl Connection {
    /// After a successful hello from a host that holds sessions: get a ticket and
    /// start keeping requests.
    pub(super) fn start_resumable(
        &mut self,
        addr: &ServerAddr,
        tls: Option<&TlsClient>,
        broker: Option<std::sync::Arc<crate::guest_ram::GuestArea>>,
        hello: &Hello,
        host_caps: u64,
    ) {
        if host_caps & caps::RESUMABLE == 0 || hello.capabilities & caps::RESUMABLE == 0 {
            return;
        }
        match self.exchange_inner(
            0,
            &vmcuda_wire::op::SessionTicketGet {},
            &[],
            Sink::None,
            None,
        ) {
            Ok(Ok(ticket)) => {
                self.resume = Some(Returning {
                    addr: addr.clone(),
                    tls: tls.cloned(),
                    broker,
                    hello: hello.clone(),
                    ticket,
                });
                self.journal.start();
            }
            Ok(Err(status)) => {
                if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                    eprintln!("vmcuda: no session ticket ({status}); a dropped connection ends this program's CUDA work");
                }
            }
            Err(e) => {
                self.lost(e);
            }
        }
    }

    /// The connection failed with `e`: come back to the session on a new one if it
    /// was a drop and the session may be come back to. `Ok(last_request)`: the id of
    /// the last request the worker took (every later one in the journal has been sent
    /// again); the caller sends again its own request if it is later than that.
    pub(super) fn recover(&mut self, e: FrameError) -> Result<u64, FrameError> {
        if self.resume.is_none() || !is_drop(&e) || self.broken {
            return Err(e);
        }
        let hold = Duration::from_millis(self.resume.as_ref().map_or(0, |r| r.ticket.hold_ms));
        let until = Instant::now() + hold;
        let verbose = std::env::var_os("VMCUDA_VERBOSE").is_some();
        if verbose {
            eprintln!(
                "vmcuda: the connection to the host dropped ({e}); coming back to the session"
            );
        }
        let mut pause = Duration::from_millis(20);
        loop {
            match self.come_back() {
                Ok(last_request) => {
                    if verbose {
                        eprintln!("vmcuda: back in the session (the host had taken requests up to {last_request})");
                    }
                    return Ok(last_request);
                }
                // The session is gone or refused us: that is the end of it.
                Err(Some(status)) => {
                    self.resume = None;
                    return Err(FrameError::Io(std::io::Error::other(format!(
                        "the host refused to take this program back to its session ({status})"
                    ))));
                }
                Err(None) if Instant::now() + pause < until => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(None) => {
                    self.resume = None;
                    return Err(e);
                }
            }
        }
    }

    /// One try: connect, present the ticket, read the answer, send again what the
    /// worker lacks. `Err(Some)`: refused; `Err(None)`: try again.
    fn come_back(&mut self) -> Result<u64, Option<CudaStatus>> {
        let Some(returning) = &self.resume else {
            return Err(Some(CudaStatus::ErrorDevicesUnavailable));
        };
        let stream = match &returning.broker {
            Some(area) => Stream::vsock_from(area.reconnect().map_err(|_| None)?),
            None => Stream::connect(&returning.addr, returning.tls.as_ref()).map_err(|_| None)?,
        };
        let reader = stream.try_clone().map_err(|_| None)?;
        let reader = PollingReader::new(
            reader,
            stream.socket_fd(),
            polling::window_from_env(REPLY_POLL_WINDOW),
        );
        let req = SessionResume {
            hello: returning.hello.clone(),
            session: returning.ticket.session,
            secret: returning.ticket.secret,
            last_reply: self.last_reply,
        };
        let meta = postcard::to_stdvec(&req).expect("a resume encodes");
        let header = FrameHeader::new(Op::SessionResume.code(), 0, 0, meta.len(), 0);
        let mut writer = Outgoing {
            socket: stream,
            ring: None,
        };
        frame::write_frame(&mut writer, &header, &meta, &[]).map_err(|_| None)?;
        let mut reader = BufReader::with_capacity(frame::READ_AHEAD, Incoming::Socket(reader));
        let (h, meta) = frame::read_head(&mut reader).map_err(|_| None)?;
        if !h.has(FLAG_REPLY) || h.op.get() != Op::SessionResume.code() {
            return Err(None);
        }
        let status = CudaStatus(h.status.get());
        if !status.is_success() {
            let _ = frame::skip_data(&mut reader, h.data_len.get());
            return Err(Some(status));
        }
        frame::skip_data(&mut reader, h.data_len.get()).map_err(|_| None)?;
        let resumed: SessionResumed = postcard::from_bytes(&meta).map_err(|_| None)?;
        // The new connection from here on; the ring (if any) went with the old one.
        let had_ring = self.writer.ring.is_some();
        self.reader = reader;
        self.writer = writer;
        self.posted.clear();
        self.reattach = self.reattach || had_ring;
        if let Some(r) = &mut self.resume {
            r.ticket = resumed.ticket;
        }
        self.journal.taken(resumed.last_request);
        // What the worker had not taken, in order, in one write.
        let mut again = Vec::new();
        for f in self.journal.frames() {
            again.extend_from_slice(f);
        }
        if !again.is_empty() {
            self.writer.write_all(&again).map_err(|_| None)?;
        }
        self.writer.flush().map_err(|_| None)?;
        Ok(resumed.last_request)
    }

    /// A reply to `id` was read whole: every request up to it was taken.
    pub(super) fn replied(&mut self, id: u64) {
        self.last_reply = self.last_reply.max(id);
        self.journal.taken(id);
    }

    /// The journal is past its bounds: one round trip lets it forget.
    pub(super) fn trim_journal(&mut self) -> Result<(), FrameError> {
        if !self.journal.full() {
            return Ok(());
        }
        // The worker leaves an owed asynchronous failure for the next real call.
        self.exchange_inner(0, &SessionPing {}, &[], Sink::None, None)?
            .map_err(|status| {
                FrameError::Io(std::io::Error::other(format!("ping failed: {status}")))
            })
    }

    /// The program leaves: the host need not hold its session.
    pub(super) fn leave(&mut self) {
        if self.resume.take().is_none() || self.broken {
            return;
        }
        let req = vmcuda_wire::op::SessionClose {};
        let meta = postcard::to_stdvec(&req).expect("requests always encode");
        let id = self.next_id;
        self.next_id += 1;
        let header = FrameHeader::new(
            Op::SessionClose.code(),
            frame::FLAG_NO_REPLY,
            id,
            meta.len(),
            0,
        );
        self.posted.push(&header, &meta, &[]);
        self.flush_posted();
    }
}
