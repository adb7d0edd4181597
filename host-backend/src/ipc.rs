//! CUDA IPC between the processes of one VM, mediated by the daemon (docs/ipc.md).
//!
//! Each guest process has a worker of its own, so a handle one process exports must
//! be opened by another worker. The exporting worker exports with its driver and
//! hands the driver's handle to its daemon's [`Registry`](registry::Registry), which
//! names it by a random token; that token is all the guest's 64-byte handle holds. A
//! worker of the same VM that is given the token gets the driver's handle back and
//! opens it with its own driver. Workers open no connections, so each has a socket to
//! the registry, made by the daemon as it starts the worker.
//!
//! - [`proto`]: the messages;
//! - [`registry`]: the daemon's side;
//! - [`link`]: the worker's side.

pub mod link;
pub mod proto;
pub mod registry;

pub use link::{IpcError, IpcLink, REGISTRY_FD};
pub use registry::Registry;

/// Default `[ipc] max_exports`: exports one VM may hold at once.
pub const DEFAULT_MAX_EXPORTS: u32 = 4096;

#[cfg(test)]
mod tests;
