//! Module and library images loaded on the host: only what the current device can
//! load crosses, and an image the host keeps in its module cache crosses as its hash.

use sha2::{Digest, Sha256};
use vmcuda_wire::fatbin::{self};
use vmcuda_wire::handshake::caps;
use vmcuda_wire::module::INLINE_IMAGE_MAX;
use vmcuda_wire::op::{ModuleHandle, ModuleLoad, ModuleLoadCached, ModuleLoadedCached};
use vmcuda_wire::CudaStatus;

use super::{call_with, Result};
use crate::client::Sink;
use crate::state;

/// Loads a module image on the host: the driver's module and library images alike. Of a fatbinary, only what the current
/// device can load crosses (see [`fatbin::for_device`]: libraries ship code for every
/// GPU), and one it can load nothing of is refused here with the driver's
/// `CUDA_ERROR_NO_BINARY_FOR_GPU` (`cudaErrorNoKernelImageForDevice`), as the driver
/// refuses it.
pub fn load_image(image: &[u8]) -> Result<ModuleHandle> {
    let mut kept = None;
    if image.get(..4) == Some(&fatbin::CONTAINER_MAGIC.to_le_bytes()[..]) {
        let props = super::device::properties(state::current_device())?;
        // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / MINOR.
        let sm = props.attribute(75).unwrap_or(0) * 10 + props.attribute(76).unwrap_or(0);
        match fatbin::for_device(image, sm as u32) {
            Ok(fatbin::ForDevice::Some(bytes)) => kept = Some(bytes),
            Ok(fatbin::ForDevice::Nothing) => return Err(CudaStatus::ErrorNoKernelImageForDevice),
            // All of it, or a fatbinary the host's driver will judge.
            Ok(fatbin::ForDevice::All) | Err(_) => {}
        }
    }
    let image = kept.as_deref().unwrap_or(image);
    let hosts = crate::client::client()?;
    if hosts.capabilities_of(state::current_device()) & caps::MODULE_CACHE == 0
        || !module_cache_wanted()
    {
        let loaded = call_with(&ModuleLoad, image, Sink::None)?;
        crate::done_word::note_module(loaded.prints);
        return Ok(loaded.module);
    }
    load_by_hash(image, |req, data| {
        let loaded = call_with(req, data, Sink::None)?;
        crate::done_word::note_module(loaded.prints);
        Ok(loaded)
    })
}

/// Whether images go by their hash to hosts that keep a module cache (unless
/// `VMCUDA_MODULE_CACHE=0`).
fn module_cache_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var("VMCUDA_MODULE_CACHE").map_or(true, |v| v != "0"))
}

/// Load `image` on a host with a module cache, through `send` (one waited
/// `ModuleLoadCached` each). A small image goes with its hash at once: one round trip
/// whether the host has it or not. A larger one is named by its hash alone first, and
/// only when the host lacks it (its VM never sent it, or it was evicted) does it follow
/// in a second request: a hit costs one round trip and no bytes, a miss one round trip
/// more than a plain load, which is small beside the bytes it carries.
fn load_by_hash(
    image: &[u8],
    mut send: impl FnMut(&ModuleLoadCached, &[u8]) -> Result<ModuleLoadedCached>,
) -> Result<ModuleHandle> {
    let req = ModuleLoadCached {
        sha256: Sha256::digest(image).into(),
    };
    if image.len() > INLINE_IMAGE_MAX {
        if let Some(module) = send(&req, &[])?.module {
            return Ok(module);
        }
    }
    // A host that answers an image it was sent with "send it" breaks the protocol.
    send(&req, image)?
        .module
        .ok_or(CudaStatus::ErrorInvalidKernelImage)
}

#[cfg(test)]
mod load_by_hash_tests {
    use super::*;

    /// A host that has the images in `cached` (by hash), and keeps what it is sent;
    /// every request's data length is noted.
    fn host<'a>(
        cached: &'a mut Vec<[u8; 32]>,
        sent: &'a mut Vec<usize>,
    ) -> impl FnMut(&ModuleLoadCached, &[u8]) -> Result<ModuleLoadedCached> + 'a {
        move |req, data| {
            sent.push(data.len());
            if !data.is_empty() {
                assert_eq!(Sha256::digest(data).as_slice(), req.sha256);
                cached.push(req.sha256);
            } else if !cached.contains(&req.sha256) {
                return Ok(ModuleLoadedCached::default());
            }
            Ok(ModuleLoadedCached {
                module: Some(ModuleHandle(7)),
                prints: false,
            })
        }
    }

    #[test]
    fn a_large_image_goes_by_its_hash_and_its_bytes_only_on_a_miss() {
        let image = vec![3u8; INLINE_IMAGE_MAX + 1];
        let (mut cached, mut sent) = (Vec::new(), Vec::new());
        assert_eq!(
            load_by_hash(&image, host(&mut cached, &mut sent)),
            Ok(ModuleHandle(7))
        );
        assert_eq!(sent, [0, image.len()], "a miss: the hash, then the bytes");
        let mut again = Vec::new();
        assert_eq!(
            load_by_hash(&image, host(&mut cached, &mut again)),
            Ok(ModuleHandle(7))
        );
        assert_eq!(again, [0], "a hit: one round trip, no bytes");
    }

    #[test]
    fn a_small_image_goes_with_its_hash_in_one_round_trip() {
        let image = vec![5u8; 1000];
        let (mut cached, mut sent) = (Vec::new(), Vec::new());
        load_by_hash(&image, host(&mut cached, &mut sent)).unwrap();
        assert_eq!(sent, [1000]);
    }

    #[test]
    fn a_host_that_wants_an_image_it_was_sent_is_an_error() {
        let image = vec![1u8; 10];
        let refuse = |_: &ModuleLoadCached, _: &[u8]| Ok(ModuleLoadedCached::default());
        assert_eq!(
            load_by_hash(&image, refuse),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
        let failing = |_: &ModuleLoadCached, _: &[u8]| Err(CudaStatus::ErrorInvalidKernelImage);
        assert_eq!(
            load_by_hash(&image, failing),
            Err(CudaStatus::ErrorInvalidKernelImage)
        );
    }
}
