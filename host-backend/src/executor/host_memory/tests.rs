use super::super::LEGACY_STREAM;
use super::*;
use crate::executor::StreamOrder;
use crate::executor::{CopyExec, DeviceRange, MemoryExec, PitchedRange};
use vmcuda_wire::CudaStatus;

/// Workers are separate processes, each with its own O_APPEND descriptor of the
/// log; threads with their own descriptors race the same way.
#[test]
fn concurrent_appenders_keep_launch_log_lines_whole() {
    const WRITERS: usize = 4;
    const RECORDS: usize = 3000;
    let path = std::env::temp_dir().join(format!("vmcuda-launch-log-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut log = File::options()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .unwrap();
                for i in 0..RECORDS {
                    let record = LaunchRecord {
                        kernel: format!("k{w}"),
                        grid: [i as u32, 1, 1],
                        block: [32, 1, 1],
                        shared_mem: 0,
                        stream: 0,
                        params: "ab".repeat(64),
                        param_layout: vec![(0, 8)],
                    };
                    append_record(&mut log, &record).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let mut per_writer = [0usize; WRITERS];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("torn launch log line ({e}): {line}"));
        let w: usize = v["kernel"].as_str().unwrap()[1..].parse().unwrap();
        per_writer[w] += 1;
    }
    assert_eq!(per_writer, [RECORDS; WRITERS]);
}

const S: ExecStream = LEGACY_STREAM;

fn exec() -> HostMemoryExecutor {
    HostMemoryExecutor::new(64 << 20, None).unwrap()
}

fn at(ptr: DevicePtr, pitch: u64, width: u64, height: u64) -> PitchedRange {
    PitchedRange::for_tests(ptr, pitch, width, height)
}

fn r(ptr: DevicePtr, len: u64) -> DeviceRange {
    DeviceRange::for_tests(ptr, len)
}

#[test]
fn pitched_copies_and_memsets_land_row_by_row() {
    let mut e = exec();
    let p = e.alloc(4096).unwrap();
    e.memset(r(p, 4096), 0, StreamOrder::Waited(S)).unwrap();
    e.copy_2d_htod(at(p, 16, 3, 2), b"abcdef", StreamOrder::Waited(S))
        .unwrap();
    e.memset_2d(at(p + 3, 16, 1, 2), b'-', StreamOrder::Waited(S))
        .unwrap();
    let mut out = [0u8; 8];
    e.copy_2d_dtoh(&mut out, at(p, 16, 4, 2), StreamOrder::Waited(S))
        .unwrap();
    assert_eq!(&out, b"abc-def-");
    // Overlapping regions copy as if through a temporary.
    e.copy_2d_dtod(at(p + 1, 16, 4, 2), at(p, 16, 4, 2), StreamOrder::Waited(S))
        .unwrap();
    e.copy_2d_dtoh(&mut out, at(p, 16, 4, 2), StreamOrder::Waited(S))
        .unwrap();
    assert_eq!(&out, b"aabcddef");
}

#[test]
fn a_region_past_its_allocation_fails_before_any_byte_moves() {
    let mut e = exec();
    let p = e.alloc(64).unwrap();
    e.memset(r(p, 64), 0, StreamOrder::Waited(S)).unwrap();
    // Rows 0..3 fit, row 4 does not.
    assert_eq!(
        e.memset_2d(at(p, 16, 8, 5), 9, StreamOrder::Waited(S)),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let mut out = [1u8; 64];
    e.copy_dtoh(&mut out, r(p, 64), StreamOrder::Waited(S))
        .unwrap();
    assert_eq!(out, [0u8; 64], "nothing written");
}

#[test]
fn absurd_pitched_regions_get_errors_not_allocations_or_endless_loops() {
    // Found by the dispatch fuzz target: copy_2d_dtod sized its staging buffer from
    // the guest's width and height before checking them, so a 2D copy of 2^54 bytes
    // aborted the worker on a failed allocation.
    let mut e = exec();
    let p = e.alloc(4096).unwrap();
    let huge = 1u64 << 27;
    assert_eq!(
        e.copy_2d_dtod(
            at(p, huge, huge, huge),
            at(p, huge, huge, huge),
            StreamOrder::Waited(S)
        ),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Row addresses that overflow u64.
    assert_eq!(
        e.memset_2d(at(p, u64::MAX, 1, 3), 0, StreamOrder::Waited(S)),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let mut out = [0u8; 2];
    assert_eq!(
        e.copy_2d_dtoh(&mut out, at(u64::MAX, 1, 1, 2), StreamOrder::Waited(S)),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Empty regions are no-ops however many rows they claim (they used to loop
    // over every row).
    e.memset_2d(at(p, 0, 0, u64::MAX), 0, StreamOrder::Waited(S))
        .unwrap();
    e.copy_2d_dtod(
        at(p, 0, 0, u64::MAX),
        at(p, 0, 0, u64::MAX),
        StreamOrder::Waited(S),
    )
    .unwrap();
    e.copy_2d_htod(at(p, 0, 0, u64::MAX), &[], StreamOrder::Waited(S))
        .unwrap();
    // width * height overflowing is a mismatch with the data, not a panic.
    assert_eq!(
        e.copy_2d_htod(
            at(p, 1 << 33, 1 << 32, 1 << 32),
            &[0; 4],
            StreamOrder::Waited(S)
        ),
        Err(CudaStatus::ErrorInvalidValue)
    );
}

/// Stream memory operations on the double: 64-bit writes land; a wait passes where
/// its value is already there and is refused where it is not (no later work of the
/// double's could write it, and the connection must not stall).
#[test]
fn stream_writes_land_and_waits_are_decided_on_arrival() {
    use crate::executor::driver::Driver;
    use vmcuda_wire::driver::wait_value::{EQ, GEQ, NOR};
    let mut x = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let d = x.alloc(64).unwrap();
    x.stream_write_value64(LEGACY_STREAM, d, 0x0102_0304_0506_0708, 0)
        .unwrap();
    assert_eq!(
        x.slice(d, 8).unwrap(),
        &0x0102_0304_0506_0708u64.to_le_bytes()
    );
    x.stream_wait_value(LEGACY_STREAM, d, 0x0506_0708, 4, EQ)
        .unwrap();
    x.stream_wait_value(LEGACY_STREAM, d, 0x0102_0304_0506_0708, 8, GEQ)
        .unwrap();
    assert_eq!(
        x.stream_wait_value(LEGACY_STREAM, d, 9, 8, EQ).unwrap_err(),
        CudaStatus::ErrorNotSupported
    );
    // NOR of a zero word with zero: all ones.
    x.stream_wait_value(LEGACY_STREAM, d + 8, 0, 4, NOR)
        .unwrap();
    assert!(x
        .stream_wait_value(LEGACY_STREAM, d + 64, 0, 8, EQ)
        .is_err());
}
