//! The state the launch ABI before `cuLaunchKernel` keeps for each `CUfunction`
//! ([`crate::driver::launch_legacy`]'s calls set it and launch with it): its block
//! shape, dynamic shared memory and parameter buffer. A launch of the current ABI sets
//! it in turn ([`launched`]), as cuda.h documents.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use vmcuda_wire::CudaStatus;

use super::function_facts;
use crate::driver::{check_initialized, Result};

/// The largest parameter block a kernel takes (CUDA 12.1 on Volta and newer).
const MAX_PARAM_BYTES: usize = 32764;

/// What the legacy calls set on one function.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::driver) struct Setup {
    pub(in crate::driver) block: [u32; 3],
    pub(in crate::driver) shared: u32,
    /// `cuParamSetSize`'s size: the bytes a launch passes.
    size: usize,
    /// What was written, `size` bytes or more (zeros where nothing was).
    params: Vec<u8>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            block: [1, 1, 1],
            shared: 0,
            size: 0,
            params: Vec::new(),
        }
    }
}

impl Setup {
    /// `bytes` written at `offset`, within what a kernel may take.
    pub(in crate::driver) fn write(&mut self, offset: i32, bytes: &[u8]) -> Result<()> {
        let offset = usize::try_from(offset).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        let end = offset
            .checked_add(bytes.len())
            .filter(|end| *end <= MAX_PARAM_BYTES)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if self.params.len() < end {
            self.params.resize(end, 0);
        }
        self.params[offset..end].copy_from_slice(bytes);
        Ok(())
    }

    pub(in crate::driver) fn set_size(&mut self, size: u32) -> Result<()> {
        let size = size as usize;
        if size > MAX_PARAM_BYTES {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.size = size;
        self.params.resize(size, 0);
        Ok(())
    }

    /// The bytes a launch passes: `size` of them.
    pub(in crate::driver) fn launch_bytes(&self) -> Vec<u8> {
        let mut bytes = self.params.clone();
        bytes.resize(self.size, 0);
        bytes
    }
}

/// Function id -> its setup.
static SETUPS: Mutex<Option<HashMap<u64, Setup>>> = Mutex::new(None);

/// Change the setup of function `f`, a function this process holds.
pub(in crate::driver) fn with_setup<T>(
    f: *mut c_void,
    change: impl FnOnce(&mut Setup) -> Result<T>,
) -> Result<T> {
    check_initialized()?;
    function_facts(f)?;
    IN_USE.store(true, Ordering::Relaxed);
    let mut guard = SETUPS.lock().unwrap_or_else(|p| p.into_inner());
    change(
        guard
            .get_or_insert_with(HashMap::new)
            .entry(f as u64)
            .or_default(),
    )
}

/// Whether the program has used the older ABI at all: until it has, the launches of
/// the current one keep no state here.
static IN_USE: AtomicBool = AtomicBool::new(false);

/// `cuLaunchKernel` (and the cooperative and `Ex` launches) of `f` with this block
/// shape, dynamic shared memory and packed parameters: they become its state, as the
/// driver documents ("sets persistent function state"; a later `cuLaunch` runs the
/// same launch on a 1x1 grid).
pub(super) fn launched(f: *mut c_void, block: [u32; 3], shared: u32, params: &[u8]) {
    if !IN_USE.load(Ordering::Relaxed) {
        return;
    }
    let mut guard = SETUPS.lock().unwrap_or_else(|p| p.into_inner());
    guard.get_or_insert_with(HashMap::new).insert(
        f as u64,
        Setup {
            block,
            shared,
            size: params.len(),
            params: params.to_vec(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_past_the_size_are_taken_and_launches_pass_the_size() {
        let mut s = Setup::default();
        // Past the size is taken (as the H200's driver does); a launch passes none of it.
        s.write(0, &[1]).unwrap();
        assert!(s.launch_bytes().is_empty());
        s.set_size(12).unwrap();
        s.write(0, &7u32.to_ne_bytes()).unwrap();
        s.write(4, &2.5f32.to_ne_bytes()).unwrap();
        s.write(8, &[9, 9, 9, 9]).unwrap();
        s.write(9, &[9; 4]).unwrap();
        assert_eq!(s.launch_bytes().len(), 12);
        s.write(8, &[9, 9, 9, 9]).unwrap();
        assert_eq!(
            s.write(MAX_PARAM_BYTES as i32 - 3, &[0; 4]),
            Err(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(s.write(-1, &[0]), Err(CudaStatus::ErrorInvalidValue));
        assert_eq!(
            s.write(i32::MAX, &[0; 4]),
            Err(CudaStatus::ErrorInvalidValue)
        );
        let mut want = 7u32.to_ne_bytes().to_vec();
        want.extend(2.5f32.to_ne_bytes());
        want.extend([9, 9, 9, 9]);
        assert_eq!(s.launch_bytes(), want);
        // A smaller size keeps the first bytes, a larger one adds zeros.
        s.set_size(4).unwrap();
        s.set_size(8).unwrap();
        assert_eq!(s.launch_bytes(), [7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            s.set_size(MAX_PARAM_BYTES as u32 + 1),
            Err(CudaStatus::ErrorInvalidValue)
        );
        s.set_size(MAX_PARAM_BYTES as u32).unwrap();
    }

    #[test]
    fn the_defaults_are_one_thread_and_nothing_else() {
        let s = Setup::default();
        assert_eq!(s.block, [1, 1, 1]);
        assert_eq!(s.shared, 0);
        assert!(s.params.is_empty());
    }
}
