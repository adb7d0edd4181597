//! A VM's module cache: the module and library images its processes loaded, by
//! SHA-256, so that a later process of the same VM names an image by its hash and the
//! bytes (cuBLAS and cuDNN load hundreds of MiB of them) do not cross again.
//!
//! **Where it lives, and why there.** Each guest connection has its own worker
//! process, started by the daemon or by a VM's vhost-user device, so the cache must
//! outlive workers and be reachable from every worker of one VM whoever started it.
//! It is therefore a directory per VM on the host's disk, `<module_cache_dir>/<vm>/`
//! (by default `<state_dir>/modules/<vm>/`), kept like the VM's quota ledger
//! ([`crate::ledger`]): no daemon has to take part (the vhost-user device has none),
//! a jailed worker reaches it as its VM's own user, and in the worker's mount
//! namespace only its own VM's directory is bound in (see [`crate::jail`]). A cache in
//! the daemon's memory would miss the vhost-user device's workers; shared memory would
//! need an owner to outlive the workers, which is the daemon again.
//!
//! **Scoped by VM.** The directory is the VM's by its admitted name (the identity its
//! quota and ledger go by), so a guest can neither read another VM's images nor learn
//! whether another VM loaded one: a hit is only ever an image its own VM sent. Programs
//! on the host itself (all `local`) have one per Unix user ([`Scope`]).
//!
//! **Bounded.** `[[vm]] module_cache` (default [`DEFAULT_MODULE_CACHE`]) bounds the
//! bytes of a VM's images, [`MAX_ENTRIES`] their count; the least recently used go
//! first. An image is kept in one of [`MAX_ENTRIES`] slot files (`<n>.img`), reused in
//! place, and an evicted slot is truncated: the worker needs neither `unlink` nor
//! `rename`, which its system call filter does not allow.
//!
//! **Checked.** What goes in was hashed by the worker that received it; what comes out
//! is hashed again before it is used (a slot being rewritten, a crash mid-write or a
//! tampered file all read as a miss), so a cached image is exactly the bytes the
//! guest would have sent. The index (`index`: one line per image, least recently
//! used first) changes only under an exclusive `flock`; images are read outside it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;
use sha2::{Digest, Sha256};
use tracing::warn;
use vmcuda_wire::module::ImageHash;

/// A VM's cache size unless its configuration says otherwise (`[[vm]] module_cache`).
pub const DEFAULT_MODULE_CACHE: u64 = 1 << 30;
/// Images a VM's cache holds at most: its slot files.
pub const MAX_ENTRIES: usize = 1024;

/// One cached image in the index.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    slot: usize,
    hash: ImageHash,
    len: u64,
    facts: Option<KeptFacts>,
}

/// What a worker measured of an image for GPUs of one architecture (the module data
/// its cubin sets aside, and whether it prints), kept beside it: a later process of
/// the VM loads the image without decompressing its cubins to measure them again
/// (cuBLAS's twelve libraries cost its first use about as much as the GPU's own
/// loading). Only this VM's workers write its index, so facts are as trusted as the
/// images' own names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptFacts {
    /// `major * 10 + minor` of the GPUs they hold for.
    pub arch: u32,
    pub data_len: u64,
    pub prints: bool,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Hit(Vec<u8>),
    Miss,
    /// The cache has it, but the caller's `admit` refused its length: not read.
    Refused(u64),
}

/// A VM's module cache, as one worker holds it.
pub struct ModuleCache {
    dir: PathBuf,
    /// The directory, opened before the jail: its files are opened relative to it,
    /// since a jailed worker may not be able to walk the path to it (a state
    /// directory only the daemon's user may enter), as with its ledger.
    dirfd: std::os::fd::OwnedFd,
    index: File,
    /// Bytes of images at most.
    limit: u64,
    max_entries: usize,
}

fn hex(hash: &ImageHash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<ImageHash> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, b) in hash.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(hash)
}

/// Whose cache a guest uses: its VM's, and for programs on the host (all admitted as
/// `local`, with one quota) the cache of their Unix user, so that no user of the host
/// learns what another's programs loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub vm: String,
    pub local_uid: Option<u32>,
}

/// The directory of `scope`'s cache in `caches` (`module_cache_dir`, by default
/// `<state_dir>/modules`): the VM's name encoded as its ledger's is (letters, digits,
/// `-`, `_` and `%XX`), so no VM's name reaches another's directory, and a local user's
/// `.uid-N` after it, which no encoded name ends in (a `.` is always `%2E`).
pub fn dir_for(caches: &Path, scope: &Scope) -> PathBuf {
    let name = crate::ledger::file_name(&scope.vm);
    let name = name.strip_suffix(".ledger").unwrap_or(&name);
    match scope.local_uid {
        Some(uid) => caches.join(format!("{name}.uid-{uid}")),
        None => caches.join(name),
    }
}

impl Scope {
    /// A VM's (or every local program's) scope.
    pub fn vm(vm: &str) -> Scope {
        Scope {
            vm: vm.into(),
            local_uid: None,
        }
    }
}

impl ModuleCache {
    /// Open (making it where it is not yet) `scope`'s cache in `caches`, holding
    /// `limit` bytes of images at most. Done before the worker is jailed: afterwards it
    /// could not make the directories.
    pub fn open(caches: &Path, scope: &Scope, limit: u64) -> std::io::Result<ModuleCache> {
        Self::open_with(caches, scope, limit, MAX_ENTRIES)
    }

    fn open_with(
        caches: &Path,
        scope: &Scope,
        limit: u64,
        max_entries: usize,
    ) -> std::io::Result<ModuleCache> {
        let dir = dir_for(caches, scope);
        // Others may pass through `caches` to their own directory, not list it.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(caches)?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o770)
            .create(&dir)?;
        let dirfd: std::os::fd::OwnedFd = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&dir)?
            .into();
        let index = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o660)
            .open(dir.join("index"))?;
        Ok(ModuleCache {
            dir,
            dirfd,
            index,
            limit,
            max_entries,
        })
    }

    /// The cache's directory (the jail hands it to the VM's group and binds it in).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of images at most.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Slot `slot`'s file, opened with `flags` (and, if made, mode 0660).
    fn open_slot(&self, slot: usize, flags: OFlag) -> std::io::Result<File> {
        let fd = nix::fcntl::openat(
            &self.dirfd,
            format!("{slot}.img").as_str(),
            flags | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o660),
        )?;
        Ok(File::from(fd))
    }

    /// Read the index under its lock, let `f` change it, write it back.
    fn update<T>(&self, f: impl FnOnce(&mut Vec<Entry>) -> T) -> std::io::Result<T> {
        let file = self.index.try_clone()?;
        let mut file: Flock<File> = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))?;
        file.seek(SeekFrom::Start(0))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let mut entries: Vec<Entry> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let slot = fields.next()?.parse().ok()?;
                let hash = unhex(fields.next()?)?;
                let len = fields.next()?.parse().ok()?;
                // Lines of older daemons have no facts.
                let facts = (|| {
                    Some(KeptFacts {
                        arch: fields.next()?.parse().ok()?,
                        data_len: fields.next()?.parse().ok()?,
                        prints: fields.next()? == "1",
                    })
                })();
                Some(Entry {
                    slot,
                    hash,
                    len,
                    facts,
                })
            })
            // What no put writes (a hand-edited or tampered index) is dropped.
            .filter(|e| e.slot < self.max_entries && e.len <= self.limit)
            .collect();
        let result = f(&mut entries);
        let new_text: String = entries
            .iter()
            .map(|e| match e.facts {
                Some(f) => format!(
                    "{} {} {} {} {} {}\n",
                    e.slot,
                    hex(&e.hash),
                    e.len,
                    f.arch,
                    f.data_len,
                    u8::from(f.prints)
                ),
                None => format!("{} {} {}\n", e.slot, hex(&e.hash), e.len),
            })
            .collect();
        if new_text != text {
            file.seek(SeekFrom::Start(0))?;
            file.set_len(0)?;
            file.write_all(new_text.as_bytes())?;
        }
        Ok(result)
    }

    /// The image whose SHA-256 is `hash`, if this VM's cache has it intact and `admit`
    /// takes its length (the reader's memory for it); it becomes the most recently
    /// used.
    pub fn get(
        &self,
        hash: &ImageHash,
        admit: impl FnOnce(u64) -> bool,
    ) -> std::io::Result<Lookup> {
        let found = self.update(|entries| {
            let at = entries.iter().position(|e| e.hash == *hash)?;
            let e = entries.remove(at);
            entries.push(e.clone());
            Some(e)
        })?;
        let Some(entry) = found else {
            return Ok(Lookup::Miss);
        };
        if !admit(entry.len) {
            return Ok(Lookup::Refused(entry.len));
        }
        let image = self.read_slot(&entry);
        if let Some(image) = image.filter(|i| Sha256::digest(i).as_slice() == hash) {
            return Ok(Lookup::Hit(image));
        }
        // Not the bytes it was stored as: being rewritten for another image, cut short
        // by a crash, or changed. Forgotten, unless the slot was given to another
        // image meanwhile.
        self.update(|entries| {
            if let Some(at) = entries.iter().position(|e| *e == entry) {
                entries.remove(at);
                self.truncate(entry.slot);
            }
        })?;
        Ok(Lookup::Miss)
    }

    fn read_slot(&self, entry: &Entry) -> Option<Vec<u8>> {
        let mut file = self.open_slot(entry.slot, OFlag::O_RDONLY).ok()?;
        // A file of another length is not the image: not read (nor its length trusted).
        if file.metadata().ok()?.len() != entry.len {
            return None;
        }
        let len = usize::try_from(entry.len).ok()?;
        let mut image = vec![0u8; len];
        file.read_exact(&mut image).ok()?;
        Some(image)
    }

    fn truncate(&self, slot: usize) {
        if let Ok(f) = self.open_slot(slot, OFlag::O_WRONLY) {
            let _ = f.set_len(0);
        }
    }

    /// What was measured of the image `hash` for GPUs of `arch`, if it is kept.
    pub fn facts(&self, hash: &ImageHash, arch: u32) -> std::io::Result<Option<KeptFacts>> {
        self.update(|entries| {
            entries
                .iter()
                .find(|e| e.hash == *hash)
                .and_then(|e| e.facts)
                .filter(|f| f.arch == arch)
        })
    }

    /// Keep `image`, whose SHA-256 the caller checked is `hash`, and what was measured
    /// of it (`facts`), evicting the least recently used images as the bounds require.
    /// `Ok(false)` when it is not kept: larger than the whole cache or than the files
    /// this process may write.
    pub fn put(
        &self,
        hash: &ImageHash,
        image: &[u8],
        facts: Option<KeptFacts>,
    ) -> std::io::Result<bool> {
        let len = image.len() as u64;
        if len == 0 || len > self.limit || len > max_file_size() {
            return Ok(false);
        }
        // The image is written under the lock, so no two writers share a slot; a
        // reader meanwhile finds the slot's bytes wrong and takes it for a miss.
        self.update(|entries| -> std::io::Result<bool> {
            if let Some(at) = entries.iter().position(|e| e.hash == *hash) {
                let mut e = entries.remove(at);
                e.facts = facts.or(e.facts);
                entries.push(e);
                return Ok(true);
            }
            let mut used: u64 = entries.iter().map(|e| e.len).sum();
            while !entries.is_empty()
                && (used + len > self.limit || entries.len() >= self.max_entries)
            {
                let old = entries.remove(0);
                used -= old.len;
                self.truncate(old.slot);
            }
            let slot = (0..self.max_entries)
                .find(|s| entries.iter().all(|e| e.slot != *s))
                .expect("an entry was evicted, or there were fewer than max_entries");
            let written = self
                .open_slot(slot, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC)
                .and_then(|mut f| f.write_all(image));
            if let Err(e) = written {
                self.truncate(slot);
                return Err(e);
            }
            entries.push(Entry {
                slot,
                hash: *hash,
                len,
                facts,
            });
            Ok(true)
        })?
    }

    /// Bytes and count of the images kept now.
    pub fn usage(&self) -> std::io::Result<(u64, usize)> {
        self.update(|entries| (entries.iter().map(|e| e.len).sum(), entries.len()))
    }
}

/// The largest file this process may write (`RLIMIT_FSIZE`, which the jail lowers):
/// writing past it would kill the worker with `SIGXFSZ`.
fn max_file_size() -> u64 {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE) {
        Ok((soft, _)) => soft,
        Err(e) => {
            warn!("cannot read this worker's file size limit ({e}); images are not cached");
            0
        }
    }
}

#[cfg(test)]
mod tests;
