//! A worker's frame buffers, receive and reply: let go after a large frame, and bounded
//! by the VM's `buffer_memory` across its connections.

mod common;

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::*;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

/// The daemon's worker processes.
fn workers(daemon: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == daemon).then_some(pid)
        })
        .collect()
}

/// A process's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib << 10
}

fn alloc(s: &mut UnixStream, size: u64) -> u64 {
    let (status, meta, _) = call(s, Op::MemAlloc, &MemAlloc { size }, &[]);
    assert_eq!(status, CudaStatus::Success);
    postcard::from_bytes::<Allocated>(&meta).unwrap().ptr
}

fn htod(s: &mut UnixStream, dst: u64, data: &[u8]) -> CudaStatus {
    let req = MemcpyHtoD {
        dst,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    call(s, Op::MemcpyHtoD, &req, data).0
}

fn dtoh(s: &mut UnixStream, src: u64, size: u64) -> (CudaStatus, Vec<u8>) {
    let req = MemcpyDtoH {
        src,
        size,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let (status, _, data) = call(s, Op::MemcpyDtoH, &req, &[]);
    (status, data)
}

/// Finding 8: one large frame does not leave its buffer behind for the connection's
/// life (it was page-locked, too, on a GPU host).
#[test]
fn a_large_frames_buffer_is_let_go_once_it_is_done_with() {
    let d = Daemon::start("shrink");
    let mut s = d.connect();
    hello(&mut s);
    let dev = alloc(&mut s, 1 << 20);
    let worker = workers(d.pid())[0];
    let before = rss(worker);
    // 200 MiB of data for a copy that is refused (it overruns the allocation): the
    // bytes are received all the same.
    let big = vec![0x5au8; 200 << 20];
    assert_eq!(htod(&mut s, dev, &big), CudaStatus::ErrorInvalidValue);
    // And a large read-back of memory the guest owns.
    let (status, data) = dtoh(&mut s, dev, 1 << 20);
    assert_eq!(status, CudaStatus::Success);
    assert_eq!(data.len(), 1 << 20);
    let after = rss(worker);
    assert!(
        after < before + (64 << 20),
        "the worker kept {} MiB after the frame",
        (after - before) >> 20
    );
    // Ordinary chunks still round-trip.
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(htod(&mut s, dev, &chunk), CudaStatus::Success);
    assert!(dtoh(&mut s, dev, 1 << 20).1 == chunk);
}

/// Finding 8: the VM's connections share `buffer_memory`; a frame over it is refused
/// with cudaErrorMemoryAllocation and its connection carries on.
#[test]
fn frames_over_the_vms_buffer_memory_are_refused_and_the_connection_carries_on() {
    let d = Daemon::with_config("buffers", Some("[local]\nbuffer_memory = \"24MiB\"\n"), &[]);
    let mut a = d.connect();
    hello(&mut a);
    let dev_a = alloc(&mut a, 16 << 20);
    // 12 MiB is kept by A's worker for its next frames.
    assert_eq!(
        htod(&mut a, dev_a, &vec![1u8; 12 << 20]),
        CudaStatus::Success
    );
    let mut b = d.connect();
    hello(&mut b);
    let dev_b = alloc(&mut b, 16 << 20);
    // 12 + 16 MiB is over the VM's 24 MiB: refused, the bytes read past.
    assert_eq!(
        htod(&mut b, dev_b, &vec![2u8; 16 << 20]),
        CudaStatus::ErrorMemoryAllocation
    );
    // B carries on within what is left, for its upload and the read-back's reply
    // buffer together.
    let small: Vec<u8> = (0..4 << 20).map(|i| (i % 253) as u8).collect();
    assert_eq!(htod(&mut b, dev_b, &small), CudaStatus::Success);
    assert!(dtoh(&mut b, dev_b, 4 << 20).1 == small);
    // A frame over the whole limit is refused even alone.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers(d.pid()).len() > 1 {
        assert!(Instant::now() < deadline, "A's worker did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        htod(&mut b, dev_b, &vec![3u8; 30 << 20]),
        CudaStatus::ErrorMemoryAllocation
    );
    assert_eq!(htod(&mut b, dev_b, &small), CudaStatus::Success);
    assert!(
        d.log().contains("over the VM's buffer_memory"),
        "{}",
        d.log()
    );
}

/// Finding 8: reply buffers count against `buffer_memory` too. A read over it is
/// refused with cudaErrorMemoryAllocation and the connection carries on; a large
/// read's buffer, let go once sent, is room for the next frame.
#[test]
fn reads_over_the_vms_buffer_memory_are_refused_and_their_room_comes_back() {
    let d = Daemon::with_config(
        "reply-buffers",
        Some("[local]\nbuffer_memory = \"40MiB\"\n"),
        &[],
    );
    let mut s = d.connect();
    hello(&mut s);
    let dev = alloc(&mut s, 48 << 20);
    let bytes: Vec<u8> = (0..30 << 20).map(|i| (i % 241) as u8).collect();
    assert_eq!(htod(&mut s, dev, &bytes), CudaStatus::Success);
    // 48 MiB of reply is over the VM's 40 MiB: refused, no data sent.
    let (status, data) = dtoh(&mut s, dev, 48 << 20);
    assert_eq!(status, CudaStatus::ErrorMemoryAllocation);
    assert!(data.is_empty());
    // The connection carries on, small reads and large.
    let (status, data) = dtoh(&mut s, dev, 1 << 20);
    assert_eq!(status, CudaStatus::Success);
    assert!(data[..] == bytes[..1 << 20]);
    for _ in 0..2 {
        // 30 MiB read back, then 30 MiB sent: each fits only once the other's buffer
        // has been let go and given back.
        let (status, data) = dtoh(&mut s, dev, 30 << 20);
        assert_eq!(status, CudaStatus::Success);
        assert!(data == bytes, "the read came back different");
        assert_eq!(htod(&mut s, dev, &bytes), CudaStatus::Success);
    }
}
