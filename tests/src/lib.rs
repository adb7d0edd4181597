//! Helpers for the end-to-end tests: where the built pieces are, a host daemon
//! started for one test on its own socket, and running a CUDA program through it.
//!
//! The tests that need nvcc-built programs and the linked guest library are marked
//! `#[ignore]` so a plain `cargo test` stays self-contained; `tests/run.sh` builds
//! those artifacts and runs everything with `--include-ignored`.

pub mod cut_proxy;
pub mod hostile;
pub mod load;
pub mod raw_guest;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn artifact(var: &str, default: PathBuf, what: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(
        path.exists(),
        "{what} not found at {} (set {var} or run tests/run.sh)",
        path.display()
    );
    path
}

/// The `vmcuda-host` binary.
pub fn host_bin() -> PathBuf {
    let default = root().join("target/debug/vmcuda-host");
    artifact("VMCUDA_HOST_BIN", default, "vmcuda-host")
}

/// The guest's `vmcuda` command (built by `cargo build --workspace`).
pub fn cli_bin() -> PathBuf {
    artifact(
        "VMCUDA_CLI_BIN",
        root().join("target/debug/vmcuda"),
        "the vmcuda command",
    )
}

/// The directory holding the linked guest libraries (`libcuda.so.1`,
/// `libnvidia-ml.so.1`).
pub fn guest_lib_dir() -> PathBuf {
    artifact(
        "VMCUDA_GUEST_LIB_DIR",
        root().join("build/guest/lib"),
        "the guest library directory",
    )
}

/// The directory of NVIDIA's `libcudart.so.13`, which `-cudart shared` programs run on
/// over vmcuda's `libcuda.so.1`: `$VMCUDA_NVIDIA_CUDART_DIR`, else the lib/ of the
/// nvcc wheels the apps are built with (`.ci/install-nvcc.sh` prints their root; the
/// nvidia-cuda-runtime wheel puts the runtime there).
pub fn nvidia_cudart_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("VMCUDA_NVIDIA_CUDART_DIR") {
            Some(d) => PathBuf::from(d),
            None => {
                let out = Command::new("bash")
                    .arg(root().join(".ci/install-nvcc.sh"))
                    .stderr(Stdio::inherit())
                    .output()
                    .expect("run .ci/install-nvcc.sh");
                assert!(out.status.success(), ".ci/install-nvcc.sh failed");
                let cu13 = text(&out.stdout)
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_string();
                PathBuf::from(cu13).join("lib")
            }
        };
        assert!(
            dir.join("libcudart.so.13").is_file(),
            "NVIDIA's libcudart.so.13 is not in {} (set VMCUDA_NVIDIA_CUDART_DIR)",
            dir.display()
        );
        dir
    })
    .clone()
}

/// The library path a guest program runs with: vmcuda's driver first, NVIDIA's runtime
/// after it.
pub fn guest_library_path() -> String {
    format!(
        "{}:{}",
        guest_lib_dir().display(),
        nvidia_cudart_dir().display()
    )
}

/// The directory of nvcc-built test programs.
pub fn apps_dir() -> PathBuf {
    artifact(
        "VMCUDA_APPS_DIR",
        root().join("build/apps"),
        "the built test programs",
    )
}

/// The same programs built with nvcc's default static runtime
/// (`VMCUDA_APPS_CUDART=static tests/apps/build.sh`).
pub fn static_apps_dir() -> PathBuf {
    artifact(
        "VMCUDA_APPS_STATIC_DIR",
        root().join("build/apps-static"),
        "the test programs built with the static CUDA runtime",
    )
}

/// tests/c/`name`.c built against the guest's libraries `libs` (link names such as
/// `libcuda.so.1`, or NVIDIA's `libcudart.so.13`), in a fresh temporary directory;
/// returns the program.
pub fn build_c_program(name: &str, libs: &[&str]) -> PathBuf {
    // Built once per test process and program: tests of one binary run in parallel,
    // and one test's compiler writing the very file another test is starting fails that
    // start with ETXTBSY ("Text file busy").
    type Key = (String, Vec<String>);
    static BUILT: std::sync::Mutex<Vec<(Key, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key: Key = (
        name.to_string(),
        libs.iter().map(|l| l.to_string()).collect(),
    );
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c"));
    let dir = std::env::temp_dir().join(format!(
        "vmcuda-{name}-{}-{}",
        std::process::id(),
        built.len()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join(name);
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", guest_lib_dir().display()))
        .arg(format!("-L{}", nvidia_cudart_dir().display()))
        .args(libs.iter().map(|l| format!("-l:{l}")))
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", text(&out.stderr));
    built.push((key, exe.clone()));
    exe
}

/// `vmcuda-host serve ARGS` on a scratch socket and state directory, with `env`, when it
/// ends within a minute (a daemon that refused to start): its output. `None`, and the
/// daemon killed, when it was still serving.
pub fn serve_until_refused(name: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Output> {
    let dir = std::env::temp_dir().join(format!("vmcuda-refused-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut child = Command::new(host_bin())
        .arg("serve")
        .arg("--unix")
        .arg(dir.join("host.sock"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vmcuda-host");
    let deadline = Instant::now() + Duration::from_secs(60);
    let out = loop {
        if child.try_wait().expect("wait").is_some() {
            break Some(child.wait_with_output().expect("its output"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// A host daemon on a private Unix socket, killed when dropped.
pub struct Daemon {
    child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub launch_log: PathBuf,
    args: Vec<std::ffi::OsString>,
    env: Vec<(String, String)>,
}

impl Daemon {
    /// The daemon's admin socket, once it is there (the daemon opens it after its
    /// guests' sockets).
    pub fn admin_socket(&self) -> PathBuf {
        let admin = self.dir.join("state/admin.sock");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !admin.exists() {
            assert!(Instant::now() < deadline, "no admin socket: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        admin
    }

    /// Start `vmcuda-host serve` with the host-memory executor.
    pub fn host_memory(name: &str) -> Daemon {
        Self::start(name, &["--executor", "host-memory"])
    }

    pub fn start(name: &str, extra: &[&str]) -> Daemon {
        Self::start_with_config(name, None, extra)
    }

    /// Start with `config` (TOML) as the host configuration file, when given.
    pub fn start_with_config(name: &str, config: Option<&str>, extra: &[&str]) -> Daemon {
        Self::start_with_env(name, config, &[], extra)
    }

    /// A host-memory daemon whose TCP listener speaks TLS with the certificate `cert`
    /// and its key `key` (PEM files) and admits VM `vm` by `token`, and its TCP address
    /// (HOST:PORT), once it listens.
    pub fn tls(name: &str, cert: &Path, key: &Path, vm: &str, token: &str) -> (Daemon, String) {
        let addr = free_tcp_addr();
        let daemon = Self::start_with_config(
            name,
            Some(&format!(
                "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n\
                 [[vm]]\nname = \"{vm}\"\ntcp = true\ntoken = \"{token}\"\n",
                cert.display(),
                key.display()
            )),
            &["--executor", "host-memory", "--tcp", &addr],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "daemon never listened on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        (daemon, addr)
    }

    /// [`Daemon::start_with_config`] with more environment variables for the daemon.
    pub fn start_with_env(
        name: &str,
        config: Option<&str>,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Daemon {
        // Unique per daemon: tests run in parallel and may share a name.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("vmcuda-test-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let socket = dir.join("host.sock");
        let launch_log = dir.join("launches.jsonl");
        let mut args: Vec<std::ffi::OsString> = vec!["serve".into()];
        if let Some(text) = config {
            let path = dir.join("host.toml");
            std::fs::write(&path, text).expect("config file");
            args.push("--config".into());
            args.push(path.into());
        }
        args.extend([
            "--unix".into(),
            socket.clone().into(),
            "--launch-log".into(),
            launch_log.clone().into(),
            // Each daemon's VMs keep their ledgers to themselves.
            "--state-dir".into(),
            dir.join("state").into(),
        ]);
        args.extend(extra.iter().map(Into::into));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let child = Self::spawn(&dir, &socket, &args, &env);
        Daemon {
            child,
            dir,
            socket,
            launch_log,
            args,
            env,
        }
    }

    fn spawn(
        dir: &Path,
        socket: &Path,
        args: &[std::ffi::OsString],
        env: &[(String, String)],
    ) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("host.log"))
            .expect("log file");
        let child = Command::new(host_bin())
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start vmcuda-host");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "vmcuda-host did not create its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Stop the daemon (SIGTERM, as a service manager does) and start it again with
    /// the same command line and state directory; its log goes on in the same file.
    pub fn restart(&mut self) {
        // SAFETY: kill takes a pid and a signal number and touches no memory.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
        self.child = Self::spawn(&self.dir, &self.socket, &self.args, &self.env);
    }

    pub fn server(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the daemon process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The daemon's log once it has a line containing `what`, waiting up to 10 s: a
    /// worker's lines reach it through the daemon, which may write them after the guest
    /// already has its answer. The log as it is at the deadline otherwise.
    pub fn log_with(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.contains(what) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("host.log")).unwrap_or_default()
    }

    /// Recorded kernel launches, one JSON object each.
    pub fn launches(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.launch_log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("launch log lines are JSON"))
            .collect()
    }

    /// Run a built test program through this daemon.
    pub fn run_app(&self, app: &str) -> Output {
        run_program(&apps_dir().join(app), &self.server())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run a program against the guest library (and NVIDIA's runtime) with
/// `VMCUDA_SERVER=server`.
pub fn run_program(program: &Path, server: &str) -> Output {
    run_program_with(program, server, &[])
}

/// [`run_program`] with more environment variables.
pub fn run_program_with(program: &Path, server: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", guest_library_path());
    run_command_with(cmd, server, env)
}

/// Run `cmd` (its program, arguments and library path set) with `VMCUDA_SERVER=server`
/// and `env`, within 120 s.
pub fn run_command_with(mut cmd: Command, server: &str, env: &[(&str, &str)]) -> Output {
    let program = PathBuf::from(cmd.get_program());
    let mut child = cmd
        .env("VMCUDA_SERVER", server)
        // Tokens come from the test, never from this machine's /etc/vmcuda/token.
        .env("VMCUDA_TOKEN_FILE", "/nonexistent")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    // Drain both pipes on threads so a chatty program never blocks on a full pipe.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    // Bounded: a hung program fails the test instead of hanging CI.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} did not finish within 120 s", program.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().expect("reader"),
        stderr: err_reader.join().expect("reader"),
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback address with a port nobody listens on now (for a daemon to take).
pub fn free_tcp_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").to_string()
}

/// A package: `$VAR`, else its default name in build/pkg.
pub fn package(var: &str, file: &str) -> PathBuf {
    let path =
        std::env::var_os(var).map_or_else(|| root().join("build/pkg").join(file), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {var} or run tests/run.sh, which builds the packages)",
        path.display()
    );
    path
}
