//! The real CUDA test programs (`tests/apps`, built by nvcc 13 with `-cudart shared`)
//! on NVIDIA's own `libcudart.so.13` over vmcuda's `libcuda.so.1`, and a host daemon
//! on the host-memory executor; the same built with the static runtime. Kernels do not
//! run there,
//! so these tests check everything that needs no kernel result: each program's own
//! self-checks of copies, memsets, symbols, streams and events, exact error codes,
//! and, from the launch log, that kernel arguments were marshalled byte for byte.
//! Kernel results are compared against native runs on the GPU (tests/gpu/run.sh).

use std::collections::HashSet;
use std::process::Command;

use vmcuda_tests::{
    apps_dir, free_tcp_addr, guest_lib_dir, run_program, run_program_with, static_apps_dir, text,
    Daemon,
};

/// The apps whose checks hold without kernel results. The cuBLAS ones (cublas_*,
/// cublaslt_matmul, managed_cublas) check their products: NVIDIA's cuBLAS computes them
/// with its own kernels, which only a GPU runs (tests/gpu/run.sh compares them there).
const APPS: &[&str] = &[
    "device_assert",
    "device_pair",
    "device_query",
    "driver_legacy_launch",
    "driver_library",
    "dynamic_shared",
    "errors",
    "events",
    // Its conditions are set by kernels: on the double each keeps its default, and the
    // program checks only that every call returns.
    "graph_conditional",
    "graph_edges",
    "graph_memory",
    "graphs",
    "hand_graphs",
    "illegal_address",
    "ipc_processes",
    "launch_api",
    "launch_runs",
    "matmul",
    "mem_pools",
    "mem_pools_explicit",
    "memcpy_kinds",
    "multi_gpu",
    "multithread",
    "occupancy_attrs",
    "per_thread_stream",
    "pointer_mem",
    "pool_processes",
    "pool_sharing",
    "printf_buffered",
    "printf_kernel",
    "runtime_queries",
    "runtime_rest",
    "stream_attributes",
    "streams",
    "struct_params",
    "symbols",
    "templates",
    "textures",
    "thread_waits",
    "vector_add",
    "zero_copy",
];

fn launches_of<'a>(records: &'a [serde_json::Value], kernel: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["kernel"] == kernel).collect()
}

fn param_bytes(record: &serde_json::Value) -> Vec<u8> {
    let hex = record["params"].as_str().expect("hex params");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// `app` run through `d` with a `VMCUDA_PROFILE` summary: its output and the summary.
fn profiled(d: &Daemon, app: &str) -> (std::process::Output, String) {
    let summary = std::env::temp_dir().join(format!("vmcuda-{app}-{}.txt", std::process::id()));
    let out = run_program_with(
        &apps_dir().join(app),
        &d.server(),
        &[("VMCUDA_PROFILE", summary.to_str().unwrap())],
    );
    let profile = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    (out, profile)
}

/// A driver call's calls, waited round trips and posted requests in a profile summary.
fn profile_row(profile: &str, call: &str) -> (u64, u64, u64) {
    let line = profile
        .lines()
        .find(|l| l.split_whitespace().next() == Some(call))
        .unwrap_or_else(|| panic!("no {call} row in:\n{profile}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let n = |i: usize| cols[i].parse().unwrap();
    (n(1), n(5), n(6))
}

/// Every app run through `d` with `env`: the failures, each with its output.
fn failing_apps(d: &Daemon, env: &[(&str, &str)]) -> Vec<String> {
    let mut failures = Vec::new();
    for app in APPS {
        let out = run_program_with(&apps_dir().join(app), &d.server(), env);
        let stdout = text(&out.stdout);
        if !out.status.success() || stdout.contains("FAIL ") || stdout.contains("MISMATCH ") {
            failures.push(format!(
                "{app}: {:?}\n{stdout}\n{}",
                out.status,
                text(&out.stderr)
            ));
        }
    }
    failures
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn every_app_runs_and_passes_its_own_checks() {
    let d = Daemon::host_memory("all");
    let failures = failing_apps(&d, &[]);
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    assert!(
        d.log().contains("NOT executed"),
        "the host says plainly that kernels did not run"
    );
}

/// Polling before sleeping (on by default only where there are cores to spare, so
/// not on CI's two) changes when bytes are read, never which: every program passes
/// with both sides polling, and the daemon says it polls.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn every_app_passes_with_guest_and_host_polling() {
    let poll = [("VMCUDA_POLL_US", "200")];
    let d = Daemon::start_with_env("polling", None, &poll, &["--executor", "host-memory"]);
    let failures = failing_apps(&d, &poll);
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    assert!(
        d.log().contains("workers poll 200 us for each request"),
        "{}",
        d.log()
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn struct_arguments_are_marshalled_byte_for_byte() {
    let d = Daemon::host_memory("structs");
    let out = d.run_app("struct_params");
    assert!(out.status.success(), "{}", text(&out.stdout));
    let records = d.launches();

    // k_small(u64* out, S1{'x'}, S3{1,2,3}, S7{'a'..'g'}, S13{200..212})
    let small = launches_of(&records, "_Z7k_smallPy2S12S32S73S13");
    assert_eq!(small.len(), 1);
    assert_eq!(
        small[0]["param_layout"],
        serde_json::json!([[0, 8], [8, 1], [9, 3], [12, 7], [19, 13]])
    );
    let p = param_bytes(small[0]);
    assert_eq!(p.len(), 32);
    assert_eq!(p[8], b'x');
    assert_eq!(&p[9..12], &[1, 2, 3]);
    assert_eq!(&p[12..19], b"abcdefg");
    assert_eq!(&p[19..32], &(200u8..213).collect::<Vec<_>>()[..]);
    assert_ne!(
        u64::from_le_bytes(p[..8].try_into().unwrap()),
        0,
        "a real device pointer travels"
    );

    // k_aligned(u64*, char 'p', S24, char 'm', CD, short -300, A16, char 'z'): offsets
    // follow the device ABI's alignment, not the host's packing.
    let aligned = launches_of(&records, "_Z9k_alignedPyc3S24c2CDs3A16c");
    assert_eq!(aligned.len(), 1);
    let p = param_bytes(aligned[0]);
    assert_eq!((p[8], p[40], p[112]), (b'p', b'm', b'z'));
    assert_eq!(i16::from_le_bytes([p[64], p[65]]), -300);

    // The 4 KiB by-value struct arrives whole.
    let big: Vec<_> = records
        .iter()
        .filter(|r| r["kernel"].as_str().unwrap().contains("Big4K"))
        .collect();
    assert!(!big.is_empty(), "the 4 KiB struct kernel was launched");
    assert!(param_bytes(big[0]).len() >= 4096);
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn launch_shapes_streams_and_templates_are_recorded() {
    let d = Daemon::host_memory("shapes");
    for app in ["vector_add", "templates", "dynamic_shared", "streams"] {
        let out = d.run_app(app);
        assert!(out.status.success(), "{app}: {}", text(&out.stdout));
    }
    let records = d.launches();
    let names: HashSet<&str> = records
        .iter()
        .map(|r| r["kernel"].as_str().unwrap())
        .collect();
    // Template instantiations travel by their mangled names.
    assert!(
        names
            .iter()
            .any(|n| n.contains('I') && n.ends_with("EvPT_S0_") || n.contains("IiE")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("IfE")),
        "float instantiation: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("IdE")),
        "double instantiation: {names:?}"
    );
    // Dynamic shared memory sizes arrive as given, including the 100 KiB opt-in.
    assert!(
        records.iter().any(|r| r["shared_mem"] == 100 * 1024),
        "100 KiB launch recorded"
    );
    // Work on guest-made streams arrives with their handles, not the default stream's.
    let streams: HashSet<u64> = records
        .iter()
        .map(|r| r["stream"].as_u64().unwrap())
        .collect();
    assert!(
        streams.len() >= 16,
        "launches on at least 16 distinct streams, got {streams:?}"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn error_codes_match_cuda_13() {
    let d = Daemon::host_memory("errors");
    let out = d.run_app("errors");
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    // Lines measured from a native run on the H200; these need no kernel.
    for expected in [
        "code   710: cudaErrorAssert | device-side assert triggered",
        "code 12345: unrecognized error code | unrecognized error code",
        "cudaMalloc(1<<50): cudaErrorMemoryAllocation",
        "launch block=2048                        -> cudaSuccess (peek=cudaErrorInvalidValue",
        "cudaLaunchKernel(host function)          -> cudaErrorInvalidResourceHandle",
        "cudaDeviceSetLimit(bad limit)            -> cudaErrorInvalidValue",
        "cudaMemcpyToSymbol(bad symbol)           -> cudaErrorInvalidSymbol",
    ] {
        assert!(
            stdout.contains(expected),
            "missing `{expected}` in:\n{stdout}"
        );
    }
}

/// Host functions and stream callbacks run in stream order, hold back what follows
/// them, and wait for their stream on a word the GPU writes.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn host_functions_run_asynchronously_in_stream_order() {
    let d = Daemon::host_memory("hostfn");
    let (out, profile) = profiled(&d, "streams");
    let stdout = text(&out.stdout);
    // Each of the 13 host functions waited for its stream on a word the GPU writes
    // (one posted write each), not by asking the host.
    let words = profile
        .lines()
        .find(|l| l.split_whitespace().next() == Some("StreamWriteValue32"))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    assert_eq!(
        words.as_deref(),
        Some("StreamWriteValue32 0 13"),
        "{profile}"
    );
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("callback order (12): 1 2 3 4 5 6 7 8 9 10 11 12"),
        "{stdout}"
    );
    assert!(
        stdout.contains("blocked stream query: cudaErrorNotReady"),
        "{stdout}"
    );
    assert!(
        stdout.contains("blocked event query: cudaErrorNotReady"),
        "{stdout}"
    );
    assert!(
        stdout.contains("released stream query: cudaSuccess"),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn a_missing_server_is_reported_clearly() {
    let out = run_program(
        &apps_dir().join("vector_add"),
        "unix:/nonexistent/vmcuda.sock",
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no vmcuda host answers at unix:/nonexistent/vmcuda.sock"),
        "{stderr}"
    );
    assert!(
        text(&out.stdout).contains("cudaErrorNoDevice"),
        "the program sees no device"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn calls_travel_through_the_command_ring_and_the_socket_still_works_without_it() {
    let d = Daemon::host_memory("ring");
    let app = vmcuda_tests::apps_dir().join("multithread");
    for (ring, env) in [(true, "1"), (false, "0")] {
        let out = vmcuda_tests::run_program_with(
            &app,
            &d.server(),
            &[("VMCUDA_VERBOSE", "1"), ("VMCUDA_RING", env)],
        );
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{}{stderr}", text(&out.stdout));
        assert_eq!(
            stderr.contains("calls travel through a command ring in shared memory"),
            ring,
            "{stderr}"
        );
    }
    assert!(!d.log().contains("broke the command ring"), "{}", d.log());
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn pinned_memory_is_shared_with_a_same_host_backend() {
    let d = Daemon::host_memory("shared");
    let (out, summary) = profiled(&d, "pointer_mem");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("pinned buffers made again: 20 of 20 work"),
        "{stdout}"
    );
    // Freed pinned buffers are made again from what the guest kept: of the 22
    // allocations, the two of the program's first sizes and flags wait for the host,
    // and the freed ones are kept without a request.
    let row = |name: &str| {
        let (calls, waited, _) = profile_row(&summary, name);
        (calls, waited)
    };
    let (calls, waited) = row("cuMemHostAlloc");
    assert!(calls >= 21, "{summary}");
    assert!(
        waited <= 4,
        "{calls} allocations waited {waited} times:\n{summary}"
    );
    let (calls, waited) = row("cuMemFreeHost");
    assert!(calls >= 21, "{summary}");
    assert!(
        waited <= 4,
        "{calls} frees waited {waited} times:\n{summary}"
    );
    assert!(
        stdout.contains("cudaHostGetDevicePointer(mapped): cudaSuccess same-as-host:yes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cudaHostGetDevicePointer(registered): cudaSuccess same-as-host:yes"),
        "{stdout}"
    );
    // The kernels of zero_copy get the pinned buffers' own addresses as arguments.
    let out = d.run_app("zero_copy");
    assert!(out.status.success(), "{}", text(&out.stdout));
    let gather = d
        .launches()
        .into_iter()
        .find(|r| r["kernel"] == "_Z6gatherPKiPii")
        .expect("gather launched");
    let hex = gather["params"].as_str().unwrap();
    let input = u64::from_str_radix(&hex[..16], 16).unwrap().swap_bytes();
    // The host-memory executor's device addresses start at 0x2000_0000_0000.
    assert!(
        input != 0 && !(0x2000_0000_0000..0x3000_0000_0000).contains(&input),
        "a guest host address, not a device allocation: {input:#x}"
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn tcp_transport_runs_programs_and_falls_back_from_shared_memory() {
    let addr = free_tcp_addr();
    let _daemon = Daemon::start_with_config(
        "tcp",
        Some(&format!(
            "[[vm]]\nname = \"tcp-guest\"\ntcp = true\ntoken = \"{TCP_TOKEN}\"\n"
        )),
        &["--executor", "host-memory", "--tcp", &addr],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "daemon never listened on {addr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let server = format!("tcp:{addr}");
    let token = [("VMCUDA_TOKEN", TCP_TOKEN)];
    for app in ["memcpy_kinds", "streams", "symbols"] {
        let out = run_program_with(&apps_dir().join(app), &server, &token);
        assert!(
            out.status.success(),
            "{app} over TCP: {}",
            text(&out.stdout)
        );
    }
    // No descriptors over TCP: pinned memory stays private, and mapping it says so.
    let out = run_program_with(&apps_dir().join("pointer_mem"), &server, &token);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("cudaHostGetDevicePointer(mapped): cudaErrorNotSupported"),
        "{stdout}"
    );
    assert!(
        stdout.contains("copies through pinned/registered/mapped/plain: ok"),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("not shared with the host"));

    // Without the token, or with another, the program is told why, and gets no device.
    let dir = std::env::temp_dir().join(format!("vmcuda-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TCP_TOKEN}\n")).unwrap();
    let from_file = [("VMCUDA_TOKEN_FILE", token_file.to_str().unwrap())];
    let out = run_program_with(&apps_dir().join("vector_add"), &server, &from_file);
    assert!(
        out.status.success(),
        "a token file serves as well: {}",
        text(&out.stderr)
    );
    for (env, told) in [
        (&[][..], "need a token"),
        (
            &[("VMCUDA_TOKEN", "not-the-token-at-all")][..],
            "not accepted",
        ),
    ] {
        let out = run_program_with(&apps_dir().join("vector_add"), &server, env);
        let stderr = text(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("refused this program") && stderr.contains(told),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const TCP_TOKEN: &str = "apps-test-token-0123456789";

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn tls_transport_runs_programs_and_refuses_untrusted_hosts_and_plain_guests() {
    use vmcuda_wire::tls::testing::TestPki;
    let dir = std::env::temp_dir().join(format!("vmcuda-apps-tls-{}", std::process::id()));
    // The host's certificate names "gpuhost.test" and 127.0.0.1; a stranger's CA
    // signed nothing of it.
    let pki = TestPki::new(&dir.join("host"), &["gpuhost.test", "127.0.0.1"]);
    let stranger = TestPki::new(&dir.join("stranger"), &["127.0.0.1"]);
    let (mut daemon, addr) = Daemon::tls("tls", &pki.cert, &pki.key, "tls-guest", TCP_TOKEN);
    let tls = format!("tls:{addr}");
    let ca = pki.ca.to_str().unwrap();
    let trusted = [("VMCUDA_TOKEN", TCP_TOKEN), ("VMCUDA_TLS_CA", ca)];
    let run = |server: &str, env: &[(&str, &str)]| {
        let out = run_program_with(&apps_dir().join("memcpy_kinds"), server, env);
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };

    // Real programs over TLS, copies and all.
    for app in ["memcpy_kinds", "vector_add"] {
        let out = run_program_with(&apps_dir().join(app), &tls, &trusted);
        assert!(
            out.status.success(),
            "{app} over TLS: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    // Asking for the certificate's other name.
    let (ok, _, stderr) = run(
        &tls,
        &[
            ("VMCUDA_TOKEN", TCP_TOKEN),
            ("VMCUDA_TLS_CA", ca),
            ("VMCUDA_TLS_NAME", "gpuhost.test"),
        ],
    );
    assert!(ok, "{stderr}");

    // Each failure is one line that says what went wrong, and no device.
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Env, &[&str]); 4] = [
        (
            &[
                ("VMCUDA_TOKEN", TCP_TOKEN),
                ("VMCUDA_TLS_CA", stranger.ca.to_str().unwrap()),
            ],
            &["UnknownIssuer", "not signed by a CA in"],
        ),
        (
            &[
                ("VMCUDA_TOKEN", TCP_TOKEN),
                ("VMCUDA_TLS_CA", ca),
                ("VMCUDA_TLS_NAME", "elsewhere.test"),
            ],
            &["not valid for name", "VMCUDA_TLS_NAME"],
        ),
        (
            &[
                ("VMCUDA_TOKEN", TCP_TOKEN),
                ("VMCUDA_TLS_CA", "/nonexistent/ca.pem"),
            ],
            &["/nonexistent/ca.pem"],
        ),
        // TLS or not, the token is needed.
        (&[("VMCUDA_TLS_CA", ca)], &["need a token"]),
    ];
    for (env, told) in cases {
        let (ok, stdout, stderr) = run(&tls, env);
        assert!(!ok, "{stdout}");
        assert!(
            stdout.contains("cudaErrorNoDevice"),
            "the program sees no device: {stdout}"
        );
        let vmcuda: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("vmcuda:"))
            .collect();
        assert_eq!(vmcuda.len(), 1, "{stderr}");
        for t in told {
            assert!(vmcuda[0].contains(t), "{t:?} not in {stderr}");
        }
        if told[0] != "need a token" {
            assert!(vmcuda[0].starts_with(&format!("vmcuda: TLS to {addr} failed: ")));
        }
    }

    // A plain-TCP guest is told to use TLS; the daemon serves others as before.
    let (ok, _, stderr) = run(&format!("tcp:{addr}"), &trusted);
    assert!(!ok);
    assert!(
        stderr.contains("refused this program") && stderr.contains("only over TLS"),
        "{stderr}"
    );
    assert!(daemon.alive());
    let (ok, _, stderr) = run(&tls, &trusted);
    assert!(ok, "{stderr}");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn hybrid_vsock_listener_serves_the_vmm_socket_convention() {
    // Firecracker and cloud-hypervisor forward a guest's connection to vsock port P
    // by connecting to the Unix socket `<uds_path>_P` on the host; this is that
    // connection, made the way the VMM makes it.
    let dir = std::env::temp_dir().join(format!("vmcuda-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vmm_socket = dir.join("fc-vm1.vsock");
    // The configuration names the VM whose socket it is; a socket no VM claims (given
    // on the command line only) is served, but its guests are refused.
    let unclaimed = dir.join("fc-stranger.vsock");
    let _daemon = Daemon::start_with_config(
        "hybrid",
        Some(&format!(
            "[[vm]]\nname = \"fc-vm1\"\nhybrid_vsock = \"{}\"\n",
            vmm_socket.display()
        )),
        &[
            "--executor",
            "host-memory",
            "--hybrid-vsock",
            unclaimed.to_str().unwrap(),
            "--port",
            "7731",
        ],
    );
    let listener = dir.join("fc-vm1.vsock_7731");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !listener.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no listener at {}",
            listener.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = run_program(
        &apps_dir().join("memcpy_kinds"),
        &format!("unix:{}", listener.display()),
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    let out = run_program(
        &apps_dir().join("memcpy_kinds"),
        &format!("unix:{}_7731", unclaimed.display()),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not allowed to use the host's GPUs"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The exported dynamic symbols of an ELF file: (name, version, defined).
fn dyn_syms(path: &std::path::Path) -> Vec<(String, String, bool)> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(path)
        .output()
        .expect("readelf");
    text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() < 8 || !cols[0].ends_with(':') || cols[0] == "Num:" {
                return None;
            }
            let (name, version) = cols[7]
                .split_once('@')
                .map(|(n, v)| (n, v.trim_start_matches('@')))
                .unwrap_or((cols[7], ""));
            Some((name.to_string(), version.to_string(), cols[6] != "UND"))
        })
        .collect()
}

/// The address of an exported symbol.
fn address(path: &std::path::Path, symbol: &str) -> String {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(path)
        .output()
        .expect("readelf");
    text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.len() >= 8 && c[7] == symbol && c[6] != "UND")
        .map(|c| c[1].to_string())
        .unwrap_or_else(|| panic!("{symbol} is not exported"))
}

/// The `DT_NEEDED` entries of an ELF file, in order.
fn needed(path: &std::path::Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["-d", "-W"])
        .arg(path)
        .output()
        .expect("readelf");
    text(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

/// Each thread's default stream is a stream of its own on the host: the four worker
/// threads' `fill` launches and the two threads of the side-by-side check land on
/// distinct streams, none of them the legacy or the host's shared per-thread stream.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn each_threads_default_stream_is_its_own() {
    let d = Daemon::host_memory("per-thread");
    let out = d.run_app("per_thread_stream");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("destroy cudaStreamPerThread: cudaErrorInvalidResourceHandle"));
    let records = d.launches();
    let streams = |kernel: &str| -> Vec<u64> {
        launches_of(&records, kernel)
            .iter()
            .map(|r| r["stream"].as_u64().expect("a stream"))
            .collect()
    };
    let fills: HashSet<u64> = streams("_Z4fillPiiii").into_iter().collect();
    assert_eq!(fills.len(), 4, "{fills:?}");
    // Each kernel runs once on the main thread first, then on threads a and b.
    let (wait, set) = (streams("_Z9wait_flagPViPi"), streams("_Z8set_flagPVi"));
    assert_eq!((wait.len(), set.len()), (2, 2));
    assert_eq!(wait[0], set[0], "the main thread's default stream");
    let threads: HashSet<u64> = [wait[0], wait[1], set[1]].into_iter().collect();
    assert_eq!(threads.len(), 3, "{wait:?} {set:?}");
    for s in fills.iter().chain(&wait).chain(&set) {
        assert!(*s > 2, "stream {s} is a default stream of the host");
    }
}

/// `cudaDeviceGetP2PAttribute`, generated from its op-table line, reaches the host's
/// executor: one device is not its own peer.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn device_query_asks_the_host_for_p2p_attributes() {
    let d = Daemon::host_memory("p2p");
    let out = d.run_app("device_query");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("cudaDeviceGetP2PAttribute(0,0): cudaErrorInvalidDevice"),
        "{stdout}"
    );
}

/// multi_gpu on one pretend device, then on two: threads on their own devices at once,
/// pointer attributes naming the owning device, peer copies both ways, cudaMemcpyDefault
/// between the two devices' pointers with device 0 current, and a device-0 stream
/// waiting for an event of a device-1 stream. The test double's devices cannot reach
/// each other, so peer access is refused and its checks are skipped (the GPU runs them).
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn multi_gpu_runs_on_one_device_and_across_two() {
    let one = Daemon::host_memory("one-device");
    let out = one.run_app("multi_gpu");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "device count: 1",
        "cudaSetDevice(count): cudaErrorInvalidDevice",
        "threads on their own devices at once: 4 threads over 1 device(s)",
        "peer checks skipped: 1 device",
        "PASS multi_gpu",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }

    let two = Daemon::start(
        "two-devices",
        &["--executor", "host-memory", "--host-memory-devices", "2"],
    );
    let out = two.run_app("multi_gpu");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "device count: 2",
        "device 1: compute capability 9.0, unified addressing 1",
        "thread 1 on device 1: cudaGetDevice ok, pointer on device 1",
        "thread 2 on device 0: cudaGetDevice ok, pointer on device 0",
        "threads on their own devices at once: 4 threads over 2 device(s)",
        "cudaDeviceCanAccessPeer(0,1): 0, (1,0): 0",
        "cudaDeviceDisablePeerAccess(1) before any enable: cudaErrorPeerAccessNotEnabled",
        "pointer attributes of device 1's buffer: type Device, device 1",
        "pointer attributes of device 1's buffer + 4 KiB: type Device, device 1",
        "cudaMemcpyPeer 0->1 and cudaMemcpyPeerAsync 1->0, 4 MiB: ok",
        "cudaMemcpyDefault host->1, 1->0, 0->1, 1->host with device 0 current: ok",
        "waited for by a device-0 stream: stale words 0",
        "direct-access checks skipped: no peer access between devices 0 and 1",
        "PASS multi_gpu",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
}

/// The driver API through the guest libcuda.so.1 (tests/apps/driver_api.cu opens it
/// with dlopen) on the host-memory executor: everything but kernels works, and what
/// needs the real driver (JIT-compiling PTX, linking) is a clean CUDA error.
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn driver_api_runs_through_the_guest_libcuda() {
    let d = Daemon::host_memory("driver-api");
    let out = d.run_app("driver_api");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL "), "{stdout}");
    for line in [
        "PASS cuDeviceGetCount before cuInit: CUDA_ERROR_NOT_INITIALIZED",
        "PASS HtoD, DtoD, DtoH round trip",
        "PASS address range is the allocation",
        "PASS buffer ids are nonzero, one per allocation, the same inside one",
        // Functions generated from their op-table line (cuCtxSetLimit/GetLimit are
        // the ops cudaDeviceSetLimit/GetLimit are).
        "PASS the printf FIFO is at least what was set",
        "PASS cuCtxGetLimit(NULL): CUDA_ERROR_INVALID_VALUE",
        "PASS cuDeviceGetP2PAttribute(device, itself): CUDA_ERROR_INVALID_DEVICE",
        "after memsets: 12341234 12341234 5a5a5a5a deadbeef",
        "PASS cuMemsetD32 on a wild pointer: CUDA_ERROR_INVALID_VALUE",
        "stream results: 4242 1 77 77 15",
        // PTX needs the driver's JIT: the test executor refuses it as an image.
        "cuModuleLoadData(PTX): CUDA_ERROR_INVALID_IMAGE",
        "cuModuleLoadDataEx(PTX): CUDA_ERROR_INVALID_IMAGE",
        "PASS cuModuleLoadDataEx's logs are NUL-terminated",
        "PASS cuModuleLoadDataEx's error log is filled only on failure",
        "cuLinkComplete: CUDA_ERROR_NOT_SUPPORTED",
        "PASS cuMemMap over a mapping: CUDA_ERROR_INVALID_VALUE",
        "mapped words: 11111111 22222222",
        "PASS retained handle is the mapped one",
        "PASS cuMemAddressFree: CUDA_SUCCESS",
        "PASS cuMemAlloc through cuGetProcAddress: CUDA_SUCCESS",
        "unknown symbol status 1, pointer NULL",
        "PASS cuMemGetAttribute by name: CUDA_ERROR_NOT_SUPPORTED",
        "PASS cuMemGetAttribute_v2 by name: CUDA_ERROR_NOT_SUPPORTED",
        "cuGetProcAddress(cuMemGetAttribute_v2): status 1, pointer NULL",
        "PASS driver_api: 0 failure(s)",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    assert!(d.log().contains("cannot link device code"), "{}", d.log());
}

/// Pointer queries about any pointer, answered as the driver answers them (widths,
/// defaults for memory CUDA does not know, `CUDA_ERROR_INVALID_VALUE` where the driver
/// gives it), and the older ABI names of driver functions
/// (tests/apps/driver_legacy.cu).
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn pointer_queries_and_legacy_names_answer_as_the_driver() {
    let d = Daemon::host_memory("driver-legacy");
    let out = d.run_app("driver_legacy");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL "), "{stdout}");
    for line in [
        "device: 0 attribute(s) written at another width",
        "pinned: 0 attribute(s) written at another width",
        "heap: 0 attribute(s) written at another width",
        "heap pointer: CUDA_SUCCESS, type 0, context NULL, ordinal -2, managed 0, mapped 0, \
         access 0, host pointer is itself 1, range untouched 1",
        "device pointer: CUDA_SUCCESS, type 2, ordinal 0, managed 0, mapped 1, access 3, \
         host pointer NULL, range start is the allocation 1, size 1048576",
        "device memory's host pointer alone: CUDA_ERROR_INVALID_VALUE",
        "P2P tokens of unknown memory through cuPointerGetAttributes: CUDA_ERROR_INVALID_VALUE",
        "PASS buffer ids: one per allocation",
        "sync memops before: 0",
        "cuPointerSetAttribute(SYNC_MEMOPS): CUDA_SUCCESS, then 1",
        "cuPointerSetAttribute on unknown memory: CUDA_ERROR_INVALID_VALUE",
        "cuPointerSetAttribute(MEMORY_TYPE): CUDA_ERROR_INVALID_VALUE",
        "cuMemAlloc (32-bit) in a current-API context: CUDA_ERROR_INVALID_CONTEXT",
        "cuMemGetInfo (32-bit) in a current-API context: CUDA_ERROR_INVALID_CONTEXT",
        "PASS cuDeviceTotalMem (32-bit) is the size clamped to 32 bits",
        "cuStreamDestroy: CUDA_SUCCESS",
        "PASS cuEventElapsedTime",
        "cuEventDestroy: CUDA_SUCCESS",
        "cuCtxPushCurrent (v1): CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent (v1): CUDA_SUCCESS",
        "cuCtxGetDevice_v2(NULL): CUDA_SUCCESS, device 0",
        "cuCtxSynchronize_v2(current): CUDA_SUCCESS",
        "PASS cuDeviceGetUuid is cuDeviceGetUuid_v2's",
        "PASS cuGetProcAddress (v1) finds cuMemAlloc_v2",
        "PASS cuGraphAddDependencies, cuGraphGetEdges",
        "PASS the edge is seen from both nodes",
        "cuGraphInstantiate (with log): CUDA_SUCCESS, exec set",
        "cuGraphExecUpdate (v1) with its own graph: CUDA_SUCCESS, result 0",
        "PASS cuGraphRemoveDependencies",
        "cuStreamBeginCapture (no mode): CUDA_SUCCESS; cuStreamGetCaptureInfo (v1): CUDA_SUCCESS, \
         status 1, id set",
        "PASS cuDeviceComputeCapability is the compute capability attributes",
        "PASS cuDeviceGetProperties is device attributes 1 to 14",
        "cuProfilerInitialize: CUDA_ERROR_NOT_SUPPORTED",
        "cuCoredumpGetAttributeGlobal(TRIGGER_HOST): CUDA_SUCCESS, 1",
        "a boolean asked with 4 bytes: CUDA_ERROR_INVALID_VALUE",
        "cuCoredumpSetAttributeGlobal(LIGHTWEIGHT, 1): CUDA_SUCCESS, then 1",
        "cuCoredumpGetAttribute(ENABLE_ON_EXCEPTION): CUDA_SUCCESS, 0",
        "PASS cuMemsetD2D16 sets each row's elements only",
        "PASS cuMemsetD2D32Async sets each row's elements only",
        "cuMemsetD2D32 with a pitch under the row: CUDA_ERROR_INVALID_VALUE",
        "cuDevicePrimaryCtxSetFlags (v1) while active: CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
        "cuDevicePrimaryCtxRelease (v1): CUDA_SUCCESS",
        "cuCtxDestroy (v1) of the primary context: CUDA_ERROR_INVALID_CONTEXT",
        "PASS driver_legacy: 0 failure(s)",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // The 32-bit ABI says once why it answers as it does.
    assert!(
        stderr.contains("cuMemAlloc (libcuda.so.1) belongs to the CUDA 3 API"),
        "{stderr}"
    );
}

/// The older driver entry points (tests/apps/driver_legacy_launch.cu): the launch ABI
/// before cuLaunchKernel launches what cuFuncSetBlockShape, cuFuncSetSharedSize and
/// cuParamSet* set (the launch log shows the shapes and the bytes: a parameter written
/// past cuParamSetSize's size is taken but not passed, as NVIDIA's driver does), with
/// the driver's errors for foreign functions;
/// cuLaunchCooperativeKernelMultiDevice launches cooperatively; context usage counts,
/// events over a context, the execution affinity, the LUID answer; array copies and
/// cuMemcpy3DPeer move what they should, per-thread variants included.
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn the_older_driver_entry_points_launch_copy_and_answer_as_the_driver() {
    let d = Daemon::host_memory("driver-legacy-launch");
    let out = d.run_app("driver_legacy_launch");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL "), "{stdout}");
    for line in [
        "PASS cuParamSeti past the size: CUDA_SUCCESS",
        "PASS cuParamSetv past the end: CUDA_SUCCESS",
        "PASS cuLaunchGrid: CUDA_SUCCESS",
        "PASS cuLaunch: CUDA_SUCCESS",
        "PASS cuLaunchGridAsync: CUDA_SUCCESS",
        "PASS cuFuncSetBlockShape(NULL): CUDA_ERROR_INVALID_HANDLE",
        "PASS cuLaunchCooperativeKernelMultiDevice: CUDA_SUCCESS",
        "PASS cuCtxAttach passes back the current context",
        "PASS cuCtxRecordEvent: CUDA_SUCCESS",
        "PASS cuCtxWaitEvent: CUDA_SUCCESS",
        "cuCtxGetExecAffinity(SM_COUNT): CUDA_SUCCESS",
        "PASS the context's SM count is the device's",
        "cuDeviceGetLuid: CUDA_ERROR_NOT_SUPPORTED",
        "PASS cuMemcpyAtoA moved the rows asked for",
        "PASS cuMemcpyAtoA within a row",
        "PASS the per-thread array copies",
        "PASS cuMemcpy3DPeer moved the box",
        "PASS cuMemcpy3DPeerAsync moved the box",
        "PASS driver_legacy_launch: 0 failure(s)",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // No stub was reached.
    assert!(!stderr.contains("CUDA_ERROR_NOT_SUPPORTED"), "{stderr}");

    let records = d.launches();
    let launches = launches_of(&records, "_Z11legacy_fillPifi3Tag");
    let shape = |r: &serde_json::Value| {
        (
            r["grid"].clone(),
            r["block"].clone(),
            r["shared_mem"].as_u64(),
        )
    };
    let shapes: Vec<_> = launches.iter().map(|r| shape(r)).collect();
    let json = |v: [u32; 3]| serde_json::json!(v);
    // cuLaunchGrid(3, 2), cuLaunch, cuLaunchGridAsync(2, 1) with a 32x2 block and 128
    // bytes of shared memory; then two cooperative launches of 2 blocks of 64.
    assert_eq!(
        shapes,
        vec![
            (json([3, 2, 1]), json([32, 2, 1]), Some(128)),
            (json([1, 1, 1]), json([32, 2, 1]), Some(128)),
            (json([2, 1, 1]), json([32, 2, 1]), Some(128)),
            (json([2, 1, 1]), json([64, 1, 1]), Some(0)),
            (json([2, 1, 1]), json([64, 1, 1]), Some(0)),
        ],
        "{records:?}"
    );
    let p = param_bytes(launches[0]);
    assert_eq!(p.len(), 20);
    assert_ne!(
        u64::from_le_bytes(p[..8].try_into().unwrap()),
        0,
        "the pointer"
    );
    assert_eq!(f32::from_le_bytes(p[8..12].try_into().unwrap()), 2.5);
    assert_eq!(i32::from_le_bytes(p[12..16].try_into().unwrap()), 7);
    assert_eq!(&p[16..20], &[1, 2, 3, 4]);
    let q = param_bytes(launches[3]);
    assert_eq!(&p[..8], &q[..8], "the same buffer");
    assert_eq!(f32::from_le_bytes(q[8..12].try_into().unwrap()), 1.0);
    assert_eq!(i32::from_le_bytes(q[12..16].try_into().unwrap()), 3);
}

/// The driver's stubs: every export of the real libcuda.so.1 that the built one does
/// not implement (no `__vmcuda_<name>` beside it), outside the families that do not
/// cross the VM boundary (guest-lib/exports/libcuda-families.txt), is exactly the
/// committed list guest-lib/exports/libcuda-stubs.txt: a new stub fails this test, and
/// an implementation must remove its line, so the list only shrinks (the goal is none).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn the_drivers_remaining_stubs_are_the_committed_list() {
    let exports_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-lib/exports");
    let read = |file: &str| {
        let path = exports_dir.join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let listed = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let families: Vec<Vec<String>> = listed(&read("libcuda-families.txt"))
        .iter()
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect();
    let in_family = |name: &str| {
        families.iter().flatten().any(|p| {
            match p.strip_prefix('*').and_then(|p| p.strip_suffix('*')) {
                Some(inner) => name.contains(inner),
                None => name.starts_with(p.as_str()),
            }
        })
    };
    let implemented: HashSet<String> = dyn_syms(&guest_lib_dir().join("libcuda.so.1"))
        .into_iter()
        .filter(|(_, _, defined)| *defined)
        .filter_map(|(name, _, _)| name.strip_prefix("__vmcuda_").map(String::from))
        .collect();
    let exports = listed(&read("libcuda.so.1.txt"));
    let excluded = exports.iter().filter(|n| in_family(n)).count();
    let stubs: Vec<&String> = exports
        .iter()
        .filter(|n| !implemented.contains(n.as_str()) && !in_family(n))
        .collect();
    let committed = listed(&read("libcuda-stubs.txt"));
    println!(
        "libcuda.so.1: {} exports, {excluded} in the families left out, {} stubs besides",
        exports.len(),
        stubs.len()
    );
    let new: Vec<&&String> = stubs.iter().filter(|n| !committed.contains(n)).collect();
    let gone: Vec<&String> = committed.iter().filter(|n| !stubs.contains(n)).collect();
    assert!(new.is_empty(), "stubs not in libcuda-stubs.txt: {new:?}");
    assert!(
        gone.is_empty(),
        "implemented now, remove from libcuda-stubs.txt: {gone:?}"
    );
}

/// Every app built a second time with nvcc's default static runtime (NVIDIA's
/// runtime inside the program, reaching the GPU through vmcuda's `libcuda.so.1`
/// alone: its export tables, `cuGetProcAddress`, `cuLibrary*`) prints exactly what the
/// same app prints on NVIDIA's shared runtime, exits alike, and meets no driver
/// function vmcuda lacks.
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn every_app_on_the_static_runtime_matches_the_shared_one() {
    let d = Daemon::host_memory("static-runtime");
    let verbose = [("VMCUDA_VERBOSE", "1")];
    let mut differences = Vec::new();
    let mut apps: Vec<&str> = APPS.to_vec();
    apps.push("static_cudart");
    for app in apps {
        let shared = run_program(&apps_dir().join(app), &d.server());
        let stat = run_program_with(&static_apps_dir().join(app), &d.server(), &verbose);
        let stderr = text(&stat.stderr);
        let missing: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("is not implemented by vmcuda") || l.contains("internal error"))
            .collect();
        if text(&shared.stdout) != text(&stat.stdout)
            || shared.status.code() != stat.status.code()
            || !missing.is_empty()
        {
            differences.push(format!(
                "{app}: shared {:?}, static {:?}\n--- shared\n{}\n--- static\n{}\n{stderr}",
                shared.status,
                stat.status,
                text(&shared.stdout),
                text(&stat.stdout)
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n=====\n"));
    // NVIDIA's runtime loaded the kernels through the library calls, and the
    // launches reached the host.
    assert!(!launches_of(&d.launches(), "_Z7add_onePi").is_empty());
}

/// libcuda.so.1 stands alone (it holds the code libnvidia-ml.so.1 jumps to) and
/// exports the driver's own names with no symbol version (the real one has none): every
/// export of the real driver (guest-lib/exports/libcuda.so.1.txt), the `_v2`... names
/// cuda.h maps the plain ones to, and every driver symbol torch's libraries import.
/// Beside them only the driver's and NVML's implementations, under libcuda's own
/// private node: nothing of a runtime or BLAS library.
#[test]
#[ignore = "needs the linked guest libraries: run tests/run.sh"]
fn libcuda_exports_cuda_h_names_without_versions() {
    let lib = guest_lib_dir().join("libcuda.so.1");
    let all = dyn_syms(&lib);
    // It needs no other vmcuda library, and no private node of one.
    let needs = needed(&lib);
    assert!(
        !needs.iter().any(|n| n.starts_with("libcudart")),
        "{needs:?}"
    );
    assert!(!all.iter().any(|s| s.1 == "VMCUDA_PRIVATE"));
    let (private, syms): (Vec<_>, Vec<_>) = all
        .into_iter()
        .filter(|s| s.2 && s.0 != "VMCUDA_LIBCUDA")
        .partition(|s| s.0.starts_with("__vmcuda_"));
    for (name, version, _) in &private {
        assert_eq!(version, "VMCUDA_LIBCUDA", "{name}");
    }
    assert!(private.iter().any(|s| s.0 == "__vmcuda_cuMemAlloc_v2"));
    assert!(private.iter().any(|s| s.0 == "__vmcuda_nvmlInit_v2"));
    let retired: Vec<_> = private
        .iter()
        .filter(|s| !s.0.starts_with("__vmcuda_cu") || s.0.starts_with("__vmcuda_cublas"))
        .filter(|s| !s.0.starts_with("__vmcuda_nvml"))
        .collect();
    assert!(retired.is_empty(), "{retired:?}");
    assert!(syms.len() > 80, "{} exports", syms.len());
    for (name, version, _) in &syms {
        assert!(version.is_empty(), "{name} carries version {version}");
        assert!(name.starts_with("cu"), "{name} is not a driver name");
    }
    // Every export of the real driver is there.
    let real = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-lib/exports/libcuda.so.1.txt"),
    )
    .expect("the real export list");
    let real: HashSet<&str> = real
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert_eq!(real.len(), 682);
    let exported: HashSet<&str> = syms.iter().map(|s| s.0.as_str()).collect();
    let missing: Vec<_> = real.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // cuda.h of the nvcc wheels (.ci/install-nvcc.sh prints their root; already
    // installed wherever the apps were built).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let install = Command::new("bash")
        .arg(root.join(".ci/install-nvcc.sh"))
        .output()
        .expect("run .ci/install-nvcc.sh");
    let cu13 = text(&install.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let header = std::fs::read_to_string(std::path::Path::new(&cu13).join("include/cuda.h"))
        .expect("cuda.h from the nvcc wheels");
    // cuda.h declares the plain names and maps them to the versioned ones
    // (`#define cuMemAlloc cuMemAlloc_v2`, `__CUDA_API_PTDS(cuMemcpyHtoD_v2)`).
    let flat = header.split_whitespace().collect::<Vec<_>>().join(" ");
    let declared = |name: &str| flat.contains(&format!(" CUDAAPI {name}("));
    let defines: Vec<(String, String)> = header
        .lines()
        .filter_map(|l| {
            let mut t = l.split_whitespace();
            (t.next()? == "#define").then_some(())?;
            let base = t.next()?.to_string();
            let target = t.next()?;
            let target = target
                .trim_start_matches("__CUDA_API_PTDS(")
                .trim_start_matches("__CUDA_API_PTSZ(")
                .trim_end_matches(')');
            Some((base, target.to_string()))
        })
        .collect();
    for (name, _, _) in &syms {
        let mapped = defines.iter().any(|(b, t)| t == name && declared(b));
        assert!(
            declared(name) || mapped || real.contains(name.as_str()),
            "{name} is neither a cuda.h driver function nor a real export"
        );
    }
    let names: HashSet<&str> = syms.iter().map(|s| s.0.as_str()).collect();
    for want in [
        "cuMemAlloc_v2",
        "cuCtxCreate_v4",
        "cuMemcpyHtoD_v2",
        "cuLinkCreate_v2",
        "cuGetProcAddress_v2",
        "cuStreamWriteValue32_v2",
        "cuModuleLoad",
        "cuTensorMapEncodeTiled",
    ] {
        assert!(names.contains(want), "{want} is not exported");
    }
    // The CUDA 3 ABI names (32-bit sizes) are exported, as the real driver's are, but
    // not as the current implementation: shims of their own (driver/legacy.rs).
    assert!(names.contains("cuMemAlloc"));
    assert_ne!(address(&lib, "cuMemAlloc"), address(&lib, "cuMemAlloc_v2"));
    let list = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-lib/exports/torch-2.11.0+cu130-imports.txt"),
    )
    .unwrap();
    for line in list.lines().filter(|l| !l.starts_with('#')) {
        if let Some((importer, symbol)) = line.split_once(' ') {
            if importer != "entry-point" && !symbol.contains('@') {
                assert!(names.contains(symbol), "{importer} imports {symbol}");
            }
        }
    }
}

/// A C program calling the driver's functions vmcuda does not implement, through the
/// guest libcuda.so.1 alone (no runtime, no host).
const DRIVER_STUBS_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
typedef int (*fn0)(void);
typedef int (*fn1)(void *);
typedef int (*gpa)(const char *, void **, int, unsigned long long, int *);
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
    fn0 gl = (fn0)dlsym(h, "cuGLInit");
    fn1 ext = (fn1)dlsym(h, "cuImportExternalMemory");
    fn1 old = (fn1)dlsym(h, "cuMemGetAttribute");
    gpa get = (gpa)dlsym(h, "cuGetProcAddress_v2");
    printf("cuGLInit %d %d\n", gl(), gl());
    printf("cuImportExternalMemory %d\n", ext(0));
    void *f = 0; int q = -1;
    int r = get("cuImportExternalMemory", &f, 13000, 0, &q);
    printf("cuGetProcAddress(cuImportExternalMemory) %d %d %s %d\n", r, q, f ? "set" : "NULL", f ? ((fn1)f)(0) : -1);
    printf("cuMemGetAttribute %d\n", old(0));
    f = 0; q = -1;
    r = get("cuMemGetAttribute", &f, 13000, 0, &q);
    printf("cuGetProcAddress(cuMemGetAttribute) %d %d %s %d\n", r, q, f ? "set" : "NULL", f ? ((fn1)f)(0) : -1);
    f = (void *)1; q = -1;
    r = get("cuGreenCtxCreate", &f, 13000, 0, &q);
    printf("cuGreenCtxCreate %d %d %s\n", r, q, f ? "set" : "NULL");
    return 0;
}
"#;

/// Every export of the real driver that vmcuda does not implement (the families that
/// cannot cross the VM boundary) answers CUDA_ERROR_NOT_SUPPORTED (801) and names
/// itself on stderr, once per function; cuGetProcAddress hands such functions out,
/// except green contexts and multicast. cuMemGetAttribute answers as NVIDIA's does.
#[test]
#[ignore = "needs the linked guest libraries: run tests/run.sh"]
fn unimplemented_driver_functions_name_themselves_and_return_not_supported() {
    let dir = std::env::temp_dir().join(format!("vmcuda-driver-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stubs.c"), DRIVER_STUBS_C).unwrap();
    let built = Command::new("cc")
        .arg(dir.join("stubs.c"))
        .arg("-o")
        .arg(dir.join("stubs"))
        .arg("-ldl")
        .status()
        .expect("cc");
    assert!(built.success());
    let out = Command::new(dir.join("stubs"))
        .arg(guest_lib_dir().join("libcuda.so.1"))
        .env("VMCUDA_SERVER", "unix:/nonexistent")
        .output()
        .expect("run the stubs program");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        "cuGLInit 801 801\ncuImportExternalMemory 801\n\
         cuGetProcAddress(cuImportExternalMemory) 0 0 set 801\ncuMemGetAttribute 801\n\
         cuGetProcAddress(cuMemGetAttribute) 0 1 NULL -1\ncuGreenCtxCreate 0 1 NULL\n"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "vmcuda: cuGLInit (libcuda.so.1) is graphics interop, which cannot cross the VM boundary; it returns CUDA_ERROR_NOT_SUPPORTED",
            // Once, though called by its name and through cuGetProcAddress.
            "vmcuda: cuImportExternalMemory (libcuda.so.1) imports memory or semaphores of another API (Vulkan, Direct3D, NvSci, OS handles), which cannot cross the VM boundary; it returns CUDA_ERROR_NOT_SUPPORTED",
            // cuMemGetAttribute answers as NVIDIA's driver does: 801, silently, and
            // cuGetProcAddress does not find it.
        ],
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn graphs_are_captured_replayed_and_refused_as_cuda_does() {
    let d = Daemon::host_memory("graphs");
    let out = run_program_with(
        &apps_dir().join("graphs"),
        &d.server(),
        &[("GRAPHS_SHOW_CODES", "1")],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // A pageable copy is captured, staged through shared memory (a host function
    // moves its bytes when the graph runs).
    for line in [
        "pageable copy during capture: cudaSuccess",
        "end of that capture: cudaSuccess",
    ] {
        assert!(stderr.contains(line), "missing `{line}` in:\n{stderr}");
    }
    for line in [
        "before capture: none",
        "during capture: active",
        "capture info: active, id nonzero: yes",
        "graph so far: 3 nodes, 1 dependency, which has 1",
        "the captured graph is the one being built: yes",
        "second stream before the fork: none",
        "second stream after the fork: active",
        "after capture: none",
        "second stream after capture: none",
        "graph: 8 nodes, 8 edges, 1 root, at most 2 dependencies",
        "dot file starts with digraph: yes",
        "memset and copy nodes ran: yes",
        "capture on the legacy stream: cudaErrorStreamCaptureUnsupported",
        "previous thread mode: global",
        "cudaMalloc in a relaxed thread during capture: cudaSuccess",
        "restored thread mode was: relaxed",
        "cudaMalloc in a global thread during capture: cudaErrorStreamCaptureUnsupported",
        "capture after that: invalidated",
        "end of that capture: cudaErrorStreamCaptureInvalidated, graph null: yes",
        "pageable copy during capture captured or refused: yes",
        "end of that capture agrees: yes",
        "legacy stream during a blocking capture: cudaErrorStreamCaptureImplicit",
        "a captured kernel node's parameters are as launched: yes",
        "and the ones given after: yes",
        "PASS graphs",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // Captured kernels were recorded only when the executable graph ran: once per
    // launch (three), never during the capture; the last scale is the captured node
    // that was given new parameters (b, 4.0, 128 on a grid of 2).
    let records = d.launches();
    assert_eq!(launches_of(&records, "_Z4fillPffi").len(), 3);
    let scales = launches_of(&records, "_Z5scalePffi");
    assert_eq!(scales.len(), 7);
    let last = scales[6];
    assert_eq!(last["grid"], serde_json::json!([2, 1, 1]), "{last}");
    let p = param_bytes(last);
    assert_eq!(&p[8..12], &4.0f32.to_le_bytes(), "{last}");
    assert_eq!(&p[12..16], &128i32.to_le_bytes(), "{last}");
    assert_eq!(launches_of(&records, "_Z8add_intoPfPKffi").len(), 3);
}

/// A device synchronize with other threads in the process waits by device queries
/// (so the connection is not held against them), and the query that finds every
/// stream done ends it: one round trip each here, where kernels take no time.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn a_synchronize_among_threads_ends_with_the_query_that_finds_the_work_done() {
    let d = Daemon::host_memory("sync-queries");
    let (out, profile) = profiled(&d, "thread_waits");
    assert!(out.status.success(), "{}", text(&out.stdout));
    let (calls, waited, _) = profile_row(&profile, "cuCtxSynchronize");
    assert!(calls >= 2, "{profile}");
    assert_eq!(waited, calls, "{profile}");
}

/// A hand-built graph's kernel node changed in its executable graph
/// (`cudaGraphExecKernelNodeSetParams`, one posted request), then in a clone the
/// executable graph is updated to: each launch of the executable graph runs the
/// arguments it had then (axpy's factor, recorded by the host when the graph ran).
/// An executable child-graph node is given a new graph in one request.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn kernel_node_updates_reach_the_executable_graphs_launches() {
    let d = Daemon::host_memory("node-updates");
    let (out, profile) = profiled(&d, "hand_graphs");
    assert!(out.status.success(), "{}", text(&out.stdout));
    // The update of a node the program built went without waiting for the host.
    let row = profile_row(&profile, "cuGraphExecKernelNodeSetParams_v2");
    assert_eq!(row, (1, 0, 1), "{profile}");
    // An executable child-graph node's new graph is one waited request, and the
    // executable graph runs it; one of another shape, or a node not its own, is
    // refused as the driver refuses them, and the graph it had stays.
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "executable child graph: 3, given another graph 5, one of another shape: \
             cudaErrorInvalidValue (still 5); a node not its own: cudaErrorInvalidValue"
        ),
        "{stdout}"
    );
    let row = profile_row(&profile, "cuGraphExecChildGraphNodeSetParams");
    assert_eq!(row, (3, 3, 0), "{profile}");
    let records = d.launches();
    let factors: Vec<f32> = launches_of(&records, "_Z4axpyPfPKffi")
        .into_iter()
        .map(|r| {
            let p = param_bytes(r);
            f32::from_le_bytes(p[16..20].try_into().unwrap())
        })
        .collect();
    // Launch 1 (2.0), launch 2 after the update (3.0), launch 3 with the node
    // disabled (none), launch 4 enabled again (3.0), then the clone's (4.0).
    assert_eq!(&factors[..4], &[2.0, 3.0, 3.0, 4.0], "{factors:?}");
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn stream_ordered_memory_and_the_default_pool_are_forwarded_and_ipc_handles_are_made() {
    let d = Daemon::host_memory("pools");
    let out = run_program_with(
        &apps_dir().join("mem_pools"),
        &d.server(),
        &[("MEM_POOLS_SHOW_IPC", "1")],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "default pool is stable: yes",
        "default pool of a missing device: cudaErrorInvalidDevice",
        "release threshold reads back: yes",
        "opportunistic reuse (default): 1",
        "opportunistic reuse after turning it off: 0",
        "setting used memory: cudaErrorInvalidValue",
        "setting the used high-water mark to 5: cudaErrorInvalidValue",
        "used while 4 MiB are allocated is at least 4 MiB: yes",
        "reserved covers used: yes",
        "memsets of stream-ordered memory read back: yes",
        "used after every free: 0",
        "used high-water mark is at least 4 MiB: yes",
        "used high-water mark after a reset: 0",
        "trimming does not grow the pool: yes",
        "cudaFreeAsync of cudaMalloc memory: ok",
        "cudaIpcGetMemHandle answered success or not-supported: yes",
        "cudaIpcGetEventHandle answered success or not-supported: yes",
        "PASS mem_pools",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // Between a VM's processes IPC works (docs/ipc.md): the daemon's registry hands
    // out both handles.
    assert!(
        stderr.contains("cudaIpcGetMemHandle: cudaSuccess"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cudaIpcGetEventHandle: cudaSuccess"),
        "{stderr}"
    );
}

/// Pools the program makes (as NCCL does): create, allocate from, attributes, trim,
/// access, a device's current pool, a maximum size, destroy, through the runtime and
/// the driver; a shareable pool is refused with one line saying why.
#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn memory_pools_the_program_makes_are_forwarded() {
    let d = Daemon::host_memory("made-pools");
    let out = d.run_app("mem_pools_explicit");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "made pool differs from the default pool: yes",
        "made pool's release threshold (default): 0",
        "release threshold reads back as the most: yes",
        "opportunistic reuse (default): 1",
        "allocation from the made pool reads back: yes",
        "made pool's used memory is at least 4 MiB: yes",
        "made pool's reserved memory covers it: yes",
        "made pool's used memory after the free: 0",
        "made pool keeps what was freed (threshold at the most): yes",
        "made pool's used high-water mark is at least 4 MiB: yes",
        "used high-water mark after its reset: 0",
        "made pool's reserved memory after a trim: 0",
        "device 0's access to the made pool: 3",
        "current pool is the default pool at first: yes",
        "current pool after cudaDeviceSetMemPool: made",
        "cudaMallocAsync takes from the current pool: yes",
        "that allocation reads back: yes",
        "current pool back to the default pool: yes",
        "64 MiB from a pool of at most 2 MiB: cudaErrorMemoryAllocation",
        "a pool on a missing device fails: yes",
        "a pool without properties: cudaErrorInvalidValue",
        "an absurd allocation from the made pool: cudaErrorMemoryAllocation",
        "a shareable pool answered success or not-supported: yes",
        "destroying a default pool: cudaErrorInvalidValue",
        "driver: release threshold reads back: yes",
        "driver: allocation from the pool reads back: yes",
        "driver: used memory is at least 1 MiB: yes",
        "driver: device 0's access: 3",
        "driver: current pool is the made pool: yes",
        "driver: reserved memory after a trim: 0",
        "mem_pools_explicit done",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // A pool with POSIX descriptor handles is made (it may be shared within the
    // program): no refusal.
    assert!(!stderr.contains("cudaMemPoolCreate"), "{stderr}");
}

/// The driver's library and kernel calls, as NVIDIA's runtime uses them, on a cubin
/// NVRTC compiles in the guest: kernels by name and enumeration, names and parameter
/// layouts, CUkernel as CUfunction, module enumeration, occupancy, a launch through
/// cuLaunchKernelEx, context and stream queries, and the function walk of export
/// table 6e163fbe (slot 7), whose function launches.
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn the_driver_library_calls_answer_as_the_driver_does() {
    let d = Daemon::host_memory("driver-library");
    let out = d.run_app("driver_library");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "context id is nonzero: yes",
        "kernels in the library: 2",
        "kernel 0: fill",
        "kernel 1: axpy",
        "PASS cuLibraryGetKernel(missing): CUDA_ERROR_NOT_FOUND",
        "fill param 2: offset 12 size 1",
        "fill param 3: offset 16 size 8",
        "fill param 4: CUDA_ERROR_INVALID_VALUE",
        "function name: fill",
        "kernel's library is the one loaded: yes",
        "functions in the module: 2",
        "PASS cuGetExportTable(function introspection): CUDA_SUCCESS",
        "slot 7 visited 2 functions and said 2",
        "slot 7 function 0: axpy",
        "slot 7 function 1: fill",
        "walked function's name: fill",
        "PASS cuFuncGetAttribute(walked fill): CUDA_SUCCESS",
        "PASS cuLaunchKernel(walked fill): CUDA_SUCCESS",
        "potential block size within the kernel's limit: yes",
        "stream's context is the current one: yes",
        "PASS cuLaunchKernelEx(CUkernel): CUDA_SUCCESS",
        "PASS driver_library: 0 failure(s)",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    // The launch reached the host with the CUkernel's parameters packed.
    let records = d.launches();
    let fill = launches_of(&records, "fill");
    assert_eq!(fill.len(), 2, "{records:?}");
    let params = param_bytes(fill[0]);
    assert_eq!(params.len(), 24);
    assert_eq!(&params[8..12], &40i32.to_le_bytes());
    assert_eq!(params[12], 2);
    assert_eq!(&params[16..24], &1.0f64.to_le_bytes());
    // The function export table 6e163fbe's slot 7 handed out (how cuFFT finds its
    // kernels) launched as the kernel it names.
    assert_eq!(&param_bytes(fill[1])[8..12], &50i32.to_le_bytes());
}

/// A daemon whose loader hands it vmcuda's own libcuda.so.1 (the guest package on a
/// machine without NVIDIA's driver) serves no guest through it: it says why, and
/// guests are told there is no GPU rather than being bridged back to a bridge.
#[test]
#[ignore = "needs the linked guest libraries: run tests/run.sh"]
fn the_host_will_not_serve_through_vmcuda_s_own_driver() {
    let lib = guest_lib_dir();
    let path = lib.to_str().unwrap();
    // It does not start at all: there is no GPU behind that driver.
    let out = vmcuda_tests::serve_until_refused(
        "own-driver",
        &["--executor", "cuda"],
        &[("LD_LIBRARY_PATH", path)],
    )
    .expect("the daemon started on vmcuda's own driver");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("vmcuda's guest driver, not NVIDIA's"),
        "{stderr}"
    );
    assert!(
        stderr.contains("vmcuda-host serve: no usable GPU"),
        "{stderr}"
    );
}

/// `VMCUDA_PROFILE` and `VMCUDA_PROFILE_TRACE`: a program's driver calls and its round
/// trips, with the worker's share stamped by the host, as a summary and as a Chrome trace
/// a person can open (tests/apps/events.cu: launches, events, a synchronizing copy).
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn the_profile_says_where_a_programs_time_went() {
    let d = Daemon::host_memory("profile");
    let dir = std::env::temp_dir().join(format!("vmcuda-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("summary-%p.txt");
    let trace = dir.join("trace.json");
    let out = run_program_with(
        &apps_dir().join("events"),
        &d.server(),
        &[
            ("VMCUDA_PROFILE", summary.to_str().unwrap()),
            ("VMCUDA_PROFILE_TRACE", trace.to_str().unwrap()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("summary-"))
        .collect();
    assert_eq!(
        written.len(),
        1,
        "one summary, named by the pid: {written:?}"
    );
    let summary = std::fs::read_to_string(&written[0]).unwrap();
    for want in [
        "driver calls took",
        "cuLaunchKernel",
        "cuEventSynchronize",
        "EventSynchronize",
    ] {
        assert!(summary.contains(want), "missing `{want}` in:\n{summary}");
    }
    // The stream's wait for an event went without waiting for the host (a stream and
    // an event the guest knows, no capture), as a launch does.
    assert_eq!(
        profile_row(&summary, "cuStreamWaitEvent"),
        (1, 0, 1),
        "{summary}"
    );
    // The synchronize waited for the host, and the host said how long it worked on it.
    let sync = summary
        .lines()
        .find(|l| l.starts_with("EventSynchronize "))
        .expect("an EventSynchronize row");
    let cols: Vec<&str> = sync.split_whitespace().collect();
    assert!(cols[1].parse::<u64>().unwrap() >= 1, "{sync}");
    assert!(
        cols[4].parse::<f64>().unwrap() > 0.0,
        "worker time stamped: {sync}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let round_trip = events
        .iter()
        .find(|e| e["name"] == "host: EventSynchronize")
        .expect("the synchronize's round trip on the timeline");
    assert_eq!(round_trip["ph"], "X");
    assert!(round_trip["dur"].as_f64().unwrap() > 0.0);
    let call = events
        .iter()
        .find(|e| e["name"] == "cuEventSynchronize" && e["tid"] == round_trip["tid"])
        .expect("the driver call around it, on the same thread");
    assert!(call["args"]["round_trips"].as_u64().unwrap() >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `VMCUDA_SYNC_WORDS=1`, a synchronize ends on a word the GPU writes where the
/// guest shares memory with the host: `cudaDeviceSynchronize` and `cudaStreamSynchronize`
/// post a request and watch the word, with no round trip (tests/apps/dynamic_shared.cu
/// synchronizes the device, tests/apps/events.cu a stream). By default, and in a program
/// whose kernels print, they wait for replies.
#[test]
#[ignore = "needs the linked guest libraries and nvcc-built apps: run tests/run.sh"]
fn synchronizes_end_on_a_word_the_gpu_writes() {
    let d = Daemon::host_memory("sync-words");
    let dir = std::env::temp_dir().join(format!("vmcuda-sync-words-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // (op, waited, posted) of each row of the profile's table of ops.
    let ops = |app: &str, words: &str| -> Vec<(String, u64, u64)> {
        let summary = dir.join(format!("{app}-{words}.txt"));
        let out = run_program_with(
            &apps_dir().join(app),
            &d.server(),
            &[
                ("VMCUDA_PROFILE", summary.to_str().unwrap()),
                ("VMCUDA_SYNC_WORDS", words),
                // Watched long enough for a worker slowed by the tests beside it.
                ("VMCUDA_SYNC_WATCH_US", "20000000"),
            ],
        );
        assert!(out.status.success(), "{app}: {}", text(&out.stderr));
        let summary = std::fs::read_to_string(&summary).unwrap();
        summary
            .lines()
            .skip_while(|l| !l.starts_with("op on the connection"))
            .skip(1)
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                Some((
                    cols.first()?.to_string(),
                    cols.get(1)?.parse().ok()?,
                    cols.get(2)?.parse().ok()?,
                ))
            })
            .collect()
    };
    let row = |rows: &[(String, u64, u64)], op: &str| {
        rows.iter()
            .find(|(name, _, _)| name == op)
            .map(|&(_, waited, posted)| (waited, posted))
    };
    let device = ops("dynamic_shared", "1");
    assert_eq!(row(&device, "DeviceSynchronize"), None, "{device:?}");
    assert!(
        row(&device, "DeviceWriteDone").is_some_and(|(w, p)| w == 0 && p >= 2),
        "{device:?}"
    );
    let device = ops("dynamic_shared", "0");
    assert!(
        row(&device, "DeviceSynchronize").is_some_and(|(w, _)| w >= 2),
        "{device:?}"
    );
    assert_eq!(row(&device, "DeviceWriteDone"), None, "{device:?}");
    let stream = ops("events", "1");
    assert_eq!(row(&stream, "StreamSynchronize"), None, "{stream:?}");
    assert!(
        row(&stream, "StreamWriteValue32").is_some_and(|(w, p)| w == 0 && p >= 1),
        "{stream:?}"
    );
    let stream = ops("events", "0");
    assert!(
        row(&stream, "StreamSynchronize").is_some_and(|(w, _)| w >= 1),
        "{stream:?}"
    );
    // A program whose kernels call printf synchronizes with the host, whose driver
    // writes what they printed then (tests/apps/printf_buffered.cu).
    let printing = ops("printf_buffered", "1");
    assert!(
        row(&printing, "DeviceSynchronize").is_some_and(|(w, _)| w >= 1),
        "{printing:?}"
    );
    assert!(
        row(&printing, "StreamSynchronize").is_some_and(|(w, _)| w >= 1),
        "{printing:?}"
    );
    assert_eq!(row(&printing, "DeviceWriteDone"), None, "{printing:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
