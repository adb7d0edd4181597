use super::*;
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use vmcuda_wire::op::{DeviceSynchronize, ExecutorKind, Memset, StreamHandle};

/// One frame as a fake host saw it: (request id, op, posted, memset's dst and
/// size, or the device of anything else).
type Seen = (u64, u16, bool, u64, u64);

/// A fake host on a fresh Unix socket: answers the hello and every waited-for
/// request with success (but a command ring, which it refuses), and reports each
/// frame it reads.
fn fake_host() -> (ServerAddr, mpsc::Receiver<Seen>) {
    let dir = std::env::temp_dir().join(format!(
        "vmcuda-client-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("host.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        while let Ok((h, meta)) = frame::read_head(&mut r) {
            frame::read_data(&mut r, &h).unwrap();
            let (op, id) = (h.op.get(), h.request_id.get());
            let (dst, size) = match postcard::from_bytes::<Memset>(&meta) {
                Ok(m) if op == Op::Memset.code() => (m.dst, m.size),
                _ => (h.device.get() as u64, 0),
            };
            // A host without command rings (of an older version) does not know the
            // op: the client stays on the socket. Not reported: the tests look at the
            // program's own frames.
            if op == Op::RingAttach.code() {
                let reply = FrameHeader::new(op, FLAG_REPLY, id, 0, 0)
                    .with_status(CudaStatus::ErrorNotSupported.0);
                frame::write_frame(&mut s, &reply, &[], &[]).unwrap();
                continue;
            }
            if tx.send((id, op, h.has(FLAG_NO_REPLY), dst, size)).is_err() {
                return;
            }
            if h.has(FLAG_NO_REPLY) {
                continue;
            }
            let meta = if op == Op::Hello.code() {
                postcard::to_stdvec(&HelloReply {
                    protocol: PROTOCOL_VERSION,
                    driver_version: 13000,
                    device_count: 1,
                    executor: ExecutorKind::HostMemory,
                    capabilities: caps::CONSOLE | caps::ASYNC_REQUESTS,
                    banner: "fake".into(),
                })
                .unwrap()
            } else {
                Vec::new()
            };
            let reply = FrameHeader::new(op, FLAG_REPLY, id, meta.len(), 0);
            frame::write_frame(&mut s, &reply, &meta, &[]).unwrap();
        }
    });
    (ServerAddr::Unix(path.to_string_lossy().into_owned()), rx)
}

fn memset(thread: u64, seq: u64) -> Memset {
    Memset {
        dst: thread,
        value: 0,
        size: seq,
        stream: StreamHandle::LEGACY,
        is_async: true,
    }
}

/// Several threads post runs of requests and wait between them: the host sees
/// every frame once, in the order the ids were given, each thread's in its own
/// order, and each wait behind the posts its thread made before it.
#[test]
fn batched_posts_from_several_threads_keep_their_order() {
    let (addr, seen) = fake_host();
    let client = Client::connect(addr, Vec::new()).unwrap();
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 40;
    const POSTS: u64 = 3;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let client = &client;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    for p in 0..POSTS {
                        client.post(0, &memset(t, round * POSTS + p), &[]).unwrap();
                    }
                    // The device field says which thread waits.
                    client
                        .call(t as i32, &DeviceSynchronize, &[], Sink::None)
                        .unwrap();
                }
            });
        }
    });
    drop(client);
    let frames: Vec<Seen> = seen.iter().collect();
    assert_eq!(frames[0].1, Op::Hello.code());
    let frames = &frames[1..];
    assert_eq!(frames.len() as u64, THREADS * ROUNDS * (POSTS + 1));
    assert!(
        frames.windows(2).all(|w| w[0].0 < w[1].0),
        "ids out of order"
    );
    let mut next = [0u64; THREADS as usize];
    let mut waits = [0u64; THREADS as usize];
    let mut posted_total = 0;
    for &(_, op, posted, dst, size) in frames {
        if op == Op::Memset.code() {
            assert!(posted);
            assert_eq!(
                size, next[dst as usize],
                "thread {dst}'s posts out of order"
            );
            next[dst as usize] += 1;
            posted_total += 1;
        } else {
            // A wait: every post its thread made before it is already here.
            assert!(!posted);
            waits[dst as usize] += 1;
            assert_eq!(next[dst as usize], waits[dst as usize] * POSTS);
        }
    }
    assert_eq!(posted_total, THREADS * ROUNDS * POSTS);
}

/// A post nobody waits after reaches the host by itself (the flusher), and what is
/// posted on a client that goes away is sent as it goes.
#[test]
fn posts_reach_the_host_without_a_later_call() {
    let (addr, seen) = fake_host();
    let client: &'static Client = Box::leak(Box::new(Client::connect(addr, Vec::new()).unwrap()));
    assert_eq!(seen.recv().unwrap().1, Op::Hello.code());
    client.start_flusher();
    client.post(0, &memset(7, 1), &[]).unwrap();
    let got = seen
        .recv_timeout(Duration::from_secs(5))
        .expect("the flusher sent it");
    assert_eq!((got.3, got.4), (7, 1));

    let (addr, seen) = fake_host();
    let client = Client::connect(addr, Vec::new()).unwrap();
    client.post(0, &memset(8, 2), &[]).unwrap();
    assert_eq!(seen.recv().unwrap().1, Op::Hello.code());
    assert!(
        seen.recv_timeout(Duration::from_millis(200)).is_err(),
        "queued, not sent"
    );
    drop(client);
    let got = seen
        .recv_timeout(Duration::from_secs(5))
        .expect("sent on drop");
    assert_eq!((got.3, got.4), (8, 2));
}

/// A frame posted with `post_now` goes out with everything queued before it,
/// without a flusher or a later call (the client here has none and makes none).
#[test]
fn posted_now_goes_out_at_once_behind_the_queue() {
    let (addr, seen) = fake_host();
    let client = Client::connect(addr, Vec::new()).unwrap();
    assert_eq!(seen.recv().unwrap().1, Op::Hello.code());
    client.post(0, &memset(9, 1), &[]).unwrap();
    client.post_now(0, &memset(9, 2), &[]).unwrap();
    for seq in [1, 2] {
        let got = seen
            .recv_timeout(Duration::from_secs(5))
            .expect("sent without a flusher");
        assert_eq!((got.2, got.3, got.4), (true, 9, seq));
    }
    drop(client);
}

#[test]
fn a_server_file_lists_hosts_by_line_or_comma_with_comments() {
    let text =
        "# the hosts of this VM\nvsock:2:7731\n\n  tls:gpu-b:7731, tcp:10.0.0.3:7731 # spare\n";
    assert_eq!(
        super::servers::server_file_list(text),
        "vsock:2:7731,tls:gpu-b:7731,tcp:10.0.0.3:7731"
    );
    assert_eq!(super::servers::server_file_list("# nothing\n\n"), "");
}

/// The host-memory double is told apart from a GPU host by its hello.
#[test]
fn a_host_serving_the_test_double_is_known_as_one() {
    let (addr, _seen) = fake_host();
    let hosts = Hosts::connect(std::slice::from_ref(&addr), &[]).unwrap();
    assert_eq!(hosts.test_doubles().collect::<Vec<_>>(), [&addr]);
    let line = test_double_notice(&addr);
    assert!(
        line.starts_with("vmcuda: connected to a TEST DOUBLE"),
        "{line}"
    );
    assert!(line.contains("results are not computed"), "{line}");
}

fn not_found() -> io::Result<bool> {
    Err(io::Error::from(io::ErrorKind::NotFound))
}

#[test]
fn the_default_tries_the_local_socket_before_the_vms_host() {
    let socket = Path::new("/run/vmcuda/vmcuda.sock");
    let local = ServerAddr::Unix(socket.display().to_string());
    let host = ServerAddr::Vsock { cid: 2, port: 7731 };
    // A GPU host that is itself a VM (CID 3) with a daemon of its own: the socket first.
    let (addrs, seen) = default_servers(socket, Ok(true), Ok(3));
    assert_eq!(addrs, [local.clone(), host.clone()]);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].place, "unix:/run/vmcuda/vmcuda.sock");
    assert_eq!(seen[0].found, "a socket: tried first");
    assert_eq!(seen[1].place, "vsock:2:7731");
    assert!(seen[1].found.contains("VM guest (vsock CID 3): tried next"));
    // A VM guest with no daemon of its own: its host over vsock.
    let (addrs, seen) = default_servers(socket, not_found(), Ok(3));
    assert_eq!(addrs, std::slice::from_ref(&host));
    assert!(seen[0].found.starts_with("no socket"), "{seen:?}");
    // A host without vsock: the local socket, also when it is missing (its failure
    // then says so).
    let (addrs, seen) = default_servers(socket, Ok(true), Err("no /dev/vsock".into()));
    assert_eq!(addrs, std::slice::from_ref(&local));
    assert!(seen[1].found.contains("not tried"), "{seen:?}");
    let (addrs, _) = default_servers(socket, not_found(), Ok(2));
    assert_eq!(addrs, [local]);
}

#[test]
fn the_first_default_host_that_answers_is_used() {
    let a = ServerAddr::Unix("/a".into());
    let b = ServerAddr::Vsock { cid: 2, port: 7731 };
    let unreachable = |addr: &ServerAddr| ConnectFailure::Unreachable {
        addr: addr.clone(),
        source: io::Error::from(io::ErrorKind::ConnectionRefused),
    };
    // A stale socket gives way to the next.
    let mut tried = Vec::new();
    let got = connect_first(&[a.clone(), b.clone()], |addr| {
        tried.push(addr.clone());
        if *addr == a {
            Err(unreachable(addr))
        } else {
            Ok(addr.clone())
        }
    });
    assert_eq!(got.unwrap(), b);
    assert_eq!(tried, [a.clone(), b.clone()]);
    // A refusal is the host's answer: nothing more is tried.
    let mut tried = 0;
    let got: Result<(), _> = connect_first(&[a.clone(), b.clone()], |addr| {
        tried += 1;
        Err(ConnectFailure::Refused {
            addr: addr.clone(),
            status: CudaStatus::ErrorNotPermitted,
            reason: None,
        })
    });
    assert!(matches!(got, Err(ConnectFailure::Refused { .. })));
    assert_eq!(tried, 1);
    // Nobody anywhere: the last failure.
    let got: Result<(), _> = connect_first(&[a, b.clone()], |addr| Err(unreachable(addr)));
    assert!(matches!(got, Err(ConnectFailure::Unreachable { addr, .. }) if addr == b));
}
