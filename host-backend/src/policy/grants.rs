//! The run-time grants file: `<state_dir>/admin/grants.json`, the daemon's alone
//! (mode 0600 in a 0700 directory), replaced whole on every change: the new text is
//! written to a file of its own beside it, synced, and renamed over the old one, so a
//! reader (a worker deciding on a guest) sees the grants before or after a change,
//! never part of one, and a crash leaves one or the other.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::{Limits, Secret, Vm};

/// The admin socket's name in the state directory, unless `[admin] socket` names
/// another.
pub const SOCKET_NAME: &str = "admin.sock";

/// The grants file of the daemon whose state directory is `state_dir`.
pub fn grants_path(state_dir: &Path) -> PathBuf {
    state_dir.join("admin").join("grants.json")
}

/// The grants file's format, for a later change of it.
const VERSION: u32 = 1;

/// The most the file may hold: far more than any host's grants.
const MAX_FILE: u64 = 16 << 20;

/// A guest's policy granted at run time: a `[[vm]]` entry of the configuration, with
/// what the admin API knows of it besides.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeGrant {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    #[serde(default)]
    pub tcp: bool,
    #[serde(default)]
    pub limits: Limits,
    /// Kept when the daemon restarts; otherwise the daemon drops it as it starts.
    #[serde(default)]
    pub persist: bool,
    /// Who made the last change (the caller's uid), and when (ms since the epoch).
    #[serde(default)]
    pub changed_by: u32,
    #[serde(default)]
    pub changed_ms: u64,
}

impl RuntimeGrant {
    /// The `[[vm]]` entry it stands for.
    pub fn to_vm(&self) -> Vm {
        Vm {
            name: self.name.clone(),
            cid: self.cid,
            hybrid_vsock: None,
            token: self.token.clone(),
            token_file: None,
            tcp: self.tcp,
            uid: self.uid,
            guest_memory_copies: true,
            limits: self.limits.clone(),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsFile {
    version: u32,
    grants: Vec<RuntimeGrant>,
}

/// The grants in `path`; none when there is no file.
pub fn load(path: &Path) -> Result<Vec<RuntimeGrant>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut text = zeroize::Zeroizing::new(Vec::new());
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_FILE), &mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let parsed: GrantsFile = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a grants file: {e}", path.display()))?;
    if parsed.version != VERSION {
        return Err(format!(
            "{}: grants file version {} (this daemon reads {VERSION})",
            path.display(),
            parsed.version
        ));
    }
    Ok(parsed.grants)
}

/// Replace `path` with `grants`, atomically (see the module's doc).
pub fn save(path: &Path, grants: &[RuntimeGrant]) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no directory", path.display()))?;
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", dir.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail("cannot make", e))?;
    // A directory made before (by hand, or an older daemon) is closed to others too.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| fail("cannot close", e))?;
    let text = zeroize::Zeroizing::new(
        serde_json::to_vec_pretty(&GrantsFile {
            version: VERSION,
            grants: grants.to_vec(),
        })
        .map_err(|e| format!("cannot write the grants: {e}"))?,
    );
    let staging = staging_path(path);
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&staging);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staging)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&staging, path)?;
        // The rename itself reaches the disk with the directory.
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&staging);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Where a new version of `path` is written before it is renamed over it.
fn staging_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.new", std::process::id()));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ByteSize;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmcuda-grants-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn grant(name: &str, quota: u64) -> RuntimeGrant {
        RuntimeGrant {
            name: name.into(),
            cid: Some(7),
            uid: None,
            token: Some(Secret::new("0123456789abcdef0123".into())),
            tcp: true,
            limits: Limits {
                memory_quota: Some(ByteSize(quota)),
                ..Limits::default()
            },
            persist: true,
            changed_by: 0,
            changed_ms: 1,
        }
    }

    #[test]
    fn grants_come_back_as_written_and_the_file_is_the_daemons_alone() {
        let dir = scratch("roundtrip");
        let path = dir.join("admin/grants.json");
        assert!(load(&path).unwrap().is_empty(), "no file: no grants");
        save(&path, &[grant("vm1", 1 << 20), grant("vm2", 2 << 20)]).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].name, "vm2");
        assert_eq!(back[1].limits.memory_quota, Some(ByteSize(2 << 20)));
        assert_eq!(
            back[0].token.as_ref().unwrap().as_bytes(),
            b"0123456789abcdef0123"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(dir.join("admin")).unwrap().mode() & 0o777,
            0o700
        );
        // Nothing is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.join("admin"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("grants.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reader racing a writer sees one whole version or the other, never a part:
    /// what an in-place rewrite (truncate, then write) would show it.
    #[test]
    fn a_reader_never_sees_a_change_half_made() {
        let dir = scratch("atomic");
        let path = dir.join("admin/grants.json");
        // Versions of very different lengths: a torn read could not parse.
        let small = vec![grant("a", 1)];
        let large: Vec<_> = (0..400).map(|i| grant(&format!("vm{i}"), i)).collect();
        save(&path, &small).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let grants = load(&path).expect("a whole file every time");
                    assert!(
                        grants.len() == 1 || grants.len() == 400,
                        "{} grants",
                        grants.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..200 {
            save(&path, if i % 2 == 0 { &large } else { &small }).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().expect("the reader saw only whole files") > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_grants() {
        let dir = scratch("failed");
        let path = dir.join("admin/grants.json");
        save(&path, &[grant("vm1", 1)]).unwrap();
        // The file's name taken by a directory: the rename fails.
        let blocked = dir.join("blocked/grants.json");
        std::fs::create_dir_all(&blocked).unwrap();
        assert!(save(&blocked, &[grant("vm2", 2)]).is_err());
        assert!(blocked.is_dir(), "the old entry is untouched");
        assert_eq!(std::fs::read_dir(dir.join("blocked")).unwrap().count(), 1);
        assert_eq!(load(&path).unwrap()[0].name, "vm1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_of_another_version_or_shape_is_refused() {
        let dir = scratch("shape");
        let path = dir.join("grants.json");
        std::fs::write(&path, r#"{"version": 9, "grants": []}"#).unwrap();
        assert!(load(&path).unwrap_err().contains("version 9"));
        std::fs::write(
            &path,
            r#"{"version": 1, "grants": [{"name": "x", "bogus": 1}]}"#,
        )
        .unwrap();
        assert!(load(&path).unwrap_err().contains("not a grants file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
