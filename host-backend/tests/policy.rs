//! The host configuration against the real daemon: who gets in (and what a refused
//! guest is told), quotas and limits, which GPUs a guest sees, and copies reaching
//! outside a guest's own memory.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

fn decode<T: serde::de::DeserializeOwned>(meta: &[u8]) -> T {
    postcard::from_bytes(meta).unwrap()
}

#[test]
fn quotas_limits_and_visible_gpus_follow_the_configuration() {
    let d = Daemon::with_config(
        "quota",
        Some(
            r#"
            [local]
            memory_quota = "1MiB"
            max_streams = 2
            max_events = 1
            gpus = [2, 0]
            "#,
        ),
        &["--host-memory-devices", "3"],
    );
    let mut s = d.connect();
    assert_eq!(
        hello(&mut s).device_count,
        2,
        "two of the host's three GPUs"
    );

    // The guest's device 0 is the host's GPU 2, device 1 the host's GPU 0.
    let props = |s: &mut _, device| {
        let (status, meta, _) = call(
            s,
            Op::DeviceGetProperties,
            &DeviceGetProperties { device },
            &[],
        );
        (
            status,
            (status == CudaStatus::Success).then(|| decode::<DeviceProperties>(&meta)),
        )
    };
    let first = props(&mut s, 0).1.unwrap();
    let second = props(&mut s, 1).1.unwrap();
    assert!(first.name.ends_with("#2"), "{}", first.name);
    assert!(!second.name.contains('#'), "{}", second.name);
    assert_ne!(first.uuid, second.uuid);
    assert_eq!(props(&mut s, 2).0, CudaStatus::ErrorInvalidDevice);

    // The quota is the device's memory as the guest sees it.
    let info = |s: &mut _| decode::<MemInfo>(&call(s, Op::MemGetInfo, &MemGetInfo, &[]).1);
    assert_eq!(info(&mut s).total, 1 << 20);
    assert_eq!(info(&mut s).free, 1 << 20);
    let (status, meta, _) = call(&mut s, Op::MemAlloc, &MemAlloc { size: 768 << 10 }, &[]);
    assert_eq!(status, CudaStatus::Success);
    let big = decode::<Allocated>(&meta).ptr;
    assert_eq!(info(&mut s).free, 256 << 10);
    let (status, _, _) = call(&mut s, Op::MemAlloc, &MemAlloc { size: 512 << 10 }, &[]);
    assert_eq!(status, CudaStatus::ErrorMemoryAllocation);
    let pitch = MemAllocPitch {
        width: 512 << 10,
        height: 1,
    };
    assert_eq!(
        call(&mut s, Op::MemAllocPitch, &pitch, &[]).0,
        CudaStatus::ErrorMemoryAllocation
    );
    // What fits still fits, and freeing gives the room back.
    let (status, meta, _) = call(&mut s, Op::MemAlloc, &MemAlloc { size: 256 << 10 }, &[]);
    assert_eq!(status, CudaStatus::Success);
    let small = decode::<Allocated>(&meta).ptr;
    assert_eq!(info(&mut s).free, 0);
    assert_eq!(
        call(&mut s, Op::MemFree, &MemFree { ptr: big }, &[]).0,
        CudaStatus::Success
    );
    assert_eq!(
        call(&mut s, Op::MemAllocPitch, &pitch, &[]).0,
        CudaStatus::Success
    );

    // A fresh allocation reads back as zeroes.
    let read = MemcpyDtoH {
        src: small,
        size: 256 << 10,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let (status, _, bytes) = call(&mut s, Op::MemcpyDtoH, &read, &[]);
    assert_eq!(status, CudaStatus::Success);
    assert!(bytes.iter().all(|&b| b == 0));

    // Copies must lie wholly inside the guest's own allocations.
    let write = |dst| MemcpyHtoD {
        dst,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let end = small + (256 << 10);
    assert_eq!(
        call(&mut s, Op::MemcpyHtoD, &write(end - 8), &[7; 8]).0,
        CudaStatus::Success
    );
    assert_eq!(
        call(&mut s, Op::MemcpyHtoD, &write(end - 4), &[7; 8]).0,
        CudaStatus::ErrorInvalidValue
    );
    let memset = Memset {
        dst: small,
        value: 1,
        size: (256 << 10) + 1,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    assert_eq!(
        call(&mut s, Op::Memset, &memset, &[]).0,
        CudaStatus::ErrorInvalidValue
    );
    let dtod = MemcpyDtoD {
        dst: small,
        src: u64::MAX - 4,
        size: 8,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    assert_eq!(
        call(&mut s, Op::MemcpyDtoD, &dtod, &[]).0,
        CudaStatus::ErrorInvalidValue
    );

    // Streams and events up to the guest's limits.
    for (i, want) in [
        CudaStatus::Success,
        CudaStatus::Success,
        CudaStatus::ErrorMemoryAllocation,
    ]
    .into_iter()
    .enumerate()
    {
        let req = StreamCreate {
            stream: StreamHandle(0x100 + i as u64),
            flags: 0,
            priority: 0,
        };
        assert_eq!(
            call(&mut s, Op::StreamCreate, &req, &[]).0,
            want,
            "stream {i}"
        );
    }
    for (i, want) in [CudaStatus::Success, CudaStatus::ErrorMemoryAllocation]
        .into_iter()
        .enumerate()
    {
        let req = EventCreate {
            event: EventHandle(0x200 + i as u64),
            flags: 0,
        };
        assert_eq!(
            call(&mut s, Op::EventCreate, &req, &[]).0,
            want,
            "event {i}"
        );
    }
    let lines = [
        "over the guest's memory quota",
        "outside the guest's own memory",
        "limit is reached",
    ];
    let log = d.log_once_it_has(&lines);
    for line in lines {
        assert!(log.contains(line), "{log}");
    }
}

#[test]
fn a_refused_guest_is_told_why_and_the_host_logs_it() {
    let mut d = Daemon::with_config("nolocal", Some("[local]\nallow = false\n"), &[]);
    let mut s = d.connect();
    let (status, _, reason) = hello_with(&mut s, b"");
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    let reason = String::from_utf8(reason).unwrap();
    assert!(reason.contains("not allowed"), "{reason}");
    assert!(closed(&mut s));
    assert!(d.alive());
    std::thread::sleep(Duration::from_millis(200));
    assert!(d.log().contains("[local] allow = false"), "{}", d.log());
}

#[test]
fn tcp_guests_get_in_only_with_the_token_of_a_vm_allowed_on_tcp() {
    let addr = free_tcp_addr();
    let d = Daemon::with_config(
        "tcp",
        Some(
            r#"
            [[vm]]
            name = "remote"
            tcp = true
            token = "a-long-enough-token-1234"
            memory_quota = 4096

            [[vm]]
            name = "vsock-only"
            cid = 9
            token = "another-long-token-5678"
            "#,
        ),
        &["--tcp", &addr],
    );
    let connect = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match TcpStream::connect(&addr) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    return s;
                }
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    for (token, told) in [
        (&b""[..], "need a token"),
        (b"a-long-enough-token-1235", "not accepted"),
        (b"another-long-token-5678", "may not connect over TCP"),
    ] {
        let mut s = connect();
        let (status, _, reason) = hello_with(&mut s, token);
        assert_eq!(status, CudaStatus::ErrorNotPermitted);
        let reason = String::from_utf8(reason).unwrap();
        assert!(reason.contains(told), "{reason}");
        assert!(closed(&mut s));
    }
    let mut s = connect();
    let (status, _, _) = hello_with(&mut s, b"a-long-enough-token-1234");
    assert_eq!(status, CudaStatus::Success);
    // Admitted as "remote", with its quota.
    send(&mut s, Op::MemAlloc, &MemAlloc { size: 8192 }, &[]);
    assert_eq!(reply(&mut s).0, CudaStatus::ErrorMemoryAllocation);
    std::thread::sleep(Duration::from_millis(200));
    let log = d.log();
    assert!(
        log.contains("unknown token") && log.contains("no token"),
        "{log}"
    );
    assert!(
        !log.contains("a-long-enough-token"),
        "tokens never reach the log"
    );
}

#[test]
fn bad_configurations_and_open_tcp_stop_the_daemon_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("vmcuda-badconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "[[vm]]\nname = \"a\"\ntcp = true\n",
            vec![],
            "needs a token",
        ),
        (
            "",
            vec!["--tcp", "0.0.0.0:0"],
            "write `allow_non_loopback = true` under `[tcp]` in /",
        ),
    ];
    for (config, args, why) in cases {
        let path = dir.join("host.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
            .args(["serve", "--executor", "host-memory", "--unix"])
            .arg(dir.join("s.sock"))
            .arg("--config")
            .arg(&path)
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
    // With no configuration file, the refusal names the file to write it in.
    let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
        .args(["serve", "--executor", "host-memory", "--unix"])
        .arg(dir.join("s.sock"))
        .args(["--tcp", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    if !std::path::Path::new("/etc/vmcuda/host.toml").exists() {
        assert!(
            err.contains("under `[tcp]` in /etc/vmcuda/host.toml (no configuration file"),
            "{err}"
        );
    }
    assert!(!err.contains("in the built-in default"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_config_reports_what_the_file_admits_and_fails_where_serve_would() {
    let dir = std::env::temp_dir().join(format!("vmcuda-checkconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |config: &str| {
        let path = dir.join("host.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The shipped file: valid, no VMs.
    let (ok, out, err) = check(include_str!("../etc/host.toml"));
    assert!(ok, "{out}{err}");
    assert!(out.contains("local programs: admitted"), "{out}");
    assert!(
        out.contains("cuda ipc: between each VM's processes, at most 4096 exports per VM"),
        "{out}"
    );
    assert!(
        out.contains("idle vms: never suspended by the daemon"),
        "{out}"
    );
    assert!(out.contains("vms: 0") && out.ends_with("ok\n"), "{out}");
    let (ok, idle, err) = check("[suspend]\nidle_after_ms = 5000\n");
    assert!(ok, "{idle}{err}");
    assert!(
        idle.contains("idle vms: suspended after 5000 ms without a call"),
        "{idle}"
    );
    let (ok, _, err) = check("[suspend]\nidle_after = 5\n");
    assert!(!ok && err.contains("idle_after"), "{err}");
    check(include_str!("../etc/host.toml"));
    // The file may be named without --config too, and is read the same.
    let path = dir.join("host.toml");
    let positional = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(positional.status.success());
    assert_eq!(String::from_utf8_lossy(&positional.stdout), out);
    // Both at once is a usage error, not a guess at which one is meant.
    let both = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
        .arg("check-config")
        .arg(&path)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
    // Each way in is named.
    let token = dir.join("vm3.token");
    std::fs::write(&token, "a-token-in-a-file-000001\n").unwrap();
    let (ok, out, err) = check(&format!(
        "[tcp]\nlisten = [\"127.0.0.1:7731\"]\n\
         [[vm]]\nname = \"vm1\"\ncid = 3\n\
         [[vm]]\nname = \"fc1\"\nhybrid_vsock = \"/run/vmcuda/fc1.vsock\"\n\
         [[vm]]\nname = \"vm3\"\ntcp = true\ntoken_file = \"{}\"\n",
        token.display()
    ));
    assert!(ok, "{out}{err}");
    assert!(out.contains("tcp listen: 127.0.0.1:7731\n"), "{out}");
    assert!(out.contains("tls: not configured"), "{out}");
    assert!(out.contains("vms: 3"), "{out}");
    assert!(
        out.contains("  vm1: vhost-user device --vm-name vm1; vsock cid 3\n"),
        "{out}"
    );
    assert!(out.contains("hybrid vsock /run/vmcuda/fc1.vsock"), "{out}");
    assert!(
        out.contains("  vm3: vhost-user device --vm-name vm3; tcp with its token\n"),
        "{out}"
    );
    // What stops the daemon stops the check, with the same reason.
    let (ok, _, err) = check("[[vm]]\nname = \"a\"\ntcp = true\n");
    assert!(!ok && err.contains("needs a token"), "{err}");
    let (ok, _, err) = check("[tcp]\nlisten = [\"0.0.0.0:7731\"]\n");
    assert!(!ok && err.contains("loopback"), "{err}");
    let (ok, _, err) = check("[nonsense]\n");
    assert!(!ok && err.contains("nonsense"), "{err}");
    // A token file the daemon cannot read would keep its VM out: an error here.
    let (ok, out, err) = check(&format!(
        "[[vm]]\nname = \"vm4\"\ntcp = true\ntoken_file = \"{}\"\n",
        dir.join("missing.token").display()
    ));
    assert!(
        !ok && err.contains("VM \"vm4\"") && err.contains("cannot read"),
        "{err}"
    );
    assert!(!out.contains("\nok\n"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_quota_and_a_connection_limit_hold_across_a_vms_connections() {
    let d = Daemon::with_config(
        "shared",
        Some("[local]\nmemory_quota = \"1MiB\"\nmax_connections = 2\n"),
        &[],
    );
    let alloc = |s: &mut std::os::unix::net::UnixStream, size| {
        call(s, Op::MemAlloc, &MemAlloc { size }, &[]).0
    };
    let mut a = d.connect();
    hello(&mut a);
    let mut b = d.connect();
    hello(&mut b);
    assert_eq!(alloc(&mut a, 768 << 10), CudaStatus::Success);
    // B is the same VM: A's allocation counts against B too.
    assert_eq!(alloc(&mut b, 512 << 10), CudaStatus::ErrorMemoryAllocation);
    let info = decode::<MemInfo>(&call(&mut b, Op::MemGetInfo, &MemGetInfo, &[]).1);
    assert_eq!(info.free, 256 << 10);
    // A third connection is one too many.
    let mut c = d.connect();
    let (status, _, reason) = hello_with(&mut c, b"");
    assert_eq!(status, CudaStatus::ErrorDevicesUnavailable);
    assert!(String::from_utf8_lossy(&reason).contains("connections"));
    // When A goes (here without freeing), its memory stops counting.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alloc(&mut b, 512 << 10) != CudaStatus::Success {
        assert!(
            std::time::Instant::now() < deadline,
            "A's share was never released"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
