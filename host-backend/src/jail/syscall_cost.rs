//! What the worker's system call filter costs on the calls a round trip makes.
//!
//! A measurement, not a check, so ignored by default; run it with
//! `cargo test -p vmcuda-host --lib syscall_cost -- --ignored --nocapture` (as root:
//! the children pin themselves to CPUs 1 and 2), with `VMCUDA_SYSCALL_COST_ROUNDS`
//! rounds (default 1). Each side runs in a fresh process (this test binary run
//! again): no filter, the filter as seccompiler alone compiled it (two filters, before
//! the front part), and the worker's filter ([`confine`] with only the filter). Each
//! times a million of each call; then a ping-pong of 64 bytes over a socket pair
//! between this process and the child, the shape of a guest's round trip, first with
//! both sides sleeping in `read` and then, where there are 4 CPUs or more, polling.
//! The numbers are in docs/security.md.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::seccomp::{clone3_filter, rules_program};
use super::{allowed_syscalls, confine, JailSpec, OnDenied};

const MODE: &str = "VMCUDA_SYSCALL_COST";
/// Calls timed in a row (`VMCUDA_SYSCALL_COST_CALLS`, default a million).
fn calls() -> u32 {
    std::env::var("VMCUDA_SYSCALL_COST_CALLS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1_000_000)
}
const ROUND_TRIPS: u32 = 100_000;
/// Each figure is the best of this many runs: the machine may be shared.
const RUNS: usize = 3;

/// Nanoseconds per call of `f`, best of [`RUNS`].
fn per_call(mut f: impl FnMut()) -> f64 {
    let calls = calls();
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(calls)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The child: time each call, report `cost NAME NS` lines, then echo on stdin (a
/// socket) until it closes.
#[test]
#[ignore = "the measuring child of syscall_cost"]
fn syscall_cost_child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    pin(2);
    let (a, b) = UnixStream::pair().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: epoll_create1 takes a flag; the descriptor it returns is owned below.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epoll >= 0, "epoll_create1");
    // SAFETY: a fresh descriptor nobody else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
    match mode.as_str() {
        "filter" => confine(&JailSpec {
            seccomp: Some(OnDenied::Eperm),
            ..JailSpec::default()
        })
        .unwrap(),
        // The filter as seccompiler alone compiles it (before the front part).
        "seccompiler" => {
            let rules = allowed_syscalls(std::process::id()).unwrap();
            let program = rules_program(rules, OnDenied::Eperm).unwrap();
            nix::sys::prctl::set_no_new_privs().unwrap();
            seccompiler::apply_filter_all_threads(&clone3_filter().unwrap()).unwrap();
            seccompiler::apply_filter_all_threads(&program).unwrap();
        }
        _ => {}
    }
    // Whether the kernel turned speculation mitigations on with the filter.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    for line in status.lines().filter(|l| l.starts_with("Specul")) {
        println!("cost {}", line.replace(['\t', ' '], "_"));
    }
    let word = 0u32;
    let (a, b, null) = (a.as_raw_fd(), b.as_raw_fd(), null.as_raw_fd());
    let epoll = epoll.as_raw_fd();
    let mut buf = [0u8; 64];
    let buf = buf.as_mut_ptr();
    let page = 4096;
    let costs = [
        (
            "getppid",
            // SAFETY: takes no arguments.
            per_call(|| unsafe {
                libc::syscall(libc::SYS_getppid);
            }),
        ),
        (
            "futex-wake",
            // SAFETY: wakes no one on a live local word.
            per_call(|| unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    &word as *const u32,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                );
            }),
        ),
        (
            "ioctl",
            // SAFETY: no such request (ENOTTY, after the filter's argument checks); no
            // pointer is passed.
            per_call(|| unsafe {
                libc::ioctl(null, 0x7f7f);
            }),
        ),
        (
            "ppoll",
            // SAFETY: one pollfd and a zero timeout, both live locals.
            per_call(|| unsafe {
                let mut p = libc::pollfd {
                    fd: a,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::ppoll(&mut p, 1, &zero, std::ptr::null());
            }),
        ),
        (
            "epoll_wait",
            // SAFETY: room for one event, a live local; no waiting.
            per_call(|| unsafe {
                let mut ev = libc::epoll_event { events: 0, u64: 0 };
                libc::epoll_wait(epoll, &mut ev, 1, 0);
            }),
        ),
        (
            "send+recv",
            // SAFETY: `buf` is 64 live bytes, sent on one end and read back on the other.
            per_call(|| unsafe {
                libc::send(a, buf.cast(), 64, 0);
                libc::recv(b, buf.cast(), 64, 0);
            }),
        ),
        (
            "mmap+munmap",
            // SAFETY: a fresh anonymous page, unmapped at once and never touched.
            per_call(|| unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                libc::munmap(p, page);
            }),
        ),
    ];
    for (name, ns) in costs {
        println!("cost {name} {ns:.1}");
    }
    std::io::stdout().flush().unwrap();
    // The round trips: one byte to say ready, then echo, sleeping in each read until
    // a message `b"p"`: from then on, polling (a non-blocking read in a loop).
    let mut sock = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned().unwrap());
    sock.write_all(b"r").unwrap();
    let mut msg = [0u8; 64];
    loop {
        match sock.read(&mut msg) {
            Ok(1) if msg[0] == b'p' => break,
            Ok(n @ 1..) => sock.write_all(&msg[..n]).unwrap(),
            _ => return,
        }
    }
    sock.set_nonblocking(true).unwrap();
    sock.write_all(b"p").unwrap();
    loop {
        match sock.read(&mut msg) {
            Ok(n @ 1..) => sock.write_all(&msg[..n]).unwrap(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => return,
        }
    }
}

/// Keep this thread on `cpu` (when there is one), so that each run sees the same
/// wake-ups.
fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// Best time of a round trip of 64 bytes on `sock`, in ns.
fn round_trips(sock: &mut UnixStream) -> f64 {
    let mut msg = [7u8; 64];
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS {
            sock.write_all(&msg).unwrap();
            sock.read_exact(&mut msg).unwrap();
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(ROUND_TRIPS));
    }
    best
}

/// Best time of a round trip of 64 bytes on `sock`, both sides polling, in ns.
fn polled_round_trips(sock: &mut UnixStream) -> f64 {
    let mut ready = [0u8; 1];
    sock.write_all(b"p").unwrap();
    sock.read_exact(&mut ready).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut msg = [7u8; 64];
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS {
            sock.write_all(&msg).unwrap();
            let mut got = 0;
            while got < msg.len() {
                match sock.read(&mut msg[got..]) {
                    Ok(0) => panic!("the child closed the connection"),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(ROUND_TRIPS));
    }
    best
}

/// One side's figures and round trips (sleeping, then polling where `cpus` allow),
/// in a child.
fn measure(mode: &str, cpus: usize) -> Vec<(String, f64)> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    pin(1);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "jail::syscall_cost::syscall_cost_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MODE, mode)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ours = ours;
    ours.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut ready = [0u8; 1];
    ours.read_exact(&mut ready).unwrap();
    let sleeping = round_trips(&mut ours);
    let mut polling = f64::NAN;
    // Two spinning processes need a core each, beside whatever else runs.
    if cpus >= 4 {
        polling = polled_round_trips(&mut ours);
    }
    drop(ours);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{mode} child failed");
    let mut costs: Vec<(String, f64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // After libtest's own words on the same line.
            let mut f = l[l.find("cost ")? + 5..].split(' ');
            let name = f.next()?.to_string();
            Some((name, f.next().and_then(|v| v.parse().ok()).unwrap_or(0.0)))
        })
        .collect();
    costs.push(("round-trip".into(), sleeping));
    costs.push(("polled-trip".into(), polling));
    costs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "a measurement, not a check: run by hand"]
fn syscall_cost() {
    let modes = ["none", "seccompiler", "filter"];
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rounds: usize = std::env::var("VMCUDA_SYSCALL_COST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    // Rounds interleave the sides, so that a slow spell of the machine hits all three,
    // in turns forwards and backwards, so that none always comes first.
    let mut all: Vec<Vec<Vec<(String, f64)>>> = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..modes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            all[i].push(measure(modes[i], cpus));
        }
    }
    for (mode, runs) in modes.iter().zip(&all) {
        for (name, _) in runs[0].iter().filter(|(n, _)| n.starts_with("Specul")) {
            println!("{mode}: {name}");
        }
    }
    let names: Vec<String> = all[0][0]
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| !n.starts_with("Specul"))
        .collect();
    assert_eq!(names.len(), 9, "every call timed: {names:?}");
    let figure = |side: usize, name: &str| -> Vec<f64> {
        all[side]
            .iter()
            .map(|run| run.iter().find(|(n, _)| n == name).expect("timed").1)
            .collect()
    };
    let best = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
    println!(
        "ns per call over {rounds} rounds: none's best and median; each filter's extra \
         over none, best against best and median against median"
    );
    print!("{:<13}", "");
    for mode in modes {
        print!("{mode:>20}");
    }
    println!();
    for name in &names {
        let (none_best, none_median) = (best(figure(0, name)), median(figure(0, name)));
        print!(
            "{name:<13}{:>20}",
            format!("{none_best:.0} / {none_median:.0}")
        );
        for side in 1..modes.len() {
            let v = figure(side, name);
            let extra = (best(v.clone()) - none_best, median(v) - none_median);
            print!("{:>20}", format!("{:+.0} / {:+.0}", extra.0, extra.1));
        }
        println!();
    }
}
