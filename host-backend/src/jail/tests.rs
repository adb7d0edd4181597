//! The jail's unit tests: ids, configuration, the filter.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::process::host_pid;

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
    let spec = spec_for(&p, "vm1", Path::new("/nonexistent"), None, None)
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
    let vm2 = spec_for(&p, "vm2", Path::new("/nonexistent"), None, None)
        .unwrap()
        .unwrap();
    assert!((500000..500000 + ID_RANGE).contains(&vm2.ids.unwrap().uid));
    let off = Policy::parse("[jail]\nenable = false\n", Path::new("t.toml")).unwrap();
    assert_eq!(
        spec_for(&off, "local", Path::new("/x"), None, None).unwrap(),
        None
    );
    assert!(Policy::parse("[jail]\nbogus = 1\n", Path::new("t.toml")).is_err());
}

/// Issue 34, finding 7: the peer link's key, certificate and CA are among the files a
/// jailed worker's mount namespace shows empty, with the configuration and tokens.
#[test]
fn the_peer_links_tls_files_are_hidden_from_workers() {
    let dir = std::env::temp_dir().join(format!("vmcuda-jail-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<PathBuf> = ["peer.key", "peer.crt", "peer-ca.crt", "token"]
        .iter()
        .map(|n| dir.join(n))
        .collect();
    for f in &files {
        std::fs::write(f, b"secret\n").unwrap();
    }
    let text = format!(
        "[jail]\nenable = true\n[peers]\nlisten = \"127.0.0.1:7732\"\n\
         tls_key = {:?}\ntls_cert = {:?}\nca = {:?}\n\
         [[vm]]\nname = \"vm1\"\ncid = 3\ntoken_file = {:?}\n",
        files[0], files[1], files[2], files[3]
    );
    let p = Policy::parse(&text, Path::new("t.toml")).unwrap();
    let spec = spec_for(&p, "vm1", Path::new("/nonexistent"), None, None)
        .unwrap()
        .unwrap();
    for f in &files {
        assert!(
            spec.mask.contains(f),
            "{} is not hidden: {:?}",
            f.display(),
            spec.mask
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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

/// A classic BPF interpreter for what the filters use: the verdict for a call, and how
/// many instructions gave it.
fn run_bpf(
    program: &[seccompiler::sock_filter],
    nr: i64,
    arch: u32,
    args: [u64; 6],
) -> (u32, usize) {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&(nr as u32).to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let (mut acc, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let insn = &program[pc];
        steps += 1;
        let code = u32::from(insn.code);
        let k = insn.k;
        let cond = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
        pc = match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                let at = k as usize;
                acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                pc + 1
            }
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => {
                acc &= k;
                pc + 1
            }
            c if c == libc::BPF_JMP | libc::BPF_JA => pc + 1 + k as usize,
            c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => cond(acc == k),
            c if c == libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K => cond(acc > k),
            c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => cond(acc >= k),
            c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => cond(acc & k != 0),
            c if c == libc::BPF_RET | libc::BPF_K => return (k, steps),
            other => panic!("instruction {other:#x} not interpreted"),
        };
    }
}

#[test]
fn the_filters_front_part_changes_no_verdict_and_answers_ioctl_at_once() {
    use seccompiler::SeccompAction;
    #[cfg(target_arch = "aarch64")]
    let arch = 0xc000_00b7;
    #[cfg(not(target_arch = "aarch64"))]
    let arch = 0xc000_003e;
    let allow: u32 = SeccompAction::Allow.into();
    let eperm: u32 = SeccompAction::Errno(libc::EPERM as u32).into();
    let pid = 4321;
    let argument_sets = [
        [0; 6],
        [u64::from(pid), 0, 0, 0, 0, 0],
        [
            libc::CLONE_THREAD as u64 | libc::CLONE_VM as u64,
            0,
            0,
            0,
            0,
            0,
        ],
        [libc::PR_SET_NAME as u64, 0, 0, 0, 0, 0],
        [3, libc::TIOCSTI, 0, 0, 0, 0],
        [3, libc::TIOCLINUX, 0, 0, 0, 0],
        // The kernel reads an ioctl request as 32 bits.
        [3, libc::TIOCSTI | 1 << 32, 0, 0, 0, 0],
        [3, libc::TCGETS, 0, 0, 0, 0],
        [u64::MAX; 6],
    ];
    // Before: seccompiler's program of the rules, and a second filter for clone3, of
    // whose verdicts the kernel takes the one that lets less through (the lowest
    // action, read as signed).
    let clone3 = seccomp::clone3_filter().unwrap();
    let stricter = |a: u32, b: u32| {
        let action = |v: u32| (v & 0xffff_0000) as i32;
        if action(a) < action(b) {
            a
        } else {
            b
        }
    };
    for on_denied in [OnDenied::Eperm, OnDenied::Kill, OnDenied::Log] {
        let old = seccomp::rules_program(allowed_syscalls(pid).unwrap(), on_denied).unwrap();
        let new = filter(on_denied, pid).unwrap();
        for nr in (0..600).chain([0x4000_0000, 0x4000_0010, 0x7fff_ffff, -1]) {
            for a in [arch, 0x4000_0003] {
                for args in argument_sets {
                    let before = stricter(
                        run_bpf(&clone3, nr, a, args).0,
                        run_bpf(&old, nr, a, args).0,
                    );
                    assert_eq!(
                        before,
                        run_bpf(&new, nr, a, args).0,
                        "call {nr} arch {a:#x} args {args:?}"
                    );
                }
            }
        }
    }
    // The policy itself, through the new program.
    let new = filter(OnDenied::Eperm, pid).unwrap();
    let verdict = |nr: libc::c_long, args| run_bpf(&new, nr, arch, args);
    assert_eq!(
        verdict(libc::SYS_ioctl, [3, libc::TCGETS, 0, 0, 0, 0]).0,
        allow
    );
    assert_eq!(
        verdict(libc::SYS_ioctl, [3, libc::TIOCSTI, 0, 0, 0, 0]).0,
        eperm
    );
    assert_eq!(
        verdict(libc::SYS_ioctl, [3, libc::TIOCSTI | 1 << 32, 0, 0, 0, 0]).0,
        eperm
    );
    assert_eq!(
        verdict(libc::SYS_ioctl, [3, libc::TIOCLINUX, 0, 0, 0, 0]).0,
        eperm
    );
    assert_eq!(verdict(libc::SYS_futex, [0; 6]).0, allow);
    let enosys: u32 = SeccompAction::Errno(libc::ENOSYS as u32).into();
    assert_eq!(verdict(libc::SYS_clone3, [0; 6]).0, enosys);
    assert_eq!(verdict(libc::SYS_execve, [0; 6]).0, eperm);
    assert_eq!(verdict(libc::SYS_kill, [1, 9, 0, 0, 0, 0]).0, eperm);
    assert_eq!(
        verdict(libc::SYS_kill, [u64::from(pid), 9, 0, 0, 0, 0]).0,
        allow
    );
    // ioctl, which reads its arguments and so runs the filter on every call, is
    // answered in a few instructions of one filter, not after a walk past every call
    // numbered below it.
    let old = seccomp::rules_program(allowed_syscalls(pid).unwrap(), OnDenied::Eperm).unwrap();
    let ioctl = [3, libc::TCGETS, 0, 0, 0, 0];
    // Both filters ran before.
    let (_, steps_new) = run_bpf(&new, libc::SYS_ioctl, arch, ioctl);
    let steps_old = run_bpf(&old, libc::SYS_ioctl, arch, ioctl).1
        + run_bpf(&clone3, libc::SYS_ioctl, arch, ioctl).1;
    assert!(steps_new <= 10, "{steps_new} instructions");
    assert!(steps_old > steps_new, "{steps_old} before, {steps_new} now");
}

/// Where [`pid_namespace_child`] works, when this test binary runs it.
const PID_CHILD_DIR: &str = "VMCUDA_JAIL_PID_CHILD_DIR";

/// The worker side of the pid namespace test: what a worker does first (its host pid,
/// its stop handlers), then its ledger line and figures file; it reports and waits to
/// be stopped.
#[test]
#[ignore = "the child of a_worker_in_its_own_pid_namespace_is_named_by_its_host_pid"]
fn pid_namespace_child() {
    let Ok(dir) = std::env::var(PID_CHILD_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    worker_started();
    let _ledger = crate::ledger::Ledger::join(&dir, "vm1", 4).unwrap();
    let identity = crate::stats::Identity {
        vm: "vm1".into(),
        program: "test".into(),
        program_pid: 0,
        caller: "local:0".into(),
        transport: "unix".into(),
        connection_id: 1,
    };
    let _stats = crate::stats::WorkerStats::create(&dir, &identity).unwrap();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let report = format!(
        "pid={} host={} ns={}",
        std::process::id(),
        host_pid(),
        ns.display()
    );
    std::fs::write(dir.join("report.tmp"), report).unwrap();
    std::fs::rename(dir.join("report.tmp"), dir.join("report")).unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// A child that does not outlive a failed test.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start [`pid_namespace_child`] in a new pid namespace, as the daemon starts a worker.
fn spawn_pid_child(dir: &Path) -> Reaped {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "jail::tests::pid_namespace_child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(PID_CHILD_DIR, dir)
    .stdout(std::process::Stdio::null());
    Reaped(spawn_in_new_namespace(&mut cmd).unwrap())
}

/// Wait up to 20 s for `child` to end.
fn wait_for(child: &mut Reaped) -> std::process::ExitStatus {
    let child = &mut child.0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            panic!("the worker did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_worker_in_its_own_pid_namespace_is_named_by_its_host_pid() {
    use std::os::unix::process::ExitStatusExt;
    if !pid_namespaces_available() {
        println!(
            "skipped a_worker_in_its_own_pid_namespace_is_named_by_its_host_pid: this \
             process may not make pid namespaces (needs root or CAP_SYS_ADMIN)"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("vmcuda-jail-pidns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = spawn_pid_child(&dir);
    let host = child.0.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let report = loop {
        if let Ok(r) = std::fs::read_to_string(dir.join("report")) {
            break r;
        }
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("the worker ended early: {status}");
        }
        assert!(std::time::Instant::now() < deadline, "no report");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // Its own namespace, where it is process 1...
    let ours = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let theirs = std::fs::read_link(format!("/proc/{host}/ns/pid")).unwrap();
    assert_ne!(ours, theirs);
    assert_eq!(
        report,
        format!("pid=1 host={host} ns={}", theirs.display()),
        "it knows its host pid"
    );
    // ... and the ledger and the figures name it as the host does.
    let ledger = std::fs::read_to_string(dir.join("ledger/vm1.ledger")).unwrap();
    assert_eq!(ledger, format!("{host} 0\n"));
    assert!(dir.join(format!("workers/{host}.stats")).exists());
    // SIGTERM (a service manager stopping the daemon) still ends it, though process 1
    // of a namespace ignores signals it does not handle.
    // SAFETY: kill takes plain integers; `host` is our child, not yet reaped.
    assert_eq!(unsafe { libc::kill(host as i32, libc::SIGTERM) }, 0);
    assert_eq!(wait_for(&mut child).code(), Some(128 + libc::SIGTERM));
    // Dead, so its ledger line is dropped at the next look: a VM allowed one
    // connection gets it.
    let next = crate::ledger::Ledger::join(&dir, "vm1", 1);
    assert!(next.is_ok(), "the dead worker's line was kept");
    drop(next);
    // The daemon's own way to end a worker (hello timeout) still works too.
    std::fs::remove_file(dir.join("report")).unwrap();
    let mut child = spawn_pid_child(&dir);
    child.0.kill().unwrap();
    assert_eq!(wait_for(&mut child).signal(), Some(libc::SIGKILL));
    std::fs::remove_dir_all(&dir).unwrap();
}
