//! The live readings (utilization, temperature, power, clocks), the guest's own
//! processes and the topology, as the host reports them for this guest.

use super::*;

// ---- live readings ----

#[export_name = "__vmcuda_nvmlDeviceGetUtilizationRates"]
pub extern "C" fn nvml_device_get_utilization_rates(
    device: Handle,
    out: *mut [c_uint; 2],
) -> NvmlReturn {
    guard(true, || {
        let s = status(index_of(device)?)?;
        let u = [reading(s.utilization_gpu)?, reading(s.utilization_memory)?];
        // SAFETY: by the function's contract `out` is NULL or a writable nvmlUtilization_t.
        unsafe { put(out, u) }
    })
}

/// A reading of `device` by `pick`, written through `out`.
fn read_one(
    device: Handle,
    out: *mut c_uint,
    pick: impl Fn(&GpuStatus) -> Option<u32>,
) -> NvmlReturn {
    guard(true, || {
        let v = reading(pick(&status(index_of(device)?)?))?;
        // SAFETY: by the calling export's contract `out` is NULL or writable.
        unsafe { put(out, v) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetTemperature"]
pub extern "C" fn nvml_device_get_temperature(
    device: Handle,
    sensor: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    if sensor != 0 {
        return ERROR_INVALID_ARGUMENT;
    }
    read_one(device, out, |s| s.temperature_c)
}

const TEMPERATURE_V1: c_uint = 0x0100_000C;

#[export_name = "__vmcuda_nvmlDeviceGetTemperatureV"]
pub extern "C" fn nvml_device_get_temperature_v(
    device: Handle,
    out: *mut TemperatureV1,
) -> NvmlReturn {
    guard(true, || {
        // SAFETY: by the function's contract `out` is NULL or a readable struct.
        let mut t = unsafe { caller::read(out) }.map_err(|_| ERROR_INVALID_ARGUMENT)?;
        if t.version != TEMPERATURE_V1 {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        if t.sensor != 0 {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        t.temperature = reading(status(index_of(device)?)?.temperature_c)? as c_int;
        // SAFETY: as above, writable.
        unsafe { put(out, t) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetPowerUsage"]
pub extern "C" fn nvml_device_get_power_usage(device: Handle, out: *mut c_uint) -> NvmlReturn {
    read_one(device, out, |s| s.power_mw)
}

#[export_name = "__vmcuda_nvmlDeviceGetEnforcedPowerLimit"]
pub extern "C" fn nvml_device_get_enforced_power_limit(
    device: Handle,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| s.power_limit_mw)
}

#[export_name = "__vmcuda_nvmlDeviceGetPowerManagementLimit"]
pub extern "C" fn nvml_device_get_power_management_limit(
    device: Handle,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| s.power_limit_mw)
}

#[export_name = "__vmcuda_nvmlDeviceGetPerformanceState"]
pub extern "C" fn nvml_device_get_performance_state(
    device: Handle,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| s.performance_state)
}

#[export_name = "__vmcuda_nvmlDeviceGetFanSpeed"]
pub extern "C" fn nvml_device_get_fan_speed(device: Handle, out: *mut c_uint) -> NvmlReturn {
    read_one(device, out, |s| s.fan_percent)
}

#[export_name = "__vmcuda_nvmlDeviceGetFanSpeed_v2"]
pub extern "C" fn nvml_device_get_fan_speed_v2(
    device: Handle,
    fan: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| s.fan_percent.filter(|_| fan == 0))
}

/// `nvmlClockType_t`: graphics, SM, memory (video is not reported).
fn clock(clocks: Option<[u32; 3]>, kind: c_uint) -> Option<u32> {
    clocks.and_then(|c| c.get(kind as usize).copied())
}

#[export_name = "__vmcuda_nvmlDeviceGetClockInfo"]
pub extern "C" fn nvml_device_get_clock_info(
    device: Handle,
    kind: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| clock(s.clocks_mhz, kind))
}

#[export_name = "__vmcuda_nvmlDeviceGetMaxClockInfo"]
pub extern "C" fn nvml_device_get_max_clock_info(
    device: Handle,
    kind: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    read_one(device, out, |s| clock(s.max_clocks_mhz, kind))
}

#[export_name = "__vmcuda_nvmlDeviceGetComputeMode"]
pub extern "C" fn nvml_device_get_compute_mode(device: Handle, mode: *mut c_uint) -> NvmlReturn {
    guard(true, || {
        index_of(device)?;
        // NVML_COMPUTEMODE_DEFAULT: any number of programs share the GPU, as the
        // guest's do.
        // SAFETY: by the function's contract `mode` is NULL or writable.
        unsafe { put(mode, 0) }
    })
}

// ---- processes ----

/// Write the guest's processes in `D`'s layout: NVML's count-in/count-out contract.
///
/// # Safety
/// `count` is NULL or readable and writable; `infos` is NULL or writable for `*count`
/// entries.
unsafe fn processes<D: Copy>(
    device: Handle,
    count: *mut c_uint,
    infos: *mut D,
    make: impl Fn(u32, u64) -> D,
) -> NvmlReturn {
    guard(true, || {
        let list = status(index_of(device)?)?.processes;
        // SAFETY: by the caller's promise `count` is NULL or readable.
        let room = unsafe { caller::read(count) }.map_err(|_| ERROR_INVALID_ARGUMENT)? as usize;
        // SAFETY: as above, writable.
        unsafe { put(count, list.len() as c_uint) }?;
        if room < list.len() {
            return Err(ERROR_INSUFFICIENT_SIZE);
        }
        for (i, p) in list.iter().enumerate() {
            // SAFETY: `infos` has room for `room` entries (the caller's promise), and
            // `i < list.len() <= room`.
            unsafe { put(infos.wrapping_add(i), make(p.pid, p.used_memory)) }?;
        }
        Ok(())
    })
}

fn process(pid: u32, used: u64) -> ProcessInfo {
    // No MIG instances: NVML's "invalid" id for both.
    ProcessInfo {
        pid,
        used_gpu_memory: used,
        gpu_instance_id: 0xffff_ffff,
        compute_instance_id: 0xffff_ffff,
    }
}

#[export_name = "__vmcuda_nvmlDeviceGetComputeRunningProcesses"]
pub extern "C" fn nvml_device_get_compute_running_processes(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    // SAFETY: by the function's contract the pointers are as `processes` needs.
    unsafe {
        processes(device, count, infos, |pid, used| ProcessInfoV1 {
            pid,
            used_gpu_memory: used,
        })
    }
}

#[export_name = "__vmcuda_nvmlDeviceGetComputeRunningProcesses_v2"]
pub extern "C" fn nvml_device_get_compute_running_processes_v2(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: by the function's contract the pointers are as `processes` needs.
    unsafe { processes(device, count, infos, process) }
}

#[export_name = "__vmcuda_nvmlDeviceGetComputeRunningProcesses_v3"]
pub extern "C" fn nvml_device_get_compute_running_processes_v3(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: by the function's contract the pointers are as `processes` needs.
    unsafe { processes(device, count, infos, process) }
}

/// Graphics processes: a guest runs none on the host's GPU.
fn no_processes(device: Handle, count: *mut c_uint) -> NvmlReturn {
    guard(true, || {
        index_of(device)?;
        // SAFETY: by the calling export's contract `count` is NULL or writable.
        unsafe { put(count, 0) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetGraphicsRunningProcesses"]
pub extern "C" fn nvml_device_get_graphics_running_processes(
    device: Handle,
    count: *mut c_uint,
    _infos: *mut c_void,
) -> NvmlReturn {
    no_processes(device, count)
}

#[export_name = "__vmcuda_nvmlDeviceGetGraphicsRunningProcesses_v2"]
pub extern "C" fn nvml_device_get_graphics_running_processes_v2(
    device: Handle,
    count: *mut c_uint,
    _infos: *mut c_void,
) -> NvmlReturn {
    no_processes(device, count)
}

#[export_name = "__vmcuda_nvmlDeviceGetGraphicsRunningProcesses_v3"]
pub extern "C" fn nvml_device_get_graphics_running_processes_v3(
    device: Handle,
    count: *mut c_uint,
    _infos: *mut c_void,
) -> NvmlReturn {
    no_processes(device, count)
}

// ---- topology ----

/// `nvmlGpuP2PStatus_t`: OK, or NOT_SUPPORTED.
const P2P_OK: c_uint = 0;
const P2P_NOT_SUPPORTED: c_uint = 5;

#[export_name = "__vmcuda_nvmlDeviceGetP2PStatus"]
pub extern "C" fn nvml_device_get_p2p_status(
    a: Handle,
    b: Handle,
    _caps: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    guard(true, || {
        let (a, b) = (index_of(a)?, index_of(b)?);
        let mut can = 0;
        let ok =
            a == b || (inner::device::cudaDeviceCanAccessPeer(&mut can, a, b) == 0 && can == 1);
        // SAFETY: by the function's contract `out` is NULL or writable.
        unsafe { put(out, if ok { P2P_OK } else { P2P_NOT_SUPPORTED }) }
    })
}

#[export_name = "__vmcuda_nvmlDeviceGetFieldValues"]
pub extern "C" fn nvml_device_get_field_values(
    device: Handle,
    count: c_int,
    values: *mut FieldValue,
) -> NvmlReturn {
    guard(true, || {
        index_of(device)?;
        // No field is offered: each says so in its own return code, as NVML does for
        // fields a GPU lacks.
        for i in 0..count.max(0) as usize {
            // SAFETY: by the function's contract `values` holds `count` entries.
            let mut v = unsafe { caller::read(values.wrapping_add(i)) }
                .map_err(|_| ERROR_INVALID_ARGUMENT)?;
            v.nvml_return = ERROR_NOT_SUPPORTED;
            // SAFETY: as above, writable.
            unsafe { put(values.wrapping_add(i), v) }?;
        }
        Ok(())
    })
}
