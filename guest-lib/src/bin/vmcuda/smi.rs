//! `vmcuda smi`: an nvidia-smi-like table of the guest's GPUs (memory, utilization,
//! temperature, power, its own processes), and `--query-gpu` / `--query-compute-apps`
//! CSV for scripts. It shows what the guest's NVML shows ([`vmcuda_guest::nvml`]):
//! memory is the guest's own (its quota as the total where it has one), processes are
//! its own.

use std::process::ExitCode;

use vmcuda_guest::nvml::{self, DeviceView};

/// `--format=csv[,noheader][,nounits]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CsvFormat {
    pub header: bool,
    pub units: bool,
}

impl CsvFormat {
    pub fn parse(s: &str) -> Result<CsvFormat, String> {
        let mut f = CsvFormat {
            header: true,
            units: true,
        };
        let mut parts = s.split(',').map(str::trim);
        if parts.next() != Some("csv") {
            return Err(format!("--format {s:?}: only csv is written"));
        }
        for p in parts {
            match p {
                "noheader" => f.header = false,
                "nounits" => f.units = false,
                other => return Err(format!("--format: unknown option {other:?}")),
            }
        }
        Ok(f)
    }
}

const MIB: u64 = 1 << 20;

/// A `--query-gpu` field: its header, unit and value for one device (`None`: `[N/A]`).
fn gpu_field(name: &str, index: usize, d: &DeviceView) -> Option<(&'static str, Option<String>)> {
    let s = &d.status;
    let (total, free, used) = d.memory;
    let n = |v: Option<u32>| v.map(|v| v.to_string());
    let watts = |mw: Option<u32>| mw.map(|mw| format!("{:.2}", f64::from(mw) / 1000.0));
    let clock = |c: Option<[u32; 3]>, i: usize| c.map(|c| c[i].to_string());
    Some(match name {
        "index" => ("", Some(index.to_string())),
        "name" => ("", Some(d.name.clone())),
        "uuid" => ("", Some(d.uuid.clone())),
        "pci.bus_id" => ("", Some(d.bus_id.clone())),
        "driver_version" => ("", Some(s.driver_version.clone())),
        "memory.total" => ("MiB", Some((total / MIB).to_string())),
        "memory.used" => ("MiB", Some((used / MIB).to_string())),
        "memory.free" => ("MiB", Some((free / MIB).to_string())),
        "utilization.gpu" => ("%", n(s.utilization_gpu)),
        "utilization.memory" => ("%", n(s.utilization_memory)),
        "temperature.gpu" => ("", n(s.temperature_c)),
        "power.draw" => ("W", watts(s.power_mw)),
        "power.limit" => ("W", watts(s.power_limit_mw)),
        "clocks.gr" => ("MHz", clock(s.clocks_mhz, 0)),
        "clocks.sm" => ("MHz", clock(s.clocks_mhz, 1)),
        "clocks.mem" => ("MHz", clock(s.clocks_mhz, 2)),
        "clocks.max.sm" => ("MHz", clock(s.max_clocks_mhz, 1)),
        "pstate" => ("", s.performance_state.map(|p| format!("P{p}"))),
        "fan.speed" => ("%", n(s.fan_percent)),
        _ => return None,
    })
}

/// The fields of a comma-separated query, each checked.
fn fields(query: &str, known: impl Fn(&str) -> bool) -> Result<Vec<String>, String> {
    query
        .split(',')
        .map(|f| f.trim().to_string())
        .map(|f| {
            if known(&f) {
                Ok(f)
            } else {
                Err(format!("unknown field {f:?}"))
            }
        })
        .collect()
}

fn csv_cell(value: Option<String>, unit: &str, format: CsvFormat) -> String {
    match value {
        None => "[N/A]".into(),
        Some(v) if format.units && !unit.is_empty() => format!("{v} {unit}"),
        Some(v) => v,
    }
}

fn csv_header(name: &str, unit: &str, format: CsvFormat) -> String {
    if format.units && !unit.is_empty() {
        format!("{name} [{unit}]")
    } else {
        name.to_string()
    }
}

/// `--query-gpu=FIELDS`: one line per device.
pub fn query_gpu(devices: &[DeviceView], query: &str, format: CsvFormat) -> Result<String, String> {
    let dummy = DeviceView {
        name: String::new(),
        uuid: String::new(),
        bus_id: String::new(),
        memory: (0, 0, 0),
        status: Default::default(),
    };
    let fields = fields(query, |f| gpu_field(f, 0, &dummy).is_some())?;
    let mut out = String::new();
    if format.header {
        let names: Vec<String> = fields
            .iter()
            .map(|f| csv_header(f, gpu_field(f, 0, &dummy).map_or("", |x| x.0), format))
            .collect();
        out += &(names.join(", ") + "\n");
    }
    for (i, d) in devices.iter().enumerate() {
        let cells: Vec<String> = fields
            .iter()
            .map(|f| {
                let (unit, v) = gpu_field(f, i, d).expect("checked above");
                csv_cell(v, unit, format)
            })
            .collect();
        out += &(cells.join(", ") + "\n");
    }
    Ok(out)
}

/// `--query-compute-apps=FIELDS` (pid, used_memory, gpu_uuid, gpu_bus_id): this
/// guest's programs on each device.
pub fn query_apps(
    devices: &[DeviceView],
    query: &str,
    format: CsvFormat,
) -> Result<String, String> {
    let known = ["pid", "used_memory", "gpu_uuid", "gpu_bus_id"];
    let fields = fields(query, |f| known.contains(&f))?;
    let unit = |f: &str| if f == "used_memory" { "MiB" } else { "" };
    let mut out = String::new();
    if format.header {
        let names: Vec<String> = fields
            .iter()
            .map(|f| csv_header(f, unit(f), format))
            .collect();
        out += &(names.join(", ") + "\n");
    }
    for d in devices {
        for p in &d.status.processes {
            let cells: Vec<String> = fields
                .iter()
                .map(|f| {
                    let v = match f.as_str() {
                        "pid" => p.pid.to_string(),
                        "used_memory" => (p.used_memory / MIB).to_string(),
                        "gpu_uuid" => d.uuid.clone(),
                        _ => d.bus_id.clone(),
                    };
                    csv_cell(Some(v), unit(f), format)
                })
                .collect();
            out += &(cells.join(", ") + "\n");
        }
    }
    Ok(out)
}

/// The table.
pub fn table(devices: &[DeviceView]) -> String {
    let na = || "N/A".to_string();
    let driver = devices
        .first()
        .map_or_else(na, |d| d.status.driver_version.clone());
    let mut out = format!(
        "vmcuda smi: {} GPU(s), host driver {driver}\n",
        devices.len()
    );
    out += "GPU  Name                          Bus-Id            Temp   Power           Memory-Usage          Util\n";
    for (i, d) in devices.iter().enumerate() {
        let s = &d.status;
        let (total, _, used) = d.memory;
        let temp = s.temperature_c.map_or_else(na, |t| format!("{t}C"));
        let power = match (s.power_mw, s.power_limit_mw) {
            (Some(p), Some(l)) => format!("{}W / {}W", p / 1000, l / 1000),
            (Some(p), None) => format!("{}W", p / 1000),
            _ => na(),
        };
        let memory = format!("{}MiB / {}MiB", used / MIB, total / MIB);
        let util = s.utilization_gpu.map_or_else(na, |u| format!("{u}%"));
        let quota = if s.memory_quota.is_some() {
            " (quota)"
        } else {
            ""
        };
        out += &format!(
            "{i:<4} {:<29} {:<17} {temp:<6} {power:<15} {:<21} {util}{quota}\n",
            truncate(&d.name, 29),
            d.bus_id,
            memory
        );
    }
    out += "\nProcesses of this guest:\n  GPU  PID       Used\n";
    let mut any = false;
    for (i, d) in devices.iter().enumerate() {
        for p in &d.status.processes {
            any = true;
            out += &format!("  {i:<4} {:<9} {}MiB\n", p.pid, p.used_memory / MIB);
        }
    }
    if !any {
        out += "  none\n";
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub fn run(
    query_gpu_fields: Option<&str>,
    query_apps_fields: Option<&str>,
    format: &str,
) -> ExitCode {
    let format = match CsvFormat::parse(format) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("vmcuda smi: {e}");
            return ExitCode::FAILURE;
        }
    };
    let devices = match nvml::device_views() {
        Ok(d) => d,
        Err(r) => {
            eprintln!(
                "vmcuda smi: no answer from the host ({}); `vmcuda doctor` checks the setup",
                error_text(r)
            );
            return ExitCode::FAILURE;
        }
    };
    let text = match (query_gpu_fields, query_apps_fields) {
        (Some(q), _) => query_gpu(&devices, q, format),
        (None, Some(q)) => query_apps(&devices, q, format),
        (None, None) => Ok(table(&devices)),
    };
    match text {
        Ok(t) => {
            crate::write_stdout(&t);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vmcuda smi: {e}");
            ExitCode::FAILURE
        }
    }
}

fn error_text(r: nvml::NvmlReturn) -> String {
    let p = nvml::nvml_error_string(r);
    // SAFETY: nvmlErrorString returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmcuda_wire::op::{GpuStatus, GuestProcess};

    fn device() -> DeviceView {
        DeviceView {
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-1".into(),
            bus_id: "00000000:1B:00.0".into(),
            memory: (8 << 30, 7 << 30, 1 << 30),
            status: GpuStatus {
                utilization_gpu: Some(42),
                power_mw: Some(120_500),
                processes: vec![GuestProcess {
                    pid: 77,
                    used_memory: 256 << 20,
                }],
                ..Default::default()
            },
        }
    }

    #[test]
    fn query_gpu_writes_nvidia_smi_csv() {
        let d = [device()];
        let f = CsvFormat::parse("csv").unwrap();
        let text = query_gpu(
            &d,
            "index,name,memory.used,utilization.gpu,power.draw,temperature.gpu",
            f,
        )
        .unwrap();
        assert_eq!(
            text,
            "index, name, memory.used [MiB], utilization.gpu [%], power.draw [W], temperature.gpu\n\
             0, NVIDIA H100 80GB HBM3, 1024 MiB, 42 %, 120.50 W, [N/A]\n"
        );
        let f = CsvFormat::parse("csv,noheader,nounits").unwrap();
        assert_eq!(
            query_gpu(&d, "memory.total, memory.free", f).unwrap(),
            "8192, 7168\n"
        );
        assert!(query_gpu(&d, "bogus", f).is_err());
        assert!(CsvFormat::parse("json").is_err());
    }

    #[test]
    fn compute_apps_are_the_guests_own() {
        let d = [device()];
        let f = CsvFormat::parse("csv,noheader").unwrap();
        assert_eq!(
            query_apps(&d, "pid,used_memory,gpu_bus_id", f).unwrap(),
            "77, 256 MiB, 00000000:1B:00.0\n"
        );
        let t = table(&d);
        assert!(t.contains("1024MiB / 8192MiB"), "{t}");
        assert!(t.contains("77        256MiB"), "{t}");
    }
}
