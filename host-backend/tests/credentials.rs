//! An admitted worker keeps no other VM's credentials: the configuration it admitted
//! its guest with, every VM's inline token in it, is gone from its memory.

mod common;

use std::io::{Read, Seek, SeekFrom};

use common::*;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

/// Another VM's token, spelled so that nothing else in the worker matches it.
const OTHER_TOKEN: &str = "q7Zx-other-vm-credential-3b9f1c";

/// The daemon's worker processes.
fn workers(daemon: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == daemon).then_some(pid)
        })
        .collect()
}

/// Whether `needle` is anywhere in the writable memory of process `pid` (its heap,
/// stacks and anonymous mappings, where parsed configuration lives).
fn memory_holds(pid: u32, needle: &[u8]) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut scanned = 0u64;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with("rw") {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let mut bytes = vec![0u8; (end - start) as usize];
        if mem.seek(SeekFrom::Start(start)).is_err() || mem.read_exact(&mut bytes).is_err() {
            continue;
        }
        scanned += bytes.len() as u64;
        if bytes.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
    }
    assert!(scanned > 0, "nothing of worker {pid} could be read");
    false
}

#[test]
fn an_admitted_worker_holds_no_other_vms_token() {
    let config =
        format!("[[vm]]\nname = \"other\"\ncid = 77\ntcp = true\ntoken = \"{OTHER_TOKEN}\"\n");
    let d = Daemon::with_config("credentials", Some(&config), &[]);
    let mut s = d.connect();
    hello(&mut s);
    let (status, _, _) = call(&mut s, Op::MemAlloc, &MemAlloc { size: 4096 }, &[]);
    assert_eq!(status, CudaStatus::Success);
    let worker = workers(d.pid())[0];
    assert!(
        !memory_holds(worker, OTHER_TOKEN.as_bytes()),
        "the admitted worker still holds VM other's token"
    );
    // The scan does find what is there: the daemon itself holds the configuration.
    assert!(memory_holds(d.pid(), OTHER_TOKEN.as_bytes()));
}
