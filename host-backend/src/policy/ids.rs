//! The values a configuration names and admission works with: GPUs, byte sizes, and
//! who is calling.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A list of GPUs or all of them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Gpus {
    Named(String),
    List(Vec<GpuId>),
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum GpuId {
    Ordinal(u32),
    Uuid(String),
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuId::Ordinal(n) => write!(f, "{n}"),
            GpuId::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which host GPUs a guest sees, in its order; `None` is all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSelection(pub Option<Vec<GpuId>>);

impl GpuSelection {
    pub fn all() -> Self {
        GpuSelection(None)
    }

    /// The command-line form: "all" or a comma-separated list.
    pub fn to_arg(&self) -> String {
        match &self.0 {
            None => "all".into(),
            Some(ids) => ids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    pub fn from_arg(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(GpuSelection::all());
        }
        s.split(',')
            .map(|p| match p.parse::<u32>() {
                Ok(n) => Ok(GpuId::Ordinal(n)),
                Err(_) if p.starts_with("GPU-") => Ok(GpuId::Uuid(p.to_string())),
                Err(_) => Err(format!("not a GPU ordinal or GPU-UUID: {p:?}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| GpuSelection(Some(v)))
    }

    /// Pick the granted devices from `available` (host ordinal order, with UUIDs), in
    /// the grant's order: the guest's device i is the host's `result[i]`.
    pub fn resolve(&self, uuids: &[String]) -> Result<Vec<usize>, String> {
        let Some(ids) = &self.0 else {
            return Ok((0..uuids.len()).collect());
        };
        let picked = ids
            .iter()
            .map(|id| match id {
                GpuId::Ordinal(n) if (*n as usize) < uuids.len() => Ok(*n as usize),
                GpuId::Ordinal(n) => Err(format!(
                    "GPU {n} is granted but this host has {} GPU(s)",
                    uuids.len()
                )),
                GpuId::Uuid(u) => uuids
                    .iter()
                    .position(|have| have.eq_ignore_ascii_case(u))
                    .ok_or_else(|| format!("GPU {u} is granted but not present on this host")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, d) in picked.iter().enumerate() {
            if picked[..i].contains(d) {
                return Err(format!("GPU {d} is granted twice ({})", self.to_arg()));
            }
        }
        Ok(picked)
    }
}

/// A byte count written as a number or with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// Written as a plain number of bytes.
impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => parse_size(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a size: {s:?} (write e.g. 16GiB)"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Who is on the other end of a connection, as the transport (not the guest) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A program on the host, through the daemon's Unix socket.
    Local { pid: Option<i32> },
    /// A guest through the kernel's vhost-vsock, by its context id.
    VsockCid(u32),
    /// A VM named by its own listener: a hybrid-vsock socket or the vhost-user device.
    Vm(String),
    /// A hybrid-vsock socket given on the command line that no `[[vm]]` claims.
    UnclaimedSocket(PathBuf),
    /// Anyone over TCP; admitted only by token.
    Tcp(String),
}

impl Caller {
    /// The worker's `--caller` argument.
    pub fn to_arg(&self) -> String {
        match self {
            Caller::Local { pid: Some(p) } => format!("local:{p}"),
            Caller::Local { pid: None } => "local".into(),
            Caller::VsockCid(cid) => format!("vsock:{cid}"),
            Caller::Vm(name) => format!("vm:{name}"),
            Caller::UnclaimedSocket(p) => format!("socket:{}", p.display()),
            Caller::Tcp(peer) => format!("tcp:{peer}"),
        }
    }

    pub fn from_arg(s: &str) -> Result<Caller, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "local" if rest.is_empty() => Ok(Caller::Local { pid: None }),
            "local" => rest
                .parse()
                .map(|p| Caller::Local { pid: Some(p) })
                .map_err(|_| format!("bad pid in {s:?}")),
            "vsock" => rest
                .parse()
                .map(Caller::VsockCid)
                .map_err(|_| format!("bad cid in {s:?}")),
            "vm" if !rest.is_empty() => Ok(Caller::Vm(rest.into())),
            "socket" if !rest.is_empty() => Ok(Caller::UnclaimedSocket(rest.into())),
            "tcp" => Ok(Caller::Tcp(rest.into())),
            _ => Err(format!(
                "not a caller: {s:?} (local[:PID], vsock:CID, vm:NAME, tcp:PEER)"
            )),
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Local { pid: Some(p) } => write!(f, "local process {p}"),
            Caller::Local { pid: None } => f.write_str("local process"),
            Caller::VsockCid(cid) => write!(f, "vsock cid {cid}"),
            Caller::Vm(name) => write!(f, "VM {name:?}"),
            Caller::UnclaimedSocket(p) => write!(f, "hybrid-vsock socket {}", p.display()),
            Caller::Tcp(peer) => write!(f, "tcp peer {peer}"),
        }
    }
}
