//! CUDA IPC between two guest processes through a host-memory daemon
//! (tests/apps/ipc_processes.cu and pool_processes.cu, NVIDIA's runtime over vmcuda's
//! driver): the processes of one VM share memory, events and memory pools; another
//! VM's process, forged bytes, a handle replayed after its allocation was freed and a
//! flood of exports are refused.

use vmcuda_tests::{apps_dir, build_c_program, run_program_with, static_apps_dir, text, Daemon};

/// What both processes print when everything they share works (kernel results are
/// printed but, on the test double, not computed: not asserted).
const SHARED: &[&str] = &[
    "child: a second open gives the same pointer: yes",
    "child: the parent's event is complete: yes",
    "child: reads the parent's bytes: yes",
    "child: a forged handle is refused: yes",
    "child: an unknown open flag is refused with cudaErrorInvalidValue: yes",
    "child: closing an address twice is refused: yes",
    "child: the handle after the parent freed the memory is refused: yes",
    "parent: the same allocation's handle is stable: yes",
    "parent: an event without cudaEventInterprocess has no handle: yes",
    "parent: opening its own handle is refused: yes",
    "parent: sees the child's bytes: yes",
    "parent: the child exited with 0",
    "PASS ipc_processes",
];

fn assert_lines(stdout: &str, lines: &[&str]) {
    for line in lines {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    assert!(
        !stdout.contains("FAIL ") && !stdout.contains("MISMATCH "),
        "{stdout}"
    );
}

/// `app` run against `d` with NVIDIA's shared runtime and with nvcc's static one, the
/// codes of its refusals on stderr: it passes, prints `lines` and says `codes`.
fn passes_with_both_runtimes(
    d: &Daemon,
    app: &str,
    env: &[(&str, &str)],
    lines: &[&str],
    codes: &[&str],
) {
    let env: Vec<(&str, &str)> = [("IPC_SHOW_CODES", "1")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    for dir in [apps_dir(), static_apps_dir()] {
        let out = run_program_with(&dir.join(app), &d.server(), &env);
        let stdout = text(&out.stdout);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert_lines(&stdout, lines);
        for line in codes {
            assert!(stderr.contains(line), "missing `{line}` in:\n{stderr}");
        }
    }
}

/// `app`'s parent is a local program and its child comes in through a VM's own socket
/// (hybrid vsock, as Firecracker connects, named to the child by `importer_var`):
/// another VM, refused. The daemon listens on vsock port `port`.
fn another_vms_process_is_refused(
    name: &str,
    port: u32,
    app: &str,
    importer_var: &str,
    lines: &[&str],
) {
    let dir = std::env::temp_dir().join(format!("vmcuda-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vmm_socket = dir.join("vm2.vsock");
    let port = port.to_string();
    let d = Daemon::start_with_config(
        name,
        Some(&format!(
            "[[vm]]\nname = \"vm2\"\nhybrid_vsock = \"{}\"\n",
            vmm_socket.display()
        )),
        &["--executor", "host-memory", "--port", &port],
    );
    let other_vm = dir.join(format!("vm2.vsock_{port}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Until the daemon listens there (its file exists from the bind on, a little
    // before: a child connecting then was refused, and its open did not reach the
    // host at all). The probe connection says nothing and ends.
    while std::os::unix::net::UnixStream::connect(&other_vm).is_err() {
        assert!(std::time::Instant::now() < deadline, "no VM socket");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let importer = format!("unix:{}", other_vm.display());
    let out = run_program_with(
        &apps_dir().join(app),
        &d.server(),
        &[(importer_var, &importer)],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_lines(&stdout, lines);
    let log = d.log_with("the handle is another VM's");
    assert!(
        log.contains("CUDA IPC import refused: the handle is another VM's"),
        "{log}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn two_processes_of_one_vm_share_memory_and_events() {
    let d = Daemon::host_memory("ipc");
    // The driver's codes: a process opening its own handle gets
    // CUDA_ERROR_INVALID_CONTEXT (cudaErrorDeviceUninitialized), the rest an invalid
    // value.
    let codes = [
        "own handle: cudaErrorDeviceUninitialized",
        "plain event: cudaErrorInvalidValue",
        "forged handle: cudaErrorInvalidValue",
        "second close: cudaErrorInvalidValue",
        "stale handle: cudaErrorInvalidValue",
    ];
    passes_with_both_runtimes(&d, "ipc_processes", &[], SHARED, &codes);
    // The importer's worker opened the exporter's: said in the host's log; the stale
    // handle's refusal too.
    let log = d.log_with("CUDA IPC import refused");
    assert!(log.contains("CUDA IPC handle opened"), "{log}");
    assert!(
        log.contains("CUDA IPC import refused: no such export"),
        "{log}"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn a_process_of_another_vm_cannot_open_the_handles() {
    another_vms_process_is_refused(
        "ipc-vms",
        7741,
        "ipc_processes",
        "IPC_IMPORTER_SERVER",
        &[
            "child: another VM's memory handle refused with cudaErrorInvalidValue: yes",
            "child: another VM's event handle refused with cudaErrorInvalidValue: yes",
            "parent: the child exited with 0",
            "PASS ipc_processes",
        ],
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn a_flood_of_exports_stops_at_the_vms_limit() {
    let d = Daemon::start_with_config(
        "ipc-flood",
        Some("[ipc]\nmax_exports = 8\n"),
        &["--executor", "host-memory"],
    );
    let out = run_program_with(
        &apps_dir().join("ipc_processes"),
        &d.server(),
        &[("IPC_FLOOD", "20")],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The program's first allocation and event were withdrawn when it freed them:
    // the flood has the VM's whole allowance, and no more.
    assert_lines(
        &stdout,
        &[
            "flood: 8 of 20 exports, then cudaErrorMemoryAllocation",
            "PASS ipc_processes",
        ],
    );
    let log = d.log_with("max_exports");
    assert!(
        log.contains("CUDA IPC export refused: the VM has [ipc] max_exports exports"),
        "{log}"
    );
    // The daemon and other guests carry on.
    let out = d.run_app("ipc_processes");
    assert_lines(&text(&out.stdout), SHARED);
}

/// A physical allocation passed as a POSIX descriptor over a Unix socket, as NCCL
/// passes its cuMem buffers (tests/c/cumem_share.c, driver API only).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn physical_allocations_pass_between_processes_as_descriptors() {
    let d = Daemon::host_memory("cumem");
    let exe = build_c_program("cumem_share", &["libcuda.so.1"]);
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "child: imports the parent's descriptor: yes",
        "child: maps the imported allocation: yes",
        "child: reads the parent's bytes: yes",
        "child: reads back its own bytes: yes",
        "child: a descriptor that is not an export is refused: yes",
        "parent: exports it as a descriptor: yes",
        "parent: a fabric handle is refused: yes",
        "parent: sees the child's bytes: yes",
        "parent: the child's checks held: yes",
        "PASS cumem_share",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // The foreign descriptor is refused in the guest as an invalid value; a fabric
    // export of an allocation made exportable only as a descriptor is invalid, as the
    // driver answers (the H200, natively).
    assert!(stdout.contains("child: foreign descriptor 1\n"), "{stdout}");
    assert!(stdout.contains("parent: fabric export 1\n"), "{stdout}");
}

/// What both processes print when the pool and its allocation are shared (kernel
/// results are printed but, on the test double, not computed: not asserted).
const POOL_SHARED: &[&str] = &[
    "parent: exports the pool as a descriptor: yes",
    "child: imports the parent's pool: yes",
    "child: forged pointer data is refused: yes",
    "child: imports the parent's pointer: yes",
    "child: reads the parent's bytes: yes",
    "child: the imported pool makes no allocations: yes",
    "child: the pointer data after the parent freed it is refused: yes",
    "parent: sees the child's bytes: yes",
    "parent: the child exited with 0",
    "PASS pool_processes",
];

/// A memory pool passed as a POSIX descriptor over a Unix socket and an allocation of
/// it as `cudaMemPoolPtrExportData` over a pipe (tests/apps/pool_processes.cu): the
/// importer reads and writes the exporter's memory, frees its import first, and the
/// export data is refused once the exporter freed the allocation.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn two_processes_of_one_vm_share_a_memory_pool() {
    let d = Daemon::host_memory("ipc-pools");
    let codes = [
        "forged pointer: cudaErrorInvalidValue",
        "allocation from an imported pool: cudaErrorInvalidValue",
        "stale pointer: cudaErrorInvalidValue",
    ];
    passes_with_both_runtimes(
        &d,
        "pool_processes",
        &[("POOL_STALE_IMPORT", "1")],
        POOL_SHARED,
        &codes,
    );
    // The importer's worker opened the pool and the pointer through the registry; the
    // stale export data's refusal is in the host's log too.
    let log = d.log_with("CUDA IPC import refused");
    assert!(log.contains("kind=Pool "), "{log}");
    assert!(log.contains("kind=PoolPointer"), "{log}");
    assert!(
        log.contains("CUDA IPC import refused: no such export"),
        "{log}"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn a_process_of_another_vm_cannot_import_the_pool() {
    another_vms_process_is_refused(
        "ipc-pool-vms",
        7742,
        "pool_processes",
        "POOL_IMPORTER_SERVER",
        &[
            "child: another VM's pool refused with cudaErrorInvalidValue: yes",
            "parent: the child exited with 0",
            "PASS pool_processes",
        ],
    );
}
