//! Kernels on the device: function attributes, launches and occupancy.

use std::ffi::{c_char, c_int, c_uint};
use std::ptr;

use cudarc::driver::{result, sys};
use vmcuda_wire::op::{FuncAttributes, LaunchAttribute};
use vmcuda_wire::CudaStatus;

use super::super::{ExecFunction, ExecResult, LaunchConfig};
use super::{check, launch_batch, status, to_usize, CudaExecutor};
use crate::executor::LaunchExec;

/// Size of `CUlaunchAttributeValue` (and of the runtime's `cudaLaunchAttributeValue`).
const LAUNCH_ATTRIBUTE_VALUE_LEN: usize = 64;

/// Launch-shape limits of a device, for the checks the runtime makes itself.
#[derive(Clone, Copy)]
pub(super) struct LaunchLimits {
    max_threads: u64,
    max_block: [u64; 3],
    max_grid: [u64; 3],
}

/// The settable `cudaFuncAttribute`s (8..=15) have the numbers of the matching
/// `CUfunction_attribute`s.
fn func_attribute_from(attribute: i32) -> Option<sys::CUfunction_attribute> {
    let attribute = u32::try_from(attribute).ok()?;
    enum_from_u32!(
        attribute,
        CUfunction_attribute,
        [
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
            CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH,
            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
        ]
    )
}

/// The runtime's `cudaLaunchAttributeID` numbers are `CUlaunchAttributeID`'s.
pub(super) fn launch_attribute_id_from(id: u32) -> Option<sys::CUlaunchAttributeID> {
    enum_from_u32!(
        id,
        CUlaunchAttributeID,
        [
            CU_LAUNCH_ATTRIBUTE_IGNORE,
            CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
            CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
            CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
            CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
            CU_LAUNCH_ATTRIBUTE_PRIORITY,
            CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
            CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
            CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
            CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
            CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
            CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
        ]
    )
}

impl CudaExecutor {
    /// The kernel's `CUfunction` in device `idx`'s context, which must be current.
    pub(super) fn function_in_context(
        &mut self,
        function: ExecFunction,
        idx: usize,
    ) -> ExecResult<sys::CUfunction> {
        if let Some(&f) = self.function_cache.get(&(function, idx)) {
            return Ok(f);
        }
        let kernel = self.kernel(function)?;
        let mut f: sys::CUfunction = ptr::null_mut();
        // SAFETY: out-pointer to a local; `kernel` belongs to a loaded library.
        check(unsafe { sys::cuKernelGetFunction(&mut f, kernel) })?;
        self.function_cache.insert((function, idx), f);
        Ok(f)
    }

    /// The executor's id of the kernel a node's driver parameters name: its library
    /// kernel, or the kernel whose function in some context it is.
    pub(super) fn function_of(
        &self,
        func: sys::CUfunction,
        kern: sys::CUkernel,
    ) -> ExecResult<ExecFunction> {
        let by_kernel = kern as usize as ExecFunction;
        if !kern.is_null() && self.functions.contains_key(&by_kernel) {
            return Ok(by_kernel);
        }
        self.function_cache
            .iter()
            .find(|(_, &f)| !func.is_null() && f == func)
            .map(|(&(id, _), _)| id)
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    /// Impossible shapes are refused before the driver sees them, with the code CUDA
    /// 13's runtime gives (cudaErrorInvalidValue, measured on the H200).
    pub(super) fn check_shape(
        &mut self,
        idx: usize,
        grid: [u32; 3],
        block: [u32; 3],
    ) -> ExecResult<()> {
        let limits = self.launch_limits(idx)?;
        let block = block.map(u64::from);
        let grid = grid.map(u64::from);
        let bad_shape = block.contains(&0)
            || grid.contains(&0)
            || block.iter().product::<u64>() > limits.max_threads
            || block.iter().zip(&limits.max_block).any(|(b, m)| b > m)
            || grid.iter().zip(&limits.max_grid).any(|(g, m)| g > m);
        if bad_shape {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    fn launch_limits(&mut self, idx: usize) -> ExecResult<LaunchLimits> {
        if let Some(limits) = self.devices[idx].limits {
            return Ok(limits);
        }
        let handle = self.devices[idx].handle;
        let get = |attr: sys::CUdevice_attribute| -> ExecResult<u64> {
            // SAFETY: `handle` came from cuDeviceGet.
            let v = unsafe { result::device::get_attribute(handle, attr) }.map_err(status)?;
            Ok(u64::try_from(v).unwrap_or(0))
        };
        use sys::CUdevice_attribute as A;
        let limits = LaunchLimits {
            max_threads: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
        };
        self.devices[idx].limits = Some(limits);
        Ok(limits)
    }

    /// One wire launch attribute as the driver's `CUlaunchAttribute`.
    fn launch_attribute(&self, attr: &LaunchAttribute) -> ExecResult<sys::CUlaunchAttribute> {
        if attr.value.len() > LAUNCH_ATTRIBUTE_VALUE_LEN {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = launch_attribute_id_from(attr.id).ok_or(CudaStatus::ErrorInvalidValue)?;
        if matches!(
            id,
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
                | sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT
        ) {
            // The value starts with a CUevent: it must be one of ours.
            let mut handle = [0u8; 8];
            for (d, s) in handle.iter_mut().zip(&attr.value) {
                *d = *s;
            }
            self.event(u64::from_ne_bytes(handle))?;
        }
        let mut pad = [0 as c_char; LAUNCH_ATTRIBUTE_VALUE_LEN];
        for (d, s) in pad.iter_mut().zip(&attr.value) {
            *d = *s as c_char;
        }
        Ok(sys::CUlaunchAttribute {
            id,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue { pad },
        })
    }
}

/// A driver query of the cluster occupancy of a launch (`cuOccupancyMaxActiveClusters`,
/// `cuOccupancyMaxPotentialClusterSize`).
type ClusterQuery =
    unsafe fn(*mut i32, sys::CUfunction, *const sys::CUlaunchConfig) -> sys::CUresult;

impl CudaExecutor {
    /// Ask `query` about `function` launched as `config` says, in the current context.
    fn cluster_occupancy(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        query: ClusterQuery,
    ) -> ExecResult<i32> {
        let idx = self.bind()?;
        let func = self.function_in_context(function, idx)?;
        let mut attrs = config
            .attributes
            .iter()
            .map(|a| self.launch_attribute(a))
            .collect::<ExecResult<Vec<_>>>()?;
        let cfg = launch_config(config, ptr::null_mut(), &mut attrs)?;
        let mut answer: i32 = 0;
        // SAFETY: `func` belongs to the current context; `cfg` and the attributes it
        // points to outlive the call; `answer` is a local.
        check(unsafe { query(&mut answer, func, &cfg) })?;
        Ok(answer)
    }
}

impl LaunchExec for CudaExecutor {
    fn func_attributes(&mut self, function: ExecFunction) -> ExecResult<FuncAttributes> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let handle = self.devices[idx].handle;
        let get = |attr: sys::CUfunction_attribute| -> ExecResult<i32> {
            let mut value: c_int = 0;
            // SAFETY: out-pointer to a local; `kernel` belongs to a loaded library;
            // `handle` came from cuDeviceGet.
            check(unsafe { sys::cuKernelGetAttribute(&mut value, attr, kernel, handle) })?;
            Ok(value)
        };
        // The cluster attributes are answered by every device this runs on (sm_90+);
        // should one fail elsewhere, it reads as 0 rather than failing the call.
        let optional = |attr| get(attr).unwrap_or(0);
        let bytes = |v: i32| u64::try_from(v).unwrap_or(0);
        use sys::CUfunction_attribute as F;
        Ok(FuncAttributes {
            shared_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?),
            const_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?),
            local_size_bytes: bytes(get(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
            max_threads_per_block: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            num_regs: get(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            ptx_version: get(F::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
            binary_version: get(F::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
            cache_mode_ca: get(F::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA)?,
            max_dynamic_shared_size_bytes: get(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            preferred_shmem_carveout: get(F::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)?,
            cluster_dim_must_be_set: optional(F::CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET),
            required_cluster_width: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH),
            required_cluster_height: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT),
            required_cluster_depth: optional(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH),
            cluster_scheduling_policy_preference: optional(
                F::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            ),
            non_portable_cluster_size_allowed: optional(
                F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            ),
        })
    }

    fn func_set_attribute(
        &mut self,
        function: ExecFunction,
        attribute: i32,
        value: i32,
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let attr = func_attribute_from(attribute).ok_or(CudaStatus::ErrorInvalidValue)?;
        let handle = self.devices[idx].handle;
        // SAFETY: `kernel` belongs to a loaded library; `handle` came from cuDeviceGet.
        check(unsafe { sys::cuKernelSetAttribute(attr, value, kernel, handle) })
    }

    fn func_set_cache_config(&mut self, function: ExecFunction, config: u32) -> ExecResult<()> {
        let idx = self.bind()?;
        let kernel = self.kernel(function)?;
        let config = cache_config_from(config).ok_or(CudaStatus::ErrorInvalidValue)?;
        let handle = self.devices[idx].handle;
        // SAFETY: `kernel` belongs to a loaded library; `handle` came from cuDeviceGet.
        check(unsafe { sys::cuKernelSetCacheConfig(kernel, config, handle) })
    }

    fn occupancy_max_active_clusters(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32> {
        self.cluster_occupancy(function, config, sys::cuOccupancyMaxActiveClusters)
    }

    fn occupancy_max_potential_cluster_size(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
    ) -> ExecResult<i32> {
        self.cluster_occupancy(function, config, sys::cuOccupancyMaxPotentialClusterSize)
    }

    fn launch(
        &mut self,
        function: ExecFunction,
        config: &LaunchConfig<'_>,
        params: &[u8],
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        // The kernel's function in this context, looked up once: launching the
        // library's kernel handle instead makes the driver find it on every launch.
        let func = self.function_in_context(function, idx)?;
        let s = self.stream(config.stream)?;

        self.check_shape(idx, config.grid, config.block)?;

        let mut attrs = config
            .attributes
            .iter()
            .map(|a| self.launch_attribute(a))
            .collect::<ExecResult<Vec<_>>>()?;
        let key = (idx, config.stream);
        let hold = attrs.is_empty() && self.batch.may_hold(key);
        // Held launches go first: before one that goes at once, or before one on
        // another stream is held.
        let sent = if !hold || self.batch.held_stream().is_some_and(|k| k != key) {
            self.batch.send()
        } else {
            Ok(())
        };
        if hold {
            let shape = (&config.grid, &config.block, config.shared_mem);
            self.batch.hold(key, s, func, shape, params);
            if self.batch.is_full() {
                return sent.and(self.batch.send());
            }
            return sent;
        }

        // Each parameter must sit at an address aligned as it is (up to 16 bytes):
        // copy the buffer when its start is not 16-byte aligned.
        let aligned: Vec<u128>;
        let buffer: *const u8 = if (params.as_ptr() as usize) & 15 == 0 {
            params.as_ptr()
        } else {
            aligned = launch_batch::aligned_words(params).collect();
            aligned.as_ptr().cast()
        };
        if attrs.is_empty() {
            let shape = (config.grid, config.block, config.shared_mem);
            let r =
                launch_batch::launch_now(func, shape.0, shape.1, shape.2, s, buffer, params.len());
            return sent.and(r);
        }
        let cfg = launch_config(config, s, &mut attrs)?;
        let mut size: usize = params.len();
        let mut extra = launch_batch::extra_list(buffer, &mut size);
        let extra_ptr = if params.is_empty() {
            ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };
        // SAFETY: `func` belongs to the current context (bound above); `cfg` and the
        // attribute array it points to live until the call returns; `extra` is the
        // END-terminated list whose buffer (`size` bytes) and size word outlive the
        // call, and the driver copies the parameters before returning.
        let r = unsafe { sys::cuLaunchKernelEx(&cfg, func, ptr::null_mut(), extra_ptr) };
        sent.and(check(r))
    }

    fn send_held_launches(&mut self) -> ExecResult<()> {
        let Some((idx, _)) = self.batch.held_stream() else {
            return Ok(());
        };
        // The held launches' context: the current one, unless a call between changed it.
        let ctx = self.context(idx)?;
        if result::ctx::get_current().map_err(status)? != Some(ctx) {
            // SAFETY: `ctx` is a primary context this executor retained and holds.
            unsafe { result::ctx::set_current(ctx) }.map_err(status)?;
        }
        let sent = self.batch.send();
        self.bind()?;
        sent
    }

    fn holds_launches(&self) -> bool {
        self.batch.held_stream().is_some()
    }

    fn occupancy_max_active_blocks(
        &mut self,
        function: ExecFunction,
        block_size: i32,
        dynamic_smem: u64,
        flags: u32,
    ) -> ExecResult<i32> {
        let idx = self.bind()?;
        let f = self.function_in_context(function, idx)?;
        let smem = to_usize(dynamic_smem)?;
        // SAFETY: `f` is the kernel's function in the current context; the driver
        // judges the flags.
        unsafe {
            result::occupancy::max_active_block_per_multiprocessor_with_flags(
                f, block_size, smem, flags,
            )
        }
        .map_err(status)
    }

    fn occupancy_available_dynamic_smem(
        &mut self,
        function: ExecFunction,
        num_blocks: i32,
        block_size: i32,
    ) -> ExecResult<u64> {
        let idx = self.bind()?;
        let f = self.function_in_context(function, idx)?;
        // SAFETY: `f` is the kernel's function in the current context.
        let bytes = unsafe {
            result::occupancy::available_dynamic_shared_mem_per_block(f, num_blocks, block_size)
        }
        .map_err(status)?;
        Ok(bytes as u64)
    }
}

/// The driver's launch configuration for `config` on `stream`, pointing at `attrs`
/// (which must outlive its use).
fn launch_config(
    config: &LaunchConfig<'_>,
    stream: sys::CUstream,
    attrs: &mut [sys::CUlaunchAttribute],
) -> ExecResult<sys::CUlaunchConfig> {
    Ok(sys::CUlaunchConfig {
        gridDimX: config.grid[0],
        gridDimY: config.grid[1],
        gridDimZ: config.grid[2],
        blockDimX: config.block[0],
        blockDimY: config.block[1],
        blockDimZ: config.block[2],
        sharedMemBytes: config.shared_mem,
        hStream: stream,
        attrs: if attrs.is_empty() {
            ptr::null_mut()
        } else {
            attrs.as_mut_ptr()
        },
        numAttrs: c_uint::try_from(attrs.len()).map_err(|_| CudaStatus::ErrorInvalidValue)?,
    })
}

/// The runtime's `cudaFuncCache` numbers are `CUfunc_cache`'s.
pub(super) fn cache_config_from(config: u32) -> Option<sys::CUfunc_cache> {
    enum_from_u32!(
        config,
        CUfunc_cache,
        [
            CU_FUNC_CACHE_PREFER_NONE,
            CU_FUNC_CACHE_PREFER_SHARED,
            CU_FUNC_CACHE_PREFER_L1,
            CU_FUNC_CACHE_PREFER_EQUAL,
        ]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_numbers_map_to_driver_enums() {
        assert_eq!(
            func_attribute_from(8),
            Some(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        );
        assert_eq!(
            func_attribute_from(15),
            Some(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
        );
        assert_eq!(func_attribute_from(7), None);
        assert_eq!(func_attribute_from(-1), None);
        assert_eq!(launch_attribute_id_from(15), None);
        assert_eq!(
            launch_attribute_id_from(16),
            Some(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
        );
    }

    #[test]
    fn launch_attribute_sizes_match_the_runtime() {
        assert_eq!(
            std::mem::size_of::<sys::CUlaunchAttributeValue>(),
            LAUNCH_ATTRIBUTE_VALUE_LEN
        );
        assert_eq!(
            std::mem::size_of::<sys::CUlaunchAttribute>(),
            8 + LAUNCH_ATTRIBUTE_VALUE_LEN
        );
    }
}
