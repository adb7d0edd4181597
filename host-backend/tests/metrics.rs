//! Host observability against the real daemon: per-VM figures on the Prometheus
//! endpoint and in `vmcuda-host status`, from guests of two VMs speaking the raw
//! protocol, until they disconnect.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

/// A fatbinary with one kernel, `tiny(int *)`.
const TINY: &[u8] = include_bytes!("../../wire/testdata/tiny.fatbin");
const TOKEN: &str = "metrics-test-token-0123456789";

fn ok<R: serde::Serialize>(s: &mut (impl Read + Write), op: Op, req: &R, data: &[u8]) -> Vec<u8> {
    let (status, meta, _) = call(s, op, req, data);
    assert_eq!(status, CudaStatus::Success, "{op:?}");
    meta
}

fn alloc(s: &mut (impl Read + Write), size: u64) -> u64 {
    let meta = ok(s, Op::MemAlloc, &MemAlloc { size }, &[]);
    postcard::from_bytes::<Allocated>(&meta).unwrap().ptr
}

fn htod(dst: u64) -> MemcpyHtoD {
    MemcpyHtoD {
        dst,
        stream: StreamHandle::LEGACY,
        is_async: false,
    }
}

/// Where the daemon serves its metrics, from its log (it was asked for port 0).
fn metrics_addr(d: &Daemon) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = d.log();
        if let Some(at) = log.find("serving metrics at http://") {
            let rest = &log[at + "serving metrics at http://".len()..];
            return rest[..rest.find("/metrics").unwrap()].to_string();
        }
        assert!(Instant::now() < deadline, "no metrics endpoint: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP request: (status line, body).
fn http(addr: &str, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a full response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn scrape(addr: &str) -> String {
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    body
}

/// The value of one series (`name{labels}` exactly as exposed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn get(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Scrape until `series` has `want`.
fn wait_for(addr: &str, series: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(addr);
        if value(&text, series) == Some(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never became {want}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks a VM's histogram: cumulative buckets, +Inf and _count equal to its calls.
fn histogram_matches_calls(text: &str, vm: &str, calls: f64) {
    let prefix = format!("vmcuda_vm_call_duration_seconds_bucket{{vm=\"{vm}\",le=\"");
    let buckets: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(buckets.len(), 12, "{text}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(*buckets.last().unwrap(), calls);
    let series = |s: &str| format!("vmcuda_vm_call_duration_seconds_{s}{{vm=\"{vm}\"}}");
    assert_eq!(get(text, &series("count")), calls);
    assert!(get(text, &series("sum")) > 0.0);
}

#[test]
fn per_vm_figures_reach_the_endpoint_and_status_until_the_guests_leave() {
    let tcp = free_tcp_addr();
    let d = Daemon::with_config(
        "metrics",
        Some(&format!(
            r#"
            [[vm]]
            name = "remote"
            tcp = true
            token = "{TOKEN}"
            memory_quota = "256KiB"
            host_memory = "64MiB"

            [[vm]]
            name = "idle"
            cid = 9
            "#
        )),
        &["--tcp", &tcp, "--metrics", "127.0.0.1:0"],
    );
    let m = metrics_addr(&d);

    // Before anyone connects, the configured VMs are there with nothing.
    let text = scrape(&m);
    for vm in ["local", "remote", "idle"] {
        assert_eq!(
            get(&text, &format!("vmcuda_vm_connections{{vm=\"{vm}\"}}")),
            0.0
        );
    }
    assert_eq!(get(&text, "vmcuda_stats_up"), 1.0);
    // Their host memory limits are there from the start too, as configured.
    for (vm, limit) in [
        ("local", 4u64 << 30),
        ("remote", 64 << 20),
        ("idle", 4 << 30),
    ] {
        assert_eq!(
            get(
                &text,
                &format!("vmcuda_vm_host_memory_limit_bytes{{vm=\"{vm}\"}}")
            ),
            limit as f64
        );
        assert_eq!(
            get(
                &text,
                &format!("vmcuda_vm_host_memory_used_bytes{{vm=\"{vm}\"}}")
            ),
            0.0
        );
    }

    // A local program: copies every way, two kernels, two failing calls.
    let mut local = d.connect();
    hello(&mut local);
    let buf = alloc(&mut local, 1 << 20);
    ok(&mut local, Op::MemcpyHtoD, &htod(buf), &[5; 1000]);
    let read = MemcpyDtoH {
        src: buf,
        size: 512,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    ok(&mut local, Op::MemcpyDtoH, &read, &[]);
    let dtod = MemcpyDtoD {
        dst: buf + 4096,
        src: buf,
        size: 256,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    ok(&mut local, Op::MemcpyDtoD, &dtod, &[]);
    let (status, _, _) = call(&mut local, Op::MemFree, &MemFree { ptr: 0xdead_0000 }, &[]);
    assert_eq!(status, CudaStatus::ErrorInvalidValue);
    let module =
        postcard::from_bytes::<ModuleLoaded>(&ok(&mut local, Op::ModuleLoad, &ModuleLoad, TINY))
            .unwrap()
            .module;
    let get_fn = ModuleGetFunction {
        module,
        name: "_Z4tinyPi".into(),
    };
    let function =
        postcard::from_bytes::<FunctionInfo>(&ok(&mut local, Op::ModuleGetFunction, &get_fn, &[]))
            .unwrap()
            .function;
    let launch = LaunchKernel {
        function,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem: 0,
        stream: StreamHandle::LEGACY,
        attributes: vec![],
    };
    for _ in 0..2 {
        ok(&mut local, Op::LaunchKernel, &launch, &buf.to_le_bytes());
    }
    let (status, _, _) = call(
        &mut local,
        Op::MemcpyHtoD,
        &htod(buf + (1 << 20) - 4),
        &[1; 8],
    );
    assert_eq!(status, CudaStatus::ErrorInvalidValue);
    // hello, alloc, 3 copies, module, function, 2 launches: 9 ok; 2 failed.

    // VM "remote" over TCP, with its token: within its quota, then over it.
    let mut remote = connect_tcp(&tcp);
    assert_eq!(
        hello_with(&mut remote, TOKEN.as_bytes()).0,
        CudaStatus::Success
    );
    let a = alloc(&mut remote, 64 << 10);
    alloc(&mut remote, 64 << 10);
    ok(&mut remote, Op::MemcpyHtoD, &htod(a), &[9; 4096]);
    let (status, _, _) = call(
        &mut remote,
        Op::MemAlloc,
        &MemAlloc { size: 512 << 10 },
        &[],
    );
    assert_eq!(status, CudaStatus::ErrorMemoryAllocation);
    let destroy = StreamDestroy {
        stream: StreamHandle(0x4242),
    };
    let (status, _, _) = call(&mut remote, Op::StreamDestroy, &destroy, &[]);
    assert_eq!(status, CudaStatus::ErrorInvalidResourceHandle);
    // hello, 2 allocs, a copy: 4 ok; 2 failed.

    // And one caller turned away: a token nobody has.
    let mut stranger = connect_tcp(&tcp);
    assert_eq!(
        hello_with(&mut stranger, b"not-anyones-token-000000").0,
        CudaStatus::ErrorNotPermitted
    );
    // The refused worker counts itself after answering.
    let text = wait_for(
        &m,
        "vmcuda_refused_connections_total{status=\"cudaErrorNotPermitted\"}",
        1.0,
    );

    let series = |name: &str, vm: &str, extra: &str| format!("{name}{{vm=\"{vm}\"{extra}}}");
    let expect = |vm: &str, name: &str, extra: &str, want: f64| {
        assert_eq!(
            get(&text, &series(name, vm, extra)),
            want,
            "{vm} {name}{extra}"
        );
    };
    for (vm, mem, ok_calls, errors, kernels, [h2d, d2h, d2d]) in [
        ("local", 1 << 20, 9, 2, 2, [1000, 512, 256]),
        ("remote", 128 << 10, 4, 2, 0, [4096, 0, 0]),
    ] {
        expect(vm, "vmcuda_vm_connections", "", 1.0);
        expect(vm, "vmcuda_vm_device_memory_bytes", "", mem as f64);
        expect(vm, "vmcuda_vm_host_memory_bytes", "", 0.0);
        expect(
            vm,
            "vmcuda_vm_calls_total",
            ",outcome=\"ok\"",
            ok_calls as f64,
        );
        expect(
            vm,
            "vmcuda_vm_calls_total",
            ",outcome=\"error\"",
            errors as f64,
        );
        expect(vm, "vmcuda_vm_kernels_launched_total", "", kernels as f64);
        expect(
            vm,
            "vmcuda_vm_copied_bytes_total",
            ",direction=\"htod\"",
            h2d as f64,
        );
        expect(
            vm,
            "vmcuda_vm_copied_bytes_total",
            ",direction=\"dtoh\"",
            d2h as f64,
        );
        expect(
            vm,
            "vmcuda_vm_copied_bytes_total",
            ",direction=\"dtod\"",
            d2d as f64,
        );
        histogram_matches_calls(&text, vm, (ok_calls + errors) as f64);
    }
    expect(
        "local",
        "vmcuda_vm_errors_total",
        ",status=\"cudaErrorInvalidValue\"",
        2.0,
    );
    for status in [
        "cudaErrorMemoryAllocation",
        "cudaErrorInvalidResourceHandle",
    ] {
        expect(
            "remote",
            "vmcuda_vm_errors_total",
            &format!(",status=\"{status}\""),
            1.0,
        );
    }
    // Host memory the workers keep, beside the device memory: the local guest's module
    // image is in it, and each VM's frame buffers and handles.
    let host_used = |vm: &str| get(&text, &series("vmcuda_vm_host_memory_used_bytes", vm, ""));
    assert!(host_used("local") >= TINY.len() as f64, "{text}");
    assert!(host_used("remote") > 0.0, "{text}");
    assert!(host_used("remote") < (64 << 20) as f64, "{text}");
    expect(
        "remote",
        "vmcuda_vm_host_memory_limit_bytes",
        "",
        (64 << 20) as f64,
    );
    assert_eq!(get(&text, "vmcuda_vm_connections{vm=\"idle\"}"), 0.0);
    assert_eq!(get(&text, "vmcuda_workers_started_total"), 3.0);
    assert_eq!(get(&text, "vmcuda_workers_failed_total"), 0.0);

    // `status` lists the two guests, by VM.
    let report = d.status_json();
    let guests = report["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 2, "{report}");
    let (l, r) = (&guests[0], &guests[1]);
    assert_eq!(l["vm"], "local");
    assert_eq!(l["program"], "daemon-test");
    assert_eq!(l["transport"], "unix");
    assert!(l["caller"].as_str().unwrap().starts_with("local"), "{l}");
    assert_eq!(l["device_memory_bytes"], 1 << 20);
    assert_eq!(l["kernels"], 2);
    assert_eq!(l["calls_error"], 2);
    assert_eq!(r["vm"], "remote");
    assert_eq!(r["transport"], "tcp");
    assert!(
        r["caller"].as_str().unwrap().starts_with("tcp:127.0.0.1:"),
        "{r}"
    );
    assert_eq!(r["copied_htod"], 4096);
    assert_eq!(r["calls_ok"], 4);
    assert!(l["host_memory_used_bytes"].as_u64().unwrap() >= TINY.len() as u64);
    assert_eq!(r["host_memory_limit_bytes"], 64 << 20);
    // And per VM: the connections' host memory summed, against the VM's limit.
    let vms = report["vms"].as_array().unwrap();
    assert_eq!(vms.len(), 2, "{report}");
    assert_eq!(vms[1]["vm"], "remote");
    assert_eq!(vms[1]["connections"], 1);
    assert_eq!(vms[1]["device_memory_bytes"], 128 << 10);
    assert_eq!(
        vms[1]["host_memory_used_bytes"],
        r["host_memory_used_bytes"]
    );
    assert_eq!(vms[1]["host_memory_limit_bytes"], 64 << 20);
    for g in guests {
        let pid = g["worker_pid"].as_u64().unwrap();
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{g}"
        );
    }
    let table = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
        .args(["status", "--state-dir"])
        .arg(d.dir.join("state"))
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 7, "{table}");
    assert!(rows[0].contains("MEMORY  HOST MEMORY"), "{table}");
    assert!(
        rows[1].starts_with("local ") && rows[1].contains("1.0 MiB"),
        "{table}"
    );
    assert!(
        rows[2].starts_with("remote ") && rows[2].contains("daemon-test[1]"),
        "{table}"
    );
    // Then the VMs, each with its host memory and its limit, and its turns on the GPU
    // (none here: [compute] is off).
    assert!(
        rows[4].ends_with("HOST MEMORY  HOST LIMIT  GPU TIME  THROTTLED"),
        "{table}"
    );
    assert!(
        rows[5].starts_with("local ") && rows[5].contains("4.0 GiB   0.000 s"),
        "{table}"
    );
    assert!(
        rows[6].starts_with("remote ") && rows[6].contains("64.0 MiB   0.000 s"),
        "{table}"
    );

    // When they leave, they are no longer listed and hold nothing; what they did stays.
    drop(local);
    drop(remote);
    wait_for(&m, "vmcuda_vm_connections{vm=\"local\"}", 0.0);
    wait_for(&m, "vmcuda_vm_connections{vm=\"remote\"}", 0.0);
    // A connection is closed before its worker has exited; a jailed worker leaves its
    // file for the next scrape to fold, which it does only once the worker is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !d.status_json()["guests"].as_array().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the workers never exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = scrape(&m);
    for vm in ["local", "remote"] {
        assert_eq!(
            get(&text, &series("vmcuda_vm_device_memory_bytes", vm, "")),
            0.0
        );
        assert_eq!(
            get(&text, &series("vmcuda_vm_host_memory_used_bytes", vm, "")),
            0.0
        );
    }
    assert_eq!(
        get(
            &text,
            &series("vmcuda_vm_calls_total", "local", ",outcome=\"ok\"")
        ),
        9.0
    );
    assert_eq!(
        get(
            &text,
            &series("vmcuda_vm_kernels_launched_total", "local", "")
        ),
        2.0
    );
    assert_eq!(
        get(
            &text,
            &series(
                "vmcuda_vm_copied_bytes_total",
                "remote",
                ",direction=\"htod\""
            )
        ),
        4096.0
    );
    histogram_matches_calls(&text, "remote", 6.0);
    assert_eq!(d.status_json()["guests"].as_array().unwrap().len(), 0);
    let files: Vec<_> = std::fs::read_dir(d.dir.join("state/workers"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n.contains(".stats"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn the_endpoint_answers_only_metrics_and_bad_clients_block_nobody() {
    let d = Daemon::with_config("metrics-http", None, &["--metrics", "127.0.0.1:0"]);
    let m = metrics_addr(&d);
    // A client that connects and says nothing, and one that never ends its request.
    let _silent = TcpStream::connect(&m).unwrap();
    let mut dribbling = TcpStream::connect(&m).unwrap();
    dribbling.write_all(b"GET /metr").unwrap();

    assert_eq!(
        http(&m, "GET / HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(&m, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let (status, body) = http(&m, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        body.contains("# TYPE vmcuda_vm_calls_total counter"),
        "{body}"
    );
    let garbage = format!("{}\r\n\r\n", "x".repeat(20_000));
    let mut s = TcpStream::connect(&m).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(garbage.as_bytes());
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    drop(s);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    // Guests are served meanwhile, and counted.
    still_serves(&d);
    wait_for(
        &m,
        "vmcuda_vm_calls_total{vm=\"local\",outcome=\"ok\"}",
        2.0,
    );
}

/// Issue 34, finding 8, against the daemon: more idle clients than the endpoint holds
/// at once (256, 64 from one source: all of these are 127.0.0.1) cannot keep a scrape
/// out; the newest connection is always taken, the oldest idle one closed for it.
#[test]
fn more_idle_clients_than_the_endpoint_holds_cannot_blind_a_scrape() {
    let d = Daemon::with_config("metrics-idle", None, &["--metrics", "127.0.0.1:0"]);
    let m = metrics_addr(&d);
    let idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(&m).unwrap()).collect();
    for _ in 0..3 {
        let started = Instant::now();
        let body = scrape(&m);
        assert!(body.contains("vmcuda_stats_up"), "{body}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "the scrape took {took:?}");
    }
    // The oldest idle clients were closed to make room.
    let mut first = &idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(first.read(&mut b), Ok(0) | Err(_)),
        "the oldest idle client is still open"
    );
}

#[test]
fn metrics_stay_on_loopback_unless_allowed() {
    let dir = std::env::temp_dir().join(format!("vmcuda-metrics-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
        .args(["serve", "--executor", "host-memory", "--unix"])
        .arg(dir.join("s.sock"))
        .args(["--metrics", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("allow_non_loopback"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_workers_counts_are_kept_and_its_memory_stops_counting() {
    let d = Daemon::with_config("metrics-kill", None, &["--metrics", "127.0.0.1:0"]);
    let m = metrics_addr(&d);
    let mut s = d.connect();
    hello(&mut s);
    let buf = alloc(&mut s, 1 << 20);
    ok(&mut s, Op::MemcpyHtoD, &htod(buf), &[1; 300]);
    let text = scrape(&m);
    assert_eq!(
        get(&text, "vmcuda_vm_device_memory_bytes{vm=\"local\"}"),
        (1 << 20) as f64
    );
    let report = d.status_json();
    let pid = report["guests"][0]["worker_pid"].as_u64().unwrap();
    // Killed: it cannot retire its own file; the next scrape does.
    assert!(Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let text = wait_for(&m, "vmcuda_workers_failed_total", 1.0);
    let text = if value(&text, "vmcuda_vm_connections{vm=\"local\"}") == Some(0.0) {
        text
    } else {
        wait_for(&m, "vmcuda_vm_connections{vm=\"local\"}", 0.0)
    };
    assert_eq!(
        get(&text, "vmcuda_vm_device_memory_bytes{vm=\"local\"}"),
        0.0
    );
    assert_eq!(
        get(&text, "vmcuda_vm_calls_total{vm=\"local\",outcome=\"ok\"}"),
        3.0
    );
    assert_eq!(
        get(
            &text,
            "vmcuda_vm_copied_bytes_total{vm=\"local\",direction=\"htod\"}"
        ),
        300.0
    );
    // A scrape retires a dead worker's file; the one above may have come just before
    // the worker was seen dead (its counts were in the totals all the same).
    let file = d.dir.join(format!("state/workers/{pid}.stats"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while file.exists() && std::time::Instant::now() < deadline {
        scrape(&m);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!file.exists());
    assert!(closed(&mut s));
}
