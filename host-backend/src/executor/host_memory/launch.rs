//! Kernels on the host-memory test double: attributes, launches (checked, recorded
//! and logged, never run) and occupancy.

use tracing::{info, warn};
use vmcuda_wire::op::FuncAttributes;
use vmcuda_wire::CudaStatus;

use super::super::{ExecFunction, ExecResult, KernelShape, LaunchConfig};
use super::{append_record, graph, hex, Function, HostMemoryExecutor, LaunchRecord};
use crate::executor::{LaunchExec, MAX_HELD_LAUNCHES};

fn write_records(log: &mut std::fs::File, records: impl IntoIterator<Item = LaunchRecord>) {
    for record in records {
        if let Err(e) = append_record(log, &record) {
            warn!("cannot write launch log: {e}");
        }
    }
}

impl HostMemoryExecutor {
    pub(super) fn function(&self, f: ExecFunction) -> ExecResult<&Function> {
        self.functions
            .get(&f)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }

    pub(super) fn check_launch(
        &self,
        config: &LaunchConfig<'_>,
        function: &Function,
    ) -> ExecResult<()> {
        let shape = KernelShape {
            grid: config.grid,
            block: config.block,
            shared_mem: config.shared_mem,
        };
        Self::check_shape(&shape, function)?;
        self.check_stream(config.stream)
    }

    /// Refuse a shape the H200 cannot run, as the driver does, and a parameter buffer
    /// that is not `function`'s size.
    pub(super) fn check_shape(shape: &KernelShape, function: &Function) -> ExecResult<()> {
        let [bx, by, bz] = shape.block;
        let [gx, gy, gz] = shape.grid;
        let threads = bx as u64 * by as u64 * bz as u64;
        if threads == 0 || threads > 1024 || bx > 1024 || by > 1024 || bz > 64 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > i32::MAX as u32 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let smem_limit = 49152.max(function.max_dynamic_smem as u32);
        if shape.shared_mem > smem_limit {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    /// Whether `params` is as long as `function`'s parameters.
    pub(super) fn check_params(function: &Function, params: &[u8]) -> ExecResult<()> {
        let expected = function
            .params
            .last()
            .map_or(0, |p| (p.offset + p.size) as usize);
        if params.len() != expected {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }
}

impl LaunchExec for HostMemoryExecutor {
    fn func_attributes(&mut self, function: ExecFunction) -> ExecResult<FuncAttributes> {
        let f = self.function(function)?;
        Ok(FuncAttributes {
            max_threads_per_block: 1024,
            ptx_version: 90,
            binary_version: 90,
            max_dynamic_shared_size_bytes: f.max_dynamic_smem,
            preferred_shmem_carveout: f.carveout,
            ..Default::default()
        })
    }

    fn func_set_attribute(
        &mut self,
        function: ExecFunction,
        attribute: i32,
        value: i32,
    ) -> ExecResult<()> {
        let f = self
            .functions
            .get_mut(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        match attribute {
            8 if (0..=232_448).contains(&value) => f.max_dynamic_smem = value,
            9 if (-1..=100).contains(&value) => f.carveout = value,
            10..=15 => {}
            _ => return Err(CudaStatus::ErrorInvalidValue),
        }
        Ok(())
    }

    fn func_set_cache_config(&mut self, function: ExecFunction, config: u32) -> ExecResult<()> {
        self.function(function)?;
        if config > 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    fn launch(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        params: &[u8],
    ) -> ExecResult<()> {
        self.check_launch(config, self.function(function)?)?;
        // A field borrow (not `self.function`), so the launch log can be written below.
        let f = self
            .functions
            .get(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        Self::check_params(f, params)?;
        let op = || graph::Recorded::Launch {
            function,
            grid: config.grid,
            block: config.block,
            shared_mem: config.shared_mem,
            attributes: config.attributes.to_vec(),
            params: params.to_vec(),
        };
        if self.record(config.stream, op) {
            return Ok(());
        }
        let f = self
            .functions
            .get(&function)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        info!(
            kernel = %f.name, grid = ?config.grid, block = ?config.block,
            "kernel launch recorded, NOT executed (host-memory test executor)"
        );
        if let Some(log) = &mut self.launch_log {
            let record = LaunchRecord {
                kernel: f.name.clone(),
                grid: config.grid,
                block: config.block,
                shared_mem: config.shared_mem,
                stream: config.stream,
                params: hex(params),
                param_layout: f.params.iter().map(|p| (p.offset, p.size)).collect(),
            };
            match &mut self.held {
                Some(held) if held.len() + 1 < MAX_HELD_LAUNCHES => held.push(record),
                Some(held) => {
                    held.push(record);
                    write_records(log, held.drain(..));
                }
                None => write_records(log, [record]),
            }
        }
        Ok(())
    }

    fn send_held_launches(&mut self) -> ExecResult<()> {
        if let (Some(log), Some(held)) = (&mut self.launch_log, &mut self.held) {
            write_records(log, held.drain(..));
        }
        Ok(())
    }

    fn holds_launches(&self) -> bool {
        self.held.as_ref().is_some_and(|h| !h.is_empty())
    }

    /// The test double's device: 132 SMs, clusters of the shape's cluster dimension
    /// attribute (1 without one), each SM holding the blocks `occupancy_max_active_blocks`
    /// allows.
    fn occupancy_max_active_clusters(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32> {
        let threads = config.block.iter().product::<u32>() as i32;
        let per_sm =
            self.occupancy_max_active_blocks(function, threads, u64::from(config.shared_mem), 0)?;
        // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (4): three u32s.
        let cluster = config
            .attributes
            .iter()
            .find(|a| a.id == 4 && a.value.len() >= 12)
            .map(|a| {
                (0..3)
                    .map(|i| {
                        u32::from_le_bytes(a.value[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
                            .max(1)
                    })
                    .product::<u32>()
            })
            .unwrap_or(1) as i32;
        if cluster > 16 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(132 * per_sm / cluster)
    }

    /// The test double's clusters hold up to 8 blocks, the portable size, as long as
    /// one block of the shape fits on an SM.
    fn occupancy_max_potential_cluster_size(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32> {
        let threads = config.block.iter().product::<u32>() as i32;
        let per_sm =
            self.occupancy_max_active_blocks(function, threads, u64::from(config.shared_mem), 0)?;
        Ok(if per_sm > 0 { 8 } else { 0 })
    }

    fn occupancy_max_active_blocks(
        &mut self,
        function: ExecFunction,
        block_size: i32,
        dynamic_smem: u64,
        _flags: u32,
    ) -> ExecResult<i32> {
        self.function(function)?;
        if block_size <= 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let by_threads = 2048 / block_size.min(1024);
        let by_smem = if dynamic_smem == 0 {
            32
        } else {
            (233_472 / dynamic_smem.max(1)) as i32
        };
        Ok(by_threads.min(by_smem).min(32))
    }

    fn occupancy_available_dynamic_smem(
        &mut self,
        function: ExecFunction,
        num_blocks: i32,
        block_size: i32,
    ) -> ExecResult<u64> {
        self.function(function)?;
        if num_blocks <= 0 || block_size <= 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((233_472 / num_blocks as u64)
            .saturating_sub(1024)
            .min(232_448))
    }
}
