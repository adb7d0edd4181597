//! `cudaDeviceReset`: the device's state on the host is gone, and so is every family's
//! record of it here (allocations, streams, events, graphs, arrays, memory pools, the
//! per-thread default streams, shared pinned memory kept for reuse). It sits above
//! the families, which know nothing of one another's state.

use vmcuda_wire::op::DeviceReset;

use super::{call, guard};
use crate::{cudaError_t, state};

pub extern "C" fn cudaDeviceReset() -> cudaError_t {
    guard("cudaDeviceReset", || {
        let r = call(&DeviceReset);
        // Device addresses, streams and events of the reset device are stale.
        let mut reg = crate::state::registry();
        reg.clear_device_ranges();
        reg.streams.clear();
        reg.events.clear();
        drop(reg);
        super::graph::forget_device_state();
        super::graph_build::forget_device_state();
        super::node_builder::forget_device_state();
        super::array::forget_device_state();
        super::mem_pool::forget_device_state(state::current_device());
        super::per_thread::default_stream::forget();
        // The reset context's registrations are gone with it.
        crate::shared::kept::release_all();
        r
    })
}
