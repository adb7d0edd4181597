//! The table of every forwarded call, one line per op, grouped by API family.
//!
//! The grammar of a line, and what each crate makes of it, is in [`crate::op`]. Codes
//! are append-only: a new op takes a new code (snapshot-tested in `wire/ops.snapshot`)
//! and lands in its family's block. Retired codes are never taken again: 0x0600-0x0611
//! (cuBLAS) and 0x0800-0x0803 (cuBLASLt) were vmcuda's own cuBLAS and cuBLASLt, which
//! no guest library sends since NVIDIA's run on the guest driver (docs/guest-stack.md). docs/adding-a-call.md walks through adding one.

/// Expand the op table with the macro named by the argument: `op_lines!(my_macro)`
/// calls `my_macro! { ...every family and line... }`, and `op_lines!(my_macro, T...)`
/// calls `my_macro! { T... ...every family and line... }` (the wire crate hands its own
/// expansion a `$`, for the macro it makes of the lines).
#[macro_export]
macro_rules! op_lines {
    ($callback:path $(, $($prefix:tt)*)?) => {
        $callback! {
            $($($prefix)*)?
            /// The handshake, first on every connection.
            connection ConnectionOps {
                0x0001 Hello => hello(Hello) -> HelloReply, Sync;
                /// The guest uses several hosts and this one is host number `host`: the
                /// handles this session makes from now on carry it in their top bits.
                0x0002 HandleSpace => handle_space(HandleSpace { host: u8 }) -> (), Sync;
                /// A ticket to this session, for coming back to it over a new connection
                /// when this one drops (see [`crate::handshake::SessionResume`]). Only
                /// from a host that said [`caps::RESUMABLE`](crate::handshake::caps).
                0x0003 SessionTicketGet => session_ticket_get(SessionTicketGet {}) -> SessionTicket, Sync;
                /// The first frame of a connection that comes back to a session (instead
                /// of a hello): answered on the new connection by the session's worker.
                0x0004 SessionResume => session_resume(SessionResume) -> SessionResumed, Sync;
                /// Nothing: its reply tells the guest that every request before it was
                /// taken (the guest trims what it keeps for a resume).
                0x0005 SessionPing => session_ping(SessionPing {}) -> (), Sync;
                /// The guest leaves: its session ends with this connection, without being
                /// held for a return.
                0x0006 SessionClose => session_close(SessionClose {}) -> (), Async;
            }

            /// Devices, their limits and peers.
            device DeviceOps {
                0x0100 DeviceGetProperties => device_get_properties(DeviceGetProperties { device: i32 })
                    -> DeviceProperties, Sync;
                0x0101 DeviceSynchronize => device_synchronize(DeviceSynchronize {}) -> (), Sync
                    => exec device_synchronize();
                /// Whether the current device's work is done (`cudaErrorNotReady` while
                /// any of the guest's streams works): how a guest whose other threads
                /// also make calls waits for the device without holding its connection.
                0x0112 DeviceQuery => device_query(DeviceQuery {}) -> (), Sync
                    => exec device_query();
                /// Have the GPU write `done`'s value to its word once every stream the
                /// guest made on the current device has done the work queued so far:
                /// a device synchronize that ends on a word the GPU writes (see the
                /// guest library's `done_word`). Not run, so no word, when an earlier
                /// request failed.
                0x0113 DeviceWriteDone => device_write_done(DeviceWriteDone { done: DoneWord }) -> (), Async;
                0x0102 DeviceReset => device_reset(DeviceReset {}) -> (), Sync;
                /// (Both exports are written by hand: the guest answers the limits of
                /// `crate::device::fixed_limit` itself.)
                0x0103 DeviceGetLimit => device_get_limit(DeviceGetLimit { limit: u32 })
                    -> LimitValue { value: u64 }, Sync;
                0x0104 DeviceSetLimit => device_set_limit(DeviceSetLimit { limit: u32, value: u64 }) -> (), Sync
                    => driver cuCtxSetLimit(limit: u32, value: usize);
                0x0105 DeviceGetCacheConfig => device_get_cache_config(DeviceGetCacheConfig {})
                    -> CacheConfig { config: u32 }, Sync
                    => exec device_get_cache_config();
                0x0106 DeviceSetCacheConfig => device_set_cache_config(CacheConfig) -> (), Sync
                    => exec device_set_cache_config(config: u32);
                0x0107 DeviceGetStreamPriorityRange => device_get_stream_priority_range(DeviceGetStreamPriorityRange {})
                    -> PriorityRange { least: i32, greatest: i32 }, Sync
                    => exec device_get_stream_priority_range();
                0x0108 DeviceCanAccessPeer => device_can_access_peer(DeviceCanAccessPeer { device: i32, peer: i32 })
                    -> CanAccessPeer { can_access: bool }, Sync;
                0x0109 DeviceEnablePeerAccess => device_enable_peer_access(DeviceEnablePeerAccess { peer: i32, flags: u32 })
                    -> (), Sync
                    => exec device_enable_peer_access(peer: i32, flags: u32);
                0x010A DeviceDisablePeerAccess => device_disable_peer_access(DeviceDisablePeerAccess { peer: i32 })
                    -> (), Sync
                    => exec device_disable_peer_access(peer: i32);
                0x010B MemGetInfo => mem_get_info(MemGetInfo {}) -> MemInfo { free: u64, total: u64 }, Sync;
                /// `cudaDeviceGetP2PAttribute`: a `cudaDeviceP2PAttr` of the link from
                /// `src_device` to `dst_device`.
                /// (The guest answers for devices of two hosts itself: driver/inner/device.rs.)
                0x010C DeviceGetP2PAttribute => device_get_p2p_attribute(DeviceGetP2PAttribute { attr: u32, src_device: i32, dst_device: i32 })
                    -> P2PAttribute { value: i32 }, Sync;
                /// The device's live readings and the guest's share of it (the guest's
                /// NVML and `vmcuda smi`).
                0x010D DeviceGetStatus => device_get_status(DeviceGetStatus { device: i32 }) -> GpuStatus, Sync;
                /// Every persisting line of the current device's L2 goes back to normal.
                0x010E CtxResetPersistingL2Cache => ctx_reset_persisting_l2_cache(CtxResetPersistingL2Cache {}) -> (), Sync
                    => driver_ctx cuCtxResetPersistingL2Cache()
                    => exec ctx_reset_persisting_l2_cache();
                /// The widest 1D texture over linear memory, in elements of `channels`
                /// channels of `format` (a `CUarray_format`), on the current device.
                /// (Both exports are written by hand: the runtime's takes a channel
                /// descriptor, and each names a device of its own.)
                0x010F DeviceGetTexture1DLinearMaxWidth => device_get_texture_1d_linear_max_width(DeviceGetTexture1DLinearMaxWidth {
                    format: u32, channels: u32,
                }) -> Texture1DLinearMaxWidth { width: u64 }, Sync;
                /// Make the GPUDirect RDMA writes to the current context visible
                /// (`target` 0, the current context; `scope` 100, its owner, or 200, every
                /// device). There are none through vmcuda, but the call is the GPU's.
                0x0110 FlushGpuDirectRdmaWrites => flush_gpu_direct_rdma_writes(FlushGpuDirectRdmaWrites { target: u32, scope: u32 })
                    -> (), Sync
                    => driver_ctx cuFlushGPUDirectRDMAWrites(target: u32, scope: u32);
                /// The `CUatomicCapability` bits of each `CUatomicOperation` in
                /// `operations`, for atomics from the current device to host memory
                /// (`to_host`) or to device `dst_device`'s memory.
                0x0111 DeviceGetAtomicCapabilities => device_get_atomic_capabilities(DeviceGetAtomicCapabilities {
                    operations: Vec<u32>, to_host: bool, dst_device: i32,
                }) -> AtomicCapabilities { capabilities: Vec<u32> }, Sync;
                /// `cuCtxGetExecAffinity` of the current device's context: the value of
                /// affinity `kind` (a `CUexecAffinityType`; 0, the SM count).
                0x0919 CtxGetExecAffinity => ctx_get_exec_affinity(CtxGetExecAffinity { kind: u32 })
                    -> ExecAffinity { sm_count: u32 }, Sync;
            }

            /// Device allocations, pointer attributes, and guest memory shared with the
            /// backend.
            memory MemoryOps {
                0x0200 MemAlloc => mem_alloc(MemAlloc { size: u64 }) -> Allocated { ptr: DevicePtr }, Sync;
                0x0201 MemFree => mem_free(MemFree { ptr: DevicePtr }) -> (), Sync;
                0x0202 MemAllocPitch => mem_alloc_pitch(MemAllocPitch { width: u64, height: u64 })
                    -> AllocatedPitch { ptr: DevicePtr, pitch: u64 }, Sync;
                0x020C PointerGetAttributes => pointer_get_attributes(PointerGetAttributes { ptr: DevicePtr })
                    -> PointerAttributes, Sync;
                0x020D HostRegisterShared => host_register_shared(HostRegisterShared) -> SharedHostMemory, Sync;
                0x020E HostUnregisterShared => host_unregister_shared(HostUnregisterShared { addr: u64 }) -> (), Sync;
                0x0210 HostRegisterGuestPages => host_register_guest_pages(HostRegisterGuestPages)
                    -> SharedHostMemory, Sync;
                0x0214 RingAttach => ring_attach(RingAttach) -> (), Sync;
                0x0215 GuestPagesGrant => guest_pages_grant(GuestPagesGrant) -> (), Sync;
                0x0216 GuestPagesExtend => guest_pages_extend(GuestPagesExtend) -> (), Sync;
                /// CUDA IPC between processes of one VM (docs/ipc.md): the allocation
                /// holding `ptr` exported through the daemon, which names it by `token`
                /// (128 random bits, no host data) to the VM's other connections.
                0x0217 IpcGetMemHandle => ipc_get_mem_handle(IpcGetMemHandle { ptr: DevicePtr })
                    -> IpcToken { token: [u8; 16] }, Sync;
                /// Another connection's export of the same VM mapped into this one, on
                /// the current device (`flags`: `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`).
                0x0218 IpcOpenMemHandle => ipc_open_mem_handle(IpcOpenMemHandle { token: [u8; 16], flags: u32 })
                    -> IpcOpened { ptr: DevicePtr, size: u64 }, Sync;
                /// One open of an imported allocation closed; the last unmaps it.
                0x0219 IpcCloseMemHandle => ipc_close_mem_handle(IpcCloseMemHandle { ptr: DevicePtr })
                    -> IpcClosed { unmapped: bool }, Sync;
            }

            /// CUDA arrays, copies in three dimensions, texture and surface objects (types
            /// in crate::array). Every one waits: each can be refused at once, and a
            /// copy to the frame brings bytes back.
            array ArrayOps {
                0x0220 ArrayCreate => array_create(ArrayCreate) -> ArrayMade, Sync;
                0x0221 ArrayDestroy => array_destroy(ArrayDestroy { array: ArrayHandle }) -> (), Sync;
                0x0222 MipmappedArrayCreate => mipmapped_array_create(MipmappedArrayCreate) -> MipmappedMade, Sync;
                0x0223 MipmappedArrayGetLevel => mipmapped_array_get_level(MipmappedArrayGetLevel {
                    mipmap: MipmappedHandle, level: u32,
                }) -> LevelMade, Sync;
                0x0224 MipmappedArrayDestroy => mipmapped_array_destroy(MipmappedArrayDestroy { mipmap: MipmappedHandle })
                    -> (), Sync;
                0x0225 Copy3D => copy_3d(Copy3D) -> (), Sync;
                0x0226 TexObjectCreate => tex_object_create(TexObjectCreate) -> TexObject { tex: u64 }, Sync;
                0x0227 TexObjectDestroy => tex_object_destroy(TexObjectDestroy { tex: u64 }) -> (), Sync;
                0x0228 SurfObjectCreate => surf_object_create(SurfObjectCreate { array: ArrayHandle })
                    -> SurfObject { surf: u64 }, Sync;
                0x0229 SurfObjectDestroy => surf_object_destroy(SurfObjectDestroy { surf: u64 }) -> (), Sync;
                /// Texture and surface references (the driver's deprecated API): a
                /// module's by name, or one of the guest's own; named by the session.
                /// The reply's state is the reference's settings as the driver has them.
                0x022A ModuleGetTexRef => module_get_tex_ref(ModuleGetTexRef { module: ModuleHandle, name: String })
                    -> TexRefMade { texref: TexRefId, state: TexRefState }, Sync;
                0x022B TexRefCreate => tex_ref_create(TexRefCreate {}) -> TexRefMade, Sync;
                0x022C TexRefDestroy => tex_ref_destroy(TexRefDestroy { texref: TexRefId }) -> (), Sync;
                /// One `cuTexRefSet*` call; `offset` is `cuTexRefSetAddress`'s answer.
                0x022D TexRefSet => tex_ref_set(TexRefSet { texref: TexRefId, setting: TexRefSetting })
                    -> TexRefSetReply { offset: u64 }, Sync;
                0x022E ModuleGetSurfRef => module_get_surf_ref(ModuleGetSurfRef { module: ModuleHandle, name: String })
                    -> SurfRefMade { surfref: TexRefId }, Sync;
                0x022F SurfRefSetArray => surf_ref_set_array(SurfRefSetArray { surfref: TexRefId, array: ArrayHandle, flags: u32 })
                    -> (), Sync;
                /// `cuParamSetTexRef`: `texunit` must be `CU_PARAM_TR_DEFAULT` (-1).
                0x0230 ParamSetTexRef => param_set_tex_ref(ParamSetTexRef { function: FunctionHandle, texunit: i32, texref: TexRefId })
                    -> (), Sync;
            }

            /// Copies and memsets (the driver's element memsets too).
            copy CopyOps {
                /// Host to device; the bytes are the frame's data section.
                0x0203 MemcpyHtoD => memcpy_htod(MemcpyHtoD { dst: DevicePtr, stream: StreamHandle, is_async: bool })
                    -> (), Async;
                /// Device to host; the bytes come back as the reply's data section.
                0x0204 MemcpyDtoH => memcpy_dtoh(MemcpyDtoH { src: DevicePtr, size: u64, stream: StreamHandle, is_async: bool })
                    -> (), Sync;
                0x0205 MemcpyDtoD => memcpy_dtod(MemcpyDtoD {
                    dst: DevicePtr, src: DevicePtr, size: u64, stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                /// A pitched host-to-device copy; the data section holds the rows packed
                /// (`width * height` bytes), the guest having dropped its own pitch.
                0x0206 Memcpy2DHtoD => memcpy_2d_htod(Memcpy2DHtoD {
                    dst: DevicePtr, dpitch: u64, width: u64, height: u64, stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                /// A pitched device-to-host copy; the reply's data holds the rows packed.
                0x0207 Memcpy2DDtoH => memcpy_2d_dtoh(Memcpy2DDtoH {
                    src: DevicePtr, spitch: u64, width: u64, height: u64, stream: StreamHandle, is_async: bool,
                }) -> (), Sync;
                0x0208 Memcpy2DDtoD => memcpy_2d_dtod(Memcpy2DDtoD {
                    dst: DevicePtr, dpitch: u64, src: DevicePtr, spitch: u64, width: u64, height: u64,
                    stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                0x0209 Memset => memset(Memset {
                    dst: DevicePtr, value: u8, size: u64, stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                0x020A Memset2D => memset_2d(Memset2D {
                    dst: DevicePtr, pitch: u64, value: u8, width: u64, height: u64, stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                0x020B MemcpyPeer => memcpy_peer(MemcpyPeer {
                    dst: DevicePtr, dst_device: i32, src: DevicePtr, src_device: i32, size: u64,
                    stream: StreamHandle, is_async: bool,
                }) -> (), Async;
                0x020F MemcpyShared => memcpy_shared(MemcpyShared) -> (), Async;
                0x0900 MemsetElements => memset_elements(MemsetElements) -> (), Async;
                /// The receiving side of a copy between two hosts' devices, sent to the
                /// host of `dst`: it registers a transfer of `size` bytes into `dst` with
                /// its daemon and names the ticket and the daemon's peer endpoint the
                /// sending host is to use (docs/multi-gpu.md).
                0x0211 PeerExpect => peer_expect(PeerExpect { dst: DevicePtr, size: u64 })
                    -> PeerTicket { ticket: [u8; 16], endpoint: String }, Sync;
                /// The sending side: `size` bytes of `src` go through this host's daemon to
                /// `endpoint`, which must have handed out `ticket`. Posted, as it may wait
                /// for the receiver to read. Zero bytes send nothing: the guest asks with
                /// them whether this host has the link.
                0x0212 PeerSend => peer_send(PeerSend { src: DevicePtr, size: u64, ticket: [u8; 16], endpoint: String })
                    -> (), Async;
                /// The receiving side again: the bytes of `ticket`'s transfer, as they
                /// arrive from the sending host, are written into `dst`.
                0x0213 PeerReceive => peer_receive(PeerReceive { dst: DevicePtr, size: u64, ticket: [u8; 16] })
                    -> (), Sync;
            }

            /// Modules, kernels and launches.
            module ModuleOps {
                /// Load one fatbinary (the raw back-to-back containers, in the data section).
                0x0300 ModuleLoad => module_load(ModuleLoad {}) -> ModuleLoaded {
                    module: ModuleHandle,
                    /// Its kernels call `printf`: a synchronize must reach the host's
                    /// driver, which writes what they printed (see `done_word`).
                    prints: bool,
                }, Sync;
                /// Load an image named by its SHA-256 (hosts that say
                /// `caps::MODULE_CACHE`; types in crate::module). Without data the host
                /// loads it from its VM's module cache, or answers `module: None`, "send
                /// it"; with data (the image), it checks the hash, loads and caches it.
                0x030D ModuleLoadCached => module_load_cached(ModuleLoadCached) -> ModuleLoadedCached, Sync;
                0x0301 ModuleGetFunction => module_get_function(ModuleGetFunction {
                    module: ModuleHandle,
                    /// The mangled kernel name.
                    name: String,
                }) -> FunctionInfo, Sync;
                0x0302 ModuleGetGlobal => module_get_global(ModuleGetGlobal { module: ModuleHandle, name: String })
                    -> GlobalInfo { ptr: DevicePtr, size: u64, managed: bool }, Sync;
                0x0303 FuncGetAttributes => func_get_attributes(FuncGetAttributes { function: FunctionHandle })
                    -> FuncAttributes, Sync;
                0x0304 FuncSetAttribute => func_set_attribute(FuncSetAttribute {
                    function: FunctionHandle,
                    /// A `cudaFuncAttribute`.
                    attribute: i32,
                    value: i32,
                }) -> (), Sync;
                0x0305 FuncSetCacheConfig => func_set_cache_config(FuncSetCacheConfig { function: FunctionHandle, config: u32 })
                    -> (), Sync;
                0x0306 LaunchKernel => launch_kernel(LaunchKernel) -> (), Async;
                0x0307 OccupancyMaxActiveBlocks => occupancy_max_active_blocks(OccupancyMaxActiveBlocks {
                    function: FunctionHandle, block_size: i32, dynamic_smem: u64, flags: u32,
                }) -> BlockCount { blocks: i32 }, Sync;
                0x0308 OccupancyAvailableDynamicSmem => occupancy_available_dynamic_smem(OccupancyAvailableDynamicSmem {
                    function: FunctionHandle, num_blocks: i32, block_size: i32,
                }) -> SmemBytes { bytes: u64 }, Sync;
                /// How many clusters of the launch's shape fit on the device at once
                /// (`cuOccupancyMaxActiveClusters`; the launch's stream is not used).
                0x030A OccupancyMaxActiveClusters => occupancy_max_active_clusters(OccupancyMaxActiveClusters {
                    function: FunctionHandle,
                    grid: [u32; 3],
                    block: [u32; 3],
                    shared_mem: u32,
                    attributes: Vec<LaunchAttribute>,
                }) -> ClusterCount { clusters: i32 }, Sync;
                /// The largest cluster the launch's shape could run with
                /// (`cuOccupancyMaxPotentialClusterSize`; the cluster dimension attribute,
                /// if any, and the stream are not used).
                0x030B OccupancyMaxPotentialClusterSize => occupancy_max_potential_cluster_size(OccupancyMaxPotentialClusterSize {
                    function: FunctionHandle,
                    grid: [u32; 3],
                    block: [u32; 3],
                    shared_mem: u32,
                    attributes: Vec<LaunchAttribute>,
                }) -> ClusterSize { size: i32 }, Sync;
                /// Every kernel of a module, by mangled name (`cuLibraryEnumerateKernels`).
                0x0309 ModuleFunctionNames => module_function_names(ModuleFunctionNames { module: ModuleHandle })
                    -> FunctionNames { names: Vec<String> }, Sync;
                /// Every kernel of a module with its handle and parameters, in one
                /// round trip (cuDNN walks every function of each module it loads).
                0x030C ModuleFunctions => module_functions(ModuleFunctions { module: ModuleHandle })
                    -> FunctionList { functions: Vec<(String, FunctionInfo)> }, Sync;
                0x090C Link => link(Link) -> Linked, Sync;
                0x090D TensorMapEncodeTiled => tensor_map_encode_tiled(TensorMapEncodeTiled) -> (), Sync;
                /// The im2col encodings (plain and wide) and a map's new address: the
                /// host's driver computes them; the reply's data is the 128-byte map.
                0x0914 TensorMapEncodeIm2col => tensor_map_encode_im2col(TensorMapEncodeIm2col) -> (), Sync;
                0x0915 TensorMapReplaceAddress => tensor_map_replace_address(TensorMapReplaceAddress) -> (), Sync;
            }

            /// Streams and events.
            stream StreamOps {
                0x0400 StreamCreate => stream_create(StreamCreate { stream: StreamHandle, flags: u32, priority: i32 })
                    -> (), Async;
                0x0401 StreamDestroy => stream_destroy(StreamDestroy { stream: StreamHandle }) -> (), Async;
                0x0402 StreamSynchronize => stream_synchronize(StreamSynchronize { stream: StreamHandle }) -> (), Sync;
                0x0403 StreamQuery => stream_query(StreamQuery { stream: StreamHandle }) -> (), Sync;
                0x0404 StreamWaitEvent => stream_wait_event(StreamWaitEvent { stream: StreamHandle, event: EventHandle, flags: u32 })
                    -> (), Async;
                0x0901 StreamWriteValue32 => stream_write_value32(StreamWriteValue32) -> (), Async;
                0x090E StreamWriteValue64 => stream_write_value64(StreamWriteValue64) -> (), Async;
                0x090F StreamWaitValue => stream_wait_value(StreamWaitValue) -> (), Async;
                /// `cuStreamBatchMemOp`: waits and writes of words (checked as the single
                /// ones are), flushes and barriers, in the stream's order.
                0x0912 StreamBatchMemOp => stream_batch_mem_op(StreamBatchMemOp) -> (), Async;
                /// `cuMemBatchDecompressAsync`, waited for: the driver's answer (a
                /// `CUresult`) and the index of the operation an error is about
                /// (`u64::MAX`: none, or the batch's).
                0x0916 MemBatchDecompress => mem_batch_decompress(MemBatchDecompress)
                    -> DecompressAnswer { status: u32, error_index: u64 }, Sync;
                /// A stream attribute (`cudaStreamAttrID`: the launch attributes'
                /// numbers) and its value, the 64 bytes of `cudaStreamAttrValue`.
                0x0405 StreamSetAttribute => stream_set_attribute(StreamSetAttribute { stream: StreamHandle, attr: u32, value: Vec<u8> })
                    -> (), Sync;
                0x0406 StreamGetAttribute => stream_get_attribute(StreamGetAttribute { stream: StreamHandle, attr: u32 })
                    -> StreamAttribute { value: Vec<u8> }, Sync;
                0x0407 StreamCopyAttributes => stream_copy_attributes(StreamCopyAttributes { dst: StreamHandle, src: StreamHandle })
                    -> (), Sync;
                0x0500 EventCreate => event_create(EventCreate { event: EventHandle, flags: u32 }) -> (), Async;
                0x0501 EventDestroy => event_destroy(EventDestroy { event: EventHandle }) -> (), Async;
                0x0502 EventRecord => event_record(EventRecord { event: EventHandle, stream: StreamHandle, flags: u32 })
                    -> (), Async;
                0x0503 EventSynchronize => event_synchronize(EventSynchronize { event: EventHandle }) -> (), Sync;
                0x0504 EventQuery => event_query(EventQuery { event: EventHandle }) -> (), Sync;
                0x0505 EventElapsedTime => event_elapsed_time(EventElapsedTime { start: EventHandle, end: EventHandle })
                    -> ElapsedTime { ms: f32 }, Sync;
                /// `cuCtxRecordEvent`: `event` (of the current device) captures all the
                /// work of the current device's context.
                0x0917 CtxRecordEvent => ctx_record_event(CtxRecordEvent { event: EventHandle }) -> (), Sync;
                /// `cuCtxWaitEvent`: the current device's context's later work waits for
                /// the work `event` (of the current device) captured.
                0x0918 CtxWaitEvent => ctx_wait_event(CtxWaitEvent { event: EventHandle }) -> (), Sync;
                /// An interprocess event exported through the daemon for the VM's other
                /// connections (`cuIpcGetEventHandle`).
                0x0506 IpcGetEventHandle => ipc_get_event_handle(IpcGetEventHandle { event: EventHandle })
                    -> IpcToken, Sync;
                /// Another connection's exported event opened here as `event`, a handle
                /// the guest names (`cuIpcOpenEventHandle`).
                0x0507 IpcOpenEventHandle => ipc_open_event_handle(IpcOpenEventHandle { event: EventHandle, token: [u8; 16] })
                    -> (), Sync;
            }

            /// Stream capture and graphs (types in crate::graph). Capture begins and
            /// ends waiting (the driver may refuse either); a graph launch and the
            /// destruction of objects the guest knows it made are posted.
            graph GraphOps {
                0x0700 StreamBeginCapture => stream_begin_capture(StreamBeginCapture) -> (), Sync;
                0x0701 StreamEndCapture => stream_end_capture(StreamEndCapture) -> GraphMade, Sync;
                0x0702 GraphInstantiate => graph_instantiate(GraphInstantiate) -> GraphExecMade, Sync;
                0x0703 GraphLaunch => graph_launch(GraphLaunch) -> (), Async;
                0x0704 GraphDestroy => graph_destroy(GraphDestroy) -> (), Async;
                0x0705 GraphExecDestroy => graph_exec_destroy(GraphExecDestroy) -> (), Async;
                0x0706 GraphGetNodes => graph_get_nodes(GraphGetNodes) -> GraphNodes, Sync;
                0x0707 GraphNodeGetDependencies => graph_node_get_dependencies(GraphNodeGetDependencies)
                    -> LinkedNodes, Sync;
                0x0708 GraphDebugDot => graph_debug_dot(GraphDebugDot) -> DotText, Sync;
                0x070F StreamGetCaptureGraph => stream_get_capture_graph(StreamGetCaptureGraph) -> CaptureGraph, Sync;
                /// Graphs built by hand. Kernel, copy, memset and memory nodes are work
                /// captured into the graph (`StreamBeginCaptureToGraph`); the rest are
                /// these ops. Every one waits: each can be refused at once.
                0x0714 GraphCreate => graph_create(GraphCreate { flags: u32 }) -> GraphMade, Sync
                    => driver cuGraphCreate(out graph: *mut c_void, flags: u32);
                0x0715 StreamBeginCaptureToGraph => stream_begin_capture_to_graph(StreamBeginCaptureToGraph)
                    -> (), Sync;
                0x0716 GraphAddNode => graph_add_node(GraphAddNode) -> GraphNodeMade, Sync;
                0x0717 GraphNodeGetType => graph_node_get_type(GraphNodeGetType { node: GraphNodeHandle })
                    -> NodeType { ty: u32 }, Sync
                    => driver cuGraphNodeGetType(node: *mut c_void, out ty: u32);
                0x0718 GraphAddDependencies => graph_add_dependencies(GraphAddDependencies {
                    graph: GraphHandle, from: Vec<GraphNodeHandle>, to: Vec<GraphNodeHandle>, edges: Vec<RawEdge>,
                }) -> (), Sync;
                0x0719 GraphRemoveDependencies => graph_remove_dependencies(GraphRemoveDependencies {
                    graph: GraphHandle, from: Vec<GraphNodeHandle>, to: Vec<GraphNodeHandle>, edges: Vec<RawEdge>,
                }) -> (), Sync;
                0x071A GraphGetEdges => graph_get_edges(GraphGetEdges { graph: GraphHandle }) -> EdgeList, Sync;
                0x071B GraphGetRootNodes => graph_get_root_nodes(GraphGetRootNodes { graph: GraphHandle })
                    -> GraphNodes, Sync;
                0x071C GraphNodeGetDependentNodes => graph_node_get_dependent_nodes(GraphNodeGetDependentNodes { node: GraphNodeHandle })
                    -> LinkedNodes, Sync;
                0x071D GraphDestroyNode => graph_destroy_node(GraphDestroyNode { node: GraphNodeHandle }) -> (), Sync
                    => driver cuGraphDestroyNode(node: *mut c_void);
                /// (`cudaGraphClone` is the guest's own: it also gives the clone's host
                /// nodes their functions.)
                0x071E GraphClone => graph_clone(GraphClone { original: GraphHandle }) -> GraphMade, Sync;
                0x071F GraphNodeFindInClone => graph_node_find_in_clone(GraphNodeFindInClone { original: GraphNodeHandle, clone: GraphHandle })
                    -> GraphNodeMade, Sync
                    => driver cuGraphNodeFindInClone(out node: *mut c_void, original: *mut c_void, clone: *mut c_void);
                0x0720 GraphExecUpdate => graph_exec_update(GraphExecUpdate { exec: GraphExecHandle, graph: GraphHandle })
                    -> ExecUpdateResult, Sync;
                0x0721 GraphNodeSetEnabled => graph_node_set_enabled(GraphNodeSetEnabled { exec: GraphExecHandle, node: GraphNodeHandle, enabled: u32 })
                    -> (), Sync
                    => driver cuGraphNodeSetEnabled(exec: *mut c_void, node: *mut c_void, enabled: u32);
                0x0722 GraphNodeGetEnabled => graph_node_get_enabled(GraphNodeGetEnabled { exec: GraphExecHandle, node: GraphNodeHandle })
                    -> NodeEnabled { enabled: u32 }, Sync
                    => driver cuGraphNodeGetEnabled(exec: *mut c_void, node: *mut c_void, out enabled: u32);
                0x0723 GraphUpload => graph_upload(GraphUpload { exec: GraphExecHandle, stream: StreamHandle }) -> (), Async;
                0x0724 GraphChildGraphNodeGetGraph => graph_child_graph_node_get_graph(GraphChildGraphNodeGetGraph { node: GraphNodeHandle })
                    -> GraphMade, Sync
                    => driver cuGraphChildGraphNodeGetGraph(node: *mut c_void, out graph: *mut c_void);
                0x0725 GraphNodeCopyParams => graph_node_copy_params(GraphNodeCopyParams) -> (), Sync;
                /// A new graph for child-graph node `node` of executable graph `exec`
                /// (`cuGraphExecChildGraphNodeSetParams`): one request where
                /// [`GraphNodeCopyParams`] takes a scratch graph with a node of
                /// `child` and its end (XLA updates its command buffers' child graphs
                /// every step).
                0x0739 GraphExecChildGraphNodeSetParams => graph_exec_child_graph_node_set_params(
                    GraphExecChildGraphNodeSetParams { exec: GraphExecHandle, node: GraphNodeHandle, child: GraphHandle }
                ) -> (), Sync;
                /// New kernel parameters for kernel node `node`: in its graph, or, with
                /// `exec`, in that executable graph only (`cu(da)Graph[Exec]KernelNodeSetParams`).
                /// The data section is `function`'s packed parameter buffer. One request
                /// where [`GraphNodeCopyParams`] takes a scratch graph and a capture;
                /// posted when the guest has made the checks the driver makes before
                /// returning (frameworks update their graphs' kernels every step).
                0x0737 GraphKernelNodeSetParams => graph_kernel_node_set_params(GraphKernelNodeSetParams {
                    node: GraphNodeHandle,
                    exec: Option<GraphExecHandle>,
                    function: FunctionHandle,
                    grid: [u32; 3],
                    block: [u32; 3],
                    shared_mem: u32,
                }) -> (), Async;
                /// A kernel node's parameters as the driver holds them
                /// (`cuGraphKernelNodeGetParams` of a node the guest did not build by
                /// hand: a captured one, whose launch the guest does not keep): its
                /// function, shape and, in the reply's data section, its packed
                /// parameter buffer.
                0x0738 GraphKernelNodeGetParams => graph_kernel_node_get_params(GraphKernelNodeGetParams { node: GraphNodeHandle })
                    -> KernelNodeParameters {
                        function: FunctionHandle,
                        grid: [u32; 3],
                        block: [u32; 3],
                        shared_mem: u32,
                    }, Sync;
                0x0726 GraphConditionalHandleCreate => graph_conditional_handle_create(GraphConditionalHandleCreate {
                    graph: GraphHandle, default_value: u32, flags: u32,
                }) -> ConditionalHandle { handle: u64 }, Sync;
                0x0727 GraphAddConditionalNode => graph_add_conditional_node(GraphAddConditionalNode)
                    -> ConditionalNodeMade, Sync;
                /// A host function's place in stream order (a graph's host node, a
                /// captured `cudaLaunchHostFunc`): the stream sets the request word of
                /// `slot`, 8 bytes of shared pinned memory (request, done), and waits
                /// until the guest, having run the function, sets the done word.
                0x0728 HostFunctionSignal => host_function_signal(HostFunctionSignal { stream: StreamHandle, slot: u64 })
                    -> (), Async;
                /// `cudaStreamUpdateCaptureDependencies`: the capturing stream's next
                /// work depends on these nodes of its graph, instead of (`set`) or
                /// besides what it did.
                0x0729 StreamUpdateCaptureDependencies => stream_update_capture_dependencies(StreamUpdateCaptureDependencies {
                    stream: StreamHandle, dependencies: Vec<GraphNodeHandle>, edges: Vec<RawEdge>, set: bool,
                }) -> (), Sync;
                /// A kernel node's launch attribute: `attr` a `CUkernelNodeAttrID`, the
                /// value the 64 bytes of `CUkernelNodeAttrValue` (a stream's, too).
                0x072D GraphKernelNodeSetAttribute => graph_kernel_node_set_attribute(GraphKernelNodeSetAttribute {
                    node: GraphNodeHandle, attr: u32, value: Vec<u8>,
                }) -> (), Sync;
                0x072E GraphKernelNodeGetAttribute => graph_kernel_node_get_attribute(GraphKernelNodeGetAttribute {
                    node: GraphNodeHandle, attr: u32,
                }) -> KernelNodeAttribute { value: Vec<u8> }, Sync;
                0x072F GraphKernelNodeCopyAttributes => graph_kernel_node_copy_attributes(GraphKernelNodeCopyAttributes {
                    dst: GraphNodeHandle, src: GraphNodeHandle,
                }) -> (), Sync
                    => driver cuGraphKernelNodeCopyAttributes(dst: *mut c_void, src: *mut c_void);
            }

            /// Stream-ordered memory and memory pools (types in crate::graph).
            pool PoolOps {
                0x0709 MemAllocAsync => mem_alloc_async(MemAllocAsync) -> Allocated, Sync;
                0x070A MemFreeAsync => mem_free_async(MemFreeAsync) -> (), Async;
                0x070B MemPoolGetAttribute => mem_pool_get_attribute(MemPoolGetAttribute) -> PoolAttributeValue, Sync;
                0x070C MemPoolSetAttribute => mem_pool_set_attribute(MemPoolSetAttribute) -> (), Sync;
                0x070D MemPoolTrimTo => mem_pool_trim_to(MemPoolTrimTo) -> (), Sync;
                0x070E MemPoolSetAccess => mem_pool_set_access(MemPoolSetAccess) -> (), Sync;
                0x0710 MemPoolCreate => mem_pool_create(MemPoolCreate) -> PoolMade, Sync;
                0x0711 MemPoolDestroy => mem_pool_destroy(MemPoolDestroy) -> (), Sync;
                0x0712 MemAllocFromPoolAsync => mem_alloc_from_pool_async(MemAllocFromPoolAsync) -> Allocated, Sync;
                0x0713 MemPoolGetAccess => mem_pool_get_access(MemPoolGetAccess) -> PoolAccess, Sync;
                /// A shareable pool the guest made, exported for the same program to
                /// import (`cudaMemPoolExportToShareableHandle`): the host keeps what the
                /// driver gave and names it by `export`.
                0x0730 MemPoolExportShareable => mem_pool_export_shareable(MemPoolExportShareable {
                    pool: MemPoolHandle,
                }) -> Exported { export: u64 }, Sync;
                /// A pool exported by this guest, imported as another pool of its own.
                0x0731 MemPoolImportShareable => mem_pool_import_shareable(MemPoolImportShareable {
                    export: u64,
                }) -> PoolMade, Sync;
                /// An allocation from a shareable pool, exported for an import of the pool
                /// (`cudaMemPoolExportPointer`): the driver's export data stays on the host.
                0x0732 MemPoolExportPointer => mem_pool_export_pointer(MemPoolExportPointer {
                    ptr: DevicePtr,
                }) -> Exported, Sync;
                /// An exported allocation mapped again through an imported pool: a new
                /// address for the same memory, charged as an allocation of its size.
                0x0733 MemPoolImportPointer => mem_pool_import_pointer(MemPoolImportPointer {
                    pool: MemPoolHandle, export: u64,
                }) -> PointerImported { ptr: DevicePtr, size: u64 }, Sync;
                /// A pool or allocation export of the guest's (0x0730, 0x0732) offered to
                /// the VM's other processes through the daemon's registry (docs/ipc.md):
                /// its token, the same again for the same pool or allocation.
                0x0734 MemPoolShareExport => mem_pool_share_export(MemPoolShareExport {
                    export: u64,
                }) -> IpcToken, Sync;
                /// Another process's pool export of the same VM imported as a pool of this
                /// guest's, on the exporter's device (`device`, the host's number).
                0x0735 MemPoolImportShared => mem_pool_import_shared(MemPoolImportShared {
                    token: [u8; 16],
                }) -> PoolImported { pool: MemPoolHandle, device: i32 }, Sync;
                /// Another process's allocation export mapped through a pool imported
                /// with 0x0735, charged to its exporter.
                0x0736 MemPoolImportSharedPointer => mem_pool_import_shared_pointer(MemPoolImportSharedPointer {
                    pool: MemPoolHandle, token: [u8; 16],
                }) -> PointerImported, Sync;
                /// The current device's graph memory: trimmed (`cudaDeviceGraphMemTrim`),
                /// and its figures (`cudaGraphMemAttr*`; setting resets a high mark).
                0x072A DeviceGraphMemTrim => device_graph_mem_trim(DeviceGraphMemTrim {}) -> (), Sync
                    => exec device_graph_mem_trim();
                0x072B DeviceGetGraphMemAttribute => device_get_graph_mem_attribute(DeviceGetGraphMemAttribute { attr: u32 })
                    -> GraphMemAttribute { value: u64 }, Sync;
                0x072C DeviceResetGraphMemHigh => device_reset_graph_mem_high(DeviceResetGraphMemHigh { attr: u32 })
                    -> (), Sync;
            }

            /// The driver's virtual memory management (types in crate::driver). VMM calls wait: each can fail with a code the program
            /// checks at once (quota, a range outside a reservation).
            vmm VmmOps {
                0x0902 MemAddressReserve => mem_address_reserve(MemAddressReserve) -> Reserved, Sync;
                0x0903 MemAddressFree => mem_address_free(MemAddressFree) -> (), Sync;
                0x0904 MemCreate => mem_create(MemCreate) -> MemCreated, Sync;
                0x0905 MemRelease => mem_release(MemRelease) -> (), Sync;
                0x0906 MemMap => mem_map(MemMap) -> (), Sync;
                0x0907 MemUnmap => mem_unmap(MemUnmap) -> (), Sync;
                0x0908 MemSetAccess => mem_set_access(MemSetAccess) -> (), Sync;
                0x0909 MemGetAllocationGranularity => mem_get_allocation_granularity(MemGetAllocationGranularity)
                    -> Granularity, Sync;
                0x090A MemRetainAllocationHandle => mem_retain_allocation_handle(MemRetainAllocationHandle)
                    -> MemCreated, Sync;
                0x090B MemGetAllocationProperties => mem_get_allocation_properties(MemGetAllocationProperties)
                    -> AllocationProp, Sync;
                /// A physical allocation exported for the VM's other processes
                /// (`cuMemExportToShareableHandle`, POSIX descriptor): the daemon's token,
                /// which the guest puts in a descriptor of its own.
                0x0910 MemExportShareable => mem_export_shareable(MemExportShareable { handle: AllocationHandle, handle_type: u32 })
                    -> IpcToken, Sync;
                /// Another process's exported allocation, a physical allocation of this
                /// one's (`cuMemImportFromShareableHandle`), charged to its exporter.
                0x0911 MemImportShareable => mem_import_shareable(MemImportShareable { token: [u8; 16], handle_type: u32 })
                    -> MemCreated, Sync;
                /// `cuMemGetAccess`: the `CUmemAccess_flags` a device (`location_id`, a
                /// `CU_MEM_LOCATION_TYPE_DEVICE` location) has to the mapped memory at `ptr`.
                0x0913 MemGetAccess => mem_get_access(MemGetAccess { ptr: DevicePtr, location_type: u32, location_id: i32 })
                    -> AccessFlags { flags: u64 }, Sync;
            }
        }
    };
}
