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

/// What NVML says of a device right now, for the guest's NVML (`libnvidia-ml.so.1`)
/// and `vmcuda smi`: the host's live readings of the GPU, and the guest's own share
/// of it. A reading the GPU does not offer is `None` (NVML's "not supported").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GpuStatus {
    /// Percent of the last sample period a kernel ran / device memory was read or
    /// written (`nvmlDeviceGetUtilizationRates`).
    pub utilization_gpu: Option<u32>,
    pub utilization_memory: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    /// Current and maximum clocks in MHz: graphics, SM, memory.
    pub clocks_mhz: Option<[u32; 3]>,
    pub max_clocks_mhz: Option<[u32; 3]>,
    /// `nvmlPstates_t` (0 = P0, the fastest).
    pub performance_state: Option<u32>,
    pub fan_percent: Option<u32>,
    /// PCI device and subsystem ids (`nvmlPciInfo_t`); the bus position comes from
    /// the device's properties.
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    /// The host driver's version string (as `nvidia-smi` prints it).
    pub driver_version: String,
    /// The device's memory, and what is free on it for everyone (the host's NVML).
    pub memory_total: u64,
    pub memory_free: Option<u64>,
    /// The guest's quota on this host, if it has one.
    pub memory_quota: Option<u64>,
    /// Device memory the guest (its VM, every connection) holds on this host.
    pub guest_memory_used: u64,
    /// The guest's programs using this host: their pids as the guest knows them and
    /// the device memory each holds.
    pub processes: Vec<GuestProcess>,
}

/// One of the guest's programs, as NVML lists running processes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GuestProcess {
    pub pid: u32,
    pub used_memory: u64,
}

/// `CUatomicOperation`s run from 0 (`INTEGER_ADD`) to 12 (`FLOAT_MAX`).
pub const ATOMIC_OPERATIONS: u32 = 13;

/// The longest list of operations an atomic-capability query may name: every one,
/// several times over, is already more than a program asks.
pub const MAX_ATOMIC_QUERY: u32 = 4 * ATOMIC_OPERATIONS;

/// The value of a context limit no worker's context ever changes, which the guest
/// answers itself: `CU_LIMIT_CIG_ENABLED` (8) and `CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED`
/// (9) are 0, as a worker's contexts are never shared with graphics. cuBLAS and
/// NVIDIA's runtime ask for the first before many launches (16 times a step of torch's
/// bf16 transformer, measured on the H100).
pub fn fixed_limit(limit: u32) -> Option<u64> {
    matches!(limit, 8 | 9).then_some(0)
}
