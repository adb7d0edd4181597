//! The vmcuda guest library: a replacement `libcuda.so.1` that forwards the CUDA driver
//! and runtime APIs (and cuBLAS, cuBLASLt) to a vmcuda host backend; the replacement
//! `libcudart.so.13`, `libcublas.so.13` and `libcublasLt.so.13` jump into it. NVIDIA's
//! other libraries (cuDNN, cuFFT, cuSOLVER, ...) run as they are on the guest driver.
//!
//! Module map:
//! - [`client`]: the connection to the host (address from `VMCUDA_SERVER`), handshake,
//!   request/reply exchange, console output from the host's driver.
//! - [`state`]: what the guest keeps: per-thread current device and last error,
//!   registered fatbinaries, kernels and variables, device-property cache, the
//!   guest-made stream and event ids, and the host and device allocations it knows.
//! - [`capture`]: stream capture state (capturing streams, capture ids, the threads'
//!   capture modes) and CUDA's rules for calls made during a capture.
//! - [`gate`]: per-stream ordering of asynchronous host functions.
//! - [`shared`]: pinned memory shared with a same-host backend (memfds).
//! - [`managed`]: managed memory's pages: one address for the CPU and the device,
//!   dirty pages sent before device work, pages fetched on the CPU's first touch.
//! - [`staging`]: the shared-memory data path for copies (no bytes on the socket).
//! - [`copy_route`]: which way each copy's bytes travel (guest, device, shared pinned
//!   memory, staging, socket), for every kind of copy.
//! - [`caller`]: the only module that dereferences pointers handed in by the program,
//!   through `unsafe fn`s whose `# Safety` sections the exports' `SAFETY` comments meet.
//! - [`blas`]: the cuBLAS v2 API (exported privately here, publicly by the
//!   `libcublas.so.13` trampolines; see its documentation for how the two share one
//!   connection).
//! - [`driver`]: the CUDA driver API (the public names of `libcuda.so.1`), sharing the
//!   runtime's state; every other export of the real driver is a stub naming itself.
//! - [`blaslt`]: the cuBLASLt API, the same way (`libcublasLt.so.13`): descriptors
//!   kept here, heuristic queries and matmuls forwarded.
//! - [`nvml`]: the guest's NVML (`libnvidia-ml.so.1`): the guest's devices, its memory
//!   and processes, the host's live readings; changes to the GPU refused.
//! - [`api`]: the exported `extern "C"` functions, one file per family; every export
//!   goes through [`api::guard`], so no panic crosses the C boundary.
//!
//! The crate builds as a static library that `guest-lib/build-libs.sh` links into
//! `libcuda.so.1`; `libcudart.so.13` exports the runtime's names with the
//! `libcudart.so.13` symbol-version node, each a jump into `libcuda.so.1`. Its `vmcuda`
//! command (`src/bin/vmcuda`: `info`, `doctor`) connects through [`client`] too.

// The modules holding `extern "C"` exports. An export is a safe function taking the
// program's raw pointers: its C callers hold the CUDA API contract, and the export
// accepts it in a `SAFETY` comment where it hands a pointer to an `unsafe fn` (see
// [`caller`]); so the lint asking such functions to be `unsafe` does not apply.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod api;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod blas;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod blaslt;
pub mod caller;
pub mod capture;
pub mod client;
pub mod copy_route;
pub mod done_word;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod driver;
pub mod function_facts;
pub mod gate;
pub mod guest_pages;
pub mod guest_ram;
pub mod host_functions;
pub mod managed;
pub mod notice;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod nvml;
pub mod posted;
pub mod shared;
pub mod staging;
pub mod state;

/// `cudaError_t`: kept as a plain integer at the C boundary, since the host may report
/// codes this build does not name.
#[allow(non_camel_case_types)]
pub type cudaError_t = u32;
