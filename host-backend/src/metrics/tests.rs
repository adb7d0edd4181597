use super::endpoint::{MAX_CLIENTS, REQUEST_TIMEOUT};
use super::*;
use crate::stats::{Identity, Totals, LATENCY_BUCKETS};

fn guest(vm: &str, pid: u32, mem: u64, counts: Counts) -> Guest {
    Guest {
        worker_pid: pid,
        identity: Identity {
            vm: vm.into(),
            program: "matmul".into(),
            program_pid: pid + 1000,
            caller: "local:1".into(),
            transport: "unix".into(),
            connection_id: 1,
        },
        connected_unix_ms: 1_000,
        device_memory_bytes: mem,
        host_memory_bytes: 0,
        host_memory_used_bytes: 3 * mem,
        host_memory_limit_bytes: 4 << 30,
        compute: None,
        counts,
    }
}

fn known(name: &str, host_memory: u64) -> KnownVm {
    KnownVm {
        name: name.into(),
        host_memory,
    }
}

fn counts(ok: u64, err: u64, buckets: &[(usize, u64)]) -> Counts {
    let mut c = Counts {
        calls_ok: ok,
        calls_error: err,
        kernels: ok,
        copied_htod: 10 * ok,
        latency_sum_ns: 1_500_000_000,
        ..Counts::default()
    };
    for &(i, n) in buckets {
        c.latency_buckets[i] = n;
    }
    if err > 0 {
        c.errors.insert("cudaErrorInvalidValue".into(), err);
    }
    c
}

/// Issue 34, finding 8: idle clients, more than the endpoint holds, cannot keep a
/// scrape out; silent ones are closed at the request deadline.
#[test]
fn idle_clients_cannot_starve_a_scrape() {
    let dir = std::env::temp_dir().join(format!("vmcuda-metrics-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Source {
        state_dir: dir.clone(),
        known_vms: vec![known("a", 1 << 30)],
        grants_over: None,
    };
    let (addr, _) = serve("127.0.0.1:0", source).unwrap();
    let scrape = || {
        let started = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        (answer, started.elapsed())
    };
    let mut idle: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let (answer, took) = scrape();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    assert!(answer.contains("vmcuda_stats_up"), "{answer}");
    assert!(took < Duration::from_secs(2), "the scrape took {took:?}");
    // More idle clients than the endpoint holds: the oldest make room.
    idle.extend((0..MAX_CLIENTS + 50).map(|_| TcpStream::connect(addr).unwrap()));
    let (answer, took) = scrape();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    assert!(took < Duration::from_secs(2), "the scrape took {took:?}");
    // The silent ones are closed by the deadline.
    let newest = idle.last_mut().unwrap();
    newest
        .set_read_timeout(Some(REQUEST_TIMEOUT + Duration::from_secs(2)))
        .unwrap();
    let mut b = [0u8; 1];
    let read = newest.read(&mut b);
    assert!(
        matches!(&read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "an idle client outlived the request deadline: {read:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bounds_are_written_as_exact_seconds() {
    assert_eq!(seconds(1_000), "0.000001");
    assert_eq!(seconds(1_024_000), "0.001024");
    assert_eq!(seconds(1_048_576_000), "1.048576");
    assert_eq!(seconds(2_000_000_000), "2");
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn the_exposition_sums_live_guests_and_ended_ones_per_vm() {
    let mut totals = Totals::default();
    totals.vms.insert("vm1".into(), counts(4, 0, &[(0, 4)]));
    totals.refused.insert("cudaErrorNotPermitted".into(), 3);
    let census = Census {
        guests: vec![
            guest("vm1", 10, 100, counts(2, 1, &[(0, 1), (3, 2)])),
            guest("vm1", 11, 50, counts(1, 0, &[(LATENCY_BUCKETS - 1, 1)])),
            guest("we\"ird", 12, 7, Counts::default()),
        ],
        totals,
    };
    let text = render(Ok(&census), &[known("idle", 1 << 20), known("vm1", 1)]);
    let has = |line: &str| {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        )
    };
    has("# TYPE vmcuda_vm_call_duration_seconds histogram");
    has("vmcuda_vm_connections{vm=\"vm1\"} 2");
    has("vmcuda_vm_connections{vm=\"idle\"} 0");
    has("vmcuda_vm_connections{vm=\"we\\\"ird\"} 1");
    has("vmcuda_vm_device_memory_bytes{vm=\"vm1\"} 150");
    // Host memory beside it: what the workers keep, and the limit they were
    // granted (a VM with no guests: its configured one).
    has("# TYPE vmcuda_vm_host_memory_used_bytes gauge");
    has("vmcuda_vm_host_memory_used_bytes{vm=\"vm1\"} 450");
    has("vmcuda_vm_host_memory_used_bytes{vm=\"idle\"} 0");
    has("vmcuda_vm_host_memory_limit_bytes{vm=\"vm1\"} 4294967296");
    has("vmcuda_vm_host_memory_limit_bytes{vm=\"idle\"} 1048576");
    has("vmcuda_vm_calls_total{vm=\"vm1\",outcome=\"ok\"} 7");
    has("vmcuda_vm_calls_total{vm=\"vm1\",outcome=\"error\"} 1");
    has("vmcuda_vm_errors_total{vm=\"vm1\",status=\"cudaErrorInvalidValue\"} 1");
    has("vmcuda_vm_kernels_launched_total{vm=\"vm1\"} 7");
    has("vmcuda_vm_copied_bytes_total{vm=\"vm1\",direction=\"htod\"} 70");
    has("vmcuda_vm_copied_bytes_total{vm=\"vm1\",direction=\"dtod\"} 0");
    // Cumulative buckets: 5 at <= 1us, still 5 at 16us, 7 from 64us, 8 at +Inf.
    has("vmcuda_vm_call_duration_seconds_bucket{vm=\"vm1\",le=\"0.000001\"} 5");
    has("vmcuda_vm_call_duration_seconds_bucket{vm=\"vm1\",le=\"0.000016\"} 5");
    has("vmcuda_vm_call_duration_seconds_bucket{vm=\"vm1\",le=\"0.000064\"} 7");
    has("vmcuda_vm_call_duration_seconds_bucket{vm=\"vm1\",le=\"1.048576\"} 7");
    has("vmcuda_vm_call_duration_seconds_bucket{vm=\"vm1\",le=\"+Inf\"} 8");
    has("vmcuda_vm_call_duration_seconds_count{vm=\"vm1\"} 8");
    has("vmcuda_vm_call_duration_seconds_sum{vm=\"vm1\"} 4.5");
    has("vmcuda_refused_connections_total{status=\"cudaErrorNotPermitted\"} 3");
    has("vmcuda_stats_up 1");
    // Every sample line is `name{labels} value` with a number for the value.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{l}");
    }
}

#[test]
fn a_vms_turns_on_the_gpu_are_reported() {
    let mut g = guest("vm1", 10, 512, counts(2, 0, &[]));
    g.counts.gpu_time_ns = 1_500_000_000;
    g.counts.throttled_ns = 250_000_000;
    g.compute = Some(crate::stats::ComputeView {
        share: 50,
        priority: crate::compute::Priority::Latency,
        cap: Some(30),
    });
    let census = Census {
        guests: vec![g.clone()],
        totals: Totals::default(),
    };
    let text = render(Ok(&census), &[]);
    assert!(
        text.contains("vmcuda_vm_gpu_time_seconds_total{vm=\"vm1\"} 1.5"),
        "{text}"
    );
    assert!(
        text.contains("vmcuda_vm_throttled_seconds_total{vm=\"vm1\"} 0.25"),
        "{text}"
    );
    assert!(
        text.contains(
            "vmcuda_vm_compute_share{vm=\"vm1\",priority=\"latency\",cap_percent=\"30\"} 50"
        ),
        "{text}"
    );
    let table = status_table(&[g], 2_000);
    assert!(table.contains("share 50 latency cap 30%"), "{table}");
    assert!(
        table.contains("1.500 s") && table.contains("0.250 s"),
        "{table}"
    );
}

#[test]
fn without_a_census_only_the_daemons_own_figures_are_reported() {
    let err = StatsError::Format {
        path: "x".into(),
        msg: "broken".into(),
    };
    let text = render(Err(&err), &[known("vm1", 1 << 30)]);
    assert!(text.contains("vmcuda_stats_up 0"), "{text}");
    assert!(text.contains("vmcuda_workers_started_total "), "{text}");
    assert!(!text.contains("{vm="), "{text}");
}

#[test]
fn the_status_table_lists_guests_by_vm_with_their_figures() {
    let mut guests = vec![
        guest("vm2", 20, 3 << 30, counts(5, 0, &[])),
        guest("vm1", 10, 512, counts(2, 1, &[])),
    ];
    guests[0].identity.program = "evil\x1b[2J".into();
    sort_guests(&mut guests);
    assert_eq!(guests[0].identity.vm, "vm1");
    guests.push(guest("vm2", 21, 1 << 30, counts(1, 0, &[])));
    guests[2].host_memory_limit_bytes = u64::MAX;
    let table = status_table(&guests, 3_725_000);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 8, "{table}");
    assert!(lines[0].starts_with("VM "), "{table}");
    assert!(lines[0].contains("MEMORY  HOST MEMORY"), "{table}");
    assert!(lines[1].starts_with("vm1 "), "{table}");
    assert!(
        lines[1].contains("matmul[1010]")
            && lines[1].contains("512 B")
            && lines[1].contains("1.5 KiB"),
        "{table}"
    );
    assert!(lines[2].contains("3.0 GiB") && lines[2].contains("1h02m ago"));
    assert!(lines[2].contains("9.0 GiB"), "{table}");
    assert!(
        lines[2].contains("evil?[2J"),
        "no escapes reach the terminal"
    );
    // Then each VM: its memory, and its host memory against its limit (the
    // largest its workers were granted; unbounded stays unbounded).
    assert_eq!(lines[4], "");
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        [
            "VM",
            "COMPUTE",
            "CONNECTIONS",
            "MEMORY",
            "HOST",
            "MEMORY",
            "HOST",
            "LIMIT",
            "GPU",
            "TIME",
            "THROTTLED"
        ],
        "{table}"
    );
    assert_eq!(
        lines[6].split_whitespace().collect::<Vec<_>>(),
        ["vm1", "-", "1", "512", "B", "1.5", "KiB", "4.0", "GiB", "0.000", "s", "0.000", "s"],
        "{table}"
    );
    assert_eq!(
        lines[7].split_whitespace().collect::<Vec<_>>(),
        [
            "vm2",
            "-",
            "2",
            "4.0",
            "GiB",
            "12.0",
            "GiB",
            "unbounded",
            "0.000",
            "s",
            "0.000",
            "s"
        ],
        "{table}"
    );
    let vms = vm_status(&guests);
    assert_eq!(vms[1].host_memory_used_bytes, 12 << 30);
    assert_eq!(vms[1].host_memory_limit_bytes, Some(u64::MAX));
    assert_eq!(status_table(&[], 0), "no guests connected\n");
    assert_eq!(duration(59), "59s");
    assert_eq!(duration(61), "1m01s");
    assert_eq!(duration(90_000), "1d01h");
}
