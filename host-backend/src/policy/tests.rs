//! The configuration's unit tests.

use super::ids::parse_size;
use super::*;

const TOKEN: &str = "0123456789abcdef-vm1";

fn policy(text: &str) -> Policy {
    Policy::parse(text, Path::new("test.toml")).unwrap()
}

fn sample() -> Policy {
    policy(&format!(
        r#"
        [defaults]
        memory_quota = "8GiB"
        max_streams = 64

        [local]
        allow = true
        gpus = [0]

        [[vm]]
        name = "vm1"
        cid = 5
        token = "{TOKEN}"
        tcp = true
        gpus = [1, "GPU-abc"]
        memory_quota = 1048576
        max_events = 10

        [[vm]]
        name = "fc"
        hybrid_vsock = "/run/fc.vsock"
        token = "fedcba9876543210-fc"
        "#
    ))
}

#[test]
fn the_builtin_default_admits_local_programs_and_refuses_everyone_else() {
    let p = Policy::builtin();
    let g = p.admit(&Caller::Local { pid: Some(1) }, b"").unwrap();
    assert_eq!(
        p.admit(&Caller::VsockCid(1), b""),
        Ok(g.clone()),
        "vsock loopback is local"
    );
    assert_eq!(g.gpus, GpuSelection::all());
    assert_eq!(g.memory_quota, None);
    for caller in [
        Caller::VsockCid(3),
        Caller::Vm("x".into()),
        Caller::Tcp("1.2.3.4:5".into()),
        Caller::UnclaimedSocket("/run/x.vsock".into()),
    ] {
        let r = p.admit(&caller, TOKEN.as_bytes()).unwrap_err();
        assert_eq!(r.status, CudaStatus::ErrorNotPermitted);
        assert!(!r.guest.is_empty() && !r.host.is_empty());
    }
    assert!(p.check_tcp_listen("127.0.0.1:7731").is_ok());
    assert!(p.check_tcp_listen("[::1]:7731").is_ok());
    assert!(p.check_tcp_listen("0.0.0.0:7731").is_err());
}

#[test]
fn vms_are_found_by_cid_name_and_token_and_inherit_defaults() {
    let p = sample();
    let by_cid = p.admit(&Caller::VsockCid(5), b"").unwrap();
    let by_name = p.admit(&Caller::Vm("vm1".into()), b"").unwrap();
    let by_token = p
        .admit(&Caller::Tcp("10.0.0.1:4000".into()), TOKEN.as_bytes())
        .unwrap();
    assert_eq!(by_cid, by_name);
    assert_eq!(by_cid, by_token);
    assert_eq!(by_cid.name, "vm1");
    assert_eq!(by_cid.memory_quota, Some(1 << 20));
    assert_eq!(by_cid.max_streams, 64, "from [defaults]");
    assert_eq!(by_cid.max_events, 10);
    assert_eq!(by_cid.max_modules, DEFAULT_MAX_MODULES);
    assert_eq!(by_cid.gpus.to_arg(), "1,GPU-abc");
    let fc = p.admit(&Caller::Vm("fc".into()), b"").unwrap();
    assert_eq!(fc.memory_quota, Some(8 << 30));
    assert_eq!(
        p.vm_for_hybrid_socket(Path::new("/run/fc.vsock")),
        Some("fc")
    );
    let local = p.admit(&Caller::Local { pid: None }, b"").unwrap();
    assert_eq!(local.gpus.to_arg(), "0");
}

#[test]
fn tcp_needs_the_right_token_of_a_vm_that_may_use_tcp() {
    let p = sample();
    let tcp = Caller::Tcp("10.0.0.1:4000".into());
    assert!(p.admit(&tcp, b"").unwrap_err().guest.contains("token"));
    assert!(p.admit(&tcp, b"0123456789abcdef-vm2").is_err());
    assert!(p.admit(&tcp, &TOKEN.as_bytes()[..10]).is_err());
    let r = p.admit(&tcp, b"fedcba9876543210-fc").unwrap_err();
    assert!(r.host.contains("tcp = false"), "{}", r.host);
    // The guest is told nothing about the host's configuration.
    assert!(!r.guest.contains("fc"));
}

#[test]
fn token_files_are_read_at_admission() {
    let dir = std::env::temp_dir().join(format!("vmcuda-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("vm.token");
    std::fs::write(&file, "a-token-from-a-file-0001\n").unwrap();
    let p = policy(&format!(
        "[[vm]]\nname = \"f\"\ntcp = true\ntoken_file = \"{}\"\n",
        file.display()
    ));
    let tcp = Caller::Tcp("h:1".into());
    assert!(p.admit(&tcp, b"a-token-from-a-file-0001").is_ok());
    std::fs::write(&file, "short\n").unwrap();
    assert!(p.admit(&tcp, b"short").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn token_file_problems_name_the_vm_and_the_reason() {
    let dir = std::env::temp_dir().join(format!("vmcuda-policy-tf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.token");
    let short = dir.join("short.token");
    std::fs::write(&good, "a-token-from-a-file-0001\n").unwrap();
    std::fs::write(&short, "short\n").unwrap();
    let p = policy(&format!(
        "[[vm]]\nname = \"good\"\ntcp = true\ntoken_file = \"{}\"\n\
         [[vm]]\nname = \"short\"\ntcp = true\ntoken_file = \"{}\"\n\
         [[vm]]\nname = \"gone\"\ntcp = true\ntoken_file = \"{}\"\n\
         [[vm]]\nname = \"inline\"\ntcp = true\ntoken = \"{TOKEN}\"\n",
        good.display(),
        short.display(),
        dir.join("missing.token").display()
    ));
    let problems = p.token_file_problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("VM \"short\"") && problems[0].contains("no usable token"));
    assert!(problems[1].starts_with("VM \"gone\"") && problems[1].contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_shipped_configuration_is_the_safe_default() {
    let shipped = Policy::parse(
        include_str!("../../etc/host.toml"),
        Path::new("host-backend/etc/host.toml"),
    )
    .unwrap();
    let builtin = Policy::builtin();
    for caller in [
        Caller::Local { pid: None },
        Caller::VsockCid(3),
        Caller::Vm("vm1".into()),
        Caller::Tcp("10.0.0.2:1".into()),
    ] {
        assert_eq!(
            shipped.admit(&caller, TOKEN.as_bytes()).is_ok(),
            builtin.admit(&caller, TOKEN.as_bytes()).is_ok(),
            "{caller}"
        );
    }
    assert!(shipped.admit(&Caller::Local { pid: None }, b"").is_ok());
    assert!(shipped.check_tcp_listen("0.0.0.0:7731").is_err());
}

#[test]
fn local_programs_can_be_refused() {
    let p = policy("[local]\nallow = false\n");
    let r = p.admit(&Caller::Local { pid: None }, b"").unwrap_err();
    assert!(r.host.contains("allow = false"));
}

#[test]
fn bad_configurations_are_refused_with_the_reason() {
    for (text, why) in [
        ("[[vm]]\nname = \"a\"\ntoken = \"short\"\n", "shorter"),
        ("[[vm]]\nname = \"a\"\ntcp = true\n", "needs a token"),
        ("[[vm]]\nname = \"a\"\ncid = 2\n", "reserved"),
        (
            "[[vm]]\nname = \"a\"\ncid = 3\n[[vm]]\nname = \"b\"\ncid = 3\n",
            "cid 3",
        ),
        ("[[vm]]\nname = \"a\"\n[[vm]]\nname = \"a\"\n", "named"),
        ("[defaults]\ngpus = \"some\"\n", "all"),
        ("[defaults]\nmemory_quota = \"12 parsecs\"\n", "unit"),
        ("[defaults]\nmemory_kuota = 1\n", "unknown field"),
    ] {
        let e = Policy::parse(text, Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
}

#[test]
fn the_metrics_endpoint_stays_on_loopback_unless_allowed() {
    let p = policy("[metrics]\nlisten = \"127.0.0.1:9731\"\n");
    assert_eq!(p.config.metrics.listen.as_deref(), Some("127.0.0.1:9731"));
    assert!(p.check_metrics_listen("127.0.0.1:9731").is_ok());
    assert!(p.check_metrics_listen("[::1]:0").is_ok());
    let e = p.check_metrics_listen("0.0.0.0:9731").unwrap_err();
    assert!(e.contains("allow_non_loopback"), "{e}");
    assert!(p.check_metrics_listen("localhost:9731").is_err());
    let open = policy("[metrics]\nallow_non_loopback = true\n");
    assert!(open.check_metrics_listen("0.0.0.0:9731").is_ok());
    assert!(Policy::parse("[metrics]\nport = 1\n", Path::new("t.toml")).is_err());
}

#[test]
fn tls_settings_are_checked_and_loaded() {
    use vmcuda_wire::tls::testing::TestPki;
    let dir = std::env::temp_dir().join(format!("vmcuda-policy-tls-{}", std::process::id()));
    let pki = TestPki::new(&dir.join("a"), &["localhost"]);
    let other = TestPki::new(&dir.join("b"), &["localhost"]);
    let tcp = |cert: &Path, key: &Path, extra: &str| {
        format!(
            "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}",
            cert.display(),
            key.display()
        )
    };

    assert!(Policy::builtin().tls_server().unwrap().is_none());
    let on = policy(&tcp(&pki.cert, &pki.key, "")).tls_server().unwrap();
    assert!(on.unwrap().required, "a certificate means TLS is required");
    let optional = policy(&tcp(&pki.cert, &pki.key, "require_tls = false"));
    assert!(!optional.tls_server().unwrap().unwrap().required);

    // Parsed, but unusable: found when the daemon starts (or a TLS guest connects).
    let missing = dir.join("missing.pem");
    for (text, why) in [
        (tcp(&missing, &pki.key, ""), "missing.pem"),
        (tcp(&pki.cert, &other.key, ""), "is not the private key"),
        (tcp(&pki.key, &pki.key, ""), "no PEM certificate"),
    ] {
        let e = policy(&text).tls_server().unwrap_err().to_string();
        assert!(
            e.contains("tls_cert and tls_key are not usable") && e.contains(why),
            "{text}: {e}"
        );
    }

    // Incomplete settings are refused at parse time.
    for (text, why) in [
        (
            format!("[tcp]\ntls_cert = \"{}\"\n", pki.cert.display()),
            "go together",
        ),
        ("[tcp]\nrequire_tls = true\n".into(), "needs tls_cert"),
    ] {
        let e = Policy::parse(&text, Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
    // Asking for no TLS without a certificate is fine.
    assert!(policy("[tcp]\nrequire_tls = false\n")
        .tls_server()
        .unwrap()
        .is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sizes_and_selections_parse() {
    assert_eq!(parse_size("16GiB"), Ok(16 << 30));
    assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
    assert_eq!(parse_size("3GB"), Ok(3_000_000_000));
    assert_eq!(parse_size("77"), Ok(77));
    assert!(parse_size("99999999999TiB").is_err());
    let s = GpuSelection::from_arg("2,GPU-a").unwrap();
    assert_eq!(
        s.resolve(&["GPU-A".into(), "GPU-b".into(), "GPU-c".into()]),
        Ok(vec![2, 0])
    );
    let twice = GpuSelection::from_arg("2,0,GPU-c").unwrap();
    assert!(twice
        .resolve(&["GPU-a".into(), "GPU-b".into(), "GPU-c".into()])
        .is_err());
    assert!(s.resolve(&["GPU-a".into()]).is_err());
    assert_eq!(GpuSelection::from_arg(&s.to_arg()), Ok(s));
    assert_eq!(
        GpuSelection::all().resolve(&["a".into(), "b".into()]),
        Ok(vec![0, 1])
    );
    assert!(GpuSelection::from_arg("zero").is_err());
}

#[test]
fn callers_round_trip_through_the_worker_argument() {
    for c in [
        Caller::Local { pid: Some(42) },
        Caller::Local { pid: None },
        Caller::VsockCid(7),
        Caller::Vm("my vm".into()),
        Caller::UnclaimedSocket("/run/a.vsock".into()),
        Caller::Tcp("[::1]:99".into()),
    ] {
        assert_eq!(Caller::from_arg(&c.to_arg()), Ok(c));
    }
    assert!(Caller::from_arg("martian:1").is_err());
}

#[test]
fn peers_need_host_port_endpoints_and_usable_files() {
    let parse = |text: &str| Policy::parse(text, Path::new("host.toml"));
    assert!(parse("").unwrap().peer_tls().unwrap().is_none());
    let table = |allow: &str| {
        format!(
            "[peers]\nlisten = \"127.0.0.1:7732\"\ntls_cert = \"/nonexistent/c.pem\"\n\
             tls_key = \"/nonexistent/k.pem\"\nca = \"/nonexistent/ca.pem\"\nallow = [{allow}]\n"
        )
    };
    let e = parse(&table("\"gpu-b\"")).err().unwrap().to_string();
    assert!(e.contains("\"gpu-b\" is not HOST:PORT"), "{e}");
    let p = parse(&table("\"gpu-b:7732\"")).unwrap();
    let peers = p.config.peers.as_ref().unwrap();
    assert_eq!(peers.advertise(), "127.0.0.1:7732");
    let e = p.peer_tls().err().unwrap().to_string();
    assert!(e.contains("[peers]") && e.contains("/nonexistent/"), "{e}");
    // A table without its certificate is refused as written.
    assert!(parse("[peers]\nlisten = \"127.0.0.1:7732\"\n").is_err());
}

#[test]
fn ipc_exports_are_bounded_per_vm_by_default_and_as_configured() {
    let parse = |text: &str| Policy::parse(text, Path::new("host.toml"));
    assert_eq!(
        parse("").unwrap().config.ipc.max_exports(),
        crate::ipc::DEFAULT_MAX_EXPORTS
    );
    let p = parse("[ipc]\nmax_exports = 8\n").unwrap();
    assert_eq!(p.config.ipc.max_exports(), 8);
    assert_eq!(
        parse("[ipc]\nmax_exports = 0\n")
            .unwrap()
            .config
            .ipc
            .max_exports(),
        0
    );
    // A key it does not have is refused, as everywhere in the file.
    assert!(parse("[ipc]\nmax_export = 8\n").is_err());
}

fn runtime_vm(name: &str, cid: Option<u32>, uid: Option<u32>, quota: u64) -> Vm {
    Vm {
        name: name.into(),
        cid,
        hybrid_vsock: None,
        token: None,
        token_file: None,
        tcp: false,
        uid,
        guest_memory_copies: true,
        limits: Limits {
            memory_quota: Some(ByteSize(quota)),
            ..Limits::default()
        },
    }
}

#[test]
fn a_run_time_grant_adds_a_vm_or_stands_in_for_the_files_entry() {
    let base = sample();
    let merged = base
        .with_vms(vec![
            runtime_vm("vm9", Some(9), None, 4096),
            runtime_vm("vm1", Some(5), None, 777),
        ])
        .unwrap();
    let g = merged.admit(&Caller::VsockCid(9), b"").unwrap();
    assert_eq!((g.name.as_str(), g.memory_quota), ("vm9", Some(4096)));
    // In place of the file's vm1: its quota, and no longer the file's token.
    let g = merged.admit(&Caller::VsockCid(5), b"").unwrap();
    assert_eq!(g.memory_quota, Some(777));
    assert!(merged
        .admit(&Caller::Tcp("127.0.0.1:1".into()), TOKEN.as_bytes())
        .is_err());
    assert_eq!(merged.granted, vec!["vm9".to_string(), "vm1".to_string()]);
    // The base is as it was.
    assert!(base.admit(&Caller::VsockCid(9), b"").is_err());
}

#[test]
fn a_run_time_grant_may_not_take_another_vms_cid_uid_or_token() {
    let base = sample();
    let e = base
        .with_vms(vec![runtime_vm("other", Some(5), None, 1)])
        .unwrap_err();
    assert!(
        e.to_string().contains("two [[vm]] entries have cid 5"),
        "{e}"
    );
    let e = base
        .with_vms(vec![
            runtime_vm("a", None, Some(1000), 1),
            runtime_vm("b", None, Some(1000), 1),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("uid 1000"), "{e}");
    let mut stolen = runtime_vm("thief", None, None, 1);
    stolen.token = Some(Secret::new(TOKEN.into()));
    stolen.tcp = true;
    let e = base.with_vms(vec![stolen]).unwrap_err();
    assert!(e.to_string().contains("another VM's too"), "{e}");
}

#[test]
fn a_local_program_of_a_granted_uid_is_that_vms_guest() {
    let merged = sample()
        .with_vms(vec![runtime_vm("job7", None, Some(1234), 1 << 20)])
        .unwrap();
    let local = Caller::Local { pid: Some(99) };
    let g = merged.admit_as(&local, b"", Some(1234)).unwrap();
    assert_eq!((g.name.as_str(), g.memory_quota), ("job7", Some(1 << 20)));
    // Another user is a program on the host as before.
    let g = merged.admit_as(&local, b"", Some(1000)).unwrap();
    assert_eq!(g.name, "local");
    // The uid counts only for the Unix socket's callers.
    assert!(merged
        .admit_as(&Caller::VsockCid(77), b"", Some(1234))
        .is_err());
}

#[test]
fn grants_of_another_daemons_state_dir_are_not_merged_and_a_broken_file_is_left_out() {
    let dir = std::env::temp_dir().join(format!("vmcuda-policy-grants-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("host.toml");
    std::fs::write(&config, "[[vm]]\nname = \"static\"\ncid = 3\n").unwrap();
    let state = dir.join("state");
    let grant = crate::policy::grants::RuntimeGrant {
        name: "rt".into(),
        cid: Some(4),
        uid: None,
        token: None,
        tcp: false,
        limits: Limits::default(),
        persist: false,
        changed_by: 0,
        changed_ms: 0,
    };
    crate::policy::grants::save(&crate::policy::grants::grants_path(&state), &[grant]).unwrap();
    let p = Policy::load_with_grants(Some(&config), Some(&state)).unwrap();
    assert!(p.admit(&Caller::VsockCid(4), b"").is_ok());
    assert_eq!(
        p.grants_file,
        Some(crate::policy::grants::grants_path(&state))
    );
    let other = Policy::load_with_grants(Some(&config), Some(&dir.join("other"))).unwrap();
    assert!(other.admit(&Caller::VsockCid(4), b"").is_err());
    // A grant the file contradicts since (its cid taken) is left out, the file kept.
    std::fs::write(&config, "[[vm]]\nname = \"static\"\ncid = 4\n").unwrap();
    let p = Policy::load_with_grants(Some(&config), Some(&state)).unwrap();
    assert_eq!(p.admit(&Caller::VsockCid(4), b"").unwrap().name, "static");
    // An unreadable grants file leaves the configuration in force.
    std::fs::write(crate::policy::grants::grants_path(&state), "{").unwrap();
    let p = Policy::load_with_grants(Some(&config), Some(&state)).unwrap();
    assert_eq!(p.admit(&Caller::VsockCid(4), b"").unwrap().name, "static");
    std::fs::remove_dir_all(&dir).unwrap();
}
