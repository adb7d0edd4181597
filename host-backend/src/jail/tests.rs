//! The jail's unit tests: ids, configuration, the filter.

use super::*;

#[test]
fn ids_come_from_names_and_are_stable_and_explicit_ones_win() {
    let c = JailConfig::default();
    let a = c.id_for("vm1", ["vm1", "vm2", "local"]).unwrap();
    assert_eq!(a, DEFAULT_ID_BASE + fnv1a(b"vm1") % ID_RANGE);
    assert!((DEFAULT_ID_BASE..DEFAULT_ID_BASE + ID_RANGE).contains(&a));
    assert_ne!(a, c.id_for("vm2", ["vm1", "vm2"]).unwrap());
    // The known FNV-1a value, so that an id cannot change between releases.
    assert_eq!(fnv1a(b"a"), 0xe40c_292c);
    let c = JailConfig {
        ids: BTreeMap::from([("vm1".into(), 3_000_000_000)]),
        ..JailConfig::default()
    };
    assert_eq!(c.id_for("vm1", ["vm2"]).unwrap(), 3_000_000_000);
}

#[test]
fn two_vms_never_share_an_id() {
    let c = JailConfig {
        ids: BTreeMap::from([("vm2".into(), DEFAULT_ID_BASE + fnv1a(b"vm1") % ID_RANGE)]),
        ..JailConfig::default()
    };
    assert!(matches!(
        c.id_for("vm1", ["vm1", "vm2"]),
        Err(JailError::SameId(..))
    ));
    let c = JailConfig {
        ids: BTreeMap::from([("vm1".into(), 0)]),
        ..JailConfig::default()
    };
    assert!(matches!(c.id_for("vm1", []), Err(JailError::BadId(0, _))));
    let c = JailConfig {
        id_base: Some(u32::MAX - 10),
        ..JailConfig::default()
    };
    assert!(matches!(c.id_for("vm1", []), Err(JailError::BadBase(_))));
}

#[test]
fn the_jail_table_is_read_from_the_host_configuration() {
    let p = Policy::parse(
        "[jail]\nenable = true\nid_base = 500000\nnamespaces = false\n\
         max_open_files = 64\naddress_space = \"8GiB\"\non_denied = \"kill\"\n\
         [jail.ids]\nvm1 = 700000\n[[vm]]\nname = \"vm1\"\n[[vm]]\nname = \"vm2\"\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let spec = spec_for(&p, "vm1", Path::new("/nonexistent"), None)
        .unwrap()
        .unwrap();
    assert_eq!(
        spec.ids,
        Some(Ids {
            uid: 700000,
            gid: 700000
        })
    );
    assert!(!spec.mount_namespace);
    assert_eq!(spec.limits.open_files, 64);
    assert_eq!(spec.limits.address_space, Some(8 << 30));
    assert_eq!(spec.seccomp, Some(OnDenied::Kill));
    let vm2 = spec_for(&p, "vm2", Path::new("/nonexistent"), None)
        .unwrap()
        .unwrap();
    assert!((500000..500000 + ID_RANGE).contains(&vm2.ids.unwrap().uid));
    let off = Policy::parse("[jail]\nenable = false\n", Path::new("t.toml")).unwrap();
    assert_eq!(
        spec_for(&off, "local", Path::new("/x"), None).unwrap(),
        None
    );
    assert!(Policy::parse("[jail]\nbogus = 1\n", Path::new("t.toml")).is_err());
}

#[test]
fn the_filter_builds_for_this_machine() {
    for on_denied in [OnDenied::Eperm, OnDenied::Kill, OnDenied::Log] {
        assert!(!filter(on_denied, 1234).unwrap().is_empty());
    }
    let rules = allowed_syscalls(1).unwrap();
    for denied in [
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_ptrace,
        libc::SYS_mount,
        libc::SYS_socket,
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_kexec_load,
        libc::SYS_init_module,
        libc::SYS_setuid,
        libc::SYS_unshare,
        libc::SYS_io_uring_setup,
        libc::SYS_process_vm_readv,
        libc::SYS_bpf,
    ] {
        assert!(!rules.contains_key(&denied), "{denied} must be denied");
    }
}
