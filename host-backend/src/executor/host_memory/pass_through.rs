//! The pass-through ops on the test double: the table lines with an `=> exec` clause
//! (`wire/src/table.rs`), answered as the driver answers them where the double can.

use vmcuda_wire::op::{CacheConfig, PassThroughExec, PriorityRange};
use vmcuda_wire::CudaStatus;

use super::HostMemoryExecutor;
use crate::executor::ExecResult;

impl PassThroughExec for HostMemoryExecutor {
    fn device_synchronize(&mut self) -> ExecResult<()> {
        Ok(())
    }

    /// Work here is done when its call returns.
    fn device_query(&mut self) -> ExecResult<()> {
        Ok(())
    }

    fn device_get_cache_config(&mut self) -> ExecResult<CacheConfig> {
        Ok(CacheConfig {
            config: self.cache_config,
        })
    }

    fn device_set_cache_config(&mut self, config: u32) -> ExecResult<()> {
        if config > 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.cache_config = config;
        Ok(())
    }

    fn device_get_stream_priority_range(&mut self) -> ExecResult<PriorityRange> {
        Ok(PriorityRange {
            least: 0,
            greatest: -5,
        })
    }

    fn device_enable_peer_access(&mut self, peer: i32, _flags: u32) -> ExecResult<()> {
        self.check_device(peer)?;
        if peer as usize == self.current {
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        Err(CudaStatus::ErrorPeerAccessUnsupported)
    }

    fn device_disable_peer_access(&mut self, peer: i32) -> ExecResult<()> {
        self.check_device(peer)?;
        Err(CudaStatus::ErrorPeerAccessNotEnabled)
    }

    fn ctx_reset_persisting_l2_cache(&mut self) -> ExecResult<()> {
        // Host memory has no L2 to set aside.
        Ok(())
    }

    fn device_graph_mem_trim(&mut self) -> ExecResult<()> {
        // Graph memory goes the moment nothing holds it: there is no cache to trim.
        Ok(())
    }
}
