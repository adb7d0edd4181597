//! The daemon's side: a thread for each worker's socket, and the table of every VM's
//! exports.
//!
//! An export is entered under the VM its worker was admitted as (the name the worker
//! reported on its admission channel before it was admitted, never after), and found
//! again only by a worker of that same VM: a token of another VM answers exactly as a
//! forged one does, so no VM can learn whether another's token exists. A worker's
//! exports go when it withdraws them or when its socket closes (it ended).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tracing::warn;

use super::proto::{self, Export, Refusal, Reply, Request, Token};
use crate::source_log::RateLimit;

/// Lines about refused IPC requests, all workers together: a guest can cause them at
/// will.
static REFUSAL_LOG: RateLimit = RateLimit::new(20, 1);

/// Lines about handles opened: a guest can open and close in a loop.
static OPEN_LOG: RateLimit = RateLimit::new(20, 1);

macro_rules! refused {
    ($($arg:tt)+) => {
        $crate::rate_limited!(REFUSAL_LOG, "refused CUDA IPC requests", warn, $($arg)+)
    };
}

/// One export.
struct Entry {
    vm: String,
    /// The daemon's number for the exporting worker's connection.
    owner: u64,
    export: Export,
    /// The shared memory behind it (the test double's), handed to each importer.
    fd: Option<OwnedFd>,
}

/// Every VM's exports.
#[derive(Debug)]
pub struct Registry {
    max_exports: u32,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<Token, Entry>,
    per_vm: HashMap<String, u32>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("exports", &self.entries.len())
            .finish()
    }
}

impl Table {
    fn remove(&mut self, token: &Token) -> Option<Entry> {
        let e = self.entries.remove(token)?;
        if let Some(n) = self.per_vm.get_mut(&e.vm) {
            *n -= 1;
            if *n == 0 {
                self.per_vm.remove(&e.vm);
            }
        }
        Some(e)
    }
}

impl Registry {
    /// A registry allowing each VM `max_exports` exports at once.
    pub fn new(max_exports: u32) -> Registry {
        Registry {
            max_exports,
            table: Mutex::new(Table::default()),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many exports `vm` holds now.
    pub fn exports_of(&self, vm: &str) -> u32 {
        self.table().per_vm.get(vm).copied().unwrap_or(0)
    }

    /// Serve one worker's socket until the worker is gone; its exports go with it.
    /// `vm` is set once the worker names its VM, before its guest is admitted.
    pub fn serve_worker(&self, socket: UnixStream, owner: u64, vm: Arc<OnceLock<String>>) {
        loop {
            let (bytes, fd) = match proto::receive(socket.as_fd()) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    warn!(
                        connection = owner,
                        "ipc registry: {e}; the worker's link is closed"
                    );
                    break;
                }
            };
            let (reply, fd) = match Request::decode(&bytes) {
                Ok(request) => self.serve(owner, vm.get().map(String::as_str), request, fd),
                Err(e) => {
                    refused!(connection = owner, "ipc registry: {e}");
                    (Reply::Refused(Refusal::Broken), None)
                }
            };
            let sent = proto::send(
                socket.as_fd(),
                &reply.encode(),
                fd.as_ref().map(|f| f.as_fd()),
            );
            if let Err(e) = sent {
                warn!(
                    connection = owner,
                    "ipc registry: {e}; the worker's link is closed"
                );
                break;
            }
        }
        self.forget_worker(owner);
    }

    /// Drop every export of worker `owner`.
    pub fn forget_worker(&self, owner: u64) {
        let mut table = self.table();
        let gone: Vec<Token> = table
            .entries
            .iter()
            .filter(|(_, e)| e.owner == owner)
            .map(|(t, _)| *t)
            .collect();
        for t in &gone {
            table.remove(t);
        }
    }

    /// Answer one request of worker `owner` of `vm` (None: not admitted yet); the
    /// descriptor is the one that came with it, or the one that goes with the reply.
    pub fn serve(
        &self,
        owner: u64,
        vm: Option<&str>,
        request: Request,
        fd: Option<OwnedFd>,
    ) -> (Reply, Option<OwnedFd>) {
        let Some(vm) = vm else {
            refused!(
                connection = owner,
                "CUDA IPC request refused: the connection is not admitted"
            );
            return (Reply::Refused(Refusal::NotAdmitted), None);
        };
        match request {
            Request::Export(export) => (self.export(owner, vm, export, fd), None),
            Request::Import(token) => self.import(owner, vm, &token),
            Request::Withdraw(token) => {
                let mut table = self.table();
                match table.entries.get(&token) {
                    Some(e) if e.owner == owner => {
                        table.remove(&token);
                        (Reply::Done, None)
                    }
                    _ => {
                        drop(table);
                        refused!(
                            connection = owner,
                            vm,
                            "CUDA IPC withdrawal refused: not this connection's export"
                        );
                        (Reply::Refused(Refusal::Unknown), None)
                    }
                }
            }
        }
    }

    fn export(&self, owner: u64, vm: &str, export: Export, fd: Option<OwnedFd>) -> Reply {
        let mut token = [0u8; 16];
        if let Err(e) = vmcuda_wire::tls::random_bytes(&mut token) {
            warn!(connection = owner, vm, "CUDA IPC export refused: {e}");
            return Reply::Refused(Refusal::Broken);
        }
        let mut table = self.table();
        let held = table.per_vm.get(vm).copied().unwrap_or(0);
        if held >= self.max_exports {
            drop(table);
            refused!(
                connection = owner,
                vm,
                limit = self.max_exports,
                "CUDA IPC export refused: the VM has [ipc] max_exports exports"
            );
            return Reply::Refused(Refusal::TooMany);
        }
        *table.per_vm.entry(vm.to_string()).or_default() += 1;
        table.entries.insert(
            token,
            Entry {
                vm: vm.to_string(),
                owner,
                export,
                fd,
            },
        );
        Reply::Token(token)
    }

    fn import(&self, owner: u64, vm: &str, token: &Token) -> (Reply, Option<OwnedFd>) {
        let table = self.table();
        match table.entries.get(token) {
            Some(e) if e.vm == vm && e.owner == owner => (Reply::Refused(Refusal::OwnExport), None),
            Some(e) if e.vm == vm => {
                let fd = match e.fd.as_ref().map(|f| f.try_clone()) {
                    Some(Ok(fd)) => Some(fd),
                    Some(Err(err)) => {
                        drop(table);
                        warn!(connection = owner, vm, "CUDA IPC import failed: {err}");
                        return (Reply::Refused(Refusal::Broken), None);
                    }
                    None => None,
                };
                crate::rate_limited!(OPEN_LOG, "CUDA IPC opens", info, connection = owner, vm,
                    exporter = e.owner, kind = ?e.export.kind, bytes = e.export.size,
                    "CUDA IPC handle opened");
                (Reply::Exported(e.export.clone()), fd)
            }
            // Another VM's token is told apart only in the host's log.
            Some(e) => {
                let other = e.vm.clone();
                drop(table);
                refused!(connection = owner, vm, exporter_vm = %other,
                    "CUDA IPC import refused: the handle is another VM's");
                (Reply::Refused(Refusal::Unknown), None)
            }
            None => {
                drop(table);
                refused!(
                    connection = owner,
                    vm,
                    "CUDA IPC import refused: no such export (forged, or closed by its exporter)"
                );
                (Reply::Refused(Refusal::Unknown), None)
            }
        }
    }
}
