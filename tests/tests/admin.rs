//! The admin API end to end, through a host-memory daemon: grants made, changed,
//! revoked and kept across a restart with `vmcuda-host admin`, and guests (speaking
//! the wire protocol over TCP with a token, as a guest library does) admitted, served
//! under their quota, and ended by them.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::Duration;

use vmcuda_tests::raw_guest::Guest;
use vmcuda_tests::{free_tcp_addr, host_bin, text, Daemon};
use vmcuda_wire::CudaStatus;

const MIB: u64 = 1 << 20;
const TOKEN: &str = "job-token-0123456789abcdef";

/// A host-memory daemon with a TCP listener (and `config`), and its TCP address.
fn daemon(name: &str, config: &str) -> (Daemon, String) {
    let tcp = free_tcp_addr();
    let d = Daemon::start_with_config(
        name,
        Some(config),
        &[
            "--executor",
            "host-memory",
            "--host-memory-bytes",
            "1073741824",
            "--tcp",
            &tcp,
        ],
    );
    d.admin_socket();
    (d, format!("tcp:{tcp}"))
}

/// `vmcuda-host admin ARGS` against daemon `d`.
fn admin(d: &Daemon, args: &[&str]) -> Output {
    admin_cmd(d, args).output().expect("run vmcuda-host admin")
}

fn admin_cmd(d: &Daemon, args: &[&str]) -> Command {
    let mut cmd = Command::new(host_bin());
    cmd.arg("admin")
        .args(args)
        .arg("--state-dir")
        .arg(d.dir.join("state"))
        .arg("--config")
        .arg(d.dir.join("host.toml"));
    cmd
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A file holding `token`, for `--token-from`.
fn token_file(d: &Daemon, token: &str) -> String {
    let path = d.dir.join(format!("token-{}", &token[..4]));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path.display().to_string()
}

/// The lines of VM `vm`'s ledger (`vm` a name that is its own file name).
fn ledger(d: &Daemon, vm: &str) -> Vec<String> {
    std::fs::read_to_string(d.dir.join(format!("state/ledger/{vm}.ledger")))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn list(d: &Daemon) -> serde_json::Value {
    let out = ok(&admin(d, &["list", "--json"]));
    serde_json::from_str(&out).expect("list --json is JSON")
}

#[test]
fn a_grant_made_changed_and_revoked_at_run_time_holds_for_its_guests() {
    let (d, server) = daemon("grant", "");
    // Before the grant, the token is nobody's.
    assert_eq!(
        Guest::connect(&server, TOKEN).err(),
        Some(CudaStatus::ErrorNotPermitted)
    );
    let file = token_file(&d, TOKEN);
    let said = ok(&admin(
        &d,
        &[
            "grant",
            "job1",
            "--token-from",
            &file,
            "--memory-quota",
            "64MiB",
        ],
    ));
    assert!(said.contains("granted VM job1"), "{said}");
    assert!(
        d.log_with("admin: granted")
            .contains("memory_quota 67108864"),
        "{}",
        d.log()
    );

    // Served, under its quota.
    let mut first = Guest::connect(&server, TOKEN).expect("admitted by the grant");
    assert_eq!(first.alloc(48 * MIB), Some(CudaStatus::Success));
    assert_eq!(
        first.alloc(32 * MIB),
        Some(CudaStatus::ErrorMemoryAllocation),
        "over the 64 MiB quota"
    );

    // A bigger quota for new connections; the open one keeps its own.
    ok(&admin(&d, &["change", "job1", "--memory-quota", "128MiB"]));
    let mut second = Guest::connect(&server, TOKEN).expect("still admitted");
    assert_eq!(
        second.alloc(64 * MIB),
        Some(CudaStatus::Success),
        "48 + 64 MiB fit the new quota"
    );
    assert_eq!(
        first.alloc(16 * MIB),
        Some(CudaStatus::ErrorMemoryAllocation),
        "the first connection keeps the quota it was admitted with"
    );
    let listed = list(&d);
    let g = &listed["grants"][0];
    assert_eq!(g["name"], "job1");
    assert_eq!(g["token"], true, "said to have a token");
    assert!(
        !listed.to_string().contains(TOKEN),
        "the token is never shown"
    );
    assert_eq!(g["limits"]["memory_quota"], 128 * MIB);
    assert_eq!(g["workers"], 2);
    assert_eq!(g["device_bytes"], 112 * MIB);
    assert_eq!(ledger(&d, "job1").len(), 2);

    // Revoked: both workers end, the ledger is empty, the token is refused.
    let said = ok(&admin(&d, &["revoke", "job1"]));
    assert!(said.contains("2 worker(s) ended"), "{said}");
    assert!(said.contains(&format!("{} bytes", 112 * MIB)), "{said}");
    assert_eq!(first.alloc(MIB), None, "the first guest's worker is gone");
    assert_eq!(second.alloc(MIB), None, "the second guest's worker is gone");
    assert!(ledger(&d, "job1").is_empty(), "{:?}", ledger(&d, "job1"));
    assert_eq!(
        Guest::connect(&server, TOKEN).err(),
        Some(CudaStatus::ErrorNotPermitted)
    );
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
    assert!(d.log_with("grant revoked").contains("grant revoked"));

    // Granted again, its whole quota is there: nothing of the old workers counts.
    ok(&admin(
        &d,
        &[
            "grant",
            "job1",
            "--token-from",
            &file,
            "--memory-quota",
            "64MiB",
        ],
    ));
    let mut again = Guest::connect(&server, TOKEN).expect("admitted again");
    assert_eq!(again.alloc(64 * MIB), Some(CudaStatus::Success));
}

#[test]
fn changes_that_contradict_the_configuration_are_refused_and_nothing_is_written() {
    let config = format!("[[vm]]\nname = \"static\"\ncid = 5\ntoken = \"{TOKEN}\"\ntcp = true\n");
    let (d, server) = daemon("refused", &config);
    let out = admin(&d, &["grant", "other", "--cid", "5"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cid 5"), "{}", text(&out.stderr));
    let file = token_file(&d, TOKEN);
    let out = admin(&d, &["grant", "thief", "--token-from", &file]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("another VM's too"),
        "{}",
        text(&out.stderr)
    );
    let out = admin(&d, &["grant", "local", "--cid", "9"]);
    assert!(text(&out.stderr).contains("programs on this host"));
    // A grant by name alone is for the vhost-user device started for that VM.
    let said = ok(&admin(&d, &["grant", "byname", "--memory-quota", "1MiB"]));
    assert!(said.contains("by name only"), "{said}");
    ok(&admin(&d, &["remove", "byname"]));
    let out = admin(&d, &["change", "missing", "--memory-quota", "1GiB"]);
    assert!(text(&out.stderr).contains("no run-time grant"));
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
    // The file's own VM is served as before.
    assert!(Guest::connect(&server, TOKEN).is_ok());
    // A generated token is said once, alone on stdout, and admits.
    let out = ok(&admin(
        &d,
        &[
            "grant",
            "gen",
            "--generate-token",
            "--memory-quota",
            "64MiB",
        ],
    ));
    let token = out.trim();
    assert_eq!(token.len(), 64, "{out}");
    let mut g = Guest::connect(&server, token).expect("the generated token admits");
    assert_eq!(g.alloc(MIB), Some(CudaStatus::Success));
    assert!(!d.log().contains(token), "the token is not logged");
    // host.toml edited since to take a grant's cid: the grant can no longer change,
    // but it can always be taken away.
    ok(&admin(
        &d,
        &["grant", "x", "--cid", "6", "--memory-quota", "1MiB"],
    ));
    std::fs::write(
        d.dir.join("host.toml"),
        format!("{config}[[vm]]\nname = \"new\"\ncid = 6\n"),
    )
    .unwrap();
    let out = admin(&d, &["change", "x", "--memory-quota", "1MiB"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cid 6"), "{}", text(&out.stderr));
    ok(&admin(&d, &["revoke", "x"]));
}

#[test]
fn persistent_grants_survive_a_restart_and_the_others_do_not() {
    let (mut d, server) = daemon("persist", "");
    let kept = "kept-token-0123456789abcdef";
    let gone = "gone-token-0123456789abcdef";
    let (kept_file, gone_file) = (token_file(&d, kept), token_file(&d, gone));
    ok(&admin(
        &d,
        &[
            "grant",
            "kept",
            "--token-from",
            &kept_file,
            "--memory-quota",
            "8MiB",
            "--persist",
        ],
    ));
    ok(&admin(
        &d,
        &[
            "grant",
            "gone",
            "--token-from",
            &gone_file,
            "--memory-quota",
            "8MiB",
        ],
    ));
    let mut open = Guest::connect(&server, gone).expect("admitted");
    assert_eq!(open.alloc(MIB), Some(CudaStatus::Success));
    let grants = d.dir.join("state/admin/grants.json");
    assert_eq!(
        std::fs::metadata(&grants).unwrap().permissions().mode() & 0o777,
        0o600
    );
    d.restart();
    d.admin_socket();
    let names: Vec<String> = list(&d)["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["kept".to_string()]);
    let mut g = Guest::connect(&server, kept).expect("the persistent grant admits");
    assert_eq!(g.alloc(8 * MIB), Some(CudaStatus::Success));
    assert_eq!(g.alloc(MIB), Some(CudaStatus::ErrorMemoryAllocation));
    assert_eq!(
        Guest::connect(&server, gone).err(),
        Some(CudaStatus::ErrorNotPermitted)
    );
    assert!(d
        .log_with("dropped (not persistent)")
        .contains("dropped (not persistent)"));
    // Its open connection outlived the daemon, as guests do; a revoke still ends it.
    assert_eq!(open.alloc(MIB), Some(CudaStatus::Success));
    let said = ok(&admin(&d, &["revoke", "gone"]));
    assert!(
        said.contains("no run-time grant for VM gone: 1 worker(s) ended"),
        "{said}"
    );
    assert_eq!(open.alloc(MIB), None);
    let out = admin(&d, &["revoke", "gone"]);
    assert!(text(&out.stderr).contains("no run-time grant"));
    // Turned transient, it goes with the next restart.
    ok(&admin(&d, &["change", "kept", "--no-persist"]));
    d.restart();
    d.admin_socket();
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
}

/// Run `vmcuda-host admin list` as uid 65534 and group `gid`.
fn list_as(d: &Daemon, gid: u32) -> Output {
    admin_cmd(d, &["list"])
        .uid(65534)
        .gid(gid)
        .output()
        .expect("run vmcuda-host admin as nobody")
}

#[test]
fn callers_not_root_nor_in_the_group_are_refused_and_logged() {
    if !nix_is_root() {
        // The decision itself is unit-tested with made-up credentials
        // (host-backend/src/admin/auth.rs); here a process of another user is needed.
        eprintln!("skipped: not root, so no process of another user can be made");
        return;
    }
    // Group `users` (gid 100) may; nobody's own group may not.
    let (d, _) = daemon("auth", "[admin]\ngroup = \"users\"\n");
    let socket = d.dir.join("state/admin.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let out = list_as(&d, 100);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = list_as(&d, 65534);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "the socket's mode keeps it out: {}",
        text(&out.stderr)
    );
    // Even where the socket's mode lets anyone connect, the daemon refuses by the
    // kernel's credentials, and says who it refused.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = list_as(&d, 65534);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not permitted"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        d.log_with("admin socket: refused").contains(
            "uid 65534 gid 65534 is not root, not the daemon's user and not in group users"
        ),
        "{}",
        d.log()
    );
    // Nor can such a caller make a grant.
    let out = admin_cmd(&d, &["grant", "x", "--cid", "9"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_unix_user_granted_is_its_own_vm_and_a_removed_grant_leaves_open_connections_be() {
    let (d, _) = daemon("uid", "");
    // SAFETY: getuid has no arguments and cannot fail.
    let me = unsafe { libc::getuid() }.to_string();
    ok(&admin(
        &d,
        &["grant", "me", "--uid", &me, "--memory-quota", "4MiB"],
    ));
    let mut g = Guest::connect(&d.server(), "").expect("a program of that user");
    assert_eq!(g.alloc(4 * MIB), Some(CudaStatus::Success));
    assert_eq!(g.alloc(MIB), Some(CudaStatus::ErrorMemoryAllocation));
    assert_eq!(ledger(&d, "me").len(), 1, "counted as VM me");
    // Removed (not revoked): the open connection goes on under its grant; a new one
    // is a program on the host again, without a quota.
    let said = ok(&admin(&d, &["remove", "me"]));
    assert!(said.contains("go on until they end"), "{said}");
    assert_eq!(g.alloc(MIB), Some(CudaStatus::ErrorMemoryAllocation));
    let mut local = Guest::connect(&d.server(), "").expect("admitted as local");
    assert_eq!(local.alloc(8 * MIB), Some(CudaStatus::Success));
    assert_eq!(ledger(&d, "me").len(), 1);
}

/// images/libvirt/qemu-hook as libvirt runs it: `DOMAIN OPERATION SUB EXTRA`, the
/// domain's XML on stdin.
fn hook(d: &Daemon, domain: &str, operation: &str, xml: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("sh")
        .arg(vmcuda_tests::root().join("images/libvirt/qemu-hook"))
        .args([domain, operation, "begin", "-"])
        .env("VMCUDA_HOST", host_bin())
        .env(
            "VMCUDA_ADMIN_ARGS",
            format!(
                "--state-dir {} --config {}",
                d.dir.join("state").display(),
                d.dir.join("host.toml").display()
            ),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the hook");
    let _ = child.stdin.take().unwrap().write_all(xml.as_bytes());
    child.wait_with_output().unwrap()
}

const DOMAIN_XML: &str = r#"<domain type='kvm' id='4'>
  <name>web1</name>
  <metadata>
    <vmcuda:grant xmlns:vmcuda="https://vmcuda.dev/xmlns/libvirt/1"
        memory_quota="16MiB" gpus="0" max_connections="3"/>
  </metadata>
  <devices>
    <vsock model='virtio'>
      <cid auto='yes' address='7'/>
      <alias name='vsock0'/>
    </vsock>
  </devices>
</domain>
"#;

#[test]
fn the_libvirt_hook_grants_a_vm_as_it_starts_and_revokes_it_as_it_stops() {
    let (d, _) = daemon("hook", "");
    // A domain that does not ask for vmcuda is left alone.
    let out = hook(
        &d,
        "plain",
        "started",
        "<domain><name>plain</name></domain>",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
    // Other operations do nothing.
    let out = hook(&d, "web1", "prepare", DOMAIN_XML);
    assert!(out.status.success());
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);

    let out = hook(&d, "web1", "started", DOMAIN_XML);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = list(&d);
    let g = &listed["grants"][0];
    assert_eq!(g["name"], "web1");
    assert_eq!(g["cid"], 7);
    assert_eq!(g["limits"]["memory_quota"], 16 * MIB);
    assert_eq!(g["limits"]["max_connections"], 3);
    assert_eq!(g["limits"]["gpus"], serde_json::json!([0]));
    assert_eq!(
        g["persist"], true,
        "kept across a restart of the daemon by default"
    );
    // libvirt reconnecting to a running VM (its daemon restarted): brought up to date.
    let bigger = DOMAIN_XML.replace("16MiB\"", "32MiB\" persist=\"no\"");
    let out = hook(&d, "web1", "reconnect", &bigger);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(list(&d)["grants"][0]["limits"]["memory_quota"], 32 * MIB);
    assert_eq!(list(&d)["grants"][0]["persist"], false);

    let out = hook(&d, "web1", "stopped", DOMAIN_XML);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("revoked VM web1"));
    assert_eq!(list(&d)["grants"].as_array().unwrap().len(), 0);
    // Stopped again (libvirt calls stopped after a failed start too): nothing to do.
    let out = hook(&d, "web1", "stopped", DOMAIN_XML);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A guest that connected before its grant was revoked but sends its hello after is
/// refused: the worker decides on the grants as they are when the hello comes.
#[test]
fn a_guest_slow_to_say_hello_is_decided_on_the_grants_of_that_moment() {
    let (d, server) = daemon("slow", "");
    let file = token_file(&d, TOKEN);
    ok(&admin(&d, &["grant", "slow", "--token-from", &file]));
    let refused = Guest::connect_then(&server, TOKEN, || {
        // The worker has started and read the configuration by now.
        std::thread::sleep(Duration::from_millis(500));
        ok(&admin(&d, &["revoke", "slow"]));
    });
    assert_eq!(refused.err(), Some(CudaStatus::ErrorNotPermitted));
    // Its worker counts the refusal in the state directory as it ends: let it, before
    // the directory goes.
    assert!(d.log_with("worker finished").contains("worker finished"));
}

/// Grants may not promise a GPU more memory than it has (unless `[admin] overcommit`):
/// the quotas of the grants that see a GPU add up to its memory at most.
#[test]
fn grants_beyond_a_gpus_memory_are_refused_unless_overcommit_is_allowed() {
    let d = Daemon::start_with_config(
        "capacity",
        Some(""),
        &[
            "--executor",
            "host-memory",
            "--host-memory-bytes",
            "1073741824",
            "--host-memory-devices",
            "2",
        ],
    );
    d.admin_socket();
    let grant = |name: &str, cid: &str, args: &[&str]| {
        let mut all = vec!["grant", name, "--cid", cid];
        all.extend_from_slice(args);
        admin(&d, &all)
    };
    ok(&grant(
        "a",
        "3",
        &["--memory-quota", "768MiB", "--gpus", "0"],
    ));
    let out = grant("b", "4", &["--memory-quota", "512MiB", "--gpus", "0"]);
    assert!(
        !out.status.success(),
        "768 + 512 MiB do not fit a 1 GiB GPU"
    );
    let why = text(&out.stderr);
    assert!(why.contains("GPU 0"), "{why}");
    assert!(why.contains("a 805306368, b 536870912"), "{why}");
    // On the other GPU it fits; so does the rest of the first.
    ok(&grant(
        "b",
        "4",
        &["--memory-quota", "512MiB", "--gpus", "1"],
    ));
    ok(&grant(
        "c",
        "5",
        &["--memory-quota", "256MiB", "--gpus", "0"],
    ));
    // A grant that sees both GPUs counts on each; one without a quota takes all.
    let out = grant("d", "6", &["--memory-quota", "256MiB"]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let out = grant("e", "7", &["--gpus", "1"]);
    assert!(!out.status.success(), "no quota: the whole GPU");
    // Nor may a change go over.
    let out = admin(&d, &["change", "c", "--memory-quota", "512MiB"]);
    assert!(!out.status.success());
    let names: Vec<String> = list(&d)["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["a", "b", "c"]);

    let d = Daemon::start_with_config(
        "overcommit",
        Some("[admin]\novercommit = true\n"),
        &[
            "--executor",
            "host-memory",
            "--host-memory-bytes",
            "1073741824",
        ],
    );
    d.admin_socket();
    ok(&admin(
        &d,
        &["grant", "a", "--cid", "3", "--memory-quota", "768MiB"],
    ));
    ok(&admin(
        &d,
        &["grant", "b", "--cid", "4", "--memory-quota", "768MiB"],
    ));
    ok(&admin(&d, &["grant", "c", "--cid", "5"]));
}

/// A grant by name alone admits the connections that come named as that VM, as the
/// vhost-user device's workers do (`--caller vm:NAME`), and no others.
#[test]
fn a_grant_by_name_admits_the_vm_its_listener_names() {
    let (d, server) = daemon("byname", "");
    ok(&admin(&d, &["grant", "dev1", "--memory-quota", "2MiB"]));
    // A worker as the vhost-user device starts one for its VM, on a socket pair.
    let worker = |caller: &str| {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let child = Command::new(host_bin())
            .args(["worker", "--executor", "host-memory", "--transport", "unix"])
            .args(["--caller", caller])
            .arg("--state-dir")
            .arg(d.dir.join("state"))
            .arg("--config")
            .arg(d.dir.join("host.toml"))
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        (
            Guest::hello(vmcuda_wire::transport::Stream::Unix(ours), ""),
            child,
        )
    };
    let (guest, mut child) = worker("vm:dev1");
    let mut guest = guest.expect("the named VM is admitted");
    assert_eq!(guest.alloc(2 * MIB), Some(CudaStatus::Success));
    assert_eq!(guest.alloc(MIB), Some(CudaStatus::ErrorMemoryAllocation));
    drop(guest);
    let _ = child.wait();
    let (other, mut child) = worker("vm:dev2");
    assert_eq!(other.err(), Some(CudaStatus::ErrorNotPermitted));
    let _ = child.wait();
    // Nor does the name admit anyone over TCP.
    assert_eq!(
        Guest::connect(&server, "").err(),
        Some(CudaStatus::ErrorNotPermitted)
    );
}

/// `vmcuda-host suspend` counts a granted VM's GPU memory against its grant's
/// host_memory, not against `[local]`'s.
#[test]
fn suspending_a_granted_vm_holds_it_to_its_grants_host_memory() {
    let (d, server) = daemon("suspend", "");
    let file = token_file(&d, TOKEN);
    ok(&admin(
        &d,
        &[
            "grant",
            "s1",
            "--token-from",
            &file,
            "--host-memory",
            "8MiB",
        ],
    ));
    let mut g = Guest::connect(&server, TOKEN).expect("admitted");
    assert_eq!(g.alloc(16 * MIB), Some(CudaStatus::Success));
    let suspend = |vm: &str, what: &str| {
        Command::new(host_bin())
            .args([what, vm, "--executor", "host-memory"])
            .arg("--state-dir")
            .arg(d.dir.join("state"))
            .arg("--config")
            .arg(d.dir.join("host.toml"))
            .output()
            .unwrap()
    };
    let out = suspend("s1", "suspend");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("host_memory limit (8388608 bytes)"),
        "{}",
        text(&out.stderr)
    );
    ok(&admin(&d, &["change", "s1", "--host-memory", "64MiB"]));
    let out = suspend("s1", "suspend");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = suspend("s1", "resume");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(g.alloc(MIB), Some(CudaStatus::Success));
}

/// The metrics endpoint lists the VMs granted at run time, with their host_memory,
/// from the moment they are granted until they are revoked.
#[test]
fn the_metrics_endpoint_lists_granted_vms() {
    let d = Daemon::start_with_config(
        "metrics",
        Some(""),
        &["--executor", "host-memory", "--metrics", "127.0.0.1:0"],
    );
    d.admin_socket();
    let log = d.log_with("serving metrics at http://");
    let at = log
        .find("serving metrics at http://")
        .expect("the endpoint's address");
    let rest = &log[at + "serving metrics at http://".len()..];
    let addr = rest[..rest.find("/metrics").unwrap()].to_string();
    let scrape = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let series = "vmcuda_vm_host_memory_limit_bytes{vm=\"m1\"}";
    assert!(!scrape().contains(series));
    ok(&admin(
        &d,
        &["grant", "m1", "--cid", "9", "--host-memory", "3MiB"],
    ));
    let text = scrape();
    assert!(
        text.lines().any(|l| l == format!("{series} 3145728")),
        "{text}"
    );
    ok(&admin(&d, &["revoke", "m1"]));
    assert!(!scrape().contains(series));
}
