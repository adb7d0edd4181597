//! The harness the daemon's integration tests share: a daemon on its own socket, and
//! raw frames to and from it.
#![allow(dead_code)] // each test file uses its own part of it

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use vmcuda_wire::frame::{self, FrameHeader, FLAG_REPLY};
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

pub struct Daemon {
    child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Daemon {
    /// A daemon on the host-memory executor with the built-in default policy.
    pub fn start(name: &str) -> Daemon {
        Self::with_config(name, None, &[])
    }

    /// A daemon with `config` (TOML) as its configuration file, when given.
    pub fn with_config(name: &str, config: Option<&str>, extra: &[&str]) -> Daemon {
        let dir = std::env::temp_dir().join(format!("vmcuda-bad-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"));
        cmd.args(["serve", "--executor", "host-memory", "--unix"])
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(extra);
        if let Some(text) = config {
            let path = dir.join("host.toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(path);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("host.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, dir, socket }
    }

    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("host.log")).unwrap_or_default()
    }

    /// The log once it holds every one of `lines` (workers' lines reach it through the
    /// daemon a little after their replies), or after 10 s as it is then.
    pub fn log_once_it_has(&self, lines: &[&str]) -> String {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log();
            if lines.iter().all(|l| log.contains(l)) || std::time::Instant::now() >= until {
                return log;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `vmcuda-host status --json` of this daemon's state directory.
    pub fn status_json(&self) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
            .args(["status", "--json", "--state-dir"])
            .arg(self.dir.join("state"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn send_raw(s: &mut impl Write, op: u16, meta: &[u8], data: &[u8]) {
    let h = FrameHeader::new(op, 0, 7, meta.len(), data.len());
    frame::write_frame(s, &h, meta, data).unwrap();
}

pub fn send<R: Serialize>(s: &mut impl Write, op: Op, req: &R, data: &[u8]) {
    send_raw(s, op.code(), &postcard::to_stdvec(req).unwrap(), data);
}

/// Read one reply: (status, meta, data).
pub fn reply(s: &mut impl Read) -> (CudaStatus, Vec<u8>, Vec<u8>) {
    let (h, meta) = frame::read_head(s).expect("a reply");
    assert!(h.has(FLAG_REPLY));
    let data = frame::read_data(s, &h).unwrap();
    (CudaStatus(h.status.get()), meta, data)
}

/// Send a hello with `token`: (status, reply meta, reply data).
pub fn hello_with(s: &mut (impl Read + Write), token: &[u8]) -> (CudaStatus, Vec<u8>, Vec<u8>) {
    let h = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: token.to_vec(),
        client: "daemon-test".into(),
        pid: 1,
    };
    send(s, Op::Hello, &h, &[]);
    reply(s)
}

/// A successful hello; the reply.
pub fn hello(s: &mut (impl Read + Write)) -> HelloReply {
    let (status, meta, _) = hello_with(s, b"");
    assert_eq!(status, CudaStatus::Success);
    let r: HelloReply = postcard::from_bytes(&meta).unwrap();
    assert_eq!(r.executor, ExecutorKind::HostMemory);
    r
}

/// The connection was closed by the host (EOF, or reset).
pub fn closed(s: &mut impl Read) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

/// A healthy guest still gets served.
pub fn still_serves(d: &Daemon) {
    let mut s = d.connect();
    hello(&mut s);
    send(&mut s, Op::MemAlloc, &MemAlloc { size: 64 }, &[]);
    let (status, meta, _) = reply(&mut s);
    assert_eq!(status, CudaStatus::Success);
    let a: Allocated = postcard::from_bytes(&meta).unwrap();
    assert_ne!(a.ptr, 0);
}

/// A loopback address with a port nobody listens on now (for a daemon to take).
pub fn free_tcp_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").to_string()
}

/// A TCP connection to the daemon, once it listens.
pub fn connect_tcp(addr: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                return s;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("daemon never listened on {addr}: {e}"),
        }
    }
}

/// Send a request and read its reply: (status, meta, data).
pub fn call<R: serde::Serialize>(
    s: &mut (impl Read + Write),
    op: Op,
    req: &R,
    data: &[u8],
) -> (CudaStatus, Vec<u8>, Vec<u8>) {
    send(s, op, req, data);
    reply(s)
}
