//! The daemon's Unix socket files: one daemon per socket, and none left behind.
//!
//! Before binding, a socket file on which something still accepts connections belongs
//! to a live daemon: `serve` refuses to start rather than take the name over (which
//! would leave that daemon running, unreachable). A file nobody accepts on is stale
//! and replaced. When the daemon stops (SIGTERM, SIGINT, or its listeners ending) it
//! removes the files it bound, and only those: a file some later daemon bound under
//! the same name is another inode, and is left alone.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// Refuse `path` when a live listener is behind it. A missing file, or one whose
/// connection is refused (its daemon died), is free to take.
pub fn check_free(path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another daemon listens on {} (stop it first, or give this one another \
                 --unix path)",
                path.display()
            ),
        )),
        Err(_) => Ok(()),
    }
}

/// A socket file this process bound: its name and which file it was.
#[derive(Clone, Debug)]
pub struct Owned {
    path: PathBuf,
    c_path: CString,
    dev: u64,
    ino: u64,
}

impl Owned {
    /// Record the socket just bound at `path`.
    pub fn record(path: &Path) -> io::Result<Owned> {
        let meta = std::fs::symlink_metadata(path)?;
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Owned {
            path: path.to_path_buf(),
            c_path,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the file if it is still the one bound. Only async-signal-safe calls
    /// (`lstat`, `unlink`) and no allocation: a stop signal's handler runs this.
    fn remove_if_ours(&self) {
        // SAFETY: `c_path` is a NUL-terminated string that outlives the calls; `st` is
        // a plain struct lstat fills in (zeroed first, read only when it succeeded).
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::lstat(self.c_path.as_ptr(), &mut st) == 0
                && st.st_dev == self.dev
                && st.st_ino == self.ino
            {
                libc::unlink(self.c_path.as_ptr());
            }
        }
    }
}

/// Remove every file in `owned` that is still the one bound.
pub fn remove(owned: &[Owned]) {
    for o in owned {
        o.remove_if_ours();
    }
}

/// The files the stop signals' handler removes, each in a slot of its own as it is
/// bound (the handler reads them without a lock; a daemon has a few sockets).
const SLOTS: usize = 64;
static ON_STOP: [OnceLock<Owned>; SLOTS] = [const { OnceLock::new() }; SLOTS];

/// The process that installed the handler (the daemon).
static DAEMON_PID: AtomicU32 = AtomicU32::new(0);

/// The signals after which the daemon removes its socket files.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// From now on, SIGTERM and SIGINT remove the files given to [`remove_on_stop`] and
/// then end the process as the signal would have. Called before the first socket is
/// bound, so that no stop leaves one behind. Workers are unaffected: a caught
/// signal's handler does not survive their exec.
pub fn install_stop_handlers() {
    DAEMON_PID.store(std::process::id(), Ordering::Relaxed);
    for signal in STOP_SIGNALS {
        // SAFETY: installs a handler that only calls async-signal-safe functions (see
        // `on_stop`); the action struct is zeroed and then filled in full. sigaction
        // fails only for a signal that cannot be caught, which neither of these is.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Have the stop signals' handler remove `owned` (see [`install_stop_handlers`]).
/// False when every slot is taken (the file is then removed only on a normal stop).
pub fn remove_on_stop(owned: &Owned) -> bool {
    ON_STOP
        .iter()
        .any(|slot| slot.get().is_none() && slot.set(owned.clone()).is_ok())
}

extern "C" fn on_stop(signal: libc::c_int) {
    // A worker forked but not yet exec'd has this handler too: the files are the
    // daemon's to remove, not its. OnceLock::get is one atomic load; `remove`
    // neither allocates nor locks.
    if std::process::id() == DAEMON_PID.load(Ordering::Relaxed) {
        for owned in ON_STOP.iter().filter_map(OnceLock::get) {
            owned.remove_if_ours();
        }
    }
    // SAFETY: back to the default action, then the signal again: the process ends as
    // it would have without the handler (its exit status says which signal).
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vmcuda-sockfiles-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_live_listener_is_refused_and_a_stale_file_is_free() {
        let dir = scratch("live");
        let path = dir.join("s.sock");
        assert!(check_free(&path).is_ok(), "no file at all");
        let live = UnixListener::bind(&path).unwrap();
        let e = check_free(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("another daemon listens on"), "{e}");
        drop(live);
        // The file stays, nobody accepts: stale.
        assert!(path.exists());
        assert!(check_free(&path).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_file_bound_is_removed() {
        let dir = scratch("owned");
        let path = dir.join("s.sock");
        let first = UnixListener::bind(&path).unwrap();
        let owned = Owned::record(&path).unwrap();
        // Another daemon took the name since (a new file under it): not ours to remove.
        // The old file lives on under another name, so the new one is another inode.
        drop(first);
        std::fs::rename(&path, dir.join("old.sock")).unwrap();
        let _second = UnixListener::bind(&path).unwrap();
        remove(std::slice::from_ref(&owned));
        assert!(path.exists(), "another daemon's socket was removed");
        // Our own file goes.
        std::fs::remove_file(&path).unwrap();
        let _third = UnixListener::bind(&path).unwrap();
        let owned = Owned::record(&path).unwrap();
        remove(&[owned]);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
