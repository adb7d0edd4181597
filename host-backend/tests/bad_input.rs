//! A hostile or broken guest against the real daemon: malformed frames, unknown ops,
//! undecodable arguments, stale handles, wild pointers, absurd sizes and a killed
//! worker. Each gets an error reply or a closed connection for that guest alone; the
//! daemon keeps serving everyone else.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use vmcuda_wire::frame::{self, FrameHeader};
use vmcuda_wire::handshake::RUNTIME_VERSION;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

#[test]
fn garbage_bytes_close_only_that_connection() {
    let mut d = Daemon::start("garbage");
    let mut s = d.connect();
    s.write_all(&[0xAB; 64]).unwrap();
    assert!(closed(&mut s));
    assert!(d.alive());
    still_serves(&d);
    assert!(
        d.log().contains("bad frame magic"),
        "the host logs it: {}",
        d.log()
    );
}

#[test]
fn absurd_lengths_close_the_connection() {
    let mut d = Daemon::start("absurd");
    let mut s = d.connect();
    hello(&mut s);
    let mut h = FrameHeader::new(Op::MemcpyHtoD.code(), 0, 1, 0, 0);
    h.data_len = (frame::MAX_DATA_LEN + 1).into();
    s.write_all(zerocopy::IntoBytes::as_bytes(&h)).unwrap();
    assert!(closed(&mut s));
    assert!(d.alive());
    still_serves(&d);
}

#[test]
fn requests_before_the_handshake_are_refused() {
    let mut d = Daemon::start("nohello");
    let mut s = d.connect();
    send(&mut s, Op::MemAlloc, &MemAlloc { size: 64 }, &[]);
    assert!(closed(&mut s));
    assert!(d.alive());
}

#[test]
fn wrong_protocol_version_is_refused_with_a_cuda_error() {
    let d = Daemon::start("version");
    let mut s = d.connect();
    let h = Hello {
        protocol: 999,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: "old".into(),
        pid: 1,
    };
    send(&mut s, Op::Hello, &h, &[]);
    let (status, _, _) = reply(&mut s);
    assert_eq!(status, CudaStatus::ErrorInsufficientDriver);
    assert!(closed(&mut s));
}

#[test]
fn unknown_ops_and_bad_arguments_get_error_replies_and_the_connection_lives() {
    let d = Daemon::start("unknown");
    let mut s = d.connect();
    hello(&mut s);

    send_raw(&mut s, 0xEEEE, &[1, 2, 3], b"payload");
    assert_eq!(reply(&mut s).0, CudaStatus::ErrorNotSupported);

    // MemAlloc's argument is a varint u64: 0xff bytes without an end are undecodable.
    send_raw(&mut s, Op::MemAlloc.code(), &[0xff, 0xff], &[]);
    assert_eq!(reply(&mut s).0, CudaStatus::ErrorInvalidValue);

    // Same connection, still fine.
    send(&mut s, Op::MemGetInfo, &MemGetInfo, &[]);
    assert_eq!(reply(&mut s).0, CudaStatus::Success);
}

/// Issue 34, finding 3: an admitted guest posting unknown ops and repeated hellos in a
/// loop writes at most its worker's burst of log lines plus one a second, and a line
/// that says how many were dropped; it is still served.
#[test]
fn an_admitted_guest_flooding_bad_requests_writes_a_bounded_log() {
    let d = Daemon::start("log-flood");
    let mut s = d.connect();
    hello(&mut s);
    let started = Instant::now();
    let hello_again = Hello {
        protocol: vmcuda_wire::handshake::PROTOCOL_VERSION,
        runtime_version: vmcuda_wire::handshake::RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: "again".into(),
        pid: 1,
    };
    for n in 0..4000 {
        if n % 2 == 0 {
            send_raw(&mut s, 0xEEEE, &[1, 2, 3], b"payload");
            assert_eq!(reply(&mut s).0, CudaStatus::ErrorNotSupported);
        } else {
            send(&mut s, Op::Hello, &hello_again, &[]);
            assert_ne!(reply(&mut s).0, CudaStatus::Success);
        }
    }
    let secs = started.elapsed().as_secs() + 1;
    send(&mut s, Op::MemGetInfo, &MemGetInfo, &[]);
    assert_eq!(reply(&mut s).0, CudaStatus::Success);
    // The worker ends, and sums up what it dropped.
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = d.log();
        if log.contains("lines from vm local") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let bad = log
        .lines()
        .filter(|l| l.contains("unknown op") || l.contains("repeated hello"))
        .count() as u64;
    let bound = u64::from(vmcuda_host::guest_log::BURST)
        + secs * u64::from(vmcuda_host::guest_log::PER_SECOND);
    assert!(bad <= bound, "{bad} lines about bad requests, over {bound}");
    assert!(
        log.contains("lines from vm local (connection"),
        "no summary of what was dropped: {log}"
    );
}

/// Issue 34, finding 3: a VM that spreads its flood over several connections gets no
/// more log than its VM's limit, all its connections together.
#[test]
fn a_vm_flooding_bad_requests_on_many_connections_writes_its_vms_bound() {
    let d = Daemon::start("log-flood-vm");
    let started = Instant::now();
    let floods: Vec<_> = (0..4)
        .map(|_| {
            let mut s = d.connect();
            std::thread::spawn(move || {
                hello(&mut s);
                for _ in 0..1000 {
                    send_raw(&mut s, 0xEEEE, &[1, 2, 3], b"payload");
                    assert_eq!(reply(&mut s).0, CudaStatus::ErrorNotSupported);
                }
            })
        })
        .collect();
    for f in floods {
        f.join().unwrap();
    }
    let secs = started.elapsed().as_secs() + 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = d.log();
        if log.contains("lines from vm local (all its connections)") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let bad = log.lines().filter(|l| l.contains("unknown op")).count() as u64;
    let bound = u64::from(vmcuda_host::spawn::VM_LOG_BURST)
        + secs * u64::from(vmcuda_host::spawn::VM_LOG_PER_SECOND);
    assert!(
        bad <= bound,
        "{bad} lines about bad requests from one VM, over {bound}"
    );
    assert!(
        log.contains("lines from vm local (all its connections)"),
        "no summary of what the VM's limit dropped: {log}"
    );
    still_serves(&d);
}

#[test]
fn stale_handles_wild_pointers_and_absurd_sizes_get_cuda_errors() {
    let d = Daemon::start("handles");
    let mut s = d.connect();
    hello(&mut s);
    let stale = StreamHandle(0x9990);
    let cases: Vec<(Op, Vec<u8>, Vec<u8>, CudaStatus)> = vec![
        (
            Op::StreamSynchronize,
            postcard::to_stdvec(&StreamSynchronize { stream: stale }).unwrap(),
            vec![],
            CudaStatus::ErrorInvalidResourceHandle,
        ),
        (
            Op::StreamDestroy,
            postcard::to_stdvec(&StreamDestroy { stream: stale }).unwrap(),
            vec![],
            CudaStatus::ErrorInvalidResourceHandle,
        ),
        (
            Op::EventQuery,
            postcard::to_stdvec(&EventQuery {
                event: EventHandle(77),
            })
            .unwrap(),
            vec![],
            CudaStatus::ErrorInvalidResourceHandle,
        ),
        (
            Op::ModuleGetFunction,
            postcard::to_stdvec(&ModuleGetFunction {
                module: ModuleHandle(5),
                name: "k".into(),
            })
            .unwrap(),
            vec![],
            CudaStatus::ErrorInvalidResourceHandle,
        ),
        (
            Op::LaunchKernel,
            postcard::to_stdvec(&LaunchKernel {
                function: FunctionHandle(3),
                grid: [1; 3],
                block: [1; 3],
                shared_mem: 0,
                stream: StreamHandle::LEGACY,
                attributes: vec![],
            })
            .unwrap(),
            vec![],
            CudaStatus::ErrorInvalidDeviceFunction,
        ),
        (
            Op::MemFree,
            postcard::to_stdvec(&MemFree { ptr: 0xdead_0000 }).unwrap(),
            vec![],
            CudaStatus::ErrorInvalidValue,
        ),
        (
            Op::MemcpyDtoH,
            postcard::to_stdvec(&MemcpyDtoH {
                src: 0xdead_0000,
                size: 16,
                stream: StreamHandle::LEGACY,
                is_async: false,
            })
            .unwrap(),
            vec![],
            CudaStatus::ErrorInvalidValue,
        ),
        (
            Op::MemcpyDtoH,
            postcard::to_stdvec(&MemcpyDtoH {
                src: 0,
                size: 1 << 40,
                stream: StreamHandle::LEGACY,
                is_async: false,
            })
            .unwrap(),
            vec![],
            CudaStatus::ErrorInvalidValue,
        ),
        (
            Op::MemcpyHtoD,
            postcard::to_stdvec(&MemcpyHtoD {
                dst: 0x1234,
                stream: StreamHandle::LEGACY,
                is_async: false,
            })
            .unwrap(),
            vec![0u8; 32],
            CudaStatus::ErrorInvalidValue,
        ),
        (
            Op::MemAlloc,
            postcard::to_stdvec(&MemAlloc { size: 1 << 50 }).unwrap(),
            vec![],
            CudaStatus::ErrorMemoryAllocation,
        ),
        (
            Op::ModuleLoad,
            postcard::to_stdvec(&ModuleLoad).unwrap(),
            b"not a fatbinary".to_vec(),
            CudaStatus::ErrorInvalidKernelImage,
        ),
        (
            Op::DeviceGetProperties,
            postcard::to_stdvec(&DeviceGetProperties { device: 7 }).unwrap(),
            vec![],
            CudaStatus::ErrorInvalidDevice,
        ),
    ];
    for (op, meta, data, want) in cases {
        send_raw(&mut s, op.code(), &meta, &data);
        let (got, _, reply_data) = reply(&mut s);
        assert_eq!(got, want, "{op:?}");
        assert!(reply_data.is_empty(), "{op:?}: error replies carry no data");
    }
}

#[test]
fn one_guest_cannot_free_another_guests_memory() {
    let d = Daemon::start("isolation");
    let mut a = d.connect();
    hello(&mut a);
    send(&mut a, Op::MemAlloc, &MemAlloc { size: 256 }, &[]);
    let (_, meta, _) = reply(&mut a);
    let ptr = postcard::from_bytes::<Allocated>(&meta).unwrap().ptr;

    let mut b = d.connect();
    hello(&mut b);
    send(&mut b, Op::MemFree, &MemFree { ptr }, &[]);
    assert_eq!(reply(&mut b).0, CudaStatus::ErrorInvalidValue);
    send(
        &mut b,
        Op::MemcpyDtoH,
        &MemcpyDtoH {
            src: ptr,
            size: 8,
            stream: StreamHandle::LEGACY,
            is_async: false,
        },
        &[],
    );
    assert_eq!(reply(&mut b).0, CudaStatus::ErrorInvalidValue);
    // Nor write it, set it, or learn anything about it.
    let write = MemcpyHtoD {
        dst: ptr,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    send(&mut b, Op::MemcpyHtoD, &write, &[0xEE; 8]);
    assert_eq!(reply(&mut b).0, CudaStatus::ErrorInvalidValue);
    let memset = Memset {
        dst: ptr,
        value: 0xEE,
        size: 8,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    send(&mut b, Op::Memset, &memset, &[]);
    assert_eq!(reply(&mut b).0, CudaStatus::ErrorInvalidValue);
    send(
        &mut b,
        Op::PointerGetAttributes,
        &PointerGetAttributes { ptr },
        &[],
    );
    let (status, meta, _) = reply(&mut b);
    assert_eq!(status, CudaStatus::Success);
    let attrs: PointerAttributes = postcard::from_bytes(&meta).unwrap();
    assert_eq!(
        (attrs.memory_type, attrs.device_pointer),
        (0, 0),
        "unknown to B"
    );
    send(
        &mut a,
        Op::PointerGetAttributes,
        &PointerGetAttributes { ptr },
        &[],
    );
    let attrs: PointerAttributes = postcard::from_bytes(&reply(&mut a).1).unwrap();
    assert_eq!(attrs.memory_type, 2, "device memory to its owner");

    // A's memory is intact and still its own.
    send(&mut a, Op::MemFree, &MemFree { ptr }, &[]);
    assert_eq!(reply(&mut a).0, CudaStatus::Success);
}

#[test]
fn a_killed_worker_ends_only_its_own_guest() {
    let mut d = Daemon::start("killed");
    let mut victim = d.connect();
    hello(&mut victim);
    let mut other = d.connect();
    hello(&mut other);

    // Find the victim's worker by the pid the daemon logged for it and kill it hard.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids: Vec<u32> = loop {
        let pids: Vec<u32> = d
            .log()
            .lines()
            .filter(|l| l.contains("worker started"))
            .filter_map(|l| {
                l.split("pid=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        if pids.len() >= 2 || Instant::now() > deadline {
            break pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(pids.len(), 2, "log: {}", d.log());
    Command::new("kill")
        .arg("-9")
        .arg(pids[0].to_string())
        .status()
        .unwrap();

    assert!(closed(&mut victim));
    assert!(d.alive());
    send(&mut other, Op::MemGetInfo, &MemGetInfo, &[]);
    assert_eq!(reply(&mut other).0, CudaStatus::Success);
    still_serves(&d);
}
