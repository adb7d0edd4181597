//! A guest's GPU work survives what the host does under it, through a host-memory
//! daemon: `vmcuda-host suspend` and `resume` (whose workers the test double's
//! checkpointer stops and continues: the commands, the VM's ledger and the guest's
//! pause are what is tested here; the driver's checkpoint is proven on the GPU,
//! tests/gpu/run-suspend.sh), and a restart of the daemon.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use vmcuda_tests::{build_c_program, guest_library_path, host_bin, text, Daemon};

/// `vmcuda-host ARGS VM` for the test double's workers of daemon `d`.
fn operator(d: &Daemon, command: &str, vm: &str) -> Output {
    let mut cmd = Command::new(host_bin());
    cmd.arg(command)
        .arg(vm)
        .arg("--executor")
        .arg("host-memory")
        .arg("--state-dir")
        .arg(d.dir.join("state"));
    let config = d.dir.join("host.toml");
    if config.exists() {
        cmd.arg("--config").arg(config);
    }
    cmd.output().expect("run vmcuda-host")
}

/// tests/c/suspend_steps.c running against `d`, its stdout lines arriving on the
/// receiver.
struct Steps {
    child: std::process::Child,
    lines: Receiver<String>,
}

impl Steps {
    fn start(d: &Daemon, args: &[&str]) -> Steps {
        Self::start_on(&d.server(), args)
    }

    fn start_on(server: &str, args: &[&str]) -> Steps {
        Self::start_with(server, args, &[])
    }

    /// [`Steps::start_on`] with more environment variables for the program.
    fn start_with(server: &str, args: &[&str], env: &[(&str, &str)]) -> Steps {
        let exe = build_c_program("suspend_steps", &["libcuda.so.1"]);
        let mut child = Command::new(exe)
            .args(args)
            .env("LD_LIBRARY_PATH", guest_library_path())
            .env("VMCUDA_SERVER", server)
            .env("VMCUDA_TOKEN_FILE", "/nonexistent")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start suspend_steps");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Steps { child, lines }
    }

    /// The lines up to one that starts with `prefix`, waiting up to 30 s.
    fn until(&self, prefix: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.starts_with(prefix);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(e) => panic!("no `{prefix}` line ({e:?}) after {seen:?}"),
            }
        }
    }

    /// Lines printed within `quiet`.
    fn during(&self, quiet: Duration) -> Vec<String> {
        let deadline = Instant::now() + quiet;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(RecvTimeoutError::Timeout) => return seen,
                Err(RecvTimeoutError::Disconnected) => return seen,
            }
        }
    }

    fn finish(mut self) -> (bool, Vec<String>) {
        let rest = self.until("PASS").into_iter().collect();
        let status = self.child.wait().expect("wait");
        (status.success(), rest)
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The suspended fields of VM `vm`'s ledger lines (the fifth figure, 0 when absent);
/// `vm` a name that is its own file name.
fn suspended_bytes(state: &Path, vm: &str) -> Vec<u64> {
    let path = state.join("ledger").join(format!("{vm}.ledger"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').nth(4).map_or(0, |s| s.parse().unwrap()))
        .collect()
}

#[test]
fn a_suspended_guest_pauses_and_carries_on_with_its_memory_when_resumed() {
    let d = Daemon::host_memory("suspend");
    let steps = Steps::start(&d, &["60", "20", "16"]);
    steps.until("step 3 ok");
    let out = operator(&d, "suspend", "local");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("suspended VM local: 1 worker(s)"), "{said}");
    // Its 16 MiB and two 1 MiB buffers count as the VM's host memory now.
    let held = suspended_bytes(&d.dir.join("state"), "local");
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0] >= 18 << 20, "{held:?}");
    // The guest's program waits: no step goes through while the VM is suspended.
    let paused = steps.during(Duration::from_millis(600));
    assert!(
        paused.len() <= 1,
        "steps went on while suspended: {paused:?}"
    );
    let again = operator(&d, "suspend", "local");
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("suspended already"),
        "{}",
        text(&again.stderr)
    );
    let out = operator(&d, "resume", "local");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("resumed VM local: 1 worker(s)"));
    assert_eq!(suspended_bytes(&d.dir.join("state"), "local"), vec![0]);
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("FAIL")), "{rest:?}");
    let pause = rest
        .iter()
        .find_map(|l| l.strip_prefix("longest pause between steps: "))
        .and_then(|v| v.trim_end_matches(" ms").parse::<f64>().ok())
        .expect("the pause line");
    assert!(pause >= 500.0, "the program saw a pause of {pause} ms");
}

#[test]
fn a_vm_whose_gpu_memory_does_not_fit_its_host_memory_is_not_suspended() {
    let d = Daemon::start_with_config(
        "suspend-over",
        Some("[local]\nhost_memory = \"32MiB\"\n"),
        &["--executor", "host-memory"],
    );
    let steps = Steps::start(&d, &["30", "10", "64"]);
    steps.until("step 1 ok");
    let out = operator(&d, "suspend", "local");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let said = text(&out.stderr);
    assert!(said.contains("raise [[vm]] host_memory"), "{said}");
    // Never paused: it keeps stepping and finishes.
    assert!(!steps.during(Duration::from_millis(300)).is_empty());
    assert_eq!(suspended_bytes(&d.dir.join("state"), "local"), vec![0]);
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}");
}

#[test]
fn a_vm_without_connections_has_nothing_to_suspend_or_resume() {
    let d = Daemon::host_memory("suspend-none");
    for command in ["suspend", "resume"] {
        let out = operator(&d, command, "vm-nobody");
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("has no worker"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// `vmcuda-host serve` (host-memory) on `dir`'s socket and state directory, its log
/// appended to `dir/host.log`.
fn serve(dir: &Path) -> std::process::Child {
    let socket = dir.join("host.sock");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("host.log"))
        .unwrap();
    let child = Command::new(host_bin())
        .args(["serve", "--executor", "host-memory", "--unix"])
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start vmcuda-host");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon does not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The daemon stopped (SIGTERM, as systemd stops it) and started again under a running
/// guest: the guest's worker goes on serving it to the end, the new daemon admits new
/// guests beside it, and the operator's commands still find the old worker.
#[test]
fn a_guest_carries_on_through_a_restart_of_its_daemon() {
    let dir = std::env::temp_dir().join(format!("vmcuda-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let server = format!("unix:{}", dir.join("host.sock").display());
    let mut first = serve(&dir);
    let steps = Steps::start_on(&server, &["80", "20", "16"]);
    steps.until("step 3 ok");
    let term = Command::new("kill")
        .arg("-TERM")
        .arg(first.id().to_string())
        .status()
        .unwrap();
    assert!(term.success(), "SIGTERM the daemon");
    first.wait().unwrap();
    // The guest keeps going while no daemon runs.
    let between = steps.during(Duration::from_millis(200));
    assert!(!between.is_empty(), "the guest stopped with its daemon");
    let mut second = serve(&dir);
    // A new guest beside the old one, through the new daemon.
    let newcomer = Steps::start_on(&server, &["5", "1", "1"]);
    let (ok, rest) = newcomer.finish();
    assert!(ok, "{rest:?}");
    // The old worker is in its VM's ledger still: the operator can suspend it.
    let state = dir.join("state");
    let op = |command: &str| {
        Command::new(host_bin())
            .args([command, "local", "--executor", "host-memory", "--state-dir"])
            .arg(&state)
            .output()
            .unwrap()
    };
    let out = op("suspend");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = op("resume");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("FAIL")), "{rest:?}");
    let _ = second.kill();
    let _ = second.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[suspend] idle_after_ms`: a VM whose guest makes no call for that long is
/// suspended by the daemon, and resumed by its guest's next call, which then runs.
#[test]
fn an_idle_vm_is_suspended_by_policy_and_resumed_by_its_guests_next_call() {
    let d = Daemon::start_with_config(
        "suspend-idle",
        Some("[suspend]\nidle_after_ms = 300\n"),
        &["--executor", "host-memory"],
    );
    let steps = Steps::start(&d, &["4", "1500", "16"]);
    steps.until("step 0 ok");
    // Asleep between its steps: suspended meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    while suspended_bytes(&d.dir.join("state"), "local") == vec![0] {
        assert!(
            Instant::now() < deadline,
            "not suspended while idle:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}\n{}", d.log());
    assert!(!rest.iter().any(|l| l.starts_with("FAIL")), "{rest:?}");
    let log = d.log_with("its guest called: resumed VM local");
    assert!(
        log.contains("idle: suspended VM local: 1 worker(s)"),
        "{log}"
    );
    assert!(log.contains("its guest called: resumed VM local"), "{log}");
}

/// The daemon's count of guests come back to their sessions, once it has `want` of
/// them (a worker's lines reach the log through the daemon), or after 10 s.
fn comebacks(d: &Daemon, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = d.log().matches("guest came back to its session").count();
        if n >= want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_guest_comes_back_to_its_session_when_its_connections_are_cut() {
    let d = Daemon::host_memory("reconnect");
    let proxy =
        vmcuda_tests::cut_proxy::CutProxy::start(&d.dir.join("p.sock"), &d.socket).expect("proxy");
    let server = format!("unix:{}", proxy.address);
    let steps = Steps::start_on(&server, &["60", "10", "16"]);
    // Cut between steps, and again while it runs them.
    for at in ["ready", "step 5 ok", "step 20 ok", "step 40 ok"] {
        steps.until(at);
        assert_eq!(proxy.cut(), 1, "one connection to cut at {at}");
    }
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("FAIL")), "{rest:?}");
    // Each cut was followed by a return to the one session: no second hello.
    assert!(proxy.connections() >= 5, "{}", proxy.connections());
    let log = d.log_with("guest came back to its session");
    assert_eq!(comebacks(&d, 4), 4, "{log}");
    assert_eq!(log.matches("guest connected").count(), 1, "{log}");
}

/// The same over TLS: the worker of each new connection makes the handshake and
/// relays to the session's worker, which holds the session across every cut.
#[test]
fn a_tls_guest_comes_back_to_its_session_when_its_connections_are_cut() {
    use vmcuda_wire::tls::testing::TestPki;
    const TOKEN: &str = "survival-tls-token-0123456789";
    let pki_dir = std::env::temp_dir().join(format!("vmcuda-survival-tls-{}", std::process::id()));
    let pki = TestPki::new(&pki_dir, &["127.0.0.1"]);
    let (d, addr) = Daemon::tls("reconnect-tls", &pki.cert, &pki.key, "tls-guest", TOKEN);
    let proxy = vmcuda_tests::cut_proxy::CutProxy::start_tcp(&addr).expect("proxy");
    let ca = pki.ca.display().to_string();
    let steps = Steps::start_with(
        &format!("tls:{}", proxy.address),
        &["60", "10", "16"],
        &[("VMCUDA_TOKEN", TOKEN), ("VMCUDA_TLS_CA", &ca)],
    );
    for at in ["ready", "step 5 ok", "step 20 ok", "step 40 ok"] {
        steps.until(at);
        if at == "step 5 ok" {
            // The worker relaying now (the last one started) holds the connection's
            // keys, and is jailed as an admitted worker is.
            let log = d.log();
            let pid = log
                .lines()
                .rev()
                .find(|l| l.contains("worker started"))
                .and_then(|l| l.rsplit_once("pid="))
                .map(|(_, p)| p.trim().to_string())
                .expect("a worker started");
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            assert!(status.lines().any(|l| l == "Seccomp:\t2"), "{status}");
            assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
        }
        assert_eq!(proxy.cut(), 1, "one connection to cut at {at}");
    }
    let (ok, rest) = steps.finish();
    assert!(ok, "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("FAIL")), "{rest:?}");
    let log = d.log_with("guest came back to its session");
    assert_eq!(comebacks(&d, 4), 4, "{log}");
    assert_eq!(log.matches("guest connected").count(), 1, "{log}");
    // Each return was relayed by its connection's worker, which made its handshake.
    assert_eq!(log.matches("relayed=true").count(), 4, "{log}");
    let _ = std::fs::remove_dir_all(&pki_dir);
}

/// A raw connection to `d` with a hello that asks for a resumable session.
fn resumable_guest(d: &Daemon) -> (std::os::unix::net::UnixStream, vmcuda_wire::op::Hello) {
    use vmcuda_wire::handshake::{caps, PROTOCOL_VERSION, RUNTIME_VERSION};
    let hello = vmcuda_wire::op::Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: caps::RESUMABLE,
        token: Vec::new(),
        client: "tickets".into(),
        pid: std::process::id(),
    };
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).expect("connect");
    let (status, reply) = raw_call(&mut s, vmcuda_wire::op::Op::Hello, 1, &hello);
    assert_eq!(status, vmcuda_wire::CudaStatus::Success);
    let reply: vmcuda_wire::op::HelloReply = postcard::from_bytes(&reply).unwrap();
    assert_ne!(
        reply.capabilities & caps::RESUMABLE,
        0,
        "the host holds sessions"
    );
    (s, hello)
}

fn raw_call<R: serde::Serialize>(
    s: &mut std::os::unix::net::UnixStream,
    op: vmcuda_wire::op::Op,
    id: u64,
    req: &R,
) -> (vmcuda_wire::CudaStatus, Vec<u8>) {
    use vmcuda_wire::frame::{self, FrameHeader};
    let meta = postcard::to_stdvec(req).unwrap();
    frame::write_frame(
        &mut *s,
        &FrameHeader::new(op.code(), 0, id, meta.len(), 0),
        &meta,
        &[],
    )
    .unwrap();
    let (h, meta) = frame::read_head(&mut *s).expect("a reply");
    frame::read_data(&mut *s, &h).unwrap();
    assert_eq!(h.request_id.get(), id);
    (vmcuda_wire::CudaStatus(h.status.get()), meta)
}

fn resume_with(
    d: &Daemon,
    hello: &vmcuda_wire::op::Hello,
    ticket: &vmcuda_wire::op::SessionTicket,
    secret: [u8; 32],
    last_reply: u64,
) -> (
    std::os::unix::net::UnixStream,
    vmcuda_wire::CudaStatus,
    Vec<u8>,
) {
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).expect("connect");
    let req = vmcuda_wire::op::SessionResume {
        hello: hello.clone(),
        session: ticket.session,
        secret,
        last_reply,
    };
    let (status, meta) = raw_call(&mut s, vmcuda_wire::op::Op::SessionResume, 0, &req);
    (s, status, meta)
}

#[test]
fn a_forged_or_replayed_ticket_is_refused_and_the_owed_reply_comes_again() {
    use vmcuda_wire::op::{
        Allocated, MemAlloc, Op, SessionResumed, SessionTicket, SessionTicketGet,
    };
    use vmcuda_wire::CudaStatus;
    let d = Daemon::host_memory("tickets");
    let (mut s, hello) = resumable_guest(&d);
    let (status, t) = raw_call(&mut s, Op::SessionTicketGet, 2, &SessionTicketGet {});
    assert_eq!(status, CudaStatus::Success);
    let first: SessionTicket = postcard::from_bytes(&t).unwrap();
    assert!(first.hold_ms > 0);
    let (status, a) = raw_call(&mut s, Op::MemAlloc, 3, &MemAlloc { size: 1 << 20 });
    assert_eq!(status, CudaStatus::Success);
    let allocated: Allocated = postcard::from_bytes(&a).unwrap();
    // A forged secret, while the guest is still connected, and after it dropped.
    let mut forged = first.secret;
    forged[0] ^= 1;
    let (_, status, _) = resume_with(&d, &hello, &first, forged, 3);
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    drop(s);
    let (_, status, _) = resume_with(&d, &hello, &first, forged, 3);
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    // Another session's number: nobody there.
    let other = SessionTicket {
        session: first.session ^ 1,
        ..first.clone()
    };
    let (_, status, _) = resume_with(&d, &hello, &other, first.secret, 3);
    assert_eq!(status, CudaStatus::ErrorDevicesUnavailable);
    // The real ticket, saying it never read reply 3: that reply comes again, the same.
    let (mut back, status, meta) = resume_with(&d, &hello, &first, first.secret, 2);
    assert_eq!(status, CudaStatus::Success);
    let resumed: SessionResumed = postcard::from_bytes(&meta).unwrap();
    assert_eq!(resumed.last_request, 3);
    assert_ne!(resumed.ticket.secret, first.secret);
    let (h, again) = vmcuda_wire::frame::read_head(&mut back).unwrap();
    assert_eq!((h.request_id.get(), h.op.get()), (3, Op::MemAlloc.code()));
    let again: Allocated = postcard::from_bytes(&again).unwrap();
    assert_eq!(
        again.ptr, allocated.ptr,
        "the kept reply, not a second allocation"
    );
    // A request on the new connection: the guest holds its new ticket.
    let (status, _) = raw_call(&mut back, Op::MemAlloc, 4, &MemAlloc { size: 1 << 20 });
    assert_eq!(status, CudaStatus::Success);
    drop(back);
    // The spent ticket, replayed: refused; the new one takes the guest back.
    let (_, status, _) = resume_with(&d, &hello, &first, first.secret, 4);
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    let (_, status, meta) = resume_with(&d, &hello, &resumed.ticket, resumed.ticket.secret, 4);
    assert_eq!(status, CudaStatus::Success);
    let resumed: SessionResumed = postcard::from_bytes(&meta).unwrap();
    assert_eq!(resumed.last_request, 4);
    assert_eq!(comebacks(&d, 2), 2, "{}", d.log());
}

#[test]
fn a_guest_that_does_not_come_back_in_time_is_cleaned_up() {
    use vmcuda_wire::op::{Op, SessionTicket, SessionTicketGet};
    use vmcuda_wire::CudaStatus;
    let d = Daemon::start_with_config(
        "reconnect-hold",
        Some("[reconnect]\nhold_ms = 300\n"),
        &["--executor", "host-memory"],
    );
    let (mut s, hello) = resumable_guest(&d);
    let (_, t) = raw_call(&mut s, Op::SessionTicketGet, 2, &SessionTicketGet {});
    let ticket: SessionTicket = postcard::from_bytes(&t).unwrap();
    assert_eq!(ticket.hold_ms, 300);
    drop(s);
    let log = d.log_with("worker finished connection=1");
    assert!(log.contains("holding the session for its guest"), "{log}");
    assert!(log.contains("worker finished connection=1"), "{log}");
    let (_, status, _) = resume_with(&d, &hello, &ticket, ticket.secret, 2);
    assert_eq!(status, CudaStatus::ErrorDevicesUnavailable);
}

#[test]
fn a_guest_that_leaves_is_not_held() {
    use vmcuda_wire::op::{Op, SessionClose, SessionTicketGet};
    let d = Daemon::host_memory("reconnect-leave");
    let (mut s, _) = resumable_guest(&d);
    raw_call(&mut s, Op::SessionTicketGet, 2, &SessionTicketGet {});
    let meta = postcard::to_stdvec(&SessionClose {}).unwrap();
    let h = vmcuda_wire::frame::FrameHeader::new(
        Op::SessionClose.code(),
        vmcuda_wire::frame::FLAG_NO_REPLY,
        3,
        meta.len(),
        0,
    );
    vmcuda_wire::frame::write_frame(&mut s, &h, &meta, &[]).unwrap();
    drop(s);
    let log = d.log_with("worker finished connection=1");
    assert!(log.contains("worker finished connection=1"), "{log}");
    assert!(!log.contains("holding the session"), "{log}");
}
