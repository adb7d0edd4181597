//! The handshake: the guest says who it is and which protocol it speaks.

use tracing::{info, warn};
use vmcuda_wire::handshake::{self, caps, PROTOCOL_VERSION};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::Session;

impl ConnectionOps for Session {
    fn hello(&mut self, _ctx: &CallContext, req: Hello, _data: &[u8]) -> HandlerResult<HelloReply> {
        handshake::check_hello(&req).inspect_err(|_| {
            warn!(client = %req.client, protocol = req.protocol, runtime = req.runtime_version,
                "refusing guest: protocol or runtime version not spoken here");
        })?;
        self.greeted = true;
        self.client = format!("{}[{}]", req.client, req.pid);
        self.program_pid = req.pid;
        info!(client = %self.client, guest = %self.grant.name, executor = ?self.exec.kind(),
            gpus = %self.grant.gpus.to_arg(), quota = ?self.grant.memory_quota, "guest connected");
        Ok((
            HelloReply {
                protocol: PROTOCOL_VERSION,
                driver_version: self.exec.driver_version(),
                device_count: self.exec.device_count(),
                executor: self.exec.kind(),
                capabilities: caps::CONSOLE
                    | caps::ASYNC_REQUESTS
                    | if self.module_cache.is_some() {
                        caps::MODULE_CACHE
                    } else {
                        0
                    },
                banner: self.exec.banner(),
            },
            Vec::new(),
        ))
    }

    fn handle_space(
        &mut self,
        _ctx: &CallContext,
        req: HandleSpace,
        _: &[u8],
    ) -> HandlerResult<()> {
        if usize::from(req.host) >= vmcuda_wire::transport::MAX_HOSTS {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.handles.use_space(req.host);
        info!(client = %self.client, host = req.host, "guest uses several hosts; this is one");
        Ok(((), Vec::new()))
    }
}
