//! The vmcuda host backend.
//!
//! Module map:
//! - [`serve`]: the daemon's start: executor choice, listeners, metrics endpoint.
//! - [`daemon`]: listeners (Unix socket, TCP, vsock); one worker process per connection.
//! - [`spawn`]: how a worker is started, by the daemon or the vhost-user device: its
//!   command line, and its log passed on under its VM's limit.
//! - [`connection`]: a worker process's connection: admission, executor, transport.
//! - [`admission`]: before admission: pending cap, hello deadline, the worker's
//!   channel to the daemon, rate-limited logging, guest-supplied text made harmless.
//! - [`guest_log`]: a worker's host log under a rate limit, with summaries of what
//!   it dropped.
//! - [`source_log`]: lines about connections strangers can cause (the peer port's),
//!   under a rate limit for each source and one for all.
//! - [`worker`]: a worker's frame loop: read, check, dispatch, answer.
//! - [`buffers`]: a worker's frame buffers, bounded by the VM's `buffer_memory`.
//! - [`session`]: one guest's handshake, handle tables and owned allocations.
//! - [`executor`]: the executor trait and its CUDA and host-memory implementations.
//! - [`jail`]: what a worker gives up once its guest is admitted: its own user, a mount
//!   namespace, resource limits and a system call filter.
//! - [`ledger`]: a VM's quota and connection count across all its workers.
//! - [`module_cache`]: a VM's module and library images by SHA-256, shared by its
//!   workers, so an image crosses the connection once.
//! - [`memory_cap`]: the kernel's cap on a worker's memory, under its VM's host memory.
//! - [`policy`]: the host configuration: who may connect, which GPUs, quotas, TLS.
//! - [`tls`]: the worker's side of TLS on TCP: telling TLS guests from plain ones, the
//!   server handshake.
//! - [`pinned`]: page-aligned buffers the GPU can DMA straight to and from.
//! - [`console`]: capture of driver output (kernel printf, asserts) for the guest.
//! - [`stats`]: each worker's figures (calls, errors, bytes, memory, latency), shared
//!   through a small mapped file in the state directory.
//! - [`metrics`]: the daemon's Prometheus endpoint and `vmcuda-host status`.
//! - [`peer`]: the link between daemons for copies between their GPUs.
//! - [`resume`]: a guest coming back to its session over a new connection: tickets,
//!   the handoff between workers, the replies kept for sending again.
//! - [`compute`]: VMs' turns on the GPU: shares, priorities and caps, on a board
//!   every worker maps.
//! - [`admin`]: the daemon's admin socket: grants made, changed and revoked at run
//!   time, over the configuration file.

pub mod admin;
pub mod admission;
pub mod buffers;
pub mod compute;
pub mod connection;
pub mod console;
pub mod daemon;
pub mod executor;
pub mod guest_log;
pub mod guest_ram;
pub mod ipc;
pub mod jail;
pub mod ledger;
pub mod memory_cap;
pub mod metrics;
pub mod module_cache;
pub mod peer;
pub mod pinned;
pub mod policy;
pub mod process;
pub mod resume;
pub mod serve;
pub mod session;
pub mod shared_memory;
pub mod socket_files;
pub mod source_log;
pub mod spawn;
pub mod stats;
pub mod suspend;
pub mod tls;
pub mod worker;
