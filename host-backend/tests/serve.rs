//! How `vmcuda-host serve` starts and stops: never a silent test double, one daemon per
//! socket, its socket files gone when it stops, and its state in its own directory.

mod common;

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{hello, reply, send, Daemon};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

/// A scratch directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `vmcuda-host serve ARGS` with no GPU visible to the CUDA driver, even on a machine
/// that has one, and its state in `dir`.
fn serve(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"));
    cmd.arg("serve")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdout(Stdio::null());
    cmd
}

/// Wait for `child` to end, at most `secs`; killed and `None` past that.
fn finish_within(mut child: Child, secs: u64) -> Option<Output> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn without_a_gpu_the_default_executor_refuses_to_start_and_says_how_to_fix_it() {
    let dir = scratch("no-gpu");
    let socket = dir.join("s.sock");
    for explicit in [&[][..], &["--executor", "cuda"][..]] {
        let child = serve(&dir, explicit)
            .arg("--unix")
            .arg(&socket)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish_within(child, 60).expect("the daemon started without a GPU");
        assert!(!out.status.success(), "{explicit:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("vmcuda-host serve: no usable GPU"),
            "{stderr}"
        );
        assert!(stderr.contains("NVIDIA driver (R580 or newer"), "{stderr}");
        assert!(
            stderr.contains("--executor host-memory (a test double"),
            "{stderr}"
        );
        assert!(
            !socket.exists(),
            "no socket for a daemon that did not start"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn auto_falls_back_to_the_test_double_only_with_a_warning_on_stderr() {
    let dir = scratch("auto");
    let socket = dir.join("s.sock");
    let log = dir.join("host.log");
    let child = serve(&dir, &["--executor", "auto", "--unix"])
        .arg(&socket)
        // Logging off: the warning is not a log line.
        .env("VMCUDA_LOG", "off")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    wait_for("the daemon never listened", || socket.exists());
    let mut s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(hello(&mut s).executor, ExecutorKind::HostMemory);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("WARNING: --executor auto serves the HOST-MEMORY TEST DOUBLE"),
        "{stderr}"
    );
    assert!(stderr.contains("results are not computed"), "{stderr}");
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_second_daemon_does_not_take_a_live_daemons_socket() {
    let first = Daemon::start("first");
    let child = serve(&first.dir, &["--executor", "host-memory", "--unix"])
        .arg(&first.socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish_within(child, 30).expect("the second daemon kept running");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "another daemon listens on {}",
            first.socket.display()
        )),
        "{stderr}"
    );
    // The first still serves on its socket.
    let mut s = first.connect();
    hello(&mut s);
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let dir = scratch("stale");
    let socket = dir.join("s.sock");
    // Left by a daemon that died: the file, nobody accepting.
    drop(UnixListener::bind(&socket).unwrap());
    let child = serve(&dir, &["--executor", "host-memory", "--unix"])
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    wait_for("the daemon never took the stale socket", || {
        UnixStream::connect(&socket).is_ok()
    });
    let mut s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    hello(&mut s);
}

#[test]
fn a_stopped_daemon_removes_its_own_sockets_and_only_those() {
    let dir = scratch("stop");
    for signal in ["TERM", "INT"] {
        let a = dir.join(format!("a-{signal}.sock"));
        let b = dir.join(format!("b-{signal}.sock"));
        let child = serve(&dir, &["--executor", "host-memory", "--unix"])
            .arg(&a)
            .arg("--unix")
            .arg(&b)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        wait_for("the daemon never listened", || a.exists() && b.exists());
        assert!(Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap()
            .success());
        let out = finish_within(child, 20).expect("the daemon did not stop");
        use std::os::unix::process::ExitStatusExt;
        let number = if signal == "TERM" {
            libc::SIGTERM
        } else {
            libc::SIGINT
        };
        assert_eq!(
            out.status.signal(),
            Some(number),
            "ended as the signal does"
        );
        assert!(!a.exists() && !b.exists(), "SIG{signal} left a socket file");
    }

    // A file another daemon put under the name since is not this one's to remove.
    let c = dir.join("c.sock");
    let child = serve(&dir, &["--executor", "host-memory", "--unix"])
        .arg(&c)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    wait_for("the daemon never listened", || c.exists());
    std::fs::rename(&c, dir.join("moved.sock")).unwrap();
    let _other = UnixListener::bind(&c).unwrap();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    finish_within(child, 20).expect("the daemon did not stop");
    assert!(c.exists(), "another daemon's socket was removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every file under `dir`, relative to it.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[test]
fn a_daemon_with_a_state_dir_of_its_own_writes_nothing_in_the_systems() {
    const SYSTEM: &str = "/run/vmcuda";
    let before = Path::new(SYSTEM)
        .exists()
        .then(|| listing(Path::new(SYSTEM)));
    let d = Daemon::with_config("state-dir", None, &["--metrics", "127.0.0.1:0"]);
    let mut s = d.connect();
    hello(&mut s);
    send(&mut s, Op::MemAlloc, &MemAlloc { size: 4096 }, &[]);
    assert_eq!(reply(&mut s).0, CudaStatus::Success);
    let workers = children(d.pid());
    assert!(!workers.is_empty(), "no worker serves the connection");
    // The worker's figures and its VM's ledger are in the daemon's state directory...
    let state = d.dir.join("state");
    for pid in &workers {
        assert!(
            state.join(format!("workers/{pid}.stats")).exists(),
            "{:?}",
            listing(&state)
        );
    }
    let ledger = std::fs::read_to_string(state.join("ledger/local.ledger")).unwrap();
    assert!(
        workers
            .iter()
            .any(|pid| ledger.lines().any(|l| l.starts_with(&format!("{pid} ")))),
        "{ledger}"
    );
    drop(s);
    // ...and nothing of theirs in the system's.
    for pid in &workers {
        assert!(!Path::new(SYSTEM)
            .join(format!("workers/{pid}.stats"))
            .exists());
    }
    let system_ledger =
        std::fs::read_to_string(Path::new(SYSTEM).join("ledger/local.ledger")).unwrap_or_default();
    assert!(
        !workers.iter().any(|pid| system_ledger
            .lines()
            .any(|l| l.starts_with(&format!("{pid} ")))),
        "{system_ledger}"
    );
    if before.is_none() {
        assert!(
            !Path::new(SYSTEM).exists(),
            "{SYSTEM} was made: {:?}",
            listing(Path::new(SYSTEM))
        );
    }
}
