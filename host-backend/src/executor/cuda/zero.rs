//! Zeroing graph memory with a kernel of our own.
//!
//! A fresh stream-ordered allocation is zeroed before the guest can see it; in a
//! capture that is a node of the graph right after the allocation node. A memset node
//! would do, but the driver refuses an executable-graph update that moves a memset
//! node's destination to another graph's allocation (checked on an H100: the update
//! of two such graphs fails, the same graphs with a kernel zeroing instead update), so
//! a program's `cudaGraphExecUpdate` of graphs with memory nodes would fail only
//! because of our node. A kernel node's arguments are the driver's to replace.

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;

use super::super::{DeviceRange, ExecResult, ExecStream};
use super::{check, CudaExecutor};

/// `vmcuda_zero(ptr, len)`: 16-byte stores where `ptr` is 16-byte aligned (graph
/// memory always is), single bytes for the tail and otherwise; a grid-stride loop.
/// PTX for sm_50 and later, compiled by the driver on first use.
const ZERO_PTX: &str = concat!(include_str!("zero.ptx"), "\0");

/// Threads per block, and at most this many blocks (the loop strides over the rest).
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 1024;

impl CudaExecutor {
    /// Device `idx`'s zeroing kernel (its context current), loaded on first use.
    fn zero_kernel(&mut self, idx: usize) -> ExecResult<sys::CUfunction> {
        if let Some((_, f)) = self.devices[idx].zero_kernel {
            return Ok(f);
        }
        let mut module: sys::CUmodule = ptr::null_mut();
        // SAFETY: `ZERO_PTX` is NUL-terminated PTX text; out-pointer to a local.
        check(unsafe { sys::cuModuleLoadData(&mut module, ZERO_PTX.as_ptr().cast()) })?;
        let mut f: sys::CUfunction = ptr::null_mut();
        // SAFETY: `module` was just loaded; the name is NUL-terminated.
        let found =
            check(unsafe { sys::cuModuleGetFunction(&mut f, module, c"vmcuda_zero".as_ptr()) });
        if let Err(e) = found {
            // SAFETY: loaded above, unloaded once.
            let _ = unsafe { sys::cuModuleUnload(module) };
            return Err(e);
        }
        self.devices[idx].zero_kernel = Some((module, f));
        Ok(f)
    }

    pub(super) fn zero_by_kernel(
        &mut self,
        dst: DeviceRange,
        stream: ExecStream,
    ) -> ExecResult<()> {
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let f = self.zero_kernel(idx)?;
        let (mut at, mut len) = (dst.ptr(), dst.len());
        let words = len.div_ceil(16).max(1);
        let blocks = words.div_ceil(u64::from(THREADS)).min(MAX_BLOCKS) as u32;
        let mut args: [*mut c_void; 2] =
            [(&mut at as *mut u64).cast(), (&mut len as *mut u64).cast()];
        // SAFETY: `f` takes two 8-byte arguments, pointed to by `args` for the call;
        // `s` is checked; `dst` is an allocation the executor just made.
        check(unsafe {
            sys::cuLaunchKernel(
                f,
                blocks,
                1,
                1,
                THREADS,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }
}
