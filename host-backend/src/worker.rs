//! The per-connection worker: one process per guest connection, so a guest that
//! crashes the driver or the process takes nobody else with it.
//!
//! The loop reads a frame, checks it, dispatches it to the session and answers. A
//! frame that cannot be a frame (bad magic, absurd lengths, truncated) closes this
//! connection; a well-formed frame with an unknown op or undecodable arguments gets an
//! error reply and the connection carries on.

use std::io::{BufReader, BufWriter, Read, Write};
use std::time::Instant;

use tracing::{debug, info, warn};
use vmcuda_wire::frame::{
    self, FrameError, FrameHeader, FLAG_EVENT, FLAG_FD, FLAG_NO_REPLY, FLAG_REPLY,
};
use vmcuda_wire::handshake::{self, PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::{
    dispatch, CallContext, Console, DispatchError, GuestPagesGrant, Hello, Op, SessionResume,
    SessionResumed, OP_CONSOLE,
};
use vmcuda_wire::ring;
use vmcuda_wire::CudaStatus;

use vmcuda_wire::transport::FdQueue;

use crate::admission::{self, guest_text, Event, MAX_GUEST_TEXT};
use crate::console::ConsoleCapture;
use crate::policy::Refusal;
use crate::resume::{Arrival, Kept, Replay};

/// Descriptors a guest may have in flight before they are claimed by requests.
const MAX_PENDING_FDS: usize = 16;

/// How long a worker polls for the guest's next request before sleeping (see
/// [`vmcuda_wire::polling`]): a program that waits for a reply usually sends its next
/// call within a few microseconds of it.
pub const REQUEST_POLL_WINDOW: std::time::Duration = std::time::Duration::from_micros(50);

/// The worker's polling window: `VMCUDA_POLL_US` in the host's environment, else
/// [`REQUEST_POLL_WINDOW`] where there are cores to spare.
pub fn request_poll_window() -> std::time::Duration {
    vmcuda_wire::polling::window_from_env(REQUEST_POLL_WINDOW)
}

/// How long a worker polls its command ring for the next request before sleeping in
/// the socket: longer than on the socket, since polling memory costs no system call
/// and a guest that is active keeps its worker awake for the next call.
pub const RING_POLL_WINDOW: std::time::Duration = std::time::Duration::from_micros(200);

/// What a worker has of its guest's socket besides the byte stream: the socket itself
/// (for a command ring's doorbells) and the descriptors a Unix guest passes along.
#[derive(Default)]
pub struct Link {
    pub socket: Option<std::os::fd::OwnedFd>,
    pub fds: Option<FdQueue>,
}
use crate::buffers::ReceiveBuffers;
use crate::session::Session;

/// Large replies from the reply area go out in pieces this large, each as soon as
/// the device has put it there, so the socket and the copy engine work side by side.
const REPLY_PIECE: usize = 256 << 10;

/// The largest hello frame accepted: it is a few dozen bytes; anything much larger
/// is not a guest of ours.
const MAX_HELLO_LEN: usize = 64 << 10;

/// How a connection ended, when it ended cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The guest was served until it left (or it left before saying hello).
    Served,
    /// The guest was turned away at its hello, told this status.
    Refused(CudaStatus),
    /// A guest come back to its session: its connection went to the session's worker.
    HandedOff,
}

/// A connection's byte streams, and its link, as a transport makes them.
pub struct Streams {
    pub reader: Box<dyn Read>,
    pub writer: Box<dyn Write>,
    pub link: Link,
}

/// Admit a returning guest and hand its connection to its session's worker.
pub type HandOver<'r> =
    dyn FnOnce(&FrameHeader, &SessionResume, Option<GuestPagesGrant>) -> Result<(), Refusal> + 'r;

/// What a worker does with guests that come back to a session ([`crate::resume`]).
pub struct Returning<'r> {
    /// The worker of a new connection whose guest comes back: admit it and hand its
    /// connection to the session's worker.
    pub hand_over: Box<HandOver<'r>>,
    /// The session's worker: the streams of a connection handed over to it.
    pub streams: Box<dyn Fn(Arrival) -> std::io::Result<Streams> + 'r>,
}

/// Serve one guest: its hello first, then `open` decides on it (admission, and the
/// executor and session it gets), then its frames until it disconnects or sends
/// something that cannot be a frame. A refused guest gets the refusal's reason as the
/// hello's error reply and the connection is closed; no executor is ever made for it.
/// The session's buffer budget ([`Session::with_buffer_budget`]) bounds the frame
/// buffers, receive and reply alike.
pub fn serve<'a>(
    reader: impl Read + 'a,
    writer: impl Write + 'a,
    link: Link,
    open: impl FnOnce(&Hello) -> Result<Session, Refusal>,
    returning: Option<Returning<'a>>,
    console: Option<&mut ConsoleCapture>,
) -> Result<Ended, FrameError> {
    // A frame's data is read into its page-locked buffer directly, past this.
    let mut reader: Incoming<'a> = BufReader::with_capacity(frame::READ_AHEAD, Box::new(reader));
    let mut writer: Outgoing<'a> = BufWriter::with_capacity(REPLY_BUFFER, Box::new(writer));
    let Some((header, first, grant)) = read_hello(&mut reader, &mut writer)? else {
        return Ok(Ended::Served);
    };
    let (hello, returning) = match (first, returning) {
        (First::Hello(hello), returning) => (hello, returning),
        (First::Resume(resume), Some(returning)) => {
            admission::report(Event::Hello);
            return match (returning.hand_over)(&header, &resume, grant) {
                Ok(()) => Ok(Ended::HandedOff),
                Err(refusal) => refuse(&mut writer, &header, refusal),
            };
        }
        (First::Resume(_), None) => {
            let refusal = Refusal {
                status: CudaStatus::ErrorNotSupported,
                guest: "this host does not take guests back to their sessions".into(),
                host: "refused a returning guest: this connection cannot be handed over".into(),
            };
            return refuse(&mut writer, &header, refusal);
        }
    };
    admission::report(Event::Hello);
    // The guest's word about itself reaches logs and figures only made harmless; the
    // session reads this hello too.
    let hello = Hello {
        client: guest_text(&hello.client, MAX_GUEST_TEXT),
        ..hello
    };
    let meta = postcard::to_stdvec(&hello).expect("a hello encodes");
    let admitted = handshake::check_hello(&hello)
        .map_err(|status| Refusal {
            status,
            guest: format!(
                "this host speaks protocol {PROTOCOL_VERSION} for CUDA {}; the guest library \
                 speaks protocol {} for runtime {} (install matching versions)",
                RUNTIME_VERSION / 1000,
                hello.protocol,
                hello.runtime_version
            ),
            host: format!(
                "refused {}[{}]: protocol {} runtime {} not spoken here",
                hello.client, hello.pid, hello.protocol, hello.runtime_version
            ),
        })
        .and_then(|()| open(&hello))
        .and_then(|mut session| match &grant {
            None => Ok(session),
            Some(g) => match session.grant_guest_ram(g.page_size, &g.pages, g.key) {
                Ok(()) => {
                    tracing::info!(client = %hello.client, pages = g.pages.len(), page_size = g.page_size,
                        "guest page grant: this connection may use only the guest RAM its broker gave it");
                    Ok(session)
                }
                Err(status) => Err(Refusal {
                    status,
                    guest: "the host cannot take this connection's guest page grant".into(),
                    host: format!(
                        "refused {}[{}]: a guest page grant on a connection without the guest's RAM, or a bad one",
                        hello.client, hello.pid
                    ),
                }),
            },
        });
    let mut session = match admitted {
        Ok(admitted) => admitted,
        Err(refusal) => return refuse(&mut writer, &header, refusal),
    };
    admission::report(Event::Admitted);
    let mut receive = ReceiveBuffers::default();
    let mut deferred = None;
    let ctx = CallContext {
        device: header.device.get(),
    };
    let started = Instant::now();
    let result = run(&mut session, &ctx, Op::Hello, &meta, &[], &mut deferred);
    record(&mut session, started, &result);
    let greeted = result.is_ok();
    let result = answer(
        &mut writer,
        &mut session,
        &header,
        started,
        result,
        &mut deferred,
        None,
    )
    .and_then(|()| {
        if !greeted {
            return Ok(());
        }
        let streams = returning.as_ref().map(|r| &*r.streams);
        serve_frames(
            reader,
            writer,
            link,
            &mut session,
            console,
            &mut receive,
            streams,
        )
    });
    // The driver lets go of the receive pages (once no copy reads them) before they
    // are unmapped.
    receive.release_all(&mut session);
    result.map(|()| Ended::Served)
}

/// The connection's frames in, wherever they travel (the socket, then maybe a ring).
type Incoming<'a> = BufReader<Box<dyn Read + 'a>>;
/// Its frames out.
type Outgoing<'a> = BufWriter<Box<dyn Write + 'a>>;

/// Replies are gathered up to this much before they go.
const REPLY_BUFFER: usize = 256 << 10;

/// Serve the session's guest over its connection, and over every connection it comes
/// back on ([`crate::resume`]) while `streams` can make them.
#[allow(clippy::too_many_arguments)]
fn serve_frames<'a>(
    mut reader: Incoming<'a>,
    mut writer: Outgoing<'a>,
    mut link: Link,
    session: &mut Session,
    mut console: Option<&mut ConsoleCapture>,
    receive: &mut ReceiveBuffers,
    streams: Option<&(dyn Fn(Arrival) -> std::io::Result<Streams> + 'a)>,
) -> Result<(), FrameError> {
    // A failure from a request the guest did not wait for, owed to its next call.
    let mut deferred: Option<CudaStatus> = None;
    let mut replay = Replay::default();
    loop {
        if let Some(socket) = &link.socket {
            session.serving(socket);
        }
        let ended = serve_connection(
            reader,
            writer,
            link,
            session,
            console.as_deref_mut(),
            receive,
            &mut deferred,
            &mut replay,
        );
        // Only a connection that dropped (not one that broke the protocol) is waited
        // for, and only for a guest that holds a ticket.
        match &ended {
            Ok(()) | Err(FrameError::Closed | FrameError::Io(_)) => {}
            Err(_) => return ended,
        }
        session.ring_detached();
        let Some(streams) = streams else {
            return ended;
        };
        // Back on a new connection; one that drops at once is waited for again.
        loop {
            let Some(arrival) = session.wait_for_guest() else {
                return ended;
            };
            let (id, last_reply, grant) = (
                arrival.request_id,
                arrival.last_reply,
                arrival.grant.clone(),
            );
            let Streams {
                reader: r,
                writer: w,
                link: l,
            } = match streams(arrival) {
                Ok(s) => s,
                Err(e) => {
                    warn!(client = %session.client(), "cannot serve the connection the guest came back on: {e}");
                    continue;
                }
            };
            reader = BufReader::with_capacity(frame::READ_AHEAD, r);
            writer = BufWriter::with_capacity(REPLY_BUFFER, w);
            link = l;
            if let Some(g) = grant {
                if let Err(status) = session.grant_guest_ram(g.page_size, &g.pages, g.key) {
                    warn!(client = %session.client(), %status, "the returning connection's guest page grant is unusable; the session ends");
                    return ended;
                }
            }
            match welcome_back(
                &mut writer,
                session,
                &mut replay,
                id,
                last_reply,
                &mut deferred,
            ) {
                Ok(true) => break,
                Ok(false) => return ended,
                Err(e) => {
                    warn!(client = %session.client(), "the connection the guest came back on dropped: {e}");
                }
            }
        }
        info!(client = %session.client(), last_request = replay.last_request, "guest came back to its session");
    }
}

/// Answer a returning guest's resume: a new ticket, the id of the last request taken,
/// then every reply after `last_reply` (kept, or run again). `false`: one of them is
/// no longer kept, the guest is told so and the session ends.
fn welcome_back(
    writer: &mut impl Write,
    session: &mut Session,
    replay: &mut Replay,
    request_id: u64,
    last_reply: u64,
    deferred: &mut Option<CudaStatus>,
) -> Result<bool, FrameError> {
    let resume = Op::SessionResume.code();
    let owed = replay.owed(last_reply);
    let ticket = owed.as_ref().map(|_| session.new_ticket());
    let (Some(owed), Some(Ok(ticket))) = (owed, ticket) else {
        warn!(client = %session.client(), last_reply, "a returning guest lacks replies no longer kept; its session ends");
        let reply = FrameHeader::new(resume, FLAG_REPLY, request_id, 0, 0)
            .with_status(CudaStatus::ErrorDevicesUnavailable.0);
        frame::write_frame(writer, &reply, &[], &[])?;
        writer.flush()?;
        return Ok(false);
    };
    let meta = postcard::to_stdvec(&SessionResumed {
        last_request: replay.last_request,
        ticket: ticket.clone(),
    })
    .expect("a resume reply encodes");
    let reply = FrameHeader::new(resume, FLAG_REPLY, request_id, meta.len(), 0);
    // Sent on its own first: a ticket whose frame did not go out whole never reached
    // the guest, which still holds the one it came back with.
    let sent = frame::write_frame(writer, &reply, &meta, &[]).and_then(|()| writer.flush());
    if let Err(e) = sent {
        session.withdraw_ticket(&ticket);
        return Err(e.into());
    }
    // In id order: kept replies as they were, reads run again in their places.
    for kept in owed {
        match kept {
            Kept::Reply(f) => writer.write_all(f)?,
            Kept::Rerun(h, m) => {
                let op = Op::from_code(h.op.get()).expect("kept reads have known ops");
                let ctx = CallContext {
                    device: h.device.get(),
                };
                let started = Instant::now();
                let result = run(session, &ctx, op, m, &[], deferred);
                answer(writer, session, h, started, result, deferred, None)?;
            }
            Kept::Lost => unreachable!("owed() refuses lost replies"),
        }
    }
    writer.flush()?;
    replay.resumed = true;
    replay.confirmed = false;
    Ok(true)
}

/// Serve one connection of the session until it ends.
#[allow(clippy::too_many_arguments)]
fn serve_connection<'a>(
    mut reader: Incoming<'a>,
    mut writer: Outgoing<'a>,
    mut link: Link,
    session: &mut Session,
    mut console: Option<&mut ConsoleCapture>,
    receive: &mut ReceiveBuffers,
    deferred: &mut Option<CudaStatus>,
    replay: &mut Replay,
) -> Result<(), FrameError> {
    let mut timeline = Timeline::enabled().then(Timeline::default);
    let mut done = Instant::now();
    // The command ring's doorbell, once the guest has attached one.
    let mut bell: Option<std::sync::Arc<ring::Bell>> = None;
    // Whether requests wait in the ring, once there is one.
    let mut ring_pending: Option<ring::Pending> = None;
    loop {
        // Launches the executor holds go before the worker would wait for a request:
        // the guest may be waiting for their work.
        if session.holds_launches()
            && reader.buffer().is_empty()
            && !ring_pending.as_ref().is_some_and(ring::Pending::any)
        {
            if let Err(status) = session.send_held_launches() {
                deferred.get_or_insert(status);
            }
        }
        let (header, meta) = match frame::read_head(&mut reader) {
            Ok(h) => h,
            Err(FrameError::Closed) => {
                let _ = session.send_held_launches();
                if let Some(t) = &timeline {
                    t.log(session);
                }
                return Ok(());
            }
            Err(e) => {
                warn!(client = %session.client(), "closing connection: {e}");
                return Err(e);
            }
        };
        // Clock reads for the timeline only when it is on (`started` is always read).
        let stamp = || timeline.is_some().then(Instant::now);
        let head = stamp();
        let len = header.data_len.get() as usize;
        // A frame over the VM's buffer memory is read past and refused; the connection
        // carries on.
        let data = match receive.next(len, session, deferred)? {
            Some(data) => {
                reader.read_exact(data)?;
                Some(&*data)
            }
            None => {
                frame::skip_data(&mut reader, len as u64)?;
                None
            }
        };
        // A descriptor sent beside a request in the ring comes on the socket (where a
        // sleeping read may have taken it in already, with an earlier request).
        if header.has(FLAG_FD) && session.incoming_fds.is_empty() {
            if let Some(bell) = &bell {
                bell.wait_for_fd()?;
            }
        }
        // The call's time starts once its request is all here.
        let started = Instant::now();
        if let Some(fds) = &link.fds {
            // Descriptors passed with frames, in order; a guest flooding us with them
            // only loses the excess.
            let mut fds = fds.lock().unwrap_or_else(|p| p.into_inner());
            while let Some(fd) = fds.pop_front() {
                if session.incoming_fds.len() < MAX_PENDING_FDS {
                    session.incoming_fds.push_back(fd);
                } else {
                    warn!(client = %session.client(), "too many unclaimed descriptors; closing one");
                }
            }
        }
        let id = header.request_id.get();
        // Any request on the connection come back on: the guest read its new ticket.
        if replay.resumed && !replay.confirmed {
            replay.confirmed = true;
            session.confirm_ticket();
        }
        // After a resume, a request the guest sent again that was taken already (it
        // sends again only those after the last one taken) is not run twice.
        if replay.resumed && id != 0 && id <= replay.last_request {
            debug!(client = %session.client(), id, "request taken before the resume; not run again");
            continue;
        }
        replay.took(id);
        let code = header.op.get();
        let ctx = CallContext {
            device: header.device.get(),
        };
        let op = Op::from_code(code);
        // Every other call comes after the launches held before it.
        if op != Some(Op::LaunchKernel) {
            if let Err(status) = session.send_held_launches() {
                deferred.get_or_insert(status);
            }
        }
        // An error owed from an earlier request is reported by this one, which is then
        // not run: it was counted when it happened.
        let reports_deferred =
            data.is_some() && deferred.is_some() && op.is_some_and(|op| !keeps_deferred(op));
        let result = match (op, data) {
            (None, _) => {
                warn!(client = %session.client(), op = code, "unknown op");
                Err(CudaStatus::ErrorNotSupported)
            }
            (Some(Op::Hello), _) => {
                // Admission happened once, for this connection; a second hello cannot
                // change who the guest is.
                warn!(client = %session.client(), "repeated hello refused");
                Err(CudaStatus::ErrorInvalidValue)
            }
            (Some(op), None) => {
                warn!(client = %session.client(), op = op.name(), bytes = len,
                    held = session.buffer_budget().held(), "frame refused: over the VM's buffer_memory");
                Err(CudaStatus::ErrorMemoryAllocation)
            }
            (Some(op), Some(data)) => run(session, &ctx, op, &meta, data, deferred),
        };
        let no_reply = header.has(FLAG_NO_REPLY);
        // A launch the guest waits for is answered once it went.
        let result = match result {
            Ok(reply) if !no_reply && op == Some(Op::LaunchKernel) => {
                session.send_held_launches().map(|()| reply)
            }
            other => other,
        };
        // Counted before the reply goes: whoever has the reply sees the call counted.
        if !reports_deferred {
            record(session, started, &result);
        }
        let ran = stamp();
        // Output a posted call made waits for the next reply: the guest reads nothing
        // before it, so it sees the same text in the same place, for one check per
        // reply instead of one per launch.
        if let Some(console) = console.as_deref_mut().filter(|_| !no_reply) {
            forward_console(&mut writer, console)?;
        }
        let checked = stamp();
        if no_reply {
            if let Err(status) = result {
                // The first of a run only: the guest hears of it with the next reply.
                if deferred.is_none() {
                    warn!(client = %session.client(), op = op.map_or("unknown", |o| o.name()),
                        %status, "a posted request failed: the next reply reports it");
                }
                deferred.get_or_insert(status);
            }
            // Nobody waits for this one's data, wherever the handler put it; the area
            // is free again once the copy is over.
            if let Some(len) = session.take_area_len() {
                if let Err(status) = session.area_piece(0, len).0 {
                    deferred.get_or_insert(status);
                }
            }
        } else {
            // Replies go out at once; a run of no-reply requests is answered by nothing.
            let keep = session.resumable().then_some((&mut *replay, &meta[..]));
            answer(
                &mut writer,
                session,
                &header,
                started,
                result,
                deferred,
                keep,
            )?;
        }
        if let Some(memory) = session.take_ring() {
            // The attach's reply was the last frame on the socket; the guest sends
            // nothing more there but doorbells and descriptors.
            let Some(socket) = link.socket.take().filter(|_| reader.buffer().is_empty()) else {
                warn!(client = %session.client(), "command ring attached without a socket to ring, or with requests behind it; closing");
                return Err(FrameError::UnknownOp(Op::RingAttach.code()));
            };
            let (r, w, b) = ring::open(
                memory,
                ring::End::Host,
                ring::Bell::on(socket, link.fds.clone()),
                vmcuda_wire::polling::window_from_env(RING_POLL_WINDOW),
            );
            ring_pending = Some(r.pending());
            reader = BufReader::with_capacity(frame::READ_AHEAD, Box::new(r));
            writer = BufWriter::with_capacity(REPLY_BUFFER, Box::new(w));
            bell = Some(b);
            info!(client = %session.client(), guest_pages = session.has_guest_ram(),
                "calls travel through the command ring");
        }
        // A large frame's buffers go as soon as it is done with.
        receive.trim(session, deferred);
        session.trim_reply_buffers(crate::buffers::KEEP);
        if let (Some(t), Some(head), Some(ran), Some(checked)) = (&mut timeline, head, ran, checked)
        {
            let now = Instant::now();
            t.add(
                code,
                [
                    head - done,
                    started - head,
                    ran - started,
                    checked - ran,
                    now - checked,
                ],
            );
            done = now;
        }
    }
}

/// Where a worker's time goes, per op (`VMCUDA_TIMELINE=1` in the host's environment,
/// logged when the guest leaves): the wait for the request since the previous one was
/// done (the guest's and the transport's share), reading its data, running it, the
/// console check, and the reply. Off by default: it reads the clock five times a call.
#[derive(Default)]
struct Timeline {
    /// Op code -> calls and total nanoseconds of each of the five parts.
    ops: std::collections::BTreeMap<u16, (u64, [u128; 5])>,
}

impl Timeline {
    fn enabled() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var("VMCUDA_TIMELINE").is_ok_and(|v| v == "1"))
    }

    fn add(&mut self, op: u16, parts: [std::time::Duration; 5]) {
        let (calls, sums) = self.ops.entry(op).or_default();
        *calls += 1;
        for (sum, part) in sums.iter_mut().zip(parts) {
            *sum += part.as_nanos();
        }
    }

    fn log(&self, session: &Session) {
        for (op, (calls, sums)) in &self.ops {
            let mean = |i: usize| sums[i] as f64 / *calls as f64 / 1e3;
            tracing::info!(
                client = %session.client(),
                op = Op::from_code(*op).map_or("unknown", Op::name),
                calls,
                wait_us = format!("{:.2}", mean(0)),
                read_us = format!("{:.2}", mean(1)),
                run_us = format!("{:.2}", mean(2)),
                console_us = format!("{:.2}", mean(3)),
                reply_us = format!("{:.2}", mean(4)),
                "timeline"
            );
        }
    }
}

/// Run one request, counted begun and done (the suspend gate and the idle policy see
/// the worker's work by these; a request waits here while the worker is held).
fn run(
    session: &mut Session,
    ctx: &CallContext,
    op: Op,
    meta: &[u8],
    data: &[u8],
    deferred: &mut Option<CudaStatus>,
) -> Result<(Vec<u8>, Vec<u8>), CudaStatus> {
    session.request_started(op);
    let takes_turn = !keeps_deferred(op);
    if takes_turn {
        session.turn_begins();
    }
    let result = run_request(session, ctx, op, meta, data, deferred);
    if takes_turn {
        session.turn_ends();
    }
    session.request_done();
    result
}

fn run_request(
    session: &mut Session,
    ctx: &CallContext,
    op: Op,
    meta: &[u8],
    data: &[u8],
    deferred: &mut Option<CudaStatus>,
) -> Result<(Vec<u8>, Vec<u8>), CudaStatus> {
    if !keeps_deferred(op) {
        if let Some(status) = deferred.take() {
            debug!(op = op.name(), %status, "reporting deferred error");
            return Err(status);
        }
        session.enter(ctx)?;
    }
    match dispatch(session, ctx, op, meta, data) {
        Ok(reply) => Ok((reply.meta, reply.data)),
        Err(DispatchError::Cuda(status)) => {
            debug!(op = op.name(), %status, "call failed");
            Err(status)
        }
        Err(e @ DispatchError::Decode { .. }) => {
            warn!(client = %session.client(), "{e}");
            Err(CudaStatus::ErrorInvalidValue)
        }
    }
}

/// Ops that leave an owed asynchronous failure for the next call: the handshake, and
/// the session's own bookkeeping, which the program did not call.
fn keeps_deferred(op: Op) -> bool {
    matches!(
        op,
        Op::Hello | Op::SessionPing | Op::SessionClose | Op::SessionTicketGet
    )
}

/// Count a call in the guest's figures.
fn record(
    session: &mut Session,
    started: Instant,
    result: &Result<(Vec<u8>, Vec<u8>), CudaStatus>,
) {
    let elapsed = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let outcome = match result {
        Ok(_) => Ok(()),
        Err(status) => Err(*status),
    };
    session.record_call(elapsed, outcome);
}

fn forward_console(
    writer: &mut impl Write,
    console: &mut ConsoleCapture,
) -> Result<(), FrameError> {
    let captured = console.take()?;
    for (fd, bytes) in [(1u8, captured.stdout), (2u8, captured.stderr)] {
        if bytes.is_empty() {
            continue;
        }
        let meta = postcard::to_stdvec(&Console { fd }).expect("console header encodes");
        let header = FrameHeader::new(OP_CONSOLE, FLAG_EVENT, 0, meta.len(), bytes.len());
        frame::write_frame(writer, &header, &meta, &bytes)?;
    }
    Ok(())
}

mod hello;
mod reply;
use hello::*;
use reply::*;

#[cfg(test)]
mod tests;
