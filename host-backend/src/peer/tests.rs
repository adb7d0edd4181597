//! Two brokers in one process, as two daemons would run them, with workers' links on
//! socket pairs: a transfer goes through, and everything a guest or a stranger could
//! try instead is refused.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;

use vmcuda_wire::tls::testing::TestPki;
use vmcuda_wire::tls::{mutual_client_config, mutual_server_config};

use super::broker::{self, Broker};
use super::link::{LinkError, PeerLink};
use super::proto::Outcome;

struct Pair {
    dir: PathBuf,
    /// The receiving daemon's endpoint.
    endpoint: String,
    sender: Arc<Broker>,
    receiver: Arc<Broker>,
    pki: TestPki,
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A receiving daemon listening on loopback and a sending one allowed to reach it.
fn pair(name: &str) -> Pair {
    let dir = std::env::temp_dir().join(format!("vmcuda-peer-{name}-{}", std::process::id()));
    let (pki, leaves) = TestPki::with_leaves(
        &dir,
        &["127.0.0.1"],
        &[("sender", &["sender.test"]), ("receiver", &["127.0.0.1"])],
    );
    let (sender_cert, sender_key) = &leaves[0];
    let (receiver_cert, receiver_key) = &leaves[1];
    let receiver_server = mutual_server_config(receiver_cert, receiver_key, &pki.ca).unwrap();
    let receiver_client = mutual_client_config(&pki.ca, receiver_cert, receiver_key).unwrap();
    let receiver = Arc::new(Broker::new(String::new(), vec![], receiver_client));
    let (addr, _) = broker::listen(receiver.clone(), "127.0.0.1:0", receiver_server).unwrap();
    let endpoint = addr.to_string();
    let sender_client = mutual_client_config(&pki.ca, sender_cert, sender_key).unwrap();
    let sender = Arc::new(Broker::new(
        "sender.test:1".into(),
        vec![endpoint.clone()],
        sender_client,
    ));
    Pair {
        dir,
        endpoint,
        sender,
        receiver,
        pki,
    }
}

/// A worker's link to `broker`, served on a thread as the daemon serves it.
fn worker(broker: &Arc<Broker>, id: u64) -> PeerLink {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let broker = broker.clone();
    thread::spawn(move || broker.serve_worker(theirs, id));
    PeerLink::new(ours).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Send `data` for `ticket` from a fresh sending worker, on a thread.
fn send(
    p: &Pair,
    ticket: [u8; 16],
    size: u64,
    endpoint: &str,
    data: Vec<u8>,
) -> thread::JoinHandle<Result<(), LinkError>> {
    let mut link = worker(&p.sender, 1);
    let endpoint = endpoint.to_string();
    thread::spawn(move || {
        link.send(ticket, size, &endpoint, |offset, chunk| {
            let at = offset as usize;
            chunk.copy_from_slice(&data[at..at + chunk.len()]);
            Ok(())
        })
    })
}

fn receive(link: &mut PeerLink, ticket: [u8; 16], size: u64) -> Result<Vec<u8>, LinkError> {
    let mut got = vec![0u8; size as usize];
    link.receive(ticket, size, |offset, chunk| {
        let at = offset as usize;
        got[at..at + chunk.len()].copy_from_slice(chunk);
        Ok(())
    })?;
    Ok(got)
}

fn outcome(r: Result<(), LinkError>) -> Outcome {
    match r {
        Err(LinkError::Outcome(o)) => o,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_transfer_goes_through_once_and_its_ticket_is_spent() {
    let p = pair("through");
    let mut receiving = worker(&p.receiver, 10);
    // Several chunks and a ragged end.
    let size = 3 * super::proto::MAX_CHUNK as u64 + 123;
    let (ticket, _) = receiving.expect(size).unwrap();
    let data = pattern(size as usize);
    let sent = send(&p, ticket, size, &p.endpoint, data.clone());
    assert_eq!(receive(&mut receiving, ticket, size).unwrap(), data);
    sent.join().unwrap().unwrap();

    // Replayed: the receiving daemon refuses it, and the receiver has nothing for it.
    let again = send(&p, ticket, size, &p.endpoint, data);
    assert_eq!(outcome(again.join().unwrap()), Outcome::Refused);
    assert!(matches!(
        receive(&mut receiving, ticket, size),
        Err(LinkError::Outcome(Outcome::UnknownTicket))
    ));
}

#[test]
fn endpoints_outside_allow_are_never_connected_to() {
    let p = pair("allow");
    let mut receiving = worker(&p.receiver, 10);
    let (ticket, _) = receiving.expect(4).unwrap();
    // The receiver's own port under another name is not the allowed endpoint either.
    let port = p.endpoint.rsplit_once(':').unwrap().1;
    for endpoint in ["127.0.0.1:1".to_string(), format!("localhost:{port}")] {
        let r = send(&p, ticket, 4, &endpoint, vec![0; 4]).join().unwrap();
        assert_eq!(outcome(r), Outcome::NotAllowed, "{endpoint}");
    }
    // The ticket is untouched: the real transfer still goes through.
    let sent = send(&p, ticket, 4, &p.endpoint, vec![1, 2, 3, 4]);
    assert_eq!(receive(&mut receiving, ticket, 4).unwrap(), [1, 2, 3, 4]);
    sent.join().unwrap().unwrap();
}

#[test]
fn unknown_tickets_other_sizes_and_other_workers_tickets_are_refused() {
    let p = pair("tickets");
    let mut receiving = worker(&p.receiver, 10);
    let mut other = worker(&p.receiver, 11);

    // A ticket nobody registered.
    let r = send(&p, [0x5a; 16], 4, &p.endpoint, vec![0; 4])
        .join()
        .unwrap();
    assert_eq!(outcome(r), Outcome::Refused);

    // Another worker's ticket cannot be received here, nor with another size.
    let (ticket, _) = receiving.expect(8).unwrap();
    assert!(matches!(
        receive(&mut other, ticket, 8),
        Err(LinkError::Outcome(Outcome::UnknownTicket))
    ));
    assert!(matches!(
        receive(&mut receiving, ticket, 9),
        Err(LinkError::Outcome(Outcome::UnknownTicket))
    ));

    // A sender announcing more bytes than registered is refused, and spends the ticket.
    let r = send(&p, ticket, 16, &p.endpoint, vec![0; 16])
        .join()
        .unwrap();
    assert_eq!(outcome(r), Outcome::Refused);
    let r = send(&p, ticket, 8, &p.endpoint, vec![0; 8]).join().unwrap();
    assert_eq!(outcome(r), Outcome::Refused);
}

#[test]
fn a_daemon_whose_certificate_another_ca_signed_is_refused() {
    let p = pair("stranger");
    let mut receiving = worker(&p.receiver, 10);
    let (ticket, _) = receiving.expect(4).unwrap();
    // It trusts the right CA and is allowed the endpoint, but its own certificate is
    // not the CA's.
    let other = TestPki::new(&p.dir.join("other"), &["sender.test"]);
    let client = mutual_client_config(&p.pki.ca, &other.cert, &other.key).unwrap();
    let stranger = Arc::new(Broker::new(
        "stranger.test:1".into(),
        vec![p.endpoint.clone()],
        client,
    ));
    let mut link = worker(&stranger, 1);
    let r = link.send(ticket, 4, &p.endpoint, |_, chunk| {
        chunk.fill(0xee);
        Ok(())
    });
    assert!(
        matches!(
            r,
            Err(LinkError::Outcome(Outcome::Unreachable | Outcome::Refused))
        ),
        "{r:?}"
    );
    // Nothing was delivered, and the ticket still serves its real sender.
    let sent = send(&p, ticket, 4, &p.endpoint, vec![4, 3, 2, 1]);
    assert_eq!(receive(&mut receiving, ticket, 4).unwrap(), [4, 3, 2, 1]);
    sent.join().unwrap().unwrap();
}

#[test]
fn a_sender_that_cannot_read_its_memory_leaves_the_receiver_an_error() {
    let p = pair("abort");
    let mut receiving = worker(&p.receiver, 10);
    let size = 2 * super::proto::MAX_CHUNK as u64;
    let (ticket, _) = receiving.expect(size).unwrap();
    let mut link = worker(&p.sender, 1);
    let endpoint = p.endpoint.clone();
    let sent = thread::spawn(move || {
        link.send(ticket, size, &endpoint, |offset, chunk| {
            if offset > 0 {
                return Err(vmcuda_wire::CudaStatus::ErrorIllegalAddress);
            }
            chunk.fill(1);
            Ok(())
        })
    });
    assert!(receive(&mut receiving, ticket, size).is_err());
    assert!(matches!(
        sent.join().unwrap(),
        Err(LinkError::Cuda(
            vmcuda_wire::CudaStatus::ErrorIllegalAddress
        ))
    ));
}

/// The ops on two sessions (host-memory executors), as two hosts' workers run them.
#[test]
fn sessions_copy_device_memory_over_the_link_and_check_the_guests_ranges() {
    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use crate::session::Session;
    use vmcuda_wire::op::*;
    use vmcuda_wire::CudaStatus;

    const CTX: CallContext = CallContext { device: 0 };
    let session = || {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        Session::new(Box::new(exec), Grant::unlimited("test"))
    };
    let p = pair("sessions");
    let size = 2 * super::proto::MAX_CHUNK as u64 + 5;
    let alloc = move |s: &mut Session| s.mem_alloc(&CTX, MemAlloc { size }, &[]).unwrap().0.ptr;
    let data = pattern(size as usize);
    let mut to = session().with_peer_link(worker(&p.receiver, 2));
    let dst = alloc(&mut to);

    // Memory the guest does not hold is refused before anything is registered.
    let outside = PeerExpect { dst: dst + 1, size };
    assert_eq!(
        to.peer_expect(&CTX, outside, &[]).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    let ticket = to
        .peer_expect(&CTX, PeerExpect { dst, size }, &[])
        .unwrap()
        .0
        .ticket;

    // The sending host's session, on a thread of its own as its worker would be.
    let (link, endpoint, bytes) = (worker(&p.sender, 1), p.endpoint.clone(), data.clone());
    let sender = thread::spawn(move || {
        let mut from = session().with_peer_link(link);
        let src = alloc(&mut from);
        let htod = MemcpyHtoD {
            dst: src,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        from.memcpy_htod(&CTX, htod, &bytes).unwrap();
        let send = |size| PeerSend {
            src,
            size,
            ticket,
            endpoint: endpoint.clone(),
        };
        // Beyond the guest's memory: refused before the ticket is used.
        let too_long = from.peer_send(&CTX, send(size + 1), &[]).err();
        let sent = from.peer_send(&CTX, send(size), &[]).map(|_| ());
        (too_long, sent)
    });
    let receive = PeerReceive { dst, size, ticket };
    to.peer_receive(&CTX, receive, &[]).unwrap();
    let (too_long, sent) = sender.join().unwrap();
    assert_eq!(too_long, Some(CudaStatus::ErrorInvalidValue));
    sent.unwrap();
    // Read back in small pieces (larger reads land in the worker's reply area).
    for (i, want) in data.chunks(4096).enumerate() {
        let dtoh = MemcpyDtoH {
            src: dst + (i * 4096) as u64,
            size: want.len() as u64,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        let got = to.memcpy_dtoh(&CTX, dtoh, &[]).unwrap().1;
        assert!(got == want, "bytes differ in piece {i}");
    }

    // Without a link (no [peers]), the ops are not supported, and nothing is sent
    // for zero bytes either way.
    let mut alone = session();
    let dst = alloc(&mut alone);
    assert_eq!(
        alone.peer_expect(&CTX, PeerExpect { dst, size }, &[]).err(),
        Some(CudaStatus::ErrorNotSupported)
    );
    let probe = PeerSend {
        src: dst,
        size: 0,
        ticket: [0; 16],
        endpoint: String::new(),
    };
    assert_eq!(
        alone.peer_send(&CTX, probe, &[]).err(),
        Some(CudaStatus::ErrorNotSupported)
    );
}
/// Issue 34, finding 4: 300 plain connections that never start TLS hold at most their
/// source's share of the peer port, and only for the handshake deadline; a real
/// transfer from another daemon goes through meanwhile.
#[test]
fn connections_that_never_handshake_cannot_squat_the_peer_port() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let p = pair("squat");
    let mut squatters: Vec<std::net::TcpStream> = (0..300)
        .filter_map(|_| {
            vmcuda_wire::transport::connect_tcp_from(
                std::net::Ipv4Addr::new(127, 0, 0, 2),
                &p.endpoint,
            )
            .ok()
        })
        .collect();
    assert!(squatters.len() >= 256, "{} connected", squatters.len());
    let opened = Instant::now();
    thread::sleep(Duration::from_millis(300));
    let mut receiving = worker(&p.receiver, 10);
    let size = 4096;
    let (ticket, _) = receiving.expect(size).unwrap();
    let data = pattern(size as usize);
    let sent = send(&p, ticket, size, &p.endpoint, data.clone());
    assert_eq!(receive(&mut receiving, ticket, size).unwrap(), data);
    sent.join().unwrap().unwrap();
    // The silent ones are closed by the handshake deadline, not held for a minute.
    let limit = broker::HANDSHAKE_TIMEOUT + Duration::from_secs(3);
    for s in &mut squatters {
        let left = limit.saturating_sub(opened.elapsed());
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .unwrap();
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("a silent peer connection outlived the deadline: {other:?}"),
        }
    }
}

/// The peer port's lines, as the daemon would write them to its log, of every test in
/// this process (the listener's threads log to the process's subscriber, so this test
/// process gets one; each test tells its own by the source addresses it uses).
fn peer_port_log() -> crate::spawn::LogCapture {
    static LOG: std::sync::OnceLock<crate::spawn::LogCapture> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log = crate::spawn::LogCapture::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter("vmcuda_host::peer=warn,vmcuda_host::source_log=warn")
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other log for this test process");
        log
    })
    .clone()
}

/// Issue 34, finding 4: hundreds of plain connections from one source that never start
/// TLS write a log within that source's limit, with a summary of what was dropped, and
/// another source's refusal is still written meanwhile.
#[test]
fn a_flood_of_silent_connections_writes_a_bounded_peer_port_log_with_a_summary() {
    use crate::source_log::{PER_SOURCE_BURST, PER_SOURCE_PER_SECOND};
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};
    let log = peer_port_log();
    let p = pair("port-log");
    let connect = |from: Ipv4Addr| vmcuda_wire::transport::connect_tcp_from(from, &p.endpoint);
    let flooder = Ipv4Addr::new(127, 0, 0, 3);
    let started = Instant::now();
    let flood: Vec<std::net::TcpStream> = (0..400).filter_map(|_| connect(flooder).ok()).collect();
    assert!(flood.len() >= 300, "{} connected", flood.len());
    let other = connect(Ipv4Addr::new(127, 0, 0, 4)).unwrap();
    // Every flood connection causes one line (closed at once: too many from its
    // source; or refused at the handshake deadline); wait until all are written or
    // summed up.
    let about = |text: &str, who: &str| -> (usize, usize, u64) {
        let (mut lines, mut summaries, mut dropped) = (0, 0, 0);
        for line in text.lines().filter(|l| l.contains(who)) {
            let count = line
                .split_once("suppressed ")
                .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u64>().ok());
            match count {
                Some(n) if line.contains("lines about peer port connections") => {
                    summaries += 1;
                    dropped += n;
                }
                _ => lines += 1,
            }
        }
        (lines, summaries, dropped)
    };
    let who = format!("{flooder}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (lines, summaries, dropped) = loop {
        let (lines, summaries, dropped) = about(&log.text(), &who);
        if lines as u64 + dropped >= flood.len() as u64 {
            break (lines, summaries, dropped);
        }
        assert!(
            Instant::now() < deadline,
            "{lines} lines and {dropped} summed up of {} connections:\n{}",
            flood.len(),
            log.text()
        );
        thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed().as_secs() + 1;
    let text = log.text();
    assert_eq!(
        lines as u64 + dropped,
        flood.len() as u64,
        "each connection once:\n{text}"
    );
    // Within the source's limit, a summary taking a place of it like a line or going
    // with the next line let through.
    let bound = (PER_SOURCE_BURST + PER_SOURCE_PER_SECOND * elapsed as u32) as usize;
    assert!(lines <= bound, "{lines} lines over {bound}:\n{text}");
    assert!(
        summaries >= 1 && summaries <= bound,
        "{summaries} summaries:\n{text}"
    );
    // The other source's silent connection is refused at the deadline and said so.
    assert!(
        text.lines()
            .any(|l| l.contains("127.0.0.4") && l.contains("peer connection refused")),
        "the other source's line was crowded out:\n{text}"
    );
    drop((flood, other));
}
