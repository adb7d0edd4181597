//! The driver's process checkpoint (`cuCheckpointProcess*`, CUDA 12.8 and later), as
//! `vmcuda-host suspend` uses it on a worker from outside it ([`crate::suspend`]).
//!
//! cudarc has the argument structs but not the functions, so they are looked up in
//! the driver it loaded. The calling process needs `cuInit` first, and nothing else of
//! the driver: no context, no GPU memory of its own.

use std::ffi::c_int;
use std::time::Duration;

use cudarc::driver::sys;

use super::{Checkpointer, ProcessState, SuspendError};

type CuResult = std::ffi::c_uint;
type GetState = unsafe extern "C" fn(c_int, *mut sys::CUprocessState) -> CuResult;
type Lock = unsafe extern "C" fn(c_int, *mut sys::CUcheckpointLockArgs) -> CuResult;
type Checkpoint = unsafe extern "C" fn(c_int, *mut sys::CUcheckpointCheckpointArgs) -> CuResult;
type Restore = unsafe extern "C" fn(c_int, *mut sys::CUcheckpointRestoreArgs) -> CuResult;
type Unlock = unsafe extern "C" fn(c_int, *mut sys::CUcheckpointUnlockArgs) -> CuResult;

/// The driver's checkpoint entry points, found and `cuInit` called.
pub struct DriverCheckpointer {
    get_state: GetState,
    lock: Lock,
    checkpoint: Checkpoint,
    restore: Restore,
    unlock: Unlock,
}

impl DriverCheckpointer {
    /// The driver's checkpoint, or why it cannot be used here (no NVIDIA driver, one
    /// older than 12.8, `cuInit` failing).
    pub fn new() -> Result<DriverCheckpointer, SuspendError> {
        let unavailable = |why: String| SuspendError::Unavailable(why);
        // SAFETY: only dlopens candidate library names and closes them again.
        if !unsafe { sys::is_culib_present() } {
            return Err(unavailable("libcuda not found".into()));
        }
        // SAFETY: `is_culib_present` succeeded, so cudarc finds the library again.
        let lib = unsafe { sys::culib() };
        // SAFETY: only looks a symbol up; the pointer is not used.
        if unsafe { lib.get::<*const std::ffi::c_void>(b"__vmcuda_cuInit") }.is_ok() {
            return Err(unavailable(
                "libcuda.so.1 here is vmcuda's guest driver, not NVIDIA's".into(),
            ));
        }
        fn find<F: Copy>(lib: &libloading::Library, name: &str) -> Result<F, SuspendError> {
            // SAFETY: the caller names `F` as the symbol's C signature (the driver API's
            // declarations of CUDA 12.8).
            match unsafe { lib.get::<F>(name.as_bytes()) } {
                Ok(f) => Ok(*f),
                Err(_) => Err(SuspendError::Unavailable(format!(
                    "the driver has no {name} (it needs CUDA 12.8 or later)"
                ))),
            }
        }
        let this = DriverCheckpointer {
            get_state: find(lib, "cuCheckpointProcessGetState")?,
            lock: find(lib, "cuCheckpointProcessLock")?,
            checkpoint: find(lib, "cuCheckpointProcessCheckpoint")?,
            restore: find(lib, "cuCheckpointProcessRestore")?,
            unlock: find(lib, "cuCheckpointProcessUnlock")?,
        };
        // SAFETY: cuInit takes flags only; 0 is the one value it accepts.
        let r = unsafe { sys::cuInit(0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(unavailable(format!("cuInit: {r:?}")));
        }
        Ok(this)
    }
}

fn pid_arg(pid: u32) -> Result<c_int, SuspendError> {
    c_int::try_from(pid).map_err(|_| SuspendError::Step {
        pid,
        step: "naming the process",
        reason: "not a pid".into(),
    })
}

fn checked(pid: u32, step: &'static str, r: CuResult) -> Result<(), SuspendError> {
    if r == 0 {
        return Ok(());
    }
    Err(SuspendError::Step {
        pid,
        step,
        reason: format!("{} ({r})", vmcuda_wire::CudaStatus::from_driver(r).name()),
    })
}

/// What a restore needs on the GPU besides the memory the worker held (the driver's
/// own state for the context).
pub const RESTORE_HEADROOM: u64 = 512 << 20;

impl Checkpointer for DriverCheckpointer {
    /// Room on the GPU with the most free memory (NVML's figure), for what the worker
    /// held plus [`RESTORE_HEADROOM`]. The worker's own GPUs are not known here: on a
    /// host of several GPUs the check is against the roomiest. Without NVML, no check.
    fn room_for(&self, pid: u32, bytes: u64) -> Result<(), SuspendError> {
        if bytes == 0 {
            return Ok(());
        }
        let Some(free) = crate::executor::cuda::free_memory().and_then(|f| f.into_iter().max())
        else {
            return Ok(());
        };
        let need = bytes.saturating_add(RESTORE_HEADROOM);
        if free < need {
            return Err(SuspendError::NoRoom { pid, need, free });
        }
        Ok(())
    }

    fn state(&self, pid: u32) -> Result<ProcessState, SuspendError> {
        let mut state = sys::CUprocessState::CU_PROCESS_STATE_RUNNING;
        // SAFETY: the entry point's signature; `state` outlives the call.
        let r = unsafe { (self.get_state)(pid_arg(pid)?, &mut state) };
        checked(pid, "reading its checkpoint state", r)?;
        Ok(match state {
            sys::CUprocessState::CU_PROCESS_STATE_RUNNING => ProcessState::Running,
            sys::CUprocessState::CU_PROCESS_STATE_LOCKED => ProcessState::Locked,
            sys::CUprocessState::CU_PROCESS_STATE_CHECKPOINTED => ProcessState::Checkpointed,
            _ => ProcessState::Failed,
        })
    }

    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), SuspendError> {
        // SAFETY: the struct is plain integers; all zero is "no timeout, no options".
        let mut args: sys::CUcheckpointLockArgs = unsafe { std::mem::zeroed() };
        args.timeoutMs = u32::try_from(timeout.as_millis())
            .unwrap_or(u32::MAX)
            .max(1);
        // SAFETY: the entry point's signature; `args` outlives the call.
        let r = unsafe { (self.lock)(pid_arg(pid)?, &mut args) };
        checked(pid, "lock", r)
    }

    fn checkpoint(&self, pid: u32) -> Result<(), SuspendError> {
        // SAFETY: reserved fields only; the driver wants them zero.
        let mut args: sys::CUcheckpointCheckpointArgs = unsafe { std::mem::zeroed() };
        // SAFETY: the entry point's signature; `args` outlives the call.
        let r = unsafe { (self.checkpoint)(pid_arg(pid)?, &mut args) };
        checked(pid, "checkpoint", r)
    }

    fn restore(&self, pid: u32) -> Result<(), SuspendError> {
        // SAFETY: a null GPU pair list (restore onto the same GPUs) and zero reserved
        // fields.
        let mut args: sys::CUcheckpointRestoreArgs = unsafe { std::mem::zeroed() };
        // SAFETY: the entry point's signature; `args` outlives the call.
        let r = unsafe { (self.restore)(pid_arg(pid)?, &mut args) };
        checked(pid, "restore", r)
    }

    fn unlock(&self, pid: u32) -> Result<(), SuspendError> {
        // SAFETY: reserved fields only; the driver wants them zero.
        let mut args: sys::CUcheckpointUnlockArgs = unsafe { std::mem::zeroed() };
        // SAFETY: the entry point's signature; `args` outlives the call.
        let r = unsafe { (self.unlock)(pid_arg(pid)?, &mut args) };
        checked(pid, "unlock", r)
    }
}
