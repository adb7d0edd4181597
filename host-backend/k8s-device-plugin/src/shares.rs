//! The devices the plugin advertises: `shares` of each host, named `HOST-N`, and the
//! preferred allocation that keeps a container's shares on as few hosts as it can
//! (each host is one more daemon its programs connect to).

use std::collections::BTreeMap;

use crate::config::HostConfig;

/// Every share of every host, in the configuration's order.
#[derive(Clone, Debug)]
pub struct Inventory {
    /// Device ID → index of its host.
    ids: BTreeMap<String, usize>,
    order: Vec<String>,
}

impl Inventory {
    pub fn new(hosts: &[HostConfig]) -> Inventory {
        let mut ids = BTreeMap::new();
        let mut order = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            for n in 0..h.shares {
                let id = format!("{}-{n}", h.name);
                ids.insert(id.clone(), i);
                order.push(id);
            }
        }
        Inventory { ids, order }
    }

    /// The host of share `id`, if it is one of ours.
    pub fn host_of(&self, id: &str) -> Option<usize> {
        self.ids.get(id).copied()
    }

    /// Every device ID with its host.
    pub fn all(&self) -> impl Iterator<Item = (&str, usize)> {
        self.order.iter().map(|id| (id.as_str(), self.ids[id]))
    }

    /// `size` of `available`, with all of `must`: the hosts of `must` first, then the
    /// hosts with the most available shares, so that the shares sit on few hosts.
    pub fn preferred(&self, available: &[String], must: &[String], size: usize) -> Vec<String> {
        let mut chosen: Vec<String> = must.to_vec();
        let mut per_host: BTreeMap<usize, Vec<&String>> = BTreeMap::new();
        for id in available.iter().filter(|id| !must.contains(id)) {
            if let Some(h) = self.host_of(id) {
                per_host.entry(h).or_default().push(id);
            }
        }
        let must_hosts: Vec<usize> = must.iter().filter_map(|id| self.host_of(id)).collect();
        let mut hosts: Vec<(usize, Vec<&String>)> = per_host.into_iter().collect();
        // Hosts of `must` first, then by available shares (most first), then by order.
        hosts.sort_by_key(|(h, ids)| (!must_hosts.contains(h), std::cmp::Reverse(ids.len()), *h));
        for (_, ids) in hosts {
            for id in ids {
                if chosen.len() >= size {
                    return chosen;
                }
                chosen.push(id.clone());
            }
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn inventory() -> Inventory {
        let host = |name: &str, shares: u32| {
            format!(
                "[[host]]\nname = \"{name}\"\nserver = \"tcp:{name}:7731\"\n\
                 admin_socket = \"/a\"\nshares = {shares}\nshare_memory = \"1GiB\"\n"
            )
        };
        let c = Config::parse(&format!("{}{}", host("a", 2), host("b", 3))).unwrap();
        Inventory::new(&c.hosts)
    }

    fn ids(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shares_are_named_by_host() {
        let inv = inventory();
        let all: Vec<_> = inv.all().collect();
        assert_eq!(all.len(), 5);
        assert_eq!(all[0], ("a-0", 0));
        assert_eq!(all[4], ("b-2", 1));
        assert_eq!(inv.host_of("b-1"), Some(1));
        assert_eq!(inv.host_of("c-0"), None);
    }

    #[test]
    fn preferred_shares_sit_on_few_hosts() {
        let inv = inventory();
        let all = ids(&["a-0", "a-1", "b-0", "b-1", "b-2"]);
        // The host with the most free shares holds the whole request.
        assert_eq!(inv.preferred(&all, &[], 2), ids(&["b-0", "b-1"]));
        // A share that must be in pulls its host's shares first.
        assert_eq!(
            inv.preferred(&all, &ids(&["a-1"]), 3),
            ids(&["a-1", "a-0", "b-0"])
        );
        // Only what is available.
        assert_eq!(inv.preferred(&ids(&["a-0"]), &[], 2), ids(&["a-0"]));
    }
}
