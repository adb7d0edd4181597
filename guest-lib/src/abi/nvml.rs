//! `nvml.h`'s structs that the guest's NVML fills for its callers.

use std::ffi::{c_int, c_uint};

/// `nvmlPciInfo_t` (NVML 9 and later; `nvmlDeviceGetPciInfo` itself fills the older
/// first 32 bytes only).
#[repr(C)]
pub(crate) struct PciInfo {
    pub(crate) bus_id_legacy: [u8; 16],
    pub(crate) domain: c_uint,
    pub(crate) bus: c_uint,
    pub(crate) device: c_uint,
    pub(crate) pci_device_id: c_uint,
    pub(crate) pci_subsystem_id: c_uint,
    pub(crate) bus_id: [u8; 32],
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemoryV2 {
    pub(crate) version: c_uint,
    pub(crate) total: u64,
    pub(crate) reserved: u64,
    pub(crate) free: u64,
    pub(crate) used: u64,
}

/// `nvmlTemperature_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TemperatureV1 {
    pub(crate) version: c_uint,
    pub(crate) sensor: c_uint,
    pub(crate) temperature: c_int,
}

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfoV1 {
    pub(crate) pid: c_uint,
    pub(crate) used_gpu_memory: u64,
}

/// `nvmlProcessInfo_t` (v2 and v3).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pub(crate) pid: c_uint,
    pub(crate) used_gpu_memory: u64,
    pub(crate) gpu_instance_id: c_uint,
    pub(crate) compute_instance_id: c_uint,
}

/// `nvmlFieldValue_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValue {
    pub(crate) field_id: u32,
    pub(crate) scope_id: u32,
    pub(crate) timestamp: i64,
    pub(crate) latency_usec: i64,
    pub(crate) value_type: c_uint,
    pub(crate) nvml_return: c_uint,
    pub(crate) value: u64,
}

#[cfg(test)]
mod tests {
    use nvml_wrapper_sys::bindings as sys;

    use super::*;

    #[test]
    fn the_structs_are_laid_out_as_nvml_h() {
        same_layout!(PciInfo, sys::nvmlPciInfo_t,
            bus_id_legacy => busIdLegacy, domain => domain, bus => bus, device => device,
            pci_device_id => pciDeviceId, pci_subsystem_id => pciSubSystemId, bus_id => busId);
        same_layout!(MemoryV2, sys::nvmlMemory_v2_t,
            version => version, total => total, reserved => reserved, free => free,
            used => used);
        same_layout!(TemperatureV1, sys::nvmlTemperature_v1_t,
            version => version, sensor => sensorType, temperature => temperature);
        same_layout!(ProcessInfoV1, sys::nvmlProcessInfo_v1_t,
            pid => pid, used_gpu_memory => usedGpuMemory);
        same_layout!(ProcessInfo, sys::nvmlProcessInfo_v2_t,
            pid => pid, used_gpu_memory => usedGpuMemory, gpu_instance_id => gpuInstanceId,
            compute_instance_id => computeInstanceId);
        same_layout!(FieldValue, sys::nvmlFieldValue_t,
            field_id => fieldId, scope_id => scopeId, timestamp => timestamp,
            latency_usec => latencyUsec, value_type => valueType, nvml_return => nvmlReturn,
            value => value);
    }
}
