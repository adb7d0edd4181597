//! Reading the figures back: the census of a state directory's workers (live ones'
//! files, dead ones' folded into the totals), and the refusals counted before a
//! session began.

use super::*;

/// Count a connection turned away before its session began.
pub fn record_refusal(state_dir: &Path, status: CudaStatus) -> Result<(), StatsError> {
    let dir = state_dir.join("workers");
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let _lock = lock(&dir, true)?;
    let mut totals = read_totals(&dir)?;
    *totals.refused.entry(status_key(status)).or_default() += 1;
    write_totals(&dir, &totals)
}

/// Read the state directory: the guests connected now (in no particular order) and the
/// totals of ended ones. With `prune`, dead workers' files are folded into the stored
/// totals first (which needs write access); without, they are added to the totals
/// this census reports, and left where they are.
pub fn census(state_dir: &Path, prune_dead: bool) -> Result<Census, StatsError> {
    let dir = state_dir.join("workers");
    if !dir.exists() {
        return Ok(Census::default());
    }
    let _lock = lock(&dir, prune_dead)?;
    if prune_dead {
        prune(&dir)?;
    }
    let mut totals = read_totals(&dir)?;
    let mut guests = Vec::new();
    for (pid, path) in stats_files(&dir)? {
        // A file may vanish between listing and opening (lock-less readers, or a
        // worker retiring): it is simply not there any more.
        match read_guest(&path, pid) {
            Ok(Some((guest, true))) => guests.push(guest),
            // A worker that ended before this census could fold it (unpruned), or
            // after the pruning above: what it did counts in these totals all the same,
            // so a guest that leaves never drops out of both lists at once.
            Ok(Some((guest, false))) => totals
                .vms
                .entry(guest.identity.vm.clone())
                .or_default()
                .add(&guest.counts),
            Ok(None) => {}
            Err(e) => warn!("skipping {e}"),
        }
    }
    Ok(Census { guests, totals })
}

/// Fold dead workers' files into the totals and remove them. Called under the
/// exclusive lock.
pub(super) fn prune(dir: &Path) -> Result<(), StatsError> {
    let mut totals = None;
    for (pid, path) in stats_files(dir)? {
        match read_guest(&path, pid) {
            Ok(Some((_, true))) => continue,
            Ok(Some((guest, false))) => {
                let totals = match &mut totals {
                    Some(t) => t,
                    None => totals.insert(read_totals(dir)?),
                };
                totals
                    .vms
                    .entry(guest.identity.vm.clone())
                    .or_default()
                    .add(&guest.counts);
            }
            Ok(None) => continue,
            Err(e) => {
                // Unreadable and not being written by a live worker: of no use to anyone.
                if alive(pid, 0) {
                    continue;
                }
                warn!("removing {e}");
            }
        }
        if let Some(t) = &totals {
            // Written before each removal, so a failure midway loses nothing.
            write_totals(dir, t)?;
        }
        std::fs::remove_file(&path).map_err(io_error(&path))?;
    }
    // Files a worker died while making.
    let entries = std::fs::read_dir(dir).map_err(io_error(dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".stats.tmp"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !alive(pid, 0) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// The `<pid>.stats` files in `dir`.
fn stats_files(dir: &Path) -> Result<Vec<(u32, PathBuf)>, StatsError> {
    let entries = std::fs::read_dir(dir).map_err(io_error(dir))?;
    Ok(entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid = name.to_str()?.strip_suffix(".stats")?.parse().ok()?;
            Some((pid, entry.path()))
        })
        .collect())
}

/// A worker's file: its guest, and whether the worker still lives. `None` when the
/// file is gone.
fn read_guest(path: &Path, pid: u32) -> Result<Option<(Guest, bool)>, StatsError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path)(e)),
    };
    let bad = |msg: &str| StatsError::Format {
        path: path.to_path_buf(),
        msg: msg.into(),
    };
    let map = Mapping::new(&file, false).map_err(io_error(path))?;
    let b = map.block();
    if b.magic.load(Relaxed) != MAGIC || b.version.load(Relaxed) != LAYOUT_VERSION {
        return Err(bad("not a stats file of this version"));
    }
    if b.worker_pid.load(Relaxed) != u64::from(pid) {
        return Err(bad("its pid is not its name's"));
    }
    let len = b.identity_len.load(Relaxed) as usize;
    if len > IDENTITY_MAX {
        return Err(bad("identity too long"));
    }
    let mut json = vec![0; len];
    file.read_exact_at(&mut json, IDENTITY_OFFSET as u64)
        .map_err(io_error(path))?;
    let identity: Identity =
        serde_json::from_slice(&json).map_err(|e| bad(&format!("identity: {e}")))?;
    let guest = Guest {
        worker_pid: pid,
        identity,
        connected_unix_ms: b.connected_unix_ms.load(Relaxed),
        device_memory_bytes: b.device_memory.load(Relaxed),
        host_memory_bytes: b.host_memory.load(Relaxed),
        host_memory_used_bytes: b.host_kept.load(Relaxed),
        host_memory_limit_bytes: b.host_limit.load(Relaxed),
        compute: match b.compute_priority.load(Relaxed) {
            0 => None,
            p => Some(ComputeView {
                share: b.compute_share.load(Relaxed) as u32,
                priority: crate::compute::Priority::from_word(p - 1),
                cap: match b.compute_cap.load(Relaxed) {
                    0 => None,
                    c => Some(c as u32),
                },
            }),
        },
        counts: counts(b),
    };
    let live = alive(pid, b.worker_started.load(Relaxed));
    Ok(Some((guest, live)))
}

pub(super) fn counts(b: &Block) -> Counts {
    let mut errors = BTreeMap::new();
    for (slot, count) in b.error_status.iter().zip(&b.error_count) {
        let code = slot.load(Relaxed);
        let n = count.load(Relaxed);
        if code != 0 && n != 0 {
            let status = CudaStatus(u32::try_from(code).unwrap_or(u32::MAX));
            *errors.entry(status_key(status)).or_default() += n;
        }
    }
    let other = b.error_other.load(Relaxed);
    if other != 0 {
        errors.insert(OTHER_ERRORS.into(), other);
    }
    Counts {
        calls_ok: b.calls_ok.load(Relaxed),
        calls_error: b.calls_error.load(Relaxed),
        kernels: b.kernels.load(Relaxed),
        copied_htod: b.copied[Direction::HostToDevice as usize].load(Relaxed),
        copied_dtoh: b.copied[Direction::DeviceToHost as usize].load(Relaxed),
        copied_dtod: b.copied[Direction::DeviceToDevice as usize].load(Relaxed),
        latency_sum_ns: b.latency_sum_ns.load(Relaxed),
        latency_buckets: std::array::from_fn(|i| b.latency[i].load(Relaxed)),
        errors,
        module_cache_hits: b.module_cache_hits.load(Relaxed),
        module_cache_bytes: b.module_cache_bytes.load(Relaxed),
        module_cache_misses: b.module_cache_misses.load(Relaxed),
        module_bytes_received: b.module_bytes_received.load(Relaxed),
        gpu_time_ns: b.gpu_time_ns.load(Relaxed),
        throttled_ns: b.throttled_ns.load(Relaxed),
    }
}

pub(super) fn lock(dir: &Path, exclusive: bool) -> Result<Option<Flock<File>>, StatsError> {
    let path = dir.join("lock");
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(f) => f,
        // A reader without write access (`status` as another user) reads unlocked:
        // at worst it misses a worker that is just starting or ending.
        Err(e) if !exclusive && e.kind() == std::io::ErrorKind::PermissionDenied => {
            match File::open(&path) {
                Ok(f) => f,
                Err(_) => return Ok(None),
            }
        }
        Err(e) => return Err(io_error(&path)(e)),
    };
    let how = if exclusive {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockShared
    };
    Flock::lock(file, how)
        .map(Some)
        .map_err(|(_, errno)| io_error(&path)(errno.into()))
}

pub(super) fn read_totals(dir: &Path) -> Result<Totals, StatsError> {
    let path = dir.join("totals.json");
    match std::fs::read(&path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            // Counters restart rather than stop for good; Prometheus copes with resets.
            warn!(path = %path.display(), "unreadable totals ({e}); starting them afresh");
            Totals::default()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Totals::default()),
        Err(e) => Err(io_error(&path)(e)),
    }
}

/// Replace the totals file whole, so a reader never sees half of one. Called under the
/// exclusive lock.
pub(super) fn write_totals(dir: &Path, totals: &Totals) -> Result<(), StatsError> {
    let path = dir.join("totals.json");
    let tmp = dir.join("totals.json.tmp");
    let json = serde_json::to_vec(totals).expect("totals serialize");
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(&json).map_err(io_error(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(io_error(&path))
}

/// Whether process `pid` lives and, when `started` is known (not 0), is the process
/// that started then rather than a later one given the same pid.
fn alive(pid: u32, started: u64) -> bool {
    match started_ticks(pid) {
        Some(now) => started == 0 || now == started,
        None => false,
    }
}

/// A process's start time in clock ticks after boot: field 22 of `/proc/PID/stat`.
pub(super) fn started_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
