//! `transport-floor unix|tcp|shm`: the raw transport floor the bridge is measured
//! against, on this machine, with no GPU and no vmcuda code in the path: the median
//! round trip of a 64-byte message, and one stream's throughput in 1 MiB writes. For
//! `shm` (the shared-memory data path, whose requests still travel on a Unix socket)
//! the throughput is that of filling 4 MiB slots of a shared memfd from ordinary
//! memory, with 1 and 4 threads: what the staging of a pageable copy costs at least.
//! Prints `RESULT <name> <value> <unit>` lines like the CUDA benchmark.

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

/// GB/s of copying 1 GiB of ordinary memory into 4 MiB slots of a shared memfd
/// mapping, each slot split between `threads` threads, as the guest library stages.
fn shm_fill(threads: usize) -> f64 {
    const SLOT: usize = 4 << 20;
    const SLOTS: usize = 4;
    let fd =
        nix::sys::memfd::memfd_create(c"floor", nix::sys::memfd::MFdFlags::empty()).expect("memfd");
    nix::unistd::ftruncate(&fd, (SLOT * SLOTS) as i64).expect("ftruncate");
    use nix::sys::mman::{mmap, MapFlags, ProtFlags};
    let len = std::num::NonZeroUsize::new(SLOT * SLOTS).expect("nonzero");
    // SAFETY: a fresh shared mapping of our own memfd at an address the kernel picks;
    // it is never unmapped, so the slice below stays valid for the process's life.
    let addr = unsafe {
        mmap(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            &fd,
            0,
        )
    }
    .expect("mmap");
    // SAFETY: the mapping above is `len` writable bytes that nothing else refers to.
    let map = unsafe { std::slice::from_raw_parts_mut(addr.as_ptr().cast::<u8>(), len.get()) };
    let src = vec![5u8; 1 << 30];
    map.fill(0);
    let t = Instant::now();
    for (i, chunk) in src.chunks(SLOT).enumerate() {
        let slot = &mut map[(i % SLOTS) * SLOT..][..chunk.len()];
        let piece = chunk.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for (d, s) in slot.chunks_mut(piece).zip(chunk.chunks(piece)) {
                scope.spawn(move || d.copy_from_slice(s));
            }
        });
    }
    src.len() as f64 / t.elapsed().as_secs_f64() / 1e9
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
        "shm" => {
            let (a, b) = UnixStream::pair().expect("socketpair");
            let server = std::thread::spawn(move || serve(b));
            let rtt = ping_pong(&a);
            drop(a);
            server.join().expect("server");
            for threads in [1, 4] {
                println!(
                    "RESULT floor_shm_fill_{threads}_threads {:.3} GB/s",
                    shm_fill(threads)
                );
            }
            (rtt, f64::NAN)
        }
        other => {
            eprintln!("transport-floor: unknown transport {other} (unix, tcp or shm)");
            std::process::exit(2);
        }
    };
    println!("RESULT floor_{kind}_rtt_64B {rtt:.3} us");
    if !gbps.is_nan() {
        println!("RESULT floor_{kind}_stream_1MiB_writes {gbps:.3} GB/s");
    }
}
