//! One program, several hosts: `VMCUDA_SERVER` names two daemons (host-memory
//! executors here, one device each) and the program sees two devices. Each daemon
//! serves its own device's calls; copies, streams, events and frees that name the other
//! device's memory reach that device's host; losing one host fails only its device.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use vmcuda_tests::{
    apps_dir, free_tcp_addr, guest_library_path, run_program, run_program_with, text, Daemon,
};
use vmcuda_wire::tls::testing::TestPki;

const KERNEL: &str = "_Z5scalePKfPffi";

fn two_hosts() -> (Daemon, Daemon, String) {
    let a = Daemon::host_memory("host-a");
    let b = Daemon::host_memory("host-b");
    let server = format!("{},{}", a.server(), b.server());
    (a, b, server)
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn two_hosts_serve_one_program_as_two_devices() {
    let (a, b, server) = two_hosts();
    let out = run_program_with(
        &apps_dir().join("device_pair"),
        &server,
        &[("DEVICE_PAIR_NOT_PEERS", "1")],
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\n--- host a\n{}\n--- host b\n{}",
        text(&out.stderr),
        a.log(),
        b.log()
    );
    for line in [
        "memset of the other device's memory: refused",
        "cross copies: ok",
        "streams and events across devices: ok",
        "threads: ok",
        "device_pair: PASS",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // Each host ran the kernel of its own device, and only that one.
    let on = |d: &Daemon| {
        d.launches()
            .iter()
            .filter(|r| r["kernel"] == KERNEL)
            .count()
    };
    assert_eq!((on(&a), on(&b)), (1, 1), "{}\n{}", a.log(), b.log());
    assert!(b.log().contains("guest uses several hosts"), "{}", b.log());
    assert!(!a.log().contains("guest uses several hosts"), "{}", a.log());
    // These hosts have no [peers]: the copies between them went through the guest,
    // and the program was told so once.
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches(NO_PEER_LINK).count(), 1, "{stderr}");
    assert!(!a.log().contains("peer transfer"), "{}", a.log());
}

/// What the guest says once when copies between hosts go through it.
const NO_PEER_LINK: &str = "copies between devices of different hosts go through the guest";

/// A host's configuration for the peer link: its certificate, and the other host's
/// endpoint as the only one it may reach.
fn peers_config(listen: &str, cert: &(PathBuf, PathBuf), ca: &Path, allow: &str) -> String {
    format!(
        "[peers]\nlisten = \"{listen}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\nca = \"{}\"\nallow = [\"{allow}\"]\n",
        cert.0.display(),
        cert.1.display(),
        ca.display()
    )
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn copies_between_hosts_go_host_to_host_over_the_peer_link() {
    let dir = std::env::temp_dir().join(format!("vmcuda-peer-hosts-{}", std::process::id()));
    let (pki, certs) = TestPki::with_leaves(
        &dir,
        &["ca-unused.test"],
        &[("host-a", &["127.0.0.1"]), ("host-b", &["127.0.0.1"])],
    );
    let (at_a, at_b) = (free_tcp_addr(), free_tcp_addr());
    let a = Daemon::start_with_config(
        "peer-a",
        Some(&peers_config(&at_a, &certs[0], &pki.ca, &at_b)),
        &["--executor", "host-memory"],
    );
    let b = Daemon::start_with_config(
        "peer-b",
        Some(&peers_config(&at_b, &certs[1], &pki.ca, &at_a)),
        &["--executor", "host-memory"],
    );
    let server = format!("{},{}", a.server(), b.server());
    let out = run_program(&apps_dir().join("device_pair"), &server);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let logs = format!("--- host a\n{}\n--- host b\n{}", a.log(), b.log());
    assert!(out.status.success(), "{stdout}\n{stderr}\n{logs}");
    for line in [
        "cross copies: ok",
        "streams and events across devices: ok",
        "device_pair: PASS",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // Copies went both ways, daemon to daemon; none through the guest.
    for d in [&a, &b] {
        let log = d.log();
        assert!(log.contains("peer transfer sent"), "{logs}");
        assert!(log.contains("peer transfer received"), "{logs}");
        assert!(!log.contains("peer transfer refused"), "{logs}");
    }
    assert!(!stderr.contains(NO_PEER_LINK), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn losing_one_host_fails_only_its_device() {
    let (a, mut b, server) = two_hosts();
    let mut child = Command::new(apps_dir().join("device_pair"))
        .arg("--wait")
        .env("LD_LIBRARY_PATH", guest_library_path())
        .env("VMCUDA_SERVER", &server)
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run device_pair");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line == "ready" {
            break;
        }
    }
    assert!(seen.ends_with("ready\n"), "{seen}\n{}", a.log());
    // The second device's host goes away, workers and all, while the program holds
    // memory on it.
    let doomed = descendants(b.pid());
    let _ = Command::new("kill")
        .arg("-9")
        .arg(b.pid().to_string())
        .status();
    for pid in &doomed {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    while b.alive() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let rest = rest.join("\n");
    assert!(status.success(), "{seen}{rest}");
    assert!(
        rest.contains("after: side 0 set cudaSuccess copy cudaSuccess sync cudaSuccess data ok"),
        "the first host's device goes on:\n{rest}"
    );
    assert!(
        rest.contains("after: side 1 set cudaSuccess copy cudaErrorDevicesUnavailable sync cudaErrorDevicesUnavailable data -"),
        "the lost host's device fails with a CUDA error:\n{rest}"
    );
}

/// Every process below `pid`, from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // The fields after the command's closing parenthesis: state, then the parent.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().copied().filter(|c| parent_of(*c) == Some(p)));
        i += 1;
    }
    found.split_off(1)
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn an_unreachable_host_among_several_is_named() {
    let a = Daemon::host_memory("host-a");
    let server = format!("{},unix:/nonexistent/vmcuda.sock", a.server());
    let out = run_program(&apps_dir().join("device_pair"), &server);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no vmcuda host answers at unix:/nonexistent/vmcuda.sock"),
        "{stderr}"
    );
}
