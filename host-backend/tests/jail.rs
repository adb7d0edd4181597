//! The worker jail: a confined process cannot make the calls the filter denies, cannot
//! read another VM's ledger or token, and a jailed daemon still serves its guests.
//!
//! Confining is irreversible, so each check runs in a child: this test binary run again
//! with `JAIL_ROLE` set, running only the `role` test, which reports on stdout. Tests
//! that switch users or make namespaces need root and say so when skipped.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use vmcuda_host::jail::{self, JailSpec, OnDenied};
use vmcuda_host::ledger::Ledger;
use vmcuda_host::module_cache::{Lookup, ModuleCache, Scope};
use vmcuda_host::policy::Policy;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

const ROLE: &str = "JAIL_ROLE";
const DIR: &str = "JAIL_DIR";
const TOKEN_A: &str = "token-of-vm-a-0123456789";
const TOKEN_B: &str = "token-of-vm-b-0123456789";

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn skip_unless_root(test: &str) -> bool {
    if !is_root() {
        println!("skipped {test}: needs root (to switch users and make namespaces)");
    }
    !is_root()
}

/// Run the `role` test in a fresh process as `role`, with `dir`.
fn child(role: &str, dir: &Path) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .output()
        .unwrap()
}

fn report(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn errno_of<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!(
            "{:?}",
            nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0))
        ),
    }
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmcuda-jail-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two VMs, each with a token file readable by the daemon's user only, and VM b's
/// ledger as its own (earlier) worker left it.
fn two_vms(dir: &Path, namespaces: bool) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    for (vm, token) in [("vm-a", TOKEN_A), ("vm-b", TOKEN_B)] {
        let path = tokens.join(format!("{vm}.token"));
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    let config = dir.join("host.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{state}\"\n[jail]\nenable = true\nnamespaces = {namespaces}\n\
             [[vm]]\nname = \"vm-a\"\ntcp = true\ntoken_file = \"{t}/vm-a.token\"\n\
             [[vm]]\nname = \"vm-b\"\ntcp = true\ntoken_file = \"{t}/vm-b.token\"\n",
            state = dir.join("state").display(),
            t = tokens.display()
        ),
    )
    .unwrap();
    let ledgers = dir.join("state/ledger");
    std::fs::create_dir_all(&ledgers).unwrap();
    std::fs::write(ledgers.join("vm-b.ledger"), "4242 777\n").unwrap();
    // VM b's module cache, with an image its processes loaded.
    let b = ModuleCache::open(&dir.join("state/modules"), &Scope::vm("vm-b"), 1 << 20).unwrap();
    b.put(&Sha256::digest(IMAGE_B).into(), IMAGE_B, None)
        .unwrap();
    config
}

/// A cubin with kernels, to be grown past the images that go with their hash at once.
const PARAMS: &[u8] = include_bytes!("../../wire/testdata/params.cubin");

/// An image only VM b ever loaded.
const IMAGE_B: &[u8] = b"an image of vm-b's, 0123456789";

/// The child side of every test.
#[test]
fn role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    match role.as_str() {
        "filter" | "filter-kill" => {
            let spec = JailSpec {
                seccomp: Some(if role == "filter" {
                    OnDenied::Eperm
                } else {
                    OnDenied::Kill
                }),
                ..JailSpec::default()
            };
            jail::confine(&spec).unwrap();
            println!("confined");
            // What a worker does keeps working: threads, files it holds, memfds.
            let t = std::thread::spawn(|| 7).join().unwrap();
            println!("thread={t}");
            let mut f = std::fs::File::create(dir.join("scratch")).unwrap();
            f.write_all(b"x").unwrap();
            println!(
                "memfd={}",
                errno_of(
                    nix::sys::memfd::memfd_create(c"m", nix::sys::memfd::MFdFlags::empty())
                        .map_err(std::io::Error::from)
                )
            );
            // What it must not.
            println!(
                "socket={}",
                errno_of(std::net::TcpStream::connect("127.0.0.1:9"))
            );
            println!(
                "unix-socket={}",
                errno_of(std::os::unix::net::UnixStream::connect(dir.join("nowhere")))
            );
            println!("spawn={}", errno_of(Command::new("/bin/true").status()));
            let exec = nix::unistd::execv(c"/bin/true", &[c"true"]);
            println!("execve={:?}", exec.err());
            // SAFETY: PTRACE_TRACEME takes no pointers; the filter answers it.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            println!("ptrace={:?}", (rc < 0).then(nix::errno::Errno::last));
            println!(
                "setuid={:?}",
                nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).err()
            );
            // Device requests pass, except pushing input into a terminal.
            let null = std::fs::File::open("/dev/null").unwrap();
            let byte = 0u8;
            // SAFETY: TIOCSTI reads one byte from a live local; the filter answers first.
            let rc = unsafe { libc::ioctl(null.as_raw_fd(), libc::TIOCSTI, &byte) };
            println!("tiocsti={:?}", (rc < 0).then(nix::errno::Errno::last));
            // SAFETY: no such request, and no pointer: the device answers ENOTTY.
            let rc = unsafe { libc::ioctl(null.as_raw_fd(), 0x7f7f) };
            println!("other-ioctl={:?}", (rc < 0).then(nix::errno::Errno::last));
        }
        "other-vm" => {
            let policy = Policy::load(Some(&dir.join("host.toml"))).unwrap();
            let state = dir.join("state");
            let ledger = Ledger::join(&state, "vm-a", 8).unwrap();
            let caches = policy.module_cache_dir(&state);
            let cache = ModuleCache::open(&caches, &Scope::vm("vm-a"), 1 << 20).unwrap();
            jail::confine_admitted(
                &policy,
                "vm-a",
                &state,
                Some(ledger.path()),
                Some(cache.dir()),
            )
            .unwrap();
            println!("uid={}", nix::unistd::getuid());
            // Its own module cache works as its new user; VM b's image is not in it.
            let image = b"an image of vm-a's";
            let hash: [u8; 32] = Sha256::digest(image).into();
            println!(
                "cache-put={:?}",
                cache.put(&hash, image, None).map_err(|e| e.to_string())
            );
            println!(
                "cache-hit={}",
                cache.get(&hash, |_| true).unwrap() == Lookup::Hit(image.to_vec())
            );
            let b_hash: [u8; 32] = Sha256::digest(IMAGE_B).into();
            println!(
                "cache-b-image={:?}",
                cache.get(&b_hash, |_| true).map_err(|e| e.to_string())
            );
            // Its own ledger still works as its new user.
            println!(
                "charge={:?}",
                ledger.charge(100, 1000).map_err(|e| e.to_string())
            );
            println!("total={:?}", ledger.total().map_err(|e| e.to_string()));
            let read = |p: PathBuf| {
                let mut text = String::new();
                match std::fs::File::open(&p).and_then(|mut f| f.read_to_string(&mut text)) {
                    Ok(_) => format!("read {text:?}"),
                    Err(e) => errno_of::<()>(Err(e)),
                }
            };
            println!("ledger-b={}", read(state.join("ledger/vm-b.ledger")));
            println!("cache-b={}", read(caches.join("vm-b/index")));
            println!("cache-b-dotdot={}", read(caches.join("vm-a/../vm-b/index")));
            println!("token-b={}", read(dir.join("tokens/vm-b.token")));
            println!("token-a={}", read(dir.join("tokens/vm-a.token")));
            println!("config={}", read(dir.join("host.toml")));
            // Nor can it make files beside the ledgers.
            println!(
                "new-ledger={}",
                errno_of(std::fs::File::create(state.join("ledger/vm-c.ledger")))
            );
        }
        "peer-files" => {
            let policy = Policy::load(Some(&dir.join("host.toml"))).unwrap();
            let state = dir.join("state");
            let ledger = Ledger::join(&state, "vm-a", 8).unwrap();
            // This thread's: a namespace made by one thread of many holds that thread only.
            let ns = "/proc/thread-self/ns/mnt";
            let before = std::fs::read_link(ns).unwrap();
            jail::confine_admitted(&policy, "vm-a", &state, Some(ledger.path()), None).unwrap();
            let after = std::fs::read_link(ns).unwrap();
            println!("mntns={}", if before == after { "same" } else { "new" });
            println!("uid={}", nix::unistd::getuid());
            let read = |p: &Path| {
                let mut text = String::new();
                match std::fs::File::open(p).and_then(|mut f| f.read_to_string(&mut text)) {
                    Ok(_) => format!("read {text:?}"),
                    Err(e) => errno_of::<()>(Err(e)),
                }
            };
            // The daemon's mount namespace, through its /proc entry: its own files.
            let daemon_root = PathBuf::from(format!("/proc/{}/root", nix::unistd::getppid()));
            for name in PEER_FILES {
                let path = dir.join("peers").join(name);
                println!("{name}={}", read(&path));
                let through = daemon_root.join(path.strip_prefix("/").unwrap());
                println!("{name}-via-daemon={}", read(&through));
            }
        }
        "grants" => {
            let state = dir.join("state");
            let policy =
                Policy::load_with_grants(Some(&dir.join("host.toml")), Some(&state)).unwrap();
            // Admitted through the grant, as a worker would be.
            let grant = policy.admit(&vmcuda_host::policy::Caller::VsockCid(9), b"");
            println!("admitted={}", grant.map(|g| g.name).unwrap_or_default());
            let ledger = Ledger::join(&state, "vm-a", 8).unwrap();
            let ns = "/proc/thread-self/ns/mnt";
            let before = std::fs::read_link(ns).unwrap();
            jail::confine_admitted(&policy, "vm-a", &state, Some(ledger.path()), None).unwrap();
            let after = std::fs::read_link(ns).unwrap();
            println!("mntns={}", if before == after { "same" } else { "new" });
            let read = |p: &Path| {
                let mut text = String::new();
                match std::fs::File::open(p).and_then(|mut f| f.read_to_string(&mut text)) {
                    Ok(_) => format!("read {text:?}"),
                    Err(e) => errno_of::<()>(Err(e)),
                }
            };
            let grants = vmcuda_host::admin::grants_path(&state);
            println!("grants={}", read(&grants));
            println!(
                "admin-dir={:?}",
                std::fs::read_dir(grants.parent().unwrap()).map(|d| d.count())
            );
            let daemon_root = PathBuf::from(format!("/proc/{}/root", nix::unistd::getppid()));
            let through = daemon_root.join(grants.strip_prefix("/").unwrap());
            println!("grants-via-daemon={}", read(&through));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn denied_calls_fail_with_eperm_and_the_rest_work() {
    let dir = temp("filter");
    let out = child("filter", &dir);
    let r = report(&out);
    assert!(out.status.success());
    assert!(r.contains("confined"));
    assert!(r.contains("thread=7"), "threads are allowed");
    assert!(r.contains("memfd=ok"), "memfds are the shared-memory path");
    assert!(r.contains("socket=EPERM"), "no new network sockets");
    assert!(r.contains("unix-socket=EPERM"), "no new Unix sockets");
    assert!(
        r.contains("spawn=EPERM") || r.contains("spawn=ENOSYS"),
        "no new processes"
    );
    assert!(r.contains("execve=Some(EPERM)"));
    assert!(r.contains("ptrace=Some(EPERM)"));
    assert!(r.contains("setuid=Some(EPERM)"));
    assert!(
        r.contains("tiocsti=Some(EPERM)"),
        "no input pushed into a terminal"
    );
    assert!(
        r.contains("other-ioctl=Some(ENOTTY)"),
        "other requests reach the device"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn on_denied_kill_ends_the_process_at_the_first_denied_call() {
    use std::os::unix::process::ExitStatusExt;
    let dir = temp("kill");
    let out = child("filter-kill", &dir);
    let r = report(&out);
    assert!(r.contains("thread=7"), "allowed calls run");
    assert!(
        !r.contains("socket="),
        "the first denied call never returned"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSYS));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cannot_reach_another_vm(namespaces: bool) {
    let dir = temp(if namespaces { "ns" } else { "uid" });
    two_vms(&dir, namespaces);
    let out = child("other-vm", &dir);
    let r = report(&out);
    assert!(out.status.success());
    let id = jail::JailConfig::default()
        .id_for("vm-a", ["vm-a", "vm-b", "local"])
        .unwrap();
    assert!(r.contains(&format!("uid={id}")), "runs as vm-a's user");
    assert!(r.contains("charge=Ok(true)"), "its own ledger works");
    assert!(r.contains("total=Ok(100)"), "and holds only its own lines");
    assert!(
        r.contains("cache-put=Ok(true)"),
        "its own module cache works"
    );
    assert!(r.contains("cache-hit=true"));
    assert!(
        r.contains("cache-b-image=Ok(Miss)"),
        "another VM's image is not its"
    );
    for secret in ["777", TOKEN_A, TOKEN_B] {
        assert!(!r.contains(secret), "{secret} leaked");
    }
    let line = |key: &str| {
        r.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .to_string()
    };
    if namespaces {
        // Hidden: the ledger is not there, the files read as empty.
        assert_eq!(line("ledger-b="), "ledger-b=ENOENT");
        assert_eq!(line("cache-b="), "cache-b=ENOENT");
        assert_eq!(line("cache-b-dotdot="), "cache-b-dotdot=ENOENT");
        assert_eq!(line("token-b="), "token-b=read \"\"");
        assert_eq!(line("config="), "config=read \"\"");
        assert_eq!(line("new-ledger="), "new-ledger=EROFS");
    } else {
        // Unreadable by its owners and modes.
        assert_eq!(line("ledger-b="), "ledger-b=EACCES");
        assert_eq!(line("cache-b="), "cache-b=EACCES");
        assert_eq!(line("cache-b-dotdot="), "cache-b-dotdot=EACCES");
        assert_eq!(line("token-b="), "token-b=EACCES");
        assert_eq!(line("new-ledger="), "new-ledger=EACCES");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_jailed_worker_cannot_read_another_vms_ledger_or_token_by_ownership() {
    if skip_unless_root("a_jailed_worker_cannot_read_another_vms_ledger_or_token_by_ownership") {
        return;
    }
    cannot_reach_another_vm(false);
}

#[test]
fn a_jailed_worker_cannot_see_another_vms_ledger_or_token_in_its_namespace() {
    if skip_unless_root("a_jailed_worker_cannot_see_another_vms_ledger_or_token_in_its_namespace") {
        return;
    }
    cannot_reach_another_vm(true);
}

/// The peer link's files in `[peers]`, each holding a line no test output may show.
const PEER_FILES: [&str; 3] = ["peer.key", "peer.crt", "peer-ca.crt"];

fn peer_secret(name: &str) -> String {
    format!("secret bytes of {name} 0123456789")
}

/// Issue 34, finding 7: a worker jailed as the daemon jails one (its VM's user, the
/// mount namespace and its masks, the filter) cannot read the peer link's key,
/// certificate or CA at the paths `[peers]` names, nor through the daemon's
/// `/proc/PID/root`. The files are readable by anyone here, so that only the jail
/// keeps them from the worker.
#[test]
fn a_jailed_worker_cannot_read_the_peer_links_tls_files() {
    use std::os::unix::fs::PermissionsExt;
    const TEST: &str = "a_jailed_worker_cannot_read_the_peer_links_tls_files";
    if skip_unless_root(TEST) {
        return;
    }
    let dir = temp("peer-files");
    let peers = dir.join("peers");
    std::fs::create_dir_all(&peers).unwrap();
    for name in PEER_FILES {
        let path = peers.join(name);
        std::fs::write(&path, peer_secret(name)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::write(
        dir.join("host.toml"),
        format!(
            "state_dir = \"{state}\"\n[jail]\nenable = true\n\
             [peers]\nlisten = \"127.0.0.1:7732\"\ntls_key = \"{p}/peer.key\"\n\
             tls_cert = \"{p}/peer.crt\"\nca = \"{p}/peer-ca.crt\"\n\
             [[vm]]\nname = \"vm-a\"\ncid = 3\n",
            state = dir.join("state").display(),
            p = peers.display()
        ),
    )
    .unwrap();
    let out = child("peer-files", &dir);
    let r = report(&out);
    assert!(out.status.success());
    if r.contains("mntns=same") {
        println!(
            "skipped {TEST}: the kernel refused the worker a mount namespace (a container \
             without CAP_SYS_ADMIN?), so only the files' modes can keep them"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    assert!(r.contains("mntns=new"), "{r}");
    let id = jail::JailConfig::default()
        .id_for("vm-a", ["vm-a", "local"])
        .unwrap();
    assert!(r.contains(&format!("uid={id}")), "runs as vm-a's user");
    let line = |key: &str| {
        r.lines()
            .find(|l| l.starts_with(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}"))
            .to_string()
    };
    for name in PEER_FILES {
        assert!(!r.contains(&peer_secret(name)), "{name} leaked");
        // Masked: /dev/null bound over it.
        assert_eq!(line(name), format!("{name}=read \"\""));
        assert_eq!(
            line(&format!("{name}-via-daemon")),
            format!("{name}-via-daemon=EACCES")
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The run-time grants file holds tokens: a jailed worker finds its directory empty,
/// even with the file's and directory's modes opened to all, and cannot reach it
/// through the daemon's root either.
#[test]
fn a_jailed_worker_cannot_read_the_run_time_grants() {
    use std::os::unix::fs::PermissionsExt;
    const TEST: &str = "a_jailed_worker_cannot_read_the_run_time_grants";
    if skip_unless_root(TEST) {
        return;
    }
    let dir = temp("grants");
    let state = dir.join("state");
    std::fs::write(
        dir.join("host.toml"),
        format!(
            "state_dir = \"{}\"\n[jail]\nenable = true\n",
            state.display()
        ),
    )
    .unwrap();
    let grants = vmcuda_host::admin::grants_path(&state);
    let json = format!(
        r#"{{"version": 1, "grants": [
            {{"name": "vm-a", "cid": 9}},
            {{"name": "vm-b", "token": "{TOKEN_B}", "tcp": true}}]}}"#
    );
    std::fs::create_dir_all(grants.parent().unwrap()).unwrap();
    std::fs::write(&grants, json).unwrap();
    std::fs::set_permissions(&grants, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(
        grants.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let out = child("grants", &dir);
    let r = report(&out);
    assert!(out.status.success(), "{r}");
    assert!(r.contains("admitted=vm-a"), "{r}");
    if r.contains("mntns=same") {
        println!("skipped {TEST}: the kernel refused the worker a mount namespace");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    assert!(!r.contains(TOKEN_B), "the grants leaked: {r}");
    // Covered by an empty tmpfs only root may enter, whatever the modes beneath.
    assert!(r.contains("grants=EACCES"), "{r}");
    assert!(r.contains("admin-dir=Err"), "{r}");
    assert!(r.contains("grants-via-daemon=EACCES"), "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The figures file of the one live worker: its pid.
fn worker_pid(state: &Path) -> u32 {
    let files: Vec<u32> = std::fs::read_dir(state.join("workers"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".stats")?.parse().ok())
        .collect();
    assert_eq!(files.len(), 1, "one live worker: {files:?}");
    files[0]
}

#[test]
fn a_jailed_daemon_serves_a_whole_session() {
    // Root, or the capabilities the packaged service gives its user instead.
    if !jail::can_switch_user() {
        println!("skipped a_jailed_daemon_serves_a_whole_session: needs root or CAP_SETUID and CAP_SETGID");
        return;
    }
    let d = Daemon::with_config(
        "jailed",
        Some("[local]\nallow = true\n[jail]\nenable = true\n"),
        &[],
    );
    // A state directory only the daemon's user may enter (as `mktemp -d` makes one):
    // the jailed worker keeps its ledger through the descriptor it opened when it
    // joined, never by path.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    for round in 0..2 {
        let mut s = d.connect();
        hello(&mut s);
        // The worker serving it is jailed.
        let pid = worker_pid(&d.dir.join("state"));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let id = jail::JailConfig::default()
            .id_for("local", ["local"])
            .unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            field("Uid:"),
            vec![id.to_string().as_str(); 4],
            "round {round}"
        );
        assert_eq!(field("Seccomp:"), vec!["2"]);
        assert_eq!(field("NoNewPrivs:"), vec!["1"]);
        assert_eq!(field("CapEff:"), vec!["0000000000000000"]);
        // In a pid namespace of its own, where it is process 1; its figures file (which
        // gave `pid`) and its ledger line name it by its host pid all the same.
        if jail::pid_namespaces_available() {
            let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).unwrap();
            assert_ne!(ns(&pid.to_string()), ns("self"), "round {round}");
            assert_eq!(field("NSpid:"), vec![pid.to_string().as_str(), "1"]);
            let ledger = std::fs::read_to_string(d.dir.join("state/ledger/local.ledger")).unwrap();
            assert!(
                ledger.lines().any(|l| l.starts_with(&format!("{pid} "))),
                "{ledger}"
            );
        }
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        let ledgers = d.dir.join("state/ledger");
        assert!(
            mounts.contains(&format!("{} ", ledgers.display())),
            "its ledger directory is its own: {mounts}"
        );
        // A session: memory, copies both ways, a free.
        let (status, meta, _) = call(&mut s, Op::MemAlloc, &MemAlloc { size: 4096 }, &[]);
        assert_eq!(status, CudaStatus::Success);
        let ptr = postcard::from_bytes::<Allocated>(&meta).unwrap().ptr;
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let htod = MemcpyHtoD {
            dst: ptr,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        assert_eq!(
            call(&mut s, Op::MemcpyHtoD, &htod, &data).0,
            CudaStatus::Success
        );
        let dtoh = MemcpyDtoH {
            src: ptr,
            size: 4096,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        let (status, _, back) = call(&mut s, Op::MemcpyDtoH, &dtoh, &[]);
        assert_eq!(status, CudaStatus::Success);
        assert_eq!(back, data);
        assert_eq!(
            call(&mut s, Op::MemFree, &MemFree { ptr }, &[]).0,
            CudaStatus::Success
        );
        // A module image by its hash: the first worker keeps it in the VM's cache, in
        // a state directory it cannot walk to, and the second, as jailed, finds it.
        let image = vmcuda_wire::cubin::grown(PARAMS, 256 << 10);
        let by_hash = ModuleLoadCached {
            sha256: Sha256::digest(&image).into(),
        };
        let mut load = |data: &[u8]| {
            let (status, meta, _) = call(&mut s, Op::ModuleLoadCached, &by_hash, data);
            assert_eq!(status, CudaStatus::Success, "round {round}");
            postcard::from_bytes::<ModuleLoadedCached>(&meta)
                .unwrap()
                .module
        };
        if round == 0 {
            assert_eq!(load(&[]), None);
            assert!(load(&image).is_some());
        } else {
            assert!(load(&[]).is_some(), "a hit in the jailed worker");
        }
        drop(s);
        // The worker ends; the next connection gets a fresh one.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the worker did not end"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert!(!d.log().contains("refused"), "{}", d.log());
}
