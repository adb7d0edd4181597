//! Replies to waited-for requests: written and flushed, kept for a guest that may come
//! back, and large ones sent from the reply area piece by piece.

use super::*;

/// Write the reply to a waited-for request and flush it, stamped with the time since
/// `started` (the request all read) for the guest's profile.
/// With `keep` (a session its guest may come back to), the reply is kept first, for
/// sending again (see [`Replay`]): with the request's arguments, for a read that may
/// run again.
pub(super) fn answer(
    writer: &mut impl Write,
    session: &mut Session,
    header: &FrameHeader,
    started: Instant,
    result: Result<(Vec<u8>, Vec<u8>), CudaStatus>,
    deferred: &mut Option<CudaStatus>,
    keep: Option<(&mut Replay, &[u8])>,
) -> Result<(), FrameError> {
    // A synchronous copy's bytes are in place before its reply goes.
    let result = session.finish_owed_copy().and(result);
    let status = match &result {
        Ok(_) => CudaStatus::Success,
        Err(s) => *s,
    };
    let (meta, data) = result.unwrap_or_default();
    // Large reads are in the session's page-locked reply area instead.
    if let Some(len) = session.take_area_len() {
        if let Some((replay, request)) = keep {
            replay.keep(header.request_id.get(), rerun_or_lost(header, request));
        }
        return answer_from_area(
            writer, session, header, started, status, &meta, len, deferred,
        );
    }
    let bytes: &[u8] = &data;
    let reply = FrameHeader::new(
        header.op.get(),
        FLAG_REPLY,
        header.request_id.get(),
        meta.len(),
        bytes.len(),
    )
    .with_status(status.0)
    .with_worker_time(started.elapsed());
    match keep {
        // Encoded once: the frame kept is the frame sent.
        Some((replay, _)) if bytes.len() <= crate::resume::KEPT_DATA_MAX => {
            let mut whole = Vec::with_capacity(frame::HEADER_LEN + meta.len() + bytes.len());
            frame::write_frame(&mut whole, &reply, &meta, bytes)?;
            // Kept before it goes: a drop while it is written leaves it owed.
            if let Kept::Reply(f) = replay.keep(header.request_id.get(), Kept::Reply(whole)) {
                writer.write_all(f)?;
            }
        }
        Some((replay, request)) => {
            replay.keep(header.request_id.get(), rerun_or_lost(header, request));
            frame::write_frame(writer, &reply, &meta, bytes)?;
        }
        None => frame::write_frame(writer, &reply, &meta, bytes)?,
    }
    session.recycle(data);
    writer.flush()?;
    Ok(())
}

/// A reply too large to keep: its request, where it may run again.
fn rerun_or_lost(header: &FrameHeader, request: &[u8]) -> Kept {
    if Replay::rerun_ok(header.op.get()) {
        Kept::Rerun(*header, request.to_vec())
    } else {
        Kept::Lost
    }
}

/// A reply whose data is still arriving in the reply area: each piece is written as
/// soon as it has landed. The status goes first, so the first piece is waited for
/// before it (a failure of earlier work on the stream shows there); a failure met
/// later can no longer change the status sent and is owed to the next call instead,
/// as an asynchronous error.
#[allow(clippy::too_many_arguments)]
fn answer_from_area(
    writer: &mut impl Write,
    session: &mut Session,
    header: &FrameHeader,
    started: Instant,
    status: CudaStatus,
    meta: &[u8],
    len: usize,
    deferred: &mut Option<CudaStatus>,
) -> Result<(), FrameError> {
    let (first, _) = session.area_piece(0, REPLY_PIECE.min(len));
    let status = if status.is_success() {
        first.err().unwrap_or(status)
    } else {
        status
    };
    let sent = if status.is_success() { len } else { 0 };
    let reply = FrameHeader::new(
        header.op.get(),
        FLAG_REPLY,
        header.request_id.get(),
        meta.len(),
        sent,
    )
    .with_status(status.0)
    .with_worker_time(started.elapsed());
    if sent == 0 {
        // Nothing is sent, but the copy must be over before the area is used again.
        let _ = session.area_piece(0, len);
        frame::write_frame(writer, &reply, meta, &[])?;
        writer.flush()?;
        return Ok(());
    }
    frame::write_frame(writer, &reply, meta, &[])?;
    let mut start = 0;
    while start < len {
        let end = (start + REPLY_PIECE).min(len);
        let (landed, bytes) = session.area_piece(start, end);
        if let Err(e) = landed {
            deferred.get_or_insert(e);
        }
        writer.write_all(bytes)?;
        start = end;
    }
    writer.flush()?;
    Ok(())
}
