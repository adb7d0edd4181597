//! Allocate: a container's shares granted on their hosts with one token of its own,
//! and the answer that gives the container `VMCUDA_SERVER`, `VMCUDA_TOKEN` and the CDI
//! device.
//!
//! The device plugin API never says when a container is gone. A share the kubelet
//! allocates again, though, is free by its account: the grant that held it (a pod
//! that ended) is revoked before the new one is made. Grant names carry the node and
//! the shares they hold (`k8s/NODE/gpu1-0,gpu1-3`), so a restarted plugin learns from
//! the hosts which grant holds which share.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Mutex;

use thiserror::Error;
use tracing::{info, warn};
use vmcuda_host::policy::ByteSize;

use crate::admin::{AdminError, HostAdmin};
use crate::api::{CdiDevice, ContainerAllocateResponse, Mount};
use crate::config::Config;
use crate::shares::Inventory;

#[derive(Debug, Error)]
pub enum AllocError {
    #[error("device {0:?} is not one of this plugin's")]
    UnknownDevice(String),
    #[error("no devices in the request")]
    Empty,
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("no token: {0}")]
    Random(std::io::Error),
}

/// Grant names of node `node`: `k8s/NODE/ID,ID`.
pub fn grant_name(node: &str, ids: &[String]) -> String {
    format!("k8s/{node}/{}", ids.join(","))
}

/// The shares a grant of node `node` holds; `None` for anybody else's grant.
pub fn shares_of(node: &str, name: &str) -> Option<Vec<String>> {
    let ids = name
        .strip_prefix("k8s/")?
        .strip_prefix(node)?
        .strip_prefix('/')?;
    Some(ids.split(',').map(String::from).collect())
}

pub struct Allocator {
    config: Config,
    node: String,
    inventory: Inventory,
    admins: Vec<HostAdmin>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Share → the grant holding it.
    held: BTreeMap<String, String>,
    /// Hosts whose grants have been read since the plugin started.
    learned: Vec<bool>,
}

impl Allocator {
    pub fn new(config: Config, node: String) -> Allocator {
        let inventory = Inventory::new(&config.hosts);
        let admins = config
            .hosts
            .iter()
            .map(|h| HostAdmin {
                host: h.name.clone(),
                socket: h.admin_socket.clone(),
            })
            .collect();
        let state = State {
            held: BTreeMap::new(),
            learned: vec![false; config.hosts.len()],
        };
        Allocator {
            config,
            node,
            inventory,
            admins,
            state: Mutex::new(state),
        }
    }

    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    pub fn hosts(&self) -> usize {
        self.admins.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere leaves the map as whole as it was: keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether host `h`'s admin API answers; the first answer also says which of its
    /// grants are this node's.
    pub fn check(&self, h: usize) -> bool {
        let mut state = self.lock();
        match self.learn(&mut state, h) {
            Ok(()) => true,
            Err(e) => {
                warn!("{e}");
                false
            }
        }
    }

    fn learn(&self, state: &mut State, h: usize) -> Result<(), AdminError> {
        let names = self.admins[h].grant_names()?;
        if state.learned[h] {
            return Ok(());
        }
        for name in names {
            for id in shares_of(&self.node, &name).unwrap_or_default() {
                if self.inventory.host_of(&id) == Some(h) {
                    state.held.insert(id, name.clone());
                }
            }
        }
        state.learned[h] = true;
        Ok(())
    }

    /// Grant shares `ids` to one container.
    pub fn allocate(&self, ids: &[String]) -> Result<ContainerAllocateResponse, AllocError> {
        if ids.is_empty() {
            return Err(AllocError::Empty);
        }
        let mut per_host: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for id in ids {
            let h = self
                .inventory
                .host_of(id)
                .ok_or_else(|| AllocError::UnknownDevice(id.clone()))?;
            per_host.entry(h).or_default().push(id.clone());
        }
        let mut state = self.lock();
        for &h in per_host.keys() {
            self.learn(&mut state, h)?;
        }
        // The grants of containers that held these shares before: they are gone.
        let mut stale: Vec<(usize, String)> = ids
            .iter()
            .filter_map(|id| Some((self.inventory.host_of(id)?, state.held.get(id)?.clone())))
            .collect();
        stale.sort();
        stale.dedup();
        for (h, name) in stale {
            self.admins[h].revoke(&name)?;
            info!(grant = %name, "revoked: its shares are allocated again");
            state.held.retain(|_, g| *g != name);
        }

        let token = token().map_err(AllocError::Random)?;
        let mut made: Vec<(usize, String)> = Vec::new();
        for (&h, shares) in &per_host {
            let host = &self.config.hosts[h];
            let name = grant_name(&self.node, shares);
            let mut limits = host.limits.clone();
            limits.memory_quota = Some(ByteSize(host.share_memory.0 * shares.len() as u64));
            if let Err(e) = self.admins[h].grant(&name, &token, limits) {
                // All the container's hosts or none.
                for (h, name) in made {
                    let _ = self.admins[h].revoke(&name);
                }
                return Err(e.into());
            }
            info!(grant = %name, shares = shares.len(), "granted");
            made.push((h, name));
        }
        for (h, name) in &made {
            for id in &per_host[h] {
                state.held.insert(id.clone(), name.clone());
            }
        }
        Ok(self.answer(per_host.keys().copied(), token))
    }

    fn answer(
        &self,
        hosts: impl Iterator<Item = usize>,
        token: String,
    ) -> ContainerAllocateResponse {
        let servers: Vec<&str> = hosts
            .map(|h| self.config.hosts[h].server.as_str())
            .collect();
        let mut envs: std::collections::HashMap<String, String> = self
            .config
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Several hosts: one program sees all their GPUs, presenting the one token.
        envs.insert("VMCUDA_SERVER".into(), servers.join(","));
        envs.insert("VMCUDA_TOKEN".into(), token);
        ContainerAllocateResponse {
            envs,
            mounts: self
                .config
                .mounts
                .iter()
                .map(|m| Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            cdi_devices: self
                .config
                .cdi_devices
                .iter()
                .map(|name| CdiDevice { name: name.clone() })
                .collect(),
            ..ContainerAllocateResponse::default()
        }
    }
}

/// 32 random bytes in hex, as the daemon's own generated tokens are.
fn token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_names_say_whose_shares_they_hold() {
        let ids = vec!["gpu1-0".to_string(), "gpu1-3".to_string()];
        let name = grant_name("node-a", &ids);
        assert_eq!(name, "k8s/node-a/gpu1-0,gpu1-3");
        assert_eq!(shares_of("node-a", &name), Some(ids));
        // Another node's grants, and a prefix of this node's name, are not ours.
        assert_eq!(shares_of("node", &name), None);
        assert_eq!(shares_of("node-a", "slurm-1-n1"), None);
    }

    #[test]
    fn tokens_are_long_and_new() {
        let (a, b) = (token().unwrap(), token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
