//! Who may use the admin socket: root, the daemon's own user, and members of
//! `[admin] group`, as the kernel tells the caller (`SO_PEERCRED` and
//! `SO_PEERGROUPS`: the credentials it had when it connected, not what it claims).

use std::os::fd::AsRawFd;

/// `SO_PEERGROUPS` (Linux 4.13): the peer's supplementary groups. The value of the
/// generic socket options, which every architecture vmcuda runs on uses.
const SO_PEERGROUPS: libc::c_int = 59;

/// The most supplementary groups a process has on Linux (`NGROUPS_MAX`).
const MAX_GROUPS: usize = 65536;

/// A caller on the admin socket, as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} uid {} gid {}", self.pid, self.uid, self.gid)
    }
}

/// Who is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// The daemon's own user (root in a packaged service).
    pub daemon_uid: u32,
    /// `[admin] group`, resolved.
    pub group: Option<(String, u32)>,
}

impl Allowed {
    /// The decision: `Err` says why, for the host log.
    pub fn check(&self, peer: &Peer) -> Result<(), String> {
        if peer.uid == 0 || peer.uid == self.daemon_uid {
            return Ok(());
        }
        match &self.group {
            Some((_, gid)) if peer.gid == *gid || peer.groups.contains(gid) => Ok(()),
            Some((name, gid)) => Err(format!(
                "{peer} is not root, not the daemon's user and not in group {name} ({gid})"
            )),
            None => Err(format!(
                "{peer} is not root and not the daemon's user (no [admin] group is configured)"
            )),
        }
    }
}

/// The group named `name`, by the system's group database.
pub fn resolve_group(name: &str) -> Result<u32, String> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(format!("[admin] group {name:?}: no such group")),
        Err(e) => Err(format!("[admin] group {name:?}: {e}")),
    }
}

/// The kernel's credentials of the peer of `stream`.
pub fn peer_of(stream: &impl AsRawFd) -> std::io::Result<Peer> {
    let cred = crate::daemon::peer_cred(stream)
        .ok_or_else(|| std::io::Error::other("no peer credentials (SO_PEERCRED)"))?;
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups: peer_groups(stream)?,
    })
}

fn peer_groups(stream: &impl AsRawFd) -> std::io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: SO_PEERGROUPS writes at most `len` bytes into `groups`, a buffer of
        // that many bytes, and sets `len` to what it wrote (or, failing with ERANGE,
        // to what it needs).
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(needed);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() && needed <= MAX_GROUPS {
            groups.resize(needed, 0);
            continue;
        }
        // A kernel older than 4.13 tells no supplementary groups: only the primary
        // group counts there.
        if e.raw_os_error() == Some(libc::ENOPROTOOPT) {
            return Ok(Vec::new());
        }
        return Err(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            pid: 42,
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn root_the_daemons_user_and_the_group_are_allowed_and_no_one_else() {
        let allowed = Allowed {
            daemon_uid: 0,
            group: Some(("vmcuda-admin".into(), 990)),
        };
        assert!(allowed.check(&peer(0, 0, &[])).is_ok(), "root");
        assert!(
            allowed.check(&peer(1000, 990, &[])).is_ok(),
            "primary group"
        );
        assert!(
            allowed.check(&peer(1000, 1000, &[27, 990])).is_ok(),
            "supplementary group"
        );
        let why = allowed.check(&peer(1000, 1000, &[27])).unwrap_err();
        assert!(why.contains("not in group vmcuda-admin (990)"), "{why}");
        assert!(why.contains("uid 1000"), "{why}");
        // A VM's jailed worker: its own user and group, no others.
        assert!(allowed
            .check(&peer(2_100_000_123, 2_100_000_123, &[]))
            .is_err());
    }

    #[test]
    fn without_a_group_only_root_and_the_daemons_user_are() {
        let allowed = Allowed {
            daemon_uid: 1234,
            group: None,
        };
        assert!(allowed.check(&peer(1234, 1234, &[])).is_ok());
        assert!(allowed.check(&peer(0, 0, &[])).is_ok());
        let why = allowed.check(&peer(1000, 990, &[990])).unwrap_err();
        assert!(why.contains("no [admin] group"), "{why}");
    }

    #[test]
    fn the_kernel_tells_a_connected_peer() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let p = peer_of(&a).unwrap();
        assert_eq!(p.uid, nix::unistd::getuid().as_raw());
        assert_eq!(p.gid, nix::unistd::getgid().as_raw());
        assert_eq!(p.pid, std::process::id() as i32);
        let mut mine: Vec<u32> = nix::unistd::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        let mut told = p.groups.clone();
        mine.sort();
        told.sort();
        assert_eq!(told, mine);
    }

    #[test]
    fn a_group_that_does_not_exist_is_said_so() {
        assert!(resolve_group("no-such-group-vmcuda")
            .unwrap_err()
            .contains("no such group"));
        assert_eq!(resolve_group("root").unwrap(), 0);
    }
}
