//! `transport-floor unix|tcp`: the raw transport floor the bridge is measured against,
//! on this machine, with no GPU and no vmcuda code in the path: the median round trip
//! of a 64-byte message, and one stream's throughput in 1 MiB writes. Prints
//! `RESULT <name> <value> <unit>` lines like the CUDA benchmark.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Instant;

const PINGS: usize = 20_000;
const STREAM_BYTES: usize = 4 << 30;
const CHUNK: usize = 1 << 20;

fn ping_pong(mut c: impl Read + Write) -> f64 {
    let mut buf = [0u8; 64];
    let mut times = Vec::with_capacity(PINGS);
    for i in 0..PINGS {
        let t = Instant::now();
        c.write_all(&buf).expect("write");
        c.read_exact(&mut buf).expect("read");
        if i >= 1000 {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn stream(mut c: impl Write) -> f64 {
    let buf = vec![7u8; CHUNK];
    let t = Instant::now();
    for _ in 0..STREAM_BYTES / CHUNK {
        c.write_all(&buf).expect("write");
    }
    STREAM_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Echo 64-byte messages, then swallow a stream.
fn serve(mut s: impl Read + Write) {
    let mut buf = [0u8; 64];
    for _ in 0..PINGS {
        if s.read_exact(&mut buf).is_err() || s.write_all(&buf).is_err() {
            return;
        }
    }
    let mut sink = vec![0u8; CHUNK];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
}

fn main() {
    let kind = std::env::args().nth(1).unwrap_or_else(|| "unix".into());
    let (rtt, gbps) = match kind.as_str() {
        "unix" => {
            let path =
                std::env::temp_dir().join(format!("vmcuda-floor-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).expect("bind");
            let server = std::thread::spawn(move || serve(l.accept().expect("accept").0));
            let c = UnixStream::connect(&path).expect("connect");
            let rtt = ping_pong(&c);
            let gbps = stream(&c);
            drop(c);
            server.join().expect("server");
            let _ = std::fs::remove_file(&path);
            (rtt, gbps)
        }
        "tcp" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = l.local_addr().expect("addr");
            let server = std::thread::spawn(move || {
                let (s, _) = l.accept().expect("accept");
                s.set_nodelay(true).expect("nodelay");
                serve(s)
            });
            let c = TcpStream::connect(addr).expect("connect");
            c.set_nodelay(true).expect("nodelay");
            let rtt = ping_pong(&c);
            let gbps = stream(&c);
            drop(c);
            server.join().expect("server");
            (rtt, gbps)
        }
        other => {
            eprintln!("transport-floor: unknown transport {other} (unix or tcp)");
            std::process::exit(2);
        }
    };
    println!("RESULT floor_{kind}_rtt_64B {rtt:.3} us");
    println!("RESULT floor_{kind}_stream_1MiB_writes {gbps:.3} GB/s");
}
