//! One guest connection's state: the handshake, the guest's handles and the memory
//! it owns, all checked before the executor sees them.
//!
//! The session is built of rooms, one concern each:
//! - [`handles`]: the guest's handle tables (streams and events named by the guest,
//!   modules and functions named here); a guest can only ever name what it made;
//! - [`accounting`]: the memory it holds, its quota and the VM's ledger, and the range
//!   check every copy, memset and launch goes through;
//! - [`crate::shared_memory`]: guest memory mapped into this process;
//! - [`buffers`]: the worker's page-locked frame buffers as the handlers use them;
//! - the checked ranges handed to the executor (`executor/checked.rs`), which only
//!   the session makes.
//!
//! Each API family of the op table (`vmcuda_wire::table`) has its handler trait
//! implemented in a file of its own: [`connection`], [`device`], [`memory`], [`copy`],
//! [`module`], [`stream`], [`graph`],
//! [`pool`], [`vmm`]. Host objects never travel as raw host pointers, and dropping the
//! session releases everything it owns.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use tracing::info;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

mod accounting;
mod array;
mod buffers;
mod connection;
mod copy;
mod device;
mod graph;
mod graph_build;
mod handles;
mod host_memory;
mod ipc;
mod memory;
mod module;
mod peer;
mod pool;
mod stream;
mod vmm;

pub use buffers::{BufferBudget, RECEIVE_BUFFER, RECEIVE_BUFFER_2};

use crate::executor::Executor;
use crate::guest_ram::GuestRam;
use crate::ledger::Ledger;
use crate::policy::Grant;
use crate::shared_memory::SharedMappings;
use crate::stats::WorkerStats;
use accounting::Accounts;
use buffers::{FrameBuffers, REPLY_AREA};
use handles::Handles;

pub struct Session {
    exec: Box<dyn Executor>,
    /// What this guest was admitted with: its quota and limits.
    grant: Grant,
    greeted: bool,
    client: String,
    /// The request being served, named in refusals' log lines.
    op: Option<vmcuda_wire::op::Op>,
    /// The guest program's pid, as the guest knows it (from its hello).
    program_pid: u32,
    handles: Handles,
    accounts: Accounts,
    /// Descriptors the guest passed along with its frames, oldest first.
    pub incoming_fds: VecDeque<OwnedFd>,
    /// Guest memory shared with this process and registered with the GPU, by the
    /// guest's address.
    shared: SharedMappings,
    /// The VM's RAM, for guest-physical registrations (vhost-user device workers of
    /// privileged guest connections only).
    guest_ram: Option<GuestRam>,
    /// Set once the guest attached a command ring (see [`vmcuda_wire::ring`]); its
    /// memory waits in `pending_ring` until the serving loop takes it over, after the
    /// attach's reply has gone on the socket.
    ring_attached: bool,
    pending_ring: Option<vmcuda_wire::ring::RingMemory>,
    buffers: FrameBuffers,
    /// The guest's graphs, executable graphs and graph nodes (see `graph`).
    graph_tables: graph::GraphTables,
    /// What they keep on the host (see `host_memory`).
    graph_host: host_memory::GraphHostMemory,
    array_tables: array::ArrayTables,
    /// The guest's address reservations, physical allocations and mappings (see
    /// `vmm`).
    vmm: vmm::Vmm,
    /// The value each charged context limit had on its device before the guest first
    /// set it: what the context reserves anyway, not charged (see `device`).
    limit_base: std::collections::HashMap<(i32, u32), u64>,
    /// Devices whose default pool the guest allocated from: their reserve is given
    /// back when the session ends.
    pool_devices: std::collections::BTreeSet<i32>,
    /// The memory pools the guest made (see `pool`): destroyed when the session ends.
    pools: pool::MadePools,
    /// What the guest exported of its pools, for itself to import (see `pool`).
    exports: pool::Exports,
    /// The socket to the daemon's broker, for copies to and from other hosts (see
    /// [`crate::peer`]); None where the daemon has no `[peers]`.
    peer: Option<crate::peer::PeerLink>,
    /// The VM's module cache (see [`crate::module_cache`]); None where it is off or
    /// could not be opened: then the hello does not offer it.
    module_cache: Option<crate::module_cache::ModuleCache>,
    /// The images (by SHA-256) whose kernels call `printf`, as measured when first
    /// loaded: the guest is told so on every load of them.
    printing_images: std::collections::HashSet<[u8; 32]>,
    /// CUDA IPC with the VM's other processes (see `ipc`).
    ipc: ipc::IpcState,
    /// Where the guest comes back to this session after a drop (see
    /// [`crate::resume`]); None where it did not ask or the host holds no sessions.
    resume: Option<crate::resume::ResumePoint>,
    /// How long an allocation the GPU has no room for waits for room (see
    /// `memory::mem_alloc`); zero: not at all.
    room_wait: std::time::Duration,
    /// This worker's turns on the GPU (see [`crate::compute`]); None where VMs do not
    /// take turns.
    compute: Option<crate::compute::Turns>,
}

impl Session {
    pub fn new(exec: Box<dyn Executor>, grant: Grant) -> Self {
        Session {
            exec,
            accounts: Accounts::new(grant.memory_quota, grant.host_memory, &grant.name),
            grant,
            greeted: false,
            client: String::new(),
            op: None,
            program_pid: 0,
            handles: Handles::default(),
            incoming_fds: VecDeque::new(),
            shared: SharedMappings::default(),
            guest_ram: None,
            ring_attached: false,
            pending_ring: None,
            buffers: FrameBuffers::default(),
            graph_tables: Default::default(),
            graph_host: Default::default(),
            array_tables: Default::default(),
            vmm: Default::default(),
            limit_base: Default::default(),
            pool_devices: Default::default(),
            pools: Default::default(),
            exports: Default::default(),
            peer: None,
            module_cache: None,
            printing_images: Default::default(),
            ipc: Default::default(),
            resume: None,
            room_wait: std::time::Duration::ZERO,
            compute: None,
        }
    }

    /// Let this worker's requests run in its turns on the GPU.
    pub fn with_compute(mut self, turns: Option<crate::compute::Turns>) -> Self {
        self.compute = turns;
        self
    }

    /// Wait for this worker's turn on the GPU before a request runs.
    pub fn turn_begins(&mut self) {
        if let Some(turns) = &self.compute {
            let exec = &mut self.exec;
            turns.request_begins(&mut || drain(exec.as_mut()));
        }
    }

    /// A request ended: the turn may go on (see [`crate::compute`]).
    pub fn turn_ends(&mut self) {
        if let Some(turns) = &self.compute {
            let exec = &mut self.exec;
            turns.request_ends(&mut || drain(exec.as_mut()));
            self.accounts
                .stats
                .set_compute(turns.used_ns(), turns.throttled_ns(), turns.share());
        }
    }

    /// Let allocations the GPU has no room for wait up to `wait` for room (a host
    /// whose idle policy keeps GPU memory free by suspending idle VMs).
    pub fn with_room_wait(mut self, wait: std::time::Duration) -> Self {
        self.room_wait = wait;
        self
    }

    /// The command ring went with its connection: a returning guest attaches another.
    pub fn ring_detached(&mut self) {
        self.ring_attached = false;
        self.pending_ring = None;
    }

    /// Let this guest's copies to and from other hosts go through the daemon's peer
    /// link.
    pub fn with_peer_link(mut self, link: crate::peer::PeerLink) -> Self {
        self.peer = Some(link);
        self
    }

    /// Load module images named by hash from (and keep new ones in) its VM's `cache`.
    pub fn with_module_cache(mut self, cache: crate::module_cache::ModuleCache) -> Self {
        self.module_cache = Some(cache);
        self
    }

    /// Account this guest's memory in its VM's ledger, with the VM's other connections.
    pub fn with_ledger(mut self, ledger: Ledger) -> Self {
        self.accounts.host.account = Some(ledger.host_memory());
        self.accounts.ledger = Some(ledger);
        self
    }

    /// Let this guest register its pages by guest-physical address (see
    /// [`crate::guest_ram`]).
    pub fn with_guest_ram(mut self, ram: GuestRam) -> Self {
        self.guest_ram = Some(ram);
        self
    }

    /// Whether this connection can reach the VM's RAM (a vhost-user device's worker).
    pub fn has_guest_ram(&self) -> bool {
        self.guest_ram.is_some()
    }

    /// A connection's guest page grant (it came before the hello or the resume): the
    /// first connection's confines the session to the broker's pages; a returning
    /// one's must be that grant again (see [`GuestRam::regrant`]). Refused where the
    /// connection has no guest RAM at all.
    pub fn grant_guest_ram(
        &mut self,
        page_size: u64,
        pages: &[u64],
        key: [u8; 32],
    ) -> Result<(), CudaStatus> {
        match &mut self.guest_ram {
            Some(ram) => ram.regrant(page_size, pages, key),
            None => Err(CudaStatus::ErrorNotSupported),
        }
    }

    /// The command ring the guest just attached, for the serving loop to move the
    /// connection's frames into.
    pub fn take_ring(&mut self) -> Option<vmcuda_wire::ring::RingMemory> {
        self.pending_ring.take()
    }

    /// Send the launches the executor holds (see [`Executor::send_held_launches`]).
    pub fn send_held_launches(&mut self) -> Result<(), CudaStatus> {
        self.exec.send_held_launches()
    }

    pub fn holds_launches(&self) -> bool {
        self.exec.holds_launches()
    }

    /// Publish this guest's figures through `stats` (see [`crate::stats`]).
    pub fn with_stats(mut self, stats: WorkerStats) -> Self {
        self.accounts.stats = stats;
        self.accounts
            .stats
            .set_host_memory_limit(self.accounts.host.limit());
        self.accounts
            .stats
            .set_host_memory_used(self.accounts.host.used());
        self
    }

    /// Count a call in the guest's figures, with the host memory kept for it after
    /// the call.
    /// A request begins (and waits while the operator holds this worker, see
    /// [`crate::stats::WorkerGate`]).
    pub fn request_started(&mut self, op: vmcuda_wire::op::Op) {
        self.op = Some(op);
        self.accounts.stats.request_started();
    }

    pub fn request_done(&mut self) {
        self.accounts.stats.request_done();
    }

    pub fn record_call(&mut self, elapsed_ns: u64, result: Result<(), CudaStatus>) {
        let used = self.accounts.host.used();
        let stats = &mut self.accounts.stats;
        stats.set_host_memory_used(used);
        stats.record_call(elapsed_ns, result);
    }

    pub fn greeted(&self) -> bool {
        self.greeted
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    /// Make the guest thread's device current; every op but the handshake runs under it.
    pub fn enter(&mut self, ctx: &CallContext) -> Result<(), CudaStatus> {
        // What the last call added to the handle tables counts from now on.
        self.settle_handle_memory();
        self.exec.set_device(ctx.device)
    }
}

/// The pass-through ops (the table's lines with an `=> exec` clause): the executor,
/// whose device [`Session::enter`] has made current. Nothing of theirs is the session's
/// to check or count.
impl vmcuda_wire::op::PassThrough for Session {
    fn pass_through(
        &mut self,
        _: &CallContext,
    ) -> Result<&mut dyn vmcuda_wire::op::PassThroughExec, CudaStatus> {
        Ok(&mut *self.exec)
    }
}

/// Wait for the GPU work of `exec` before the turn goes on. A failure here is the
/// guest's to see at its next synchronizing call, as any asynchronous error is.
fn drain(exec: &mut dyn Executor) {
    if let Err(status) = exec.drain() {
        tracing::debug!(%status, "waiting for the GPU's work before handing the turn on");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.unpin_buffer(RECEIVE_BUFFER);
        self.unpin_buffer(REPLY_AREA);
        // Free what the guest left behind; the executor's own Drop releases contexts.
        self.ipc_close_all();
        self.vmm_drop_all();
        self.graphs_drop_all();
        self.arrays_drop_all();
        for (_, e) in self.handles.events.drain() {
            let _ = self.exec.event_destroy(e);
        }
        for (_, s) in self.handles.streams.drain() {
            let _ = self.exec.stream_destroy(s);
        }
        for (_, mapping) in std::mem::take(&mut self.shared.by_guest_addr) {
            let _ = self.exec.host_unregister(mapping.host_addr());
            drop(mapping);
        }
        let leaked = self.accounts.allocations.len();
        for (ptr, a) in std::mem::take(&mut self.accounts.allocations) {
            let _ = self.exec.free(ptr);
            self.accounts.refund(a.charged);
        }
        // What the pools keep of the guest's freed memory goes back now, not only with
        // the context: nothing the guest made outlives its session.
        for device in std::mem::take(&mut self.pool_devices) {
            if self.exec.set_device(device).is_ok() {
                let _ = self.exec.pool_trim_to(None, 0);
            }
        }
        self.pools_drop(None);
        // Module data, limits and pool reserve go with the context (graph memory went
        // with the graphs above).
        for (_, bytes) in std::mem::take(&mut self.accounts.held) {
            self.accounts.refund(bytes);
        }
        if leaked > 0 {
            info!(client = %self.client, leaked, "freed allocations the guest left behind");
        }
    }
}

fn nothing() -> HandlerResult<()> {
    Ok(((), Vec::new()))
}

#[cfg(test)]
mod ipc_tests;
#[cfg(test)]
mod module_cache_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;
