//! `ModuleLoadCached` on the host-memory executor: images named by hash, the VM's
//! cache shared by its sessions and no other VM's, and bytes that are not the image
//! they claim to be refused.

use sha2::{Digest, Sha256};
use vmcuda_wire::handshake::{caps, PROTOCOL_VERSION, RUNTIME_VERSION};

use super::*;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::executor::ModuleExec;
use crate::module_cache::{ModuleCache, Scope};

const CTX: CallContext = CallContext { device: 0 };
const TINY: &[u8] = include_bytes!("../../../wire/testdata/tiny.fatbin");
const PARAMS: &[u8] = include_bytes!("../../../wire/testdata/params.cubin");
/// A kernel of PARAMS.
const KERNEL: &str = "_Z8noparamsv";

/// An image larger than those that go with their hash at once: PARAMS, grown.
fn large() -> Vec<u8> {
    vmcuda_wire::cubin::grown(PARAMS, vmcuda_wire::module::INLINE_IMAGE_MAX + 1)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "vmcuda-session-modcache-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn session(state: Option<(&std::path::Path, &str)>) -> Session {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let s = Session::new(Box::new(exec), Grant::unlimited("test"));
    match state {
        Some((dir, vm)) => {
            s.with_module_cache(ModuleCache::open(dir, &Scope::vm(vm), 1 << 20).unwrap())
        }
        None => s,
    }
}

/// Bytes and count of the images `vm`'s cache in `dir` keeps.
fn kept(dir: &std::path::Path, vm: &str) -> (u64, usize) {
    let cache = ModuleCache::open(dir, &Scope::vm(vm), 1 << 20).unwrap();
    cache.usage().unwrap()
}

fn hash(image: &[u8]) -> [u8; 32] {
    Sha256::digest(image).into()
}

fn load(s: &mut Session, image: &[u8], send: bool) -> Result<Option<ModuleHandle>, CudaStatus> {
    let req = ModuleLoadCached {
        sha256: hash(image),
    };
    let data = if send { image } else { &[] };
    s.module_load_cached(&CTX, req, data).map(|(r, _)| r.module)
}

fn offers_cache(s: &mut Session) -> bool {
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: "t".into(),
        pid: 1,
    };
    let (reply, _) = s.hello(&CTX, hello, &[]).unwrap();
    reply.capabilities & caps::MODULE_CACHE != 0
}

#[test]
fn a_second_session_of_the_vm_loads_the_image_by_its_hash_alone() {
    let large = large();
    let d = scratch("second");
    let mut first = session(Some((&d, "vm1")));
    assert!(offers_cache(&mut first));
    assert_eq!(
        load(&mut first, &large, false),
        Ok(None),
        "nothing cached yet"
    );
    let module = load(&mut first, &large, true).unwrap().expect("loaded");
    // The module works like one from ModuleLoad.
    let get = ModuleGetFunction {
        module,
        name: KERNEL.into(),
    };
    first.module_get_function(&CTX, get, &[]).unwrap();
    let c = first.accounts.stats.counts();
    assert_eq!((c.module_cache_misses, c.module_cache_hits), (1, 0));
    assert_eq!(c.module_bytes_received, large.len() as u64);

    let mut second = session(Some((&d, "vm1")));
    let module = load(&mut second, &large, false)
        .unwrap()
        .expect("from the cache");
    let get = ModuleGetFunction {
        module,
        name: KERNEL.into(),
    };
    second.module_get_function(&CTX, get, &[]).unwrap();
    let c = second.accounts.stats.counts();
    assert_eq!((c.module_cache_hits, c.module_cache_misses), (1, 0));
    assert_eq!(c.module_cache_bytes, large.len() as u64);
    assert_eq!(c.module_bytes_received, 0);
    // Its image is charged to this session's host memory as a sent one is.
    assert!(second.accounts.host.used() >= large.len() as u64);
}

#[test]
fn another_vm_has_to_send_the_image() {
    let large = large();
    let d = scratch("other-vm");
    let mut vm1 = session(Some((&d, "vm1")));
    load(&mut vm1, &large, true).unwrap().expect("loaded");
    let mut vm2 = session(Some((&d, "vm2")));
    assert_eq!(load(&mut vm2, &large, false), Ok(None));
}

#[test]
fn bytes_that_are_not_the_named_image_are_refused_and_never_cached() {
    let large = large();
    let d = scratch("mismatch");
    let mut s = session(Some((&d, "vm1")));
    let mut wrong = large.clone();
    wrong[large.len() / 2] ^= 0x40;
    // Named as the image, carrying other bytes.
    let req = ModuleLoadCached {
        sha256: hash(&large),
    };
    assert_eq!(
        s.module_load_cached(&CTX, req, &wrong).err(),
        Some(CudaStatus::ErrorInvalidKernelImage)
    );
    assert!(s.handles.modules.is_empty());
    let mut other = session(Some((&d, "vm1")));
    assert_eq!(load(&mut other, &large, false), Ok(None));
    assert_eq!(kept(&d, "vm1"), (0, 0));
}

#[test]
fn an_image_the_driver_refuses_is_not_cached() {
    let d = scratch("refused");
    let mut s = session(Some((&d, "vm1")));
    let junk = vec![0x5au8; vmcuda_wire::module::INLINE_IMAGE_MAX + 1];
    assert!(load(&mut s, &junk, true).is_err());
    assert_eq!(load(&mut s, &junk, false), Ok(None));
}

#[test]
fn without_a_cache_the_hello_does_not_offer_it_and_every_image_is_sent() {
    let large = large();
    let mut s = session(None);
    assert!(!offers_cache(&mut s));
    assert_eq!(load(&mut s, &large, false), Ok(None));
    assert!(load(&mut s, &large, true).unwrap().is_some());
    assert_eq!(load(&mut s, &large, false), Ok(None));
}

#[test]
fn the_same_image_twice_in_one_session_is_one_module() {
    let large = large();
    let d = scratch("twice");
    let mut s = session(Some((&d, "vm1")));
    let a = load(&mut s, &large, true).unwrap();
    let b = load(&mut s, &large, false).unwrap();
    assert_eq!(a, b);
    assert_eq!(s.handles.modules.len(), 1);
}

#[test]
fn a_cached_image_beyond_the_guests_host_memory_is_refused_unread() {
    let large = large();
    let d = scratch("host-memory");
    let mut first = session(Some((&d, "vm1")));
    load(&mut first, &large, true).unwrap().expect("loaded");
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited("test");
    grant.host_memory = large.len() as u64 - 1;
    let mut small = Session::new(Box::new(exec), grant)
        .with_module_cache(ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap());
    assert_eq!(
        load(&mut small, &large, false),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
}

#[test]
fn an_image_small_enough_to_go_with_its_hash_is_loaded_and_not_kept() {
    let d = scratch("small");
    let mut s = session(Some((&d, "vm1")));
    assert!(load(&mut s, TINY, true).unwrap().is_some());
    let mut other = session(Some((&d, "vm1")));
    assert_eq!(load(&mut other, TINY, false), Ok(None));
    assert_eq!(kept(&d, "vm1"), (0, 0));
}

/// What the first session measured of an image is kept beside it, and a later session
/// of the VM charges by it without measuring the image again.
#[test]
fn a_later_session_charges_a_cached_image_by_the_facts_kept_with_it() {
    let large = large();
    let d = scratch("facts");
    let mut first = session(Some((&d, "vm1")));
    load(&mut first, &large, true).unwrap().expect("loaded");
    let measured = {
        let mut exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        exec.module_facts(&large).unwrap()
    };
    let cache = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let kept = cache.facts(&hash(&large), 0).unwrap().expect("facts kept");
    assert_eq!(
        (kept.data_len, kept.prints),
        (measured.data_len, measured.prints)
    );
    assert_eq!(
        cache.facts(&hash(&large), 90).unwrap(),
        None,
        "another GPU's"
    );
    let mut second = session(Some((&d, "vm1")));
    load(&mut second, &large, false)
        .unwrap()
        .expect("from the cache");
    assert_eq!(second.charged_bytes(), first.charged_bytes());
    // The kept facts are what a later session goes by: changed, they change its charge.
    let more = crate::module_cache::KeptFacts {
        data_len: kept.data_len + (1 << 20),
        ..kept
    };
    cache.put(&hash(&large), &large, Some(more)).unwrap();
    let mut third = session(Some((&d, "vm1")));
    load(&mut third, &large, false)
        .unwrap()
        .expect("from the cache");
    assert_eq!(
        third.charged_bytes(),
        first.charged_bytes() - crate::executor::allocation_footprint(kept.data_len)
            + crate::executor::allocation_footprint(more.data_len)
    );
    let _ = std::fs::remove_dir_all(&d);
}
