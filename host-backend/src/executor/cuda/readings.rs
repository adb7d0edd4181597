//! A device's live readings, from the host's NVML: what the guest's NVML and
//! `vmcuda smi` show. NVML is loaded on first use; a host without it (or a GPU that
//! does not offer a reading) answers that reading as absent, never as an error, so a
//! guest's monitoring tool shows "N/A" where `nvidia-smi` would.

use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;
use tracing::warn;
use vmcuda_wire::op::GpuStatus;

use cudarc::driver::sys;

use super::uuid::{device_uuid, format_uuid};
use super::{check, CudaExecutor};
use crate::executor::ExecResult;

/// The host's NVML, loaded once per worker.
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        Nvml::init()
            .inspect_err(|e| warn!("no NVML on this host ({e}); GPU readings are absent"))
            .ok()
    })
    .as_ref()
}

/// Each GPU's free memory, as NVML has it (None without NVML): what the suspend
/// commands and the idle policy weigh resumes and newcomers against.
pub(crate) fn free_memory() -> Option<Vec<u64>> {
    let nvml = nvml()?;
    let count = nvml.device_count().ok()?;
    Some(
        (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok()?.memory_info().ok())
            .map(|m| m.free)
            .collect(),
    )
}

impl CudaExecutor {
    /// `device`'s readings (the guest's share of it is the session's to add).
    pub(super) fn read_status(&mut self, device: i32) -> ExecResult<GpuStatus> {
        let idx = self.device_index(device)?;
        let handle = self.devices[idx].handle;
        let uuid = format_uuid(&device_uuid(handle)?);
        let mut s = GpuStatus::default();
        let mut total = 0usize;
        // SAFETY: `handle` came from cuDeviceGet; `total` is a valid out pointer.
        check(unsafe { sys::cuDeviceTotalMem_v2(&mut total, handle) })?;
        s.memory_total = total as u64;
        let Some(nvml) = nvml() else {
            return Ok(s);
        };
        s.driver_version = nvml.sys_driver_version().unwrap_or_default();
        // The GPU the CUDA device is, by UUID: NVML and CUDA number GPUs differently.
        let Ok(gpu) = nvml.device_by_uuid(uuid.as_str()) else {
            return Ok(s);
        };
        if let Ok(u) = gpu.utilization_rates() {
            s.utilization_gpu = Some(u.gpu);
            s.utilization_memory = Some(u.memory);
        }
        s.temperature_c = gpu.temperature(TemperatureSensor::Gpu).ok();
        s.power_mw = gpu.power_usage().ok();
        s.power_limit_mw = gpu.enforced_power_limit().ok();
        let clocks = |f: &dyn Fn(Clock) -> Option<u32>| {
            Some([f(Clock::Graphics)?, f(Clock::SM)?, f(Clock::Memory)?])
        };
        s.clocks_mhz = clocks(&|c| gpu.clock_info(c).ok());
        s.max_clocks_mhz = clocks(&|c| gpu.max_clock_info(c).ok());
        s.performance_state = gpu.performance_state().ok().map(|p| p.as_c());
        s.fan_percent = gpu.fan_speed(0).ok();
        // NVML's own figures: its total is the whole device (CUDA's leaves out what the
        // driver keeps), so the guest's NVML says what NVIDIA's does.
        if let Ok(m) = gpu.memory_info() {
            s.memory_total = m.total;
            s.memory_free = Some(m.free);
        }
        if let Ok(pci) = gpu.pci_info() {
            s.pci_device_id = pci.pci_device_id;
            s.pci_subsystem_id = pci.pci_sub_system_id.unwrap_or(0);
        }
        Ok(s)
    }
}
