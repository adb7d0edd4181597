//! The command ring as a hostile guest leaves it: any write count, any read count, any
//! bytes. The host's end reads frames from it and writes a reply into it; both must end
//! in a clean error or the end of the stream, never a panic, a hang or a read or write
//! outside the ring.
#![no_main]

use std::io::{BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vmcuda_wire::frame;
use vmcuda_wire::ring::{self, Bell, End, RingMemory, RING_HEADER};

const CAPACITY: u32 = 4096;

fn memfd() -> std::fs::File {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"ring-fuzz", MFdFlags::MFD_ALLOW_SEALING).unwrap();
    nix::unistd::ftruncate(&fd, ring::area_len(CAPACITY) as i64).unwrap();
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
    std::fs::File::from(fd)
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 16 {
        return;
    }
    let file = memfd();
    let host = RingMemory::map_fd(file.as_fd(), CAPACITY).unwrap();
    host.reset();
    // The guest's words (the write count toward the host, the read count of the
    // replies; offsets as laid out in wire/src/ring.rs) and its bytes, written behind
    // the host's back.
    file.write_at(&input[0..8], 0).unwrap();
    file.write_at(&input[8..16], 256 + 64).unwrap();
    let body = &input[16..input.len().min(16 + CAPACITY as usize)];
    file.write_at(body, RING_HEADER as u64).unwrap();
    // A guest that has gone: a sleeping read sees the end instead of waiting for ever.
    let (guest, socket) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(guest);
    let (reader, mut writer, _) = ring::open(
        host,
        End::Host,
        Bell::on(OwnedFd::from(socket), None),
        Duration::ZERO,
    );
    let mut reader = BufReader::new(reader);
    while let Ok((header, _meta)) = frame::read_head(&mut reader) {
        if frame::skip_data(&mut reader, header.data_len.get()).is_err() {
            break;
        }
    }
    // A reply larger than the ring needs the guest's read count.
    let reply = vec![7u8; 3 * CAPACITY as usize];
    let _ = writer.write_all(&reply);
});
