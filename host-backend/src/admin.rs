//! The daemon's admin API: guests' policies granted, changed and revoked at run time
//! (`vmcuda-host admin ...`, docs/admin-api.md).
//!
//! The daemon listens on a local Unix socket (`[admin] socket`, by default
//! `admin.sock` in its state directory) for one JSON request per connection, from
//! root, its own user or members of `[admin] group` ([`auth`]); anyone else is
//! refused and logged. A grant is a `[[vm]]` entry as the configuration file has them
//! (who may connect, by vsock cid, TCP token or Unix uid; its GPUs, quotas and
//! limits), kept in the grants file ([`store`]) that every worker merges over the
//! configuration when it decides on a guest ([`crate::policy::Policy::load_with_grants`]):
//! a change is in force for the next connection, and the workers already serving keep
//! what they were admitted with. Revoking a grant also ends the VM's live workers (its
//! GPU memory is freed with them) and drops them from its ledger.
//!
//! Every change is checked against the configuration as a whole before it is written
//! (a grant may not take another VM's cid, uid or token), made under one lock, written
//! atomically, and logged with who asked. Grants asked to persist (`--persist`) are
//! kept when the daemon restarts; the others are dropped as it starts.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::policy::grants::{grants_path, SOCKET_NAME};
use crate::policy::{Limits, Secret};

pub mod auth;
pub mod server;

/// The largest request or answer: a grant is a few hundred bytes; a list of every
/// grant of a large host fits.
pub const MAX_MESSAGE: u64 = 4 << 20;

/// How long either side waits for the other.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What a grant or a change sets; unset fields are left as they are (a change) or
/// inherit from `[defaults]` (a grant).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantSpec {
    /// The VM's vsock context id (kernel vhost-vsock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<u32>,
    /// A Unix user whose programs on this host, through the daemon's Unix socket, are
    /// this VM's guests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The token its guests present over TCP (at least 16 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// The daemon makes a token (answered once, in [`Response::token`]).
    #[serde(default)]
    pub generate_token: bool,
    /// Whether its guests may connect over TCP. Default: when it has a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<bool>,
    #[serde(default)]
    pub limits: Limits,
}

/// One request on the admin socket.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// A new grant named `name` (refused when one is there already).
    Grant {
        name: String,
        #[serde(default)]
        spec: GrantSpec,
        #[serde(default)]
        persist: bool,
    },
    /// Change grant `name`: what `spec` sets, and whether it persists when given.
    Change {
        name: String,
        #[serde(default)]
        spec: GrantSpec,
        #[serde(default)]
        persist: Option<bool>,
    },
    /// Remove grant `name`: new connections are refused (or, where the configuration
    /// file has an entry of that name, get that entry's policy again); live workers
    /// keep what they were admitted with until they end.
    Remove { name: String },
    /// Remove grant `name` and end its VM's live workers.
    Revoke { name: String },
    /// The grants, with the VM's live workers (tokens are never shown).
    List,
}

/// A grant as `list` shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrantView {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Whether it has a token (never the token itself).
    pub token: bool,
    pub tcp: bool,
    pub limits: Limits,
    pub persist: bool,
    /// Whether it stands in place of a `[[vm]]` entry of the configuration file.
    pub replaces_file_entry: bool,
    pub changed_by: u32,
    pub changed_ms: u64,
    /// The VM's live workers on this host now, and the GPU memory they hold under its
    /// quota.
    pub workers: usize,
    pub device_bytes: u64,
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
    /// A token the daemon made (`generate_token`), said this once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default)]
    pub grants: Vec<GrantView>,
    /// Revoke: the workers ended (host pids) and the GPU memory their ledger lines
    /// held, given back.
    #[serde(default)]
    pub ended: Vec<u32>,
    #[serde(default)]
    pub refunded_bytes: u64,
}

impl Response {
    pub fn refused(message: impl Into<String>) -> Response {
        Response {
            ok: false,
            message: message.into(),
            ..Response::default()
        }
    }
}

/// Send `request` to the admin socket at `socket` and read the answer.
pub fn call(socket: &Path, request: &Request) -> Result<Response, String> {
    let mut stream = UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach the admin socket {}: {e}", socket.display()))?;
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut text = zeroize::Zeroizing::new(
        serde_json::to_vec(request).map_err(|e| format!("cannot write the request: {e}"))?,
    );
    text.push(b'\n');
    // A refused caller's answer comes before its request is read: it is read even
    // when the request could not be written.
    let sent = stream
        .write_all(&text)
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write));
    let mut answer = zeroize::Zeroizing::new(Vec::new());
    let read = (&mut stream).take(MAX_MESSAGE).read_to_end(&mut answer);
    if answer.is_empty() {
        let why = match (sent, read) {
            (Err(e), _) | (_, Err(e)) => e.to_string(),
            _ => "closed without an answer".into(),
        };
        return Err(format!("admin socket {}: {why}", socket.display()));
    }
    serde_json::from_slice(&answer).map_err(|e| format!("the daemon's answer: {e}"))
}
