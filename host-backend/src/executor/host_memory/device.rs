//! Devices on the host-memory test double: the pretend devices' properties, limits,
//! cache configuration, peers and reset.

use cudarc::driver::sys::CUdevice_attribute as A;
use vmcuda_wire::op::{DeviceProperties, GpuStatus};
use vmcuda_wire::CudaStatus;

use super::super::ExecResult;
use super::{HostMemoryExecutor, DEFAULT_MEMORY};
use crate::executor::driver::Driver;
use crate::executor::{DeviceExec, DeviceRange, LEGACY_STREAM};

impl HostMemoryExecutor {
    /// The index of a visible device.
    pub(super) fn check_device(&self, device: i32) -> ExecResult<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&d| d < self.visible.len())
            .ok_or(CudaStatus::ErrorInvalidDevice)
    }

    pub(super) fn properties() -> DeviceProperties {
        // An H100-class shape, so programs that size launches from properties run.
        let attributes = [
            (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
            (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
            (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152),
            (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536),
            (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
            (A::CU_DEVICE_ATTRIBUTE_MAX_PITCH, i32::MAX),
            (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
            (A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_980_000),
            (A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512),
            (A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1),
            (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4),
            (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
            (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
            (A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3_201_000),
            (A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120),
            (A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 << 20),
            (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
            (A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2),
            (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
            (A::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32),
            (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
            (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
            (A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                233_472,
            ),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
                65536,
            ),
            (A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1),
            (
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                232_448,
            ),
            (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32),
            (
                A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                1024,
            ),
            (A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1),
            // The double serves virtual memory management (reservations, physical
            // allocations, mappings) and stream-ordered pools, as a GPU does; XLA
            // allocates only where the first is supported.
            (
                A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                1,
            ),
            (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        ];
        DeviceProperties {
            name: "vmcuda TEST DOUBLE (host-memory executor, no GPU)".into(),
            uuid: *b"vmcuda-hostmem-0",
            luid: [0; 8],
            luid_device_node_mask: 0,
            total_global_mem: DEFAULT_MEMORY,
            // Every attribute a CUDA 13 driver answers; the ones not listed are 0.
            attributes: (1..A::CU_DEVICE_ATTRIBUTE_MAX as u32)
                .map(|n| {
                    (
                        n,
                        attributes
                            .iter()
                            .find(|(a, _)| *a as u32 == n)
                            .map_or(0, |(_, v)| *v),
                    )
                })
                .collect(),
        }
    }
}

impl DeviceExec for HostMemoryExecutor {
    fn set_device(&mut self, device: i32) -> ExecResult<()> {
        self.current = self.check_device(device)?;
        Ok(())
    }

    fn device_properties(&mut self, device: i32) -> ExecResult<DeviceProperties> {
        let previous = self.current;
        self.set_device(device)?;
        let host_index = self.visible[self.current];
        self.current = previous;
        let mut p = Self::properties();
        p.total_global_mem = self.total_memory;
        if host_index != 0 {
            p.name = format!("{} #{host_index}", p.name);
        }
        p.uuid = Self::uuid(host_index);
        Ok(p)
    }

    /// Work here is done when its call returns.
    fn drain(&mut self) -> ExecResult<()> {
        Ok(())
    }

    /// Work here is done when its call returns: there is never any to wait for.
    fn keeper_drain(&self) -> Option<crate::compute::Drainer> {
        Some(std::sync::Arc::new(|| {}))
    }

    /// Work here is done when its call returns: the word is written at once.
    fn device_write_done(&mut self, word: DeviceRange, value: u32) -> ExecResult<()> {
        self.stream_write_value32(LEGACY_STREAM, word.ptr(), value, 0)
    }

    fn device_reset(&mut self) -> ExecResult<()> {
        // Only the current device's memory and objects go, as with a real reset.
        let here = self.current;
        let on_here: Vec<u64> = self
            .device_of
            .iter()
            .filter(|(_, d)| **d == here)
            .map(|(id, _)| *id)
            .collect();
        for id in on_here {
            self.release(id);
            self.pool_forget(id);
            self.streams.remove(&id);
            self.events.remove(&id);
            self.device_of.remove(&id);
        }
        self.graphs_reset();
        let memory = &self.memory;
        for module in self.modules.values_mut() {
            module
                .globals
                .retain(|_, (ptr, _, _)| memory.contains_key(ptr));
        }
        Ok(())
    }

    fn get_limit(&mut self, limit: u32) -> ExecResult<u64> {
        self.limits
            .get(&limit)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> ExecResult<()> {
        match self.limits.get_mut(&limit) {
            Some(v) => {
                *v = value;
                Ok(())
            }
            None => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn can_access_peer(&mut self, device: i32, peer: i32) -> ExecResult<bool> {
        self.check_device(device)?;
        self.check_device(peer)?;
        // The pretend devices share no memory path: none is another's peer, and a
        // device is not its own.
        Ok(false)
    }

    fn p2p_attribute(&mut self, attr: u32, src: i32, dst: i32) -> ExecResult<i32> {
        self.check_device(src)?;
        self.check_device(dst)?;
        if !(1..=5).contains(&attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if src == dst {
            // The driver asks for two different devices.
            return Err(CudaStatus::ErrorInvalidDevice);
        }
        // No link between them: every attribute is 0, as the driver says for GPUs
        // without one.
        Ok(0)
    }

    fn gpu_status(&mut self, device: i32) -> ExecResult<GpuStatus> {
        self.check_device(device)?;
        // A test double's readings: fixed, plausible, and plainly not a GPU's (no fan,
        // no clocks).
        Ok(GpuStatus {
            utilization_gpu: Some(0),
            utilization_memory: Some(0),
            temperature_c: Some(30),
            power_mw: Some(50_000),
            power_limit_mw: Some(700_000),
            performance_state: Some(0),
            driver_version: "host-memory".into(),
            memory_total: Self::properties().total_global_mem,
            ..GpuStatus::default()
        })
    }

    /// No affinity is set on the double's contexts: all of its device's SMs, 4 as its
    /// `MULTIPROCESSOR_COUNT` attribute says.
    fn exec_affinity_sm_count(&mut self) -> ExecResult<u32> {
        Ok(4)
    }

    fn texture_1d_linear_max_width(&mut self, _format: u32, _channels: u32) -> ExecResult<u64> {
        // The double's devices take 2^28 elements of any format, as their
        // maxTexture1DLinear says.
        Ok(1 << 28)
    }

    fn atomic_capabilities(
        &mut self,
        operations: &[u32],
        peer: Option<i32>,
    ) -> ExecResult<Vec<u32>> {
        if let Some(peer) = peer {
            self.check_device(peer)?;
        }
        // The double's devices reach neither host memory nor each other atomically.
        Ok(vec![0; operations.len()])
    }

    fn flush_gpu_direct_rdma_writes(&mut self, _to_all_devices: bool) -> ExecResult<()> {
        // No RDMA writes ever reach host memory behind the double's back.
        Ok(())
    }
}
