//! Frames: a fixed 40-byte little-endian header, an argument block ("meta", the
//! postcard encoding of the op's request or reply type) and an optional bulk data
//! section (copy payloads, module images, kernel parameter buffers).
//!
//! Frames are self-delimiting, so a writer may put several of them into one write
//! (asynchronous requests are batched that way) and a reader takes them one by one.

use std::io::{self, IoSlice, Read, Write};

use thiserror::Error;
use zerocopy::little_endian::{I32, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// "VMCU" read as a little-endian u32: every frame starts with it, so a reader that
/// lost its place in the stream notices at once instead of decoding garbage.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"VMCU");
pub const HEADER_LEN: usize = 40;
/// Largest argument block accepted; arguments are small, anything bigger is hostile.
pub const MAX_META_LEN: u32 = 1 << 20;
/// Largest bulk section in one frame. Bigger copies are split by the sender.
pub const MAX_DATA_LEN: u64 = 512 << 20;

/// How much either side reads ahead of the frame it is on: a full queue of posted
/// frames (64 KiB) in one read, yet little of a copy's data, which is read past the
/// buffer straight into its destination.
pub const READ_AHEAD: usize = 64 << 10;

/// The frame is a reply to the request with the same id.
pub const FLAG_REPLY: u16 = 1;
/// The sender does not wait for a reply; a failure is reported at the next
/// synchronizing call instead, exactly as CUDA reports asynchronous errors.
pub const FLAG_NO_REPLY: u16 = 2;
/// An unsolicited host-to-guest event (console output), not a reply.
pub const FLAG_EVENT: u16 = 4;
/// The request claims a descriptor that travels on the socket, not in the command
/// ring its frame is in (see [`crate::ring`]): the host reads the socket until it has
/// come.
pub const FLAG_FD: u16 = 8;

/// The on-wire header. Raw: any bit pattern decodes; [`FrameHeader::validate`] checks it.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct FrameHeader {
    pub magic: U32,
    pub op: U16,
    pub flags: U16,
    /// The calling thread's current device (requests); 0 in replies.
    pub device: I32,
    /// A `cudaError_t` in replies; 0 in requests.
    pub status: U32,
    pub request_id: U64,
    pub meta_len: U32,
    /// In replies: the worker's time on the request, in nanoseconds, saturating
    /// (the guest's profile splits a round trip with it); 0 in requests.
    pub worker_ns: U32,
    pub data_len: U64,
}

const _: () = assert!(std::mem::size_of::<FrameHeader>() == HEADER_LEN);

#[derive(Debug, Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("bad frame magic {0:#x}")]
    BadMagic(u32),
    #[error("argument block of {0} bytes exceeds the limit")]
    MetaTooLarge(u32),
    #[error("data section of {0} bytes exceeds the limit")]
    DataTooLarge(u64),
    #[error("undecodable arguments for op {op:#06x}: {source}")]
    Decode {
        op: u16,
        #[source]
        source: postcard::Error,
    },
    #[error("unknown op code {0:#06x}")]
    UnknownOp(u16),
}

impl FrameHeader {
    pub fn new(op: u16, flags: u16, request_id: u64, meta_len: usize, data_len: usize) -> Self {
        FrameHeader {
            magic: FRAME_MAGIC.into(),
            op: op.into(),
            flags: flags.into(),
            device: 0.into(),
            status: 0.into(),
            request_id: request_id.into(),
            meta_len: (meta_len as u32).into(),
            worker_ns: 0.into(),
            data_len: (data_len as u64).into(),
        }
    }

    pub fn with_device(mut self, device: i32) -> Self {
        self.device = device.into();
        self
    }

    pub fn with_status(mut self, status: u32) -> Self {
        self.status = status.into();
        self
    }

    /// A reply stamped with the time the worker spent on its request.
    pub fn with_worker_time(mut self, spent: std::time::Duration) -> Self {
        self.worker_ns = u32::try_from(spent.as_nanos()).unwrap_or(u32::MAX).into();
        self
    }

    pub fn worker_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.worker_ns.get().into())
    }

    pub fn has(&self, flag: u16) -> bool {
        self.flags.get() & flag != 0
    }

    /// Reject headers no honest peer sends, before any length is trusted.
    pub fn validate(&self) -> Result<(), FrameError> {
        if self.magic.get() != FRAME_MAGIC {
            return Err(FrameError::BadMagic(self.magic.get()));
        }
        if self.meta_len.get() > MAX_META_LEN {
            return Err(FrameError::MetaTooLarge(self.meta_len.get()));
        }
        if self.data_len.get() > MAX_DATA_LEN {
            return Err(FrameError::DataTooLarge(self.data_len.get()));
        }
        Ok(())
    }
}

/// Read one header and its argument block; the data section is left in the stream
/// so the caller can read it straight into its destination.
pub fn read_head(r: &mut impl Read) -> Result<(FrameHeader, Vec<u8>), FrameError> {
    let mut raw = [0u8; HEADER_LEN];
    if let Err(e) = r.read_exact(&mut raw) {
        return Err(if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Closed
        } else {
            FrameError::Io(e)
        });
    }
    let header = FrameHeader::read_from_bytes(&raw).expect("buffer has the header's size");
    header.validate()?;
    let mut meta = vec![0u8; header.meta_len.get() as usize];
    r.read_exact(&mut meta)?;
    Ok((header, meta))
}

/// Read a whole data section into a new buffer (the length was validated by `read_head`).
pub fn read_data(r: &mut impl Read, header: &FrameHeader) -> Result<Vec<u8>, FrameError> {
    let mut data = vec![0u8; header.data_len.get() as usize];
    r.read_exact(&mut data)?;
    Ok(data)
}

/// Read and throw away `len` bytes (a data section nobody wants).
pub fn skip_data(r: &mut impl Read, len: u64) -> Result<(), FrameError> {
    let copied = io::copy(&mut r.take(len), &mut io::sink())?;
    if copied != len {
        return Err(FrameError::Closed);
    }
    Ok(())
}

/// Write one frame with a single vectored write where the OS allows.
pub fn write_frame(
    w: &mut impl Write,
    header: &FrameHeader,
    meta: &[u8],
    data: &[u8],
) -> io::Result<()> {
    let mut slices = [
        IoSlice::new(header.as_bytes()),
        IoSlice::new(meta),
        IoSlice::new(data),
    ];
    write_all_vectored(w, &mut slices)
}

/// `Write::write_all_vectored` is not stable yet; this is the same loop.
pub fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Several frames gathered into one buffer, sent with one write.
#[derive(Default)]
pub struct FrameBatch {
    buf: Vec<u8>,
    frames: usize,
}

impl FrameBatch {
    pub fn push(&mut self, header: &FrameHeader, meta: &[u8], data: &[u8]) {
        self.buf.extend_from_slice(header.as_bytes());
        self.buf.extend_from_slice(meta);
        self.buf.extend_from_slice(data);
        self.frames += 1;
    }

    pub fn len(&self) -> usize {
        self.frames
    }

    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn flush_to(&mut self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.buf)?;
        self.buf.clear();
        self.frames = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_one_frame() {
        let mut out = Vec::new();
        let h = FrameHeader::new(0x0203, FLAG_NO_REPLY, 42, 3, 5).with_device(1);
        write_frame(&mut out, &h, b"abc", b"hello").unwrap();
        assert_eq!(out.len(), HEADER_LEN + 8);
        let mut r = &out[..];
        let (got, meta) = read_head(&mut r).unwrap();
        assert_eq!(got.op.get(), 0x0203);
        assert_eq!(got.request_id.get(), 42);
        assert_eq!(got.device.get(), 1);
        assert!(got.has(FLAG_NO_REPLY) && !got.has(FLAG_REPLY));
        assert_eq!(meta, b"abc");
        assert_eq!(read_data(&mut r, &got).unwrap(), b"hello");
        assert!(matches!(read_head(&mut r), Err(FrameError::Closed)));
    }

    #[test]
    fn several_frames_in_one_write() {
        let mut batch = FrameBatch::default();
        for id in 0..3u64 {
            batch.push(
                &FrameHeader::new(7, FLAG_NO_REPLY, id, 1, 2),
                &[id as u8],
                b"xy",
            );
        }
        assert_eq!(batch.len(), 3);
        let mut out = Vec::new();
        batch.flush_to(&mut out).unwrap();
        assert!(batch.is_empty());
        let mut r = &out[..];
        for id in 0..3u64 {
            let (h, meta) = read_head(&mut r).unwrap();
            assert_eq!((h.request_id.get(), meta[0]), (id, id as u8));
            skip_data(&mut r, h.data_len.get()).unwrap();
        }
    }

    #[test]
    fn rejects_bad_magic_and_absurd_sizes() {
        let mut h = FrameHeader::new(1, 0, 1, 0, 0);
        h.magic = 0xdead_beef.into();
        assert!(matches!(h.validate(), Err(FrameError::BadMagic(_))));
        let h = FrameHeader::new(1, 0, 1, (MAX_META_LEN + 1) as usize, 0);
        assert!(matches!(h.validate(), Err(FrameError::MetaTooLarge(_))));
        let mut h = FrameHeader::new(1, 0, 1, 0, 0);
        h.data_len = (MAX_DATA_LEN + 1).into();
        assert!(matches!(h.validate(), Err(FrameError::DataTooLarge(_))));
    }

    #[test]
    fn truncated_frame_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        write_frame(&mut out, &FrameHeader::new(1, 0, 1, 10, 0), &[0; 10], &[]).unwrap();
        for cut in 0..out.len() {
            assert!(read_head(&mut &out[..cut]).is_err());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut r = &bytes[..];
            if let Ok((h, _)) = read_head(&mut r) {
                let _ = skip_data(&mut r, h.data_len.get());
            }
        }
    }
}
