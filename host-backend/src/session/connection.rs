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
                    }
                    | if self.resume.is_some() {
                        caps::RESUMABLE
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

    fn session_ticket_get(
        &mut self,
        _ctx: &CallContext,
        _req: SessionTicketGet,
        _: &[u8],
    ) -> HandlerResult<SessionTicket> {
        let ticket = self.new_ticket()?;
        Ok((ticket, Vec::new()))
    }

    fn session_resume(
        &mut self,
        _ctx: &CallContext,
        _req: SessionResume,
        _: &[u8],
    ) -> HandlerResult<SessionResumed> {
        // Only ever the first frame of a connection (see `worker`).
        warn!(client = %self.client, "session resume on a connection already in a session");
        Err(CudaStatus::ErrorInvalidValue)
    }

    fn session_ping(
        &mut self,
        _ctx: &CallContext,
        _req: SessionPing,
        _: &[u8],
    ) -> HandlerResult<()> {
        Ok(((), Vec::new()))
    }

    fn session_close(
        &mut self,
        _ctx: &CallContext,
        _req: SessionClose,
        _: &[u8],
    ) -> HandlerResult<()> {
        if let Some(point) = &mut self.resume {
            point.close();
        }
        Ok(((), Vec::new()))
    }
}

impl Session {
    /// Take returning guests of this session at `point` (admission made it).
    pub fn with_resume_point(mut self, point: crate::resume::ResumePoint) -> Self {
        self.resume = Some(point);
        self
    }

    /// A new ticket to this session (the one out before is spent).
    pub fn new_ticket(&mut self) -> Result<SessionTicket, CudaStatus> {
        let point = self.resume.as_mut().ok_or(CudaStatus::ErrorNotSupported)?;
        point.ticket().map_err(|e| {
            warn!(client = %self.client, "no session ticket: {e}");
            CudaStatus::ErrorOperatingSystem
        })
    }

    /// `ticket` could not be sent: it is no longer good.
    pub fn withdraw_ticket(&self, ticket: &SessionTicket) {
        if let Some(point) = &self.resume {
            point.withdraw(ticket);
        }
    }

    /// Whether the guest may come back to this session after a drop (it holds a
    /// ticket): its replies are then kept.
    pub fn resumable(&self) -> bool {
        self.resume.as_ref().is_some_and(|p| p.issued())
    }

    /// The connection now served (a returning guest's arrival shuts it down).
    pub fn serving(&self, socket: &std::os::fd::OwnedFd) {
        if let Some(point) = &self.resume {
            point.serving(std::os::fd::AsFd::as_fd(socket));
        }
    }

    /// The guest's first request on the connection it came back on: it holds its new
    /// ticket, and the one before is spent.
    pub fn confirm_ticket(&self) {
        if let Some(point) = &self.resume {
            point.confirm();
        }
    }

    /// The connection dropped: wait for the guest to come back, if it may.
    pub fn wait_for_guest(&mut self) -> Option<crate::resume::Arrival> {
        self.resume.as_mut().and_then(|p| p.wait())
    }
}
