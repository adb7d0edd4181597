//! Modules on the host-memory test double: images kept, kernels and globals found
//! through the cubin's symbols and parameter info.

use tracing::warn;
use vmcuda_wire::cubin;
use vmcuda_wire::op::{DevicePtr, ParamInfo};
use vmcuda_wire::CudaStatus;

use super::super::{ExecFunction, ExecModule, ExecResult};
use super::{is_elf, module_cubin, Function, HostMemoryExecutor, Module};
use crate::executor::{ModuleExec, ModuleFacts};

impl ModuleExec for HostMemoryExecutor {
    /// The double measures every image's best cubin whatever the GPU: one
    /// architecture, 0.
    fn image_arch(&mut self) -> ExecResult<u32> {
        Ok(0)
    }

    fn module_facts(&mut self, image: &[u8]) -> ExecResult<ModuleFacts> {
        let refused = |e: String| {
            warn!("module image refused: {e}");
            CudaStatus::ErrorInvalidKernelImage
        };
        if is_elf(image) {
            return crate::executor::cubin_facts(image).map_err(|e| refused(e.to_string()));
        }
        let elf = module_cubin(image, |elf| Ok(elf.to_vec())).map_err(refused)?;
        let facts = crate::executor::cubin_facts(&elf).map_err(|e| refused(e.to_string()))?;
        self.measured = Some((image.to_vec(), elf));
        Ok(facts)
    }

    fn load_module(&mut self, image: &[u8]) -> ExecResult<ExecModule> {
        let measured = self.measured.take();
        if let Some((id, _)) = self.modules.iter().find(|(_, m)| m.image == image) {
            return Ok(*id);
        }
        // Parse now so a broken image fails here, as cuLibraryLoadData would. PTX text
        // (which the real driver compiles) lands here too: it cannot be run or even
        // read for kernels without the driver, so it is refused as an invalid image.
        let extracted = match measured {
            Some((measured, elf)) if measured == image => Some(elf),
            _ => None,
        };
        let module = Module::new(image, extracted).map_err(|e| {
            warn!("module image refused: {e}");
            CudaStatus::ErrorInvalidKernelImage
        })?;
        let id = self.fresh_id();
        self.modules.insert(id, module);
        Ok(id)
    }

    fn get_function(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecFunction, Vec<ParamInfo>)> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let params = match m.kernels().map(|table| table.get(name)) {
            Ok(Some(Ok(params))) => params
                .iter()
                .map(|p| ParamInfo {
                    offset: p.offset,
                    size: p.size,
                })
                .collect::<Vec<ParamInfo>>(),
            _ => return Err(CudaStatus::ErrorInvalidDeviceFunction),
        };
        if let Some(id) = self.function_ids.get(name) {
            return Ok((*id, params));
        }
        let id = self.fresh_id();
        self.function_ids.insert(name.into(), id);
        self.functions.insert(
            id,
            Function {
                name: name.into(),
                params: params.clone(),
                max_dynamic_smem: 49152,
                carveout: -1,
            },
        );
        Ok((id, params))
    }

    fn function_names(&mut self, module: ExecModule) -> ExecResult<Vec<String>> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        cubin::kernels(m.cubin()).map_err(|_| CudaStatus::ErrorInvalidKernelImage)
    }

    fn get_global(&mut self, module: ExecModule, name: &str) -> ExecResult<(DevicePtr, u64, bool)> {
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        if let Some(g) = m.globals.get(name) {
            return Ok(*g);
        }
        let var = cubin::global(m.cubin(), name)
            .ok()
            .flatten()
            .ok_or(CudaStatus::ErrorInvalidSymbol)?;
        let ptr = self.allocate(var.size, Some(&var.init))?;
        let m = self.modules.get_mut(&module).expect("module checked above");
        m.globals.insert(name.into(), (ptr, var.size, var.managed));
        Ok((ptr, var.size, var.managed))
    }
}
