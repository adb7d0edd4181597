use super::*;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::policy::Grant;
use serde::Serialize;
use std::os::unix::net::UnixStream;
use vmcuda_wire::handshake::caps;
use vmcuda_wire::op::{Allocated, MemAlloc, MemcpyDtoH, MemcpyHtoD, Memset, StreamHandle};

/// A worker on the host-memory executor, serving one end of a socket pair.
fn worker() -> (UnixStream, std::thread::JoinHandle<()>) {
    let (guest, host) = UnixStream::pair().unwrap();
    let served = std::thread::spawn(move || {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let open = |_: &Hello| Ok(Session::new(Box::new(exec), Grant::unlimited("test")));
        serve(
            host.try_clone().unwrap(),
            host,
            Link::default(),
            open,
            None,
            None,
        )
        .unwrap();
    });
    (guest, served)
}

fn send<R: Serialize>(s: &mut UnixStream, op: Op, id: u64, flags: u16, req: &R, data: &[u8]) {
    let meta = postcard::to_stdvec(req).unwrap();
    let h = FrameHeader::new(op.code(), flags, id, meta.len(), data.len());
    frame::write_frame(s, &h, &meta, data).unwrap();
}

fn reply(s: &mut UnixStream, id: u64) -> (CudaStatus, Vec<u8>, Vec<u8>) {
    let (h, meta) = frame::read_head(s).unwrap();
    assert!(h.has(FLAG_REPLY));
    assert_eq!(h.request_id.get(), id);
    let data = frame::read_data(s, &h).unwrap();
    (CudaStatus(h.status.get()), meta, data)
}

fn greet(s: &mut UnixStream) {
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: caps::CONSOLE | caps::ASYNC_REQUESTS,
        token: vec![],
        client: "worker-test".into(),
        pid: 1,
    };
    send(s, Op::Hello, 0, 0, &hello, &[]);
    assert_eq!(reply(s, 0).0, CudaStatus::Success);
}

fn alloc(s: &mut UnixStream, id: u64, size: u64) -> u64 {
    send(s, Op::MemAlloc, id, 0, &MemAlloc { size }, &[]);
    let (status, meta, _) = reply(s, id);
    assert_eq!(status, CudaStatus::Success);
    postcard::from_bytes::<Allocated>(&meta).unwrap().ptr
}

/// A worker as the daemon makes it for a Unix guest: descriptors and a socket to
/// ring. Its outcome comes back from the thread.
fn unix_worker() -> (
    UnixStream,
    std::thread::JoinHandle<Result<Ended, FrameError>>,
) {
    use std::os::fd::AsFd;
    let (guest, host) = UnixStream::pair().unwrap();
    let served = std::thread::spawn(move || {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let open = |_: &Hello| Ok(Session::new(Box::new(exec), Grant::unlimited("test")));
        let (reader, fds) = vmcuda_wire::transport::FdReader::new(host.try_clone().unwrap());
        let link = Link {
            socket: Some(host.as_fd().try_clone_to_owned().unwrap()),
            fds: Some(fds),
        };
        serve(reader, host, link, open, None, None)
    });
    (guest, served)
}

/// Attach a command ring of `capacity` in a memfd; the guest's reader and writer
/// on it, and a second mapping to play a hostile guest with.
fn attach_ring(
    s: &mut UnixStream,
    capacity: u32,
) -> (ring::RingReader, ring::RingWriter, std::os::fd::OwnedFd) {
    use std::os::fd::AsFd;
    use vmcuda_wire::op::{RingAttach, RingPlace};
    let fd = memfd(ring::area_len(capacity));
    let req = RingAttach {
        capacity,
        place: RingPlace::Descriptor,
    };
    let meta = postcard::to_stdvec(&req).unwrap();
    let h = FrameHeader::new(Op::RingAttach.code(), 0, 5, meta.len(), 0);
    let stream = vmcuda_wire::transport::Stream::Unix(s.try_clone().unwrap());
    let mut bytes = zerocopy::IntoBytes::as_bytes(&h).to_vec();
    bytes.extend(&meta);
    stream
        .send_with_fd(&[std::io::IoSlice::new(&bytes)], fd.as_fd())
        .unwrap();
    assert_eq!(reply(s, 5).0, CudaStatus::Success);
    let memory = ring::RingMemory::map_fd(fd.as_fd(), capacity).unwrap();
    let bell = ring::Bell::new(s.as_fd(), None).unwrap();
    let (r, w, _) = ring::open(memory, ring::End::Guest, bell, std::time::Duration::ZERO);
    (r, w, fd)
}

fn memfd(len: usize) -> std::os::fd::OwnedFd {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"ring", MFdFlags::MFD_ALLOW_SEALING).unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
    fd
}

fn send_on<R: Serialize>(w: &mut impl Write, op: Op, id: u64, flags: u16, req: &R, data: &[u8]) {
    let meta = postcard::to_stdvec(req).unwrap();
    let h = FrameHeader::new(op.code(), flags, id, meta.len(), data.len());
    frame::write_frame(w, &h, &meta, data).unwrap();
}

fn reply_on(r: &mut impl Read, id: u64) -> (CudaStatus, Vec<u8>, Vec<u8>) {
    let (h, meta) = frame::read_head(r).unwrap();
    assert!(h.has(FLAG_REPLY));
    assert_eq!(h.request_id.get(), id);
    let data = frame::read_data(r, &h).unwrap();
    (CudaStatus(h.status.get()), meta, data)
}

/// After the attach, requests and replies travel through the ring (copies larger
/// than the ring stream through it), a second attach is refused, and a guest that
/// then breaks the ring's rules loses its connection: the worker ends with an
/// error instead of reading outside the ring.
#[test]
fn frames_travel_through_an_attached_ring_and_a_broken_ring_ends_the_connection() {
    use vmcuda_wire::op::RingAttach;
    let (mut s, served) = unix_worker();
    greet(&mut s);
    let (mut r, mut w, fd) = attach_ring(&mut s, 4096);
    send_on(&mut w, Op::MemAlloc, 6, 0, &MemAlloc { size: 100_000 }, &[]);
    let (status, meta, _) = reply_on(&mut r, 6);
    assert_eq!(status, CudaStatus::Success);
    let dev = postcard::from_bytes::<Allocated>(&meta).unwrap().ptr;
    let bytes: Vec<u8> = (0..100_000).map(|i| (i * 7 % 253) as u8).collect();
    let put = MemcpyHtoD {
        dst: dev,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    send_on(&mut w, Op::MemcpyHtoD, 7, FLAG_NO_REPLY, &put, &bytes);
    let get = MemcpyDtoH {
        src: dev,
        size: bytes.len() as u64,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    send_on(&mut w, Op::MemcpyDtoH, 8, 0, &get, &[]);
    let (status, _, back) = reply_on(&mut r, 8);
    assert_eq!(status, CudaStatus::Success);
    assert!(
        back == bytes,
        "the copy through the ring came back different"
    );
    let again = RingAttach {
        capacity: 4096,
        place: vmcuda_wire::op::RingPlace::Descriptor,
    };
    send_on(&mut w, Op::RingAttach, 9, 0, &again, &[]);
    assert_eq!(reply_on(&mut r, 9).0, CudaStatus::ErrorInvalidValue);
    // Now claim far more bytes than the ring holds.
    use std::os::fd::AsFd;
    // SAFETY: a new shared mapping of the ring memfd's first page (its header,
    // where the guest-to-host tail word is first), owned by this test.
    let base = unsafe {
        nix::sys::mman::mmap(
            None,
            std::num::NonZeroUsize::new(4096).unwrap(),
            nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
            nix::sys::mman::MapFlags::MAP_SHARED,
            fd.as_fd(),
            0,
        )
        .unwrap()
    };
    // SAFETY: an aligned word inside the page just mapped, touched atomically.
    let tail = unsafe { &*base.as_ptr().cast::<std::sync::atomic::AtomicU64>() };
    tail.fetch_add(1 << 40, std::sync::atomic::Ordering::SeqCst);
    // The worker may be asleep in the socket: wake it as a writer would.
    std::io::Write::write_all(&mut s, &[1]).unwrap();
    let ended = served.join().unwrap();
    assert!(
        matches!(&ended, Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData),
        "{ended:?}"
    );
}

/// Chunks of odd sizes, posted but the last, go through the alternating receive
/// buffers; one large read comes back piece by piece from the reply area; both
/// round-trip byte for byte.
#[test]
fn odd_sized_chunked_copies_round_trip_through_both_buffers() {
    let (mut s, served) = worker();
    greet(&mut s);
    let chunks = [(1 << 20) + 7, 1 << 20, 3 * REPLY_PIECE + 1, 13];
    let total: usize = chunks.iter().sum();
    let bytes: Vec<u8> = (0..total).map(|i| (i * 131 % 251) as u8).collect();
    let dev = alloc(&mut s, 1, total as u64);
    let mut at = 0;
    for (i, len) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let req = MemcpyHtoD {
            dst: dev + at as u64,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        let flags = if last { 0 } else { FLAG_NO_REPLY };
        send(
            &mut s,
            Op::MemcpyHtoD,
            10 + i as u64,
            flags,
            &req,
            &bytes[at..at + len],
        );
        at += len;
    }
    assert_eq!(reply(&mut s, 13).0, CudaStatus::Success);
    // Read back in one piece, and in two reads of odd lengths sent together.
    let whole = MemcpyDtoH {
        src: dev,
        size: total as u64,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    send(&mut s, Op::MemcpyDtoH, 20, 0, &whole, &[]);
    let (status, _, data) = reply(&mut s, 20);
    assert_eq!(status, CudaStatus::Success);
    assert!(data == bytes, "the copy came back different");
    let split = (1 << 20) + 3;
    for (id, (src, size)) in [(21, (0, split)), (22, (split, total - split))] {
        let req = MemcpyDtoH {
            src: dev + src as u64,
            size: size as u64,
            stream: StreamHandle::LEGACY,
            is_async: true,
        };
        send(&mut s, Op::MemcpyDtoH, id, 0, &req, &[]);
    }
    let mut back = reply(&mut s, 21).2;
    back.extend(reply(&mut s, 22).2);
    assert!(back == bytes, "the split copy came back different");
    drop(s);
    served.join().unwrap();
}

/// Posted launches the executor holds reach it before any other call, before the
/// worker would wait for one, and a waited launch before its reply.
#[test]
fn held_launches_go_before_other_calls_and_before_the_worker_waits() {
    use vmcuda_wire::op::{
        FunctionInfo, LaunchKernel, ModuleGetFunction, ModuleLoad, ModuleLoaded,
    };
    const TINY: &[u8] = include_bytes!("../../../wire/testdata/tiny.fatbin");
    let log = std::env::temp_dir().join(format!("vmcuda-held-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (guest, host) = UnixStream::pair().unwrap();
    let log_path = log.clone();
    let served = std::thread::spawn(move || {
        let exec = HostMemoryExecutor::new(64 << 20, Some(log_path)).unwrap();
        let open = |_: &Hello| Ok(Session::new(Box::new(exec), Grant::unlimited("test")));
        serve(
            host.try_clone().unwrap(),
            host,
            Link::default(),
            open,
            None,
            None,
        )
        .unwrap();
    });
    let mut s = guest;
    greet(&mut s);
    let buf = alloc(&mut s, 1, 4096);
    send(&mut s, Op::ModuleLoad, 2, 0, &ModuleLoad, TINY);
    let (status, meta, _) = reply(&mut s, 2);
    assert_eq!(status, CudaStatus::Success);
    let module = postcard::from_bytes::<ModuleLoaded>(&meta).unwrap().module;
    let get = ModuleGetFunction {
        module,
        name: "_Z4tinyPi".into(),
    };
    send(&mut s, Op::ModuleGetFunction, 3, 0, &get, &[]);
    let (_, meta, _) = reply(&mut s, 3);
    let function = postcard::from_bytes::<FunctionInfo>(&meta)
        .unwrap()
        .function;
    let launch = LaunchKernel {
        function,
        grid: [1; 3],
        block: [1; 3],
        shared_mem: 0,
        stream: StreamHandle::LEGACY,
        attributes: vec![],
    };
    // The launches' arguments, in the order the log has them.
    let logged = || -> Vec<u64> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let r: serde_json::Value = serde_json::from_str(l).unwrap();
                let hex = r["params"].as_str().unwrap();
                u64::from_str_radix(&hex[..16], 16).unwrap().swap_bytes()
            })
            .collect()
    };
    let post = |s: &mut UnixStream, id: u64, flags: u16| {
        send(
            s,
            Op::LaunchKernel,
            id,
            flags,
            &launch,
            &(buf + id).to_le_bytes(),
        );
    };
    // Posted, then nothing: they reach the executor once the worker runs dry.
    for id in 10..15 {
        post(&mut s, id, FLAG_NO_REPLY);
    }
    let want: Vec<u64> = (10..15).map(|id| buf + id).collect();
    let until = Instant::now() + std::time::Duration::from_secs(5);
    while logged() != want && Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(logged(), want, "posted launches sent once no request waits");
    // Posted, then a waited call of another kind: they went before it ran.
    for id in 15..25 {
        post(&mut s, id, FLAG_NO_REPLY);
    }
    alloc(&mut s, 25, 64);
    assert_eq!(logged(), (10..25).map(|id| buf + id).collect::<Vec<_>>());
    // A waited launch is answered once it went.
    post(&mut s, 26, 0);
    assert_eq!(reply(&mut s, 26).0, CudaStatus::Success);
    assert_eq!(logged().last(), Some(&(buf + 26)));
    // More than are held at once: in order, none lost.
    for id in 100..200 {
        post(&mut s, id, FLAG_NO_REPLY);
    }
    alloc(&mut s, 200, 64);
    let all = logged();
    assert_eq!(all.len(), 15 + 1 + 100);
    assert!(all[16..].iter().copied().eq((100..200).map(|id| buf + id)));
    drop(s);
    served.join().unwrap();
    let _ = std::fs::remove_file(&log);
}

/// A posted request's failure is reported by the next waited-for one, behind a
/// run of posted requests that succeed, and only once.
#[test]
fn a_posted_failure_surfaces_at_the_next_waited_call() {
    let (mut s, served) = worker();
    greet(&mut s);
    let dev = alloc(&mut s, 1, 4096);
    let memset = |dst: u64| Memset {
        dst,
        value: 1,
        size: 16,
        stream: StreamHandle::LEGACY,
        is_async: true,
    };
    send(&mut s, Op::Memset, 2, FLAG_NO_REPLY, &memset(dev), &[]);
    // Outside the guest's memory: refused, owed to the next waited call.
    send(
        &mut s,
        Op::Memset,
        3,
        FLAG_NO_REPLY,
        &memset(dev + (1 << 30)),
        &[],
    );
    for id in 4..20 {
        send(&mut s, Op::Memset, id, FLAG_NO_REPLY, &memset(dev), &[]);
    }
    send(&mut s, Op::Memset, 20, 0, &memset(dev), &[]);
    assert_eq!(reply(&mut s, 20).0, CudaStatus::ErrorInvalidValue);
    send(&mut s, Op::Memset, 21, 0, &memset(dev), &[]);
    assert_eq!(reply(&mut s, 21).0, CudaStatus::Success);
    drop(s);
    served.join().unwrap();
}
