//! Stream capture state, kept in the guest: which streams capture into which capture
//! sequence, each sequence's mode, thread and id, and each thread's capture mode.
//!
//! The guest made every stream id and sent every BeginCapture and EndCapture, so
//! `cudaStreamIsCapturing` and `cudaStreamGetCaptureInfo` are answered here without a
//! round trip. The host captures in relaxed mode (one worker thread runs all guest
//! threads' calls); CUDA's rules for "potentially unsafe" calls during a capture are
//! applied here instead:
//! - a thread in global mode may not make them while it has a non-relaxed capture of
//!   its own or any thread has a global-mode capture; in thread-local mode only its own
//!   non-relaxed captures count; in relaxed mode nothing does;
//! - work on the legacy stream while a blocking stream captures would make the legacy
//!   stream depend on captured work: `cudaErrorStreamCaptureImplicit`;
//! - what a capture cannot hold (pageable copies through the socket, guest-side host
//!   functions, synchronizing or querying a capturing stream):
//!   `cudaErrorStreamCaptureUnsupported`.
//!
//! Each refusal invalidates the captures involved, as CUDA does: their EndCapture then
//! answers `cudaErrorStreamCaptureInvalidated` (the host drops what it recorded).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

use vmcuda_wire::graph::capture_mode::{GLOBAL, RELAXED};
use vmcuda_wire::op::{EventHandle, StreamHandle};
use vmcuda_wire::CudaStatus;

use crate::state;

/// `cudaStreamCaptureStatus`.
pub const STATUS_NONE: u32 = 0;
pub const STATUS_ACTIVE: u32 = 1;
pub const STATUS_INVALIDATED: u32 = 2;

thread_local! {
    static THREAD_MODE: Cell<u32> = const { Cell::new(GLOBAL) };
}

struct Sequence {
    origin: StreamHandle,
    mode: u32,
    thread: ThreadId,
    invalidated: bool,
    /// Begun by `cudaStreamBeginCaptureToGraph`.
    into_graph: bool,
}

#[derive(Default)]
struct Captures {
    /// Capture id -> sequence.
    sequences: HashMap<u64, Sequence>,
    /// Streams taking part in a sequence (its origin, and streams joined through an
    /// event recorded in it) -> its id.
    streams: HashMap<StreamHandle, u64>,
    /// Events recorded on a capturing stream -> that sequence's id.
    events: HashMap<EventHandle, u64>,
    /// The last id given; ids are unique for the process, as CUDA's are.
    last_id: u64,
}

static CAPTURES: Mutex<Option<Captures>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<Captures>> {
    let mut g = CAPTURES.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(Captures::default);
    g
}

fn with<T>(f: impl FnOnce(&mut Captures) -> T) -> T {
    f(lock().as_mut().expect("initialised by lock()"))
}

/// Whether `stream` synchronizes with the legacy stream (not created non-blocking).
fn blocking(stream: StreamHandle) -> bool {
    stream.is_default()
        || state::registry()
            .streams
            .get(&stream.0)
            .is_some_and(|i| i.flags & 1 == 0)
}

impl Captures {
    fn invalidate(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(seq) = self.sequences.get_mut(id) {
                seq.invalidated = true;
            }
        }
    }

    /// Sequences with a blocking stream in them.
    fn blocking_sequences(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(s, _)| blocking(**s))
            .map(|(_, id)| *id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Forget every capture (the device was reset).
pub fn forget_all() {
    with(|c| {
        let last_id = c.last_id;
        *c = Captures {
            last_id,
            ..Captures::default()
        };
    });
}

/// `cudaThreadExchangeStreamCaptureMode`: set the calling thread's mode, return the
/// old one.
pub fn exchange_mode(mode: u32) -> Result<u32, CudaStatus> {
    if mode > RELAXED {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(THREAD_MODE.with(|m| m.replace(mode)))
}

/// Note a capture begun on `stream` (the host has begun it).
pub fn begin(stream: StreamHandle, mode: u32) {
    begin_sequence(stream, mode, false);
}

/// Note a capture begun on `stream` into a graph the program already has
/// (`cudaStreamBeginCaptureToGraph`).
pub fn begin_into_graph(stream: StreamHandle, mode: u32) {
    begin_sequence(stream, mode, true);
}

/// Whether the capture begun on `stream` adds to a graph the program already had (its
/// end need not hand the graph back).
pub fn into_existing_graph(stream: StreamHandle) -> bool {
    with(|c| {
        c.streams
            .get(&stream)
            .is_some_and(|id| c.sequences[id].into_graph)
    })
}

fn begin_sequence(stream: StreamHandle, mode: u32, into_graph: bool) {
    with(|c| {
        c.last_id += 1;
        let id = c.last_id;
        c.sequences.insert(
            id,
            Sequence {
                origin: stream,
                mode,
                thread: std::thread::current().id(),
                invalidated: false,
                into_graph,
            },
        );
        c.streams.insert(stream, id);
    });
}

/// Check that a capture may begin on `stream` (before asking the host).
pub fn may_begin(stream: StreamHandle, mode: u32) -> Result<(), CudaStatus> {
    if mode > RELAXED {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if stream == StreamHandle::LEGACY {
        return Err(CudaStatus::ErrorStreamCaptureUnsupported);
    }
    if with(|c| c.streams.contains_key(&stream)) {
        return Err(CudaStatus::ErrorIllegalState);
    }
    Ok(())
}

/// End the capture begun on `stream`: whether it was invalidated. Every stream of the
/// sequence leaves it (the host's driver reports unjoined work).
pub fn end(stream: StreamHandle) -> Result<bool, CudaStatus> {
    with(|c| {
        let id = *c
            .streams
            .get(&stream)
            .ok_or(CudaStatus::ErrorIllegalState)?;
        let seq = &c.sequences[&id];
        if seq.origin != stream {
            return Err(CudaStatus::ErrorStreamCaptureUnmatched);
        }
        if seq.mode != RELAXED && seq.thread != std::thread::current().id() {
            return Err(CudaStatus::ErrorStreamCaptureWrongThread);
        }
        let seq = c.sequences.remove(&id).expect("looked up above");
        c.streams.retain(|_, s| *s != id);
        c.events.retain(|_, s| *s != id);
        Ok(seq.invalidated)
    })
}

/// `(cudaStreamCaptureStatus, capture id)` of `stream`. Asking about the legacy stream
/// while a blocking stream captures is `cudaErrorStreamCaptureImplicit`.
pub fn status(stream: StreamHandle) -> Result<(u32, u64), CudaStatus> {
    with(|c| {
        if stream == StreamHandle::LEGACY && !c.blocking_sequences().is_empty() {
            return Err(CudaStatus::ErrorStreamCaptureImplicit);
        }
        Ok(match c.streams.get(&stream) {
            None => (STATUS_NONE, 0),
            Some(id) if c.sequences[id].invalidated => (STATUS_INVALIDATED, *id),
            Some(id) => (STATUS_ACTIVE, *id),
        })
    })
}

/// Whether any stream is capturing.
pub fn any() -> bool {
    with(|c| !c.streams.is_empty())
}

pub fn is_capturing(stream: StreamHandle) -> bool {
    with(|c| c.streams.contains_key(&stream))
}

/// Before a potentially unsafe call (one that may synchronize implicitly: allocation,
/// freeing, page-locking, synchronous copies and memsets): refused, and the captures
/// that forbid it invalidated, under the calling thread's mode.
pub fn check_unsafe_call() -> Result<(), CudaStatus> {
    let mode = THREAD_MODE.with(|m| m.get());
    if mode == RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    with(|c| {
        let forbidding: Vec<u64> = c
            .sequences
            .iter()
            .filter(|(_, s)| {
                let own = s.thread == me && s.mode != RELAXED;
                own || (mode == GLOBAL && s.mode == GLOBAL)
            })
            .map(|(id, _)| *id)
            .collect();
        if forbidding.is_empty() {
            return Ok(());
        }
        c.invalidate(&forbidding);
        Err(CudaStatus::ErrorStreamCaptureUnsupported)
    })
}

/// Before work is issued to `stream`: on the legacy stream while a blocking stream
/// captures, refused (implicit dependency) and those captures invalidated.
pub fn check_stream_use(stream: StreamHandle) -> Result<(), CudaStatus> {
    if stream != StreamHandle::LEGACY {
        return Ok(());
    }
    with(|c| {
        let ids = c.blocking_sequences();
        if ids.is_empty() {
            return Ok(());
        }
        c.invalidate(&ids);
        Err(CudaStatus::ErrorStreamCaptureImplicit)
    })
}

/// Refuse what a capture cannot hold on a capturing `stream`, invalidating its capture.
pub fn refuse_if_capturing(stream: StreamHandle) -> Result<(), CudaStatus> {
    with(|c| match c.streams.get(&stream).copied() {
        Some(id) => {
            c.invalidate(&[id]);
            Err(CudaStatus::ErrorStreamCaptureUnsupported)
        }
        None => Ok(()),
    })
}

/// A synchronous call on `stream` (synchronize, query) during a capture.
pub fn check_stream_sync(stream: StreamHandle) -> Result<(), CudaStatus> {
    check_stream_use(stream)?;
    refuse_if_capturing(stream)
}

/// An event recorded on `stream`: in a capture, a stream waiting for it joins that
/// capture.
pub fn event_recorded(event: EventHandle, stream: StreamHandle) {
    with(|c| match c.streams.get(&stream).copied() {
        Some(id) => {
            c.events.insert(event, id);
        }
        None => {
            c.events.remove(&event);
        }
    });
}

/// `stream` waits for `event`: it joins the capture the event was recorded in. A
/// stream already in another capture cannot (the sequences would merge).
pub fn stream_waits(stream: StreamHandle, event: EventHandle) -> Result<(), CudaStatus> {
    with(|c| {
        let Some(&id) = c.events.get(&event) else {
            return Ok(());
        };
        match c.streams.get(&stream) {
            Some(&other) if other != id => {
                c.invalidate(&[id, other]);
                Err(CudaStatus::ErrorStreamCaptureMerge)
            }
            _ => {
                c.streams.insert(stream, id);
                Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcuda_wire::graph::capture_mode::THREAD_LOCAL;

    // One test: the capture table is process-wide.
    #[test]
    fn capture_rules_follow_cuda() {
        let s = StreamHandle(0x7000_0001);
        let joined = StreamHandle(0x7000_0002);
        assert_eq!(
            may_begin(StreamHandle::LEGACY, GLOBAL).unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnsupported
        );
        may_begin(s, THREAD_LOCAL).unwrap();
        begin(s, THREAD_LOCAL);
        assert_eq!(
            may_begin(s, GLOBAL).unwrap_err(),
            CudaStatus::ErrorIllegalState
        );
        let (st, id) = status(s).unwrap();
        assert_eq!(st, STATUS_ACTIVE);
        assert!(id > 0);
        // Fork and join through an event.
        let e = EventHandle(0x7000_0003);
        event_recorded(e, s);
        stream_waits(joined, e).unwrap();
        assert_eq!(status(joined).unwrap(), (STATUS_ACTIVE, id));
        assert_eq!(
            end(joined).unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnmatched
        );
        // Relaxed threads may allocate; others may not, and that invalidates.
        assert_eq!(exchange_mode(RELAXED).unwrap(), GLOBAL);
        check_unsafe_call().unwrap();
        assert_eq!(exchange_mode(GLOBAL).unwrap(), RELAXED);
        assert_eq!(
            check_unsafe_call().unwrap_err(),
            CudaStatus::ErrorStreamCaptureUnsupported
        );
        assert_eq!(status(s).unwrap().0, STATUS_INVALIDATED);
        // Another thread in global mode is not stopped by a thread-local capture.
        std::thread::spawn(|| check_unsafe_call().unwrap())
            .join()
            .unwrap();
        assert!(end(s).unwrap(), "ended invalidated");
        assert_eq!(status(joined).unwrap(), (STATUS_NONE, 0));
        assert_eq!(exchange_mode(7).unwrap_err(), CudaStatus::ErrorInvalidValue);
    }
}
