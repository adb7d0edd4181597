//! The vmcuda host backend.
//!
//! Module map:
//! - [`daemon`]: listeners (Unix socket, TCP); one worker process per connection.
//! - [`worker`]: a worker's frame loop: read, check, dispatch, answer.
//! - [`session`]: one guest's handshake, handle tables and owned allocations.
//! - [`executor`]: the executor trait and its CUDA and host-memory implementations.
//! - [`jail`]: what a worker gives up once its guest is admitted: its own user, a mount
//!   namespace, resource limits and a system call filter.
//! - [`ledger`]: a VM's quota and connection count across all its workers.
//! - [`policy`]: the host configuration: who may connect, which GPUs, quotas, TLS.
//! - [`tls`]: the worker's side of TLS on TCP: telling TLS guests from plain ones, the
//!   server handshake.
//! - [`pinned`]: page-aligned buffers the GPU can DMA straight to and from.
//! - [`console`]: capture of driver output (kernel printf, asserts) for the guest.
//! - [`stats`]: each worker's figures (calls, errors, bytes, memory, latency), shared
//!   through a small mapped file in the state directory.
//! - [`metrics`]: the daemon's Prometheus endpoint and `vmcuda-host status`.

pub mod console;
pub mod daemon;
pub mod executor;
pub mod guest_ram;
pub mod jail;
pub mod ledger;
pub mod metrics;
pub mod pinned;
pub mod policy;
pub mod session;
pub mod stats;
pub mod tls;
pub mod worker;
