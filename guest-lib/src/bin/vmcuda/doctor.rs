//! `vmcuda doctor`: the usual failures, checked in the order a connection meets them,
//! each reported OK or FAIL with one plain line on what to do.
//!
//! Facts are gathered first (files, the local vsock CID, one conversation with the
//! host); the decisions are pure functions of them, so the tests feed them outcomes.

mod connection;

pub use connection::{connection_findings, Context};

use std::io;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use vmcuda_guest::client::{self, ConnectFailure, GuestTls, Looked, Servers, Token};
use vmcuda_wire::transport::{self, ServerAddr, DEFAULT_UNIX_PATH, HOST_CID};

use crate::info::transport_name;
use crate::probe;
use crate::program::{self, Kind, Linkage, CUDART};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but not as the user may think (the test executor, PyTorch's math).
    Warn,
    Fail,
    /// Not checked: it depends on something that failed, or does not apply.
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "[ OK ]",
            Status::Warn => "[WARN]",
            Status::Fail => "[FAIL]",
            Status::Skip => "[SKIP]",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do, in one line (for WARN and FAIL).
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            check,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            status: Status::Warn,
            ..Finding::fail(check, detail, fix)
        }
    }
    fn skip(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            status: Status::Skip,
            ..Finding::ok(check, detail)
        }
    }
}

/// The kernel's vsock as this guest has it.
#[derive(Debug)]
pub struct VsockFacts {
    pub dev_vsock: bool,
    /// vsock transport modules present under /sys/module.
    pub transports: Vec<String>,
    /// `IOCTL_VM_SOCKETS_GET_LOCAL_CID`, or why it could not be read.
    pub local_cid: Result<u32, String>,
    /// The CPU says it runs under a hypervisor (x86 `hypervisor` flag).
    pub hypervisor: bool,
}

impl VsockFacts {
    fn gather() -> VsockFacts {
        const TRANSPORTS: [&str; 3] = [
            "vmw_vsock_virtio_transport",
            "vmw_vsock_vmci_transport",
            "hv_sock",
        ];
        VsockFacts {
            dev_vsock: Path::new("/dev/vsock").exists(),
            transports: TRANSPORTS
                .iter()
                .filter(|m| Path::new("/sys/module").join(m).exists())
                .map(|m| m.to_string())
                .collect(),
            local_cid: transport::local_vsock_cid().map_err(|e| e.to_string()),
            hypervisor: std::fs::read_to_string("/proc/cpuinfo")
                .map(|c| {
                    c.lines().any(|l| {
                        l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")
                    })
                })
                .unwrap_or(false),
        }
    }

    /// This machine's CID when it is a VM guest with a vsock device.
    pub fn guest_cid(&self) -> Option<u32> {
        self.local_cid
            .as_ref()
            .ok()
            .copied()
            .filter(|&c| transport::is_guest_cid(c))
    }
}

/// The one library vmcuda replaces: the driver (NVML's beside it).
pub const DRIVER: &str = "libcuda.so.1";
pub const NVML: &str = "libnvidia-ml.so.1";
/// The runtime and BLAS replacements older vmcuda releases installed beside the driver:
/// programs fail under them that run on NVIDIA's (docs/guest-stack.md).
pub const RETIRED: [&str; 3] = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"];

/// The retired replacements present in `dir`.
pub fn retired_replacements(dir: &Path) -> Vec<PathBuf> {
    RETIRED
        .iter()
        .map(|l| dir.join(l))
        .filter(|p| p.exists())
        .collect()
}

/// Where vmcuda's `libcuda.so.1` was looked for, and what was found.
#[derive(Debug)]
pub struct LibraryFacts {
    pub searched: Vec<PathBuf>,
    /// The first `libcuda.so.1` found, and whether it is vmcuda's.
    pub found: Option<(PathBuf, bool)>,
    /// Whether vmcuda's NVML is beside it.
    pub nvml: bool,
    /// Retired replacement libraries beside it.
    pub retired: Vec<PathBuf>,
    pub system_wide: bool,
}

/// Written by `vmcuda-system-wide enable`.
const SYSTEM_WIDE_CONF: &str = "/etc/ld.so.conf.d/vmcuda.conf";
/// Where packages install the guest libraries.
pub const DEFAULT_LIB_DIR: &str = "/opt/vmcuda/lib";

/// The directories `vmcuda-run` looks in, in its order: `VMCUDA_LIB_DIR` alone when
/// set, else next to this program (installed or in a build tree), else /opt/vmcuda/lib.
pub fn lib_dirs_searched() -> Vec<PathBuf> {
    match std::env::var_os("VMCUDA_LIB_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let mut dirs = Vec::new();
            let exe = std::env::current_exe().unwrap_or_default();
            let bin = exe.parent().unwrap_or(Path::new("/"));
            let prefix = bin.parent().unwrap_or(bin);
            dirs.push(prefix.join("lib"));
            dirs.push(bin.to_path_buf());
            // target/{debug,release}/vmcuda in a checkout: build/guest/lib.
            if let Some(checkout) = prefix.parent() {
                dirs.push(checkout.join("build/guest/lib"));
            }
            dirs.push(DEFAULT_LIB_DIR.into());
            dirs
        }
    }
}

impl LibraryFacts {
    fn gather() -> LibraryFacts {
        let searched = lib_dirs_searched();
        let found = searched
            .iter()
            .map(|d| d.join(DRIVER))
            .find(|p| p.is_file())
            .map(|p| {
                // vmcuda's libcuda.so.1 names its private implementations `__vmcuda_...`
                // (libnvidia-ml.so.1 jumps to them); NVIDIA's does not.
                let ours = std::fs::read(&p)
                    .map(|data| data.windows(9).any(|w| w == b"__vmcuda_"))
                    .unwrap_or(false);
                (p, ours)
            });
        let dir = found.as_ref().and_then(|(p, _)| p.parent());
        LibraryFacts {
            nvml: dir.is_some_and(|d| d.join(NVML).is_file()),
            retired: dir.map(retired_replacements).unwrap_or_default(),
            searched,
            found,
            system_wide: Path::new(SYSTEM_WIDE_CONF).exists(),
        }
    }
}

/// Where the address came from, for the "server address" finding.
pub fn address_source(servers: &Servers, looked: &[Looked]) -> String {
    match (servers, looked.last()) {
        (Servers::Named(_), Some(l)) => format!("from {}", l.place),
        _ => "the default here, found as listed above; VMCUDA_SERVER overrides it".into(),
    }
}

pub fn address_finding(addr: &Result<ServerAddr, ConnectFailure>, source: &str) -> Finding {
    match addr {
        Ok(a) => Finding::ok(
            "server address",
            format!("{a}, {} ({source})", transport_name(a)),
        ),
        Err(e) => Finding::fail(
            "server address",
            e.to_string(),
            "set VMCUDA_SERVER to unix:PATH, tcp:HOST:PORT, tls:HOST:PORT or vsock:CID:PORT \
             (or unset it: the default is the local daemon's socket where there is one, \
             else inside a VM vsock:2:7731)",
        ),
    }
}

/// Every place looked at for the host, in order, and what was there.
pub fn render_looked(looked: &[Looked]) -> String {
    let mut out = String::from("vmcuda doctor: looked for the host in this order:\n");
    for (i, l) in looked.iter().enumerate() {
        out += &format!("  {}. {}: {}\n", i + 1, l.place, l.found);
    }
    out
}

pub fn vm_finding(v: &VsockFacts) -> Finding {
    match (v.guest_cid(), v.hypervisor) {
        (Some(cid), _) => Finding::ok(
            "virtual machine",
            format!("a VM guest with vsock CID {cid}"),
        ),
        (None, true) => Finding::ok(
            "virtual machine",
            "a VM guest without a vsock device (fine over TCP; vsock needs one)",
        ),
        (None, false) => Finding::ok(
            "virtual machine",
            "not a VM guest: programs here reach a host daemon on this machine or over TCP",
        ),
    }
}

/// Only for `vsock:` addresses.
pub fn vsock_finding(addr: &ServerAddr, v: &VsockFacts) -> Option<Finding> {
    let ServerAddr::Vsock { cid: target, .. } = addr else {
        return None;
    };
    let add_device = "give the VM a vsock device (QEMU: -device vhost-vsock-pci,guest-cid=N; \
                      libvirt: <vsock model='virtio'>; see docs/vm-setup.md)";
    if !v.dev_vsock {
        return Some(Finding::fail(
            "vsock",
            "no /dev/vsock: the vsock kernel modules are not loaded",
            "modprobe vmw_vsock_virtio_transport (it loads vsock too); if it is missing, \
             install the kernel's extra modules package",
        ));
    }
    let loaded = if v.transports.is_empty() {
        "no vsock transport module loaded".to_string()
    } else {
        v.transports.join(", ")
    };
    Some(match &v.local_cid {
        Err(e) => Finding::fail(
            "vsock",
            format!("/dev/vsock is there but its CID cannot be read ({e}); {loaded}"),
            format!("modprobe vmw_vsock_virtio_transport, and {add_device}"),
        ),
        Ok(u32::MAX) => Finding::fail(
            "vsock",
            format!("vsock is loaded but has no device to talk through ({loaded})"),
            format!("modprobe vmw_vsock_virtio_transport, and {add_device}"),
        ),
        Ok(cid) if *target == HOST_CID && !transport::is_guest_cid(*cid) => Finding::fail(
            "vsock",
            format!("this machine is not a vsock guest (its CID is {cid}), so vsock:2 reaches no host"),
            format!(
                "on the host itself use VMCUDA_SERVER=unix:{DEFAULT_UNIX_PATH}; in a VM, {add_device}"
            ),
        ),
        Ok(cid) => Finding::ok("vsock", format!("/dev/vsock, CID {cid}, {loaded}")),
    })
}

fn dir_of(path: &Path) -> String {
    path.parent().unwrap_or(path).display().to_string()
}

pub fn library_finding(l: &LibraryFacts) -> Finding {
    let mode = if l.system_wide {
        " (system-wide mode is on)"
    } else {
        ""
    };
    let searched = l
        .searched
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match &l.found {
        Some((_, true)) if !l.retired.is_empty() => {
            let retired: Vec<String> = l.retired.iter().map(|p| p.display().to_string()).collect();
            Finding::fail(
                "guest library",
                format!(
                    "{} left by an older vmcuda: programs fail under these replacements that \
                     run on NVIDIA's own libraries",
                    retired.join(", ")
                ),
                "remove them (reinstalling the vmcuda-guest package does), and install NVIDIA's \
                 runtime where programs need it: pip install 'nvidia-cuda-runtime==13.*'",
            )
        }
        Some((path, true)) if !l.nvml => Finding::warn(
            "guest library",
            format!(
                "vmcuda's {DRIVER} at {}{mode}, but no {NVML} beside it",
                path.display()
            ),
            "reinstall vmcuda's guest libraries: nvidia-smi and NVML queries need it",
        ),
        Some((path, true)) => Finding::ok(
            "guest library",
            format!("vmcuda's {DRIVER} and {NVML} in {}{mode}", dir_of(path)),
        ),
        Some((path, false)) => Finding::fail(
            "guest library",
            format!("{} is not vmcuda's (NVIDIA's own driver?)", path.display()),
            format!("set VMCUDA_LIB_DIR to the directory holding vmcuda's {DRIVER}"),
        ),
        None => Finding::fail(
            "guest library",
            format!("no {DRIVER} in {searched}"),
            format!(
                "install vmcuda's guest libraries in {DEFAULT_LIB_DIR}, or set VMCUDA_LIB_DIR \
                 to where they are"
            ),
        ),
    }
}

pub fn tls_finding(settings: &Result<PathBuf, (PathBuf, String)>) -> Finding {
    match settings {
        Ok(ca) => Finding::ok(
            "TLS settings",
            format!("trusting the CA in {}", ca.display()),
        ),
        Err((ca, e)) => Finding::fail(
            "TLS settings",
            format!("the CA certificate is not usable: {e}"),
            format!(
                "copy the CA certificate (PEM) that signed the host's to {}, or set \
                 VMCUDA_TLS_CA to it",
                ca.display()
            ),
        ),
    }
}

/// Only for TCP and TLS: vsock and Unix hosts know who calls without a token.
pub fn token_finding(addr: &ServerAddr, token: Option<&Token>) -> Option<Finding> {
    addr.host_port()?;
    Some(match token {
        Some(t) if !t.bytes.is_empty() => Finding::ok(
            "token",
            format!("{} characters, from {}", t.bytes.len(), t.source),
        ),
        Some(t) => Finding::fail(
            "token",
            format!("{} is empty", t.source),
            "put this VM's token (from the host admin) in /etc/vmcuda/token, or set VMCUDA_TOKEN",
        ),
        None => Finding::fail(
            "token",
            "no token: TCP hosts admit guests by token, and none is set",
            "put this VM's token (from the host admin) in /etc/vmcuda/token, or set \
             VMCUDA_TOKEN or VMCUDA_TOKEN_FILE",
        ),
    })
}

pub fn resolve_finding(
    host_port: &str,
    resolved: &Option<io::Result<Vec<std::net::SocketAddr>>>,
) -> Finding {
    let host = vmcuda_wire::tls::host_of(host_port);
    match resolved {
        _ if host.parse::<std::net::IpAddr>().is_ok() => {
            Finding::ok("host name", format!("{host} is an IP address"))
        }
        Some(Ok(addrs)) if !addrs.is_empty() => Finding::ok(
            "host name",
            format!(
                "{host} is {}",
                addrs
                    .iter()
                    .map(|a| a.ip().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(Ok(_)) => Finding::fail(
            "host name",
            format!("{host} has no address"),
            "use the host's IP address in VMCUDA_SERVER, or fix the name in DNS or /etc/hosts",
        ),
        Some(Err(e)) => Finding::fail(
            "host name",
            format!("cannot resolve {host}: {e}"),
            "use the host's IP address in VMCUDA_SERVER, or fix the name in DNS or /etc/hosts",
        ),
        None => Finding::fail(
            "host name",
            format!("resolving {host} did not finish in time"),
            "use the host's IP address in VMCUDA_SERVER, or fix this guest's DNS",
        ),
    }
}

pub fn program_finding(
    shown: &str,
    inspected: &Result<Kind, program::ProgramError>,
    torch: Option<&Result<Option<String>, String>>,
) -> Finding {
    const CHECK: &str = "program";
    let kind = match inspected {
        Ok(k) => k,
        Err(e) => {
            return Finding::fail(
                CHECK,
                e.to_string(),
                "name a program file or a command on PATH",
            )
        }
    };
    match kind {
        Kind::Elf(Linkage::Dynamic) => Finding::ok(
            CHECK,
            format!(
                "{shown} loads {CUDART} dynamically: NVIDIA's runtime runs over vmcuda's \
                 libcuda.so.1; `vmcuda-run {shown}` runs it through the bridge (and finds \
                 NVIDIA's runtime where the loader does not: pip install \
                 'nvidia-cuda-runtime==13.*' or the CUDA toolkit)"
            ),
        ),
        Kind::Elf(Linkage::OtherRuntime(soname)) => Finding::fail(
            CHECK,
            format!("{shown} needs {soname}, another CUDA version's runtime; vmcuda is tested with CUDA 13's {CUDART}"),
            "rebuild it with CUDA 13: nvcc -cudart shared",
        ),
        Kind::Elf(Linkage::Static { evidence }) => Finding::ok(
            CHECK,
            format!(
                "{shown} has the CUDA runtime linked in statically ({evidence}): NVIDIA's runtime \
                 in it reaches the GPU through vmcuda's libcuda.so.1; `vmcuda-run {shown}` runs it"
            ),
        ),
        Kind::Elf(Linkage::DriverOnly) => Finding::ok(
            CHECK,
            format!("{shown} calls the CUDA driver API (libcuda.so.1) directly: vmcuda's libcuda.so.1 serves it"),
        ),
        Kind::Elf(Linkage::DeviceCodeOnly) => Finding::warn(
            CHECK,
            format!("{shown} has GPU code but does not link {CUDART}"),
            format!("fine if it loads {CUDART} itself at run time; otherwise rebuild with nvcc -cudart shared"),
        ),
        Kind::Elf(Linkage::NoCuda) => Finding::warn(
            CHECK,
            format!("{shown} does not link {CUDART}"),
            format!("fine if it loads {CUDART} at run time (as PyTorch does); otherwise it does not use CUDA"),
        ),
        Kind::Script { interpreter } => Finding::skip(
            CHECK,
            format!("{shown} is a script for {interpreter}: check the program it runs"),
        ),
        Kind::Python { interpreter } => match torch {
            Some(Ok(Some(origin))) => Finding::warn(
                CHECK,
                format!(
                    "PyTorch is installed for {} ({origin}): run it with vmcuda-run (its \
                     libraries are found through DT_RPATH, which only LD_PRELOAD overrides): \
                     NVIDIA's runtime, cuBLAS, cuBLASLt, cuDNN, cuFFT, cuSOLVER, cuSPARSE and \
                     NCCL run unmodified on vmcuda's libcuda.so.1",
                    interpreter.display()
                ),
                "tensors, matmuls, convolutions, attention, FFTs, torch.linalg, CUDA graphs \
                 and training work (docs/torch.md)",
            ),
            Some(Ok(None)) => Finding::skip(
                CHECK,
                format!("no PyTorch for {}: nothing Python-specific to check", interpreter.display()),
            ),
            Some(Err(e)) => Finding::skip(CHECK, format!("cannot ask Python about PyTorch: {e}")),
            None => Finding::skip(CHECK, "Python not checked"),
        },
    }
}

fn render(f: &Finding) -> String {
    let mut out = format!("{} {:<16} {}\n", f.status.label(), f.check, f.detail);
    if let Some(fix) = &f.fix {
        out += &format!("       {:<16} fix: {fix}\n", "");
    }
    out
}

pub fn run(program: Option<&Path>, timeout: Duration) -> ExitCode {
    let mut findings = Vec::new();
    let (servers, mut looked) = client::find_servers();
    let (addr, source) = match servers {
        Err(e) => (Err(e), String::new()),
        Ok(found) => {
            let addr = match &found {
                // The default's first that answers is the one a program would use.
                Servers::Default(candidates) if candidates.len() > 1 => {
                    let token = client::find_token().map(|t| t.bytes).unwrap_or_default();
                    let (addr, _, passed) = probe::talk_first(candidates, token, timeout);
                    looked.extend(passed);
                    addr
                }
                _ => found.addrs()[0].clone(),
            };
            let source = address_source(&found, &looked);
            (Ok(addr), source)
        }
    };
    findings.push(address_finding(&addr, &source));
    let vsock = VsockFacts::gather();
    findings.push(vm_finding(&vsock));
    if let Ok(addr) = &addr {
        findings.extend(host_findings(addr, &vsock, timeout));
    }
    findings.push(library_finding(&LibraryFacts::gather()));
    if let Some(program) = program {
        let shown = program.display().to_string();
        let inspected = program::resolve(program).and_then(|p| program::inspect(&p));
        let torch = match &inspected {
            Ok(Kind::Python { interpreter }) => Some(program::find_torch(interpreter, timeout)),
            _ => None,
        };
        findings.push(program_finding(&shown, &inspected, torch.as_ref()));
    }

    let mut out = render_looked(&looked);
    out.extend(findings.iter().map(render));
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    let warned = findings.iter().filter(|f| f.status == Status::Warn).count();
    out += &match (failed, warned) {
        (0, 0) => "vmcuda doctor: all checks passed\n".to_string(),
        (0, w) => format!("vmcuda doctor: all checks passed, {w} warning(s)\n"),
        (f, _) => format!("vmcuda doctor: {f} check(s) failed\n"),
    };
    crate::write_stdout(&out);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The checks that need the address: local prerequisites, then one conversation.
fn host_findings(addr: &ServerAddr, vsock: &VsockFacts, timeout: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(vsock_finding(addr, vsock));
    if let ServerAddr::Tls(_) = addr {
        let settings = GuestTls::from_env()
            .map(|t| t.ca)
            .map_err(|e| (GuestTls::ca_path(), e.to_string()));
        out.push(tls_finding(&settings));
    }
    let token = client::find_token();
    out.extend(token_finding(addr, token.as_ref()));
    if let Some(hp) = addr.host_port() {
        let hp_owned = hp.to_string();
        let resolved = probe::within(timeout, move || {
            hp_owned.to_socket_addrs().map(|a| a.collect::<Vec<_>>())
        });
        out.push(resolve_finding(hp, &resolved));
    }
    // A connection cannot work past these; its own failure would only repeat them.
    let blocked = out
        .iter()
        .any(|f| f.status == Status::Fail && f.check != "token");
    if blocked {
        for check in ["connect", "handshake", "versions", "GPUs", "round trip"] {
            out.push(Finding::skip(check, "fix the failure above first"));
        }
        return out;
    }
    let ctx = Context {
        token_present: token.as_ref().is_some_and(|t| !t.bytes.is_empty()),
        guest_cid: vsock.guest_cid(),
    };
    let outcome = probe::talk(
        addr.clone(),
        token.map(|t| t.bytes).unwrap_or_default(),
        timeout,
    );
    out.extend(connection_findings(addr, &outcome, &ctx));
    out
}

#[cfg(test)]
mod tests;
