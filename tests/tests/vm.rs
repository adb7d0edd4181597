//! The test programs inside a real VM: QEMU under TCG boots the test guest
//! (`images/build-guest.sh`) and runs them there, and every program's stdout, stderr and
//! exit code must equal a run of the same program on the host through the same executor.
//! Three ways in: the project's vhost-user vsock device, the TCP fallback over the
//! guest's virtio-net, and the AF_VSOCK listener (vmcuda-host inside the guest, reached
//! over vsock_loopback).
//!
//! Host references run over TCP: like a guest over vsock, a TCP client cannot pass
//! memory descriptors, so pinned memory behaves the same on both sides.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use vmcuda_tests::{apps_dir, host_bin, root, run_program_with, text, Daemon};

fn vm_dir() -> PathBuf {
    std::env::var_os("VMCUDA_VM_DIR").map_or_else(|| root().join("build/vm"), PathBuf::from)
}

fn vhost_bin() -> PathBuf {
    std::env::var_os("VMCUDA_VHOST_BIN").map_or_else(
        || root().join("target/debug/vmcuda-vhost-vsock"),
        PathBuf::from,
    )
}

/// (stdout, stderr, exit code) per program.
type Runs = BTreeMap<String, (String, String, i32)>;

fn guest_runs(mode: &str, apps: &[&str]) -> (Runs, PathBuf) {
    let out = std::env::temp_dir().join(format!("vmcuda-vm-{}-{mode}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("bash")
        .arg(root().join("tests/vm/run-guest.sh"))
        .args([
            "--mode",
            mode,
            "--executor",
            "host-memory",
            "--timeout",
            "900",
        ])
        .arg("--kernel")
        .arg(vm_dir().join("vmlinuz"))
        .arg("--initrd")
        .arg(vm_dir().join("initramfs.cpio.gz"))
        .arg("--host-bin")
        .arg(host_bin())
        .arg("--vhost-bin")
        .arg(vhost_bin())
        .arg("--apps")
        .arg(apps.join(","))
        .arg("--out")
        .arg(&out)
        .status()
        .expect("run tests/vm/run-guest.sh");
    assert!(
        status.success(),
        "the {mode} guest did not finish; see {}",
        out.display()
    );
    let mut runs = Runs::new();
    for app in apps {
        let read = |ext: &str| {
            std::fs::read_to_string(out.join(format!("{app}.{ext}"))).unwrap_or_default()
        };
        let rc = read("rc").trim().parse().unwrap_or(-1);
        runs.insert(app.to_string(), (read("stdout"), read("stderr"), rc));
    }
    (runs, out)
}

const REFERENCE_TOKEN: &str = "reference-run-token-0123";

fn host_runs(apps: &[&str]) -> Runs {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _daemon = Daemon::start_with_config(
        "vmref",
        Some(&format!(
            "[[vm]]\nname = \"reference\"\ntcp = true\ntoken = \"{REFERENCE_TOKEN}\"\n"
        )),
        &["--executor", "host-memory", "--tcp", &addr],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "reference daemon never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    apps.iter()
        .map(|app| {
            let o = run_program_with(
                &apps_dir().join(app),
                &format!("tcp:{addr}"),
                &[("VMCUDA_TOKEN", REFERENCE_TOKEN)],
            );
            (
                app.to_string(),
                (
                    text(&o.stdout),
                    text(&o.stderr),
                    o.status.code().unwrap_or(-1),
                ),
            )
        })
        .collect()
}

fn all_apps() -> Vec<String> {
    let mut apps: Vec<String> = std::fs::read_dir(apps_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    apps.sort();
    apps
}

fn assert_same(mode: &str, guest: &Runs, host: &Runs) {
    let mut diffs = Vec::new();
    for (app, h) in host {
        let g = &guest[app];
        if g != h {
            diffs.push(format!(
                "{app}: guest rc {} vs host rc {}\n--- guest stdout\n{}\n--- host stdout\n{}\n--- guest stderr\n{}\n--- host stderr\n{}",
                g.2, h.2, g.0, h.0, g.1, h.1
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{mode}: programs in the guest differ from the host:\n{}",
        diffs.join("\n====\n")
    );
}

#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn programs_in_a_guest_over_the_vhost_user_vsock_device_match_the_host() {
    let apps = all_apps();
    let apps: Vec<&str> = apps.iter().map(String::as_str).collect();
    let (guest, out) = guest_runs("vhost-user", &apps);
    assert_same("vhost-user", &guest, &host_runs(&apps));
    // One backend worker per program, started by the device for this VM.
    let log = std::fs::read_to_string(out.join("vhost.log")).unwrap_or_default();
    assert!(
        log.matches("guest connected").count() >= apps.len(),
        "{log}"
    );
}

#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn programs_in_a_guest_over_the_tcp_fallback_match_the_host() {
    let apps = all_apps();
    let apps: Vec<&str> = apps.iter().map(String::as_str).collect();
    let (guest, _) = guest_runs("net", &apps);
    assert_same("net", &guest, &host_runs(&apps));
}

#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn the_af_vsock_listener_serves_guests_and_knows_their_cid() {
    let apps = ["vector_add", "struct_params", "streams", "symbols"];
    let (guest, out) = guest_runs("vsock-loopback", &apps);
    assert_same("vsock-loopback", &guest, &host_runs(&apps));
    let log = std::fs::read_to_string(out.join("host.log")).unwrap_or_default();
    assert!(log.contains("listening on vsock port=7731"), "{log}");
    assert_eq!(
        log.matches("peer=vsock cid 1 ").count(),
        apps.len(),
        "{log}"
    );
}
