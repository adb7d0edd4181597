//! The end of a stream capture: the graph it made, named for the guest (or the graph
//! the guest had, for a capture into it), and what becomes of its memory when the
//! capture fails, goes on from another stream, or is renamed by the executor.

use super::*;

impl Session {
    pub(super) fn end_capture(
        &mut self,
        ctx: &CallContext,
        req: StreamEndCapture,
    ) -> Result<GraphHandle, CudaStatus> {
        let s = self.handles.stream(req.stream)?;
        self.graph_tables.capture_origins.remove(&s);
        // A graph the guest saw being built keeps its handle, or goes with a failure.
        let shown = match self.graph_tables.building.is_empty() {
            true => None,
            false => self.exec.capture_graph(s).ok().and_then(|(g, _)| {
                let h = self.graph_tables.building.remove(&g)?;
                Some((g, h))
            }),
        };
        let building = self.exec.capture_graph(s).ok().map(|(g, _)| g);
        let ended = self.exec.end_capture(s);
        if let Some(g) = building.filter(|g| self.graph_tables.into_existing.contains(g)) {
            // A capture into a graph the guest had: it keeps its graph and handle
            // whatever the end (unless the capture goes on, ended from a stream that
            // only joined it).
            if ended.is_err() && self.exec.capture_graph(s).is_ok_and(|(c, _)| c == g) {
                if let Some((g, h)) = shown {
                    self.graph_tables.building.insert(g, h);
                }
                return Err(ended.expect_err("checked"));
            }
            self.graph_tables.into_existing.remove(&g);
            let h = match shown {
                Some((_, h)) => h,
                None => return ended.and(Err(CudaStatus::ErrorIllegalState)),
            };
            if let Some(entry) = self.graph_tables.graphs.get_mut(&h) {
                entry.building = false;
            }
            ended?;
            if req.invalidated {
                return Err(CudaStatus::ErrorStreamCaptureInvalidated);
            }
            return Ok(h);
        }
        let graph = match ended {
            Ok(graph) => graph,
            Err(e) => {
                if let Some((_, h)) = shown {
                    self.forget_graph(h);
                }
                // No graph came of it: its allocation nodes' memory goes back, unless
                // the capture goes on (ended from a stream that only joined it).
                if let Some(g) = building {
                    let going_on = self.exec.capture_graph(s).is_ok_and(|(c, _)| c == g);
                    if !going_on {
                        self.graph_dropped(Some(ctx.device), g);
                    }
                }
                return Err(e);
            }
        };
        if let Some(g) = building.filter(|&g| g != graph) {
            // The executor named the graph anew: the memory follows it.
            self.graph_host_renamed(g, graph);
            if let Some(memory) = self.graph_tables.memory.remove(&g) {
                for ptr in &memory.allocations {
                    if let Some(a) = self.graph_tables.allocations.get_mut(ptr) {
                        a.graph = graph;
                    }
                }
                self.graph_tables.memory.insert(graph, memory);
            }
        }
        if let Some((g, h)) = shown {
            if g == graph && !req.invalidated {
                let entry = self
                    .graph_tables
                    .graphs
                    .get_mut(&h)
                    .expect("shown graphs are kept");
                entry.building = false;
                return Ok(h);
            }
            self.forget_graph(h);
        }
        if req.invalidated {
            // The guest refused a call of this capture, which CUDA invalidates.
            let _ = self.exec.graph_destroy(graph);
            self.graph_dropped(Some(ctx.device), graph);
            return Err(CudaStatus::ErrorStreamCaptureInvalidated);
        }
        match self.name_graph(graph, false) {
            Ok(handle) => Ok(handle),
            Err(e) => {
                let _ = self.exec.graph_destroy(graph);
                self.graph_dropped(Some(ctx.device), graph);
                Err(e)
            }
        }
    }
}
