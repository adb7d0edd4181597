//! The guest's NVML (`libnvidia-ml.so.1`) against a host-memory daemon: what a
//! monitoring tool asks (tests/c/nvml_query.c), answered with the guest's own view —
//! its quota as the total, its own memory and process — and changes refused.

use std::path::PathBuf;
use std::process::Command;

use vmcuda_tests::{
    build_c_program, guest_lib_dir, guest_library_path, run_program_with, text, Daemon,
};

/// tests/c/nvml_query.c, built against the guest's NVML and NVIDIA's runtime.
fn nvml_program() -> PathBuf {
    build_c_program("nvml_query", &["libnvidia-ml.so.1", "libcudart.so.13"])
}

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn nvml_shows_the_guests_devices_memory_and_processes_and_refuses_changes() {
    let exe = nvml_program();
    let d = Daemon::start_with_config(
        "nvml-quota",
        Some("[local]\nmemory_quota = \"1GiB\"\n"),
        &["--executor", "host-memory"],
    );
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    // `nvml_query 64` below allocates first; this run holds nothing.
    let out = run_program_with(&exe, &d.server(), &[]);
    assert!(out.status.success());
    let out = Command::new(&exe)
        .arg("64")
        .env("LD_LIBRARY_PATH", guest_library_path())
        .env("VMCUDA_SERVER", d.server())
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .output()
        .expect("run nvml_query");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "driver: present (0) cuda 13000",
        "devices: 1",
        "device 0: index 0 name vmcuda TEST DOUBLE (host-memory executor, no GPU)",
        "cc 9.0 found by uuid 1 by bus 1",
        // The quota is the total; used is this guest's own 64 MiB.
        "device 0: memory total 1024 MiB used 64 MiB free+used<=total 1",
        "device 0: readings utilization ok temperature ok power ok",
        "device 0: processes ok; this one listed 1 with at least 64 MiB 1",
        "device 0: set power limit: Insufficient Permissions",
        "shutdown: Success",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }

    // Without a quota the device's own memory is the total.
    let plain = Daemon::host_memory("nvml-plain");
    let out = run_program_with(&exe, &plain.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("device 0: memory total 4096 MiB used 0 MiB"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn nvml_without_a_host_fails_its_init_as_without_a_driver() {
    let exe = nvml_program();
    let out = run_program_with(&exe, "unix:/nonexistent/vmcuda.sock", &[]);
    let stdout = text(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("FAIL nvmlInit_v2: Driver Not Loaded"),
        "{stdout}"
    );
}

/// libnvidia-ml.so.1 exports every name of its list (NVIDIA's exports and pynvml's
/// bindings), unversioned as NVIDIA's, and nothing else but what it needs.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn nvml_exports_every_listed_function_without_versions() {
    let lib = guest_lib_dir().join("libnvidia-ml.so.1");
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(&lib)
        .output()
        .expect("readelf");
    let mut exported = std::collections::HashSet::new();
    for l in text(&out.stdout).lines() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() < 8 || !cols[0].ends_with(':') || cols[6] == "UND" || cols[0] == "Num:" {
            continue;
        }
        assert!(!cols[7].contains('@'), "{} carries a version", cols[7]);
        assert!(
            cols[7].starts_with("nvml"),
            "{} is not an NVML name",
            cols[7]
        );
        exported.insert(cols[7].to_string());
    }
    let list = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-lib/exports/libnvidia-ml.so.1.txt"),
    )
    .expect("the export list");
    let names: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(names.len() > 400, "{}", names.len());
    let missing: Vec<_> = names.iter().filter(|n| !exported.contains(**n)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}
