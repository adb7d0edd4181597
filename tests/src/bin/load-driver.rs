//! `load-driver`: the load and fault run of `vmcuda_tests::load` against a daemon
//! that is already running (tests/gpu/run-load.sh uses it on the GPU machine).
//! Prints the summary line (`load seed=... key=value ...`) and each failure; exits 1
//! when any check failed, 2 on bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vmcuda_tests::load::{run, LoadConfig};

const USAGE: &str = "usage: load-driver --server ADDR --guest PATH --guest-lib DIR --daemon-pid PID
  [--cudart-dir DIR (NVIDIA's libcudart.so.13, when the loader finds none)] [--seconds S (20)] [--guests N (16)] [--seed N (from the clock)] [--verify-kernels]
  [--kill-rate F (0.3)] [--crash-rate F (0.1)] [--raw-per-second F (4)]
  [--guest-seconds LO:HI (1:4)] [--max-mib M (48)] [--settle-seconds S (10)]
  [--rss-slack-mib M (16)] [--verbose]
  [--hostile [--flood-tcp HOST:PORT] [--hostile-vm SERVER TOKEN]] (one more guest floods logs and graphs, and
  silent connections to the daemon's TCP listener from 127.0.0.2)";

fn parse() -> Result<LoadConfig, String> {
    let mut args = std::env::args().skip(1);
    let mut server = None;
    let mut guest = None;
    let mut lib = None;
    let mut pid = None;
    let mut cfg = LoadConfig::new(String::new(), PathBuf::new(), PathBuf::new(), 0);
    cfg.seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: bad value `{v}`"))
    }
    while let Some(a) = args.next() {
        match a.as_str() {
            "--server" => server = args.next(),
            "--guest" => guest = args.next().map(PathBuf::from),
            "--guest-lib" => lib = args.next().map(PathBuf::from),
            "--cudart-dir" => cfg.cudart_dir = args.next().map(PathBuf::from),
            "--daemon-pid" => pid = Some(num(&a, args.next())?),
            "--seconds" => cfg.seconds = num(&a, args.next())?,
            "--guests" => cfg.guests = num(&a, args.next())?,
            "--seed" => cfg.seed = num(&a, args.next())?,
            "--verify-kernels" => cfg.verify_kernels = true,
            "--kill-rate" => cfg.kill_rate = num(&a, args.next())?,
            "--crash-rate" => cfg.crash_rate = num(&a, args.next())?,
            "--raw-per-second" => cfg.raw_per_second = num(&a, args.next())?,
            "--guest-seconds" => {
                let v: String = args.next().ok_or("--guest-seconds needs LO:HI")?;
                let (lo, hi) = v.split_once(':').ok_or("--guest-seconds needs LO:HI")?;
                cfg.guest_seconds = (num(&a, Some(lo.into()))?, num(&a, Some(hi.into()))?);
            }
            "--max-mib" => cfg.max_mib = num(&a, args.next())?,
            "--settle-seconds" => cfg.settle = Duration::from_secs_f64(num(&a, args.next())?),
            "--rss-slack-mib" => cfg.rss_slack_kib = num::<u64>(&a, args.next())? << 10,
            "--verbose" => cfg.verbose = true,
            "--hostile" => {
                cfg.hostile.get_or_insert_with(Default::default);
            }
            "--flood-tcp" => {
                cfg.hostile.get_or_insert_with(Default::default).flood_tcp =
                    Some(args.next().ok_or("--flood-tcp needs HOST:PORT")?)
            }
            "--hostile-vm" => {
                let server = args.next().ok_or("--hostile-vm needs SERVER TOKEN")?;
                let server = server
                    .parse()
                    .map_err(|e| format!("--hostile-vm {server}: {e}"))?;
                let token = args.next().ok_or("--hostile-vm needs SERVER TOKEN")?;
                cfg.hostile.get_or_insert_with(Default::default).own_vm = Some((server, token));
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    cfg.server = server.ok_or("--server is required")?;
    cfg.guest =
        std::path::absolute(guest.ok_or("--guest is required")?).map_err(|e| e.to_string())?;
    cfg.guest_lib_dir =
        std::path::absolute(lib.ok_or("--guest-lib is required")?).map_err(|e| e.to_string())?;
    cfg.daemon_pid = pid.ok_or("--daemon-pid is required")?;
    if cfg.guests == 0 || cfg.guest_seconds.0 <= 0.0 || cfg.guest_seconds.1 < cfg.guest_seconds.0 {
        return Err("--guests must be positive and --guest-seconds LO:HI with 0 < LO <= HI".into());
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    let cfg = match parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("load-driver: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "load-driver: seed {} ({} guests for {} s against {}, daemon pid {})",
        cfg.seed, cfg.guests, cfg.seconds, cfg.server, cfg.daemon_pid
    );
    let report = run(&cfg);
    for f in &report.failures {
        println!("FAILURE: {f}");
    }
    println!("{}", report.summary());
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
