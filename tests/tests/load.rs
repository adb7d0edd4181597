//! Load and faults on the host-memory executor: 16 self-checking guests at once
//! (`tests/load/load_guest.cu`) for about 20 s, some SIGKILLed mid-work, some crashing
//! themselves, raw protocol clients dropping their connections after half a frame or
//! half a copy; guests are replaced as they end. The driver (`vmcuda_tests::load`,
//! also run on the GPU by tests/gpu/run-load.sh) checks each guest's own results and
//! that the daemon stays up and returns to its baseline: no worker processes left,
//! the same descriptors and threads, resident memory not grown materially. Here we
//! also check the daemon's directory and the launch log all workers appended to.

use std::collections::BTreeSet;
use std::path::PathBuf;

use vmcuda_tests::load::{self, LoadConfig};
use vmcuda_tests::{guest_lib_dir, root, Daemon};

fn load_guest() -> PathBuf {
    let path = std::env::var_os("VMCUDA_LOAD_GUEST")
        .map_or_else(|| root().join("build/load/load_guest"), PathBuf::from);
    assert!(
        path.exists(),
        "load_guest not found at {} (set VMCUDA_LOAD_GUEST or run tests/run.sh)",
        path.display()
    );
    path
}

fn dir_entries(d: &Daemon) -> BTreeSet<String> {
    std::fs::read_dir(&d.dir)
        .expect("daemon dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
#[ignore = "needs the linked guest library and the nvcc-built load guest: run tests/run.sh"]
fn sixteen_guests_with_kills_and_crashes_leave_the_daemon_as_it_was() {
    let mut d = Daemon::host_memory("load");
    // A replayable seed: VMCUDA_LOAD_SEED, else the clock (printed either way).
    let seed = std::env::var("VMCUDA_LOAD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs()
        });
    eprintln!("load test seed {seed} (replay with VMCUDA_LOAD_SEED={seed})");
    let mut cfg = LoadConfig::new(d.server(), load_guest(), guest_lib_dir(), d.pid());
    cfg.seed = seed;
    cfg.seconds = 20.0;
    cfg.guests = 16;

    let report = load::run(&cfg);
    eprintln!("{}", report.summary());
    let log = d.log();
    let skip = log.chars().count().saturating_sub(4000);
    let log_tail: String = log.chars().skip(skip).collect();
    assert!(d.alive(), "the daemon died; its log ends:\n{log_tail}");
    assert!(
        report.passed(),
        "{} failures (seed {seed}):\n{}\n--- daemon log ends:\n{log_tail}",
        report.failures.len(),
        report.failures.join("\n")
    );
    // The run did what it claims: many guests, at least 16 at once, every fault kind.
    assert!(report.started >= 2 * cfg.guests, "{}", report.summary());
    assert!(report.max_workers >= cfg.guests, "{}", report.summary());
    assert!(
        report.killed > 0 && report.crashed > 0,
        "{}",
        report.summary()
    );
    assert!(report.raw_clients > 10, "{}", report.summary());
    assert!(report.ops > 0 && report.bytes > 0, "{}", report.summary());

    // Workers leave nothing in the daemon's directory.
    let expected: BTreeSet<String> = ["host.sock", "host.log", "launches.jsonl"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(dir_entries(&d), expected);

    // Every worker appended to one launch log at once: each line must still be whole,
    // and the guests' kernels must be there.
    let text = std::fs::read_to_string(&d.launch_log).expect("launch log");
    let mut patterns = 0;
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("torn launch log line ({e}): {line}"));
        patterns += usize::from(record["kernel"] == "_Z14pattern_kernelPmmm");
    }
    assert!(patterns > 0, "no pattern_kernel launch was recorded");
}
