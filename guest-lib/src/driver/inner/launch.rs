//! Kernel launches (`<<<...>>>`, `cudaLaunchKernel`, `cudaLaunchKernelExC`,
//! cooperative launches), function attributes and occupancy.

use std::ffi::c_void;

use vmcuda_wire::op::{FuncAttributes, LaunchAttribute, LaunchKernel, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::device::properties;
use super::registration::{is_kernel, kernel, kernel_limits};
use super::{call_with, guard, stream_handle, RawHandle, Result};
use crate::abi::runtime::{Dim3, FuncAttributesC, LAUNCH_ATTRIBUTE_LEN};
use crate::client::Sink;
use crate::gate;
use crate::state::{self, LaunchConfig};
use crate::{caller, cudaError_t, function_facts};

impl Dim3 {
    fn array(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

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

/// # Safety
/// `args` holds one pointer per parameter of the kernel `host_fun` names, each
/// readable for that parameter's size (the launch contract).
unsafe fn launch(
    host_fun: usize,
    grid: Dim3,
    block: Dim3,
    args: *const *const u8,
    shared_mem: usize,
    stream: StreamHandle,
    attributes: Vec<LaunchAttribute>,
) -> Result<()> {
    // A registered kernel's host stub, or a kernel a library gave (`cudaKernel_t`).
    let (function, params) = match kernel(host_fun) {
        Ok(k) => k,
        Err(e) => crate::driver::module::function_of(host_fun).ok_or(e)?,
    };
    check_config(grid.array(), block.array())?;
    crate::capture::check_stream_use(stream)?;
    let total = params
        .iter()
        .map(|p| (p.offset + p.size) as usize)
        .max()
        .unwrap_or(0);
    let mut buffer = vec![0u8; total];
    for (i, p) in params.iter().enumerate() {
        // SAFETY: as `launch`'s caller promised.
        let arg = unsafe { caller::kernel_arg(args, i, p.size as usize) }?;
        buffer[p.offset as usize..(p.offset + p.size) as usize].copy_from_slice(arg);
    }
    let shared_mem = u32::try_from(shared_mem).map_err(|_| CudaStatus::ErrorInvalidValue)?;
    // A plain launch that passes every check CUDA makes before it returns is sent
    // without waiting (launches are asynchronous); anything else waits for the host's
    // answer, so its errors come back from the launch itself, as natively.
    let threads = block.x as i64 * block.y as i64 * block.z as i64;
    let fire_and_forget = attributes.is_empty()
        && super::known_stream(stream)
        && kernel_limits(host_fun).is_ok_and(|l| {
            shared_mem as i64 <= l.max_dynamic_shared_size_bytes as i64
                && threads <= l.max_threads_per_block as i64
        });
    let req = LaunchKernel {
        function,
        grid: grid.array(),
        block: block.array(),
        shared_mem,
        stream,
        attributes,
    };
    // The arguments are packed now (the caller's argument array dies with the call);
    // the submission may wait behind a host function on the stream.
    gate::submit(stream, move || {
        if fire_and_forget {
            super::post(&req, &buffer)
        } else {
            call_with(&req, &buffer, Sink::None)
        }
    })
}

pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared_mem: usize,
    stream: RawHandle,
) -> u32 {
    state::push_launch_config(LaunchConfig {
        grid: grid.array(),
        block: block.array(),
        shared_mem,
        stream: stream as usize,
    });
    0
}

pub extern "C" fn __cudaPopCallConfiguration(
    grid: *mut Dim3,
    block: *mut Dim3,
    shared_mem: *mut usize,
    stream: *mut RawHandle,
) -> cudaError_t {
    guard("__cudaPopCallConfiguration", || {
        let c = state::pop_launch_config().ok_or(CudaStatus::ErrorMissingConfiguration)?;
        let dim = |a: [u32; 3]| Dim3 {
            x: a[0],
            y: a[1],
            z: a[2],
        };
        // SAFETY: by __cudaPopCallConfiguration's contract `grid` is NULL or writable.
        unsafe { caller::write(grid, dim(c.grid)) }?;
        // SAFETY: by __cudaPopCallConfiguration's contract `block` is NULL or writable.
        unsafe { caller::write(block, dim(c.block)) }?;
        // SAFETY: by __cudaPopCallConfiguration's contract `shared_mem` is NULL or
        // writable.
        unsafe { caller::write(shared_mem, c.shared_mem) }?;
        // SAFETY: by __cudaPopCallConfiguration's contract `stream` is NULL or writable.
        unsafe { caller::write(stream, c.stream as RawHandle) }
    })
}

pub extern "C" fn __cudaGetKernel(
    kernel_out: *mut RawHandle,
    host_fun: *const c_void,
) -> cudaError_t {
    guard("__cudaGetKernel", || {
        // The kernel handle is the host stub's address: resolution stays lazy.
        if !is_kernel(host_fun as usize) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // SAFETY: by __cudaGetKernel's contract `kernel_out` is NULL or writable.
        unsafe { caller::write(kernel_out, host_fun as RawHandle) }
    })
}

pub extern "C" fn __cudaLaunchKernel(
    k: RawHandle,
    grid: Dim3,
    block: Dim3,
    args: *const *const u8,
    smem: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("__cudaLaunchKernel", || {
        // SAFETY: by __cudaLaunchKernel's contract its pointer arguments are as `launch`
        // requires.
        unsafe {
            launch(
                k as usize,
                grid,
                block,
                args,
                smem,
                stream_handle(stream, false),
                vec![],
            )
        }
    })
}

pub extern "C" fn __cudaLaunchKernel_ptsz(
    k: RawHandle,
    grid: Dim3,
    block: Dim3,
    args: *const *const u8,
    smem: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("__cudaLaunchKernel_ptsz", || {
        // SAFETY: by __cudaLaunchKernel_ptsz's contract its pointer arguments are as
        // `launch` requires.
        unsafe {
            launch(
                k as usize,
                grid,
                block,
                args,
                smem,
                stream_handle(stream, true),
                vec![],
            )
        }
    })
}

pub extern "C" fn cudaLaunchKernel(
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *const *const u8,
    smem: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaLaunchKernel", || {
        // SAFETY: by cudaLaunchKernel's contract its pointer arguments are as `launch`
        // requires.
        unsafe {
            launch(
                f as usize,
                grid,
                block,
                args,
                smem,
                stream_handle(stream, false),
                vec![],
            )
        }
    })
}

/// A kernel's name as its module has it (mangled), kept for the program for as long
/// as the process runs.
pub extern "C" fn cudaFuncGetName(
    name: *mut *const std::ffi::c_char,
    f: *const c_void,
) -> cudaError_t {
    guard("cudaFuncGetName", || {
        static NAMES: std::sync::Mutex<Vec<(usize, std::ffi::CString)>> =
            std::sync::Mutex::new(Vec::new());
        let found = super::registration::kernel_name(f as usize)
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)?;
        let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
        let at = match names.iter().position(|(k, _)| *k == f as usize) {
            Some(i) => names[i].1.as_ptr(),
            None => {
                let c = std::ffi::CString::new(found).map_err(|_| CudaStatus::ErrorInvalidValue)?;
                let p = c.as_ptr();
                names.push((f as usize, c));
                p
            }
        };
        // SAFETY: by cudaFuncGetName's contract `name` is NULL or writable.
        unsafe { caller::write(name, at) }
    })
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

pub extern "C" fn cudaFuncSetAttribute(
    f: *const c_void,
    attribute: i32,
    value: i32,
) -> cudaError_t {
    guard("cudaFuncSetAttribute", || {
        let (function, _) = kernel(f as usize)?;
        function_facts::set_attribute(function, attribute, value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::runtime::LaunchConfigC;

    #[test]
    fn c_layouts_match_cuda_13() {
        assert_eq!(std::mem::size_of::<Dim3>(), 12);
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
