//! Devices: properties, synchronization, reset, limits, cache configuration, peers.

use vmcuda_wire::op::*;

use super::{nothing, Session};

impl DeviceOps for Session {
    fn device_get_properties(
        &mut self,
        _: &CallContext,
        req: DeviceGetProperties,
        _: &[u8],
    ) -> HandlerResult<DeviceProperties> {
        Ok((self.exec.device_properties(req.device)?, Vec::new()))
    }

    fn device_synchronize(
        &mut self,
        _: &CallContext,
        _: DeviceSynchronize,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.synchronize()?;
        nothing()
    }

    fn device_reset(&mut self, _: &CallContext, _: DeviceReset, _: &[u8]) -> HandlerResult<()> {
        // Everything the guest made is gone with the device's state.
        self.lt_reset();
        self.blas_reset();
        self.vmm_reset();
        self.graphs_reset();
        self.handles.streams.clear();
        self.handles.events.clear();
        let freed: u64 = self.accounts.allocations.values().sum();
        self.accounts.allocations.clear();
        self.accounts.globals.clear();
        self.accounts.refund(freed);
        self.accounts.set_device_bytes(0);
        self.exec.device_reset()?;
        nothing()
    }

    fn device_get_limit(
        &mut self,
        _: &CallContext,
        req: DeviceGetLimit,
        _: &[u8],
    ) -> HandlerResult<LimitValue> {
        Ok((
            LimitValue {
                value: self.exec.get_limit(req.limit)?,
            },
            Vec::new(),
        ))
    }

    fn device_set_limit(
        &mut self,
        _: &CallContext,
        req: DeviceSetLimit,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.set_limit(req.limit, req.value)?;
        nothing()
    }

    fn device_get_cache_config(
        &mut self,
        _: &CallContext,
        _: DeviceGetCacheConfig,
        _: &[u8],
    ) -> HandlerResult<CacheConfig> {
        Ok((
            CacheConfig {
                config: self.exec.get_cache_config()?,
            },
            Vec::new(),
        ))
    }

    fn device_set_cache_config(
        &mut self,
        _: &CallContext,
        req: CacheConfig,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.set_cache_config(req.config)?;
        nothing()
    }

    fn device_get_stream_priority_range(
        &mut self,
        _: &CallContext,
        _: DeviceGetStreamPriorityRange,
        _: &[u8],
    ) -> HandlerResult<PriorityRange> {
        let (least, greatest) = self.exec.stream_priority_range()?;
        Ok((PriorityRange { least, greatest }, Vec::new()))
    }

    fn device_can_access_peer(
        &mut self,
        ctx: &CallContext,
        req: DeviceCanAccessPeer,
        _: &[u8],
    ) -> HandlerResult<CanAccessPeer> {
        let can_access = self.exec.can_access_peer(req.device, req.peer)?;
        self.exec.set_device(ctx.device)?;
        Ok((CanAccessPeer { can_access }, Vec::new()))
    }

    fn device_enable_peer_access(
        &mut self,
        _: &CallContext,
        req: DeviceEnablePeerAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.enable_peer_access(req.peer, req.flags)?;
        nothing()
    }

    fn device_disable_peer_access(
        &mut self,
        _: &CallContext,
        req: DeviceDisablePeerAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.exec.disable_peer_access(req.peer)?;
        nothing()
    }

    fn mem_get_info(&mut self, _: &CallContext, _: MemGetInfo, _: &[u8]) -> HandlerResult<MemInfo> {
        let (free, total) = self.exec.mem_info()?;
        // A guest with a quota sees the quota as its device's memory.
        let (free, total) = match self.grant.memory_quota {
            Some(quota) => (
                free.min(quota.saturating_sub(self.accounts.quota_used().unwrap_or(quota))),
                total.min(quota),
            ),
            None => (free, total),
        };
        Ok((MemInfo { free, total }, Vec::new()))
    }
    fn device_get_p2p_attribute(
        &mut self,
        ctx: &CallContext,
        req: DeviceGetP2PAttribute,
        _: &[u8],
    ) -> HandlerResult<P2PAttribute> {
        let value = self
            .exec
            .p2p_attribute(req.attr, req.src_device, req.dst_device);
        self.exec.set_device(ctx.device)?;
        Ok((P2PAttribute { value: value? }, Vec::new()))
    }
}
