//! `transport-floor unix|tcp|shm`: the raw transport floor the bridge is measured
//! against, on this machine, with no GPU and no vmcuda code in the path: the median
//! round trip of a 64-byte message (each side sleeping in its reads, and each side
//! polling first as the bridge does), and one stream's throughput in 1 MiB writes
//! cycling through buffers of 1 MiB to 1 GiB, as copies of those sizes do. For
//! `shm` (the shared-memory data path, whose requests still travel on a Unix socket)
//! the throughput is that of filling 4 MiB slots of a shared memfd from ordinary
//! memory, with 1 and 4 threads: what the staging of a pageable copy costs at least.
//! Prints `RESULT <name> <value> <unit>` lines like the CUDA benchmark.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use vmcuda_wire::polling::PollingReader;

const PINGS: usize = 20_000;
const STREAM_BYTES: usize = 4 << 30;
const CHUNK: usize = 1 << 20;
/// The buffer sizes streamed between, as the copies of those sizes move them: the
/// small ones stay in the caches, the large ones come from and go to memory.
const BUFFERS_MIB: [usize; 6] = [1, 4, 16, 64, 256, 1024];
/// The polling window the bridge uses on both sides by default (the guest's is longer;
/// a 64-byte echo never needs it).
const POLL: Duration = Duration::from_micros(50);

/// What one connection to the echo server measures.
#[derive(Clone, Copy)]
enum Test {
    /// 64-byte round trips, each side sleeping in its read.
    Ping,
    /// The same with both sides polling before they sleep, as the bridge does.
    PingPolling,
    /// 4 GiB in 1 MiB writes, cycling through a buffer of this many bytes into
    /// another of the same size, as a copy of that size moves its memory.
    Stream(usize),
}

fn tests() -> Vec<Test> {
    let streams = BUFFERS_MIB.iter().map(|mib| Test::Stream(mib << 20));
    [Test::Ping, Test::PingPolling]
        .into_iter()
        .chain(streams)
        .collect()
}

fn ping_pong(mut w: impl Write, mut r: impl Read) -> f64 {
    let mut buf = [0u8; 64];
    let mut times = Vec::with_capacity(PINGS);
    for i in 0..PINGS {
        let t = Instant::now();
        w.write_all(&buf).expect("write");
        r.read_exact(&mut buf).expect("read");
        if i >= 1000 {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn stream(mut c: impl Write, buffer: usize) -> f64 {
    let buf = vec![7u8; buffer];
    let t = Instant::now();
    for i in 0..STREAM_BYTES / CHUNK {
        let at = (i * CHUNK) % buffer;
        c.write_all(&buf[at..at + CHUNK]).expect("write");
    }
    STREAM_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The client's side of one test: its figure.
fn measure<S: AsFd>(c: S, test: Test) -> f64
where
    for<'a> &'a S: Read + Write,
{
    match test {
        Test::Ping => ping_pong(&c, &c),
        Test::PingPolling => {
            let r = PollingReader::new(&c, Some(c.as_fd()), POLL);
            ping_pong(&c, r)
        }
        Test::Stream(buffer) => stream(&c, buffer),
    }
}

/// The server's side of one test: echo 64-byte messages, or swallow a stream.
fn serve<S: AsFd>(s: S, test: Test)
where
    for<'a> &'a S: Read + Write,
{
    let echo = |r: &mut dyn Read| {
        let mut buf = [0u8; 64];
        for _ in 0..PINGS {
            if r.read_exact(&mut buf).is_err() || (&s).write_all(&buf).is_err() {
                return;
            }
        }
    };
    let swallow = |buffer: usize| {
        // Touched first, as the copy's destination is: no page faults in the stream.
        let mut sink = vec![1u8; buffer];
        let mut at = 0;
        loop {
            let end = (at + CHUNK).min(buffer);
            match (&s).read(&mut sink[at..end]) {
                Ok(n) if n > 0 => at = (at + n) % buffer,
                _ => return,
            }
        }
    };
    match test {
        Test::Ping => echo(&mut &s),
        Test::PingPolling => echo(&mut PollingReader::new(&s, Some(s.as_fd()), POLL)),
        Test::Stream(buffer) => swallow(buffer),
    }
}

fn report(kind: &str, figures: &[f64]) {
    println!("RESULT floor_{kind}_rtt_64B {:.3} us", figures[0]);
    println!("RESULT floor_{kind}_rtt_64B_polling {:.3} us", figures[1]);
    for (mib, gbps) in BUFFERS_MIB.iter().zip(&figures[2..]) {
        println!("RESULT floor_{kind}_stream_{mib}MiB {gbps:.3} GB/s");
    }
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
    match kind.as_str() {
        "unix" => {
            let path =
                std::env::temp_dir().join(format!("vmcuda-floor-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).expect("bind");
            let server = std::thread::spawn(move || {
                for test in tests() {
                    serve(l.accept().expect("accept").0, test);
                }
            });
            let figures: Vec<f64> = tests()
                .iter()
                .map(|&t| measure(UnixStream::connect(&path).expect("connect"), t))
                .collect();
            server.join().expect("server");
            let _ = std::fs::remove_file(&path);
            report(&kind, &figures);
        }
        "tcp" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = l.local_addr().expect("addr");
            let server = std::thread::spawn(move || {
                for test in tests() {
                    let (s, _) = l.accept().expect("accept");
                    s.set_nodelay(true).expect("nodelay");
                    serve(s, test);
                }
            });
            let figures: Vec<f64> = tests()
                .iter()
                .map(|&t| {
                    let c = TcpStream::connect(addr).expect("connect");
                    c.set_nodelay(true).expect("nodelay");
                    measure(c, t)
                })
                .collect();
            server.join().expect("server");
            report(&kind, &figures);
        }
        "shm" => {
            let figures: Vec<f64> = [Test::Ping, Test::PingPolling]
                .iter()
                .map(|&t| {
                    let (a, b) = UnixStream::pair().expect("socketpair");
                    let server = std::thread::spawn(move || serve(b, t));
                    let f = measure(a, t);
                    server.join().expect("server");
                    f
                })
                .collect();
            report(&kind, &figures);
            for threads in [1, 4] {
                println!(
                    "RESULT floor_shm_fill_{threads}_threads {:.3} GB/s",
                    shm_fill(threads)
                );
            }
        }
        other => {
            eprintln!("transport-floor: unknown transport {other} (unix, tcp or shm)");
            std::process::exit(2);
        }
    }
}
