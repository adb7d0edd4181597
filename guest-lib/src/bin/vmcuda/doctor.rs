//! `vmcuda doctor`: the usual failures, checked in the order a connection meets them,
//! each reported OK or FAIL with one plain line on what to do.
//!
//! Facts are gathered first (files, the local vsock CID, one conversation with the
//! host); the decisions are pure functions of them, so the tests feed them outcomes.

use std::io;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use vmcuda_guest::client::{self, ConnectFailure, GuestTls, Token};
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::ExecutorKind;
use vmcuda_wire::transport::{self, ServerAddr, DEFAULT_UNIX_PATH, HOST_CID};
use vmcuda_wire::CudaStatus;

use crate::info::{cuda_version, transport_name};
use crate::probe::{self, Outcome};
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

/// Where vmcuda's `libcudart.so.13` was looked for, and what was found.
#[derive(Debug)]
pub struct LibraryFacts {
    pub searched: Vec<PathBuf>,
    /// The first `libcudart.so.13` found, and whether it is vmcuda's.
    pub found: Option<(PathBuf, bool)>,
    pub system_wide: bool,
}

/// Written by `vmcuda-system-wide enable`.
const SYSTEM_WIDE_CONF: &str = "/etc/ld.so.conf.d/vmcuda.conf";
/// Where packages install the guest libraries.
const DEFAULT_LIB_DIR: &str = "/opt/vmcuda/lib";

impl LibraryFacts {
    /// The directories `vmcuda-run` uses: `VMCUDA_LIB_DIR` alone when set, else next
    /// to this program (installed or in a build tree), else /opt/vmcuda/lib.
    fn gather() -> LibraryFacts {
        let searched = match std::env::var_os("VMCUDA_LIB_DIR").filter(|v| !v.is_empty()) {
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
        };
        let found = searched
            .iter()
            .map(|d| d.join(CUDART))
            .find(|p| p.is_file())
            .map(|p| {
                // Its own settings' names are in vmcuda's library and in no other.
                let ours = std::fs::read(&p)
                    .map(|data| data.windows(13).any(|w| w == b"VMCUDA_SERVER"))
                    .unwrap_or(false);
                (p, ours)
            });
        LibraryFacts {
            searched,
            found,
            system_wide: Path::new(SYSTEM_WIDE_CONF).exists(),
        }
    }
}

pub fn address_finding(addr: &Result<ServerAddr, ConnectFailure>, from_env: bool) -> Finding {
    match addr {
        Ok(a) => Finding::ok(
            "server address",
            format!(
                "{a}, {} ({})",
                transport_name(a),
                if from_env {
                    "from VMCUDA_SERVER"
                } else {
                    "the default here; VMCUDA_SERVER overrides it"
                }
            ),
        ),
        Err(e) => Finding::fail(
            "server address",
            e.to_string(),
            "set VMCUDA_SERVER to unix:PATH, tcp:HOST:PORT, tls:HOST:PORT or vsock:CID:PORT \
             (or unset it: inside a VM the default is vsock:2:7731)",
        ),
    }
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
        Some((path, true)) => Finding::ok(
            "guest library",
            format!("vmcuda's {CUDART} at {}{mode}", path.display()),
        ),
        Some((path, false)) => Finding::fail(
            "guest library",
            format!("{} is not vmcuda's (NVIDIA's own runtime?)", path.display()),
            format!("set VMCUDA_LIB_DIR to the directory holding vmcuda's {CUDART}"),
        ),
        None => Finding::fail(
            "guest library",
            format!("no {CUDART} in {searched}"),
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

/// What the host connection's findings depend on besides its outcome.
pub struct Context {
    pub token_present: bool,
    /// This VM's vsock CID, for the `[[vm]]` table the admin must add.
    pub guest_cid: Option<u32>,
}

/// "connect", then "handshake", "versions", "GPUs" and "round trip" once connected.
pub fn connection_findings(addr: &ServerAddr, outcome: &Outcome, ctx: &Context) -> Vec<Finding> {
    const LATER: [&str; 4] = ["handshake", "versions", "GPUs", "round trip"];
    let skipped = |from: usize| {
        LATER[from..]
            .iter()
            .map(|c| Finding::skip(c, "needs the step above"))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    match outcome {
        Outcome::TimedOut(t) => {
            out.push(Finding::fail(
                "connect",
                format!("no answer from {addr} within {} s", t.as_secs()),
                "the host is down, a firewall drops the packets, or vmcuda-host is stuck: \
                 check the address, the port and the host's log",
            ));
            out.extend(skipped(0));
        }
        Outcome::Failed(failure) => {
            let connected = !matches!(
                failure,
                ConnectFailure::Unreachable { .. }
                    | ConnectFailure::Tls { .. }
                    | ConnectFailure::TlsSettings { .. }
                    | ConnectFailure::BadAddress { .. }
            );
            if connected {
                out.push(Finding::ok(
                    "connect",
                    format!("{addr} accepts connections"),
                ));
                out.push(handshake_failure(addr, failure, ctx));
                out.extend(skipped(1));
            } else {
                out.push(connect_failure(addr, failure));
                out.extend(skipped(0));
            }
        }
        Outcome::Talked(c) => {
            out.push(Finding::ok(
                "connect",
                format!("{addr} accepts connections"),
            ));
            out.push(Finding::ok(
                "handshake",
                format!("admitted: {}", c.hello.banner),
            ));
            out.push(versions_finding(
                c.hello.protocol,
                c.hello.executor,
                c.hello.driver_version,
            ));
            out.push(gpus_finding(c));
            out.push(match c.devices.first().map(|d| &d.mem) {
                Some(Err(status)) => Finding::fail(
                    "round trip",
                    format!("the first memory query on GPU 0 failed: {status}"),
                    "the host could not set up GPU 0 for this guest (driver or GPU fault): \
                     see the host's log",
                ),
                _ => match c.median_round_trip() {
                    Some(d) => Finding::ok(
                        "round trip",
                        format!(
                            "{} µs (median of {} calls)",
                            d.as_micros(),
                            c.round_trips.len()
                        ),
                    ),
                    None => Finding::skip("round trip", "not measured"),
                },
            });
        }
    }
    out
}

fn connect_failure(addr: &ServerAddr, failure: &ConnectFailure) -> Finding {
    match failure {
        ConnectFailure::Unreachable { source, .. } => unreachable_finding(addr, source),
        ConnectFailure::Tls {
            host_port,
            source,
            hint,
        } => Finding::fail(
            "connect",
            format!("the TLS handshake with {host_port} failed: {source}"),
            match hint.trim() {
                "" => "check that the host's certificate is signed by the CA in VMCUDA_TLS_CA \
                       and names the host dialled (else set VMCUDA_TLS_NAME)"
                    .to_string(),
                h => h.trim_start_matches('(').trim_end_matches(')').to_string(),
            },
        ),
        other => Finding::fail(
            "connect",
            other.to_string(),
            "check VMCUDA_SERVER and the TLS settings",
        ),
    }
}

/// The connection itself failed: say which of the usual reasons it is.
pub fn unreachable_finding(addr: &ServerAddr, e: &io::Error) -> Finding {
    const ENODEV: i32 = 19;
    const EAFNOSUPPORT: i32 = 97;
    const ENETUNREACH: i32 = 101;
    const EHOSTUNREACH: i32 = 113;
    let vsock = matches!(addr, ServerAddr::Vsock { .. });
    let start = match addr {
        ServerAddr::Unix(path) => format!(
            "start `vmcuda-host serve --unix {path}` on this machine, or point VMCUDA_SERVER \
             at the address the host listens on"
        ),
        ServerAddr::Tcp(hp) | ServerAddr::Tls(hp) => format!(
            "start vmcuda-host on the host with --tcp (or [tcp] listen) on {hp}, and check the \
             port and any firewall between"
        ),
        ServerAddr::Vsock { port, .. } => format!(
            "start `vmcuda-host serve --vsock --port {port}` on the host (or the VM's \
             vmcuda-vhost-vsock device), and check the port"
        ),
    };
    let errno = e.raw_os_error();
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Finding::fail(
            "connect",
            format!("no vmcuda host listens at {addr} ({e})"),
            start,
        ),
        // A virtio-vsock peer with no listener answers with a reset.
        io::ErrorKind::ConnectionReset if vsock => Finding::fail(
            "connect",
            format!("no vmcuda host listens at {addr} ({e})"),
            start,
        ),
        io::ErrorKind::NotFound => Finding::fail(
            "connect",
            format!("no socket at {addr} ({e})"),
            start,
        ),
        io::ErrorKind::PermissionDenied => Finding::fail(
            "connect",
            format!("not allowed to connect to {addr} ({e})"),
            "run as a user that may open the host's socket (its group), or use another transport",
        ),
        io::ErrorKind::TimedOut => Finding::fail(
            "connect",
            format!("connecting to {addr} timed out ({e})"),
            "the host is down or a firewall drops the packets: check the address and the port",
        ),
        _ if errno == Some(ENODEV) || errno == Some(EAFNOSUPPORT) => Finding::fail(
            "connect",
            format!("this kernel cannot reach the host over vsock ({e})"),
            "modprobe vmw_vsock_virtio_transport, and give the VM a vsock device (docs/vm-setup.md)",
        ),
        _ if errno == Some(ENETUNREACH) || errno == Some(EHOSTUNREACH) => Finding::fail(
            "connect",
            format!("no route to {addr} ({e})"),
            "check this VM's network and the host's address in VMCUDA_SERVER",
        ),
        _ => Finding::fail("connect", format!("cannot connect to {addr}: {e}"), start),
    }
}

/// Connected, but no working session: what the host said, and who can fix it.
fn handshake_failure(addr: &ServerAddr, failure: &ConnectFailure, ctx: &Context) -> Finding {
    match failure {
        ConnectFailure::Refused { status, reason, .. } => {
            refusal_finding(addr, *status, reason.as_deref(), ctx)
        }
        ConnectFailure::Handshake { source, .. } => Finding::fail(
            "handshake",
            format!("{addr} took the connection but closed it without a vmcuda answer ({source})"),
            "check that this is vmcuda-host's port and not another service; the host's log says \
             why it closed",
        ),
        other => Finding::fail("handshake", other.to_string(), "see the host's log"),
    }
}

/// The host turned the hello down; its reason decides the fix.
pub fn refusal_finding(
    addr: &ServerAddr,
    status: CudaStatus,
    reason: Option<&str>,
    ctx: &Context,
) -> Finding {
    let said = reason.map_or_else(|| status.name().to_string(), |r| format!("\"{r}\""));
    match status {
        CudaStatus::ErrorNotPermitted => {
            let fix = match addr {
                ServerAddr::Tcp(_) | ServerAddr::Tls(_) if !ctx.token_present => {
                    "no token was sent: put this VM's token in /etc/vmcuda/token (or set \
                     VMCUDA_TOKEN); the host admin has it in the VM's [[vm]] table"
                        .to_string()
                }
                // The same status covers every policy refusal; only the host's words
                // tell "use TLS" apart.
                ServerAddr::Tcp(hp) if reason.is_some_and(|r| r.contains("TLS")) => format!(
                    "this host takes TCP guests over TLS only: set VMCUDA_SERVER=tls:{hp} and \
                     VMCUDA_TLS_CA"
                ),
                ServerAddr::Tcp(_) | ServerAddr::Tls(_) => {
                    "the host admin must give this token to a [[vm]] table with tcp = true in \
                     /etc/vmcuda/host.toml"
                        .to_string()
                }
                ServerAddr::Vsock { .. } => match ctx.guest_cid {
                    Some(cid) => format!(
                        "the host admin must add a [[vm]] table for this VM to \
                         /etc/vmcuda/host.toml: name = \"...\" and cid = {cid}"
                    ),
                    None => "the host admin must add a [[vm]] table for this VM to \
                             /etc/vmcuda/host.toml (its cid, or the name its vhost-user \
                             device gives with --vm-name)"
                        .to_string(),
                },
                ServerAddr::Unix(_) => "the host admin must allow programs on the host: [local] \
                                        allow = true in /etc/vmcuda/host.toml"
                    .to_string(),
            };
            Finding::fail(
                "handshake",
                format!("refused by the host's policy: {said}"),
                fix,
            )
        }
        CudaStatus::ErrorInsufficientDriver => Finding::fail(
            "handshake",
            format!("version mismatch: {said}"),
            format!(
                "install the same vmcuda release in the guest and on the host (this guest \
                 speaks protocol {PROTOCOL_VERSION}, CUDA runtime {}): upgrade the older side",
                cuda_version(RUNTIME_VERSION)
            ),
        ),
        CudaStatus::ErrorDevicesUnavailable => Finding::fail(
            "handshake",
            format!("too many connections: {said}"),
            "end other CUDA programs in this VM, or ask the host admin to raise max_connections \
             in its [[vm]] table",
        ),
        other => Finding::fail(
            "handshake",
            format!("refused: {said} ({})", other.name()),
            "the host's log (journalctl -u vmcuda-host) says why",
        ),
    }
}

pub fn versions_finding(protocol: u32, executor: ExecutorKind, driver: i32) -> Finding {
    if protocol != PROTOCOL_VERSION {
        return Finding::fail(
            "versions",
            format!("the host speaks protocol {protocol}, this guest {PROTOCOL_VERSION}"),
            "install the same vmcuda release in the guest and on the host",
        );
    }
    if executor == ExecutorKind::Cuda && driver < RUNTIME_VERSION {
        return Finding::fail(
            "versions",
            format!(
                "the host's driver supports CUDA {}, this guest's runtime is CUDA {}",
                cuda_version(driver),
                cuda_version(RUNTIME_VERSION)
            ),
            "upgrade the host's NVIDIA driver to one for CUDA 13 (the 580 branch or newer)",
        );
    }
    Finding::ok(
        "versions",
        format!(
            "protocol {protocol}; host driver {}, guest runtime {}",
            cuda_version(driver),
            cuda_version(RUNTIME_VERSION)
        ),
    )
}

fn gpus_finding(c: &probe::Conversation) -> Finding {
    if c.hello.device_count <= 0 {
        return Finding::fail(
            "GPUs",
            "the host grants this guest no GPU",
            "the host admin lists this VM's GPUs (gpus = in its [[vm]] table), or the host's \
             GPUs are not working: see the host's log",
        );
    }
    let mut names = Vec::new();
    for d in &c.devices {
        match &d.props {
            Ok(p) => names.push(p.name.clone()),
            Err(status) => {
                return Finding::fail(
                    "GPUs",
                    format!("the host cannot describe GPU {}: {status}", d.index),
                    "see the host's log",
                )
            }
        }
    }
    if c.hello.executor == ExecutorKind::HostMemory {
        return Finding::warn(
            "GPUs",
            "the host serves the HOST-MEMORY TEST executor: kernels are recorded, NOT executed",
            "run vmcuda-host on a machine with an NVIDIA GPU and driver, without --executor \
             host-memory",
        );
    }
    Finding::ok("GPUs", format!("{}: {}", names.len(), names.join(", ")))
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
            format!("{shown} loads {CUDART} dynamically: `vmcuda-run {shown}` runs it through the bridge"),
        ),
        Kind::Elf(Linkage::OtherRuntime(soname)) => Finding::fail(
            CHECK,
            format!("{shown} needs {soname}, another CUDA version's runtime; vmcuda provides {CUDART}"),
            "rebuild it with CUDA 13: nvcc -cudart shared",
        ),
        Kind::Elf(Linkage::Static { evidence }) => Finding::fail(
            CHECK,
            format!(
                "{shown} has the CUDA runtime linked in statically ({evidence}): it talks to \
                 the driver directly and never reaches vmcuda"
            ),
            "rebuild with nvcc -cudart shared (or link -lcudart instead of -lcudart_static)",
        ),
        Kind::Elf(Linkage::DriverOnly) => Finding::fail(
            CHECK,
            format!("{shown} calls the CUDA driver API (libcuda.so.1) directly; vmcuda forwards the runtime API"),
            "use the CUDA runtime API (libcudart.so.13) in the program",
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
                     libraries are found through DT_RPATH, which only LD_PRELOAD overrides); \
                     cuBLAS, cuBLASLt and the driver API are forwarded, cuDNN not yet",
                    interpreter.display()
                ),
                "tensors, matmuls, CUDA graphs and training work; convolutions need \
                 torch.backends.cudnn.enabled = False until cuDNN is forwarded (docs/torch.md)",
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
    let addr = client::server_addr();
    let from_env = std::env::var_os("VMCUDA_SERVER").is_some_and(|v| !v.is_empty());
    findings.push(address_finding(&addr, from_env));
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

    let mut out: String = findings.iter().map(render).collect();
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
mod tests {
    use super::*;
    use crate::probe::{Conversation, DeviceView};
    use vmcuda_wire::op::{DeviceProperties, HelloReply, MemInfo};

    fn unix() -> ServerAddr {
        ServerAddr::Unix("/run/vmcuda/vmcuda.sock".into())
    }
    fn tcp() -> ServerAddr {
        ServerAddr::Tcp("10.0.2.2:7731".into())
    }
    fn vsock() -> ServerAddr {
        ServerAddr::Vsock { cid: 2, port: 7731 }
    }
    fn ctx(token_present: bool, guest_cid: Option<u32>) -> Context {
        Context {
            token_present,
            guest_cid,
        }
    }
    fn refused(addr: ServerAddr, status: CudaStatus, reason: &str) -> Outcome {
        Outcome::Failed(ConnectFailure::Refused {
            addr,
            status,
            reason: Some(reason.into()),
        })
    }
    fn find<'a>(findings: &'a [Finding], check: &str) -> &'a Finding {
        findings
            .iter()
            .find(|f| f.check == check)
            .unwrap_or_else(|| panic!("no {check} finding in {findings:?}"))
    }
    fn talked(executor: ExecutorKind, device_count: i32) -> Outcome {
        Outcome::Talked(Box::new(Conversation {
            addr: unix(),
            hello: HelloReply {
                protocol: PROTOCOL_VERSION,
                driver_version: 13000,
                device_count,
                executor,
                capabilities: 0,
                banner: "CUDA executor: 1 x NVIDIA H200 (driver 13000)".into(),
            },
            devices: (0..device_count)
                .map(|index| DeviceView {
                    index,
                    props: Ok(DeviceProperties {
                        name: "NVIDIA H200".into(),
                        ..Default::default()
                    }),
                    mem: Ok(MemInfo { free: 1, total: 2 }),
                })
                .collect(),
            round_trips: vec![Duration::from_micros(40); 3],
        }))
    }

    #[test]
    fn nobody_listening_is_no_server_with_a_start_hint() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let outcome = Outcome::Failed(ConnectFailure::Unreachable {
            addr: tcp(),
            source: refused,
        });
        let f = connection_findings(&tcp(), &outcome, &ctx(true, None));
        let connect = find(&f, "connect");
        assert_eq!(connect.status, Status::Fail);
        assert!(
            connect
                .detail
                .contains("no vmcuda host listens at tcp:10.0.2.2:7731"),
            "{connect:?}"
        );
        assert!(connect.fix.as_ref().unwrap().contains("check the port"));
        assert!(f
            .iter()
            .filter(|x| x.check != "connect")
            .all(|x| x.status == Status::Skip));

        // vsock answers "nobody here" with a reset; a missing socket file is its own case.
        let reset = unreachable_finding(&vsock(), &io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(reset
            .detail
            .contains("no vmcuda host listens at vsock:2:7731"));
        assert!(reset.fix.unwrap().contains("--vsock --port 7731"));
        let missing = unreachable_finding(&unix(), &io::Error::from(io::ErrorKind::NotFound));
        assert!(missing
            .detail
            .contains("no socket at unix:/run/vmcuda/vmcuda.sock"));
        let enodev = unreachable_finding(&vsock(), &io::Error::from_raw_os_error(19));
        assert!(enodev
            .fix
            .unwrap()
            .contains("modprobe vmw_vsock_virtio_transport"));
    }

    #[test]
    fn a_silent_host_is_a_timeout() {
        let f = connection_findings(
            &tcp(),
            &Outcome::TimedOut(Duration::from_secs(3)),
            &ctx(true, None),
        );
        assert_eq!(
            find(&f, "connect").detail,
            "no answer from tcp:10.0.2.2:7731 within 3 s"
        );
        assert!(find(&f, "connect")
            .fix
            .as_ref()
            .unwrap()
            .contains("firewall"));
    }

    #[test]
    fn a_policy_refusal_shows_the_hosts_reason_and_who_fixes_it() {
        let reason = "this VM is not allowed to use the host's GPUs";
        let f = connection_findings(
            &vsock(),
            &refused(vsock(), CudaStatus::ErrorNotPermitted, reason),
            &ctx(false, Some(7)),
        );
        assert_eq!(find(&f, "connect").status, Status::Ok);
        let h = find(&f, "handshake");
        assert_eq!(h.status, Status::Fail);
        assert!(h.detail.contains(reason), "{h:?}");
        assert!(h.fix.as_ref().unwrap().contains("[[vm]]"));
        assert!(h.fix.as_ref().unwrap().contains("cid = 7"));

        let local = refusal_finding(
            &unix(),
            CudaStatus::ErrorNotPermitted,
            Some("no"),
            &ctx(false, None),
        );
        assert!(local.fix.unwrap().contains("[local] allow = true"));
    }

    #[test]
    fn tcp_refusals_tell_a_missing_token_from_a_wrong_one_and_plain_from_tls() {
        let no_token = refusal_finding(
            &tcp(),
            CudaStatus::ErrorNotPermitted,
            Some("need a token"),
            &ctx(false, None),
        );
        assert!(no_token.fix.unwrap().contains("/etc/vmcuda/token"));
        let wrong = refusal_finding(
            &tcp(),
            CudaStatus::ErrorNotPermitted,
            Some("not accepted"),
            &ctx(true, None),
        );
        assert!(wrong.fix.unwrap().contains("tcp = true"));
        let plain = refusal_finding(
            &tcp(),
            CudaStatus::ErrorNotPermitted,
            Some("this host takes TCP guests only over TLS"),
            &ctx(true, None),
        );
        assert!(plain
            .fix
            .unwrap()
            .contains("VMCUDA_SERVER=tls:10.0.2.2:7731"));

        assert_eq!(token_finding(&tcp(), None).unwrap().status, Status::Fail);
        assert!(
            token_finding(&vsock(), None).is_none(),
            "vsock needs no token"
        );
        let t = Token {
            bytes: b"0123456789abcdef".to_vec(),
            source: "VMCUDA_TOKEN".into(),
        };
        assert_eq!(token_finding(&tcp(), Some(&t)).unwrap().status, Status::Ok);
    }

    #[test]
    fn versions_and_connection_limits_have_their_own_fixes() {
        let v = refusal_finding(
            &vsock(),
            CudaStatus::ErrorInsufficientDriver,
            Some("protocol 2"),
            &ctx(false, None),
        );
        assert!(v.detail.starts_with("version mismatch"));
        assert!(v.fix.unwrap().contains("upgrade"));
        let many = refusal_finding(
            &vsock(),
            CudaStatus::ErrorDevicesUnavailable,
            Some("128 connections"),
            &ctx(false, None),
        );
        assert!(many.detail.starts_with("too many connections"));
        assert!(many.fix.unwrap().contains("max_connections"));
        let old = versions_finding(PROTOCOL_VERSION, ExecutorKind::Cuda, 12080);
        assert_eq!(old.status, Status::Fail);
        assert!(old.detail.contains("CUDA 12.8"));
        assert_eq!(
            versions_finding(PROTOCOL_VERSION, ExecutorKind::Cuda, 13000).status,
            Status::Ok
        );
    }

    #[test]
    fn a_working_host_passes_and_the_test_executor_is_a_warning() {
        let f = connection_findings(&unix(), &talked(ExecutorKind::Cuda, 1), &ctx(false, None));
        assert!(f.iter().all(|x| x.status == Status::Ok), "{f:?}");
        assert_eq!(find(&f, "GPUs").detail, "1: NVIDIA H200");
        assert_eq!(find(&f, "round trip").detail, "40 µs (median of 3 calls)");

        let f = connection_findings(
            &unix(),
            &talked(ExecutorKind::HostMemory, 1),
            &ctx(false, None),
        );
        assert_eq!(find(&f, "GPUs").status, Status::Warn);
        assert!(find(&f, "GPUs").detail.contains("TEST executor"));

        let f = connection_findings(&unix(), &talked(ExecutorKind::Cuda, 0), &ctx(false, None));
        assert_eq!(find(&f, "GPUs").status, Status::Fail);
    }

    #[test]
    fn vsock_without_module_or_device_says_what_to_load() {
        let facts = |dev_vsock, local_cid: Result<u32, String>| VsockFacts {
            dev_vsock,
            transports: vec![],
            local_cid,
            hypervisor: true,
        };
        let none = vsock_finding(&vsock(), &facts(false, Err("No such file".into()))).unwrap();
        assert_eq!(none.status, Status::Fail);
        assert!(none
            .fix
            .unwrap()
            .contains("modprobe vmw_vsock_virtio_transport"));
        let no_device = vsock_finding(&vsock(), &facts(true, Ok(u32::MAX))).unwrap();
        assert!(no_device.fix.unwrap().contains("vhost-vsock-pci"));
        let host = vsock_finding(&vsock(), &facts(true, Ok(2))).unwrap();
        assert!(host.fix.unwrap().contains("unix:/run/vmcuda/vmcuda.sock"));
        assert_eq!(
            vsock_finding(&vsock(), &facts(true, Ok(5))).unwrap().status,
            Status::Ok
        );
        assert!(vsock_finding(&unix(), &facts(false, Err(String::new()))).is_none());
        assert_eq!(
            vm_finding(&facts(true, Ok(5))).detail,
            "a VM guest with vsock CID 5"
        );
    }

    #[test]
    fn the_guest_library_must_be_vmcudas() {
        let facts = |found| LibraryFacts {
            searched: vec!["/opt/vmcuda/lib".into()],
            found,
            system_wide: false,
        };
        assert_eq!(library_finding(&facts(None)).status, Status::Fail);
        let nvidia = library_finding(&facts(Some(("/x/libcudart.so.13".into(), false))));
        assert!(nvidia.detail.contains("not vmcuda's"));
        assert_eq!(
            library_finding(&facts(Some(("/x/libcudart.so.13".into(), true)))).status,
            Status::Ok
        );
    }

    #[test]
    fn a_statically_linked_program_is_told_to_rebuild() {
        let stat = Ok(Kind::Elf(Linkage::Static {
            evidence: "it defines cudaMalloc".into(),
        }));
        let f = program_finding("./app", &stat, None);
        assert_eq!(f.status, Status::Fail);
        assert_eq!(
            f.fix
                .as_deref()
                .map(|s| s.starts_with("rebuild with nvcc -cudart shared")),
            Some(true)
        );
        assert_eq!(
            program_finding("./app", &Ok(Kind::Elf(Linkage::Dynamic)), None).status,
            Status::Ok
        );
        let py = Ok(Kind::Python {
            interpreter: "python3".into(),
        });
        let torch = Ok(Some("/usr/lib/python3/torch/__init__.py".to_string()));
        let f = program_finding("python3", &py, Some(&torch));
        assert_eq!(f.status, Status::Warn);
        assert!(f.detail.contains("cuBLAS"));
        assert_eq!(
            program_finding("python3", &py, Some(&Ok(None))).status,
            Status::Skip
        );
    }
}
