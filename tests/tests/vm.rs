//! The test programs inside a real VM: QEMU under TCG boots the test guest
//! (`images/build-guest.sh`) and runs them there, and every program's stdout, stderr and
//! exit code must equal a run of the same program on the host through the same executor.
//! Three ways in: the project's vhost-user vsock device, the TCP fallback over the
//! guest's virtio-net, and the AF_VSOCK listener (vmcuda-host inside the guest, reached
//! over vsock_loopback). Last, the demo guest image (`images/build-demo-image.sh`, a
//! qcow2 with the guest package installed) boots from its own disk and runs a program
//! with `vmcuda-run` over the host package's vhost-user device.
//!
//! Host references run over TCP where the guest's pinned memory stays private to it (a
//! TCP client cannot pass memory descriptors either), and over a Unix socket where it
//! is guest RAM the worker maps (through the vhost-user device, as root or through the
//! guest's RAM broker), so pinned memory behaves the same on both sides.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use vmcuda_tests::{
    apps_dir, free_tcp_addr, host_bin, package, root, run_program_with, text, Daemon,
};

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

/// What QEMU boots.
enum Boot {
    /// `vmlinuz` and `initramfs.cpio.gz` in this directory (`images/build-guest.sh`).
    KernelAndInitramfs(PathBuf),
    /// A disk image with its own bootloader (`images/build-demo-image.sh`).
    Disk(PathBuf),
}

/// The guest image, the backend binaries and any more kernel command line.
struct Setup {
    boot: Boot,
    host_bin: PathBuf,
    vhost_bin: PathBuf,
    append: String,
}

impl Setup {
    /// The test guest (build/vm) and the debug binaries.
    fn test_guest() -> Setup {
        Setup {
            boot: Boot::KernelAndInitramfs(vm_dir()),
            host_bin: host_bin(),
            vhost_bin: vhost_bin(),
            append: String::new(),
        }
    }
}

fn guest_runs(mode: &str, apps: &[&str], host: &Runs) -> (Runs, PathBuf) {
    guest_runs_with(mode, apps, &Setup::test_guest(), mode, host)
}

/// Boot the guest in `mode`; results go to a directory named for `tag`. The exit codes
/// of `host` (the same programs on the host) are what the harness's table marks as
/// expected.
fn guest_runs_with(
    mode: &str,
    apps: &[&str],
    setup: &Setup,
    tag: &str,
    host: &Runs,
) -> (Runs, PathBuf) {
    let out = std::env::temp_dir().join(format!("vmcuda-vm-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("tests/vm/run-guest.sh"));
    if !setup.append.is_empty() {
        cmd.arg("--append").arg(&setup.append);
    }
    match &setup.boot {
        Boot::KernelAndInitramfs(dir) => cmd
            .arg("--kernel")
            .arg(dir.join("vmlinuz"))
            .arg("--initrd")
            .arg(dir.join("initramfs.cpio.gz")),
        Boot::Disk(image) => cmd.arg("--disk").arg(image),
    };
    let status = cmd
        .args([
            "--mode",
            mode,
            "--executor",
            "host-memory",
            "--timeout",
            "900",
        ])
        .arg("--host-bin")
        .arg(&setup.host_bin)
        .arg("--vhost-bin")
        .arg(&setup.vhost_bin)
        .arg("--apps")
        .arg(apps.join(","))
        .arg("--expect-rc")
        .arg(
            host.iter()
                .map(|(app, (_, _, rc))| format!("{app}={rc}"))
                .collect::<Vec<_>>()
                .join(","),
        )
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
    let addr = free_tcp_addr();
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
    runs_through(
        apps,
        &format!("tcp:{addr}"),
        &[("VMCUDA_TOKEN", REFERENCE_TOKEN)],
    )
}

/// The host reference for guests whose pinned memory is guest RAM the worker maps
/// (through the vhost-user device, as root or through the broker): a Unix socket,
/// over which pinned memory is shared with the worker in the same way.
fn host_runs_sharing_pinned_memory(apps: &[&str]) -> Runs {
    let daemon = Daemon::host_memory("vmref-unix");
    runs_through(apps, &daemon.server(), &[])
}

fn runs_through(apps: &[&str], server: &str, env: &[(&str, &str)]) -> Runs {
    apps.iter()
        .map(|app| {
            let o = run_program_with(&apps_dir().join(app), server, env);
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

/// Programs that need a library of the CUDA toolkit the test guest does not carry:
/// driver_library and runtime_rest compile kernels with NVRTC (135 MB: with it, the
/// initramfs no longer unpacks in the guest's memory); the cuBLAS ones need NVIDIA's
/// cuBLAS (hundreds of MB), whose kernels only a GPU runs anyway (the guest carries
/// NVIDIA's runtime alone).
const NOT_IN_THE_GUEST: &[&str] = &[
    "driver_library",
    "runtime_rest",
    "cublas_blas",
    "cublas_blas64",
    "cublas_gemm",
    "cublaslt_matmul",
    "managed_cublas",
];

fn all_apps() -> Vec<String> {
    let mut apps: Vec<String> = std::fs::read_dir(apps_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.starts_with('.') && !NOT_IN_THE_GUEST.contains(&name.as_str()))
        .collect();
    apps.sort();
    apps
}

/// `stderr` with the test double's notice naming no address: the guest reaches the
/// host at another address (vsock, TCP) than the host's own run (a Unix socket).
fn without_server_address(stderr: &str) -> String {
    stderr
        .lines()
        .map(|l| {
            match (
                l.strip_prefix("vmcuda: connected to a TEST DOUBLE"),
                l.find(": kernels"),
            ) {
                (Some(_), Some(end)) => match l[..end].rfind(" at ") {
                    Some(at) => format!("{} at SERVER{}", &l[..at], &l[end..]),
                    None => l.to_string(),
                },
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_same(mode: &str, guest: &Runs, host: &Runs) {
    let mut diffs = Vec::new();
    for (app, h) in host {
        let g = &guest[app];
        let same = g.0 == h.0
            && g.2 == h.2
            && without_server_address(&g.1) == without_server_address(&h.1);
        if !same {
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
    let host = host_runs_sharing_pinned_memory(&apps);
    let (guest, out) = guest_runs("vhost-user", &apps, &host);
    assert_same("vhost-user", &guest, &host);
    // One backend worker per program, started by the device for this VM.
    let log = std::fs::read_to_string(out.join("vhost.log")).unwrap_or_default();
    assert!(
        log.matches("guest connected").count() >= apps.len(),
        "{log}"
    );
    // The programs run as root, so they connect from a reserved port and get the
    // shared-memory data path through guest RAM: the staging area in the guest's huge
    // pages (the guest boots with hugepages=40). Programs with large pageable copies
    // (memcpy_kinds: up to 64 MiB, self-checked, and equal to the host run above) made
    // those copies through it.
    assert!(log.contains("guest_memory=true"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("copies use the shared-memory data path")
                && l.contains("guest_pages=true")),
        "no guest used the shared-memory data path through guest RAM:\n{log}"
    );
}

/// Every program run by an unprivileged user in the guest: with the guest's RAM
/// broker, each gets guest RAM and a connection confined to it, its calls travel
/// through a command ring there and its large copies through a staging area there;
/// without the broker, everything travels on the vsock socket. Both match the host.
#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn unprivileged_programs_in_a_guest_get_guest_ram_from_the_broker_or_the_socket() {
    let apps = all_apps();
    let apps: Vec<&str> = apps.iter().map(String::as_str).collect();
    let shared = host_runs_sharing_pinned_memory(&apps);
    let private = host_runs(&apps);
    for (broker, tag) in [(true, "user-broker"), (false, "user-socket")] {
        // With the broker pinned memory is guest RAM the worker maps; without it,
        // private to the program.
        let host = if broker { &shared } else { &private };
        let mut setup = Setup::test_guest();
        setup.append = format!("vmcuda.user=1 vmcuda.broker={}", u8::from(broker));
        let (guest, out) = guest_runs_with("vhost-user", &apps, &setup, tag, host);
        assert_same(tag, &guest, host);
        let log = std::fs::read_to_string(out.join("vhost.log")).unwrap_or_default();
        // Lines of the log that say all of `what`.
        let count = |what: &[&str]| {
            log.lines()
                .filter(|l| what.iter().all(|w| l.contains(w)))
                .count()
        };
        let grants = count(&["guest page grant"]);
        let rings = count(&["calls travel through the command ring", "guest_pages=true"]);
        let staged = count(&["copies use the shared-memory data path", "guest_pages=true"]);
        if broker {
            // Every program got its grant and its ring; those with large pageable
            // copies (memcpy_kinds among them) their staging area.
            assert!(
                grants >= apps.len(),
                "{grants} grants for {} programs:\n{log}",
                apps.len()
            );
            assert!(
                rings >= apps.len(),
                "{rings} rings for {} programs:\n{log}",
                apps.len()
            );
            assert!(staged >= 1, "no staging area in guest RAM:\n{log}");
            // Pinned allocations (huge pages) and registered memory (ordinary pages,
            // pinned by the broker) of zero_copy and pointer_mem, among others.
            let pinned = count(&["pinned memory in guest pages", "page_size=2097152"]);
            let registered = count(&["pinned memory in guest pages", "page_size=4096"]);
            assert!(
                pinned >= 2 && registered >= 2,
                "{pinned} pinned allocations and {registered} registrations in guest RAM:\n{log}"
            );
        } else {
            let pinned = count(&["pinned memory in guest pages"]);
            assert_eq!((grants, rings, staged, pinned), (0, 0, 0, 0), "{log}");
            assert!(
                log.matches("guest connected").count() >= apps.len(),
                "{log}"
            );
        }
    }
}

/// A VM's vsock connections reset under a running program, as a live migration resets
/// them (the guest's virtio vsock transport unbound and bound again every 2 s): the
/// program comes back to its session each time and finishes with its data checked,
/// as root (its own connection from a reserved port) and as an unprivileged user
/// (the guest's RAM broker makes the connection again, with the same grant).
#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn programs_in_a_guest_come_back_after_their_vsock_connections_reset() {
    let app = "suspend_steps";
    let expected: Runs = [(app.to_string(), (String::new(), String::new(), 0))].into();
    for (extra, tag) in [
        ("", "cut-root"),
        (" vmcuda.user=1 vmcuda.broker=1", "cut-broker"),
    ] {
        let mut setup = Setup::test_guest();
        // 120 steps 50 ms apart: some 6 s, so the connections reset twice at least.
        setup.append = format!("vmcuda.cut=2 vmcuda.args=120,50,16 vmcuda.verbose=1{extra}");
        let (guest, out) = guest_runs_with("vhost-user", &[app], &setup, tag, &expected);
        let (stdout, stderr, rc) = &guest[app];
        let console = std::fs::read_to_string(out.join("console.log")).unwrap_or_default();
        let cuts = console.matches("=== VMCUDA-CUT").count();
        let log = std::fs::read_to_string(out.join("vhost.log")).unwrap_or_default();
        assert_eq!(*rc, 0, "{tag}: {stdout}\n{stderr}\n{log}");
        assert!(
            stdout.contains("step 119 ok") && stdout.contains("PASS suspend_steps"),
            "{tag}: {stdout}"
        );
        assert!(cuts >= 2, "{tag}: {cuts} resets during the run:\n{console}");
        let back = log.matches("guest came back to its session").count();
        assert!(back >= 1, "{tag}: no return in the host's log:\n{log}");
        assert!(
            stderr.contains("back in the session"),
            "{tag}: the program did not say it came back:\n{stderr}"
        );
    }
}

#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn programs_in_a_guest_over_the_tcp_fallback_match_the_host() {
    let apps = all_apps();
    let apps: Vec<&str> = apps.iter().map(String::as_str).collect();
    let host = host_runs(&apps);
    let (guest, _) = guest_runs("net", &apps, &host);
    assert_same("net", &guest, &host);
}

#[test]
#[ignore = "needs qemu-system-x86_64 and the guest image: run tests/run.sh"]
fn the_af_vsock_listener_serves_guests_and_knows_their_cid() {
    let apps = ["vector_add", "struct_params", "streams", "symbols"];
    let host = host_runs(&apps);
    let (guest, out) = guest_runs("vsock-loopback", &apps, &host);
    assert_same("vsock-loopback", &guest, &host);
    let log = std::fs::read_to_string(out.join("host.log")).unwrap_or_default();
    assert!(log.contains("listening on vsock port=7731"), "{log}");
    assert_eq!(
        log.matches("peer=vsock cid 1 ").count(),
        apps.len(),
        "{log}"
    );
}

#[test]
#[ignore = "needs qemu-system-x86_64, the packages and the demo guest image: run tests/run.sh"]
fn the_demo_image_boots_and_runs_a_program_with_the_guest_package_over_the_host_package() {
    let v = env!("CARGO_PKG_VERSION");
    let host_deb = package("VMCUDA_HOST_DEB", &format!("vmcuda-host_{v}_amd64.deb"));
    let guest_deb = package("VMCUDA_GUEST_DEB", &format!("vmcuda-guest_{v}_amd64.deb"));
    let image = std::env::var_os("VMCUDA_DEMO_IMAGE")
        .map_or_else(|| root().join("build/vm-pkg/demo.qcow2"), PathBuf::from);
    // The image holds what the guest package installs (vmcuda's driver, no runtime or
    // BLAS of vmcuda's), NVIDIA's runtime for the `-cudart shared` programs, and boots
    // with its own bootloader.
    let manifest_path = image.with_extension("manifest.txt");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
    assert!(
        manifest.contains(&format!("guest package: vmcuda-guest_{v}_amd64.deb:"))
            && manifest.contains("./opt/vmcuda/lib/libcuda.so.1")
            && !manifest.contains("./opt/vmcuda/lib/libcudart.so.13")
            && manifest.contains("lib/x86_64-linux-gnu/libcudart.so.13")
            && manifest.contains("boot: SYSLINUX"),
        "{} is not a demo image built with --guest-deb:\n{manifest}",
        image.display()
    );
    let info = Command::new("qemu-img")
        .arg("info")
        .arg(&image)
        .output()
        .expect("qemu-img info");
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("file format: qcow2"),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );
    // The image's boot menu runs the programs with the package's vmcuda-run.
    let contents = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&guest_deb)
        .output()
        .expect("dpkg-deb -c");
    let contents = String::from_utf8_lossy(&contents.stdout);
    assert!(
        contents.contains("./usr/bin/vmcuda-run ->"),
        "no vmcuda-run in the package:\n{contents}"
    );

    // The host side from the host package, as dpkg unpacks it.
    let unpacked = std::env::temp_dir().join(format!("vmcuda-host-deb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&unpacked);
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&host_deb)
        .arg(&unpacked)
        .status()
        .expect("dpkg-deb -x");
    assert!(status.success());
    let setup = Setup {
        boot: Boot::Disk(image),
        host_bin: unpacked.join("usr/bin/vmcuda-host"),
        vhost_bin: unpacked.join("usr/bin/vmcuda-vhost-vsock"),
        append: String::new(),
    };
    // memcpy_kinds checks its own results without kernels, so it passes on the
    // host-memory executor too.
    let apps = ["vector_add", "memcpy_kinds"];
    let host = host_runs(&apps);
    let (guest, out) = guest_runs_with("vhost-user", &apps, &setup, "demo-image", &host);
    let (stdout, stderr, rc) = &guest["memcpy_kinds"];
    assert!(
        *rc == 0 && stdout.contains("odd sizes and offsets: ok") && stdout.ends_with("done\n"),
        "memcpy_kinds in the demo image: rc {rc}\n{stdout}\n{stderr}"
    );
    assert_same("demo image", &guest, &host);
    // Booted by its own bootloader, and run through vmcuda-run as its boot menu says.
    let console = std::fs::read_to_string(out.join("console.log")).unwrap_or_default();
    assert!(console.contains("SYSLINUX"), "{console}");
    assert!(console.contains("launcher=vmcuda-run "), "{console}");
    // Its boot menu reserves huge pages on the kernel's command line (the guest-RAM data
    // path stages copies in them); /init reports how many the kernel gave.
    let guest_info = console
        .lines()
        .find(|l| l.starts_with("=== VMCUDA-GUEST-INFO "))
        .unwrap_or_default();
    assert!(
        guest_info.contains(" hugepages=40 "),
        "{guest_info}\n{console}"
    );
    let log = std::fs::read_to_string(out.join("vhost.log")).unwrap_or_default();
    assert!(log.contains("guest connected"), "{log}");
    std::fs::remove_dir_all(&unpacked).unwrap();
}
