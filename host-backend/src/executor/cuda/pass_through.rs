//! The pass-through ops on the GPU: the table lines with an `=> exec` clause
//! (`wire/src/table.rs`), each the one driver call it names, as the guest sent its
//! values (the session checks nothing of theirs; see [`vmcuda_wire::op::PassThrough`]).

use cudarc::driver::{result, sys};
use vmcuda_wire::op::{CacheConfig, PassThroughExec, PriorityRange};
use vmcuda_wire::CudaStatus;

use super::launch::cache_config_from;
use super::{check, status, CudaExecutor};
use crate::executor::ExecResult;

impl PassThroughExec for CudaExecutor {
    fn device_synchronize(&mut self) -> ExecResult<()> {
        self.bind()?;
        result::ctx::synchronize().map_err(status)
    }

    fn device_query(&mut self) -> ExecResult<()> {
        let idx = self.bind()?;
        let all = self.guest_streams(idx)?;
        for s in all {
            // SAFETY: a default stream, or one this executor made and has not destroyed.
            check(unsafe { sys::cuStreamQuery(s) })?;
        }
        Ok(())
    }

    fn device_get_cache_config(&mut self) -> ExecResult<CacheConfig> {
        self.bind()?;
        let mut raw: u32 = 0;
        // SAFETY: CUfunc_cache is a 4-byte C enum; the driver writes it into `raw`,
        // which is only ever read as an integer (raw: cudarc's wrapper would read it
        // as the Rust enum).
        check(unsafe { sys::cuCtxGetCacheConfig((&mut raw as *mut u32).cast()) })?;
        Ok(CacheConfig { config: raw })
    }

    fn device_set_cache_config(&mut self, config: u32) -> ExecResult<()> {
        self.bind()?;
        let config = cache_config_from(config).ok_or(CudaStatus::ErrorInvalidValue)?;
        result::ctx::set_cache_config(config).map_err(status)
    }

    fn device_get_stream_priority_range(&mut self) -> ExecResult<PriorityRange> {
        self.bind()?;
        let (least, greatest) = result::stream::get_priority_range().map_err(status)?;
        Ok(PriorityRange { least, greatest })
    }

    fn device_enable_peer_access(&mut self, peer: i32, flags: u32) -> ExecResult<()> {
        let peer_idx = self.device_index(peer)?;
        let peer_ctx = self.context(peer_idx)?;
        self.bind()?;
        // SAFETY: `peer_ctx` is a retained primary context; a context is current.
        check(unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, flags) })
    }

    fn device_disable_peer_access(&mut self, peer: i32) -> ExecResult<()> {
        let peer_idx = self.device_index(peer)?;
        self.bind()?;
        // A peer whose context was never made cannot have been enabled.
        let peer_ctx = self.devices[peer_idx]
            .ctx
            .ok_or(CudaStatus::ErrorPeerAccessNotEnabled)?;
        // SAFETY: `peer_ctx` is a retained primary context; a context is current.
        check(unsafe { sys::cuCtxDisablePeerAccess(peer_ctx) })
    }

    fn ctx_reset_persisting_l2_cache(&mut self) -> ExecResult<()> {
        self.bind()?;
        // SAFETY: no arguments; a context is current.
        check(unsafe { sys::cuCtxResetPersistingL2Cache() })
    }

    fn device_graph_mem_trim(&mut self) -> ExecResult<()> {
        let idx = self.bind()?;
        // Memory a graph still running or scheduled uses is not trimmed: wait for it,
        // so that what nothing holds any more really goes.
        self.device_synchronize()?;
        // SAFETY: the device handle came from cuDeviceGet.
        check(unsafe { sys::cuDeviceGraphMemTrim(self.devices[idx].handle) })
    }
}
