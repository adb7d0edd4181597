//! Kernel launches (`<<<...>>>`, `cudaLaunchKernel`, `cudaLaunchKernelExC`,
//! cooperative launches), function attributes and occupancy.

use vmcuda_wire::op::{FuncAttributes, LaunchAttribute};
use vmcuda_wire::CudaStatus;

use super::device::properties;

use super::Result;
use crate::abi::runtime::{FuncAttributesC, LAUNCH_ATTRIBUTE_LEN};
use crate::caller;
use crate::state::{self};

/// `count` launch attributes (`cudaLaunchAttribute`, laid out as `CUlaunchAttribute`)
/// as they travel.
///
/// # Safety
/// `attrs` is NULL (with `count` 0) or holds `count` readable attributes.
pub(crate) unsafe fn launch_attributes(
    attrs: *const u8,
    count: u32,
) -> Result<Vec<LaunchAttribute>> {
    // SAFETY: as `launch_attributes`'s caller promised.
    let raw = unsafe { caller::bytes(attrs, count as usize * LAUNCH_ATTRIBUTE_LEN) }?;
    Ok(raw
        .chunks_exact(LAUNCH_ATTRIBUTE_LEN)
        .map(|a| LaunchAttribute {
            id: u32::from_le_bytes(a[..4].try_into().expect("4 bytes")),
            value: a[8..].to_vec(),
        })
        .collect())
}

/// Refuse launch shapes the device cannot run, as the runtime does before the driver
/// (CUDA 13 reports them as `cudaErrorInvalidValue`, measured against native).
pub(crate) fn check_config(grid: [u32; 3], block: [u32; 3]) -> Result<()> {
    let props = properties(state::current_device())?;
    let attr = |a: u32| props.attribute(a).unwrap_or(i32::MAX) as i64;
    let threads = block.iter().map(|v| *v as i64).product::<i64>();
    let block_ok = block
        .iter()
        .zip(2..=4)
        .all(|(v, a)| *v >= 1 && (*v as i64) <= attr(a));
    let grid_ok = grid
        .iter()
        .zip(5..=7)
        .all(|(v, a)| *v >= 1 && (*v as i64) <= attr(a));
    if !block_ok || !grid_ok || threads > attr(1) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(())
}

impl From<FuncAttributes> for FuncAttributesC {
    fn from(a: FuncAttributes) -> Self {
        FuncAttributesC {
            shared_size_bytes: a.shared_size_bytes as usize,
            const_size_bytes: a.const_size_bytes as usize,
            local_size_bytes: a.local_size_bytes as usize,
            max_threads_per_block: a.max_threads_per_block,
            num_regs: a.num_regs,
            ptx_version: a.ptx_version,
            binary_version: a.binary_version,
            cache_mode_ca: a.cache_mode_ca,
            max_dynamic_shared_size_bytes: a.max_dynamic_shared_size_bytes,
            preferred_shmem_carveout: a.preferred_shmem_carveout,
            cluster_dim_must_be_set: a.cluster_dim_must_be_set,
            required_cluster_width: a.required_cluster_width,
            required_cluster_height: a.required_cluster_height,
            required_cluster_depth: a.required_cluster_depth,
            cluster_scheduling_policy_preference: a.cluster_scheduling_policy_preference,
            non_portable_cluster_size_allowed: a.non_portable_cluster_size_allowed,
            reserved: [0; 16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::runtime::LaunchConfigC;

    #[test]
    fn c_layouts_match_cuda_13() {
        assert_eq!(std::mem::size_of::<crate::abi::runtime::Dim3>(), 12);
        assert_eq!(std::mem::size_of::<LaunchConfigC>(), 56);
        assert_eq!(
            std::mem::size_of::<FuncAttributesC>(),
            24 + 13 * 4 + 16 * 4 + 4
        );
        assert_eq!(
            std::mem::size_of::<cudarc::runtime::sys::cudaLaunchAttribute>(),
            LAUNCH_ATTRIBUTE_LEN
        );
    }
}
