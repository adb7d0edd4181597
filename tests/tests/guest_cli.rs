//! The guest's tools: `vmcuda info` and `vmcuda doctor` against daemons set up to
//! work or to fail in each usual way, `vmcuda-run` running a real program through
//! the bridge, `vmcuda-system-wide` in a scratch root, and the CDI spec of `vmcuda cdi
//! generate` against vmcuda-run's environment. Every daemon is the test's
//! own, reached over a Unix socket or loopback TCP; nothing dials this machine's vsock.

use std::path::PathBuf;
use std::process::{Command, Output};

use vmcuda_tests::{
    apps_dir, cli_bin, guest_lib_dir, guest_library_path, nvidia_cudart_dir, root, static_apps_dir,
    text, Daemon,
};

/// `vmcuda ARGS` against `server`, with no token and the built guest library unless
/// `env` says otherwise.
fn vmcuda(args: &[&str], server: &str, env: &[(&str, &str)]) -> Output {
    Command::new(cli_bin())
        .args(args)
        .env("VMCUDA_SERVER", server)
        .env_remove("VMCUDA_TOKEN")
        // Tokens come from the test, never from this machine's /etc/vmcuda/token.
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .env("VMCUDA_LIB_DIR", guest_lib_dir())
        .envs(env.iter().copied())
        .output()
        .expect("run vmcuda")
}

/// A loopback port nobody listens on (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_tcp(addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "daemon never listened on {addr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The line a doctor check printed (its first line; a fix follows on the next).
fn check_line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.get(7..).is_some_and(|rest| rest.starts_with(check)))
        .unwrap_or_else(|| panic!("no `{check}` check in:\n{stdout}"))
}

/// The fix printed under a check.
fn fix_of<'a>(stdout: &'a str, check: &str) -> &'a str {
    let line = check_line(stdout, check);
    let mut lines = stdout.lines().skip_while(|l| *l != line).skip(1);
    lines
        .next()
        .filter(|l| l.trim_start().starts_with("fix: "))
        .unwrap_or_else(|| panic!("no fix under `{check}` in:\n{stdout}"))
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn info_shows_the_test_executor_its_device_and_the_quota() {
    let d = Daemon::start_with_config(
        "info-quota",
        Some("[local]\nmemory_quota = \"1GiB\"\n"),
        &["--executor", "host-memory"],
    );
    let out = vmcuda(&["info"], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("at {} (Unix socket)", d.server())),
        "{stdout}"
    );
    assert!(stdout.contains("TEST EXECUTOR"), "said loudly: {stdout}");
    assert!(
        stdout.contains("kernels are recorded, NOT executed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("GPU 0: vmcuda TEST DOUBLE (host-memory executor, no GPU)"),
        "{stdout}"
    );
    assert!(stdout.contains("CUDA driver 13.0") && stdout.contains("CUDA runtime 13.0"));
    assert!(
        stdout.contains("0 B used of a 1.0 GiB quota, 1.0 GiB free (the device has 4.0 GiB)"),
        "{stdout}"
    );
    assert!(stdout.contains("µs (median of 7 calls)"), "{stdout}");

    let out = vmcuda(&["info", "--json"], &d.server(), &[]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info --json is JSON");
    assert_eq!(v["server"], d.server());
    assert_eq!(v["host"]["executor"], "host-memory");
    assert_eq!(v["host"]["test_executor"], true);
    assert_eq!(v["guest"]["runtime_version"], 13000);
    assert!(v["round_trip_us"].as_u64().is_some());
    let memory = &v["devices"][0]["memory"];
    assert_eq!(memory["total"], 1u64 << 30);
    assert_eq!(memory["quota"], true);
    assert!(memory["device_total"].as_u64().unwrap() > 1 << 30);
    assert_eq!(v["devices"][0]["compute_capability"], "9.0");

    // Without a quota the device's own memory is the total, and no quota is claimed.
    let plain = Daemon::host_memory("info-plain");
    let out = vmcuda(&["info", "--json"], &plain.server(), &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"][0]["memory"]["quota"], false);
    let out = vmcuda(&["info"], &plain.server(), &[]);
    assert!(
        !text(&out.stdout).contains("quota"),
        "{}",
        text(&out.stdout)
    );
}

/// `vmcuda smi`: the table and nvidia-smi's CSV, with the guest's quota as the total.
#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn smi_shows_the_guests_gpus_as_nvidia_smi_does() {
    let d = Daemon::start_with_config(
        "smi-quota",
        Some("[local]\nmemory_quota = \"1GiB\"\n"),
        &["--executor", "host-memory"],
    );
    let out = vmcuda(&["smi"], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("0MiB / 1024MiB"), "{stdout}");
    assert!(stdout.contains("(quota)"), "{stdout}");
    // smi itself holds nothing and is no GPU process.
    assert!(
        stdout.contains("Processes of this guest:\n  GPU  PID       Used\n  none"),
        "{stdout}"
    );
    let out = vmcuda(
        &[
            "smi",
            "--query-gpu=index,memory.total,memory.used,utilization.gpu,fan.speed",
            "--format=csv,noheader,nounits",
        ],
        &d.server(),
        &[],
    );
    assert_eq!(text(&out.stdout), "0, 1024, 0, 0, [N/A]\n");
    let out = vmcuda(&["smi", "--query-gpu=bogus"], &d.server(), &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("unknown field \"bogus\""));
}

/// Several hosts: each is asked in turn, its devices numbered as programs see them
/// (the second host's first device is device 1), each host's quota its own.
#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn info_lists_every_host_and_numbers_devices_across_them() {
    let a = Daemon::host_memory("info-host-a");
    let b = Daemon::start_with_config(
        "info-host-b",
        Some("[local]\nmemory_quota = \"1GiB\"\n"),
        &["--executor", "host-memory"],
    );
    let server = format!("{},{}", a.server(), b.server());
    let out = vmcuda(&["info"], &server, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("Host 1 of 2") && stdout.contains("Host 2 of 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("at {} (Unix socket)", b.server())),
        "{stdout}"
    );
    assert!(stdout.contains("GPU 1: vmcuda TEST DOUBLE"), "{stdout}");

    let out = vmcuda(&["info", "--json"], &server, &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v[0]["server"], a.server());
    assert_eq!(v[1]["server"], b.server());
    assert_eq!(v[1]["devices"][0]["index"], 1);
    assert_eq!(v[0]["devices"][0]["memory"]["quota"], false);
    assert_eq!(v[1]["devices"][0]["memory"]["quota"], true);
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn doctor_passes_against_a_working_daemon() {
    let d = Daemon::host_memory("doctor-ok");
    let out = vmcuda(&["doctor"], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for check in [
        "server address",
        "connect",
        "handshake",
        "versions",
        "round trip",
        "guest library",
    ] {
        assert!(
            check_line(&stdout, check).starts_with("[ OK ]"),
            "{check}: {stdout}"
        );
    }
    // The test double works, but is never passed off as a GPU.
    assert!(
        check_line(&stdout, "GPUs").starts_with("[WARN]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("all checks passed, 1 warning(s)"),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn doctor_says_when_no_server_listens() {
    let dir = std::env::temp_dir().join(format!("vmcuda-doctor-none-{}", std::process::id()));
    let server = format!("unix:{}", dir.join("none.sock").display());
    let out = vmcuda(&["doctor"], &server, &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        check_line(&stdout, "connect").starts_with("[FAIL]"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("no socket at {server}")),
        "{stdout}"
    );
    assert!(fix_of(&stdout, "connect").contains("start `vmcuda-host serve"));
    assert!(check_line(&stdout, "handshake").starts_with("[SKIP]"));

    let addr = format!("127.0.0.1:{}", free_port());
    let out = vmcuda(
        &["doctor"],
        &format!("tcp:{addr}"),
        &[("VMCUDA_TOKEN", "x".repeat(16).as_str())],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        check_line(&stdout, "connect").contains(&format!("no vmcuda host listens at tcp:{addr}")),
        "{stdout}"
    );
    assert!(
        fix_of(&stdout, "connect").contains("check the port"),
        "{stdout}"
    );

    // Something that takes the connection and never answers: the doctor gives up.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let out = vmcuda(
        &["doctor", "--timeout", "1"],
        &format!("tcp:{addr}"),
        &[("VMCUDA_TOKEN", "x".repeat(16).as_str())],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        check_line(&stdout, "connect").contains(&format!("no answer from tcp:{addr} within 1 s")),
        "{stdout}"
    );
    drop(silent);

    // `info` fails the same way, pointing at the doctor.
    let out = vmcuda(&["info"], &server, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no vmcuda host answers at") && stderr.contains("vmcuda doctor"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn doctor_shows_a_policy_refusal_with_the_hosts_reason() {
    let d = Daemon::start_with_config(
        "doctor-refused",
        Some("[local]\nallow = false\n"),
        &["--executor", "host-memory"],
    );
    let out = vmcuda(&["doctor"], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(check_line(&stdout, "connect").starts_with("[ OK ]"));
    let handshake = check_line(&stdout, "handshake");
    assert!(handshake.starts_with("[FAIL]"), "{stdout}");
    assert!(
        handshake.contains("programs on the host are not allowed to use this host's GPUs"),
        "the host's own reason: {stdout}"
    );
    assert!(fix_of(&stdout, "handshake").contains("[local] allow = true"));
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn a_host_asked_for_the_gpu_without_one_refuses_to_start_saying_why() {
    let Some(out) = vmcuda_tests::serve_until_refused("cuda-only", &["--executor", "cuda"], &[])
    else {
        // A GPU served it: nothing to refuse on this machine.
        return;
    };
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    let refusal = stderr
        .lines()
        .find(|l| l.starts_with("vmcuda-host serve: no usable GPU"))
        .unwrap_or_else(|| panic!("no refusal in:\n{stderr}"));
    assert_eq!(
        refusal.matches("cudaError").count(),
        1,
        "the status is said once: {refusal}"
    );
    assert!(refusal.contains("--executor host-memory"), "{refusal}");
}

/// Every program served by the test double says so on its stderr, once, whatever
/// VMCUDA_VERBOSE says.
#[test]
#[ignore = "needs the linked guest libraries: run tests/run.sh"]
fn every_program_on_the_test_double_says_so_once() {
    let d = Daemon::host_memory("notice");
    let out = Command::new(apps_dir().join("vector_add"))
        .env("LD_LIBRARY_PATH", guest_library_path())
        .env("VMCUDA_SERVER", d.server())
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .env_remove("VMCUDA_VERBOSE")
        .output()
        .expect("run vector_add");
    let stderr = text(&out.stderr);
    let notices: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("vmcuda: connected to a TEST DOUBLE (host-memory executor)"))
        .collect();
    assert_eq!(notices.len(), 1, "{stderr}");
    assert!(
        notices[0].contains(&format!("at {}", d.server())),
        "{stderr}"
    );
    assert!(notices[0].contains("results are not computed"), "{stderr}");
}

/// `vmcuda` with nothing set, the way a program finds its host.
fn vmcuda_by_default(args: &[&str], local_socket: &std::path::Path) -> Output {
    Command::new(cli_bin())
        .args(args)
        .env_remove("VMCUDA_SERVER")
        .env("VMCUDA_SERVER_FILE", "/nonexistent/server")
        .env("VMCUDA_LOCAL_SOCKET", local_socket)
        .env_remove("VMCUDA_TOKEN")
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .env("VMCUDA_LIB_DIR", guest_lib_dir())
        .output()
        .expect("run vmcuda")
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn with_nothing_set_the_local_daemon_is_found_and_doctor_says_where_it_looked() {
    let d = Daemon::host_memory("by-default");
    let out = vmcuda_by_default(&["doctor"], &d.socket);
    let stdout = text(&out.stdout);
    let local = format!("unix:{}", d.socket.display());
    let looked: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("vmcuda doctor: looked for the host in this order:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(looked.len(), 4, "{stdout}");
    assert_eq!(looked[0], "  1. VMCUDA_SERVER: not set", "{stdout}");
    assert_eq!(
        looked[1], "  2. /nonexistent/server: no such file",
        "{stdout}"
    );
    assert!(
        looked[2].starts_with(&format!("  3. {local}: a socket")),
        "{stdout}"
    );
    assert!(looked[3].starts_with("  4. vsock:2:7731: "), "{stdout}");
    assert!(
        check_line(&stdout, "server address").contains(&local),
        "{stdout}"
    );
    assert!(
        check_line(&stdout, "connect").starts_with("[ OK ]"),
        "{stdout}"
    );
    let out = vmcuda_by_default(&["info", "--json"], &d.socket);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["server"], local);

    // No daemon on this machine: said so, at that place.
    let missing = d.dir.join("none.sock");
    let out = vmcuda_by_default(&["doctor"], &missing);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "3. unix:{}: no socket (no daemon on this machine)",
            missing.display()
        )),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs the vmcuda command and the host daemon: run tests/run.sh"]
fn doctor_catches_a_tcp_guest_without_a_token() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _d = Daemon::start("doctor-tcp", &["--executor", "host-memory", "--tcp", &addr]);
    wait_for_tcp(&addr);
    let out = vmcuda(&["doctor"], &format!("tcp:{addr}"), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        check_line(&stdout, "token").starts_with("[FAIL]"),
        "{stdout}"
    );
    assert!(fix_of(&stdout, "token").contains("/etc/vmcuda/token"));
    let handshake = check_line(&stdout, "handshake");
    assert!(
        handshake.contains("connections over TCP need a token"),
        "{stdout}"
    );
    assert!(fix_of(&stdout, "handshake").contains("no token was sent"));
}

#[test]
#[ignore = "needs the vmcuda command and nvcc-built apps: run tests/run.sh"]
fn doctor_tells_a_shared_runtime_from_a_static_one() {
    let d = Daemon::host_memory("doctor-program");
    let app = apps_dir().join("vector_add");
    let out = vmcuda(&["doctor", app.to_str().unwrap()], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        check_line(&stdout, "program").contains("loads libcudart.so.13 dynamically"),
        "{stdout}"
    );

    // nvcc's default is the static runtime: NVIDIA's runtime in the program reaches the
    // bridge through vmcuda's libcuda.so.1.
    let stat = static_apps_dir().join("vector_add");
    let out = vmcuda(&["doctor", stat.to_str().unwrap()], &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let program = check_line(&stdout, "program");
    assert!(
        program.starts_with("[ OK ]")
            && program.contains("statically")
            && program.contains("vmcuda's libcuda.so.1"),
        "{stdout}"
    );
}

fn script(name: &str) -> PathBuf {
    root().join("guest-lib").join(name)
}

/// A directory holding a stand-in `python3` whose only site directory is `site`, for
/// vmcuda-run's search of pip's NVIDIA runtime; returns the directory, to go first on
/// PATH.
fn python_with_site(name: &str, site: &std::path::Path) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let python = dir.join("python3");
    std::fs::write(&python, format!("#!/bin/sh\necho '{}'\n", site.display())).unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    dir
}

fn path_with(first: &std::path::Path) -> String {
    format!(
        "{}:{}",
        first.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Whether a CUDA toolkit's runtime is installed where vmcuda-run looks after pip's.
fn toolkit_cudart_installed() -> bool {
    std::fs::read_dir("/usr/local").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("cuda")
                && e.path().join("lib64/libcudart.so.13").exists()
        })
    })
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn vmcuda_run_runs_a_program_through_the_bridge() {
    let d = Daemon::host_memory("run");
    // A `-cudart shared` program on a guest whose loader finds no libcudart.so.13: the
    // one pip's nvidia-cuda-runtime wheel installed (site/nvidia/cu13/lib) is used.
    let site = std::env::temp_dir().join(format!("vmcuda-run-site-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir_all(site.join("nvidia/cu13")).unwrap();
    std::os::unix::fs::symlink(nvidia_cudart_dir(), site.join("nvidia/cu13/lib")).unwrap();
    let python = python_with_site("run-python", &site);
    let run = |python: &std::path::Path| {
        Command::new(script("vmcuda-run"))
            .arg(apps_dir().join("vector_add"))
            .env("PATH", path_with(python))
            .env("VMCUDA_LIB_DIR", guest_lib_dir())
            .env("VMCUDA_SERVER", d.server())
            .env("VMCUDA_TOKEN_FILE", "/nonexistent")
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap()
    };
    let out = run(&python);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        d.launches()
            .iter()
            .any(|l| l["kernel"].as_str().is_some_and(|k| k.contains("vadd"))),
        "the program's kernel reached this daemon"
    );

    // With no NVIDIA runtime installed anywhere, one line says how to install it.
    if !toolkit_cudart_installed() {
        let empty = python_with_site("run-python-empty", &site.join("nothing"));
        let out = run(&empty);
        assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr),
            format!(
                "vmcuda-run: {} needs NVIDIA's CUDA runtime libcudart.so.13, which is not \
                 installed: pip install 'nvidia-cuda-runtime==13.*' (or install the CUDA toolkit)\n",
                apps_dir().join("vector_add").display()
            )
        );
        let _ = std::fs::remove_dir_all(&empty);
    }
    let _ = std::fs::remove_dir_all(&python);
    let _ = std::fs::remove_dir_all(&site);

    // --check is the doctor, with the vmcuda beside the build's binaries.
    let out = Command::new(script("vmcuda-run"))
        .args(["--check", apps_dir().join("vector_add").to_str().unwrap()])
        .env("PATH", path_with(cli_bin().parent().unwrap()))
        .env("VMCUDA_LIB_DIR", guest_lib_dir())
        .env("VMCUDA_SERVER", d.server())
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        check_line(&stdout, "program").starts_with("[ OK ]"),
        "{stdout}"
    );
    assert!(
        check_line(&stdout, "guest library").starts_with("[ OK ]"),
        "{stdout}"
    );
}

/// A scratch directory holding a stand-in `libcuda.so.1` under `opt/vmcuda/lib`.
fn scratch_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("opt/vmcuda/lib")).unwrap();
    std::fs::write(dir.join("opt/vmcuda/lib/libcuda.so.1"), b"stand-in").unwrap();
    dir
}

#[test]
fn vmcuda_run_puts_its_library_first_and_keeps_the_rest() {
    let dir = scratch_root("run-path");
    let lib = dir.join("opt/vmcuda/lib");
    let run = |env: &[(&str, &str)], args: &[&str]| {
        Command::new(script("vmcuda-run"))
            .args(args)
            .env("VMCUDA_LIB_DIR", &lib)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let echo = [
        "sh",
        "-c",
        "printf '%s|%s|%s' \"$LD_LIBRARY_PATH\" \"$1\" \"$2\"",
        "sh",
        "a b",
        "-m",
    ];
    let out = run(&[("LD_LIBRARY_PATH", "/usr/local/lib:/x")], &echo);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        format!("{}:/usr/local/lib:/x|a b|-m", lib.display()),
        "ours first, theirs kept, arguments passed through untouched"
    );
    let out = Command::new(script("vmcuda-run"))
        .args(echo)
        .env("VMCUDA_LIB_DIR", &lib)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), format!("{}|a b|-m", lib.display()));

    // vmcuda's driver alone is preloaded, before the caller's own preloads. A cuDNN in
    // the directory is not vmcuda's to preload: NVIDIA's runs on the guest driver.
    std::fs::write(lib.join("libcudnn.so.9"), b"stand-in").unwrap();
    let preloaded = ["sh", "-c", "printf '%s' \"$LD_PRELOAD\""];
    let out = run(&[("LD_PRELOAD", "/theirs.so")], &preloaded);
    let l = lib.display();
    assert_eq!(text(&out.stdout), format!("{l}/libcuda.so.1:/theirs.so"));
    // --driver-only, the old name of the default, changes nothing.
    let mut driver_only = vec!["--driver-only"];
    driver_only.extend(preloaded);
    let out = run(&[("LD_PRELOAD", "/theirs.so")], &driver_only);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{l}/libcuda.so.1:/theirs.so"));
    assert_eq!(run(&[], &["--driver-only"]).status.code(), Some(2));
    std::fs::remove_file(lib.join("libcudnn.so.9")).unwrap();

    // A replacement runtime or BLAS an older vmcuda left there is refused, not loaded.
    for old in ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"] {
        std::fs::write(lib.join(old), b"stand-in").unwrap();
        let out = run(&[], &preloaded);
        assert_eq!(out.status.code(), Some(125), "{old}");
        assert!(
            text(&out.stderr).contains(&format!(
                "{l}/{old} is a replacement library an older vmcuda installed"
            )),
            "{}",
            text(&out.stderr)
        );
        std::fs::remove_file(lib.join(old)).unwrap();
    }

    // Its own failures are 125, the command's exit status is passed on.
    let out = run(&[("VMCUDA_LIB_DIR", "/nonexistent")], &["true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("no libcuda.so.1 in /nonexistent"));
    assert_eq!(run(&[], &["sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(
        run(&[], &[]).status.code(),
        Some(2),
        "no command is a usage error"
    );

    // A program that is not there is said so plainly, with a shell's exit status.
    let missing = dir.join("missing");
    let out = run(&[], &[missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        text(&out.stderr),
        format!("vmcuda-run: {}: no such program\n", missing.display())
    );
    let out = run(&[], &["vmcuda-no-such-command"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        text(&out.stderr).contains("vmcuda-no-such-command: command not found on PATH"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[], &[lib.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(126), "a directory is not a program");
    assert!(text(&out.stderr).contains("not an executable program"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn system_wide_mode_is_enabled_and_disabled_in_a_scratch_root() {
    let dir = scratch_root("system-wide");
    let conf = dir.join("etc/ld.so.conf.d/vmcuda.conf");
    let sw = |args: &[&str]| {
        Command::new(script("vmcuda-system-wide"))
            .args(args)
            .args(["--root", dir.to_str().unwrap()])
            .env_remove("VMCUDA_LIB_DIR")
            .output()
            .unwrap()
    };
    assert_eq!(sw(&["status"]).status.code(), Some(1), "off by default");

    let out = sw(&["enable"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&conf).unwrap();
    assert_eq!(
        written
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        ["/opt/vmcuda/lib"],
        "the directory as seen inside the root"
    );
    assert!(
        text(&out.stdout).contains("not running ldconfig"),
        "the real cache is left alone"
    );
    let out = sw(&["status"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("enabled") && text(&out.stdout).contains("/opt/vmcuda/lib"));

    let out = sw(&["disable"]);
    assert!(out.status.success());
    assert!(!conf.exists());
    assert_eq!(sw(&["status"]).status.code(), Some(1));

    // A directory without the library is refused; bad words are usage errors.
    let out = sw(&["enable", "--lib-dir", "/usr/lib"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no libcuda.so.1"),
        "{}",
        text(&out.stderr)
    );
    assert!(!conf.exists());
    assert_eq!(sw(&["frobnicate"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The keys a CDI spec (and its parts) may have: runtimes refuse a spec with others.
const CDI_SPEC_KEYS: [&str; 5] = [
    "cdiVersion",
    "kind",
    "annotations",
    "devices",
    "containerEdits",
];
const CDI_EDIT_KEYS: [&str; 7] = [
    "env",
    "deviceNodes",
    "mounts",
    "hooks",
    "intelRdt",
    "additionalGids",
    "netDevices",
];

/// The CDI schema's required fields and types, and its naming rules, checked by hand
/// (the reference validator is Go, and the Rust port brings a JSON-schema engine).
fn check_cdi_schema(spec: &serde_json::Value) {
    let obj = spec.as_object().expect("a spec is an object");
    for k in obj.keys() {
        assert!(CDI_SPEC_KEYS.contains(&k.as_str()), "unknown key {k}");
    }
    let version = spec["cdiVersion"].as_str().expect("cdiVersion");
    assert!(
        version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()),
        "cdiVersion is a version: {version}"
    );
    // vendor/class: letters, digits, '_', '-', '.'; starting with a letter.
    let kind = spec["kind"].as_str().expect("kind");
    let (vendor, class) = kind.split_once('/').expect("kind is vendor/class");
    for part in [vendor, class] {
        assert!(
            part.starts_with(|c: char| c.is_ascii_alphabetic()),
            "{kind}"
        );
        assert!(
            part.ends_with(|c: char| c.is_ascii_alphanumeric()),
            "{kind}"
        );
        assert!(
            part.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "{kind}"
        );
    }
    let devices = spec["devices"].as_array().expect("devices");
    assert!(!devices.is_empty());
    for d in devices {
        let name = d["name"].as_str().expect("a device has a name");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c)),
            "{name}"
        );
        let edits = d["containerEdits"].as_object().expect("containerEdits");
        for k in edits.keys() {
            assert!(CDI_EDIT_KEYS.contains(&k.as_str()), "unknown edit {k}");
        }
        for e in d["containerEdits"]["env"].as_array().into_iter().flatten() {
            assert!(e.as_str().expect("env is strings").contains('='), "{e}");
        }
        for n in d["containerEdits"]["deviceNodes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                n["path"].as_str().is_some_and(|p| p.starts_with('/')),
                "{n}"
            );
        }
        for m in d["containerEdits"]["mounts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                m["hostPath"].is_string() && m["containerPath"].is_string(),
                "{m}"
            );
            assert!(m["options"]
                .as_array()
                .is_none_or(|o| o.iter().all(|s| s.is_string())));
            assert!(m.get("type").is_none_or(|t| t.is_string()), "{m}");
        }
    }
}

#[test]
#[ignore = "needs the vmcuda command: run tests/run.sh"]
fn cdi_spec_gives_containers_what_vmcuda_run_gives_programs() {
    let dir = scratch_root("cdi");
    let lib = dir.join("opt/vmcuda/lib");
    std::fs::write(lib.join("libnvidia-ml.so.1"), b"stand-in").unwrap();
    std::fs::create_dir_all(dir.join("opt/vmcuda/bin")).unwrap();
    std::fs::write(dir.join("opt/vmcuda/bin/vmcuda"), b"stand-in").unwrap();
    std::fs::create_dir_all(dir.join("etc/vmcuda")).unwrap();
    let server_file = dir.join("etc/vmcuda/server");
    let token_file = dir.join("etc/vmcuda/token");
    std::fs::write(&server_file, "# the host\nvsock:2:7731\n").unwrap();
    std::fs::write(&token_file, "secret\n").unwrap();
    let output = dir.join("etc/cdi/vmcuda.json");
    let generate = |env: &[(&str, &str)], extra: &[&str]| {
        Command::new(cli_bin())
            .args(["cdi", "generate", "--lib-dir", lib.to_str().unwrap()])
            .args(extra)
            .env_remove("VMCUDA_SERVER")
            .env_remove("VMCUDA_TOKEN")
            .env_remove("VMCUDA_TLS_NAME")
            .env("VMCUDA_SERVER_FILE", &server_file)
            .env("VMCUDA_TOKEN_FILE", &token_file)
            .env("VMCUDA_TLS_CA", "/nonexistent")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = generate(&[], &["--output", output.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&output).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&output).unwrap().permissions().mode() & 0o777,
        0o644,
        "readable by rootless runtimes"
    );
    let printed = generate(&[], &[]);
    assert_eq!(text(&printed.stdout), written, "printed and written alike");
    assert!(
        !written.contains("secret"),
        "the token's path, never the token"
    );

    let spec: serde_json::Value = serde_json::from_str(&written).expect("the spec is JSON");
    check_cdi_schema(&spec);
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(spec["kind"], "vmcuda.dev/gpu");
    assert_eq!(spec["devices"][0]["name"], "all");
    let edits = &spec["devices"][0]["containerEdits"];

    // Every mount is a read-only bind of something that exists, at the same path.
    let mounts = edits["mounts"].as_array().unwrap();
    let sources: Vec<&str> = mounts
        .iter()
        .map(|m| m["hostPath"].as_str().unwrap())
        .collect();
    for m in mounts {
        let source = m["hostPath"].as_str().unwrap();
        assert!(std::path::Path::new(source).exists(), "{source}");
        assert!(source.starts_with(dir.to_str().unwrap()), "{source}");
        assert_eq!(m["containerPath"], m["hostPath"]);
        assert_eq!(m["type"], "bind");
        assert!(
            m["options"].as_array().unwrap().contains(&"ro".into()),
            "{m}"
        );
    }
    let expected = [&lib, &dir.join("opt/vmcuda/bin"), &server_file, &token_file];
    assert_eq!(
        sources,
        expected
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    let nodes: Vec<&str> = edits["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["/dev/vsock"], "the host is over vsock");

    // The environment is vmcuda-run's (with nothing of the caller's to keep), and the
    // file variables still name the mounted files.
    let run = Command::new(script("vmcuda-run"))
        .arg("env")
        .env("VMCUDA_LIB_DIR", &lib)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(run.status.success());
    let run_env = text(&run.stdout);
    let mut want: Vec<String> = run_env
        .lines()
        .filter(|l| l.starts_with("LD_LIBRARY_PATH=") || l.starts_with("LD_PRELOAD="))
        .map(String::from)
        .collect();
    want.sort();
    let mut nccl: Vec<String> = run_env
        .lines()
        .filter(|l| l.starts_with("NCCL_"))
        .map(String::from)
        .collect();
    nccl.sort();
    assert_eq!(nccl, ["NCCL_CUMEM_HOST_ENABLE=0"], "{run_env}");
    want.extend(nccl);
    want.push(format!("VMCUDA_SERVER_FILE={}", server_file.display()));
    want.push(format!("VMCUDA_TOKEN_FILE={}", token_file.display()));
    let env: Vec<String> = edits["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    assert_eq!(env, want);
    assert_eq!(env[1], format!("LD_PRELOAD={}/libcuda.so.1", lib.display()));

    // A TCP host needs no vsock; a Unix one its socket's directory, writable.
    let out = generate(&[("VMCUDA_SERVER", "tcp:127.0.0.1:7731")], &[]);
    let spec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let edits = &spec["devices"][0]["containerEdits"];
    assert!(edits.get("deviceNodes").is_none(), "{edits}");
    assert!(edits["env"]
        .as_array()
        .unwrap()
        .contains(&"VMCUDA_SERVER=tcp:127.0.0.1:7731".into()));
    let sock = dir.join("run/vmcuda.sock");
    let out = generate(
        &[("VMCUDA_SERVER", &format!("unix:{}", sock.display()))],
        &[],
    );
    let spec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    check_cdi_schema(&spec);
    let last = spec["devices"][0]["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["hostPath"], dir.join("run").to_str().unwrap());
    assert!(!last["options"].as_array().unwrap().contains(&"ro".into()));

    // A directory without the library is refused, and nothing is written.
    std::fs::remove_file(&output).unwrap();
    let out = Command::new(cli_bin())
        .args(["cdi", "generate", "--lib-dir", "/nonexistent", "--output"])
        .arg(&output)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no libcuda.so.1 in /nonexistent"));
    assert!(!output.exists());
    // Nor is one holding a replacement runtime an older vmcuda left.
    std::fs::write(lib.join("libcudart.so.13"), b"stand-in").unwrap();
    let out = generate(&[], &["--output", output.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("libcudart.so.13 is a replacement library an older vmcuda installed"),
        "{}",
        text(&out.stderr)
    );
    assert!(!output.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tests/demo.sh --help`, and a program name it does not know, answer at once: no
/// cargo, nvcc or apt is run (stand-ins on PATH say if one was).
#[test]
fn the_demo_prints_its_usage_and_programs_before_building_anything() {
    let dir = std::env::temp_dir().join(format!("vmcuda-demo-usage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ran = dir.join("ran");
    for tool in ["cargo", "apt-get", "nvcc", "python3"] {
        let path = dir.join(tool);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho {tool} >>'{}'\nexit 1\n", ran.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let demo = |args: &[&str]| {
        Command::new("bash")
            .arg(root().join("tests/demo.sh"))
            .args(args)
            .env("PATH", &path)
            .output()
            .unwrap()
    };

    let out = demo(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let usage = text(&out.stdout);
    assert!(usage.starts_with("usage: tests/demo.sh [APP]"), "{usage}");
    for app in ["vector_add", "matmul", "memcpy_kinds"] {
        assert!(usage.contains(app), "{app} is not listed:\n{usage}");
    }

    for args in [&["no_such_program"][..], &["--bogus"], &["a", "b"]] {
        let out = demo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("usage: tests/demo.sh [APP]"), "{stderr}");
    }
    let out = demo(&["no_such_program"]);
    assert!(text(&out.stderr).contains("there is no program no_such_program in tests/apps"));

    assert!(
        !ran.exists(),
        "ran before answering: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
