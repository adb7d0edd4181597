//! The real CUDA test programs (`tests/apps`, built by nvcc 13) through the guest
//! library and a host daemon on the host-memory executor. Kernels do not run there,
//! so these tests check everything that needs no kernel result: each program's own
//! self-checks of copies, memsets, symbols, streams and events, exact error codes,
//! and, from the launch log, that kernel arguments were marshalled byte for byte.
//! Kernel results are compared against native runs on the GPU (tests/gpu/run.sh).

use std::collections::HashSet;
use std::process::Command;

use vmcuda_tests::{
    apps_dir, free_tcp_addr, guest_lib_dir, run_program, run_program_with, text, Daemon,
};

const APPS: &[&str] = &[
    "cublas_blas",
    "cublas_gemm",
    "device_assert",
    "device_query",
    "dynamic_shared",
    "errors",
    "events",
    "illegal_address",
    "launch_api",
    "matmul",
    "memcpy_kinds",
    "multithread",
    "occupancy_attrs",
    "pointer_mem",
    "printf_buffered",
    "printf_kernel",
    "streams",
    "struct_params",
    "symbols",
    "templates",
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

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn every_app_runs_and_passes_its_own_checks() {
    let d = Daemon::host_memory("all");
    let mut failures = Vec::new();
    for app in APPS {
        let out = d.run_app(app);
        let stdout = text(&out.stdout);
        if !out.status.success() || stdout.contains("FAIL ") || stdout.contains("MISMATCH ") {
            failures.push(format!(
                "{app}: {:?}\n{stdout}\n{}",
                out.status,
                text(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    assert!(
        d.log().contains("NOT executed"),
        "the host says plainly that kernels did not run"
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

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn host_functions_run_asynchronously_in_stream_order() {
    let d = Daemon::host_memory("hostfn");
    let out = d.run_app("streams");
    let stdout = text(&out.stdout);
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
fn pinned_memory_is_shared_with_a_same_host_backend() {
    let d = Daemon::host_memory("shared");
    let out = d.run_app("pointer_mem");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
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
    let addr = free_tcp_addr();
    let dir = std::env::temp_dir().join(format!("vmcuda-apps-tls-{}", std::process::id()));
    // The host's certificate names "gpuhost.test" and 127.0.0.1; a stranger's CA
    // signed nothing of it.
    let pki = TestPki::new(&dir.join("host"), &["gpuhost.test", "127.0.0.1"]);
    let stranger = TestPki::new(&dir.join("stranger"), &["127.0.0.1"]);
    let mut daemon = Daemon::start_with_config(
        "tls",
        Some(&format!(
            "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n\
             [[vm]]\nname = \"tls-guest\"\ntcp = true\ntoken = \"{TCP_TOKEN}\"\n",
            pki.cert.display(),
            pki.key.display()
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

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn every_export_carries_the_cudart_version_node_and_covers_the_apps() {
    let lib = guest_lib_dir().join("libcudart.so.13");
    let syms = dyn_syms(&lib);
    let exported: Vec<&(String, String, bool)> = syms
        .iter()
        .filter(|s| s.2 && (s.0.starts_with("cuda") || s.0.starts_with("__cuda")))
        .collect();
    assert!(exported.len() > 100, "exports: {}", exported.len());
    for (name, version, _) in &exported {
        assert_eq!(version, "libcudart.so.13", "{name} must be versioned");
    }
    // Nothing but the CUDA API leaks out of the library, besides the cuBLAS
    // implementation under its private version node (for libcublas.so.13).
    let others: Vec<_> = syms
        .iter()
        .filter(|s| {
            s.2 && !s.0.starts_with("cuda")
                && !s.0.starts_with("__cuda")
                && s.0 != "libcudart.so.13"
                && !(s.0.starts_with("__vmcuda_cublas") && s.1 == "VMCUDA_PRIVATE")
                && s.0 != "VMCUDA_PRIVATE"
        })
        .collect();
    assert!(others.is_empty(), "unexpected exports: {others:?}");
    // Every CUDA symbol any test program imports is provided, with the same version.
    let provided: HashSet<&str> = exported.iter().map(|s| s.0.as_str()).collect();
    for app in APPS {
        for (name, version, defined) in dyn_syms(&apps_dir().join(app)) {
            if !defined && version == "libcudart.so.13" {
                assert!(
                    provided.contains(name.as_str()),
                    "{app} imports {name}, which is not exported"
                );
            }
        }
    }
}

/// `name@@version` lines of a real library's export list in guest-lib/exports/.
fn real_exports(file: &str) -> Vec<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-lib/exports")
        .join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split_once("@@"))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn libcublas_exports_real_names_with_the_real_version_node() {
    let lib = guest_lib_dir().join("libcublas.so.13");
    let syms = dyn_syms(&lib);
    let exported: Vec<&(String, String, bool)> = syms
        .iter()
        .filter(|s| s.2 && s.0 != "libcublas.so.13")
        .collect();
    let real = real_exports("libcublas.so.13.txt");
    let real_names: HashSet<&str> = real.iter().map(|(n, _)| n.as_str()).collect();
    assert!(real.len() > 700, "the real list: {}", real.len());
    assert!(exported.len() >= 30, "exports: {}", exported.len());
    for (name, version, _) in &exported {
        assert_eq!(version, "libcublas.so.13", "{name} must be versioned");
        assert!(
            real_names.contains(name.as_str()),
            "{name} is not a libcublas.so.13 export"
        );
    }
    // The trampolines reach the implementation in libcudart.so.13, privately.
    let needs: Vec<_> = syms
        .iter()
        .filter(|s| !s.2 && s.1 == "VMCUDA_PRIVATE")
        .collect();
    assert_eq!(needs.len(), exported.len(), "one private target per export");
    // Every cuBLAS function a test program imports is provided.
    let provided: HashSet<&str> = exported.iter().map(|s| s.0.as_str()).collect();
    for app in APPS {
        for (name, version, defined) in dyn_syms(&apps_dir().join(app)) {
            if !defined && version == "libcublas.so.13" {
                assert!(provided.contains(name.as_str()), "{app} imports {name}");
            }
        }
    }
    let without_64: Vec<_> = real.iter().filter(|(n, _)| !n.ends_with("_64")).collect();
    println!(
        "libcublas.so.13 coverage: {} of {} real exports ({} of {} without the _64 variants)",
        exported.len(),
        real.len(),
        exported.len(),
        without_64.len()
    );
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn cublas_gemms_are_forwarded_and_computed_by_the_test_double() {
    let d = Daemon::host_memory("cublas");
    let out = d.run_app("cublas_gemm");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "PASS sgemm NN",
        "PASS sgemm TT",
        "PASS dgemm TN device scalars",
        "PASS gemmEx f16 in f32 out",
        "PASS gemmEx bf16",
        "PASS sgemmStridedBatched",
        "PASS sgemmBatched",
        "PASS zgemm CN",
        "sgemm(m=-1): CUBLAS_STATUS_INVALID_VALUE",
        "sgemm(lda<m): CUBLAS_STATUS_INVALID_VALUE",
        "PASS cublas_gemm (0 failures)",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn cublas_table_functions_run_on_the_test_double_or_fail_cleanly() {
    let mut d = Daemon::host_memory("cublas-table");
    let out = d.run_app("cublas_blas");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // What the CPU reference computes: every precision, host and device pointer mode.
    let mut computed = Vec::new();
    for p in ["S", "D", "C", "Z"] {
        for f in [
            "axpy", "scal", "copy", "swap", "gemv N", "trsv UNN", "trsv L", "symm L",
        ] {
            computed.push(format!("PASS {p}{f}"));
        }
        computed.push(format!("PASS {p}syrk"));
        computed.push(format!(
            "PASS {}",
            ["Isamax", "Idamax", "Icamax", "Izamax"]["SDCZ".find(p).unwrap()]
        ));
    }
    for line in [
        "PASS Sdot",
        "PASS Cdotu",
        "PASS Zdotc",
        "PASS Snrm2",
        "PASS Dznrm2",
        "PASS Scasum",
        "PASS Izamin",
        "PASS Csscal",
        "PASS Zdscal",
        "PASS Sger",
        "PASS Cgeru",
        "PASS Zgerc",
        "PASS Cgemv C",
        "PASS Dsymm R",
        "PASS Chemm L",
        "PASS Zherk C",
        "PASS Ddot device",
        "PASS Dnrm2 device",
        "PASS Daxpy device",
        "PASS Idamax device",
        "PASS Set/GetVectorAsync",
        "PASS Set/GetMatrixAsync",
        "PASS SetVector/GetMatrix",
        // cuBLAS's synchronous argument errors, from the table's checks.
        "SetVector(incx=0): CUBLAS_STATUS_INVALID_VALUE",
        "Sgemv(lda<m): CUBLAS_STATUS_INVALID_VALUE",
        "Sgemv(incx=0): CUBLAS_STATUS_INVALID_VALUE",
        "Strsv(uplo=7): CUBLAS_STATUS_INVALID_VALUE",
        "Ssyrk(n<0): CUBLAS_STATUS_INVALID_VALUE",
        "Saxpy(n=0): CUBLAS_STATUS_SUCCESS",
        "DONE cublas_blas (0 failures,",
    ]
    .iter()
    .map(|l| l.to_string())
    .chain(computed)
    {
        assert!(stdout.contains(&line), "missing `{line}` in:\n{stdout}");
    }
    // What it does not compute fails cleanly: posted calls with the asynchronous
    // cudaErrorNotSupported at the next waited call, waited ones with the status.
    for line in [
        "Srot: cudaErrorNotSupported",
        "Zdrot: cudaErrorNotSupported",
        "Drotm: cudaErrorNotSupported",
        "Crotg: CUBLAS_STATUS_NOT_SUPPORTED",
        "Drotg device: cudaErrorNotSupported",
        "DotEx: CUBLAS_STATUS_NOT_SUPPORTED",
        "SgemmEx: cudaErrorNotSupported",
        "Ssymv U: cudaErrorNotSupported",
        "Zher2 L: cudaErrorNotSupported",
        "Ctrmv UNN: cudaErrorNotSupported",
        "Dsyr2k T: cudaErrorNotSupported",
        "Ztrmm R: cudaErrorNotSupported",
        "Strsm L: cudaErrorNotSupported",
        "SgetrfBatched: cudaErrorNotSupported",
        "ZtrsmBatched: cudaErrorNotSupported",
        "CgeqrfBatched: CUBLAS_STATUS_NOT_SUPPORTED",
        "DgelsBatched: CUBLAS_STATUS_NOT_SUPPORTED",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    assert!(!stdout.contains("FAIL "), "{stdout}");
    assert!(d.alive(), "the daemon carries on");
    assert!(d
        .log()
        .contains("not computed by the host-memory test double"));
}

/// The guest library that serves `version` (the soname the symbol is bound to).
fn torch_import_library(version: &str) -> Option<&'static str> {
    match version {
        "libcudart.so.13" => Some("libcudart.so.13"),
        "libcublas.so.13" => Some("libcublas.so.13"),
        "libcublasLt.so.13" => Some("libcublasLt.so.13"),
        "libcudnn.so.9" => Some("libcudnn.so.9"),
        _ => None,
    }
}

#[test]
#[ignore = "needs the linked guest libraries: run tests/run.sh"]
fn every_symbol_torch_imports_is_exported_with_its_version() {
    // guest-lib/exports/torch-2.11.0+cu130-imports.txt: `<torch library> <name>@<version>`
    // for versioned imports, `<torch library> <name>` for libcuda.so.1's unversioned ones,
    // and `entry-point <name>` for driver functions torch resolves by name.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-lib/exports/torch-2.11.0+cu130-imports.txt");
    let list = std::fs::read_to_string(&path).unwrap();
    let mut exports: std::collections::HashMap<&str, HashSet<(String, String)>> =
        Default::default();
    for lib in [
        "libcudart.so.13",
        "libcublas.so.13",
        "libcublasLt.so.13",
        "libcudnn.so.9",
        "libcuda.so.1",
    ] {
        let set = dyn_syms(&guest_lib_dir().join(lib))
            .into_iter()
            .filter(|s| s.2)
            .map(|s| (s.0, s.1))
            .collect();
        exports.insert(lib, set);
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for line in list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (importer, symbol) = line.split_once(' ').expect("two columns");
        if importer == "entry-point" {
            continue; // checked through cudaGetDriverEntryPointByVersion by the driver tests
        }
        let (name, lib, version) = match symbol.split_once('@') {
            Some((name, version)) => {
                let lib = torch_import_library(version).expect("a replaced library");
                (name, lib, version)
            }
            None => (symbol, "libcuda.so.1", ""),
        };
        checked += 1;
        if !exports[lib].contains(&(name.to_string(), version.to_string())) {
            missing.push(format!("{name}@{version} ({lib}, imported by {importer})"));
        }
    }
    assert!(checked > 300, "the list holds {checked} imports");
    assert!(
        missing.is_empty(),
        "{} torch imports are not exported:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
