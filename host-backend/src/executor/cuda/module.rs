//! Modules: fatbinary images split into their containers and loaded as libraries,
//! kernels with their parameter layouts, and module-scope variables.

use std::ffi::CString;
use std::ptr;

use cudarc::driver::result;
use cudarc::driver::sys;
use sha2::{Digest, Sha256};
use tracing::{debug, warn};
use vmcuda_wire::cubin::{self, CubinError};
use vmcuda_wire::fatbin::{self, container_total_len, CONTAINER_HEADER_LEN};
use vmcuda_wire::op::{DevicePtr, ParamInfo};
use vmcuda_wire::ptx;
use vmcuda_wire::CudaStatus;

use super::super::driver::{Driver, LinkInputData};
use super::super::{ExecFunction, ExecModule, ExecResult};
use super::{check, status, CudaExecutor};
use crate::executor::{ModuleExec, ModuleFacts};

/// Upper bound on the parameter-info walk (the parameter buffer is at most 32 KiB).
const MAX_KERNEL_PARAMS: usize = 32 * 1024;

/// A loaded fatbinary: one library per container that loaded, and the first load
/// error, reported when a kernel or variable is found in none of them.
pub(super) struct Module {
    libraries: Vec<sys::CUlibrary>,
    load_error: Option<CudaStatus>,
}

impl Module {
    pub(super) fn libraries(&self) -> &[sys::CUlibrary] {
        &self.libraries
    }
}

/// Splits a module image into what `cuLibraryLoadData` takes one at a time: the
/// fatbinary containers laid back to back, or a single ELF cubin or PTX text.
fn split_image(image: &[u8]) -> ExecResult<Vec<&[u8]>> {
    if image.starts_with(b"\x7fELF") || is_ptx(image) {
        return Ok(vec![image]);
    }
    let mut pieces = Vec::new();
    let mut rest = image;
    while !rest.is_empty() {
        let header = rest
            .get(..CONTAINER_HEADER_LEN)
            .and_then(|h| <&[u8; CONTAINER_HEADER_LEN]>::try_from(h).ok());
        let total = header.and_then(|h| container_total_len(h).ok());
        let Some(total) = total else {
            if pieces.is_empty() {
                return Err(CudaStatus::ErrorInvalidKernelImage);
            }
            // Trailing bytes that are not a container (e.g. padding) end the walk.
            break;
        };
        let total = usize::try_from(total).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
        if total > rest.len() {
            return Err(CudaStatus::ErrorInvalidKernelImage);
        }
        let (piece, tail) = rest.split_at(total);
        pieces.push(piece);
        rest = tail;
    }
    if pieces.is_empty() {
        return Err(CudaStatus::ErrorInvalidKernelImage);
    }
    Ok(pieces)
}

/// Whether an image is PTX text (the driver's JIT compiles it): no NUL inside (the
/// guest sends the text without its terminator) and a `.version` directive near the
/// top, after the comments ptxas and NVRTC write there.
fn is_ptx(image: &[u8]) -> bool {
    let end = image.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let text = &image[..end];
    let head = &text[..text.len().min(4096)];
    !text.is_empty() && !text.contains(&0) && head.windows(8).any(|w| w == b".version")
}

/// Loads one fatbinary container or cubin. The driver parses the image through its
/// own headers, so it gets an 8-byte aligned copy with zero padding behind it (it
/// keeps its own copy of the code, so the buffer may go afterwards).
fn load_library(piece: &[u8]) -> ExecResult<sys::CUlibrary> {
    let mut words = vec![0u64; piece.len().div_ceil(8) + 8];
    for (word, chunk) in words.iter_mut().zip(piece.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    let mut library: sys::CUlibrary = ptr::null_mut();
    // SAFETY: `library` is a valid out-pointer; `words` holds the image and outlives
    // the call; no JIT or library options are passed (null arrays with zero counts).
    let r = unsafe {
        sys::cuLibraryLoadData(
            &mut library,
            words.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    };
    check(r)?;
    Ok(library)
}

/// The parameter layout of a kernel, in declaration order.
pub(super) fn kernel_params(kernel: sys::CUkernel) -> ExecResult<Vec<ParamInfo>> {
    let mut params = Vec::new();
    for index in 0..MAX_KERNEL_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `kernel` came from cuLibraryGetKernel of a library still loaded;
        // both out-pointers are locals.
        let r = unsafe { sys::cuKernelGetParamInfo(kernel, index, &mut offset, &mut size) };
        if r == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
            break; // past the last parameter
        }
        check(r)?;
        params.push(ParamInfo {
            offset: u32::try_from(offset).map_err(|_| CudaStatus::ErrorInvalidValue)?,
            size: u32::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?,
        });
    }
    Ok(params)
}

/// `CUjitInputType` values for linking an image into a cubin to measure it.
const JIT_INPUT_PTX: u32 = 1;
const JIT_INPUT_FATBINARY: u32 = 2;

impl CudaExecutor {
    /// Module data of the cubin the driver loads for `piece` on the current device
    /// (`sm`): the piece's own cubin for that architecture where it has one
    /// (decompressed by wire if nvcc compressed it), else, for PTX only, the cubin the
    /// driver's JIT makes of it (linked here, as `cuLibraryLoadData` would compile
    /// it), so PTX is measured exactly too. A fatbinary whose cubin cannot be measured
    /// is refused, even though the driver might load it: its globals could not be
    /// charged to the quota.
    fn piece_facts(&mut self, piece: &[u8], sm: u32) -> ExecResult<ModuleFacts> {
        let measure = |elf: &[u8]| {
            crate::executor::cubin_facts(elf).map_err(|e| {
                warn!(error = %e, "module image refused");
                CudaStatus::ErrorInvalidKernelImage
            })
        };
        if piece.starts_with(b"\x7fELF") {
            return measure(piece);
        }
        let kind = if is_ptx(piece) {
            let code = ptx::Code::of(piece);
            if !code.linker_takes() {
                // PTX older than the linker takes: measured from its declarations.
                let data_len = code.module_data_len().map_err(|e| {
                    warn!(error = %e, "PTX module refused: its data cannot be measured");
                    CudaStatus::ErrorInvalidPtx
                })?;
                let prints = code.prints();
                return Ok(ModuleFacts { data_len, prints });
            }
            JIT_INPUT_PTX
        } else {
            let fatbin = fatbin::parse(piece).map_err(|_| CudaStatus::ErrorInvalidKernelImage)?;
            match cubin::find_cubin_for(&fatbin, sm) {
                Ok(elf) => return measure(&elf),
                // No cubin for this GPU: the driver compiles the PTX, and so does the
                // link below.
                Err(CubinError::NoCubin) => JIT_INPUT_FATBINARY,
                Err(e) => {
                    warn!(error = %e, sm, "module image refused: its cubin cannot be measured, so its globals cannot be charged to the quota");
                    return Err(CudaStatus::ErrorInvalidKernelImage);
                }
            }
        };
        let input = LinkInputData {
            kind,
            name: "module",
            bytes: piece,
        };
        let (elf, _) = Driver::link(self, &[input], &[])?;
        measure(&elf)
    }

    pub(super) fn kernel(&self, function: ExecFunction) -> ExecResult<sys::CUkernel> {
        self.functions
            .get(&function)
            .copied()
            .ok_or(CudaStatus::ErrorInvalidDeviceFunction)
    }

    /// Unloads every module and forgets the kernels found in them.
    pub(super) fn unload_modules(&mut self) {
        for (_, module) in self.modules.drain() {
            for library in module.libraries {
                // SAFETY: each library was loaded by load_module and is unloaded once.
                let _ = unsafe { sys::cuLibraryUnload(library) };
            }
        }
        self.module_by_digest.clear();
        self.functions.clear();
        self.forget_module_refs();
    }
}

impl ModuleExec for CudaExecutor {
    fn image_arch(&mut self) -> ExecResult<u32> {
        let idx = self.bind()?;
        let handle = self.devices[idx].handle;
        let attr = |a| {
            // SAFETY: `handle` came from cuDeviceGet.
            unsafe { result::device::get_attribute(handle, a) }.map_err(status)
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        u32::try_from(major * 10 + minor).map_err(|_| CudaStatus::ErrorInvalidDevice)
    }

    fn module_facts(&mut self, image: &[u8]) -> ExecResult<ModuleFacts> {
        let sm = self.image_arch()?;
        let mut total = ModuleFacts::default();
        for piece in split_image(image)? {
            let facts = self.piece_facts(piece, sm)?;
            total.data_len = total.data_len.saturating_add(facts.data_len);
            total.prints |= facts.prints;
        }
        Ok(total)
    }

    fn load_module(&mut self, image: &[u8]) -> ExecResult<ExecModule> {
        self.bind()?;
        let digest: [u8; 32] = Sha256::digest(image).into();
        if let Some(&module) = self.module_by_digest.get(&digest) {
            return Ok(module);
        }
        let mut libraries = Vec::new();
        let mut load_error = None;
        for (i, piece) in split_image(image)?.into_iter().enumerate() {
            match load_library(piece) {
                Ok(library) => libraries.push(library),
                Err(e) => {
                    warn!(container = i, bytes = piece.len(), error = %e, "cuLibraryLoadData failed");
                    load_error.get_or_insert(e);
                }
            }
        }
        if libraries.is_empty() {
            return Err(load_error.unwrap_or(CudaStatus::ErrorInvalidKernelImage));
        }
        let module = self.next_module;
        self.next_module += 1;
        debug!(
            module,
            libraries = libraries.len(),
            bytes = image.len(),
            "module loaded"
        );
        self.modules.insert(
            module,
            Module {
                libraries,
                load_error,
            },
        );
        self.module_by_digest.insert(digest, module);
        Ok(module)
    }

    fn get_function(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecFunction, Vec<ParamInfo>)> {
        self.bind()?;
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let cname = CString::new(name).map_err(|_| CudaStatus::ErrorInvalidDeviceFunction)?;
        let mut found = None;
        for &library in &m.libraries {
            let mut kernel: sys::CUkernel = ptr::null_mut();
            // SAFETY: out-pointer to a local; `library` is loaded; `cname` is a
            // NUL-terminated string that outlives the call.
            let r = unsafe { sys::cuLibraryGetKernel(&mut kernel, library, cname.as_ptr()) };
            if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                continue;
            }
            check(r)?;
            found = Some(kernel);
            break;
        }
        let kernel = match found {
            Some(kernel) => kernel,
            None => {
                return Err(m
                    .load_error
                    .unwrap_or(CudaStatus::ErrorInvalidDeviceFunction))
            }
        };
        let params = kernel_params(kernel)?;
        let id = kernel as usize as ExecFunction;
        self.functions.insert(id, kernel);
        debug!(
            module,
            name,
            function = id,
            params = params.len(),
            "kernel found"
        );
        Ok((id, params))
    }

    fn function_names(&mut self, module: ExecModule) -> ExecResult<Vec<String>> {
        self.bind()?;
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let mut names = Vec::new();
        for &library in &m.libraries {
            let mut count = 0u32;
            // SAFETY: an out-pointer to a local; `library` is loaded.
            check(unsafe { sys::cuLibraryGetKernelCount(&mut count, library) })?;
            let mut kernels: Vec<sys::CUkernel> = vec![ptr::null_mut(); count as usize];
            // SAFETY: `kernels` has room for `count` handles.
            check(unsafe { sys::cuLibraryEnumerateKernels(kernels.as_mut_ptr(), count, library) })?;
            for kernel in kernels {
                let mut name: *const std::ffi::c_char = ptr::null();
                // SAFETY: an out-pointer to a local; `kernel` came from the driver.
                check(unsafe { sys::cuKernelGetName(&mut name, kernel) })?;
                if name.is_null() {
                    continue;
                }
                // SAFETY: the driver returns a NUL-terminated name that lives as long
                // as the library.
                let name = unsafe { std::ffi::CStr::from_ptr(name) };
                let name = name.to_string_lossy().into_owned();
                // In the driver's order, as a native enumeration lists them; a name
                // two of the module's libraries share, once.
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        Ok(names)
    }

    fn get_global(&mut self, module: ExecModule, name: &str) -> ExecResult<(DevicePtr, u64, bool)> {
        self.bind()?;
        let m = self
            .modules
            .get(&module)
            .ok_or(CudaStatus::ErrorInvalidResourceHandle)?;
        let cname = CString::new(name).map_err(|_| CudaStatus::ErrorInvalidSymbol)?;
        for &library in &m.libraries {
            let mut ptr: sys::CUdeviceptr = 0;
            let mut size: usize = 0;
            // SAFETY: out-pointers to locals; `library` is loaded; `cname` outlives
            // the call.
            let r =
                unsafe { sys::cuLibraryGetGlobal(&mut ptr, &mut size, library, cname.as_ptr()) };
            if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                continue;
            }
            check(r)?;
            // A `__managed__` variable: the guest mirrors its pages.
            let mut managed: std::ffi::c_uint = 0;
            // SAFETY: an out-pointer to a local of the attribute's type; `ptr` is the
            // global just found.
            let r = unsafe {
                sys::cuPointerGetAttribute(
                    (&mut managed as *mut std::ffi::c_uint).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    ptr,
                )
            };
            return Ok((
                ptr,
                size as u64,
                r == sys::CUresult::CUDA_SUCCESS && managed != 0,
            ));
        }
        Err(m.load_error.unwrap_or(CudaStatus::ErrorInvalidSymbol))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_text_is_one_piece_and_junk_is_refused() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n";
        assert_eq!(split_image(ptx).unwrap(), vec![&ptx[..]]);
        let mut terminated = ptx.to_vec();
        terminated.push(0);
        assert_eq!(split_image(&terminated).unwrap().len(), 1);
        assert!(split_image(b"not a module\0.version").is_err());
        assert!(split_image(b"plain text").is_err());
    }

    fn container(body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn images_split_into_containers() {
        let a = container(&[1; 8]);
        let b = container(&[2; 16]);
        let mut both = a.clone();
        both.extend_from_slice(&b);
        assert_eq!(split_image(&both).unwrap(), vec![&a[..], &b[..]]);
        // Trailing padding ends the walk.
        let mut padded = a.clone();
        padded.extend_from_slice(&[0; 5]);
        assert_eq!(split_image(&padded).unwrap(), vec![&a[..]]);
        // A cubin goes whole.
        let elf = b"\x7fELF and the rest".to_vec();
        assert_eq!(split_image(&elf).unwrap(), vec![&elf[..]]);
    }

    #[test]
    fn bad_images_are_refused() {
        assert_eq!(split_image(b""), Err(CudaStatus::ErrorInvalidKernelImage));
        assert_eq!(
            split_image(b"garbage garbage garbage"),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
        let a = container(&[1; 8]);
        assert_eq!(
            split_image(&a[..a.len() - 1]),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
    }
}
