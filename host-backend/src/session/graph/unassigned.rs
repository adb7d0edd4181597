//! Memsets a capture took on memory that is not the guest's, not yet.
//!
//! The driver takes a memset on memory it does not know into a capture as a node, and
//! refuses a graph that still holds one when it is instantiated (INVALID_VALUE); a
//! memset node made by hand, or a memset outside a capture, it refuses at once
//! (tests/gpu/results/RESULTS-GRAPH-NODE-ANSWERS-2026-12-07.md). cuDNN's graphs inside
//! XLA's command buffers are captured so, their memset nodes given their memory
//! before the graph is instantiated. The session does as the driver does: such a
//! memset is captured (the executor records it, nothing runs), what it names is kept
//! with its node, and checked against the guest's memory whenever its graph is to
//! become executable: instantiated, made an executable graph's update or an
//! executable child graph's new graph. New parameters for the node (checked at the
//! door) end its span; so does its or its graph's end. A child-graph node made of such
//! a graph keeps the child's spans under its own node, and a clone its original's.
//! The guest library refuses a hand-made memset node on memory it does not know (the
//! session cannot tell the two kinds of capture apart), so a program sees the driver's
//! answer to each.

use std::collections::HashMap;

use tracing::warn;
use vmcuda_wire::op::GraphHandle;
use vmcuda_wire::CudaStatus;

use crate::executor::graph::{ExecGraph, ExecNode};
use crate::executor::ExecStream;
use crate::session::Session;

/// What a memset names: its first byte and the bytes from there to its last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) struct Span {
    pub(in crate::session) ptr: u64,
    pub(in crate::session) len: u64,
}

/// The spans of each graph's unchecked memsets, by the node that holds them (`None`
/// where the capture's frontier did not name one node, or a clone did not find it).
#[derive(Default)]
pub(in crate::session) struct Unassigned {
    by_graph: HashMap<ExecGraph, HashMap<Option<ExecNode>, Vec<Span>>>,
}

impl Unassigned {
    fn spans_of(&self, graph: ExecGraph) -> impl Iterator<Item = &Span> {
        self.by_graph
            .get(&graph)
            .into_iter()
            .flat_map(|nodes| nodes.values().flatten())
    }
}

impl Session {
    /// Check a memset on `stream` naming `span`: `Ok(false)` when it is all the guest's
    /// memory; `Ok(true)` when it is not but `stream` is capturing, so it is taken
    /// unchecked, as the driver takes it; refused (and logged) otherwise.
    pub(in crate::session) fn check_memset(
        &mut self,
        stream: ExecStream,
        span: Span,
    ) -> Result<bool, CudaStatus> {
        if self.owns(span.ptr, span.len) {
            return Ok(false);
        }
        let capturing = span.ptr.checked_add(span.len).is_some()
            && !self.graph_tables.capture_origins.is_empty()
            && self.exec.stream_capturing(stream)?;
        if !capturing {
            self.check_range(span.ptr, span.len)?;
        }
        Ok(true)
    }

    /// The unchecked memset on `stream` was captured: its node (the capture's frontier)
    /// keeps `span`.
    pub(in crate::session) fn memset_captured_unassigned(
        &mut self,
        stream: ExecStream,
        span: Span,
    ) {
        let Ok((graph, (frontier, _))) = self.exec.capture_graph(stream) else {
            return;
        };
        let node = match frontier[..] {
            [node] => Some(node),
            _ => None,
        };
        let spans = self
            .graph_tables
            .unassigned
            .by_graph
            .entry(graph)
            .or_default();
        spans.entry(node).or_default().push(span);
    }

    /// Refuse to make `graph` executable while a memset it holds (or a graph its nodes
    /// own holds: a conditional body, a moved child) names memory not the guest's.
    pub(in crate::session) fn refuse_unassigned(
        &self,
        handle: GraphHandle,
        graph: ExecGraph,
    ) -> Result<(), CudaStatus> {
        if self.graph_tables.unassigned.by_graph.is_empty() {
            return Ok(());
        }
        let mut graphs = vec![graph];
        graphs.extend(self.owned_graphs(handle));
        let unassigned = &self.graph_tables.unassigned;
        self.refuse_unowned(
            graphs.into_iter().flat_map(|g| unassigned.spans_of(g)),
            "refused a graph whose captured memset names memory not the guest's",
        )
    }

    /// Refuse to give an executable graph's node the parameters of `src`'s node while
    /// they name memory not the guest's (the driver refuses such an update).
    pub(in crate::session) fn refuse_unassigned_node(
        &self,
        (graph, node): (ExecGraph, ExecNode),
    ) -> Result<(), CudaStatus> {
        let spans = self.graph_tables.unassigned.by_graph.get(&graph);
        self.refuse_unowned(
            spans.and_then(|s| s.get(&Some(node))).into_iter().flatten(),
            "refused new parameters naming memory not the guest's for an executable graph",
        )
    }

    /// Refuse, saying `why`, when any of `spans` is not all the guest's memory now.
    fn refuse_unowned<'a>(
        &self,
        spans: impl IntoIterator<Item = &'a Span>,
        why: &str,
    ) -> Result<(), CudaStatus> {
        match spans.into_iter().find(|s| !self.owns(s.ptr, s.len)) {
            Some(span) => {
                warn!(client = %self.client, ptr = format_args!("{:#x}", span.ptr), len = span.len, "{why}");
                Err(CudaStatus::ErrorInvalidValue)
            }
            None => Ok(()),
        }
    }

    /// Node `dst` took the parameters of node `src`: it keeps `src`'s spans, and its
    /// own go.
    pub(in crate::session) fn unassigned_copied(
        &mut self,
        dst: (ExecGraph, ExecNode),
        src: (ExecGraph, ExecNode),
    ) {
        let tables = &mut self.graph_tables.unassigned.by_graph;
        let from = tables
            .get(&src.0)
            .and_then(|s| s.get(&Some(src.1)))
            .cloned();
        match from {
            Some(spans) => {
                tables.entry(dst.0).or_default().insert(Some(dst.1), spans);
            }
            None => self.unassigned_gone(dst.0, Some(dst.1)),
        }
    }

    /// `node` of `parent` was made of a copy of `child` (a child-graph node): it keeps
    /// the spans `child` and the graphs it owns hold now.
    pub(in crate::session) fn unassigned_embedded(
        &mut self,
        (parent, node): (ExecGraph, ExecNode),
        child: GraphHandle,
    ) {
        let Ok(child_exec) = self.graph_entry(child).map(|e| e.exec) else {
            return;
        };
        let mut graphs = vec![child_exec];
        graphs.extend(self.owned_graphs(child));
        let spans: Vec<Span> = graphs
            .iter()
            .flat_map(|g| {
                self.graph_tables
                    .unassigned
                    .spans_of(*g)
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect();
        if !spans.is_empty() {
            let tables = &mut self.graph_tables.unassigned.by_graph;
            tables.entry(parent).or_default().insert(Some(node), spans);
        }
    }

    /// `clone` was cloned from `original`: its nodes keep the spans of theirs.
    pub(in crate::session) fn unassigned_cloned(&mut self, original: ExecGraph, clone: ExecGraph) {
        let Some(nodes) = self
            .graph_tables
            .unassigned
            .by_graph
            .get(&original)
            .cloned()
        else {
            return;
        };
        let mut copied: HashMap<Option<ExecNode>, Vec<Span>> = HashMap::new();
        for (node, spans) in nodes {
            let found = node.and_then(|n| self.exec.find_in_clone(original, n, clone).ok());
            copied.entry(found).or_default().extend(spans);
        }
        self.graph_tables.unassigned.by_graph.insert(clone, copied);
    }

    /// `node` of `graph` is gone, or all of `graph` (`None`).
    pub(in crate::session) fn unassigned_gone(&mut self, graph: ExecGraph, node: Option<ExecNode>) {
        let tables = &mut self.graph_tables.unassigned.by_graph;
        match node {
            None => {
                tables.remove(&graph);
            }
            Some(n) => {
                if let Some(nodes) = tables.get_mut(&graph) {
                    nodes.remove(&Some(n));
                    if nodes.is_empty() {
                        tables.remove(&graph);
                    }
                }
            }
        }
    }

    /// The executor's graphs the nodes of `handle` own, and theirs in turn.
    fn owned_graphs(&self, handle: GraphHandle) -> Vec<ExecGraph> {
        let mut out = Vec::new();
        let mut todo = vec![handle];
        // Ownership is a tree (a graph has one owner), so this ends; bounded besides.
        while let Some(h) = todo.pop() {
            if out.len() > self.graph_tables.graphs.len() {
                break;
            }
            for (&g, entry) in &self.graph_tables.graphs {
                if entry.owner == Some(h) {
                    out.push(entry.exec);
                    todo.push(g);
                }
            }
        }
        out
    }
}
