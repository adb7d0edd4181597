//! `raw-guest`: a guest that speaks the wire protocol itself (no guest library), for
//! scripts that test admission and quotas: the Slurm prolog and epilog
//! (tests/slurm/run.sh). It connects to `$VMCUDA_SERVER` with the token in
//! `$VMCUDA_TOKEN_FILE` (first line) or `$VMCUDA_TOKEN`, allocates each size given,
//! printing `alloc MIB: STATUS` per allocation, then holds them for `--hold SECONDS`
//! and prints `held`, then allocates `--then MIB` more, printing `then MIB: STATUS`
//! (or `then MIB: connection closed`). Exit status 0 once connected (whatever the allocations got), 1
//! when refused, printing `refused: STATUS`; 2 on bad arguments.

use std::process::ExitCode;
use std::time::Duration;

use vmcuda_tests::raw_guest::Guest;

fn main() -> ExitCode {
    let mut sizes = Vec::new();
    let mut hold = 0u64;
    let mut then = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--hold" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => hold = s,
                None => return usage(),
            },
            "--then" => match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(m) => then = Some(m),
                None => return usage(),
            },
            mib => match mib.parse::<u64>() {
                Ok(m) => sizes.push(m),
                Err(_) => return usage(),
            },
        }
    }
    let Ok(server) = std::env::var("VMCUDA_SERVER") else {
        eprintln!("raw-guest: VMCUDA_SERVER is not set");
        return ExitCode::from(2);
    };
    let token = match std::env::var("VMCUDA_TOKEN_FILE") {
        Ok(path) => match std::fs::read_to_string(&path) {
            Ok(t) => t.lines().next().unwrap_or("").trim().to_string(),
            Err(e) => {
                eprintln!("raw-guest: {path}: {e}");
                return ExitCode::from(2);
            }
        },
        Err(_) => std::env::var("VMCUDA_TOKEN").unwrap_or_default(),
    };
    let mut guest = match Guest::connect(&server, &token) {
        Ok(g) => g,
        Err(status) => {
            println!("refused: {}", status.name());
            return ExitCode::FAILURE;
        }
    };
    for mib in sizes {
        match guest.alloc(mib << 20) {
            Some(status) => println!("alloc {mib}: {}", status.name()),
            None => println!("alloc {mib}: connection closed"),
        }
    }
    std::thread::sleep(Duration::from_secs(hold));
    println!("held");
    if let Some(mib) = then {
        match guest.alloc(mib << 20) {
            Some(status) => println!("then {mib}: {}", status.name()),
            None => println!("then {mib}: connection closed"),
        }
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: raw-guest [MIB]... [--hold SECONDS] [--then MIB]");
    ExitCode::from(2)
}
