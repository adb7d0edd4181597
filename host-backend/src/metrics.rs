//! Observability: the daemon's Prometheus endpoint (`GET /metrics`) and the report of
//! `vmcuda-host status`. Both read the workers' figures from the state directory (see
//! [`crate::stats`]), so they include every worker that uses it, the vhost-user
//! device's as well as the daemon's.
//!
//! The endpoint is a small HTTP/1.1 responder on a thread of its own that serves every
//! client from one poll loop, each with deadlines, so a slow, silent or garbage client
//! costs a descriptor for seconds, never holds up a scrape, and never touches the
//! guests' listeners.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{debug, warn};

use crate::stats::{self, Census, Counts, Guest, StatsError, LATENCY_BOUNDS_NS};

/// The daemon's own counts of the workers it started.
pub struct DaemonCounters {
    pub started: AtomicU64,
    pub running: AtomicU64,
    /// Workers that ended by a signal or a failure status: crashed or killed.
    pub failed: AtomicU64,
    /// Connections closed at once: their listener had `[admission] max_pending`
    /// connections waiting for admission, or their source `max_pending_per_source`.
    pub refused_pending: AtomicU64,
    /// Connections dropped for sending no hello within `[admission] hello_timeout_ms`.
    pub hello_timeouts: AtomicU64,
}

/// This daemon's workers, counted by its spawner and reapers.
pub static DAEMON: DaemonCounters = DaemonCounters {
    started: AtomicU64::new(0),
    running: AtomicU64::new(0),
    failed: AtomicU64::new(0),
    refused_pending: AtomicU64::new(0),
    hello_timeouts: AtomicU64::new(0),
};

/// A VM's figures: its live guests' summed, plus what its ended ones left.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmFigures {
    pub connections: u64,
    pub device_memory_bytes: u64,
    pub host_memory_bytes: u64,
    /// Host memory its workers keep for it, against its `host_memory`.
    pub host_memory_used_bytes: u64,
    /// Its `host_memory`, as its workers were granted it (else as configured when the
    /// daemon started); None where neither says.
    pub host_memory_limit_bytes: Option<u64>,
    /// Its compute policy, as a connected worker runs under it.
    pub compute: Option<crate::stats::ComputeView>,
    pub counts: Counts,
}

impl VmFigures {
    /// Add a connected guest of this VM's.
    fn add_guest(&mut self, g: &Guest) {
        self.connections += 1;
        self.device_memory_bytes += g.device_memory_bytes;
        self.host_memory_bytes += g.host_memory_bytes;
        self.host_memory_used_bytes += g.host_memory_used_bytes;
        // 0: a worker that does not say (older than the figure).
        if g.host_memory_limit_bytes != 0 {
            let limit = self.host_memory_limit_bytes.get_or_insert(0);
            *limit = (*limit).max(g.host_memory_limit_bytes);
        }
        if g.compute.is_some() {
            self.compute.clone_from(&g.compute);
        }
        self.counts.add(&g.counts);
    }
}

/// A VM the endpoint lists from the start: a configured one, or "local".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownVm {
    pub name: String,
    /// Its `host_memory` as configured.
    pub host_memory: u64,
}

/// Per-VM figures from a census; `known` VMs (the configured ones) appear even before
/// their first connection, so their series exist from the start.
pub fn per_vm(census: &Census, known: &[KnownVm]) -> BTreeMap<String, VmFigures> {
    let mut vms = per_vm_connected(&census.guests);
    for (name, counts) in &census.totals.vms {
        vms.entry(name.clone()).or_default().counts.add(counts);
    }
    for vm in known {
        let figures = vms.entry(vm.name.clone()).or_default();
        // A connected guest's worker says the limit it was granted.
        figures
            .host_memory_limit_bytes
            .get_or_insert(vm.host_memory);
    }
    vms
}

/// The figures of the VMs that have guests connected now, from those guests alone.
pub fn per_vm_connected(guests: &[Guest]) -> BTreeMap<String, VmFigures> {
    let mut vms: BTreeMap<String, VmFigures> = BTreeMap::new();
    for g in guests {
        vms.entry(g.identity.vm.clone()).or_default().add_guest(g);
    }
    vms
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A byte figure as a sample's value: `+Inf` for unbounded (`u64::MAX`).
fn gauge_bytes(bytes: u64) -> String {
    if bytes == u64::MAX {
        "+Inf".into()
    } else {
        bytes.to_string()
    }
}

/// A bucket bound in seconds, written exactly (the bounds are whole microseconds).
fn seconds(ns: u64) -> String {
    let text = format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// The Prometheus text exposition (format 0.0.4) of `census` (or of why there is
/// none), the daemon's own counts, and the `known` VMs.
pub fn render(census: Result<&Census, &StatsError>, known: &[KnownVm]) -> String {
    let mut out = Out(String::new());
    let vms = census.map(|c| per_vm(c, known)).unwrap_or_default();
    let each = |out: &mut Out, name: &str, f: &dyn Fn(&VmFigures) -> u64| {
        for (vm, fig) in &vms {
            out.sample(name, &[("vm", vm)], f(fig));
        }
    };

    out.head(
        "vmcuda_vm_connections",
        "gauge",
        "Guest connections (worker processes) the VM has now.",
    );
    each(&mut out, "vmcuda_vm_connections", &|f| f.connections);
    out.head(
        "vmcuda_vm_device_memory_bytes",
        "gauge",
        "Device memory the VM's guests hold now (their allocations).",
    );
    each(&mut out, "vmcuda_vm_device_memory_bytes", &|f| {
        f.device_memory_bytes
    });
    out.head(
        "vmcuda_vm_host_memory_bytes",
        "gauge",
        "Page-locked host memory the VM's guests share with the host now.",
    );
    each(&mut out, "vmcuda_vm_host_memory_bytes", &|f| {
        f.host_memory_bytes
    });
    out.head(
        "vmcuda_vm_host_memory_used_bytes",
        "gauge",
        "Host memory the VM's workers keep for its guests now (graphs, module images, frame buffers, handle tables), as counted against its host_memory.",
    );
    each(&mut out, "vmcuda_vm_host_memory_used_bytes", &|f| {
        f.host_memory_used_bytes
    });
    out.head(
        "vmcuda_vm_host_memory_limit_bytes",
        "gauge",
        "The VM's host_memory: what its workers may keep for it, all its connections together (+Inf: unbounded).",
    );
    for (vm, f) in &vms {
        if let Some(limit) = f.host_memory_limit_bytes {
            out.sample(
                "vmcuda_vm_host_memory_limit_bytes",
                &[("vm", vm)],
                gauge_bytes(limit),
            );
        }
    }
    out.head(
        "vmcuda_vm_calls_total",
        "counter",
        "CUDA calls the VM's guests made, by outcome.",
    );
    for (vm, f) in &vms {
        out.sample(
            "vmcuda_vm_calls_total",
            &[("vm", vm), ("outcome", "ok")],
            f.counts.calls_ok,
        );
        out.sample(
            "vmcuda_vm_calls_total",
            &[("vm", vm), ("outcome", "error")],
            f.counts.calls_error,
        );
    }
    out.head(
        "vmcuda_vm_errors_total",
        "counter",
        "Failed CUDA calls by the status they returned.",
    );
    for (vm, f) in &vms {
        for (status, n) in &f.counts.errors {
            out.sample(
                "vmcuda_vm_errors_total",
                &[("vm", vm), ("status", status)],
                n,
            );
        }
    }
    out.head(
        "vmcuda_vm_kernels_launched_total",
        "counter",
        "Kernel launches the host accepted from the VM's guests.",
    );
    each(&mut out, "vmcuda_vm_kernels_launched_total", &|f| {
        f.counts.kernels
    });
    out.head(
        "vmcuda_vm_copied_bytes_total",
        "counter",
        "Bytes the VM's guests copied, by direction (htod, dtoh, dtod).",
    );
    for (vm, f) in &vms {
        for (direction, n) in [
            ("htod", f.counts.copied_htod),
            ("dtoh", f.counts.copied_dtoh),
            ("dtod", f.counts.copied_dtod),
        ] {
            out.sample(
                "vmcuda_vm_copied_bytes_total",
                &[("vm", vm), ("direction", direction)],
                n,
            );
        }
    }
    out.head(
        "vmcuda_vm_module_images_total",
        "counter",
        "Module images the VM's guests named by hash: served from the VM's module cache (hit) or not (miss).",
    );
    for (vm, f) in &vms {
        for (outcome, n) in [
            ("hit", f.counts.module_cache_hits),
            ("miss", f.counts.module_cache_misses),
        ] {
            out.sample(
                "vmcuda_vm_module_images_total",
                &[("vm", vm), ("outcome", outcome)],
                n,
            );
        }
    }
    out.head(
        "vmcuda_vm_module_image_bytes_total",
        "counter",
        "Bytes of module images the VM's guests loaded: received over the connection, or served from the module cache instead (cached).",
    );
    for (vm, f) in &vms {
        for (path, n) in [
            ("received", f.counts.module_bytes_received),
            ("cached", f.counts.module_cache_bytes),
        ] {
            out.sample(
                "vmcuda_vm_module_image_bytes_total",
                &[("vm", vm), ("path", path)],
                n,
            );
        }
    }
    out.head(
        "vmcuda_vm_gpu_time_seconds_total",
        "counter",
        "Time the VM's workers held the turn on the GPU (their work ran, or the GPU waited for it).",
    );
    for (vm, f) in &vms {
        out.sample(
            "vmcuda_vm_gpu_time_seconds_total",
            &[("vm", vm)],
            seconds(f.counts.gpu_time_ns),
        );
    }
    out.head(
        "vmcuda_vm_throttled_seconds_total",
        "counter",
        "Time the VM's requests waited for a turn on the GPU (others' turns, or its cap).",
    );
    for (vm, f) in &vms {
        out.sample(
            "vmcuda_vm_throttled_seconds_total",
            &[("vm", vm)],
            seconds(f.counts.throttled_ns),
        );
    }
    out.head(
        "vmcuda_vm_compute_share",
        "gauge",
        "The VM's share of the GPU's time (a weight), with its priority and cap, as its connected workers run under them.",
    );
    for (vm, f) in &vms {
        if let Some(c) = &f.compute {
            let cap = c.cap.map_or_else(|| "none".to_string(), |c| c.to_string());
            out.sample(
                "vmcuda_vm_compute_share",
                &[
                    ("vm", vm),
                    ("priority", c.priority.name()),
                    ("cap_percent", &cap),
                ],
                c.share,
            );
        }
    }
    out.head(
        "vmcuda_vm_call_duration_seconds",
        "histogram",
        "Host time per call, from its request read to its reply ready.",
    );
    for (vm, f) in &vms {
        let mut cumulative = 0;
        for (i, n) in f.counts.latency_buckets.iter().enumerate() {
            cumulative += n;
            let le = LATENCY_BOUNDS_NS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |&ns| seconds(ns));
            out.sample(
                "vmcuda_vm_call_duration_seconds_bucket",
                &[("vm", vm), ("le", &le)],
                cumulative,
            );
        }
        out.sample(
            "vmcuda_vm_call_duration_seconds_sum",
            &[("vm", vm)],
            f.counts.latency_sum_ns as f64 / 1e9,
        );
        out.sample(
            "vmcuda_vm_call_duration_seconds_count",
            &[("vm", vm)],
            cumulative,
        );
    }

    out.head(
        "vmcuda_refused_connections_total",
        "counter",
        "Connections turned away before a session began, by the status the guest got.",
    );
    if let Ok(c) = census {
        for (status, n) in &c.totals.refused {
            out.sample("vmcuda_refused_connections_total", &[("status", status)], n);
        }
    }
    out.head(
        "vmcuda_workers_started_total",
        "counter",
        "Worker processes this daemon started (one per guest connection).",
    );
    out.sample(
        "vmcuda_workers_started_total",
        &[],
        DAEMON.started.load(Relaxed),
    );
    out.head(
        "vmcuda_workers_running",
        "gauge",
        "This daemon's worker processes now, admitted or not yet.",
    );
    out.sample("vmcuda_workers_running", &[], DAEMON.running.load(Relaxed));
    out.head(
        "vmcuda_workers_failed_total",
        "counter",
        "This daemon's workers that crashed or were killed.",
    );
    out.sample(
        "vmcuda_workers_failed_total",
        &[],
        DAEMON.failed.load(Relaxed),
    );
    out.head(
        "vmcuda_connections_refused_pending_total",
        "counter",
        "Connections closed at once because their listener had [admission] max_pending waiting, or their source max_pending_per_source.",
    );
    out.sample(
        "vmcuda_connections_refused_pending_total",
        &[],
        DAEMON.refused_pending.load(Relaxed),
    );
    out.head(
        "vmcuda_connections_hello_timeout_total",
        "counter",
        "Connections dropped for sending no hello within [admission] hello_timeout_ms.",
    );
    out.sample(
        "vmcuda_connections_hello_timeout_total",
        &[],
        DAEMON.hello_timeouts.load(Relaxed),
    );
    out.head(
        "vmcuda_stats_up",
        "gauge",
        "1 when the per-VM figures could be read from the state directory.",
    );
    out.sample("vmcuda_stats_up", &[], u8::from(census.is_ok()));
    out.0
}

/// `vmcuda-host status --json`: the connected guests, and their VMs' figures.
#[derive(Serialize)]
pub struct StatusReport<'a> {
    pub guests: &'a [Guest],
    pub vms: Vec<VmStatus>,
}

/// A VM with guests connected, in `status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VmStatus {
    pub vm: String,
    pub connections: u64,
    pub device_memory_bytes: u64,
    pub host_memory_bytes: u64,
    pub host_memory_used_bytes: u64,
    /// Its `host_memory` (`u64::MAX`: unbounded); None where no worker says.
    pub host_memory_limit_bytes: Option<u64>,
    /// Its connected workers' turns on the GPU, and their waits for one, in ns.
    pub gpu_time_ns: u64,
    pub throttled_ns: u64,
    /// Its compute policy; None where its workers take no turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute: Option<crate::stats::ComputeView>,
}

/// The VMs of `guests`, by name.
pub fn vm_status(guests: &[Guest]) -> Vec<VmStatus> {
    per_vm_connected(guests)
        .into_iter()
        .map(|(vm, f)| VmStatus {
            vm,
            connections: f.connections,
            device_memory_bytes: f.device_memory_bytes,
            host_memory_bytes: f.host_memory_bytes,
            host_memory_used_bytes: f.host_memory_used_bytes,
            host_memory_limit_bytes: f.host_memory_limit_bytes,
            gpu_time_ns: f.counts.gpu_time_ns,
            throttled_ns: f.counts.throttled_ns,
            compute: f.compute,
        })
        .collect()
}

/// Guests in the order `status` lists them: by VM, then oldest connection first.
pub fn sort_guests(guests: &mut [Guest]) {
    guests.sort_by(|a, b| {
        (&a.identity.vm, a.connected_unix_ms, a.worker_pid).cmp(&(
            &b.identity.vm,
            b.connected_unix_ms,
            b.worker_pid,
        ))
    });
}

/// `vmcuda-host status`: one line per connected guest, `now_ms` being the time now
/// (Unix milliseconds), then one line per VM with its memory against its limits.
pub fn status_table(guests: &[Guest], now_ms: u64) -> String {
    if guests.is_empty() {
        return "no guests connected\n".into();
    }
    let header = [
        "VM",
        "PROGRAM[PID]",
        "CALLER",
        "TRANSPORT",
        "CONNECTED",
        "MEMORY",
        "HOST MEMORY",
        "KERNELS",
        "COPIED",
        "CALLS",
        "ERRORS",
    ];
    let rows: Vec<Vec<String>> = guests
        .iter()
        .map(|g| {
            vec![
                printable(&g.identity.vm),
                format!(
                    "{}[{}]",
                    printable(&g.identity.program),
                    g.identity.program_pid
                ),
                printable(&g.identity.caller),
                g.identity.transport.clone(),
                format!(
                    "{} ago",
                    duration(now_ms.saturating_sub(g.connected_unix_ms) / 1000)
                ),
                bytes(g.device_memory_bytes + g.host_memory_bytes),
                bytes(g.host_memory_used_bytes),
                g.counts.kernels.to_string(),
                bytes(g.counts.copied()),
                g.counts.calls().to_string(),
                g.counts.calls_error.to_string(),
            ]
        })
        .collect();
    let mut out = table(&header, &rows, 5);
    let header = [
        "VM",
        "COMPUTE",
        "CONNECTIONS",
        "MEMORY",
        "HOST MEMORY",
        "HOST LIMIT",
        "GPU TIME",
        "THROTTLED",
    ];
    let rows: Vec<Vec<String>> = vm_status(guests)
        .iter()
        .map(|v| {
            vec![
                printable(&v.vm),
                match &v.compute {
                    None => "-".into(),
                    Some(c) => match c.cap {
                        None => format!("share {} {}", c.share, c.priority.name()),
                        Some(cap) => {
                            format!("share {} {} cap {cap}%", c.share, c.priority.name())
                        }
                    },
                },
                v.connections.to_string(),
                bytes(v.device_memory_bytes + v.host_memory_bytes),
                bytes(v.host_memory_used_bytes),
                match v.host_memory_limit_bytes {
                    Some(u64::MAX) => "unbounded".into(),
                    Some(limit) => bytes(limit),
                    None => "-".into(),
                },
                format!("{:.3} s", v.gpu_time_ns as f64 / 1e9),
                format!("{:.3} s", v.throttled_ns as f64 / 1e9),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table(&header, &rows, 2));
    out
}

/// `rows` under `header` in columns as wide as their widest cell: text to the left,
/// the columns from `numbers_from` on (numbers) to the right.
fn table(header: &[&str], rows: &[Vec<String>], numbers_from: usize) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i >= numbers_from {
                let _ = write!(text, "{cell:>w$}  ", w = widths[i]);
            } else {
                let _ = write!(text, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
    out
}

/// Guest-supplied text without control characters, which could rewrite the terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s:02}s"),
        (0, _, _) => format!("{h}h{m:02}m"),
        _ => format!("{d}d{h:02}h"),
    }
}

mod endpoint;
pub use endpoint::*;

#[cfg(test)]
mod tests;
