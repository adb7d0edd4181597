//! Device requests whose types carry more than plain fields (the op table in
//! [`crate::op`] declares the plain ones inline).

use serde::{Deserialize, Serialize};

/// Everything `cudaGetDeviceProperties` and `cudaDeviceGetAttribute` answer, fetched
/// once per device and cached by the guest.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceProperties {
    pub name: String,
    pub uuid: [u8; 16],
    pub luid: [u8; 8],
    pub luid_device_node_mask: u32,
    pub total_global_mem: u64,
    /// `(cudaDeviceAttr, value)` for every attribute the device answers; the runtime's
    /// and the driver's attribute numbers are the same.
    pub attributes: Vec<(u32, i32)>,
}

impl DeviceProperties {
    pub fn attribute(&self, attr: u32) -> Option<i32> {
        self.attributes.iter().find(|a| a.0 == attr).map(|a| a.1)
    }
}
