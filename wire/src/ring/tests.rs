use super::*;
use std::os::unix::net::UnixStream;

fn sealed_memfd(len: usize) -> OwnedFd {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"ring-test", MFdFlags::MFD_ALLOW_SEALING).unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
    fd
}

const CAP: u32 = 4096;

/// A guest end and a host end on one memfd and one socket pair.
fn pair(
    window: Duration,
) -> (
    (RingReader, RingWriter),
    (RingReader, RingWriter),
    UnixStream,
    UnixStream,
) {
    let fd = sealed_memfd(area_len(CAP));
    let (g, h) = UnixStream::pair().unwrap();
    let host_memory = RingMemory::map_fd(fd.as_fd(), CAP).unwrap();
    host_memory.reset();
    let guest_memory = RingMemory::map_fd(fd.as_fd(), CAP).unwrap();
    let host_bell = Bell::new(h.as_fd(), Some(FdQueue::default())).unwrap();
    let (hr, hw, _) = open(host_memory, End::Host, host_bell, window);
    let (gr, gw, _) = open(
        guest_memory,
        End::Guest,
        Bell::new(g.as_fd(), None).unwrap(),
        window,
    );
    ((gr, gw), (hr, hw), g, h)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Messages of every size, several times the ring's capacity among them, echoed by the
/// host end and read back whole and in order: with polling, and with every reader
/// sleeping at once (the doorbell path).
#[test]
fn bytes_cross_both_ways_in_order_polling_or_sleeping() {
    for window in [Duration::from_millis(2), Duration::ZERO] {
        let ((mut gr, mut gw), (mut hr, mut hw), _g, _h) = pair(window);
        let sizes = [1usize, 40, 4095, 4096, 4097, 10_000, 3 * 4096 + 7, 65_536];
        let echo = std::thread::spawn(move || {
            for &n in &sizes {
                let mut buf = vec![0u8; n];
                hr.read_exact(&mut buf).unwrap();
                hw.write_all(&buf).unwrap();
            }
        });
        for (i, &n) in sizes.iter().enumerate() {
            let sent = pattern(n, i as u8);
            gw.write_all(&sent).unwrap();
            let mut back = vec![0u8; n];
            gr.read_exact(&mut back).unwrap();
            assert_eq!(back, sent, "{n} bytes, window {window:?}");
        }
        echo.join().unwrap();
    }
}

#[test]
fn a_vectored_write_lands_as_one_stream() {
    let ((_gr, mut gw), (mut hr, _hw), _g, _h) = pair(Duration::ZERO);
    let parts = [pattern(100, 1), pattern(3000, 2), pattern(5, 3)];
    let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let n = gw.write_vectored(&slices).unwrap();
    assert_eq!(n, 3105);
    let mut got = vec![0u8; n];
    hr.read_exact(&mut got).unwrap();
    assert_eq!(got, parts.concat());
}

/// A peer that claims to have written more than the ring holds, or read what was never
/// written, ends the connection instead of making this side read or write outside it.
#[test]
fn a_lying_peer_is_caught_not_followed() {
    let fd = sealed_memfd(area_len(CAP));
    let (g, h) = UnixStream::pair().unwrap();
    let host_memory = RingMemory::map_fd(fd.as_fd(), CAP).unwrap();
    host_memory.reset();
    let hostile = RingMemory::map_fd(fd.as_fd(), CAP).unwrap();
    let bell = Bell::new(h.as_fd(), None).unwrap();
    let (mut hr, mut hw, _) = open(host_memory, End::Host, bell, Duration::ZERO);
    hostile
        .word64(Direction::ToHost, TAIL)
        .store(u64::from(CAP) + 1, Ordering::SeqCst);
    let mut buf = [0u8; 16];
    assert_eq!(
        hr.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    // A wrapped-around count is as far out.
    hostile
        .word64(Direction::ToHost, TAIL)
        .store(u64::MAX, Ordering::SeqCst);
    assert_eq!(
        hr.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    // A reader's count is looked at when the room runs out: past what was written,
    // it is a lie.
    hw.write_all(&pattern(CAP as usize, 3)).unwrap();
    hostile
        .word64(Direction::ToGuest, HEAD)
        .store(u64::from(CAP) + 7, Ordering::SeqCst);
    assert_eq!(
        hw.write(b"reply").unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    drop(g);
}

/// A writer whose reader never reads waits for room, and gives up when the reader's
/// socket goes away instead of spinning forever.
#[test]
fn a_full_ring_whose_reader_left_fails_the_write() {
    let ((gr, mut gw), (hr, hw), g, h) = pair(Duration::ZERO);
    gw.write_all(&pattern(CAP as usize, 9)).unwrap();
    drop((hr, hw, h));
    let e = gw.write(b"x").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    drop((gr, g));
}

/// What was written before the writer left is still read; then the end.
#[test]
fn the_reader_sees_the_end_after_the_last_bytes() {
    let ((gr, mut gw), (mut hr, hw), g, _h) = pair(Duration::ZERO);
    gw.write_all(b"last words").unwrap();
    drop((gr, gw, g));
    let mut got = Vec::new();
    hr.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    drop(hw);
}

/// A descriptor sent on the socket is kept for the request that claims it, with
/// doorbells around it skipped.
#[test]
fn descriptors_on_the_socket_are_kept_in_order() {
    use crate::transport::Stream;
    let fd = sealed_memfd(area_len(CAP));
    let (g, h) = UnixStream::pair().unwrap();
    let fds = FdQueue::default();
    let bell = Bell::new(h.as_fd(), Some(fds.clone())).unwrap();
    let guest = Stream::Unix(g);
    let mut plain = guest.try_clone().unwrap();
    plain.write_all(&[1]).unwrap();
    guest
        .send_with_fd(&[IoSlice::new(&[2])], fd.as_fd())
        .unwrap();
    bell.wait_for_fd().unwrap();
    assert!(fds.lock().unwrap().pop_front().is_some());
    drop((guest, plain));
    assert_eq!(
        bell.wait_for_fd().unwrap_err().kind(),
        io::ErrorKind::UnexpectedEof
    );
}

#[test]
fn ring_memory_must_be_sealed_large_enough_and_sized_right() {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let open_fd = memfd_create(c"ring-test", MFdFlags::empty()).unwrap();
    nix::unistd::ftruncate(&open_fd, area_len(CAP) as i64).unwrap();
    assert_eq!(
        RingMemory::map_fd(open_fd.as_fd(), CAP).err(),
        Some(RingError::Unsealed)
    );
    let small = sealed_memfd(area_len(CAP) - 4096);
    assert!(matches!(
        RingMemory::map_fd(small.as_fd(), CAP),
        Err(RingError::TooSmall { .. })
    ));
    let fd = sealed_memfd(area_len(CAP));
    for bad in [0, 100, 6000, 8 << 20] {
        assert_eq!(
            RingMemory::map_fd(fd.as_fd(), bad).err(),
            Some(RingError::Capacity(bad))
        );
    }
}
