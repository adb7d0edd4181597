//! `vmcuda cdi generate`: a Container Device Interface spec, so that containers in
//! this guest get what `vmcuda-run` gives a program (`podman run --device
//! vmcuda.dev/gpu=all`, or Docker with CDI on).
//!
//! The spec is about files in this guest, not about the host: it is written without
//! connecting. Its one device, `all`, carries:
//! - the library directory, bind-mounted read-only at the same path, with
//!   `LD_LIBRARY_PATH` and `LD_PRELOAD` set as `vmcuda-run` sets them (the directory
//!   alone, and vmcuda's `libcuda.so.1`: a container starts from an image's
//!   environment, so there is nothing of the caller's to keep). NVIDIA's runtime and
//!   libraries are the image's own (a CUDA base image, torch's wheels) and run on it;
//! - the `vmcuda` command's directory, when it is the installation's (`PREFIX/bin`), so
//!   that `/opt/vmcuda/bin/vmcuda doctor` works inside;
//! - the client's configuration as it stands now: `VMCUDA_SERVER` and `VMCUDA_TLS_NAME`
//!   when set, the server file, token file and TLS CA when they exist (read-only, at
//!   the same paths); a token in `VMCUDA_TOKEN` is not written, as the spec is readable
//!   by every user;
//! - `/dev/vsock` when a host is reached over vsock, or when none is configured (the
//!   default in a VM is the host over vsock, found through /dev/vsock's CID);
//! - the directory of a `unix:` host's socket (the directory, not the socket: the daemon
//!   replaces its socket when it restarts, and a mount of the old one would go stale).
//!
//! Configuration written after the spec is not in it: generate it again then.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use vmcuda_guest::client::{DEFAULT_SERVER_FILE, DEFAULT_TLS_CA, DEFAULT_TOKEN_FILE};
use vmcuda_wire::transport::ServerAddr;

use crate::doctor::{lib_dirs_searched, retired_replacements, DRIVER};

/// The device kind: `--device vmcuda.dev/gpu=all`.
pub const KIND: &str = "vmcuda.dev/gpu";
/// The oldest spec version with everything used here (a mount's `type` is 0.4.0; 0.5.0
/// is what Podman 4 and Docker 25 read): a runtime refuses a spec newer than it knows.
pub const CDI_VERSION: &str = "0.5.0";

/// The libraries `vmcuda-run` preloads: the driver alone.
pub const PRELOADED: [&str; 1] = [DRIVER];

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: &'static str,
    pub kind: &'static str,
    pub devices: Vec<Device>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: &'static str,
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=VALUE`, each replacing the image's variable of that name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

#[derive(Debug, Serialize)]
pub struct DeviceNode {
    /// The same path in the guest and the container; the runtime reads the node's
    /// type and numbers from the guest's.
    pub path: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    pub options: Vec<&'static str>,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl Mount {
    /// `path` at the same path in the container.
    fn bind(path: &Path, read_only: bool) -> Mount {
        let mut options = vec!["bind", "nosuid", "nodev"];
        if read_only {
            options.insert(0, "ro");
        }
        Mount {
            host_path: path.display().to_string(),
            container_path: path.display().to_string(),
            options,
            kind: "bind",
        }
    }
}

/// What the spec is made from: the library directory and what is in it, and the
/// client's configuration (gathered by [`Setup::gather`]; [`Setup::spec`] is pure).
#[derive(Debug, Default)]
pub struct Setup {
    /// Absolute.
    pub lib_dir: PathBuf,
    /// The entries of [`PRELOADED`] present in `lib_dir`.
    pub libraries: Vec<&'static str>,
    /// `PREFIX/bin` when it holds the `vmcuda` command, for `lib_dir` = `PREFIX/lib`.
    pub bin_dir: Option<PathBuf>,
    /// Variables passed on as they are set here.
    pub env: Vec<(&'static str, String)>,
    /// Configuration files to mount read-only.
    pub files: Vec<PathBuf>,
    /// Directories of `unix:` hosts' sockets.
    pub socket_dirs: Vec<PathBuf>,
    pub vsock: bool,
}

/// Why no spec could be made.
#[derive(Debug, PartialEq, Eq)]
pub struct SetupError(pub String);

/// NCCL's settings for a guest, as vmcuda-run sets them (see there): its transports
/// are its own; its host buffers in shared memory, as it would fall back to.
const NCCL_SETTINGS: [&str; 1] = ["NCCL_CUMEM_HOST_ENABLE=0"];

/// Variables of the client's that name a file, with the file's default path.
const CONFIG_FILES: [(&str, &str); 3] = [
    ("VMCUDA_SERVER_FILE", DEFAULT_SERVER_FILE),
    ("VMCUDA_TOKEN_FILE", DEFAULT_TOKEN_FILE),
    ("VMCUDA_TLS_CA", DEFAULT_TLS_CA),
];

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Setup {
    /// The library directory (`lib_dir`, else where `vmcuda-run` would look) and this
    /// guest's configuration, from the environment and the files as they are now.
    pub fn gather(lib_dir: Option<&Path>) -> Result<Setup, SetupError> {
        let lib_dir = match lib_dir {
            Some(d) if d.join(DRIVER).is_file() => d.to_path_buf(),
            Some(d) => {
                return Err(SetupError(format!(
                    "no {DRIVER} in {} (--lib-dir)",
                    d.display()
                )))
            }
            None => {
                let searched = lib_dirs_searched();
                match searched.iter().find(|d| d.join(DRIVER).is_file()) {
                    Some(d) => d.clone(),
                    None => {
                        let list: Vec<String> =
                            searched.iter().map(|d| d.display().to_string()).collect();
                        return Err(SetupError(format!(
                            "vmcuda's {DRIVER} is not installed (looked in {}): give --lib-dir DIR",
                            list.join(", ")
                        )));
                    }
                }
            }
        };
        // A replacement runtime or BLAS an older vmcuda left there would be found first
        // on the container's library path, as vmcuda-run refuses it too.
        if let Some(stale) = retired_replacements(&lib_dir).first() {
            return Err(SetupError(format!(
                "{} is a replacement library an older vmcuda installed: remove it",
                stale.display()
            )));
        }
        // Absolute, as the container sees it; symbolic links are the runtime's to follow.
        let lib_dir = std::path::absolute(&lib_dir)
            .map_err(|e| SetupError(format!("{}: {e}", lib_dir.display())))?;
        let libraries = PRELOADED
            .into_iter()
            .filter(|l| lib_dir.join(l).exists())
            .collect();
        let bin_dir = lib_dir
            .parent()
            .map(|prefix| prefix.join("bin"))
            .filter(|bin| lib_dir.ends_with("lib") && bin.join("vmcuda").is_file());

        let mut env = Vec::new();
        let mut files = Vec::new();
        let server = env_var("VMCUDA_SERVER");
        if let Some(s) = &server {
            env.push(("VMCUDA_SERVER", s.clone()));
        }
        if let Some(n) = env_var("VMCUDA_TLS_NAME") {
            env.push(("VMCUDA_TLS_NAME", n));
        }
        for (var, default) in CONFIG_FILES {
            let set = env_var(var);
            let path = PathBuf::from(set.clone().unwrap_or_else(|| default.into()));
            if path.is_file() {
                // Mounted at the same path, so the variable (if any) still names it.
                if let Some(v) = set {
                    env.push((var, v));
                }
                files.push(std::path::absolute(&path).unwrap_or(path));
            }
        }

        // The hosts: VMCUDA_SERVER, else the server file, as the client reads them.
        let listed = match &server {
            Some(s) => s.clone(),
            None => {
                let file = env_var("VMCUDA_SERVER_FILE").unwrap_or(DEFAULT_SERVER_FILE.into());
                std::fs::read_to_string(file)
                    .map(|t| server_file_list(&t))
                    .unwrap_or_default()
            }
        };
        let addrs = if listed.is_empty() {
            Vec::new()
        } else {
            ServerAddr::parse_list(&listed)
                .map_err(|e| SetupError(format!("the configured hosts {listed:?}: {e}")))?
        };
        let mut setup = Setup {
            lib_dir,
            libraries,
            bin_dir,
            env,
            files,
            ..Setup::default()
        };
        setup.add_hosts(&addrs);
        Ok(setup)
    }

    /// What reaching `addrs` needs in a container; none configured is the default in a
    /// VM, the host over vsock.
    pub fn add_hosts(&mut self, addrs: &[ServerAddr]) {
        self.vsock = addrs.is_empty();
        for a in addrs {
            match a {
                ServerAddr::Vsock { .. } => self.vsock = true,
                ServerAddr::Unix(path) => {
                    let dir = Path::new(path)
                        .parent()
                        .filter(|d| !d.as_os_str().is_empty())
                        .unwrap_or(Path::new("."));
                    let dir = std::path::absolute(dir).unwrap_or(dir.to_path_buf());
                    if !self.socket_dirs.contains(&dir) {
                        self.socket_dirs.push(dir);
                    }
                }
                // The container's network reaches the host as the guest's does.
                ServerAddr::Tcp(_) | ServerAddr::Tls(_) => {}
            }
        }
    }

    /// The spec, as a container runtime reads it.
    pub fn spec(&self) -> Spec {
        let lib = self.lib_dir.display().to_string();
        let preload: Vec<String> = self
            .libraries
            .iter()
            .map(|l| self.lib_dir.join(l).display().to_string())
            .collect();
        let mut env = vec![format!("LD_LIBRARY_PATH={lib}")];
        if !preload.is_empty() {
            env.push(format!("LD_PRELOAD={}", preload.join(":")));
        }
        env.extend(NCCL_SETTINGS.iter().map(|s| s.to_string()));
        env.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));

        let mut mounts = vec![Mount::bind(&self.lib_dir, true)];
        mounts.extend(self.bin_dir.iter().map(|d| Mount::bind(d, true)));
        mounts.extend(self.files.iter().map(|f| Mount::bind(f, true)));
        // Connecting to a socket writes to it: not read-only.
        mounts.extend(self.socket_dirs.iter().map(|d| Mount::bind(d, false)));

        let device_nodes = if self.vsock {
            vec![DeviceNode {
                path: "/dev/vsock".into(),
            }]
        } else {
            Vec::new()
        };
        Spec {
            cdi_version: CDI_VERSION,
            kind: KIND,
            devices: vec![Device {
                name: "all",
                container_edits: ContainerEdits {
                    env,
                    device_nodes,
                    mounts,
                },
            }],
        }
    }
}

/// A server file's addresses as one comma-separated list: lines or commas, `#`
/// comments (the format the client reads).
pub fn server_file_list(text: &str) -> String {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// Write `text` to `path` whole: a runtime that reads the directory meanwhile sees the
/// old spec or the new one, never half of one.
fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        // Read by runtimes of every user (rootless Podman): it holds no secret.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub fn generate(output: Option<&Path>, lib_dir: Option<&Path>) -> ExitCode {
    let setup = match Setup::gather(lib_dir) {
        Ok(s) => s,
        Err(SetupError(e)) => {
            eprintln!("vmcuda cdi generate: {e}");
            return ExitCode::FAILURE;
        }
    };
    if env_var("VMCUDA_TOKEN").is_some() {
        eprintln!(
            "vmcuda cdi generate: VMCUDA_TOKEN is not written into the spec (every user can \
             read it): put the token in {DEFAULT_TOKEN_FILE} and generate the spec again"
        );
    }
    let mut text = serde_json::to_string_pretty(&setup.spec()).expect("a spec serializes");
    text.push('\n');
    match output {
        None => {
            crate::write_stdout(&text);
            ExitCode::SUCCESS
        }
        Some(path) => match write_file(path, &text) {
            Ok(()) => {
                eprintln!(
                    "vmcuda cdi generate: wrote {} (--device {KIND}=all)",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("vmcuda cdi generate: cannot write {}: {e}", path.display());
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            lib_dir: "/opt/vmcuda/lib".into(),
            libraries: vec![DRIVER],
            ..Setup::default()
        }
    }

    fn edits(s: &Setup) -> ContainerEdits {
        s.spec().devices.pop().unwrap().container_edits
    }

    #[test]
    fn the_environment_is_vmcuda_runs() {
        let e = edits(&setup());
        assert_eq!(
            e.env,
            [
                "LD_LIBRARY_PATH=/opt/vmcuda/lib",
                "LD_PRELOAD=/opt/vmcuda/lib/libcuda.so.1",
                "NCCL_CUMEM_HOST_ENABLE=0",
            ]
        );
        assert_eq!(e.mounts.len(), 1);
        assert_eq!(e.mounts[0].host_path, "/opt/vmcuda/lib");
        assert_eq!(e.mounts[0].container_path, "/opt/vmcuda/lib");
        assert_eq!(e.mounts[0].options, ["ro", "bind", "nosuid", "nodev"]);
    }

    #[test]
    fn vsock_when_configured_or_nothing_is() {
        let mut s = setup();
        s.add_hosts(&[]);
        assert!(s.vsock, "the default in a VM");
        let mut s = setup();
        s.add_hosts(&ServerAddr::parse_list("tls:gpu.example:7731,vsock:2:7731").unwrap());
        assert!(s.vsock);
        assert_eq!(edits(&s).device_nodes[0].path, "/dev/vsock");
        let mut s = setup();
        s.add_hosts(&ServerAddr::parse_list("tcp:10.0.0.1:7731").unwrap());
        assert!(!s.vsock && edits(&s).device_nodes.is_empty());
    }

    #[test]
    fn a_unix_host_gets_its_sockets_directory_writable() {
        let mut s = setup();
        s.add_hosts(
            &ServerAddr::parse_list("unix:/run/vmcuda/vmcuda.sock,unix:/run/vmcuda/b.sock")
                .unwrap(),
        );
        let e = edits(&s);
        assert_eq!(e.mounts.len(), 2, "one mount for both: {:?}", e.mounts);
        assert_eq!(e.mounts[1].host_path, "/run/vmcuda");
        assert!(!e.mounts[1].options.contains(&"ro"));
    }

    #[test]
    fn json_field_names_are_the_specs() {
        let mut s = setup();
        s.add_hosts(&[]);
        let v = serde_json::to_value(s.spec()).unwrap();
        assert_eq!(v["cdiVersion"], CDI_VERSION);
        assert_eq!(v["kind"], "vmcuda.dev/gpu");
        let edits = &v["devices"][0]["containerEdits"];
        assert_eq!(v["devices"][0]["name"], "all");
        assert_eq!(edits["deviceNodes"][0]["path"], "/dev/vsock");
        assert_eq!(edits["mounts"][0]["hostPath"], "/opt/vmcuda/lib");
        assert_eq!(edits["mounts"][0]["containerPath"], "/opt/vmcuda/lib");
        assert_eq!(edits["mounts"][0]["type"], "bind");
    }

    #[test]
    fn server_files_read_as_the_client_reads_them() {
        assert_eq!(
            server_file_list("# hosts\nvsock:2:7731 # local\n\ntls:a:1, tls:b:2\n"),
            "vsock:2:7731,tls:a:1,tls:b:2"
        );
        assert_eq!(server_file_list("# nothing\n"), "");
    }
}
