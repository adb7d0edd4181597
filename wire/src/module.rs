//! Module and launch requests whose types carry more than plain fields: kernel
//! parameter layouts, function attributes and launches. The op table in
//! [`crate::op`] declares the plain ones inline.

use serde::{Deserialize, Serialize};

use crate::handle::{FunctionHandle, ModuleHandle, StreamHandle};

/// One kernel parameter's place in the parameter buffer.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ParamInfo {
    pub offset: u32,
    pub size: u32,
}
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FunctionInfo {
    pub function: FunctionHandle,
    /// The parameter layout, cached by the guest to pack arguments.
    pub params: Vec<ParamInfo>,
}
/// `cudaFuncAttributes`, field for field.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FuncAttributes {
    pub shared_size_bytes: u64,
    pub const_size_bytes: u64,
    pub local_size_bytes: u64,
    pub max_threads_per_block: i32,
    pub num_regs: i32,
    pub ptx_version: i32,
    pub binary_version: i32,
    pub cache_mode_ca: i32,
    pub max_dynamic_shared_size_bytes: i32,
    pub preferred_shmem_carveout: i32,
    pub cluster_dim_must_be_set: i32,
    pub required_cluster_width: i32,
    pub required_cluster_height: i32,
    pub required_cluster_depth: i32,
    pub cluster_scheduling_policy_preference: i32,
    pub non_portable_cluster_size_allowed: i32,
}
/// One launch attribute (`cudaLaunchAttribute`): its id and the 64-byte value union.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LaunchAttribute {
    pub id: u32,
    pub value: Vec<u8>,
}
/// A kernel launch; the data section is the packed parameter buffer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LaunchKernel {
    pub function: FunctionHandle,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: StreamHandle,
    pub attributes: Vec<LaunchAttribute>,
}

/// The SHA-256 of a module image.
pub type ImageHash = [u8; 32];

/// Images up to this size travel with their hash at once: below it, one more round
/// trip on a miss would cost more than the bytes it saves on a hit.
pub const INLINE_IMAGE_MAX: usize = 64 << 10;

/// A module image named by its hash (`ModuleLoadCached`). The data section is empty
/// (load it from the VM's module cache, if the host has it there) or the image itself,
/// whose SHA-256 must be `sha256`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ModuleLoadCached {
    pub sha256: ImageHash,
}

/// The answer to [`ModuleLoadCached`]: the loaded module, or `None` when the request
/// carried no image and the host does not have it: the guest sends it again, with it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ModuleLoadedCached {
    pub module: Option<ModuleHandle>,
    /// As [`crate::op::ModuleLoaded::prints`].
    pub prints: bool,
}
