//! CUDA IPC (`cudaIpc*`): sharing device memory and events with the other processes of
//! the VM. The driver's calls do the work (crate::driver::ipc, docs/ipc.md), as
//! NVIDIA's runtime has them do it on vmcuda's driver.
