//! What the guest knows of each host function (a [`FunctionHandle`], a runtime kernel
//! or a driver function alike), so that the queries libraries repeat before their
//! launches are answered here instead of waiting for the host.
//!
//! Measured on the H100 (bench/torch_steps.py, the host's timeline): torch's bf16
//! transformer step sets the same two attributes (maximum dynamic shared memory,
//! shared-memory carveout) on the same kernels before every launch and reads their
//! attributes back, and cuDNN asks the same occupancy question every step. Here:
//!
//! - attributes are asked of the host once and then known;
//! - an attribute set to the value it was last set to is not sent: the function
//!   already has it, and the driver accepted exactly that call before;
//! - occupancy answers are kept per (block size, dynamic shared memory, flags).
//!
//! An actual change the guest makes (a new attribute value, a function's cache
//! preference, the device's cache or shared-memory configuration) forgets what it
//! could change: attributes and occupancy of that function, or occupancy everywhere.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::op::{
    FuncAttributes, FuncGetAttributes, FuncSetAttribute, FuncSetCacheConfig, FunctionHandle,
    OccupancyMaxActiveBlocks,
};
use vmcuda_wire::CudaStatus;

use crate::request::call;

/// What is known of one function.
#[derive(Default)]
struct Facts {
    attributes: Option<FuncAttributes>,
    /// Attribute number -> the value last set successfully.
    set: HashMap<i32, i32>,
    /// (block size, dynamic shared memory, flags) -> blocks per multiprocessor.
    occupancy: HashMap<(i32, u64, u32), i32>,
}

static FACTS: Mutex<Option<HashMap<FunctionHandle, Facts>>> = Mutex::new(None);

fn facts() -> MutexGuard<'static, Option<HashMap<FunctionHandle, Facts>>> {
    FACTS.lock().unwrap_or_else(|p| p.into_inner())
}

fn with<T>(function: FunctionHandle, f: impl FnOnce(&mut Facts) -> T) -> T {
    f(facts()
        .get_or_insert_with(HashMap::new)
        .entry(function)
        .or_default())
}

/// The function's attributes, asked of the host once.
pub fn attributes(function: FunctionHandle) -> Result<FuncAttributes, CudaStatus> {
    if let Some(a) = with(function, |f| f.attributes.clone()) {
        return Ok(a);
    }
    let a = call(&FuncGetAttributes { function })?;
    with(function, |f| f.attributes = Some(a.clone()));
    Ok(a)
}

/// Set an attribute (`cudaFuncAttribute` / `CUfunction_attribute`: the settable ones
/// share their numbers); the value it already has is not sent again.
pub fn set_attribute(
    function: FunctionHandle,
    attribute: i32,
    value: i32,
) -> Result<(), CudaStatus> {
    if with(function, |f| f.set.get(&attribute) == Some(&value)) {
        return Ok(());
    }
    let sent = call(&FuncSetAttribute {
        function,
        attribute,
        value,
    });
    with(function, |f| {
        // Whether or not the host took it, what was known may have changed.
        f.attributes = None;
        f.occupancy.clear();
        f.set.remove(&attribute);
        if sent.is_ok() {
            f.set.insert(attribute, value);
        }
    });
    sent
}

/// Set the function's cache preference (it can change its occupancy).
pub fn set_cache_config(function: FunctionHandle, config: u32) -> Result<(), CudaStatus> {
    let sent = call(&FuncSetCacheConfig { function, config });
    with(function, |f| f.occupancy.clear());
    sent
}

/// Blocks of `block_size` threads with `dynamic_smem` bytes of dynamic shared memory
/// that fit on one multiprocessor, asked of the host once per question.
pub fn occupancy(
    function: FunctionHandle,
    block_size: i32,
    dynamic_smem: u64,
    flags: u32,
) -> Result<i32, CudaStatus> {
    let key = (block_size, dynamic_smem, flags);
    if let Some(blocks) = with(function, |f| f.occupancy.get(&key).copied()) {
        return Ok(blocks);
    }
    let blocks = call(&OccupancyMaxActiveBlocks {
        function,
        block_size,
        dynamic_smem,
        flags,
    })?
    .blocks;
    with(function, |f| f.occupancy.insert(key, blocks));
    Ok(blocks)
}

/// The device's cache or shared-memory configuration changed: every function's
/// occupancy may have.
pub fn forget_occupancy() {
    if let Some(m) = facts().as_mut() {
        for f in m.values_mut() {
            f.occupancy.clear();
        }
    }
}

/// Forget functions that are gone (a module unloaded, a device reset).
pub fn forget(functions: impl IntoIterator<Item = FunctionHandle>) {
    if let Some(m) = facts().as_mut() {
        for f in functions {
            m.remove(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_already_set_is_known_and_a_new_one_forgets_what_it_changes() {
        let function = FunctionHandle(0xf00d_0001);
        with(function, |f| {
            f.set.insert(8, 4096);
            f.occupancy.insert((128, 0, 0), 7);
            f.attributes = Some(FuncAttributes::default());
        });
        // The same value: answered here (no server is reachable in unit tests, so a
        // call would fail).
        assert_eq!(set_attribute(function, 8, 4096), Ok(()));
        assert_eq!(occupancy(function, 128, 0, 0), Ok(7));
        assert!(attributes(function).is_ok());
        // A new value goes to the host; whatever happens, what it may change is gone.
        assert!(set_attribute(function, 8, 8192).is_err());
        with(function, |f| {
            assert!(f.attributes.is_none() && f.occupancy.is_empty());
            assert!(!f.set.contains_key(&8));
        });
        with(function, |f| {
            f.occupancy.insert((64, 0, 0), 3);
        });
        forget_occupancy();
        with(function, |f| assert!(f.occupancy.is_empty()));
        forget([function]);
        assert!(facts().as_ref().unwrap().get(&function).is_none());
    }
}
