//! A worker the vhost-user device starts has the bounds of the daemon's workers. The
//! device's own connector starts the real `vmcuda-host worker` (host-memory executor)
//! for guests of a VM with `host_memory = "64MiB"`, and the test speaks the protocol
//! on the connections as a guest would:
//!
//! - once admitted, the worker's data segment is capped by the kernel at the VM's
//!   `host_memory` and the driver's headroom (`RLIMIT_DATA`), as the daemon's workers;
//! - three connections flooding unknown ops get no more log through the device than
//!   the VM's limit, all its connections together, and a summary of what it dropped.
//!
//! It needs the `vmcuda-host` binary: `$VMCUDA_HOST_BIN`, else the one built next to
//! this test (`cargo build -p vmcuda-host`; `tests/run.sh` builds it).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;
use vmcuda_host::memory_cap::DRIVER_HEADROOM;
use vmcuda_host::spawn::{LogCapture, VM_LOG_BURST, VM_LOG_PER_SECOND};
use vmcuda_vmm_glue::muxer::{Connector, HostStream};
use vmcuda_vmm_glue::worker::{
    ChildTracker, ExecutorChoice, WorkerCommand, WorkerConnector, WorkerStream,
};
use vmcuda_wire::frame::{self, FrameHeader, FLAG_REPLY};
use vmcuda_wire::handshake::{Hello, PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::Op;
use vmcuda_wire::CudaStatus;
use vmm_sys_util::epoll::Epoll;

const HOST_MEMORY: u64 = 64 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

fn host_bin() -> PathBuf {
    let path = std::env::var_os("VMCUDA_HOST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/debug/deps/worker_bounds-HASH -> target/debug/vmcuda-host
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("vmcuda-host")
        });
    assert!(
        path.exists(),
        "no vmcuda-host at {} (cargo build -p vmcuda-host, or set VMCUDA_HOST_BIN)",
        path.display()
    );
    path
}

/// The worker's socket, read and written as a blocking stream (it is non-blocking for
/// the device's epoll).
struct Blocking<'a>(&'a mut WorkerStream);

impl Blocking<'_> {
    fn retry<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                r => return r,
            }
        }
    }
}

impl Read for Blocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let s = &mut *self.0;
        Self::retry(|| s.read(buf))
    }
}

impl Write for Blocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let s = &mut *self.0;
        Self::retry(|| s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Send one request and read its reply's status.
fn call(s: &mut WorkerStream, op: u16, meta: &[u8], data: &[u8]) -> CudaStatus {
    let mut s = Blocking(s);
    let h = FrameHeader::new(op, 0, 7, meta.len(), data.len());
    frame::write_frame(&mut s, &h, meta, data).unwrap();
    let (h, _) = frame::read_head(&mut s).expect("a reply");
    assert!(h.has(FLAG_REPLY));
    frame::read_data(&mut s, &h).unwrap();
    CudaStatus(h.status.get())
}

fn hello(s: &mut WorkerStream) -> CudaStatus {
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: Vec::new(),
        client: "device-test".into(),
        pid: 1,
    };
    call(
        s,
        Op::Hello.code(),
        &postcard::to_stdvec(&hello).unwrap(),
        &[],
    )
}

/// The pids of the admitted workers, from their figures files.
fn workers(state: &Path) -> Vec<u32> {
    std::fs::read_dir(state.join("workers"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name();
                    name.to_str()?.strip_suffix(".stats")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A process's soft data limit (`Max data size` in /proc/PID/limits), in bytes.
fn data_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max data size"))
        .unwrap();
    line["Max data size".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{line}"))
}

#[test]
fn the_devices_workers_are_capped_and_log_under_their_vms_limit() {
    let dir = std::env::temp_dir().join(format!("vmcuda-device-bounds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let config = dir.join("host.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n\n[[vm]]\nname = \"dev\"\nhost_memory = \"64MiB\"\n",
            state.display()
        ),
    )
    .unwrap();
    let capture = LogCapture::default();
    let children = ChildTracker::new();
    let mut connector = WorkerConnector::new(
        WorkerCommand {
            host_bin: host_bin(),
            executor: ExecutorChoice::HostMemory,
            launch_log: None,
            vm_name: "dev".into(),
            config: Some(config),
        },
        Arc::new(Epoll::new().unwrap()),
        children.clone(),
        Span::none(),
    )
    .with_logs(capture.logs());

    // Admitted as the device's VM, with its host memory under the kernel's cap.
    let mut first = connector.connect(1, 40001).unwrap();
    assert_eq!(hello(&mut first), CudaStatus::Success, "{}", capture.text());
    let pids = workers(&state);
    assert_eq!(pids.len(), 1, "{}", capture.text());
    assert_eq!(data_limit(pids[0]), HOST_MEMORY + DRIVER_HEADROOM);

    // Three connections flood unknown ops: each worker's own limit lets 50 lines
    // through at once, and the VM's lets 100 through of all of them.
    let mut streams = vec![first];
    for id in 2..=3 {
        let mut s = connector.connect(id, 40000 + id as u32).unwrap();
        assert_eq!(hello(&mut s), CudaStatus::Success);
        streams.push(s);
    }
    let started = Instant::now();
    for s in &mut streams {
        for _ in 0..200 {
            assert_eq!(
                call(s, 0xEEEE, &[1, 2, 3], b"payload"),
                CudaStatus::ErrorNotSupported
            );
        }
    }
    let secs = started.elapsed().as_secs() + 1;
    let summary = "lines from vm dev (all its connections)";
    let deadline = Instant::now() + TIMEOUT;
    while !capture.text().contains(summary) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = capture.text();
    assert!(
        text.contains(summary),
        "no summary of what the VM's limit dropped: {text}"
    );
    let bad = text.lines().filter(|l| l.contains("unknown op")).count() as u64;
    let bound = u64::from(VM_LOG_BURST) + secs * u64::from(VM_LOG_PER_SECOND);
    assert!(bad > 0, "the workers' lines reach the device's log: {text}");
    assert!(
        bad <= bound,
        "{bad} lines about bad requests from one VM, over {bound}"
    );

    drop(streams);
    assert_eq!(children.wait_all(TIMEOUT), 0, "the workers ended");
    let _ = std::fs::remove_dir_all(&dir);
}
