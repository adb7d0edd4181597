//! Where the guest's hosts are: `VMCUDA_SERVER`, the server file, the local daemon's
//! socket, the VM's host over vsock, in that order; and connecting to the first that
//! answers.

use super::*;

/// Where the guest's hosts are written down when `VMCUDA_SERVER` is not set
/// (`VMCUDA_SERVER_FILE` names another file).
pub const DEFAULT_SERVER_FILE: &str = "/etc/vmcuda/server";

/// The local daemon's socket, which the default tries first where it exists
/// (`VMCUDA_LOCAL_SOCKET` names another: tests).
pub fn local_socket() -> PathBuf {
    std::env::var_os("VMCUDA_LOCAL_SOCKET")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_UNIX_PATH), PathBuf::from)
}

/// The hosts a program uses.
#[derive(Clone, Debug, PartialEq)]
pub enum Servers {
    /// Named by `VMCUDA_SERVER` or the server file: every one is used, their GPUs
    /// seen as one set.
    Named(Vec<ServerAddr>),
    /// Nothing named: the first of these that answers (never empty).
    Default(Vec<ServerAddr>),
}

impl Servers {
    pub fn addrs(&self) -> &[ServerAddr] {
        match self {
            Servers::Named(a) | Servers::Default(a) => a,
        }
    }
}

/// One place looked at for the hosts, and what was found there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Looked {
    pub place: String,
    pub found: String,
}

fn looked(place: impl Into<String>, found: impl Into<String>) -> Looked {
    Looked {
        place: place.into(),
        found: found.into(),
    }
}

/// The hosts to use: `VMCUDA_SERVER` (comma-separated for several), else the guest's
/// server file (addresses separated by commas or lines, `#` comments), else the
/// default ([`default_servers`]).
pub fn servers() -> Result<Servers, ConnectFailure> {
    find_servers().0
}

/// [`servers`], and every place looked at on the way, in order (`vmcuda doctor`
/// shows them).
pub fn find_servers() -> (Result<Servers, ConnectFailure>, Vec<Looked>) {
    let mut seen = Vec::new();
    let parse = |s: String| {
        ServerAddr::parse_list(&s).map_err(|source| ConnectFailure::BadAddress { value: s, source })
    };
    match std::env::var("VMCUDA_SERVER") {
        Ok(s) if !s.trim().is_empty() => {
            seen.push(looked("VMCUDA_SERVER", format!("{s} (used)")));
            return (parse(s).map(Servers::Named), seen);
        }
        _ => seen.push(looked("VMCUDA_SERVER", "not set")),
    }
    let file = std::env::var("VMCUDA_SERVER_FILE").unwrap_or_else(|_| DEFAULT_SERVER_FILE.into());
    match std::fs::read_to_string(&file).map(|text| server_file_list(&text)) {
        Ok(list) if !list.is_empty() => {
            seen.push(looked(&file, format!("{list} (used)")));
            return (parse(list).map(Servers::Named), seen);
        }
        Ok(_) => seen.push(looked(&file, "no address in it")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => seen.push(looked(&file, "no such file")),
        Err(e) => seen.push(looked(&file, format!("cannot read it: {e}"))),
    }
    let socket = local_socket();
    let is_socket = std::fs::metadata(&socket).map(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_socket()
    });
    let cid = vmcuda_wire::transport::local_vsock_cid().map_err(|e| e.to_string());
    let (default, more) = default_servers(&socket, is_socket, cid);
    seen.extend(more);
    (Ok(Servers::Default(default)), seen)
}

/// The default hosts, to try in order, from what this machine has: the local
/// daemon's socket where there is one (a GPU host, even one that is itself a VM),
/// then the host over vsock where this machine is a VM guest; with neither, the
/// local socket alone, whose absence its failure names. What each place held
/// comes with them.
pub fn default_servers(
    socket: &Path,
    is_socket: io::Result<bool>,
    local_cid: Result<u32, String>,
) -> (Vec<ServerAddr>, Vec<Looked>) {
    let local = ServerAddr::Unix(socket.to_string_lossy().into_owned());
    let host = ServerAddr::Vsock {
        cid: HOST_CID,
        port: u32::from(WELL_KNOWN_PORT),
    };
    let mut addrs = Vec::new();
    let mut seen = Vec::new();
    match is_socket {
        Ok(true) => {
            seen.push(looked(local.to_string(), "a socket: tried first"));
            addrs.push(local.clone());
        }
        Ok(false) => seen.push(looked(local.to_string(), "there, but not a socket")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => seen.push(looked(
            local.to_string(),
            "no socket (no daemon on this machine)",
        )),
        Err(e) => seen.push(looked(local.to_string(), format!("cannot look: {e}"))),
    }
    match local_cid {
        Ok(cid) if vmcuda_wire::transport::is_guest_cid(cid) => {
            let order = if addrs.is_empty() {
                "tried"
            } else {
                "tried next"
            };
            seen.push(looked(
                host.to_string(),
                format!("this machine is a VM guest (vsock CID {cid}): {order}"),
            ));
            addrs.push(host);
        }
        Ok(cid) => seen.push(looked(
            host.to_string(),
            format!("not a VM guest (vsock CID {cid}): not tried"),
        )),
        Err(e) => seen.push(looked(
            host.to_string(),
            format!("no vsock here ({e}): not tried"),
        )),
    }
    if addrs.is_empty() {
        addrs.push(local);
    }
    (addrs, seen)
}

/// Connect to the default hosts' first that answers: a socket file nobody listens on
/// (a daemon that died) or a VM's missing host gives way to the next. Any answer,
/// a refusal too, is the host's.
pub fn connect_first<T>(
    candidates: &[ServerAddr],
    mut connect: impl FnMut(&ServerAddr) -> Result<T, ConnectFailure>,
) -> Result<T, ConnectFailure> {
    let mut last = None;
    for addr in candidates {
        match connect(addr) {
            Err(e @ ConnectFailure::Unreachable { .. }) => {
                if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                    eprintln!("vmcuda: {e}");
                }
                last = Some(e);
            }
            other => return other,
        }
    }
    Err(last.expect("the default has at least one host"))
}

/// A server file's addresses as one comma-separated list.
pub(super) fn server_file_list(text: &str) -> String {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}
