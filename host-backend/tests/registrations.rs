//! Finding 11: host memory registrations (shared guest memory) are bounded in number
//! and bytes per connection even when no memory quota is configured.

use std::os::fd::OwnedFd;
use std::path::Path;

use vmcuda_host::executor::host_memory::HostMemoryExecutor;
use vmcuda_host::policy::{Caller, Policy};
use vmcuda_host::session::Session;
use vmcuda_wire::handshake::{PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

const CTX: CallContext = CallContext { device: 0 };

/// A greeted session of a local program under the configuration `text`.
/// The tests pick free addresses in this process by mapping and unmapping: run one at
/// a time, so one test's mapping never lands where the other just looked.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn session(text: &str) -> Session {
    let policy = Policy::parse(text, Path::new("test.toml")).unwrap();
    let grant = policy.admit(&Caller::Local { pid: None }, b"").unwrap();
    assert_eq!(grant.memory_quota, None, "no quota in these tests");
    let exec = HostMemoryExecutor::new(1 << 30, None).unwrap();
    let mut s = Session::new(Box::new(exec), grant);
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: 0,
        token: vec![],
        client: "registrations".into(),
        pid: 1,
    };
    let meta = postcard::to_stdvec(&hello).unwrap();
    dispatch(&mut s, &CTX, Op::Hello, &meta, &[]).unwrap();
    s
}

/// A sealed memfd of `len` bytes (sparse) and a free address of this process for it.
fn region(len: u64) -> (OwnedFd, u64) {
    let fd = nix::sys::memfd::memfd_create(c"reg", nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING)
        .unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    let seal = nix::fcntl::SealFlag::F_SEAL_SHRINK;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_ADD_SEALS(seal)).unwrap();
    // A free range: reserved, then let go.
    let probe = free_range(len);
    (fd, probe)
}

fn free_range(len: u64) -> u64 {
    use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    let length = std::num::NonZeroUsize::new(len as usize).unwrap();
    // SAFETY: a fresh reservation where the kernel chooses, unmapped at once; only its
    // address is kept.
    unsafe {
        let p = mmap_anonymous(
            None,
            length,
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
        )
        .unwrap();
        munmap(p, len as usize).unwrap();
        p.as_ptr() as u64
    }
}

fn register(s: &mut Session, len: u64, flags: u32) -> Result<u64, CudaStatus> {
    let (fd, addr) = region(len);
    s.incoming_fds.push_back(fd);
    let req = HostRegisterShared {
        addr,
        size: len,
        flags,
    };
    let meta = postcard::to_stdvec(&req).unwrap();
    match dispatch(s, &CTX, Op::HostRegisterShared, &meta, &[]) {
        Ok(_) => Ok(addr),
        Err(DispatchError::Cuda(status)) => Err(status),
        Err(e) => panic!("{e}"),
    }
}

fn unregister(s: &mut Session, addr: u64) {
    let meta = postcard::to_stdvec(&HostUnregisterShared { addr }).unwrap();
    dispatch(s, &CTX, Op::HostUnregisterShared, &meta, &[]).unwrap();
}

#[test]
fn registrations_are_bounded_in_number_and_bytes_as_configured() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session("[local]\nmax_registrations = 3\nregistered_memory = \"64KiB\"\n");
    // The staging area counts against neither.
    register(&mut s, 1 << 20, SHARED_STAGING).unwrap();
    let a = register(&mut s, 4096, 0).unwrap();
    register(&mut s, 4096, 0).unwrap();
    register(&mut s, 4096, 0).unwrap();
    assert_eq!(
        register(&mut s, 4096, 0).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation,
        "a fourth registration"
    );
    unregister(&mut s, a);
    // Room for one more, but not for 64 KiB beside the 8 KiB held.
    assert_eq!(
        register(&mut s, 64 << 10, 0).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
    register(&mut s, 56 << 10, 0).unwrap();
}

#[test]
fn registrations_are_bounded_without_any_configuration() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session("");
    // More than the default 64 GiB in one registration (a sparse file: nothing is
    // touched), with no quota set: refused.
    assert_eq!(
        register(&mut s, (64 << 30) + 4096, 0).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
    // Ordinary registrations go on.
    let a = register(&mut s, 1 << 20, 0).unwrap();
    unregister(&mut s, a);
}
