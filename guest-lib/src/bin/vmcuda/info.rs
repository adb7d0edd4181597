//! `vmcuda info`: the remote GPUs, like `deviceQuery` or `nvidia-smi` would show them
//! to a program in this guest.

use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::sys::CUdevice_attribute as A;
use serde::Serialize;
use vmcuda_guest::client::{self, Servers};
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::ExecutorKind;
use vmcuda_wire::transport::ServerAddr;

use crate::probe::{self, Conversation, Outcome};

/// What `info` reports; also its `--json` form.
#[derive(Debug, Serialize)]
pub struct Report {
    pub server: String,
    pub transport: String,
    /// Median round trip of a few cheap calls, in microseconds.
    pub round_trip_us: Option<u64>,
    pub round_trip_samples: usize,
    pub host: HostView,
    pub guest: GuestView,
    pub devices: Vec<DeviceReport>,
}

#[derive(Debug, Serialize)]
pub struct HostView {
    pub protocol: u32,
    pub driver_version: i32,
    /// "cuda", or "host-memory" for the test double that runs no kernels.
    pub executor: &'static str,
    pub test_executor: bool,
    pub banner: String,
    pub device_count: i32,
}

#[derive(Debug, Serialize)]
pub struct GuestView {
    pub protocol: u32,
    pub runtime_version: i32,
}

#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub index: i32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub compute_capability: Option<String>,
    pub multiprocessors: Option<i32>,
    pub memory: Option<MemoryReport>,
    /// Why something above is missing: the host's answer to the failed call.
    pub errors: Vec<String>,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// As `cudaMemGetInfo` reports them to programs here.
    pub total: u64,
    pub free: u64,
    pub used: u64,
    /// The device's own memory, from its properties.
    pub device_total: u64,
    /// Whether `total` is a quota the host set for this guest rather than the device.
    pub quota: bool,
}

impl MemoryReport {
    pub fn new(free: u64, total: u64, device_total: u64) -> MemoryReport {
        MemoryReport {
            total,
            free,
            used: total.saturating_sub(free),
            device_total,
            // A quota shows as a total below the device's own (the host reports the
            // smaller of the two).
            quota: total < device_total,
        }
    }
}

pub fn run(json: bool, timeout: Duration) -> ExitCode {
    // Each named host in turn, or the default's first that answers.
    let hosts: Vec<Vec<ServerAddr>> = match client::servers() {
        Ok(Servers::Named(addrs)) => addrs.into_iter().map(|a| vec![a]).collect(),
        Ok(Servers::Default(candidates)) => vec![candidates],
        Err(e) => {
            eprintln!("vmcuda: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Its devices numbered as a program sees them (after the devices of the hosts
    // named before it).
    let mut reports = Vec::with_capacity(hosts.len());
    let mut first_device = 0;
    for candidates in hosts {
        let (addr, outcome, _) = probe::talk_first(&candidates, client::token(), timeout);
        let conversation = match outcome {
            Outcome::Talked(c) => c,
            Outcome::Failed(e) => {
                eprintln!("vmcuda: {e}\nvmcuda: `vmcuda doctor` checks the setup step by step.");
                return ExitCode::FAILURE;
            }
            Outcome::TimedOut(t) => {
                eprintln!(
                    "vmcuda: no answer from {addr} within {} s.\nvmcuda: `vmcuda doctor` checks the setup step by step.",
                    t.as_secs()
                );
                return ExitCode::FAILURE;
            }
        };
        let mut report = report(&conversation);
        for d in &mut report.devices {
            d.index += first_device;
        }
        first_device += report.host.device_count.max(0);
        reports.push(report);
    }
    if json {
        // One host: its report, as ever; several: a list of them.
        let text = match reports.as_slice() {
            [one] => serde_json::to_string_pretty(one),
            all => serde_json::to_string_pretty(all),
        };
        match text {
            Ok(text) => crate::write_stdout(&(text + "\n")),
            Err(e) => {
                eprintln!("vmcuda: cannot write JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        let count = reports.len();
        for (i, report) in reports.iter().enumerate() {
            if count > 1 {
                crate::write_stdout(&format!("Host {} of {count}\n", i + 1));
            }
            crate::write_stdout(&render(report));
        }
    }
    ExitCode::SUCCESS
}

pub fn transport_name(addr: &ServerAddr) -> String {
    match addr {
        ServerAddr::Unix(_) => "Unix socket".into(),
        ServerAddr::Tcp(_) => "TCP (unencrypted)".into(),
        ServerAddr::Tls(_) => "TCP with TLS".into(),
        ServerAddr::Vsock { cid, port } => format!("virtio-vsock (CID {cid}, port {port})"),
    }
}

/// `13000` → `13.0`, as CUDA writes its versions.
pub fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// nvidia-smi's form of a device UUID (as the guest's NVML writes it).
pub use vmcuda_guest::nvml::uuid_text;

pub fn report(c: &Conversation) -> Report {
    let test_executor = c.hello.executor == ExecutorKind::HostMemory;
    let devices = c
        .devices
        .iter()
        .map(|d| {
            let mut errors = Vec::new();
            let props = d
                .props
                .as_ref()
                .map_err(|s| errors.push(format!("properties: {s}")))
                .ok();
            let attr = |a: A| props.and_then(|p| p.attribute(a as u32));
            let compute = match (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            ) {
                (Some(major), Some(minor)) => Some(format!("{major}.{minor}")),
                _ => None,
            };
            let memory = match (&d.mem, props) {
                (Ok(m), Some(p)) => Some(MemoryReport::new(m.free, m.total, p.total_global_mem)),
                // Without properties the device's own size is unknown: no quota claim.
                (Ok(m), None) => Some(MemoryReport::new(m.free, m.total, m.total)),
                (Err(s), _) => {
                    errors.push(format!("memory: {s}"));
                    None
                }
            };
            DeviceReport {
                index: d.index,
                name: props.map(|p| p.name.clone()),
                uuid: props.map(|p| uuid_text(&p.uuid)),
                compute_capability: compute,
                multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                memory,
                errors,
            }
        })
        .collect();
    Report {
        server: c.addr.to_string(),
        transport: transport_name(&c.addr),
        round_trip_us: c
            .median_round_trip()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        round_trip_samples: c.round_trips.len(),
        host: HostView {
            protocol: c.hello.protocol,
            driver_version: c.hello.driver_version,
            executor: if test_executor { "host-memory" } else { "cuda" },
            test_executor,
            banner: c.hello.banner.clone(),
            device_count: c.hello.device_count,
        },
        guest: GuestView {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
        },
        devices,
    }
}

/// Bytes in binary units, as nvidia-smi's MiB and GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    // First, before anything that looks like a GPU.
    if r.host.test_executor {
        let _ = writeln!(
            out,
            "!!! TEST DOUBLE: this host serves the HOST-MEMORY TEST EXECUTOR, not a GPU.\n\
             !!! Memory, copies, streams and events are real; kernels are recorded, NOT \
             executed: results are not computed.\n"
        );
    }
    let row = |out: &mut String, key: &str, value: &str| {
        let _ = writeln!(out, "  {key:<15} {value}");
    };
    let _ = writeln!(
        out,
        "vmcuda: {} GPU(s) at {} ({})",
        r.host.device_count, r.server, r.transport
    );
    let rtt = match r.round_trip_us {
        Some(us) => format!("{us} µs (median of {} calls)", r.round_trip_samples),
        None => "not measured".into(),
    };
    row(&mut out, "round trip", &rtt);
    row(
        &mut out,
        "host",
        &format!(
            "protocol {}, CUDA driver {} ({})",
            r.host.protocol,
            cuda_version(r.host.driver_version),
            r.host.driver_version
        ),
    );
    row(
        &mut out,
        "guest runtime",
        &format!(
            "protocol {}, CUDA runtime {} ({})",
            r.guest.protocol,
            cuda_version(r.guest.runtime_version),
            r.guest.runtime_version
        ),
    );
    row(
        &mut out,
        "executor",
        &format!("{}: {}", r.host.executor, r.host.banner),
    );
    for d in &r.devices {
        let _ = writeln!(
            out,
            "\nGPU {}: {}",
            d.index,
            d.name.as_deref().unwrap_or("(name unknown)")
        );
        if let Some(uuid) = &d.uuid {
            row(&mut out, "uuid", uuid);
        }
        match (&d.compute_capability, d.multiprocessors) {
            (Some(cc), Some(sms)) => {
                row(&mut out, "compute", &format!("capability {cc}, {sms} SMs"))
            }
            (Some(cc), None) => row(&mut out, "compute", &format!("capability {cc}")),
            _ => {}
        }
        if let Some(m) = &d.memory {
            let text = if m.quota {
                format!(
                    "{} used of a {} quota, {} free (the device has {})",
                    bytes(m.used),
                    bytes(m.total),
                    bytes(m.free),
                    bytes(m.device_total)
                )
            } else {
                format!(
                    "{} used of {}, {} free",
                    bytes(m.used),
                    bytes(m.total),
                    bytes(m.free)
                )
            };
            row(&mut out, "memory", &text);
        }
        for e in &d.errors {
            row(&mut out, "error", e);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_below_the_device_is_a_quota() {
        let gib = 1u64 << 30;
        let q = MemoryReport::new(gib / 4, gib, 16 * gib);
        assert!(q.quota);
        assert_eq!(q.used, 3 * gib / 4);
        assert!(!MemoryReport::new(gib, 16 * gib, 16 * gib).quota);
    }

    #[test]
    fn versions_uuids_and_sizes_read_as_cuda_tools_write_them() {
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12080), "12.8");
        let mut u = [0u8; 16];
        u[0] = 0xab;
        u[15] = 0x01;
        assert_eq!(uuid_text(&u), "GPU-ab000000-0000-0000-0000-000000000001");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
    }
}
