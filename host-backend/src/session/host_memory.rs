//! The host memory a worker keeps for its guest, counted against the VM's
//! `host_memory` (docs/security.md, "Host memory").
//!
//! What the guest makes the worker keep on the host is charged here before it is made
//! and refunded when it goes: graphs (each node, with the parameters a captured launch
//! keeps in it, per graph and again per executable graph, which holds copies of them),
//! module images, the frame buffers, and the handle tables (a fixed estimate per
//! entry). The CUDA driver keeps the same kind of memory for the same objects; the
//! estimates below stand for its share (`tests/gpu/host_memory_graphs.cu` measures
//! it). With a ledger the limit is the VM's, all its connections together: each
//! connection takes the VM's figure in granules of [`LEDGER_GRANULE`], so a node does
//! not cost a write of the ledger.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tracing::{info, warn};
use vmcuda_wire::op::{GraphExecHandle, GraphHandle};
use vmcuda_wire::CudaStatus;

use crate::executor::graph::{ExecGraph, ExecNode};
use crate::executor::ExecStream;
use crate::ledger::LedgerAccount;

use super::Session;

/// What one graph node costs the host besides the parameters it keeps: the node, its
/// edges and its handles, in the driver or the host-memory executor and here. On the
/// high side of what `tests/gpu/host_memory_graphs.cu` measured on the H200 (driver
/// 580): a captured launch with 5 KB of parameters took the driver about 10.3 KB in
/// its graph and 14.8 KB more in the executable graph, so about 5 KB and 10 KB besides
/// the parameters; the session keeps its own records on top.
pub(super) const GRAPH_NODE_BYTES: u64 = 12 << 10;

/// How many copies of a node's parameters the host keeps: the driver's and the
/// session's (measured as above).
const PARAMETER_COPIES: u64 = 2;

/// What a node that keeps `kept` bytes of parameters and attributes is charged.
pub(super) fn node_bytes(kept: u64) -> u64 {
    GRAPH_NODE_BYTES.saturating_add(kept.saturating_mul(PARAMETER_COPIES))
}

/// What one entry of a handle table costs (streams, events, modules, functions,
/// graphs, executable graphs, nodes, pools, exports): the maps' keys, values and
/// spare room, rounded up.
pub(super) const HANDLE_ENTRY_BYTES: u64 = 256;

/// Host memory a connection takes from its VM's ledger at a time, and keeps spare.
const LEDGER_GRANULE: u64 = 1 << 20;

/// How often a guest's refusals are logged, at most; the rest are counted in the
/// next line.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// One connection's host-memory account.
pub(super) struct HostMemory {
    /// The VM's `host_memory`.
    limit: u64,
    /// What this connection keeps for its guest now.
    used: u64,
    /// What it has taken from the VM's ledger (`used`, rounded up to granules).
    reserved: u64,
    /// The VM's ledger; None: the limit holds for this connection alone.
    pub(super) account: Option<LedgerAccount>,
    /// The part of `used` that is handle-table entries.
    handles: u64,
    guest: String,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl HostMemory {
    pub(super) fn new(limit: u64, guest: &str) -> HostMemory {
        HostMemory {
            limit,
            used: 0,
            reserved: 0,
            account: None,
            handles: 0,
            guest: guest.to_owned(),
            last_logged: None,
            unlogged: 0,
        }
    }

    /// What this connection keeps for its guest now.
    pub(super) fn used(&self) -> u64 {
        self.used
    }

    /// The VM's `host_memory`.
    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    /// Refuse `bytes` more of `what` when they would take the guest over its limit.
    pub(super) fn fits(&mut self, bytes: u64, what: &str) -> Result<(), CudaStatus> {
        match self.used.checked_add(bytes) {
            Some(want) if want <= self.limit => Ok(()),
            _ => Err(self.refused(bytes, what)),
        }
    }

    /// Count `bytes` more of `what`, or refuse them (cudaErrorMemoryAllocation, as an
    /// allocation the host could not make).
    pub(super) fn charge(&mut self, bytes: u64, what: &str) -> Result<(), CudaStatus> {
        self.fits(bytes, what)?;
        let want = self.used + bytes;
        if want > self.reserved && !self.reserve(want) {
            return Err(self.refused(bytes, what));
        }
        self.used = want;
        Ok(())
    }

    /// Take what `want` needs from the VM's ledger: whole granules where they fit,
    /// else just what is needed.
    fn reserve(&mut self, want: u64) -> bool {
        let Some(account) = &self.account else {
            self.reserved = want;
            return true;
        };
        let rounded = want
            .div_ceil(LEDGER_GRANULE)
            .saturating_mul(LEDGER_GRANULE)
            .min(self.limit)
            .max(want);
        for target in [rounded, want] {
            match account.charge(target - self.reserved, self.limit) {
                Ok(true) => {
                    self.reserved = target;
                    return true;
                }
                Ok(false) => {}
                Err(e) => {
                    // Failing open would let each connection keep a whole limit.
                    warn!(guest = %self.guest, "{e}; host memory refused");
                    return false;
                }
            }
        }
        false
    }

    /// Give back `bytes`; whole granules beyond one spare go back to the VM.
    pub(super) fn refund(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
        let Some(account) = &self.account else {
            self.reserved = self.used;
            return;
        };
        let keep = self.used.div_ceil(LEDGER_GRANULE) * LEDGER_GRANULE;
        if self.reserved > keep + LEDGER_GRANULE {
            if let Err(e) = account.refund(self.reserved - keep) {
                warn!(guest = %self.guest, "{e}");
            }
            self.reserved = keep;
        }
    }

    /// Count the handle tables as `bytes` from now on. They are made already: counted
    /// whatever the limit says (new entries are refused beforehand, see
    /// [`super::accounting::Accounts::check_count`]).
    pub(super) fn set_handles(&mut self, bytes: u64) {
        let had = self.handles;
        self.handles = bytes;
        if bytes <= had {
            self.refund(had - bytes);
            return;
        }
        let want = self.used.saturating_add(bytes - had);
        if want > self.reserved && !(want <= self.limit && self.reserve(want)) {
            // Over the limit already: counted all the same, in the ledger too.
            if let Some(account) = &self.account {
                if let Err(e) = account.charge(want - self.reserved, u64::MAX) {
                    warn!(guest = %self.guest, "{e}");
                }
            }
            self.reserved = want;
        }
        self.used = want;
    }

    /// Log a refusal, at most once a second per guest (the rest are counted), and
    /// answer it.
    fn refused(&mut self, bytes: u64, what: &str) -> CudaStatus {
        let now = Instant::now();
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY)
        {
            info!(guest = %self.guest, what, bytes, used = self.used, limit = self.limit,
                not_logged = self.unlogged, "refused: over the VM's host_memory");
            self.last_logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        CudaStatus::ErrorMemoryAllocation
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if let Some(account) = &self.account {
            if let Err(e) = account.refund(self.reserved) {
                warn!(guest = %self.guest, "{e}");
            }
        }
    }
}

/// What the guest's graphs and executable graphs are charged for, by the executor's
/// graph and the guest's executable graph.
#[derive(Default)]
pub(super) struct GraphHostMemory {
    graphs: HashMap<ExecGraph, u64>,
    execs: HashMap<GraphExecHandle, u64>,
    /// The part of a graph's charge that each of its nodes brought, where the session
    /// knows the node (added by hand, or the one node a captured op made): given back
    /// when that node is destroyed. What no node is known for stays with the graph.
    nodes: HashMap<ExecGraph, HashMap<ExecNode, u64>>,
    /// The same for an executable graph's copies of its graph's nodes (as they were
    /// when it was made or updated), for parameters copied into them later.
    exec_nodes: HashMap<GraphExecHandle, HashMap<ExecNode, u64>>,
}

/// Where a node's parameters are kept: in a graph, or in an executable graph's copy.
#[derive(Clone, Copy, Debug)]
pub(super) enum NodeCopy {
    Graph(ExecGraph),
    Exec(GraphExecHandle),
}

/// What new parameters for a node were charged before they were copied
/// ([`Session::params_charge`], [`Session::params_copied`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct ParamsCharge {
    at: NodeCopy,
    node: ExecNode,
    /// What the node keeps with its new parameters, and kept before, where known.
    new: u64,
    old: Option<u64>,
    /// Charged beforehand: what `new` is over `old` (all of it where `old` is not
    /// known).
    charged: u64,
}

/// What updating an executable graph with a graph was charged
/// ([`Session::exec_update_charge`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct UpdateCharge {
    exec: GraphExecHandle,
    /// What the executable graph keeps with the new graph's nodes, and kept before.
    want: u64,
    had: u64,
}

/// A node's charge to its graph, made before the node: refunded if the node is not
/// made ([`Session::node_made`]), and kept by the node once it is known
/// ([`Session::node_kept`], or the capture's frontier for a captured op).
#[derive(Clone, Copy, Debug)]
pub(super) struct NodeCharge {
    graph: ExecGraph,
    bytes: u64,
    /// The stream the op is captured on: its capture's frontier is the node made.
    captured_on: Option<ExecStream>,
}

impl Session {
    /// Charge `bytes` to the graph `s` is capturing into, when it is capturing: a node
    /// that op makes there keeps them. Answers the charge, for [`Session::node_made`].
    pub(super) fn captured_node(
        &mut self,
        s: ExecStream,
        bytes: u64,
    ) -> Result<Option<NodeCharge>, CudaStatus> {
        // Only a stream some capture began on, or one that joined it, can capture.
        if self.graph_tables.capture_origins.is_empty() || !self.exec.stream_capturing(s)? {
            return Ok(None);
        }
        let (graph, _) = self.exec.capture_graph(s)?;
        let charge = self.graph_node_charge(graph, bytes)?;
        Ok(Some(NodeCharge {
            captured_on: Some(s),
            ..charge
        }))
    }

    /// Charge `bytes` to `graph` for a node about to be added to it.
    pub(super) fn graph_node_charge(
        &mut self,
        graph: ExecGraph,
        bytes: u64,
    ) -> Result<NodeCharge, CudaStatus> {
        self.accounts.host.charge(bytes, "graph node")?;
        self.graph_host_charged(graph, bytes);
        Ok(NodeCharge {
            graph,
            bytes,
            captured_on: None,
        })
    }

    /// `graph` keeps `bytes` already charged (a clone's copies of its original's
    /// nodes).
    pub(super) fn graph_host_charged(&mut self, graph: ExecGraph, bytes: u64) {
        *self.graph_host.graphs.entry(graph).or_default() += bytes;
    }

    /// Give back up to `bytes` of what `graph` was charged.
    fn graph_host_refund(&mut self, graph: ExecGraph, bytes: u64) {
        if let Some(charged) = self.graph_host.graphs.get_mut(&graph) {
            let back = bytes.min(*charged);
            *charged -= back;
            self.accounts.host.refund(back);
        }
    }

    /// The node `charge` was made for was made if `made` is Ok (a captured op's node is
    /// then the one node of its capture's frontier, and keeps the charge); refunded
    /// otherwise.
    pub(super) fn node_made<T>(
        &mut self,
        charge: Option<NodeCharge>,
        made: Result<T, CudaStatus>,
    ) -> Result<T, CudaStatus> {
        let Some(charge) = charge else {
            return made;
        };
        match (&made, charge.captured_on) {
            (Err(_), _) => self.graph_host_refund(charge.graph, charge.bytes),
            (Ok(_), Some(s)) => {
                // Where the capture's frontier is not one node of the charged graph, the
                // charge stays with the graph, never with another node.
                if let Ok((graph, (frontier, _))) = self.exec.capture_graph(s) {
                    if let ([node], true) = (&frontier[..], graph == charge.graph) {
                        self.node_kept(charge, *node);
                    }
                }
            }
            (Ok(_), None) => {}
        }
        made
    }

    /// `node` was made for `charge`: destroying it gives the charge back. Several
    /// charges for one node add up (an op that made no node of its own leaves the
    /// frontier as it was), so what nodes give back never exceeds what their graph was
    /// charged.
    pub(super) fn node_kept(&mut self, charge: NodeCharge, node: ExecNode) {
        *self
            .graph_host
            .nodes
            .entry(charge.graph)
            .or_default()
            .entry(node)
            .or_default() += charge.bytes;
    }

    /// `node` of `graph` was destroyed: what it brought to its graph goes back.
    pub(super) fn graph_node_destroyed(&mut self, graph: ExecGraph, node: ExecNode) {
        let kept = self
            .graph_host
            .nodes
            .get_mut(&graph)
            .and_then(|nodes| nodes.remove(&node));
        if let Some(bytes) = kept {
            self.graph_host_refund(graph, bytes);
        }
    }

    /// `clone` is a copy of `graph`: each node of it keeps what its original keeps.
    pub(super) fn graph_host_cloned(&mut self, graph: ExecGraph, clone: ExecGraph) {
        let Some(nodes) = self.graph_host.nodes.get(&graph).cloned() else {
            return;
        };
        let mut copies = HashMap::with_capacity(nodes.len());
        for (node, bytes) in nodes {
            if let Ok(copy) = self.exec.find_in_clone(graph, node, clone) {
                copies.insert(copy, bytes);
            }
        }
        self.graph_host.nodes.insert(clone, copies);
    }

    /// The executor named the graph a capture built anew when the capture ended.
    pub(super) fn graph_host_renamed(&mut self, from: ExecGraph, to: ExecGraph) {
        if let Some(bytes) = self.graph_host.graphs.remove(&from) {
            *self.graph_host.graphs.entry(to).or_default() += bytes;
        }
        if let Some(nodes) = self.graph_host.nodes.remove(&from) {
            let kept = self.graph_host.nodes.entry(to).or_default();
            for (node, bytes) in nodes {
                *kept.entry(node).or_default() += bytes;
            }
        }
    }

    /// `graph` is gone: what its nodes kept goes back.
    pub(super) fn graph_host_released(&mut self, graph: ExecGraph) {
        self.graph_host.nodes.remove(&graph);
        if let Some(bytes) = self.graph_host.graphs.remove(&graph) {
            self.accounts.host.refund(bytes);
        }
    }

    /// What the guest's graph `graph` keeps, with the graphs its nodes own (child
    /// graphs, conditional bodies): what a copy of it (a clone, an executable graph, a
    /// child-graph node) keeps again.
    pub(super) fn graph_host_bytes(&self, graph: GraphHandle) -> u64 {
        let Some(entry) = self.graph_tables.graphs.get(&graph) else {
            return 0;
        };
        let own = self
            .graph_host
            .graphs
            .get(&entry.exec)
            .copied()
            .unwrap_or(0);
        let owned: u64 = self
            .graph_tables
            .graphs
            .iter()
            .filter(|(_, e)| e.owner == Some(graph))
            .map(|(&h, _)| self.graph_host_bytes(h))
            .sum();
        own.saturating_add(owned)
    }

    /// Charge an executable graph about to be made of `graph`: the executor keeps a
    /// copy of every node.
    pub(super) fn exec_host_charge(&mut self, graph: GraphHandle) -> Result<u64, CudaStatus> {
        let bytes = self.graph_host_bytes(graph) + GRAPH_NODE_BYTES;
        self.accounts.host.charge(bytes, "executable graph")?;
        Ok(bytes)
    }

    /// The executable graph charged `bytes` was made (`Some`) or not.
    pub(super) fn exec_host_made(&mut self, exec: Option<GraphExecHandle>, bytes: u64) {
        match exec {
            Some(exec) => {
                self.graph_host.execs.insert(exec, bytes);
            }
            None => self.accounts.host.refund(bytes),
        }
    }

    /// The executable graph `exec` is gone.
    pub(super) fn exec_host_released(&mut self, exec: GraphExecHandle) {
        self.graph_host.exec_nodes.remove(&exec);
        if let Some(bytes) = self.graph_host.execs.remove(&exec) {
            self.accounts.host.refund(bytes);
        }
    }

    /// `exec` keeps copies of the nodes of `graph` now (made of it, or updated with
    /// it): each keeps what its original keeps.
    pub(super) fn exec_host_nodes(&mut self, exec: GraphExecHandle, graph: ExecGraph) {
        let nodes = self
            .graph_host
            .nodes
            .get(&graph)
            .cloned()
            .unwrap_or_default();
        self.graph_host.exec_nodes.insert(exec, nodes);
    }

    /// What `at` was charged in all, its nodes included.
    fn copy_total(&mut self, at: NodeCopy) -> &mut u64 {
        match at {
            NodeCopy::Graph(g) => self.graph_host.graphs.entry(g).or_default(),
            NodeCopy::Exec(e) => self.graph_host.execs.entry(e).or_default(),
        }
    }

    /// Give back up to `bytes` of what `at` was charged.
    fn copy_refund(&mut self, at: NodeCopy, bytes: u64) {
        let total = self.copy_total(at);
        let back = bytes.min(*total);
        *total -= back;
        self.accounts.host.refund(back);
    }

    /// Charge what `node` of `at` will keep more once it has the parameters of `src`
    /// (a launch's parameter bytes are kept with its node, so a node given a larger
    /// launch's keeps more). Where what `src` keeps is not known, nothing is charged,
    /// as for the node `src` itself.
    pub(super) fn params_charge(
        &mut self,
        at: NodeCopy,
        node: ExecNode,
        src: (ExecGraph, ExecNode),
    ) -> Result<Option<ParamsCharge>, CudaStatus> {
        let Some(&new) = self
            .graph_host
            .nodes
            .get(&src.0)
            .and_then(|n| n.get(&src.1))
        else {
            return Ok(None);
        };
        self.params_charge_bytes(at, node, new).map(Some)
    }

    /// Charge what `node` (in its graph, or in an executable graph's copy) keeps more
    /// with new parameters that keep `new` bytes.
    pub(super) fn params_charge_bytes(
        &mut self,
        at: NodeCopy,
        node: ExecNode,
        new: u64,
    ) -> Result<ParamsCharge, CudaStatus> {
        let records = match at {
            NodeCopy::Graph(g) => self.graph_host.nodes.get(&g),
            NodeCopy::Exec(e) => self.graph_host.exec_nodes.get(&e),
        };
        let old = records.and_then(|r| r.get(&node)).copied();
        let charged = new.saturating_sub(old.unwrap_or(0));
        if charged > 0 {
            self.accounts
                .host
                .charge(charged, "graph node parameters")?;
            *self.copy_total(at) += charged;
        }
        Ok(ParamsCharge {
            at,
            node,
            new,
            old,
            charged,
        })
    }

    /// The parameters `charge` was made for were copied, or not: the node keeps what
    /// its new ones keep from now on (what it kept before, where more, goes back).
    pub(super) fn params_copied(&mut self, charge: Option<ParamsCharge>, copied: bool) {
        let Some(c) = charge else {
            return;
        };
        if !copied {
            self.copy_refund(c.at, c.charged);
            return;
        }
        let records = match c.at {
            NodeCopy::Graph(g) => self.graph_host.nodes.entry(g).or_default(),
            NodeCopy::Exec(e) => self.graph_host.exec_nodes.entry(e).or_default(),
        };
        records.insert(c.node, c.new);
        if let Some(old) = c.old.filter(|&old| old > c.new) {
            self.copy_refund(c.at, old - c.new);
        }
    }

    /// Charge what `exec` will keep more once updated with `graph` (the executor then
    /// keeps copies of its nodes, parameters and all, in place of the old ones).
    pub(super) fn exec_update_charge(
        &mut self,
        exec: GraphExecHandle,
        graph: GraphHandle,
    ) -> Result<UpdateCharge, CudaStatus> {
        let want = self.graph_host_bytes(graph) + GRAPH_NODE_BYTES;
        let had = self.graph_host.execs.get(&exec).copied().unwrap_or(0);
        if want > had {
            self.accounts
                .host
                .charge(want - had, "executable graph update")?;
            self.graph_host.execs.insert(exec, want);
        }
        Ok(UpdateCharge { exec, want, had })
    }

    /// The update `charge` was made for was made with the executor's `graph` (`Some`),
    /// or not: the executable graph keeps what the graph's nodes keep, or what it kept.
    pub(super) fn exec_update_done(&mut self, charge: UpdateCharge, graph: Option<ExecGraph>) {
        let at = NodeCopy::Exec(charge.exec);
        match graph {
            Some(graph) => {
                if charge.had > charge.want {
                    self.copy_refund(at, charge.had - charge.want);
                }
                self.exec_host_nodes(charge.exec, graph);
            }
            None if charge.want > charge.had => self.copy_refund(at, charge.want - charge.had),
            None => {}
        }
    }

    /// Every graph and executable graph is gone (the session ends, a device reset).
    pub(super) fn graph_host_release_all(&mut self) {
        let all = std::mem::take(&mut self.graph_host);
        let bytes: u64 = all.graphs.values().chain(all.execs.values()).sum();
        self.accounts.host.refund(bytes);
    }

    /// Count the handle tables' entries as they are now.
    pub(super) fn settle_handle_memory(&mut self) {
        let h = &self.handles;
        let g = &self.graph_tables;
        let entries = h.streams.len()
            + h.events.len()
            + h.modules.len()
            + h.functions.len()
            + g.graphs.len()
            + g.execs.len()
            + g.nodes.len()
            + self.pools.len()
            + self.exports.len();
        self.accounts
            .host
            .set_handles(entries as u64 * HANDLE_ENTRY_BYTES);
    }

    /// What this connection keeps on the host for its guest now (see
    /// [`HostMemory`]).
    pub fn host_memory_bytes(&self) -> u64 {
        self.accounts.host.used()
    }
}

#[cfg(test)]
mod tests;
