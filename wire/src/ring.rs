//! The command ring: a connection's frames through shared memory instead of the socket.
//!
//! A socket round trip costs a system call on each side and a wake-up of each sleeping
//! thread: most of a small call's time (bench/results/RESULTS.md). Once a guest and its worker
//! share memory (a memfd on one host, guest RAM in a VM), they attach a ring there
//! ([`crate::op::RingAttach`]) and from then on write their frames into it: two byte
//! rings, one each way, so the frames, their order and their checks are exactly those
//! of the socket. A reader polls its ring while its peer is active; only when it has
//! waited a while does it say so (its `sleeping` word) and sleep in a read of the
//! socket, and only then does the writer ring it awake with one byte there (a
//! *doorbell*). A waited-for call and its reply therefore need no system call on
//! either side while both poll. The socket stays for the hello, for the descriptors a
//! Unix guest passes along (they cannot travel through memory) and for doorbells.
//!
//! The worker treats the ring as hostile: its own indices are kept in its private
//! memory and only published there; the peer's index it reads is checked against the
//! ring's capacity before it is used; bytes are copied out of the ring before anything
//! looks at them (the frame reader checks the copy, never the shared bytes), and a
//! ring whose peer broke these rules ends the connection.
//!
//! Layout of a ring area of capacity `C` (a power of two): a 4 KiB header with one
//! cache line per control word, then `C` bytes toward the host, then `C` toward the
//! guest.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::transport::FdQueue;

/// The header before the two rings' bytes.
pub const RING_HEADER: usize = 4096;
/// Bytes each way unless asked otherwise: a few hundred small frames, or a large
/// kernel parameter block, without waiting for the reader.
pub const DEFAULT_CAPACITY: u32 = 512 << 10;
pub const MIN_CAPACITY: u32 = 4096;
pub const MAX_CAPACITY: u32 = 4 << 20;

/// Bytes of shared memory a ring of `capacity` bytes each way takes.
pub fn area_len(capacity: u32) -> usize {
    RING_HEADER + 2 * capacity as usize
}

/// Whether `capacity` is one a ring may have.
pub fn valid_capacity(capacity: u32) -> bool {
    capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
}

/// Which of the two rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Requests: the guest writes, the worker reads.
    ToHost,
    /// Replies and console output: the worker writes, the guest reads.
    ToGuest,
}

/// One ring's control words, each on its own cache line: the writer's count of bytes
/// written (`tail`), the reader's count of bytes read (`head`), and whether the reader
/// sleeps in the socket waiting for a doorbell.
const TAIL: usize = 0;
const HEAD: usize = 64;
const SLEEPING: usize = 128;

fn control(direction: Direction) -> usize {
    match direction {
        Direction::ToHost => 0,
        Direction::ToGuest => 256,
    }
}

/// Shared memory holding a ring area, mapped in this process; unmapped when dropped.
pub struct RingMemory {
    base: NonNull<u8>,
    len: usize,
    capacity: usize,
    /// Whether dropping it unmaps it (not for memory borrowed from a longer-lived
    /// mapping).
    owned: bool,
}

// SAFETY: the area is plain shared memory, touched only through atomics (the control
// words) and raw copies (the bytes); no Rust reference to its bytes is ever made, so
// any thread may hold it.
unsafe impl Send for RingMemory {}
// SAFETY: as above.
unsafe impl Sync for RingMemory {}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingError {
    #[error("ring capacity {0} is not a power of two between 4 KiB and 4 MiB")]
    Capacity(u32),
    #[error("the ring's memory is {have} bytes; a ring of this capacity needs {need}")]
    TooSmall { have: usize, need: usize },
    #[error("ring memory that could shrink (no F_SEAL_SHRINK) is refused")]
    Unsealed,
    #[error("cannot map the ring's memory: {0}")]
    Map(nix::errno::Errno),
}

impl RingMemory {
    /// Map a ring of `capacity` bytes each way from the start of `fd`, a memfd sealed
    /// against shrinking (pages cut from under the mapping would fault this process).
    pub fn map_fd(fd: BorrowedFd<'_>, capacity: u32) -> Result<RingMemory, RingError> {
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        if !valid_capacity(capacity) {
            return Err(RingError::Capacity(capacity));
        }
        if !crate::memory::sealed_against_shrinking(fd) {
            return Err(RingError::Unsealed);
        }
        let need = area_len(capacity);
        let have = nix::sys::stat::fstat(fd).map_err(RingError::Map)?.st_size;
        if have < need as i64 {
            return Err(RingError::TooSmall {
                have: have.max(0) as usize,
                need,
            });
        }
        let len = std::num::NonZeroUsize::new(need).ok_or(RingError::Capacity(capacity))?;
        // SAFETY: a new shared mapping where the kernel chooses, owned by the value
        // returned, which unmaps exactly it.
        let base = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(RingError::Map)?;
        Ok(RingMemory {
            base: base.cast(),
            len: need,
            capacity: capacity as usize,
            owned: true,
        })
    }

    /// Take over a mapping of `len` bytes at `base` for a ring of `capacity` bytes
    /// each way; it is unmapped when the ring memory is dropped.
    ///
    /// # Safety
    /// `[base, base + len)` is a readable and writable mapping of this process that
    /// nothing else unmaps, and the caller gives its ownership to the returned value.
    pub unsafe fn from_mapping(
        base: NonNull<u8>,
        len: usize,
        capacity: u32,
    ) -> Result<RingMemory, RingError> {
        let memory = RingMemory {
            base,
            len,
            capacity: capacity as usize,
            owned: true,
        };
        memory.check()
    }

    /// Use `len` bytes at `base`, part of a mapping that outlives the ring, for a ring
    /// of `capacity` bytes each way; never unmapped by it.
    ///
    /// # Safety
    /// `[base, base + len)` is readable and writable memory of this process that stays
    /// mapped as long as the returned value lives, and nothing else uses it.
    pub unsafe fn borrowed(
        base: NonNull<u8>,
        len: usize,
        capacity: u32,
    ) -> Result<RingMemory, RingError> {
        RingMemory {
            base,
            len,
            capacity: capacity as usize,
            owned: false,
        }
        .check()
    }

    /// The memory itself, if its capacity is one a ring may have and it holds a ring of
    /// that capacity (dropped otherwise, which unmaps what it owns).
    fn check(self) -> Result<RingMemory, RingError> {
        let capacity = self.capacity as u32;
        if !valid_capacity(capacity) {
            return Err(RingError::Capacity(capacity));
        }
        if self.len < area_len(capacity) {
            return Err(RingError::TooSmall {
                have: self.len,
                need: area_len(capacity),
            });
        }
        Ok(self)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn word64(&self, direction: Direction, word: usize) -> &AtomicU64 {
        // SAFETY: the control words lie inside the header of the live mapping, 8-byte
        // aligned (the mapping is page aligned), and are only accessed atomically.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(control(direction) + word)
                .cast::<AtomicU64>()
        }
    }

    fn sleeping(&self, direction: Direction) -> &AtomicU32 {
        // SAFETY: as for `word64`.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(control(direction) + SLEEPING)
                .cast::<AtomicU32>()
        }
    }

    fn data(&self, direction: Direction) -> *mut u8 {
        let offset = match direction {
            Direction::ToHost => RING_HEADER,
            Direction::ToGuest => RING_HEADER + self.capacity,
        };
        // SAFETY: both rings lie inside the mapping (checked when it was made).
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// Copy `buf.len()` bytes out of `direction`'s ring from stream position `at`.
    /// The peer may be writing anywhere in shared memory meanwhile: what lands in
    /// `buf` is only ever checked as the caller's own copy.
    fn copy_out(&self, direction: Direction, at: u64, buf: &mut [u8]) {
        let offset = (at as usize) & (self.capacity - 1);
        let first = buf.len().min(self.capacity - offset);
        let data = self.data(direction);
        // SAFETY: `offset + first <= capacity` and `buf.len() - first <= capacity`
        // (callers never ask for more than the ring holds): both ranges lie inside
        // the ring, which never overlaps `buf` (private memory).
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(offset), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), buf.len() - first);
        }
    }

    /// Copy `buf` into `direction`'s ring at stream position `at`.
    fn copy_in(&self, direction: Direction, at: u64, buf: &[u8]) {
        let offset = (at as usize) & (self.capacity - 1);
        let first = buf.len().min(self.capacity - offset);
        let data = self.data(direction);
        // SAFETY: as for `copy_out`, the other way.
        unsafe {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), data.add(offset), first);
            std::ptr::copy_nonoverlapping(buf.as_ptr().add(first), data, buf.len() - first);
        }
    }

    /// Start both rings empty: the worker does this before it answers the attach,
    /// whatever the guest left there.
    pub fn reset(&self) {
        for d in [Direction::ToHost, Direction::ToGuest] {
            self.word64(d, TAIL).store(0, Ordering::SeqCst);
            self.word64(d, HEAD).store(0, Ordering::SeqCst);
            self.sleeping(d).store(0, Ordering::SeqCst);
        }
    }
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: unmapping exactly the mapping this value owns.
            let _ = unsafe { nix::sys::mman::munmap(self.base.cast(), self.len) };
        }
    }
}

/// The socket a ring's reader sleeps in: doorbells arrive there, and descriptors a
/// guest passes (kept in `fds`, in order, for the requests that claim them).
pub struct Bell {
    socket: OwnedFd,
    fds: Option<FdQueue>,
}

impl Bell {
    /// A bell on a duplicate of `socket`'s descriptor.
    pub fn new(socket: BorrowedFd<'_>, fds: Option<FdQueue>) -> io::Result<Bell> {
        Ok(Bell::on(socket.try_clone_to_owned()?, fds))
    }

    /// A bell on `socket` (a descriptor of the connection's socket of its own).
    pub fn on(socket: OwnedFd, fds: Option<FdQueue>) -> Bell {
        Bell { socket, fds }
    }

    /// Wake the peer: one byte on the socket. A full socket buffer means bells are
    /// already waiting there; a failure means the peer has gone, which its next read
    /// or write reports.
    fn ring(&self) {
        use nix::sys::socket::{send, MsgFlags};
        let _ = send(
            self.socket.as_raw_fd(),
            &[1],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        );
    }

    /// Sleep until the socket has something: doorbells (read and dropped) or
    /// descriptors (kept). `Ok(0)` when the peer has closed it.
    fn wait(&self) -> io::Result<usize> {
        let mut buf = [0u8; 64];
        match &self.fds {
            Some(fds) => crate::transport::recv_keeping_fds(self.socket.as_fd(), &mut buf, fds),
            None => loop {
                match nix::unistd::read(&self.socket, &mut buf) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    r => return r.map_err(io::Error::from),
                }
            },
        }
    }

    /// Read the socket until a descriptor is queued (a Unix guest sends the
    /// descriptor of a request on the socket before the request goes into the ring; a
    /// sleeping reader may have taken it in already). The queue is emptied as each
    /// request is read.
    pub fn wait_for_fd(&self) -> io::Result<()> {
        let Some(fds) = &self.fds else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        let queued = || fds.lock().unwrap_or_else(|p| p.into_inner()).len();
        while queued() == 0 {
            if self.wait()? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// Wait up to `timeout` for the peer, taking what the socket has; an error when
    /// the peer has gone.
    fn check_peer(&self, timeout: Duration) -> io::Result<()> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(timeout.as_millis().min(1000) as i32)
            .unwrap_or(PollTimeout::ZERO);
        match poll(&mut fds, ms) {
            Ok(n) if n > 0 => {
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                match self.wait()? {
                    0 => Err(io::ErrorKind::BrokenPipe.into()),
                    _ => Ok(()),
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn out_of_bounds(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the peer broke the command ring: {what}"),
    )
}

/// Spin up to `window` for `ready`, reading the clock every few hundred turns.
fn spin_until(window: Duration, mut ready: impl FnMut() -> bool) -> bool {
    if window.is_zero() {
        return ready();
    }
    let until = Instant::now() + window;
    let mut turns = 0u32;
    loop {
        if ready() {
            return true;
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(256) && Instant::now() >= until {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// The reading end of one ring.
pub struct RingReader {
    memory: Arc<RingMemory>,
    direction: Direction,
    /// Bytes read so far: this side's own count, only published to the ring.
    head: u64,
    window: Duration,
    bell: Arc<Bell>,
}

impl RingReader {
    /// Bytes waiting, checked: more than the ring holds means the writer lies.
    fn waiting(&self) -> io::Result<usize> {
        let tail = self
            .memory
            .word64(self.direction, TAIL)
            .load(Ordering::Acquire);
        let waiting = tail.wrapping_sub(self.head);
        if waiting > self.memory.capacity as u64 {
            return Err(out_of_bounds(
                "its write count is ahead by more than the ring",
            ));
        }
        Ok(waiting as usize)
    }

    /// Wait for bytes: poll the ring for the window, then sleep in the socket until a
    /// doorbell. `false` when the peer has closed the socket and written nothing more.
    fn wait(&mut self) -> io::Result<bool> {
        let memory = &*self.memory;
        let tail = memory.word64(self.direction, TAIL);
        let head = self.head;
        if spin_until(self.window, || tail.load(Ordering::Acquire) != head) {
            return Ok(true);
        }
        let sleeping = memory.sleeping(self.direction);
        sleeping.store(1, Ordering::SeqCst);
        // A writer that published before this sees no sleeper and rings nothing: look
        // again before sleeping (the writer stores its count, then reads `sleeping`).
        if tail.load(Ordering::SeqCst) != head {
            sleeping.store(0, Ordering::SeqCst);
            return Ok(true);
        }
        let got = self.bell.wait()?;
        sleeping.store(0, Ordering::SeqCst);
        Ok(got > 0 || tail.load(Ordering::SeqCst) != head)
    }
}

/// Whether requests wait in a ring, asked beside its reader (which a frame reader owns):
/// the worker sends launches it holds once nothing more waits.
#[derive(Clone)]
pub struct Pending {
    memory: Arc<RingMemory>,
    direction: Direction,
}

impl Pending {
    /// Bytes written that the reader has not yet taken.
    pub fn any(&self) -> bool {
        let tail = self.memory.word64(self.direction, TAIL);
        let head = self.memory.word64(self.direction, HEAD);
        tail.load(Ordering::Acquire) != head.load(Ordering::Acquire)
    }
}

impl RingReader {
    pub fn pending(&self) -> Pending {
        Pending {
            memory: self.memory.clone(),
            direction: self.direction,
        }
    }
}

impl Read for RingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let waiting = self.waiting()?;
            if waiting > 0 {
                let n = waiting.min(buf.len());
                self.memory
                    .copy_out(self.direction, self.head, &mut buf[..n]);
                self.head = self.head.wrapping_add(n as u64);
                self.memory
                    .word64(self.direction, HEAD)
                    .store(self.head, Ordering::Release);
                return Ok(n);
            }
            if !self.wait()? {
                return Ok(0);
            }
        }
    }
}

/// The writing end of one ring.
pub struct RingWriter {
    memory: Arc<RingMemory>,
    direction: Direction,
    /// Bytes written so far: this side's own count, only published to the ring.
    tail: u64,
    /// The reader's count as last read (checked) from the ring.
    head_seen: u64,
    window: Duration,
    bell: Arc<Bell>,
}

impl RingWriter {
    /// Room for at least `wanted` more bytes, or what there is, checked: a reader
    /// claiming to have read what was never written lies. The reader's count is read
    /// again only when the one last read leaves too little room (each read of it moves
    /// a cache line from the reader's core).
    fn room(&mut self, wanted: usize) -> io::Result<usize> {
        let capacity = self.memory.capacity as u64;
        let free = capacity - self.tail.wrapping_sub(self.head_seen);
        if free >= wanted as u64 {
            return Ok(free as usize);
        }
        let head = self
            .memory
            .word64(self.direction, HEAD)
            .load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        // The reader's count only grows, and never past what was written.
        if used > capacity || head.wrapping_sub(self.head_seen) > capacity {
            return Err(out_of_bounds("its read count is past what was written"));
        }
        self.head_seen = head;
        Ok((capacity - used) as usize)
    }

    /// Publish what was copied in, and ring the reader if it sleeps.
    fn publish(&self) {
        let memory = &*self.memory;
        memory
            .word64(self.direction, TAIL)
            .store(self.tail, Ordering::SeqCst);
        let sleeping = memory.sleeping(self.direction);
        if sleeping.load(Ordering::SeqCst) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0 {
            self.bell.ring();
        }
    }

    /// Wait until the reader makes room: it is awake (it sleeps only on an empty
    /// ring), so poll, then check every millisecond that it is still there.
    fn wait_for_room(&mut self) -> io::Result<()> {
        loop {
            let mut failed = None;
            let window = self.window.max(Duration::from_micros(50));
            let roomy = spin_until(window, || match self.room(1) {
                Ok(n) => n > 0,
                Err(e) => {
                    failed = Some(e);
                    true
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            if roomy {
                return Ok(());
            }
            self.bell.check_peer(Duration::from_millis(1))?;
        }
    }

    /// Copy as much of `bufs` as fits now (waiting for some room if there is none),
    /// publishing once.
    fn write_some(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        let wanted: usize = bufs.iter().map(|b| b.len()).sum();
        let mut room = self.room(wanted)?;
        if room == 0 {
            self.wait_for_room()?;
            room = self.room(1)?;
        }
        let mut written = 0;
        for b in bufs {
            let n = b.len().min(room - written);
            self.memory.copy_in(self.direction, self.tail, &b[..n]);
            self.tail = self.tail.wrapping_add(n as u64);
            written += n;
            if written == room {
                break;
            }
        }
        self.publish();
        Ok(written)
    }
}

impl Write for RingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_some(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_some(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Which end of the ring this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Guest,
    Host,
}

/// This side's reader and writer on `memory`, sleeping in (and ringing) `bell`, and
/// polling for `window` before each sleep.
pub fn open(
    memory: RingMemory,
    end: End,
    bell: Bell,
    window: Duration,
) -> (RingReader, RingWriter, Arc<Bell>) {
    let memory = Arc::new(memory);
    let bell = Arc::new(bell);
    let (inbound, outbound) = match end {
        End::Guest => (Direction::ToGuest, Direction::ToHost),
        End::Host => (Direction::ToHost, Direction::ToGuest),
    };
    let reader = RingReader {
        memory: memory.clone(),
        direction: inbound,
        head: 0,
        window,
        bell: bell.clone(),
    };
    let writer = RingWriter {
        memory,
        direction: outbound,
        tail: 0,
        head_seen: 0,
        window,
        bell: bell.clone(),
    };
    (reader, writer, bell)
}

#[cfg(test)]
mod tests;
