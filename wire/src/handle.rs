//! Handles on the wire: what a guest names its objects with.
//!
//! None is ever a host pointer. Streams and events are named by the guest (creating
//! one costs no round trip); modules, functions, graphs and the rest are named by the
//! host's session for that connection, which looks every one up in its own tables.
//! Device pointers are the exception: they are real device addresses, because kernels
//! take them inside arguments and structs.

use serde::{Deserialize, Serialize};

/// Where the host number sits in the handles a host's session makes for a guest that
/// uses several hosts (`HandleSpace`): the top byte, so handles stay unique across
/// hosts and each names its own.
pub const HANDLE_SPACE_SHIFT: u32 = 56;

/// A device pointer as the GPU sees it. Guests get real device addresses because
/// kernels take pointers inside arguments and structs.
pub type DevicePtr = u64;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        pub struct $name(pub u64);

        /// A C handle (`cudaGraph_t` and the like) as the program holds it: the value
        /// is the handle, never a pointer this side reads.
        impl From<*mut core::ffi::c_void> for $name {
            fn from(raw: *mut core::ffi::c_void) -> Self {
                $name(raw as usize as u64)
            }
        }

        impl From<$name> for *mut core::ffi::c_void {
            fn from(handle: $name) -> Self {
                handle.0 as usize as *mut core::ffi::c_void
            }
        }
    };
}

handle!(
    /// A stream named by the guest. `0` is the legacy default stream and
    /// [`StreamHandle::PER_THREAD`] the per-thread default stream; others are made by
    /// `StreamCreate`, with ids the guest picks so creating one needs no round trip.
    StreamHandle
);
handle!(
    /// An event named by the guest (ids picked by the guest, like streams).
    EventHandle
);
handle!(
    /// A loaded module (one fatbinary), named by the host.
    ModuleHandle
);
handle!(
    /// A kernel of a loaded module, named by the host.
    FunctionHandle
);
handle!(
    /// A `cudaGraph_t`, named by the host.
    GraphHandle
);
handle!(
    /// A `cudaGraphExec_t`, named by the host.
    GraphExecHandle
);
handle!(
    /// A `cudaGraphNode_t`, named by the host (unique within a connection).
    GraphNodeHandle
);
handle!(
    /// A memory pool the guest made (`cudaMemPoolCreate`), named by the host.
    MemPoolHandle
);
handle!(
    /// A physical allocation (`CUmemGenericAllocationHandle`), named by the host.
    AllocationHandle
);

impl StreamHandle {
    pub const LEGACY: StreamHandle = StreamHandle(0);
    pub const PER_THREAD: StreamHandle = StreamHandle(2);
    pub fn is_default(self) -> bool {
        self == Self::LEGACY || self == Self::PER_THREAD
    }
}
