//! A connection's first frame: a new guest's hello or a returning guest's resume,
//! read within bounds, and the refusal that answers one turned away.

use super::*;

/// Answer the first frame with a refusal (the reason for the guest as its data), log
/// it at the daemon's pace and count it.
pub(super) fn refuse(
    writer: &mut impl Write,
    header: &FrameHeader,
    refusal: Refusal,
) -> Result<Ended, FrameError> {
    admission::log(refusal.host);
    admission::report(Event::Refused);
    let reply = FrameHeader::new(
        header.op.get(),
        FLAG_REPLY,
        header.request_id.get(),
        0,
        refusal.guest.len(),
    )
    .with_status(refusal.status.0);
    frame::write_frame(writer, &reply, &[], refusal.guest.as_bytes())?;
    writer.flush()?;
    Ok(Ended::Refused(refusal.status))
}

/// A connection's first request: a new guest's hello, or a guest coming back.
pub(super) enum First {
    Hello(Hello),
    Resume(SessionResume),
}

/// The connection's first frame, which must be a decodable hello or resume: `None`
/// when the peer left or was answered and turned away. What goes wrong is logged
/// through [`admission::log`], at the daemon's pace.
pub(super) fn read_hello(
    reader: &mut impl Read,
    writer: &mut impl Write,
) -> Result<Option<(FrameHeader, First, Option<GuestPagesGrant>)>, FrameError> {
    let mut grant = None;
    loop {
        let (header, meta) = match frame::read_head(reader) {
            Ok(h) => h,
            Err(FrameError::Closed) => return Ok(None),
            Err(e) => {
                admission::log(format!("closing connection before the handshake: {e}"));
                return Err(e);
            }
        };
        let code = header.op.get();
        if header.data_len.get() as usize > MAX_HELLO_LEN || meta.len() > MAX_HELLO_LEN {
            admission::log("oversized hello; closing");
            return Err(FrameError::UnknownOp(code));
        }
        // Whatever data is there is read and dropped.
        frame::read_data(reader, &header)?;
        // The guest's RAM broker names the pages of the connection it made, once,
        // before the hello of the process it hands the connection to.
        if code == Op::GuestPagesGrant.code() && grant.is_none() {
            match postcard::from_bytes::<GuestPagesGrant>(&meta) {
                Ok(g) => {
                    grant = Some(g);
                    continue;
                }
                Err(e) => {
                    admission::log(format!("undecodable guest page grant ({e}); closing"));
                    return Err(FrameError::UnknownOp(code));
                }
            }
        }
        if code == Op::SessionResume.code() {
            return match postcard::from_bytes::<SessionResume>(&meta) {
                Ok(resume) => Ok(Some((header, First::Resume(resume), grant))),
                Err(e) => {
                    admission::log(format!("undecodable session resume ({e}); closing"));
                    Err(FrameError::UnknownOp(code))
                }
            };
        }
        if code != Op::Hello.code() {
            admission::log(format!("request (op {code}) before handshake; closing"));
            return Err(FrameError::UnknownOp(code));
        }
        return match postcard::from_bytes::<Hello>(&meta) {
            Ok(hello) => Ok(Some((header, First::Hello(hello), grant))),
            Err(e) => {
                admission::log(format!("undecodable hello ({e}); closing"));
                let reply = FrameHeader::new(code, FLAG_REPLY, header.request_id.get(), 0, 0)
                    .with_status(CudaStatus::ErrorInvalidValue.0);
                frame::write_frame(writer, &reply, &[], &[])?;
                writer.flush()?;
                Ok(None)
            }
        };
    }
}
