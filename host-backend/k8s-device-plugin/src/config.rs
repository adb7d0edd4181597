//! The plugin's configuration (TOML; a ConfigMap in images/kubernetes/): the resource
//! it advertises, where the kubelet is, and the vmcuda hosts whose shares it grants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;
use vmcuda_host::policy::{ByteSize, Limits};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Parse(PathBuf, toml::de::Error),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The extended resource pods ask for.
    #[serde(default = "default_resource")]
    pub resource_name: String,
    /// The kubelet's device-plugins directory (its `kubelet.sock` and ours).
    #[serde(default = "default_plugin_dir")]
    pub device_plugin_dir: PathBuf,
    /// Our socket's name in that directory.
    #[serde(default = "default_socket")]
    pub socket_name: String,
    /// This node's name in grant names (default: `--node`, `$NODE_NAME`, the host name).
    #[serde(default)]
    pub node: Option<String>,
    /// CDI devices every container gets (the guest package's spec by default).
    #[serde(default = "default_cdi")]
    pub cdi_devices: Vec<String>,
    /// More variables for every container (`VMCUDA_TLS_NAME`, ...).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files of the node for every container (a TLS CA, ...).
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// Seconds between checks that each host's admin API answers.
    #[serde(default = "default_health_interval")]
    pub health_interval_s: u64,
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostConfig>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    pub host_path: String,
    pub container_path: String,
    #[serde(default = "yes")]
    pub read_only: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Short name: device IDs are `NAME-N`.
    pub name: String,
    /// What containers connect to (`tls:gpu1.example:7731`).
    pub server: String,
    /// The host daemon's admin socket as this node reaches it.
    pub admin_socket: PathBuf,
    /// How many shares of this host the node advertises.
    pub shares: u32,
    /// GPU memory of one share: a grant's `memory_quota` is shares × this.
    pub share_memory: ByteSize,
    /// More limits for every grant (the keys of host.toml's `[defaults]`).
    #[serde(default)]
    pub limits: Limits,
}

fn default_resource() -> String {
    "vmcuda.io/gpu-share".into()
}
fn default_plugin_dir() -> PathBuf {
    "/var/lib/kubelet/device-plugins".into()
}
fn default_socket() -> String {
    "vmcuda.sock".into()
}
fn default_cdi() -> Vec<String> {
    vec!["vmcuda.dev/gpu=all".into()]
}
fn default_health_interval() -> u64 {
    10
}
fn yes() -> bool {
    true
}

/// The longest device ID the kubelet takes.
const MAX_DEVICE_ID: usize = 63;

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.into(), e))?;
        let config: Config =
            toml::from_str(&text).map_err(|e| ConfigError::Parse(path.into(), e))?;
        config.check()?;
        Ok(config)
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse("(text)".into(), e))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |s: String| Err(ConfigError::Invalid(s));
        if self.hosts.is_empty() {
            return bad("no [[host]]: there is nothing to advertise".into());
        }
        if !self.resource_name.contains('/') {
            return bad(format!(
                "resource_name {:?} needs a domain (vmcuda.io/gpu-share)",
                self.resource_name
            ));
        }
        if self.socket_name.contains('/') || self.socket_name == "kubelet.sock" {
            return bad(format!(
                "socket_name {:?} must be a plain name other than kubelet.sock",
                self.socket_name
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for h in &self.hosts {
            let plain = !h.name.is_empty()
                && h.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !plain {
                return bad(format!(
                    "host name {:?}: letters, digits and '-' only",
                    h.name
                ));
            }
            if !names.insert(h.name.as_str()) {
                return bad(format!("host name {:?} is given twice", h.name));
            }
            if h.shares == 0 || h.share_memory.0 == 0 {
                return bad(format!(
                    "host {}: shares and share_memory must be > 0",
                    h.name
                ));
            }
            let longest = format!("{}-{}", h.name, h.shares - 1);
            if longest.len() > MAX_DEVICE_ID {
                return bad(format!("host {}: device ID {longest} is too long", h.name));
            }
            if h.limits.memory_quota.is_some() {
                return bad(format!(
                    "host {}: memory_quota comes from the shares; set share_memory",
                    h.name
                ));
            }
            if h.server.contains(',') {
                return bad(format!("host {}: server is one address", h.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
        [[host]]
        name = "gpu1"
        server = "tls:gpu1.example:7731"
        admin_socket = "/run/vmcuda/admin.sock"
        shares = 8
        share_memory = "10GiB"
        limits = { gpus = [0], max_connections = 16 }
    "#;

    #[test]
    fn defaults_and_a_host() {
        let c = Config::parse(ONE).unwrap();
        assert_eq!(c.resource_name, "vmcuda.io/gpu-share");
        assert_eq!(
            c.device_plugin_dir,
            Path::new("/var/lib/kubelet/device-plugins")
        );
        assert_eq!(c.cdi_devices, ["vmcuda.dev/gpu=all"]);
        assert_eq!(c.hosts[0].share_memory.0, 10 << 30);
        assert_eq!(c.hosts[0].limits.max_connections, Some(16));
    }

    #[test]
    fn mistakes_are_refused_with_the_reason() {
        let no_hosts = Config::parse("resource_name = \"a/b\"").unwrap_err();
        assert!(no_hosts.to_string().contains("no [[host]]"), "{no_hosts}");
        let quota = Config::parse(&ONE.replace("max_connections", "memory_quota")).unwrap_err();
        assert!(quota.to_string().contains("share_memory"), "{quota}");
        let name = Config::parse(&ONE.replace("\"gpu1\"", "\"gpu/1\"")).unwrap_err();
        assert!(name.to_string().contains("letters"), "{name}");
        let twice = Config::parse(&format!("{ONE}{ONE}")).unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
        let unknown = Config::parse(&format!("colour = 1\n{ONE}")).unwrap_err();
        assert!(unknown.to_string().contains("colour"), "{unknown}");
    }
}
