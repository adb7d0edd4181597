//! Posted frames held back and sent together.
//!
//! A request the guest does not wait for (a launch, an async memset, an event record)
//! costs a `write` of its own when sent at once, which is most of what a launch costs
//! the program. Instead its frame is queued here and goes out with the next write the
//! connection makes anyway: in front of the next waited-for request (one vectored
//! write for both), when the queue passes [`FLUSH_BYTES`], or when the queue has waited
//! [`FLUSH_DELAY`] (the client's flusher thread), so a kernel the program launched
//! before going off to compute on the CPU, or before polling mapped memory, starts
//! soon without any further CUDA call. Order is kept: everything is queued and written
//! under the connection's lock, and every write sends the queue first.

use std::io::{self, IoSlice, Write};
use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use vmcuda_wire::frame::{self, FrameHeader};

/// A queue this large is written at once: long enough runs of launches go out in
/// few writes, short enough that the copy into the queue stays in cache.
pub const FLUSH_BYTES: usize = 64 << 10;

/// Data sections this large are written straight from the caller's memory (after the
/// queue, in the same write) instead of being copied into the queue.
pub const INLINE_DATA_MAX: usize = 16 << 10;

/// The longest a posted frame waits in the queue when the program makes no other
/// call: on the order of a kernel launch's own latency on a GPU, far below what any
/// program that overlaps CPU work with its kernels does meanwhile.
pub const FLUSH_DELAY: Duration = Duration::from_micros(50);

/// Encoded frames not written yet, oldest first.
#[derive(Default)]
pub struct PostedFrames {
    buf: Vec<u8>,
    /// When the oldest queued frame was queued.
    since: Option<Instant>,
}

impl PostedFrames {
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// When the queue should be written even if nothing else is: `None` when empty.
    pub fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + FLUSH_DELAY)
    }

    /// Whether a frame with this much data is copied into the queue by [`Self::post`].
    pub fn queues(data_len: usize) -> bool {
        data_len < INLINE_DATA_MAX
    }

    /// Queue a posted frame, or write it now (after the queue) when its data is large
    /// or the queue is full. Returns whether the queue went from empty to not empty
    /// (the flusher's cue).
    pub fn post(
        &mut self,
        w: &mut impl Write,
        header: &FrameHeader,
        meta: &[u8],
        data: &[u8],
    ) -> io::Result<bool> {
        if !Self::queues(data.len()) {
            self.write_with(w, header, meta, data)?;
            return Ok(false);
        }
        let was_empty = self.is_empty();
        self.push(header, meta, data);
        if self.bytes() >= FLUSH_BYTES {
            self.flush(w)?;
            return Ok(false);
        }
        Ok(was_empty)
    }

    /// Append one frame to the queue.
    pub fn push(&mut self, header: &FrameHeader, meta: &[u8], data: &[u8]) {
        if self.buf.is_empty() {
            self.since = Some(Instant::now());
        }
        self.buf.extend_from_slice(header.as_bytes());
        self.buf.extend_from_slice(meta);
        self.buf.extend_from_slice(data);
    }

    /// Write the queue, then one more frame, in one vectored write.
    pub fn write_with(
        &mut self,
        w: &mut impl Write,
        header: &FrameHeader,
        meta: &[u8],
        data: &[u8],
    ) -> io::Result<()> {
        let mut slices = [
            IoSlice::new(&self.buf),
            IoSlice::new(header.as_bytes()),
            IoSlice::new(meta),
            IoSlice::new(data),
        ];
        let r = frame::write_all_vectored(w, &mut slices);
        // Written or not, the queue is spent: after a failed write the connection is
        // unusable and nothing queued can be sent any more.
        self.clear();
        r
    }

    /// Write whatever is queued.
    pub fn flush(&mut self, w: &mut impl Write) -> io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let r = w.write_all(&self.buf);
        self.clear();
        r
    }

    /// Drop what is queued (it is in the journal, sent again after a drop).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.since = None;
        // A queue that once held a huge frame gives the memory back.
        if self.buf.capacity() > 4 * FLUSH_BYTES {
            self.buf.shrink_to(FLUSH_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcuda_wire::frame::{read_data, read_head, FLAG_NO_REPLY};

    fn frames(mut bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (h, _) = read_head(&mut bytes).unwrap();
            out.push((h.request_id.get(), read_data(&mut bytes, &h).unwrap()));
        }
        out
    }

    /// A writer that records each write call separately.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);
    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.0
                .push(bufs.iter().flat_map(|b| b.iter().copied()).collect());
            Ok(bufs.iter().map(|b| b.len()).sum())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn header(id: u64, data: usize) -> FrameHeader {
        FrameHeader::new(7, FLAG_NO_REPLY, id, 0, data)
    }

    #[test]
    fn small_frames_wait_and_go_out_in_order_with_the_next_request() {
        let mut q = PostedFrames::default();
        let mut w = Writes::default();
        assert!(q.post(&mut w, &header(1, 3), &[], b"abc").unwrap());
        assert!(!q.post(&mut w, &header(2, 0), &[], &[]).unwrap());
        assert!(w.0.is_empty() && q.due().is_some());
        q.write_with(&mut w, &FrameHeader::new(7, 0, 3, 0, 1), &[], b"z")
            .unwrap();
        assert_eq!(w.0.len(), 1, "queue and request in one write");
        let got = frames(&w.0[0]);
        assert_eq!(
            got,
            vec![(1, b"abc".to_vec()), (2, vec![]), (3, b"z".to_vec())]
        );
        assert!(q.is_empty() && q.due().is_none());
    }

    #[test]
    fn large_data_is_not_copied_and_keeps_its_place() {
        let mut q = PostedFrames::default();
        let mut w = Writes::default();
        let big = vec![5u8; INLINE_DATA_MAX + 1];
        q.post(&mut w, &header(1, 1), &[], b"a").unwrap();
        assert!(!q.post(&mut w, &header(2, big.len()), &[], &big).unwrap());
        assert_eq!(w.0.len(), 1);
        let got = frames(&w.0[0]);
        assert_eq!(got[0], (1, b"a".to_vec()));
        assert_eq!(got[1], (2, big));
        assert!(q.is_empty());
    }

    #[test]
    fn a_full_queue_is_written() {
        let mut q = PostedFrames::default();
        let mut w = Writes::default();
        let data = vec![1u8; 1000];
        let mut id = 0;
        while w.0.is_empty() {
            id += 1;
            q.post(&mut w, &header(id, data.len()), &[], &data).unwrap();
        }
        assert!(q.is_empty());
        let got = frames(&w.0[0]);
        assert_eq!(got.len() as u64, id);
        assert!(got.iter().enumerate().all(|(i, f)| f.0 == i as u64 + 1));
        assert!(w.0[0].len() >= FLUSH_BYTES);
    }
}
