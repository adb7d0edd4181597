//! The vmcuda guest library: a replacement `libcuda.so.1` that forwards the CUDA driver
//! API to a vmcuda host backend, and the guest's NVML (`libnvidia-ml.so.1` jumps into
//! it). NVIDIA's own runtime and libraries (libcudart, cuBLAS, cuDNN, cuFFT, ...) run as
//! they are on the guest driver (docs/guest-stack.md).
//!
//! The library is in three layers; a module uses its own layer and those below it,
//! never one above ([`layers`] checks the source):
//!
//! **Bottom: the connection, the data paths and the guest's state.**
//! - [`client`]: the connection to the host (address from `VMCUDA_SERVER`), handshake,
//!   request/reply exchange, console output from the host's driver.
//! - [`request`]: the requests every call makes on it: waited ([`request::call`]) or
//!   posted ([`request::post`]), waits by queries, the host a call about another
//!   device's stream, event or memory goes to ([`request::on_host_of`]).
//! - [`posted`]: posted frames held back and sent together with the next write.
//! - [`state`]: what the guest keeps: per-thread current device and last error,
//!   registered fatbinaries, kernels and variables, device-property cache, the
//!   guest-made stream and event ids, and the host and device allocations it knows.
//! - [`capture`]: stream capture state (capturing streams, capture ids, the threads'
//!   capture modes) and CUDA's rules for calls made during a capture.
//! - [`gate`]: per-stream ordering of asynchronous host functions.
//! - [`host_functions`]: host functions inside graphs and stream captures (slots of
//!   words in shared pinned memory that the guest answers).
//! - [`function_facts`]: what the guest knows of each device function's attributes and
//!   occupancy, so repeated queries stay here.
//! - [`pages`]: memfds, pages moved onto them, huge pages and their guest-physical
//!   addresses, long-term pins: this process's memory as the host comes to map it.
//! - [`device_addresses`]: the device's addresses kept out of the program's memory.
//! - [`sizes`]: the sizes of the areas shared with the host (the staging slots).
//! - [`shared`]: pinned memory shared with a same-host backend (memfds).
//! - [`pinned`]: pinned memory shared however the connection can (memfd or guest RAM).
//! - [`managed`]: managed memory's pages: one address for the CPU and the device,
//!   dirty pages sent before device work, pages fetched on the CPU's first touch.
//! - [`staging`]: the shared-memory data path for copies (no bytes on the socket).
//! - [`guest_ram`], [`guest_pages`]: guest RAM the host's worker copies to and from
//!   (the guest's RAM broker), and the staging area made of it in a VM.
//! - [`done_word`]: completion words: a synchronous copy of pinned memory learns that
//!   the GPU is done without waiting for the worker's reply.
//! - [`copy_route`]: which way each copy's bytes travel (guest, device, shared pinned
//!   memory, staging, socket), for every kind of copy.
//! - [`notice`], [`call_log`]: the lines that say once what vmcuda does not do, and the
//!   log of failed calls and notices that `cuLogs*` reads.
//! - [`profile`]: `VMCUDA_PROFILE`: where a process's time goes, driver call by driver
//!   call and op by op (round trips, bytes, the worker's share), as a summary and a
//!   timeline.
//! - [`caller`]: the only module that dereferences pointers handed in by the program,
//!   through `unsafe fn`s whose `# Safety` sections the exports' `SAFETY` comments meet.
//! - [`abi`]: the C types that cross the C boundary, CUDA's structs and NVML's, as
//!   their headers lay them out, each checked against the headers' bindings (cudarc's
//!   `sys` modules, nvml-wrapper-sys). It imports nothing from the rest of the crate.
//! - [`pci_place`]: the devices' PCI addresses as the guest shows them (moved to a
//!   free PCI domain where the guest's own `/sys` has another device at the host's).
//!
//! **Middle: the driver.**
//! - [`driver`]: the CUDA driver API (the public names of `libcuda.so.1`); every other
//!   export of the real driver is a stub naming itself. Its inner functions
//!   ([`driver::inner`]: streams, copies, graphs, arrays, devices, memory pools, one
//!   module per family) were vmcuda's own runtime library, retired; no library exports
//!   their `cuda*` names. Every export goes through [`driver::guard`] (every inner
//!   function through [`driver::inner::guard`]), so no panic crosses the C boundary.
//!
//! **Top: on the driver.**
//! - [`nvml`]: the guest's NVML (`libnvidia-ml.so.1`): the guest's devices, its memory
//!   and processes, the host's live readings; changes to the GPU refused.
//! - the `vmcuda` command (`src/bin/vmcuda`: `info`, `doctor`, `smi`, `cdi`,
//!   `guest-ram-broker`), which connects through [`client`] too.
//!
//! The crate builds as a static library that `guest-lib/build-libs.sh` links into
//! `libcuda.so.1`, which exports the driver's names (and `libnvidia-ml.so.1` NVML's).

// The modules holding `extern "C"` exports. An export is a safe function taking the
// program's raw pointers: its C callers hold the CUDA API contract, and the export
// accepts it in a `SAFETY` comment where it hands a pointer to an `unsafe fn` (see
// [`caller`]); so the lint asking such functions to be `unsafe` does not apply.
pub mod abi;
pub mod call_log;
pub mod caller;
pub mod capture;
pub mod client;
pub mod copy_route;
pub mod device_addresses;
pub mod done_word;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod driver;
pub mod function_facts;
pub mod gate;
pub mod guest_pages;
pub mod guest_ram;
pub mod host_functions;
#[cfg(test)]
mod layers;
pub mod managed;
pub mod notice;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod nvml;
pub mod pages;
pub mod pci_place;
pub mod pinned;
pub mod posted;
pub mod profile;
pub mod request;
pub mod shared;
pub mod sizes;
pub mod staging;
pub mod state;

/// `cudaError_t`: kept as a plain integer at the C boundary, since the host may report
/// codes this build does not name.
#[allow(non_camel_case_types)]
pub type cudaError_t = u32;
