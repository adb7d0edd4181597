//! Launches (`cuLaunchKernel` and its kin, the kernel parameters packed from the
//! program's arrays), occupancy, and kernel nodes' launches and kept parameters.

use super::*;

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`
/// (the `extra` array's keys).
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// The size of a kernel's parameter block.
pub(crate) fn param_bytes(params: &[ParamInfo]) -> usize {
    params
        .iter()
        .map(|p| (p.offset + p.size) as usize)
        .max()
        .unwrap_or(0)
}

/// A launch of the older ABI (`launch_legacy`): function `f` with the parameter buffer
/// `buffer`, as `cuLaunchKernel` launches with `CU_LAUNCH_PARAM_BUFFER_POINTER`.
pub(crate) fn launch_buffer(
    f: *mut c_void,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: RawHandle,
    buffer: Vec<u8>,
) -> Result<()> {
    let (function, params) = function(f)?;
    crate::driver::inner::launch::check_config(grid, block)?;
    launch_packed(
        function,
        &params,
        grid,
        block,
        shared_mem,
        stream,
        buffer,
        Vec::new(),
    )
}

/// The packed parameter buffer from `kernelParams` or from `extra`.
///
/// # Safety
/// `args` is NULL or holds one pointer per parameter in `params`, each readable
/// for its size; `extra` is NULL or a `CU_LAUNCH_PARAM_END`-terminated list as
/// `cuLaunchKernel` documents it.
unsafe fn pack(
    params: &[ParamInfo],
    args: *const *const u8,
    extra: *const *const c_void,
) -> Result<Vec<u8>> {
    let total = param_bytes(params);
    if !args.is_null() {
        let mut buffer = vec![0u8; total];
        for (i, p) in params.iter().enumerate() {
            // SAFETY: as `pack`'s caller promised.
            let arg = unsafe { caller::kernel_arg(args, i, p.size as usize) }?;
            buffer[p.offset as usize..(p.offset + p.size) as usize].copy_from_slice(arg);
        }
        return Ok(buffer);
    }
    if extra.is_null() {
        return if total == 0 {
            Ok(Vec::new())
        } else {
            Err(CudaStatus::ErrorInvalidValue)
        };
    }
    let (mut pointer, mut size) = (None, None);
    for i in (0..64).step_by(2) {
        // SAFETY: as `pack`'s caller promised.
        let key = unsafe { caller::read(extra.wrapping_add(i)) }? as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: as `pack`'s caller promised.
        let value = unsafe { caller::read(extra.wrapping_add(i + 1)) }?;
        match key {
            PARAM_BUFFER_POINTER => pointer = Some(value as *const u8),
            // SAFETY: as `pack`'s caller promised.
            PARAM_BUFFER_SIZE => size = Some(unsafe { caller::read(value as *const usize) }?),
            _ => return Err(CudaStatus::ErrorInvalidValue),
        }
    }
    match (pointer, size) {
        // A buffer shorter than the parameters is taken as their first bytes, the rest
        // zero: the driver launches with it (NCCL passes only the part of its 4 KiB
        // argument block it filled).
        (Some(p), Some(n)) => {
            // SAFETY: as `pack`'s caller promised: `p` is readable for `n` bytes.
            let given = unsafe { caller::bytes(p, n.min(total)) }?;
            let mut buffer = given.to_vec();
            buffer.resize(total, 0);
            Ok(buffer)
        }
        _ => Err(CudaStatus::ErrorInvalidValue),
    }
}

/// # Safety
/// `args` and `extra` are as for [`pack`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch(
    f: *mut c_void,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: RawHandle,
    args: *const *const u8,
    extra: *const *const c_void,
    attributes: Vec<LaunchAttribute>,
) -> Result<()> {
    let (function, params) = function(f)?;
    // The shapes the device cannot run are refused here, as the driver refuses them
    // before it returns (NVIDIA's runtime relies on that).
    crate::driver::inner::launch::check_config(grid, block)?;
    // SAFETY: as `launch`'s caller promised.
    let buffer = unsafe { pack(&params, args, extra) }?;
    // The launch sets the function's state of the older launch ABI, as the driver's.
    super::legacy_state::launched(f, block, shared_mem, &buffer);
    launch_packed(
        function, &params, grid, block, shared_mem, stream, buffer, attributes,
    )
}

/// A launch of `function` (whose layout is `params`) with its parameter buffer
/// `buffer`, cut or padded with zeros to the parameters' size.
#[allow(clippy::too_many_arguments)]
fn launch_packed(
    function: FunctionHandle,
    params: &[ParamInfo],
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: RawHandle,
    mut buffer: Vec<u8>,
    attributes: Vec<LaunchAttribute>,
) -> Result<()> {
    buffer.resize(param_bytes(params), 0);
    let stream = stream_handle(stream, false);
    let limits = function_facts::attributes(function)?;
    let threads: i64 = block.iter().map(|v| *v as i64).product();
    // As the runtime's launches: one that passes every check the driver makes before
    // returning goes without a reply (its attributes too: [`checked_here`]); anything
    // else waits for the host's answer.
    let fire_and_forget = attributes.iter().all(|a| checked_here(a, &limits))
        && known_stream(stream)
        && shared_mem as i64 <= limits.max_dynamic_shared_size_bytes as i64
        && threads <= limits.max_threads_per_block as i64;
    let req = LaunchKernel {
        function,
        grid,
        block,
        shared_mem,
        stream,
        attributes,
    };
    gate::submit(stream, move || {
        if fire_and_forget {
            post(&req, &buffer)
        } else {
            call_with(&req, &buffer, Sink::None)
        }
    })
}

/// Whether the guest can make every check the driver makes of launch attribute `a`
/// before the launch returns, so that a launch carrying only such attributes can go
/// without a reply as a plain one does: values out of their enum's range, clusters
/// other than one block (whose fit the GPU decides), and attributes the driver takes
/// for streams only (a synchronization policy), wait for the host's answer.
pub(super) fn checked_here(
    a: &LaunchAttribute,
    limits: &vmcuda_wire::module::FuncAttributes,
) -> bool {
    let word = |i: usize| {
        a.value
            .get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    match a.id {
        // CU_LAUNCH_ATTRIBUTE_IGNORE
        0 => true,
        // CLUSTER_DIMENSION of one block, on a kernel built for clusters (sm_90 on) that
        // does not fix its own.
        4 => {
            [word(0), word(1), word(2)] == [Some(1); 3]
                && limits.binary_version >= 90
                && limits.required_cluster_width == 0
                && limits.cluster_dim_must_be_set == 0
        }
        // CLUSTER_SCHEDULING_POLICY_PREFERENCE: default, spread, load balancing.
        5 => matches!(word(0), Some(0..=2)),
        // PROGRAMMATIC_STREAM_SERIALIZATION: a flag.
        6 => true,
        // MEM_SYNC_DOMAIN: default or remote.
        10 => matches!(word(0), Some(0..=1)),
        _ => false,
    }
}

export! {
    fn cuLaunchKernel(
        f: *mut c_void,
        gx: u32, gy: u32, gz: u32,
        bx: u32, by: u32, bz: u32,
        shared_mem: u32,
        stream: RawHandle,
        args: *const *const u8,
        extra: *const *const c_void,
    ) {
        // SAFETY: by cuLaunchKernel's contract its pointer arguments are as `launch`
        // requires.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared_mem, stream, args, extra, Vec::new()) }
    }
}

export! {
    fn cuLaunchCooperativeKernel(
        f: *mut c_void,
        gx: u32, gy: u32, gz: u32,
        bx: u32, by: u32, bz: u32,
        shared_mem: u32,
        stream: RawHandle,
        args: *const *const u8,
    ) {
        let mut value = vec![0u8; 64];
        value[..4].copy_from_slice(&1i32.to_le_bytes());
        // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        let cooperative = LaunchAttribute { id: 2, value };
        // SAFETY: by cuLaunchCooperativeKernel's contract its pointer arguments are as
        // `launch` requires.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared_mem, stream, args, std::ptr::null(), vec![cooperative]) }
    }
}

/// A `CUlaunchConfig` and its attributes.
///
/// # Safety
/// `config` is NULL or a readable `CUlaunchConfig` whose `attrs` hold `numAttrs`
/// attributes.
unsafe fn launch_config(
    config: *const LaunchConfigC,
) -> Result<(LaunchConfigC, Vec<LaunchAttribute>)> {
    // SAFETY: as `launch_config`'s caller promised.
    let c = unsafe { caller::read(config) }?;
    // SAFETY: as `launch_config`'s caller promised.
    let attributes =
        unsafe { crate::driver::inner::launch::launch_attributes(c.attrs, c.num_attrs) }?;
    Ok((c, attributes))
}

export! {
    /// Launch attributes go to the host as the runtime's do (the two APIs number them
    /// alike); the launch then waits for the host's answer.
    fn cuLaunchKernelEx(config: *const LaunchConfigC, f: *mut c_void, args: *const *const u8, extra: *const *const c_void) {
        // SAFETY: by cuLaunchKernelEx's contract `config` is as `launch_config` requires.
        let (c, attributes) = unsafe { launch_config(config) }?;
        // SAFETY: by cuLaunchKernelEx's contract `args` and `extra` are as `launch`
        // requires.
        unsafe { launch(f, c.grid, c.block, c.shared_mem, c.stream, args, extra, attributes) }
    }
}

export! {
    fn cuOccupancyMaxActiveClusters(clusters: *mut i32, f: *mut c_void, config: *const LaunchConfigC) {
        let (function, _) = function(f)?;
        // SAFETY: by cuOccupancyMaxActiveClusters's contract `config` is as
        // `launch_config` requires.
        let (c, attributes) = unsafe { launch_config(config) }?;
        let r = call(&OccupancyMaxActiveClusters {
            function,
            grid: c.grid,
            block: c.block,
            shared_mem: c.shared_mem,
            attributes,
        })?;
        // SAFETY: by its contract `clusters` is NULL or writable.
        unsafe { caller::write(clusters, r.clusters) }
    }
}

export! {
    fn cuOccupancyMaxPotentialClusterSize(size: *mut i32, f: *mut c_void, config: *const LaunchConfigC) {
        let (function, _) = function(f)?;
        // SAFETY: by cuOccupancyMaxPotentialClusterSize's contract `config` is as
        // `launch_config` requires.
        let (c, attributes) = unsafe { launch_config(config) }?;
        let r = call(&OccupancyMaxPotentialClusterSize {
            function,
            grid: c.grid,
            block: c.block,
            shared_mem: c.shared_mem,
            attributes,
        })?;
        // SAFETY: by its contract `size` is NULL or writable.
        unsafe { caller::write(size, r.size) }
    }
}

export! {
    fn cuLaunchKernelEx_ptsz(config: *const LaunchConfigC, f: *mut c_void, args: *const *const u8, extra: *const *const c_void) {
        // SAFETY: by cuLaunchKernelEx's contract `config` is NULL or readable.
        let mut c = unsafe { caller::read(config) }?;
        if c.stream.is_null() {
            c.stream = 2 as RawHandle; // CU_STREAM_PER_THREAD
        }
        match cuLaunchKernelEx(&c, f, args, extra) {
            0 => Ok(()),
            e => Err(status(e)),
        }
    }
}

export! {
    /// `CU_OCCUPANCY_*` flags are the runtime's `cudaOccupancy*`.
    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        blocks: *mut i32, f: *mut c_void, block_size: i32, dynamic_smem: usize, flags: u32,
    ) {
        let (function, _) = function(f)?;
        let r = function_facts::occupancy(function, block_size, dynamic_smem as u64, flags)?;
        // SAFETY: by its contract `blocks` is NULL or writable.
        unsafe { caller::write(blocks, r) }
    }
}

export! {
    fn cuOccupancyAvailableDynamicSMemPerBlock(bytes: *mut usize, f: *mut c_void, num_blocks: i32, block_size: i32) {
        let (function, _) = function(f)?;
        let r = call(&OccupancyAvailableDynamicSmem { function, num_blocks, block_size })?;
        // SAFETY: by its contract `bytes` is NULL or writable.
        unsafe { caller::write(bytes, r.bytes as usize) }
    }
}

/// The node's launch on `stream` (a stream capturing into its graph).
///
/// # Safety
/// The argument array holds one readable pointer per parameter (or `extra` is a
/// valid `CU_LAUNCH_PARAM` list).
pub(crate) unsafe fn launch_node(p: &KernelNodeParams, stream: RawHandle) -> crate::cudaError_t {
    let f = if p.func.is_null() { p.kern } else { p.func };
    // SAFETY: as the caller promised.
    let r = unsafe {
        launch(
            f,
            p.grid,
            p.block,
            p.shared_mem,
            stream,
            p.kernel_params,
            p.extra,
            Vec::new(),
        )
    };
    match r {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}

/// The node's parameters with its arguments copied, as CUDA keeps them: what the
/// node is built from and what its `Get` call answers.
///
/// # Safety
/// As `launch_node`.
pub(crate) unsafe fn kept_kernel_node(p: &KernelNodeParams) -> Result<graph_build::Kept> {
    let f = if p.func.is_null() { p.kern } else { p.func };
    let (_, params) = function(f)?;
    // SAFETY: as the caller promised.
    let packed = unsafe { pack(&params, p.kernel_params, p.extra) }?;
    Ok(kept_packed(*p, &params, packed))
}

/// Kept parameters `p` whose arguments are the packed buffer `packed` of a kernel laid
/// out as `layout`: copied, with a `kernelParams` array over the copies.
pub(crate) fn kept_packed(
    mut p: KernelNodeParams,
    layout: &[ParamInfo],
    packed: Vec<u8>,
) -> graph_build::Kept {
    let (arguments, mut pointers) = graph_build::argument_copies(layout, packed);
    p.kernel_params = pointers.as_mut_ptr() as *const *const u8;
    p.extra = std::ptr::null();
    graph_build::Kept::DriverKernel {
        params: p,
        _arguments: arguments,
        _pointers: pointers,
    }
}
