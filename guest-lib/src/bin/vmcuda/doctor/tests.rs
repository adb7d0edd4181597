use super::connection::{refusal_finding, unreachable_finding, versions_finding};
use super::*;
use crate::probe::{Conversation, DeviceView, Outcome};
use vmcuda_wire::handshake::PROTOCOL_VERSION;
use vmcuda_wire::op::{DeviceProperties, ExecutorKind, HelloReply, MemInfo};
use vmcuda_wire::CudaStatus;

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
    // A vhost-user device admits its VM by name, whatever its CID.
    let fix = h.fix.as_ref().unwrap();
    assert!(fix.contains("name = the device's --vm-name"), "{fix}");
    assert!(
        fix.find("--vm-name") < fix.find("cid = 7"),
        "the name comes first: {fix}"
    );

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
    assert!(find(&f, "GPUs")
        .detail
        .starts_with("a TEST DOUBLE, not a GPU"));

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
fn the_guest_library_must_be_vmcudas_driver_without_the_retired_replacements() {
    let facts = |found, nvml, retired: &[&str]| LibraryFacts {
        searched: vec!["/opt/vmcuda/lib".into()],
        found,
        nvml,
        retired: retired.iter().map(PathBuf::from).collect(),
        system_wide: false,
    };
    let ours = || Some(("/x/libcuda.so.1".into(), true));
    assert_eq!(
        library_finding(&facts(None, false, &[])).status,
        Status::Fail
    );
    let nvidia = library_finding(&facts(Some(("/x/libcuda.so.1".into(), false)), true, &[]));
    assert_eq!(nvidia.status, Status::Fail);
    assert!(nvidia.detail.contains("not vmcuda's"));
    let ok = library_finding(&facts(ours(), true, &[]));
    assert_eq!(ok.status, Status::Ok);
    assert_eq!(
        ok.detail,
        "vmcuda's libcuda.so.1 and libnvidia-ml.so.1 in /x"
    );
    assert_eq!(
        library_finding(&facts(ours(), false, &[])).status,
        Status::Warn
    );
    // A replacement runtime an older release left beside the driver fails the check.
    let stale = library_finding(&facts(ours(), true, &["/x/libcudart.so.13"]));
    assert_eq!(stale.status, Status::Fail);
    assert!(
        stale
            .detail
            .starts_with("/x/libcudart.so.13 left by an older vmcuda"),
        "{}",
        stale.detail
    );
}

#[test]
fn retired_replacements_are_found_in_a_directory() {
    let dir = std::env::temp_dir().join(format!("vmcuda-retired-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(retired_replacements(&dir).is_empty());
    std::fs::write(dir.join("libcublasLt.so.13"), b"old").unwrap();
    std::fs::write(dir.join("libcuda.so.1"), b"ours").unwrap();
    assert_eq!(retired_replacements(&dir), [dir.join("libcublasLt.so.13")]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_statically_linked_program_runs_on_the_guest_driver() {
    let stat = Ok(Kind::Elf(Linkage::Static {
        evidence: "it defines cudaMalloc".into(),
    }));
    let f = program_finding("./app", &stat, None);
    assert_eq!(f.status, Status::Ok);
    assert!(f.detail.contains("vmcuda's libcuda.so.1"), "{}", f.detail);
    assert_eq!(f.fix, None);
    let driver = program_finding("./app", &Ok(Kind::Elf(Linkage::DriverOnly)), None);
    assert_eq!(driver.status, Status::Ok);
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
    assert!(
        f.detail.contains("run unmodified on vmcuda's libcuda.so.1"),
        "{}",
        f.detail
    );
    assert_eq!(
        program_finding("python3", &py, Some(&Ok(None))).status,
        Status::Skip
    );
}

#[test]
fn every_place_looked_at_is_named_in_order() {
    let looked = vec![
        client::Looked {
            place: "VMCUDA_SERVER".into(),
            found: "not set".into(),
        },
        client::Looked {
            place: "/etc/vmcuda/server".into(),
            found: "no such file".into(),
        },
    ];
    let text = render_looked(&looked);
    assert_eq!(
        text,
        "vmcuda doctor: looked for the host in this order:\n  1. VMCUDA_SERVER: not set\n  \
         2. /etc/vmcuda/server: no such file\n"
    );
    let default = Servers::Default(vec![unix()]);
    assert!(address_source(&default, &looked).starts_with("the default here"));
    let named = Servers::Named(vec![tcp()]);
    let from_file = [client::Looked {
        place: "/etc/vmcuda/server".into(),
        found: "tcp:10.0.2.2:7731 (used)".into(),
    }];
    assert_eq!(
        address_source(&named, &from_file),
        "from /etc/vmcuda/server"
    );
}
