//! The module cache against the real daemon: each connection is a worker process of
//! its own, as each guest process is, and a second process of the same VM that loads
//! an image the first one sent names it by its SHA-256 alone; a process of another VM
//! has to send it.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use vmcuda_wire::handshake::caps;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

/// A fatbinary with one kernel, `tiny(int *)`: small enough to go with its hash.
const TINY: &[u8] = include_bytes!("../../wire/testdata/tiny.fatbin");
const PARAMS: &[u8] = include_bytes!("../../wire/testdata/params.cubin");

/// An image larger than those that go with their hash at once (the ones worth naming
/// alone): the test cubin, grown. Its kernels are the cubin's.
fn large() -> &'static [u8] {
    static LARGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    LARGE.get_or_init(|| vmcuda_wire::cubin::grown(PARAMS, 1 << 20))
}
const TOKEN: &str = "module-cache-test-token-0123456789";

/// A connection that counts the bytes the guest writes.
struct Counted<S> {
    inner: S,
    written: usize,
}

impl<S: Read> Read for Counted<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Counted<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn greet<S: Read + Write>(inner: S, token: &str) -> Counted<S> {
    let mut s = Counted { inner, written: 0 };
    let (status, meta, _) = hello_with(&mut s, token.as_bytes());
    assert_eq!(status, CudaStatus::Success);
    let reply: HelloReply = postcard::from_bytes(&meta).unwrap();
    assert_ne!(
        reply.capabilities & caps::MODULE_CACHE,
        0,
        "the host offers its module cache"
    );
    s
}

/// One `ModuleLoadCached` of `sha256` with `data`: the module, if loaded.
fn load_named(s: &mut (impl Read + Write), sha256: [u8; 32], data: &[u8]) -> Option<ModuleHandle> {
    let (status, meta, _) = call(s, Op::ModuleLoadCached, &ModuleLoadCached { sha256 }, data);
    assert_eq!(status, CudaStatus::Success);
    postcard::from_bytes::<ModuleLoadedCached>(&meta)
        .unwrap()
        .module
}

/// `ModuleLoadCached` for the large image, with its bytes or not: the module, if
/// loaded, and the bytes this request put on the connection.
fn load<S: Read + Write>(s: &mut Counted<S>, with_image: bool) -> (Option<ModuleHandle>, usize) {
    let before = s.written;
    let data = if with_image { large() } else { &[] };
    let module = load_named(s, Sha256::digest(large()).into(), data);
    (module, s.written - before)
}

/// The module cache directory of this test's own programs on the host: its user's.
fn local_dir() -> String {
    format!("local.uid-{}", nix::unistd::geteuid())
}

/// The kernel of a loaded module can be found: it is the image.
fn has_kernel<S: Read + Write>(s: &mut Counted<S>, module: ModuleHandle) {
    let get = ModuleGetFunction {
        module,
        name: "_Z8noparamsv".into(),
    };
    let (status, _, _) = call(s, Op::ModuleGetFunction, &get, &[]);
    assert_eq!(status, CudaStatus::Success);
}

/// `vmcuda-host status --json`: the live connections, with their figures.
fn guests(d: &Daemon) -> Vec<serde_json::Value> {
    d.status_json()["guests"].as_array().unwrap().clone()
}

/// The figures of `vm`'s one live connection.
fn live(d: &Daemon, vm: &str) -> serde_json::Value {
    let mine: Vec<_> = guests(d).into_iter().filter(|g| g["vm"] == vm).collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    mine[0].clone()
}

/// Wait until `vm` has no live connection (a worker ends after its guest left).
fn gone(d: &Daemon, vm: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while guests(d).iter().any(|g| g["vm"] == vm) {
        assert!(Instant::now() < deadline, "{vm} still connected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_process_of_the_vm_sends_only_the_hash_and_another_vm_misses() {
    let tcp = free_tcp_addr();
    let d = Daemon::with_config(
        "module-cache",
        Some(&format!(
            r#"
            [[vm]]
            name = "remote"
            tcp = true
            token = "{TOKEN}"
            "#
        )),
        &["--tcp", &tcp],
    );

    // The first process of the local "VM": the host lacks the image, so it goes.
    let mut first = greet(d.connect(), "");
    let (module, named) = load(&mut first, false);
    assert_eq!(module, None, "a miss: send it");
    let (module, sent) = load(&mut first, true);
    has_kernel(&mut first, module.expect("loaded"));
    assert!(sent > large().len(), "the image crossed: {sent} bytes");
    assert!(named < 200, "the hash alone is small: {named} bytes");
    let figures = live(&d, "local");
    assert_eq!(figures["module_cache_misses"], 1);
    assert_eq!(figures["module_cache_hits"], 0);
    assert_eq!(figures["module_bytes_received"], large().len() as u64);
    drop(first);
    gone(&d, "local");

    // A second process (another connection, another worker): the hash is enough.
    let mut second = greet(d.connect(), "");
    let (module, named) = load(&mut second, false);
    has_kernel(
        &mut second,
        module.expect("a hit: loaded from the VM's cache"),
    );
    assert!(named < 200, "only the hash crossed: {named} bytes");
    // The host's figures say the same.
    let figures = live(&d, "local");
    assert_eq!(figures["module_cache_hits"], 1);
    assert_eq!(figures["module_cache_misses"], 0);
    assert_eq!(figures["module_cache_bytes"], large().len() as u64);
    assert_eq!(figures["module_bytes_received"], 0);
    drop(second);

    // Another VM, over TCP: the same hash finds nothing of the local VM's.
    let mut other = greet(connect_tcp(&tcp), TOKEN);
    let (module, _) = load(&mut other, false);
    assert_eq!(module, None, "another VM's image is not this VM's to have");
    let (module, _) = load(&mut other, true);
    has_kernel(&mut other, module.expect("loaded once sent"));
    let figures = live(&d, "remote");
    assert_eq!(figures["module_cache_hits"], 0);
    assert_eq!(figures["module_cache_misses"], 1);
    assert_eq!(figures["module_bytes_received"], large().len() as u64);
    drop(other);

    // Each VM's images are in a directory of its own; programs on the host have one
    // per Unix user.
    let modules = d.dir.join("state/modules");
    for dir in [local_dir(), "remote".into()] {
        let index = std::fs::read_to_string(modules.join(&dir).join("index")).unwrap();
        assert_eq!(index.lines().count(), 1, "{dir}: {index}");
    }
}

#[test]
fn a_vm_with_its_cache_off_is_not_offered_one() {
    let d = Daemon::with_config("module-cache-off", Some("[local]\nmodule_cache = 0\n"), &[]);
    let mut s = d.connect();
    let (status, meta, _) = hello_with(&mut s, b"");
    assert_eq!(status, CudaStatus::Success);
    let reply: HelloReply = postcard::from_bytes(&meta).unwrap();
    assert_eq!(reply.capabilities & caps::MODULE_CACHE, 0);
    // A guest that asks anyway is answered "send it", and its image loads.
    let sha256 = Sha256::digest(TINY).into();
    assert_eq!(load_named(&mut s, sha256, &[]), None);
    assert!(load_named(&mut s, sha256, TINY).is_some());
    assert!(!d.dir.join("state/modules").join(local_dir()).exists());
}

#[test]
fn an_image_that_is_not_its_hash_is_refused_and_the_worker_goes_on() {
    let d = Daemon::start("module-cache-mismatch");
    let mut s = greet(d.connect(), "");
    let req = ModuleLoadCached { sha256: [7; 32] };
    let (status, _, _) = call(&mut s, Op::ModuleLoadCached, &req, TINY);
    assert_eq!(status, CudaStatus::ErrorInvalidKernelImage);
    // Nothing was kept under either name.
    assert_eq!(load(&mut s, false).0, None);
    assert_eq!(load_named(&mut s, req.sha256, &[]), None);
    // Said in the host's log (the worker's lines reach it through the daemon).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.log().contains("does not match the SHA-256") {
        assert!(Instant::now() < deadline, "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A connection made by this process as effective user `uid` (in one thread only: the
/// raw system call, unlike the C library's, changes the calling thread's ids alone).
fn connect_as(d: &Daemon, uid: u32) -> std::os::unix::net::UnixStream {
    let socket = d.socket.clone();
    std::thread::spawn(move || {
        // SAFETY: setresuid takes three ids (-1: unchanged) and touches no memory; it
        // changes this thread's effective uid, which the saved uid 0 lets it restore.
        let set = |euid: u32| unsafe { libc::syscall(libc::SYS_setresuid, -1i32, euid, -1i32) };
        assert_eq!(set(uid), 0, "{}", std::io::Error::last_os_error());
        let s = std::os::unix::net::UnixStream::connect(&socket);
        assert_eq!(set(0), 0, "{}", std::io::Error::last_os_error());
        let s = s.unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    })
    .join()
    .unwrap()
}

#[test]
fn programs_of_another_user_on_the_host_have_a_cache_of_their_own() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: needs root (to connect as another user)");
        return;
    }
    let d = Daemon::start("module-cache-users");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut mine = greet(d.connect(), "");
    assert_eq!(load(&mut mine, false).0, None);
    assert!(load(&mut mine, true).0.is_some());
    assert!(load(&mut mine, false).0.is_some());
    // Another user's program does not find this user's image ...
    let mut theirs = greet(connect_as(&d, 54321), "");
    assert_eq!(load(&mut theirs, false).0, None);
    assert!(load(&mut theirs, true).0.is_some());
    // ... and has its own from then on.
    let mut again = greet(connect_as(&d, 54321), "");
    assert!(load(&mut again, false).0.is_some());
    let modules = d.dir.join("state/modules");
    assert!(modules.join("local.uid-54321/index").is_file());
    assert!(modules.join(local_dir()).join("index").is_file());
}
