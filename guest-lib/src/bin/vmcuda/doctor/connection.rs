//! The host connection's findings: connect, handshake, versions, GPUs and round trip,
//! from one conversation's outcome.

use std::io;

use vmcuda_guest::client::ConnectFailure;
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::ExecutorKind;
use vmcuda_wire::transport::ServerAddr;
use vmcuda_wire::CudaStatus;

use super::Finding;
use crate::info::cuda_version;
use crate::probe::{self, Outcome};

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
                // The guest cannot tell which admits it: a vhost-user device names its
                // VM (--vm-name), only the kernel's vhost-vsock goes by the CID.
                ServerAddr::Vsock { .. } => {
                    let by_cid = match ctx.guest_cid {
                        Some(cid) => format!("cid = {cid}"),
                        None => "cid = this VM's vsock CID".to_string(),
                    };
                    format!(
                        "the host admin must add a [[vm]] table for this VM to \
                         /etc/vmcuda/host.toml: behind a vhost-user device \
                         (vmcuda-vhost-vsock, vmcuda-vhost@NAME) name = the device's \
                         --vm-name (NAME), which is what admits it; behind the kernel's \
                         vhost-vsock (vmcuda-host serve --vsock), {by_cid}"
                    )
                }
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
            "a TEST DOUBLE, not a GPU: the host serves the HOST-MEMORY TEST executor; kernels \
             are recorded, NOT executed, and results are not computed",
            "run vmcuda-host serve on a machine with an NVIDIA GPU and driver (R580 or newer) \
             with --executor cuda, the default",
        );
    }
    Finding::ok("GPUs", format!("{}: {}", names.len(), names.join(", ")))
}
