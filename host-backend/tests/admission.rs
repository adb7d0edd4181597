//! Before admission and around it: the pending cap and hello deadline, guest strings in
//! the log, the ledger failing closed.

mod common;

use std::io::Read;
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmcuda_wire::transport::connect_tcp_from;

use common::*;
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

/// The daemon's children now (zombies included: an unreaped worker counts).
fn children(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            let after = stat.rsplit_once(')')?.1;
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(())
        })
        .count()
}

fn wait_for_children(d: &Daemon, want: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while children(d.pid()) != want {
        assert!(
            Instant::now() < deadline,
            "the daemon has {} workers, not {want}",
            children(d.pid())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the host closed `s` within `wait` (end of input or a reset, not silence).
fn closed_within(s: &mut UnixStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn alloc(s: &mut UnixStream, size: u64) -> (CudaStatus, u64) {
    let (status, meta, _) = call(s, Op::MemAlloc, &MemAlloc { size }, &[]);
    let ptr = if status.is_success() {
        postcard::from_bytes::<Allocated>(&meta).unwrap().ptr
    } else {
        0
    };
    (status, ptr)
}

/// Finding 7: connections that never say hello hold at most `max_pending` workers per
/// listener, more are closed at once, the silent ones are dropped at the deadline and
/// their workers reaped, and an admitted guest is served throughout.
#[test]
fn connections_before_admission_are_capped_and_timed_out_and_admitted_guests_carry_on() {
    // One source here (every connection is this test's uid): its share is the whole.
    let config =
        "[admission]\nmax_pending = 4\nmax_pending_per_source = 4\nhello_timeout_ms = 1500\n";
    let d = Daemon::with_config("flood", Some(config), &[]);
    let mut guest = d.connect();
    hello(&mut guest);
    let (status, dev) = alloc(&mut guest, 4096);
    assert_eq!(status, CudaStatus::Success);
    wait_for_children(&d, 1, Duration::from_secs(10));

    let opened = Instant::now();
    let mut idle: Vec<UnixStream> = (0..4).map(|_| d.connect()).collect();
    wait_for_children(&d, 5, Duration::from_secs(10));
    // The cap is reached: more connections are closed as they come, while the
    // admitted guest keeps being served at once.
    let mut extra: Vec<UnixStream> = (0..32).map(|_| d.connect()).collect();
    let flood_started = Instant::now();
    for s in &mut extra {
        assert!(
            closed_within(s, Duration::from_secs(2)),
            "a connection over the cap was left open"
        );
    }
    assert!(flood_started.elapsed() < Duration::from_secs(3));
    let memset = Memset {
        dst: dev,
        value: 7,
        size: 4096,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let calls = Instant::now();
    for _ in 0..200 {
        let (status, _, _) = call(&mut guest, Op::Memset, &memset, &[]);
        assert_eq!(status, CudaStatus::Success);
    }
    assert!(
        calls.elapsed() < Duration::from_secs(5),
        "200 calls took {:?} during the flood",
        calls.elapsed()
    );
    assert_eq!(
        children(d.pid()),
        5,
        "a worker per pending connection, no more"
    );
    // The deadline passes: the silent ones are closed and their workers gone.
    for s in &mut idle {
        let left = Duration::from_millis(1500 + 3000).saturating_sub(opened.elapsed());
        assert!(
            closed_within(s, left.max(Duration::from_millis(100))),
            "a connection without a hello outlived the deadline"
        );
    }
    wait_for_children(&d, 1, Duration::from_secs(5));
    // Places are free again, and the admitted guest is still served.
    still_serves(&d);
    let (status, _, _) = call(&mut guest, Op::Memset, &memset, &[]);
    assert_eq!(status, CudaStatus::Success);
    let log = d.log();
    assert!(log.contains("max_pending"), "{log}");
    assert!(log.contains("no hello within 1500 ms"), "{log}");
}
/// Whether the host has closed `s` already (without waiting).
fn closed_now(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    match (&*s).read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Issue 34, finding 2: a caller with no token that keeps the listener's pending places
/// filled with silent connections (opening a new one as each is closed) holds only its
/// source's share of them; a guest from another address gets in every time.
#[test]
fn a_source_flooding_silent_connections_cannot_lock_other_guests_out() {
    let addr = free_tcp_addr();
    let d = Daemon::with_config(
        "source-flood",
        Some(
            r#"
            [admission]
            max_pending = 8
            hello_timeout_ms = 1500

            [[vm]]
            name = "remote"
            tcp = true
            token = "a-long-enough-token-1234"
            "#,
        ),
        &["--tcp", &addr],
    );
    drop(connect_tcp(&addr));
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, addr) = (stop.clone(), addr.clone());
        std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            let mut opened = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = connect_tcp_from(Ipv4Addr::new(127, 0, 0, 2), &addr) {
                    open.push(s);
                    opened += 1;
                }
                if open.len() >= 64 {
                    open.retain(|s| !closed_now(s));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            opened
        })
    };
    // The flood holds its places first.
    std::thread::sleep(Duration::from_millis(500));
    let mut admitted = 0;
    for _ in 0..20 {
        let mut s = connect_tcp_from(Ipv4Addr::LOCALHOST, &addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let h = Hello {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
            capabilities: 0,
            token: b"a-long-enough-token-1234".to_vec(),
            client: "legit".into(),
            pid: 1,
        };
        send(&mut s, Op::Hello, &h, &[]);
        if let Ok((head, _)) = vmcuda_wire::frame::read_head(&mut s) {
            if CudaStatus(head.status.get()) == CudaStatus::Success {
                admitted += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let opened = flood.join().unwrap();
    assert!(opened > 100, "the flood opened only {opened} connections");
    assert_eq!(
        admitted, 20,
        "the other source got in {admitted} of 20 times"
    );
    let log = d.log();
    assert!(log.contains("max_pending_per_source"), "{log}");
}

/// Pre-admission log lines are limited per source: a caller flooding a listener with
/// refused hellos (no token) has its lines cut to its source's share, and another
/// address's refusal still reaches the log. Before, one limit held every source's
/// lines together, and the flood used it up.
#[test]
fn a_source_flooding_refused_hellos_cannot_crowd_another_sources_refusal_out_of_the_log() {
    let addr = free_tcp_addr();
    let d = Daemon::with_config(
        "source-log",
        Some(
            r#"
            [[vm]]
            name = "remote"
            tcp = true
            token = "a-long-enough-token-1234"
            "#,
        ),
        &["--tcp", &addr],
    );
    drop(connect_tcp(&addr));
    let refused = |from: Ipv4Addr, client: &str| {
        let mut s = connect_tcp_from(from, &addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let h = Hello {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
            capabilities: 0,
            token: Vec::new(),
            client: client.into(),
            pid: 1,
        };
        send(&mut s, Op::Hello, &h, &[]);
        let (head, _) = vmcuda_wire::frame::read_head(&mut s).expect("a refusal");
        assert_eq!(CudaStatus(head.status.get()), CudaStatus::ErrorNotPermitted);
    };
    let started = Instant::now();
    for _ in 0..200 {
        refused(Ipv4Addr::new(127, 0, 0, 2), "flooder");
    }
    refused(Ipv4Addr::LOCALHOST, "victim");
    let secs = started.elapsed().as_secs() + 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = d.log();
        let victim = log
            .lines()
            .any(|l| l.contains("refused tcp peer 127.0.0.1:"));
        if (victim && log.contains("from 127.0.0.2 in the last")) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        log.lines()
            .any(|l| l.contains("refused tcp peer 127.0.0.1:")),
        "the other source's refusal is not in the log: {log}"
    );
    let flood = log
        .lines()
        .filter(|l| l.contains("refused tcp peer 127.0.0.2:"))
        .count() as u64;
    let limits = vmcuda_host::source_log::PRE_ADMISSION;
    let bound = u64::from(limits.per_source_burst) + secs * u64::from(limits.per_source_per_second);
    assert!(
        flood <= bound,
        "{flood} refusals of one source written, over its {bound}"
    );
    assert!(
        log.contains("from 127.0.0.2 in the last"),
        "no summary of what the flooder's limit dropped: {log}"
    );
}

/// A hello whose program name is `client`, speaking `protocol`.
fn hello_as(s: &mut UnixStream, client: &str, protocol: u32) -> CudaStatus {
    let h = Hello {
        protocol,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: client.into(),
        pid: 1,
    };
    send(s, Op::Hello, &h, &[]);
    reply(s).0
}

/// Finding 9: a guest's name reaches the log and the figures escaped and cut short,
/// and a flood of bad hellos writes little log.
#[test]
fn guest_names_are_escaped_and_a_flood_of_bad_hellos_writes_little_log() {
    let d = Daemon::start("names");
    let evil = format!(
        "evil\n2099-01-01T00:00:00Z  INFO forged: guest admitted\u{1b}[2J{}",
        "A".repeat(60_000)
    );
    // An admitted guest by that name, still connected while its figures are read.
    let mut guest = d.connect();
    assert_eq!(
        hello_as(&mut guest, &evil, PROTOCOL_VERSION),
        CudaStatus::Success
    );
    let status = d.status_json();
    let program = status["guests"][0]["program"].as_str().unwrap().to_string();
    assert!(!program.chars().any(char::is_control), "{program:?}");
    assert!(program.starts_with("evil\\n2099"), "{program:?}");
    assert!(program.len() < 200, "{} bytes", program.len());
    // Many refused hellos (a protocol this host does not speak), each naming itself so.
    for _ in 0..150 {
        let mut s = d.connect();
        assert_ne!(
            hello_as(&mut s, &evil, PROTOCOL_VERSION + 1000),
            CudaStatus::Success
        );
    }
    let started = Instant::now();
    let log = loop {
        // The last refusals are logged by the daemon as its workers report them.
        let log = d.log();
        if log.contains("rate limit") || started.elapsed() > Duration::from_secs(10) {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!log.contains('\u{1b}'), "an escape code reached the log");
    assert!(
        !log.lines().any(|l| l.starts_with("2099")),
        "a guest forged a log line"
    );
    assert!(
        log.contains("evil\\n2099"),
        "the name is shown escaped: {log}"
    );
    assert!(log.len() < 64 << 10, "{} bytes of log", log.len());
    assert!(
        log.contains("connections not admitted yet from uid"),
        "no summary of what the source's limit dropped: {log}"
    );
    // Served all the same.
    let (status, _) = alloc(&mut guest, 64);
    assert_eq!(status, CudaStatus::Success);
}

/// Finding 10: a VM whose ledger cannot be kept is turned away, not served without it.
#[test]
fn a_guest_whose_ledger_cannot_be_kept_is_refused() {
    let d = Daemon::start("ledger-join");
    let state = d.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    // The ledger directory cannot be made.
    std::fs::write(state.join("ledger"), b"not a directory").unwrap();
    let mut s = d.connect();
    let (status, _, why) = hello_with(&mut s, b"");
    assert_eq!(status, CudaStatus::ErrorDevicesUnavailable);
    assert!(
        String::from_utf8_lossy(&why).contains("cannot account"),
        "{}",
        String::from_utf8_lossy(&why)
    );
    assert!(closed(&mut s));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.log().contains("without its ledger") {
        assert!(Instant::now() < deadline, "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Finding 10: a VM's ledger removed while it runs: its workers go on counting in the
/// ledger they hold (an I/O error there refuses allocations: the session's own test,
/// `an_unwritable_ledger_refuses_allocations`), and no new connection counts apart.
#[test]
fn a_ledger_removed_under_a_running_vm_keeps_counting_and_admits_no_one_new() {
    let d = Daemon::with_config(
        "ledger-charge",
        Some("[local]\nmemory_quota = \"1MiB\"\n"),
        &[],
    );
    let mut s = d.connect();
    hello(&mut s);
    let (status, dev) = alloc(&mut s, 4096);
    assert_eq!(status, CudaStatus::Success);
    let ledger = d.dir.join("state/ledger");
    std::fs::remove_dir_all(&ledger).unwrap();
    std::fs::write(&ledger, b"not a directory").unwrap();
    // The admitted worker keeps the ledger it opened (a jailed worker could not open it
    // again by path anyway): the VM's quota still holds for it...
    assert_eq!(alloc(&mut s, 4096).0, CudaStatus::Success);
    assert_eq!(alloc(&mut s, 2 << 20).0, CudaStatus::ErrorMemoryAllocation);
    // ...and a connection that cannot join the VM's ledger is turned away, so no
    // worker counts apart from the others.
    let mut t = d.connect();
    assert_eq!(
        hello_as(&mut t, "late", PROTOCOL_VERSION),
        CudaStatus::ErrorDevicesUnavailable
    );
    // The first connection lives on.
    let memset = Memset {
        dst: dev,
        value: 1,
        size: 4096,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let (status, _, _) = call(&mut s, Op::Memset, &memset, &[]);
    assert_eq!(status, CudaStatus::Success);
}
