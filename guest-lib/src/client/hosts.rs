//! Several hosts behind one program: the guest sees the union of their GPUs.
//!
//! `VMCUDA_SERVER` may name several hosts, comma-separated. Each gets its own
//! connection ([`Client`]), hello, policy and quota; the program sees their devices
//! as 0..n-1 in the order the hosts are named. A call goes to the host of the device
//! it is for, with that host's own number for the device in its frame header, so a
//! host never learns that other hosts exist. Handles a host makes (modules,
//! functions, graphs) are drawn from a space of its own ([`HandleSpace`]), so a
//! handle names its host and two hosts never hand out the same number.
//!
//! A host that is lost fails the calls for its own devices only.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use vmcuda_wire::op::{ExecutorKind, HandleSpace, HelloReply, Request, HANDLE_SPACE_SHIFT};
use vmcuda_wire::transport::ServerAddr;
use vmcuda_wire::CudaStatus;

use super::{Client, ConnectFailure, Sink};

/// One host and where its devices start among the program's.
struct Host {
    client: Client,
    first_device: i32,
}

/// Every host the program uses.
pub struct Hosts {
    hosts: Vec<Host>,
    /// The hosts' hellos in one: the device count is the sum, the driver version the
    /// oldest; the rest is the first host's.
    pub hello: HelloReply,
}

impl Hosts {
    /// Connect to every address, in order. One host that cannot be reached fails the
    /// whole set: devices would otherwise change numbers with the weather.
    pub fn connect(addrs: &[ServerAddr], token: &[u8]) -> Result<Hosts, ConnectFailure> {
        let mut hosts = Vec::with_capacity(addrs.len());
        let mut first_device = 0;
        for (index, addr) in addrs.iter().enumerate() {
            let client = Client::connect(addr.clone(), token.to_vec())?;
            if index > 0 {
                // Hosts older than the handle spaces refuse the op: with several hosts
                // their handles could collide, so they are refused here.
                let space = HandleSpace { host: index as u8 };
                client.call(0, &space, &[], Sink::None).map_err(|status| {
                    ConnectFailure::Refused {
                        addr: addr.clone(),
                        status,
                        reason: Some("the host cannot serve as one of several".into()),
                    }
                })?;
            }
            let count = client.hello.device_count.max(0);
            hosts.push(Host {
                client,
                first_device,
            });
            first_device += count;
        }
        let mut hello = hosts[0].client.hello.clone();
        hello.device_count = first_device;
        hello.driver_version = hosts
            .iter()
            .map(|h| h.client.hello.driver_version)
            .min()
            .unwrap_or(hello.driver_version);
        if hosts.len() > 1 {
            hello.banner = hosts
                .iter()
                .map(|h| format!("{}: {}", h.client.addr, h.client.hello.banner))
                .collect::<Vec<_>>()
                .join("; ");
        }
        Ok(Hosts { hosts, hello })
    }

    /// The one host, when there is only one (the data paths through shared memory
    /// and guest RAM serve one host only).
    pub fn single(&self) -> Option<&Client> {
        match self.hosts.as_slice() {
            [only] => Some(&only.client),
            _ => None,
        }
    }

    pub fn count(&self) -> usize {
        self.hosts.len()
    }

    /// The host serving `device` and its own number for it. With one host every
    /// number goes through unchanged (the host judges it, as it always has).
    pub fn route(&self, device: i32) -> Result<(usize, &Client, i32), CudaStatus> {
        if let [only] = self.hosts.as_slice() {
            return Ok((0, &only.client, device));
        }
        self.hosts
            .iter()
            .enumerate()
            .rev()
            .find(|(_, h)| device >= h.first_device)
            .filter(|(_, h)| device < h.first_device + h.client.hello.device_count)
            .map(|(i, h)| (i, &h.client, device - h.first_device))
            .ok_or(CudaStatus::ErrorInvalidDevice)
    }

    /// The capability bits (`vmcuda_wire::handshake::caps`) the host serving `device`
    /// said it has (none for numbers no host has).
    pub fn capabilities_of(&self, device: i32) -> u64 {
        self.route(device)
            .map_or(0, |(_, client, _)| client.hello.capabilities)
    }

    /// Which host a device is on (0 for numbers no host has: the call fails there).
    pub fn host_of(&self, device: i32) -> usize {
        self.route(device).map_or(0, |(i, _, _)| i)
    }

    /// The host that made a handle (see [`HandleSpace`]).
    pub fn host_of_handle(&self, handle: u64) -> usize {
        let index = (handle >> HANDLE_SPACE_SHIFT) as usize;
        if index < self.hosts.len() {
            index
        } else {
            0
        }
    }

    /// The program's number for a host's own device number.
    pub fn global_device(&self, host: usize, local: i32) -> i32 {
        self.hosts
            .get(host)
            .map_or(local, |h| h.first_device + local)
    }

    /// A host's first device (a device to address a call to a host by).
    pub fn first_device_of(&self, host: usize) -> i32 {
        self.hosts.get(host).map_or(0, |h| h.first_device)
    }

    pub fn call<R: Request>(
        &self,
        device: i32,
        req: &R,
        data: &[u8],
        sink: Sink<'_>,
    ) -> Result<R::Reply, CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.call(local, req, data, sink)
    }

    pub fn call_with_fd<R: Request>(
        &self,
        device: i32,
        req: &R,
        fd: BorrowedFd<'_>,
    ) -> Result<R::Reply, CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.call_with_fd(local, req, fd)
    }

    pub fn post<R: Request>(&self, device: i32, req: &R, data: &[u8]) -> Result<(), CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.post(local, req, data)
    }

    /// [`Client::post_if_free`] on the device's host.
    pub fn post_if_free<R: Request>(&self, device: i32, req: &R) -> Result<bool, CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.post_if_free(local, req)
    }

    pub fn post_now<R: Request>(
        &self,
        device: i32,
        req: &R,
        data: &[u8],
    ) -> Result<(), CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.post_now(local, req, data)
    }

    pub fn call_many<R: Request>(
        &self,
        device: i32,
        requests: Vec<(R, &mut [u8])>,
    ) -> Result<(), CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.call_many(local, requests)
    }

    pub fn pipeline<R: Request<Reply = ()>>(
        &self,
        device: i32,
        n: usize,
        depth: usize,
        prepare: impl FnMut(usize) -> R,
        finish: impl FnMut(usize),
    ) -> Result<(), CudaStatus> {
        let (_, client, local) = self.route(device)?;
        client.pipeline(local, n, depth, prepare, finish)
    }

    pub fn start_flusher(&'static self) {
        for h in &self.hosts {
            h.client.start_flusher();
        }
    }

    pub fn flush_posted(&self, patience: Duration) {
        for h in &self.hosts {
            h.client.flush_posted(patience);
        }
    }

    /// The program leaves (see [`Client::leave`]).
    pub fn leave(&self, patience: Duration) {
        for h in &self.hosts {
            h.client.leave(patience);
        }
    }

    /// Whether the one host is reached over vsock (see [`crate::guest_pages`]).
    pub fn is_vsock(&self) -> bool {
        self.single().is_some_and(Client::is_vsock)
    }

    /// Whether descriptors (and so shared memory) can be passed to the one host.
    pub fn can_pass_fds(&self) -> bool {
        self.single().is_some_and(Client::can_pass_fds)
    }

    /// The hosts that serve the host-memory test double rather than a GPU.
    pub fn test_doubles(&self) -> impl Iterator<Item = &ServerAddr> {
        self.hosts
            .iter()
            .filter(|h| h.client.hello.executor == ExecutorKind::HostMemory)
            .map(|h| &h.client.addr)
    }

    /// Every host's address, in the program's order.
    pub fn addrs(&self) -> impl Iterator<Item = &ServerAddr> {
        self.hosts.iter().map(|h| &h.client.addr)
    }
}
