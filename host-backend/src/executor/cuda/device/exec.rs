//! The device family of the executor seam on the GPU: the current device and its
//! properties, synchronizes and drains, resets, limits and cache configuration, peer
//! access, live readings, atomics.

use super::*;

impl DeviceExec for CudaExecutor {
    fn set_device(&mut self, device: i32) -> ExecResult<()> {
        let idx = self.device_index(device)?;
        let previous = self.current;
        self.current = idx;
        if let Err(e) = self.bind() {
            self.current = previous;
            return Err(e);
        }
        Ok(())
    }

    fn device_properties(&mut self, device: i32) -> ExecResult<DeviceProperties> {
        let idx = self.device_index(device)?;
        let handle = self.devices[idx].handle;
        let uuid = device_uuid(handle)?;
        // SAFETY: `handle` came from cuDeviceGet.
        let total = unsafe { result::device::total_mem(handle) }.map_err(status)?;
        let max = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX as u32;
        let mut attributes = Vec::with_capacity(max as usize);
        for attr in 1..max {
            let mut value: c_int = 0;
            // SAFETY: the function pointer is libcuda's cuDeviceGetAttribute, called
            // with its C signature; it only writes `value`.
            let r = unsafe { (self.get_attribute_raw)(&mut value, attr as c_int, handle) };
            if r == 0 {
                attributes.push((attr, value));
            }
        }
        Ok(DeviceProperties {
            name: self.devices[idx].name.clone(),
            uuid,
            luid: [0; 8],
            luid_device_node_mask: 0,
            total_global_mem: total as u64,
            attributes,
        })
    }

    fn drain(&mut self) -> ExecResult<()> {
        let contexts: Vec<_> = self.devices.iter().filter_map(|d| d.ctx).collect();
        if contexts.len() <= 1 {
            // The one context is the current one (or there is none yet).
            return match contexts.first() {
                Some(_) => {
                    self.bind()?;
                    result::ctx::synchronize().map_err(status)
                }
                None => Ok(()),
            };
        }
        let mut first_error = Ok(());
        for ctx in contexts {
            // SAFETY: a primary context this executor retained and holds.
            let r = unsafe { result::ctx::set_current(ctx) }
                .and_then(|()| result::ctx::synchronize())
                .map_err(status);
            first_error = first_error.and(r);
        }
        self.bind()?;
        first_error
    }

    fn device_write_done(&mut self, word: DeviceRange, value: u32) -> ExecResult<()> {
        let idx = self.bind()?;
        // Only streams with work left need waiting for (a query of the others is far
        // cheaper than an event on each: torch and NCCL make dozens); an error a stream
        // stopped on fails the request, so no word is written and the guest's wait
        // that follows gets the error.
        let mut busy = Vec::new();
        for s in self.guest_streams(idx)? {
            // SAFETY: a default stream, or one this executor made and has not destroyed.
            match unsafe { sys::cuStreamQuery(s) } {
                sys::CUresult::CUDA_SUCCESS => {}
                sys::CUresult::CUDA_ERROR_NOT_READY => busy.push(s),
                e => return check(e),
            }
        }
        let (signal, event) = self.done_signal(idx)?;
        let on = match busy[..] {
            // The word right after the one stream's work (in its order: nothing to join).
            [one] => one,
            _ => {
                // One event serves every stream: a wait takes the event's state when it
                // is enqueued, so recording it again on the next stream changes no
                // earlier wait.
                for &s in &busy {
                    // SAFETY: `event` and `signal` are this device's (done_signal); `s`
                    // is a default stream or one this executor made.
                    check(unsafe { sys::cuEventRecord(event, s) })?;
                    // SAFETY: as above.
                    check(unsafe { sys::cuStreamWaitEvent(signal, event, 0) })?;
                }
                signal
            }
        };
        // SAFETY: the session checked that the word is the guest's shared memory; `on`
        // is a stream of this device.
        check(unsafe { sys::cuStreamWriteValue32_v2(on, word.ptr(), value, 0) })
    }

    fn keeper_drain(&self) -> Option<Drainer> {
        Some(self.held_contexts.drainer())
    }

    fn device_reset(&mut self) -> ExecResult<()> {
        // Out of the keeper's list while it is reset (after any drain under way).
        self.held_contexts.clear();
        let r = self.reset_current();
        self.held_contexts.publish(&self.devices);
        r
    }

    fn get_limit(&mut self, limit: u32) -> ExecResult<u64> {
        self.bind()?;
        let limit = limit_from(limit).ok_or(CudaStatus::ErrorInvalidValue)?;
        let value = result::ctx::get_limit(limit).map_err(status)?;
        Ok(value as u64)
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> ExecResult<()> {
        self.bind()?;
        let limit = limit_from(limit).ok_or(CudaStatus::ErrorInvalidValue)?;
        let value = to_usize(value)?;
        result::ctx::set_limit(limit, value).map_err(status)
    }

    fn can_access_peer(&mut self, device: i32, peer: i32) -> ExecResult<bool> {
        let a = self.devices[self.device_index(device)?].handle;
        let b = self.devices[self.device_index(peer)?].handle;
        let mut can: c_int = 0;
        // SAFETY: out-pointer to a local; both handles came from cuDeviceGet.
        check(unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) })?;
        Ok(can != 0)
    }

    fn p2p_attribute(&mut self, attr: u32, src: i32, dst: i32) -> ExecResult<i32> {
        use sys::CUdevice_P2PAttribute as A;
        let attr = match attr {
            1 => A::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
            2 => A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
            3 => A::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            4 => A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED,
            5 => A::CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        let a = self.devices[self.device_index(src)?].handle;
        let b = self.devices[self.device_index(dst)?].handle;
        let mut value: c_int = 0;
        // SAFETY: out-pointer to a local; both handles came from cuDeviceGet and the
        // attribute is a valid enum value.
        check(unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attr, a, b) })?;
        Ok(value)
    }

    fn gpu_status(&mut self, device: i32) -> ExecResult<GpuStatus> {
        self.read_status(device)
    }

    fn exec_affinity_sm_count(&mut self) -> ExecResult<u32> {
        self.bind()?;
        let mut param = std::mem::MaybeUninit::<sys::CUexecAffinityParam>::zeroed();
        let kind = sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        // SAFETY: `param` is writable for one CUexecAffinityParam; a context is current.
        check(unsafe { sys::cuCtxGetExecAffinity(param.as_mut_ptr(), kind) })?;
        // SAFETY: zeroed is a valid CUexecAffinityParam (an enum of value 0 and a
        // union of integers), and the driver filled it on success.
        let param = unsafe { param.assume_init() };
        // SAFETY: the SM count is the union's member for CU_EXEC_AFFINITY_TYPE_SM_COUNT.
        Ok(unsafe { param.param.smCount.val })
    }

    fn texture_1d_linear_max_width(&mut self, format: u32, channels: u32) -> ExecResult<u64> {
        use sys::CUarray_format as F;
        let format = match format {
            0x01 => F::CU_AD_FORMAT_UNSIGNED_INT8,
            0x02 => F::CU_AD_FORMAT_UNSIGNED_INT16,
            0x03 => F::CU_AD_FORMAT_UNSIGNED_INT32,
            0x08 => F::CU_AD_FORMAT_SIGNED_INT8,
            0x09 => F::CU_AD_FORMAT_SIGNED_INT16,
            0x0a => F::CU_AD_FORMAT_SIGNED_INT32,
            0x10 => F::CU_AD_FORMAT_HALF,
            0x20 => F::CU_AD_FORMAT_FLOAT,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        let index = self.bind()?;
        let device = self.devices[index].handle;
        let mut width: usize = 0;
        // SAFETY: out-pointer to a local; the format is a valid enum value and the
        // handle came from cuDeviceGet.
        check(unsafe {
            sys::cuDeviceGetTexture1DLinearMaxWidth(&mut width, format, channels, device)
        })?;
        Ok(width as u64)
    }

    fn atomic_capabilities(
        &mut self,
        operations: &[u32],
        peer: Option<i32>,
    ) -> ExecResult<Vec<u32>> {
        use sys::CUatomicOperation as O;
        const ALL: [O; 13] = [
            O::CU_ATOMIC_OPERATION_INTEGER_ADD,
            O::CU_ATOMIC_OPERATION_INTEGER_MIN,
            O::CU_ATOMIC_OPERATION_INTEGER_MAX,
            O::CU_ATOMIC_OPERATION_INTEGER_INCREMENT,
            O::CU_ATOMIC_OPERATION_INTEGER_DECREMENT,
            O::CU_ATOMIC_OPERATION_AND,
            O::CU_ATOMIC_OPERATION_OR,
            O::CU_ATOMIC_OPERATION_XOR,
            O::CU_ATOMIC_OPERATION_EXCHANGE,
            O::CU_ATOMIC_OPERATION_CAS,
            O::CU_ATOMIC_OPERATION_FLOAT_ADD,
            O::CU_ATOMIC_OPERATION_FLOAT_MIN,
            O::CU_ATOMIC_OPERATION_FLOAT_MAX,
        ];
        let ops = operations
            .iter()
            .map(|&o| {
                ALL.get(o as usize)
                    .copied()
                    .ok_or(CudaStatus::ErrorInvalidValue)
            })
            .collect::<ExecResult<Vec<O>>>()?;
        let index = self.bind()?;
        let device = self.devices[index].handle;
        let mut caps = vec![0u32; ops.len()];
        let count = ops.len() as c_uint;
        match peer {
            // SAFETY: `caps` and `ops` hold `count` elements each; the handle came
            // from cuDeviceGet.
            None => check(unsafe {
                sys::cuDeviceGetHostAtomicCapabilities(
                    caps.as_mut_ptr(),
                    ops.as_ptr(),
                    count,
                    device,
                )
            })?,
            Some(peer) => {
                let dst = self.devices[self.device_index(peer)?].handle;
                // SAFETY: as above; both handles came from cuDeviceGet.
                check(unsafe {
                    sys::cuDeviceGetP2PAtomicCapabilities(
                        caps.as_mut_ptr(),
                        ops.as_ptr(),
                        count,
                        device,
                        dst,
                    )
                })?
            }
        }
        Ok(caps)
    }

    fn flush_gpu_direct_rdma_writes(&mut self, to_all_devices: bool) -> ExecResult<()> {
        use sys::CUflushGPUDirectRDMAWritesScope as S;
        self.bind()?;
        let scope = if to_all_devices {
            S::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES
        } else {
            S::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER
        };
        let target = sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX;
        // SAFETY: both are valid enum values; a context is current.
        check(unsafe { sys::cuFlushGPUDirectRDMAWrites(target, scope) })
    }
}
