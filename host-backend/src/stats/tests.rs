//! The figures' unit tests.

use super::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmcuda-stats-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn identity(vm: &str) -> Identity {
    Identity {
        vm: vm.into(),
        program: "prog".into(),
        program_pid: 42,
        caller: "local:42".into(),
        transport: "unix".into(),
        connection_id: 7,
    }
}

#[test]
fn latencies_fall_in_the_first_bucket_that_holds_them() {
    assert_eq!(bucket(0), 0);
    assert_eq!(bucket(1_000), 0, "bounds are inclusive (le)");
    assert_eq!(bucket(1_001), 1);
    assert_eq!(bucket(4_000), 1);
    assert_eq!(bucket(1_048_576_000), LATENCY_BUCKETS - 2);
    assert_eq!(bucket(1_048_576_001), LATENCY_BUCKETS - 1);
    assert_eq!(bucket(u64::MAX), LATENCY_BUCKETS - 1);
}

#[test]
fn a_workers_figures_round_trip_through_its_file_and_are_folded_when_it_ends() {
    let d = dir("roundtrip");
    let mut stats = WorkerStats::create(&d, &identity("vm1")).unwrap();
    let path = stats.path().unwrap().to_path_buf();
    assert_eq!(
        path,
        d.join(format!("workers/{}.stats", std::process::id()))
    );
    stats.record_call(500, Ok(()));
    stats.record_call(5_000, Ok(()));
    stats.record_call(2_000_000_000, Err(CudaStatus::ErrorInvalidValue));
    stats.record_call(10, Err(CudaStatus::ErrorInvalidValue));
    stats.record_call(10, Err(CudaStatus::ErrorMemoryAllocation));
    stats.kernel_launched();
    stats.copied(Direction::HostToDevice, 100);
    stats.copied(Direction::DeviceToHost, 30);
    stats.copied(Direction::DeviceToDevice, 7);
    stats.copied(Direction::HostToDevice, 1);
    stats.set_device_memory(4096);
    stats.set_host_memory(8192);
    stats.set_host_memory_used(3 << 20);
    stats.set_host_memory_limit(4 << 30);

    let census = census(&d, true).unwrap();
    assert_eq!(census.guests.len(), 1);
    let g = &census.guests[0];
    assert_eq!(g.identity, identity("vm1"));
    assert_eq!(g.worker_pid, std::process::id());
    assert_eq!((g.device_memory_bytes, g.host_memory_bytes), (4096, 8192));
    assert_eq!(
        (g.host_memory_used_bytes, g.host_memory_limit_bytes),
        (3 << 20, 4 << 30)
    );
    let c = &g.counts;
    assert_eq!((c.calls_ok, c.calls_error, c.kernels), (2, 3, 1));
    assert_eq!((c.copied_htod, c.copied_dtoh, c.copied_dtod), (101, 30, 7));
    assert_eq!(c.latency_sum_ns, 500 + 5_000 + 2_000_000_000 + 20);
    let mut want = [0; LATENCY_BUCKETS];
    want[0] = 3;
    want[2] = 1;
    want[LATENCY_BUCKETS - 1] = 1;
    assert_eq!(c.latency_buckets, want);
    assert_eq!(c.errors["cudaErrorInvalidValue"], 2);
    assert_eq!(c.errors["cudaErrorMemoryAllocation"], 1);
    assert_eq!(&stats.counts(), c);
    assert!(census.totals.vms.is_empty());

    // Ending folds the counters into the VM's totals and removes the file.
    let before = c.clone();
    drop(stats);
    assert!(!path.exists());
    let census = super::census(&d, false).unwrap();
    assert!(census.guests.is_empty());
    assert_eq!(census.totals.vms["vm1"], before);
    // A second connection of the same VM adds to them.
    let mut stats = WorkerStats::create(&d, &identity("vm1")).unwrap();
    stats.record_call(1, Ok(()));
    drop(stats);
    let totals = super::census(&d, false).unwrap().totals;
    assert_eq!(totals.vms["vm1"].calls_ok, 3);
    assert_eq!(totals.vms["vm1"].latency_buckets[0], 4);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn errors_past_the_slots_are_counted_as_other() {
    let mut stats = WorkerStats::private();
    for code in 1..=(ERROR_SLOTS as u32 + 3) {
        stats.record_call(1, Err(CudaStatus(code)));
    }
    stats.record_call(1, Err(CudaStatus(1)));
    let c = stats.counts();
    assert_eq!(c.calls_error, ERROR_SLOTS as u64 + 4);
    assert_eq!(c.errors[OTHER_ERRORS], 3);
    assert_eq!(c.errors["cudaErrorInvalidValue"], 2);
    assert_eq!(c.errors.values().sum::<u64>(), c.calls_error);
}

#[test]
fn a_dead_workers_file_is_folded_and_removed_and_refusals_are_counted() {
    let d = dir("dead");
    let mut stats = WorkerStats::create(&d, &identity("vm2")).unwrap();
    stats.record_call(1, Ok(()));
    stats.kernel_launched();
    stats.set_device_memory(1 << 20);
    // Pretend the file is a process's that has ended: another start time.
    let path = stats.path().unwrap().to_path_buf();
    let map = Mapping::new(&File::open(&path).unwrap(), false).unwrap();
    let started = map.block().worker_started.load(Relaxed);
    assert_ne!(started, 0, "/proc tells the start time");
    let dead = d.join("workers/dead.stats");
    std::fs::copy(&path, &dead).unwrap();
    drop(map);
    // Keep the copy and throw away the live one without retiring it.
    std::fs::remove_file(&path).unwrap();
    std::mem::forget(stats);
    let f = OpenOptions::new().write(true).open(&dead).unwrap();
    let offset = std::mem::offset_of!(Block, worker_started) as u64;
    f.write_all_at(&(started + 1).to_le_bytes(), offset)
        .unwrap();
    std::fs::rename(&dead, &path).unwrap();

    let unpruned = census(&d, false).unwrap();
    assert!(unpruned.guests.is_empty(), "a dead worker is not listed");
    assert!(path.exists(), "nor removed without pruning");
    assert_eq!(
        unpruned.totals.vms["vm2"].kernels, 1,
        "but what it did counts in the totals reported"
    );
    let pruned = census(&d, true).unwrap();
    assert!(!path.exists());
    assert!(pruned.guests.is_empty());
    assert_eq!(pruned.totals.vms["vm2"].kernels, 1);
    assert_eq!(pruned.totals.vms["vm2"].calls_ok, 1);

    record_refusal(&d, CudaStatus::ErrorNotPermitted).unwrap();
    record_refusal(&d, CudaStatus::ErrorNotPermitted).unwrap();
    let totals = census(&d, false).unwrap().totals;
    assert_eq!(totals.refused["cudaErrorNotPermitted"], 2);
    assert_eq!(
        totals.vms["vm2"].kernels, 1,
        "refusals keep the VMs' totals"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_guests_outlandish_name_is_cut_to_fit() {
    let d = dir("name");
    let mut id = identity("vm3");
    id.program = "\u{1}\"".repeat(1000);
    let stats = WorkerStats::create(&d, &id).unwrap();
    let guests = census(&d, false).unwrap().guests;
    assert_eq!(guests[0].identity.program.chars().count(), NAME_MAX);
    assert!(id.program.starts_with(&guests[0].identity.program));
    drop(stats);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_missing_state_directory_is_an_empty_census() {
    let c = census(Path::new("/nonexistent/vmcuda-state"), true).unwrap();
    assert!(c.guests.is_empty() && c.totals == Totals::default());
}

/// The per-call cost of the figures: printed, not asserted (machines differ).
#[test]
fn per_call_overhead() {
    let d = dir("overhead");
    let mut stats = WorkerStats::create(&d, &identity("bench")).unwrap();
    let n = 2_000_000u64;
    // What a call costs the worker: the counters (a call and, for copies, bytes)...
    let start = std::time::Instant::now();
    for i in 0..n {
        stats.record_call(std::hint::black_box(i & 0xffff), Ok(()));
        stats.copied(Direction::HostToDevice, 64);
    }
    let update = start.elapsed().as_nanos() as f64 / n as f64;
    // ... and the two clock reads that time it.
    let start = std::time::Instant::now();
    for _ in 0..n {
        let t = std::time::Instant::now();
        std::hint::black_box(t.elapsed().as_nanos());
    }
    let clock = start.elapsed().as_nanos() as f64 / n as f64;
    println!("per call: {update:.1} ns of counter updates + {clock:.1} ns of clock reads");
    assert_eq!(stats.counts().calls_ok, n);
    assert_eq!(stats.counts().copied_htod, 64 * n);
    drop(stats);
    std::fs::remove_dir_all(&d).unwrap();
}
