//! Modules, kernels and launches, linking and tensor maps.
//!
//! A module's globals and constant banks are charged to the quota when it is loaded
//! on a device (once per device and image, rounded as an allocation of that size) and
//! held until the session ends: the driver keeps a library loaded, and brings its data
//! back into a reset context as soon as it is used again. Its image counts against the
//! VM's host memory for as long (see `host_memory`), and so does each captured launch.

use sha2::{Digest, Sha256};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use crate::executor::driver::LinkInputData;
use crate::executor::{allocation_footprint, LaunchConfig};

/// Launch attribute values are a 64-byte union in CUDA.
const LAUNCH_ATTRIBUTE_VALUE_LEN: usize = 64;

use super::accounting::Held;
use super::host_memory::node_bytes;
use super::{nothing, Session};
use crate::executor::ModuleFacts;
use crate::module_cache::{KeptFacts, Lookup};

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT` and `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`:
/// attributes whose value starts with an event.
const EVENT_ATTRIBUTES: [u32; 2] = [7, 12];

impl Session {
    /// The guest's events named in launch attributes, as the executor's: the value of
    /// an event attribute starts with the guest's event handle.
    fn resolve_attribute_events(
        &self,
        attributes: &mut [LaunchAttribute],
    ) -> Result<(), CudaStatus> {
        for a in attributes
            .iter_mut()
            .filter(|a| EVENT_ATTRIBUTES.contains(&a.id))
        {
            let mut handle = [0u8; 8];
            let n = a.value.len().min(8);
            handle[..n].copy_from_slice(&a.value[..n]);
            let event = self
                .handles
                .event(EventHandle(u64::from_le_bytes(handle)))?;
            if a.value.len() < 8 {
                a.value.resize(8, 0);
            }
            a.value[..8].copy_from_slice(&event.to_le_bytes());
        }
        Ok(())
    }

    /// A launch's configuration for the executor: its stream looked up, its
    /// attributes' values no larger than CUDA's union.
    fn launch_config<'a>(
        &self,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: StreamHandle,
        attributes: &'a [LaunchAttribute],
    ) -> Result<LaunchConfig<'a>, CudaStatus> {
        let stream = self.handles.stream(stream)?;
        if attributes
            .iter()
            .any(|a| a.value.len() > LAUNCH_ATTRIBUTE_VALUE_LEN)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(LaunchConfig {
            grid,
            block,
            shared_mem,
            stream,
            attributes,
        })
    }

    /// Load `image`, whose SHA-256 is `sha256`, charging its data and its host copy:
    /// the guest's handle of the module (the one it has already, for the same image),
    /// whether its kernels call `printf`, and what was measured of it here (for the
    /// VM's module cache). `known`: what the cache kept of it for this GPU, which
    /// spares measuring it again.
    fn load_image(
        &mut self,
        ctx: &CallContext,
        image: &[u8],
        sha256: [u8; 32],
        known: Option<KeptFacts>,
    ) -> Result<(ModuleHandle, bool, Option<KeptFacts>), CudaStatus> {
        self.accounts
            .check_count("module", self.handles.modules.len(), self.grant.max_modules)?;
        // The module's globals and constant banks take device memory the moment it is
        // loaded: charged first, as an allocation of that size would be.
        // The same image again on this device is the same library: charged once.
        let held = Held::Module(sha256);
        let mut measured = None;
        let bytes = match self.accounts.held(ctx.device, held) {
            0 => {
                let facts = match known {
                    Some(k) => ModuleFacts {
                        data_len: k.data_len,
                        prints: k.prints,
                    },
                    None => {
                        let facts = self.exec.module_facts(image)?;
                        measured = self.exec.image_arch().ok().map(|arch| KeptFacts {
                            arch,
                            data_len: facts.data_len,
                            prints: facts.prints,
                        });
                        facts
                    }
                };
                if facts.prints {
                    self.printing_images.insert(sha256);
                }
                allocation_footprint(facts.data_len)
            }
            _ => 0,
        };
        let prints = self.printing_images.contains(&sha256);
        // The executor (or the driver) keeps the image on the host while the module is
        // loaded: until the session ends.
        let image_bytes = image.len() as u64;
        self.accounts.host.charge(image_bytes, "module image")?;
        if let Err(e) = self.accounts.charge(bytes) {
            self.accounts.host.refund(image_bytes);
            return Err(e);
        }
        let m = match self.exec.load_module(image) {
            Ok(m) => m,
            Err(e) => {
                self.accounts.refund(bytes);
                self.accounts.host.refund(image_bytes);
                return Err(e);
            }
        };
        if bytes > 0 {
            self.accounts.held.insert((ctx.device, held), bytes);
        }
        if let Some((h, _)) = self.handles.modules.iter().find(|(_, v)| **v == m) {
            // The module the guest already has: its image is kept once.
            self.accounts.host.refund(image_bytes);
            return Ok((*h, prints, measured));
        }
        let module = ModuleHandle(self.handles.fresh());
        self.handles.modules.insert(module, m);
        Ok((module, prints, measured))
    }
}

impl ModuleOps for Session {
    fn module_load(
        &mut self,
        ctx: &CallContext,
        _: ModuleLoad,
        image: &[u8],
    ) -> HandlerResult<ModuleLoaded> {
        self.accounts.stats.module_received(image.len() as u64);
        let (module, prints, _) =
            self.load_image(ctx, image, Sha256::digest(image).into(), None)?;
        Ok((ModuleLoaded { module, prints }, Vec::new()))
    }

    fn module_load_cached(
        &mut self,
        ctx: &CallContext,
        req: ModuleLoadCached,
        image: &[u8],
    ) -> HandlerResult<ModuleLoadedCached> {
        if !image.is_empty() {
            // The bytes must be the image the guest named: what goes into the VM's
            // cache is served to its other processes by that name.
            if Sha256::digest(image).as_slice() != req.sha256 {
                tracing::warn!(client = %self.client, len = image.len(),
                    "module image does not match the SHA-256 it was sent with; refused");
                return Err(CudaStatus::ErrorInvalidKernelImage);
            }
            self.accounts.stats.module_received(image.len() as u64);
            let (module, prints, measured) = self.load_image(ctx, image, req.sha256, None)?;
            // Kept once the driver took it: an image it refuses is not worth a slot. One
            // small enough to go with its hash is always sent so (the guest library
            // never names it alone): kept, it would only push larger ones out.
            let worth_keeping = image.len() > vmcuda_wire::module::INLINE_IMAGE_MAX;
            if let Some(cache) = self.module_cache.as_ref().filter(|_| worth_keeping) {
                if let Err(e) = cache.put(&req.sha256, image, measured) {
                    tracing::warn!(client = %self.client, "cannot keep a module image in the VM's cache: {e}");
                }
            }
            return Ok((
                ModuleLoadedCached {
                    module: Some(module),
                    prints,
                },
                Vec::new(),
            ));
        }
        // An image read from the cache is held as a sent one would be: refused before
        // it is read when the guest's host memory could not keep it.
        let host = &mut self.accounts.host;
        let found = match &self.module_cache {
            Some(cache) => cache
                .get(&req.sha256, |len| host.fits(len, "module image").is_ok())
                .unwrap_or_else(|e| {
                    tracing::warn!(client = %self.client, "cannot read the VM's module cache: {e}");
                    Lookup::Miss
                }),
            None => Lookup::Miss,
        };
        let cached = match found {
            Lookup::Hit(cached) => cached,
            Lookup::Refused(_) => return Err(CudaStatus::ErrorMemoryAllocation),
            Lookup::Miss => {
                self.accounts.stats.module_cache_miss();
                return Ok((ModuleLoadedCached::default(), Vec::new()));
            }
        };
        self.accounts.stats.module_cache_hit(cached.len() as u64);
        let known = match (self.exec.image_arch(), &self.module_cache) {
            (Ok(arch), Some(cache)) => cache.facts(&req.sha256, arch).ok().flatten(),
            _ => None,
        };
        let (module, prints, measured) = self.load_image(ctx, &cached, req.sha256, known)?;
        // Measured now (kept before facts were): kept for the next process.
        if let (Some(facts), Some(cache)) = (measured, &self.module_cache) {
            let _ = cache.put(&req.sha256, &cached, Some(facts));
        }
        Ok((
            ModuleLoadedCached {
                module: Some(module),
                prints,
            },
            Vec::new(),
        ))
    }

    fn module_get_function(
        &mut self,
        _: &CallContext,
        req: ModuleGetFunction,
        _: &[u8],
    ) -> HandlerResult<FunctionInfo> {
        let m = self.handles.module(req.module)?;
        let (f, params) = self.exec.get_function(m, &req.name)?;
        let function = self.handles.name_function(f);
        Ok((FunctionInfo { function, params }, Vec::new()))
    }

    fn module_get_global(
        &mut self,
        ctx: &CallContext,
        req: ModuleGetGlobal,
        _: &[u8],
    ) -> HandlerResult<GlobalInfo> {
        let m = self.handles.module(req.module)?;
        let (ptr, size, managed) = self.exec.get_global(m, &req.name)?;
        // The guest may now copy to and from this variable.
        if ptr != 0 {
            self.accounts.globals.insert(ptr, (size, ctx.device));
        }
        Ok((GlobalInfo { ptr, size, managed }, Vec::new()))
    }

    fn module_function_names(
        &mut self,
        _: &CallContext,
        req: ModuleFunctionNames,
        _: &[u8],
    ) -> HandlerResult<FunctionNames> {
        let m = self.handles.module(req.module)?;
        let names = self.exec.function_names(m)?;
        Ok((FunctionNames { names }, Vec::new()))
    }

    fn module_functions(
        &mut self,
        _: &CallContext,
        req: ModuleFunctions,
        _: &[u8],
    ) -> HandlerResult<FunctionList> {
        let m = self.handles.module(req.module)?;
        let mut functions = Vec::new();
        for name in self.exec.function_names(m)? {
            let (f, params) = self.exec.get_function(m, &name)?;
            let function = self.handles.name_function(f);
            functions.push((name, FunctionInfo { function, params }));
        }
        Ok((FunctionList { functions }, Vec::new()))
    }

    fn func_get_attributes(
        &mut self,
        _: &CallContext,
        req: FuncGetAttributes,
        _: &[u8],
    ) -> HandlerResult<FuncAttributes> {
        let f = self.handles.function(req.function)?;
        Ok((self.exec.func_attributes(f)?, Vec::new()))
    }

    fn func_set_attribute(
        &mut self,
        _: &CallContext,
        req: FuncSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        let f = self.handles.function(req.function)?;
        self.exec.func_set_attribute(f, req.attribute, req.value)?;
        nothing()
    }

    fn func_set_cache_config(
        &mut self,
        _: &CallContext,
        req: FuncSetCacheConfig,
        _: &[u8],
    ) -> HandlerResult<()> {
        let f = self.handles.function(req.function)?;
        self.exec.func_set_cache_config(f, req.config)?;
        nothing()
    }

    fn launch_kernel(
        &mut self,
        _: &CallContext,
        mut req: LaunchKernel,
        params: &[u8],
    ) -> HandlerResult<()> {
        let f = self.handles.function(req.function)?;
        self.resolve_attribute_events(&mut req.attributes)?;
        let config = self.launch_config(
            req.grid,
            req.block,
            req.shared_mem,
            req.stream,
            &req.attributes,
        )?;
        for a in config.attributes {
            self.check_access_window(a.id, &a.value)?;
        }
        // Captured, the launch is a node that keeps its parameters and attributes.
        let kept = node_bytes(
            params.len() as u64
                + config
                    .attributes
                    .iter()
                    .map(|a| a.value.len() as u64 + 8)
                    .sum::<u64>(),
        );
        let charge = self.captured_node(config.stream, kept)?;
        let launched = self.exec.launch(f, &config, params);
        self.node_made(charge, launched)?;
        self.accounts.stats.kernel_launched();
        nothing()
    }

    fn occupancy_max_active_clusters(
        &mut self,
        _: &CallContext,
        req: OccupancyMaxActiveClusters,
        _: &[u8],
    ) -> HandlerResult<ClusterCount> {
        let f = self.handles.function(req.function)?;
        let config = self.launch_config(
            req.grid,
            req.block,
            req.shared_mem,
            StreamHandle::LEGACY,
            &req.attributes,
        )?;
        let clusters = self.exec.occupancy_max_active_clusters(f, &config)?;
        Ok((ClusterCount { clusters }, Vec::new()))
    }

    fn occupancy_max_potential_cluster_size(
        &mut self,
        _: &CallContext,
        req: OccupancyMaxPotentialClusterSize,
        _: &[u8],
    ) -> HandlerResult<ClusterSize> {
        let f = self.handles.function(req.function)?;
        let config = self.launch_config(
            req.grid,
            req.block,
            req.shared_mem,
            StreamHandle::LEGACY,
            &req.attributes,
        )?;
        let size = self.exec.occupancy_max_potential_cluster_size(f, &config)?;
        Ok((ClusterSize { size }, Vec::new()))
    }

    fn occupancy_max_active_blocks(
        &mut self,
        _: &CallContext,
        req: OccupancyMaxActiveBlocks,
        _: &[u8],
    ) -> HandlerResult<BlockCount> {
        let f = self.handles.function(req.function)?;
        let blocks = self.exec.occupancy_max_active_blocks(
            f,
            req.block_size,
            req.dynamic_smem,
            req.flags,
        )?;
        Ok((BlockCount { blocks }, Vec::new()))
    }

    fn occupancy_available_dynamic_smem(
        &mut self,
        _: &CallContext,
        req: OccupancyAvailableDynamicSmem,
        _: &[u8],
    ) -> HandlerResult<SmemBytes> {
        let f = self.handles.function(req.function)?;
        let bytes =
            self.exec
                .occupancy_available_dynamic_smem(f, req.num_blocks, req.block_size)?;
        Ok((SmemBytes { bytes }, Vec::new()))
    }

    fn link(&mut self, _: &CallContext, req: Link, data: &[u8]) -> HandlerResult<Linked> {
        let mut inputs = Vec::with_capacity(req.inputs.len());
        let mut rest = data;
        for input in &req.inputs {
            let len = usize::try_from(input.len).map_err(|_| CudaStatus::ErrorInvalidValue)?;
            if len > rest.len() {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            let (bytes, tail) = rest.split_at(len);
            rest = tail;
            inputs.push(LinkInputData {
                kind: input.kind,
                name: &input.name,
                bytes,
            });
        }
        if inputs.is_empty() || !rest.is_empty() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // Only plain-number options reach the driver; a guest naming another (one
        // whose value the driver would take as a pointer) is refused.
        use vmcuda_wire::driver::LINK_OPTIONS;
        if req.options.len() > LINK_OPTIONS.len()
            || req.options.iter().any(|(o, _)| !LINK_OPTIONS.contains(o))
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (cubin, logs) = self.exec.link(&inputs, &req.options)?;
        Ok((logs, cubin))
    }
    fn tensor_map_encode_tiled(
        &mut self,
        _: &CallContext,
        req: TensorMapEncodeTiled,
        _: &[u8],
    ) -> HandlerResult<()> {
        if !req.shape_is_valid() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(((), self.exec.tensor_map_encode_tiled(&req)?))
    }

    fn tensor_map_encode_im2col(
        &mut self,
        _: &CallContext,
        req: TensorMapEncodeIm2col,
        _: &[u8],
    ) -> HandlerResult<()> {
        if !req.shape_is_valid() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(((), self.exec.tensor_map_encode_im2col(&req)?))
    }

    fn tensor_map_replace_address(
        &mut self,
        _: &CallContext,
        req: TensorMapReplaceAddress,
        _: &[u8],
    ) -> HandlerResult<()> {
        let map: &[u8; vmcuda_wire::driver::TENSOR_MAP_LEN] = req
            .map
            .as_slice()
            .try_into()
            .map_err(|_| CudaStatus::ErrorInvalidValue)?;
        Ok((
            (),
            self.exec
                .tensor_map_replace_address(map, req.global_address)?,
        ))
    }
}
