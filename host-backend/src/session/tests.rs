//! The shared-memory paths of a session, on the host-memory executor.

use super::*;
use crate::executor::host_memory::HostMemoryExecutor;

const CTX: CallContext = CallContext { device: 0 };

fn session(quota: Option<u64>) -> Session {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = quota;
    Session::new(Box::new(exec), grant)
}

/// A memfd of `len` bytes and an address in this process where nothing is mapped
/// (the session maps it there, as it would at a guest's address).
fn region(len: usize, sealed: bool) -> (OwnedFd, u64) {
    let fd = nix::sys::memfd::memfd_create(c"test", nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING)
        .unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    if sealed {
        let seal = nix::fcntl::SealFlag::F_SEAL_SHRINK;
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_ADD_SEALS(seal)).unwrap();
    }
    let probe = crate::pinned::PageBuffer::new(len).unwrap();
    let addr = probe.start();
    drop(probe);
    (fd, addr)
}

fn register(s: &mut Session, len: usize, flags: u32) -> Result<u64, CudaStatus> {
    register_fd(s, region(len, true), len, flags)
}

fn register_fd(
    s: &mut Session,
    (fd, addr): (OwnedFd, u64),
    len: usize,
    flags: u32,
) -> Result<u64, CudaStatus> {
    s.incoming_fds.push_back(fd);
    let req = HostRegisterShared {
        addr,
        size: len as u64,
        flags,
    };
    s.host_register_shared(&CTX, req, &[]).map(|_| addr)
}

fn copy(s: &mut Session, device: u64, host: u64, size: u64, to_device: bool) -> HandlerResult<()> {
    let req = MemcpyShared {
        device,
        host,
        size,
        to_device,
        stream: StreamHandle::LEGACY,
        is_async: false,
        done: None,
    };
    s.memcpy_shared(&CTX, req, &[])
}

#[test]
fn shared_copies_move_bytes_without_the_socket_and_stay_inside_the_guest() {
    let mut s = session(Some(1 << 20));
    let staging = register(&mut s, 1 << 20, SHARED_STAGING).unwrap();
    // The staging area is not the program's memory: the quota is untouched.
    assert_eq!(
        s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
        1 << 20
    );
    let dev = s
        .mem_alloc(&CTX, MemAlloc { size: 8192 }, &[])
        .unwrap()
        .0
        .ptr;
    // SAFETY: the session mapped the staging memfd at `staging`, 1 MiB long.
    let area = unsafe { std::slice::from_raw_parts_mut(staging as *mut u8, 1 << 20) };
    for (i, b) in area[..8192].iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    copy(&mut s, dev, staging, 8192, true).unwrap();
    copy(&mut s, dev + 4096, staging + 100_000, 4096, false).unwrap();
    assert!(area[100_000..104_096]
        .iter()
        .enumerate()
        .all(|(i, b)| *b == ((i + 4096) * 31 % 251) as u8));

    // Outside the shared memory, outside the allocation, or overflowing: refused.
    let refused = CudaStatus::ErrorInvalidValue;
    assert_eq!(
        copy(&mut s, dev, staging + (1 << 20) - 10, 20, true).unwrap_err(),
        refused
    );
    assert_eq!(
        copy(&mut s, dev, area.as_ptr() as u64 - 4096, 16, true).unwrap_err(),
        refused
    );
    assert_eq!(
        copy(&mut s, dev + 8000, staging, 400, false).unwrap_err(),
        refused
    );
    assert_eq!(
        copy(&mut s, dev, u64::MAX - 8, 16, true).unwrap_err(),
        refused
    );

    // Where this process already uses the guest's addresses, the pages are mapped
    // elsewhere: copies still reach them, through the guest's own address.
    let occupied = crate::pinned::PageBuffer::new(8192).unwrap();
    let (fd, _) = region(8192, true);
    let guest_addr = register_fd(&mut s, (fd, occupied.start()), 8192, 0).unwrap();
    assert_eq!(guest_addr, occupied.start());
    copy(&mut s, dev, guest_addr, 4096, false).unwrap();
    assert_eq!(
        occupied.as_slice()[0],
        0,
        "the worker's own pages are untouched"
    );
    let unregister = HostUnregisterShared { addr: guest_addr };
    s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
    drop(occupied);

    // A file the guest could shrink under the mapping is refused.
    let unsealed = region(4096, false);
    assert_eq!(register_fd(&mut s, unsealed, 4096, 0).unwrap_err(), refused);
    // One staging area per connection, and never an oversized one.
    assert_eq!(register(&mut s, 4096, SHARED_STAGING).unwrap_err(), refused);
    let mut t = session(None);
    let huge = (MAX_STAGING_LEN + 4096) as usize;
    assert_eq!(register(&mut t, huge, SHARED_STAGING).unwrap_err(), refused);
    // Program memory shared the same way is charged.
    let pinned = register(&mut s, 256 << 10, 0).unwrap();
    assert_eq!(
        s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
        (1 << 20) - 8192 - (256 << 10)
    );
    let unregister = HostUnregisterShared { addr: pinned };
    s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
    let unregister = HostUnregisterShared { addr: staging };
    s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
    assert_eq!(
        s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free,
        (1 << 20) - 8192
    );
}

/// A session whose guest has 4 MiB of RAM at guest-physical 0 (a memfd, as QEMU
/// gives the device), and that memfd.
fn session_with_guest_ram() -> (Session, std::fs::File) {
    let fd = nix::sys::memfd::memfd_create(c"ram", nix::sys::memfd::MFdFlags::empty()).unwrap();
    nix::unistd::ftruncate(&fd, 4 << 20).unwrap();
    let mut ram = GuestRam::default();
    ram.add(fd.try_clone().unwrap(), 0, 4 << 20, 0).unwrap();
    (session(None).with_guest_ram(ram), std::fs::File::from(fd))
}

fn guest_pages(addr: u64, pages: Vec<u64>, flags: u32) -> HostRegisterGuestPages {
    HostRegisterGuestPages {
        addr,
        size: pages.len() as u64 * 4096,
        page_size: 4096,
        pages,
        flags,
    }
}

#[test]
fn guest_pages_are_copied_at_their_guest_physical_place_and_never_by_guest_address() {
    use std::os::unix::fs::FileExt;
    let (mut s, ram) = session_with_guest_ram();
    // The guest's staging area: guest address 0x7000_0000, its two pages at
    // guest-physical 0x3000 and 0x1000 (in that order).
    let guest = 0x7000_0000u64;
    let reply = s
        .host_register_guest_pages(
            &CTX,
            guest_pages(guest, vec![0x3000, 0x1000], SHARED_STAGING),
            &[],
        )
        .unwrap();
    assert_eq!(reply.0.device_ptr, 0, "no device pointer for guest pages");
    let dev = s
        .mem_alloc(&CTX, MemAlloc { size: 8192 }, &[])
        .unwrap()
        .0
        .ptr;
    ram.write_all_at(&[7u8; 4096], 0x3000).unwrap();
    ram.write_all_at(&[9u8; 4096], 0x1000).unwrap();
    copy(&mut s, dev, guest, 8192, true).unwrap();
    // Back into the second page only: lands in guest-physical 0x1000.
    ram.write_all_at(&[0u8; 4096], 0x1000).unwrap();
    copy(&mut s, dev + 4096, guest + 4096, 4096, false).unwrap();
    let mut back = vec![0u8; 4096];
    ram.read_exact_at(&mut back, 0x1000).unwrap();
    assert!(back.iter().all(|b| *b == 9));
    // The guest's address is not memory of this process: never a device-side
    // pointer, never an attribute lookup.
    let refused = CudaStatus::ErrorInvalidValue;
    let dtod = MemcpyDtoD {
        dst: dev,
        src: guest,
        size: 16,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    assert_eq!(s.memcpy_dtod(&CTX, dtod, &[]).unwrap_err(), refused);
    assert_eq!(
        copy(&mut s, dev, guest + 8192, 1, true).unwrap_err(),
        refused
    );
    // A second staging area, pages outside guest RAM, sizes that disagree: refused.
    let again = guest_pages(guest + (1 << 20), vec![0x2000], SHARED_STAGING);
    assert_eq!(
        s.host_register_guest_pages(&CTX, again, &[]).unwrap_err(),
        refused
    );
    let outside = guest_pages(guest + (1 << 20), vec![4 << 20], 0);
    assert_eq!(
        s.host_register_guest_pages(&CTX, outside, &[]).unwrap_err(),
        refused
    );
    let mut lying = guest_pages(guest + (1 << 20), vec![0x2000], 0);
    lying.size = 1 << 20;
    assert_eq!(
        s.host_register_guest_pages(&CTX, lying, &[]).unwrap_err(),
        refused
    );
    let unregister = HostUnregisterShared { addr: guest };
    s.host_unregister_shared(&CTX, unregister, &[]).unwrap();
    assert_eq!(copy(&mut s, dev, guest, 16, true).unwrap_err(), refused);
}

#[test]
fn guest_pages_are_refused_without_the_guests_ram() {
    // A worker not given guest RAM (a Unix or TCP guest, an unprivileged guest port,
    // or guest_memory_copies = false) turns every guest-physical request away.
    let mut s = session(None);
    let req = guest_pages(0x7000_0000, vec![0x1000], SHARED_STAGING);
    assert_eq!(
        s.host_register_guest_pages(&CTX, req, &[]).unwrap_err(),
        CudaStatus::ErrorNotSupported
    );
}

/// A link carries only the numeric linker options: one whose value the driver would
/// take as a pointer (a log buffer), or an unknown one, is refused before any link.
#[test]
fn link_options_that_are_not_plain_numbers_are_refused() {
    let mut s = session(None);
    let link = |options: Vec<(u32, u32)>| Link {
        inputs: vec![vmcuda_wire::driver::LinkInput {
            kind: 1,
            name: "k.ptx".into(),
            len: 4,
        }],
        options,
    };
    let ctx = CallContext::default();
    for bad in [
        vec![(3, 0x1000)],
        vec![(5, 8)],
        vec![(999, 1)],
        vec![(12, 1); 7],
    ] {
        assert_eq!(
            s.link(&ctx, link(bad.clone()), b"ptx!").err(),
            Some(CudaStatus::ErrorInvalidValue),
            "{bad:?}"
        );
    }
    // Plain-number options reach the executor (which, here, cannot link).
    assert_eq!(
        s.link(&ctx, link(vec![(12, 1), (7, 3)]), b"ptx!").err(),
        Some(CudaStatus::ErrorNotSupported)
    );
}

/// A synchronous copy may name a word of the guest's shared memory that the stream
/// writes after it; a copy refused writes none, and a word outside the guest's memory
/// refuses the copy before anything runs.
#[test]
fn a_copy_writes_its_done_word_only_when_it_runs() {
    let mut s = session(None);
    let pinned = register(&mut s, 8192, 0).unwrap();
    let dev = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    // SAFETY: the session mapped the memfd at `pinned`, 8192 bytes long.
    let page = unsafe { std::slice::from_raw_parts_mut(pinned as *mut u8, 8192) };
    page[..16].copy_from_slice(b"copied by the gp");
    let word = pinned + 4096;
    let read_word = || u32::from_le_bytes(page_word(pinned + 4096));
    let with_word = |size, value, addr| MemcpyShared {
        device: dev,
        host: pinned,
        size,
        to_device: true,
        stream: StreamHandle::LEGACY,
        is_async: true,
        done: Some(DoneWord { addr, value }),
    };
    s.memcpy_shared(&CTX, with_word(16, 7, word), &[]).unwrap();
    assert_eq!(read_word(), 7);
    // Longer than the device allocation: refused, and the word keeps its value.
    let refused = s.memcpy_shared(&CTX, with_word(8192, 8, word), &[]);
    assert_eq!(refused.unwrap_err(), CudaStatus::ErrorInvalidValue);
    assert_eq!(read_word(), 7);
    // A word outside the guest's memory: refused before the copy.
    let outside = s.memcpy_shared(&CTX, with_word(16, 9, 0x1000), &[]);
    assert_eq!(outside.unwrap_err(), CudaStatus::ErrorInvalidValue);
    assert_eq!(read_word(), 7);
}

/// A device synchronize's done word is written when the device's streams get there
/// (at once on the test double), and only to the guest's own memory.
#[test]
fn a_device_synchronize_writes_its_done_word_only_in_the_guests_memory() {
    let mut s = session(None);
    let pinned = register(&mut s, 4096, 0).unwrap();
    let done = |addr, value| DeviceWriteDone {
        done: DoneWord { addr, value },
    };
    s.device_write_done(&CTX, done(pinned + 8, 3), &[]).unwrap();
    assert_eq!(u32::from_le_bytes(page_word(pinned + 8)), 3);
    let outside = s.device_write_done(&CTX, done(0x1000, 4), &[]);
    assert_eq!(outside.unwrap_err(), CudaStatus::ErrorInvalidValue);
    let past_the_end = s.device_write_done(&CTX, done(pinned + 4094, 5), &[]);
    assert_eq!(past_the_end.unwrap_err(), CudaStatus::ErrorInvalidValue);
    assert_eq!(u32::from_le_bytes(page_word(pinned + 8)), 3);
}

/// Shared memory the worker could not map at the guest's address (under load its
/// address space is full of the driver's reservations) is reached by the device
/// pointer the guest was given for it: a done word there is the guest's, and the
/// guest's own address of those pages is not (on the GPU machine's load test, a
/// guest's first synchronous copy was refused with cudaErrorInvalidValue for this).
#[test]
fn memory_mapped_away_from_the_guests_address_is_reached_by_its_device_pointer() {
    let mut s = session(None);
    let len = 8192;
    let (fd, _) = region(len, true);
    // The guest's address is taken in this process: the session maps the pages elsewhere.
    let taken = crate::pinned::PageBuffer::new(len).unwrap();
    let guest_addr = taken.start();
    s.incoming_fds.push_back(fd);
    let req = HostRegisterShared {
        addr: guest_addr,
        size: len as u64,
        flags: 0,
    };
    let device_ptr = s.host_register_shared(&CTX, req, &[]).unwrap().0.device_ptr;
    assert_ne!(
        device_ptr, guest_addr,
        "mapped away from the guest's address"
    );
    let dev = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    let with_word = |addr| MemcpyShared {
        device: dev,
        host: guest_addr,
        size: 16,
        to_device: true,
        stream: StreamHandle::LEGACY,
        is_async: true,
        done: Some(DoneWord { addr, value: 5 }),
    };
    s.memcpy_shared(&CTX, with_word(device_ptr + 4096), &[])
        .unwrap();
    assert_eq!(u32::from_le_bytes(page_word(device_ptr + 4096)), 5);
    // The guest's address of the same pages names this process's other mapping.
    let outside = s.memcpy_shared(&CTX, with_word(guest_addr + 4096), &[]);
    assert_eq!(outside.unwrap_err(), CudaStatus::ErrorInvalidValue);
    drop(taken);
}

/// Four bytes at `addr`, which the test mapped.
fn page_word(addr: u64) -> [u8; 4] {
    // SAFETY: the caller's address is inside a mapping of its own.
    unsafe { std::ptr::read_volatile(addr as *const [u8; 4]) }
}

/// A module whose kernels call `printf` is said to on every load of it (the guest's
/// synchronizes then reach the driver, which writes what they printed); others not.
#[test]
fn a_module_load_says_whether_its_kernels_print() {
    const PRINTS: &[u8] = include_bytes!("../../../wire/testdata/prints.cubin");
    const TINY: &[u8] = include_bytes!("../../../wire/testdata/tiny.fatbin");
    let mut s = session(None);
    assert!(s.module_load(&CTX, ModuleLoad, PRINTS).unwrap().0.prints);
    // Loaded again, it is not measured again, and still prints.
    assert!(s.module_load(&CTX, ModuleLoad, PRINTS).unwrap().0.prints);
    assert!(!s.module_load(&CTX, ModuleLoad, TINY).unwrap().0.prints);
}

/// A launch's own access-policy window (`cudaLaunchAttributeAccessPolicyWindow` among
/// `cudaLaunchKernelExC`'s attributes) is checked as a stream's or a kernel node's is:
/// only over the guest's own memory, refused with cudaErrorInvalidValue otherwise.
#[test]
fn a_launchs_access_policy_window_stays_inside_the_guests_memory() {
    const TINY: &[u8] = include_bytes!("../../../wire/testdata/tiny.fatbin");
    let mut s = session(None);
    let module = s.module_load(&CTX, ModuleLoad, TINY).unwrap().0.module;
    let get = ModuleGetFunction {
        module,
        name: "_Z4tinyPi".into(),
    };
    let function = s.module_get_function(&CTX, get, &[]).unwrap().0.function;
    let p = s
        .mem_alloc(&CTX, MemAlloc { size: 1 << 20 }, &[])
        .unwrap()
        .0
        .ptr;
    let window = |base: u64, len: u64| {
        let mut value = base.to_le_bytes().to_vec();
        value.extend_from_slice(&len.to_le_bytes());
        LaunchAttribute { id: 1, value }
    };
    let mut launch = |attributes| {
        let req = LaunchKernel {
            function,
            grid: [1; 3],
            block: [1; 3],
            shared_mem: 0,
            stream: StreamHandle::LEGACY,
            attributes,
        };
        s.launch_kernel(&CTX, req, &p.to_le_bytes()).map(|_| ())
    };
    assert_eq!(launch(vec![window(p, 1 << 20)]), Ok(()));
    assert_eq!(launch(vec![window(p, 0)]), Ok(()), "an empty window");
    for (base, len) in [(0xdead_0000, 4096), (p, (1 << 20) + 1), (u64::MAX - 8, 64)] {
        assert_eq!(
            launch(vec![window(base, len)]),
            Err(CudaStatus::ErrorInvalidValue),
            "window {base:#x}+{len:#x}"
        );
    }
    // A short value is padded with zeros, as the union would be: a base alone names
    // an empty window.
    let short = LaunchAttribute {
        id: 1,
        value: 0xdead_0000u64.to_le_bytes().to_vec(),
    };
    assert_eq!(launch(vec![short]), Ok(()));
}

/// NCCL asks the granularity of host memory, then tries one physical allocation there
/// and keeps its host buffers in shared memory when that fails: the granularity is
/// answered, the allocation refused as unsupported (never an invalid value, which NCCL
/// would not survive at the granularity), and nothing is charged.
#[test]
fn host_memory_physical_allocations_are_refused_after_their_granularity_is_answered() {
    use vmcuda_wire::driver::*;
    let mut s = session(Some(64 << 20));
    for location_type in [2, 3, 4] {
        let prop = AllocationProp {
            alloc_type: MEM_ALLOCATION_TYPE_PINNED,
            location_type,
            requested_handle_types: 1,
            ..Default::default()
        };
        let asked = MemGetAllocationGranularity { prop, option: 0 };
        let g = s
            .mem_get_allocation_granularity(&CTX, asked, &[])
            .unwrap()
            .0;
        assert!(g.bytes > 0);
        let create = MemCreate {
            size: g.bytes,
            prop,
            flags: 0,
        };
        let refused = s.mem_create(&CTX, create, &[]).err();
        assert_eq!(refused, Some(CudaStatus::ErrorNotSupported));
    }
    assert_eq!(s.accounts.device_bytes, 0);
    // Any other location is no location.
    let prop = AllocationProp {
        alloc_type: MEM_ALLOCATION_TYPE_PINNED,
        location_type: 9,
        ..Default::default()
    };
    let asked = MemGetAllocationGranularity { prop, option: 0 };
    let refused = s.mem_get_allocation_granularity(&CTX, asked, &[]).err();
    assert_eq!(refused, Some(CudaStatus::ErrorInvalidValue));
}

/// A batch of stream memory operations runs in order (a write, then a wait that sees
/// it), and is refused whole, before anything runs, when one operation leaves the
/// guest's memory, is misaligned or malformed, or the batch is too long.
#[test]
fn a_batch_of_stream_memory_operations_is_checked_whole_then_run_in_order() {
    use vmcuda_wire::driver::{mem_op, wait_value, MemOp, StreamBatchMemOp};
    let mut s = session(None);
    let p = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    let mut batch = |ops: Vec<MemOp>| {
        let req = StreamBatchMemOp {
            stream: StreamHandle::LEGACY,
            ops,
            flags: 0,
        };
        s.stream_batch_mem_op(&CTX, req, &[]).map(|_| ())
    };
    let write = |addr, value, width| MemOp::WriteValue {
        addr,
        value,
        width,
        flags: 0,
    };
    let wait = |addr, value, width| MemOp::WaitValue {
        addr,
        value,
        width,
        flags: wait_value::EQ,
    };
    assert_eq!(
        batch(vec![
            write(p, 7, 4),
            write(p + 8, 1 << 40, 8),
            MemOp::Barrier { flags: 1 },
            wait(p, 7, 4),
            wait(p + 8, 1 << 40, 8),
        ]),
        Ok(())
    );
    for ops in [
        vec![write(p + 16, 1, 4), write(0xdead_0000, 1, 4)],
        vec![write(p + 16, 1, 4), write(p + 4096, 1, 8)],
        vec![write(p + 16, 1, 4), wait(p + 2, 0, 4)],
        vec![write(p + 16, 1, 4), MemOp::FlushRemoteWrites { flags: 1 }],
        vec![write(p + 16, 1, 4); mem_op::MAX_COUNT + 1],
    ] {
        assert_eq!(batch(ops), Err(CudaStatus::ErrorInvalidValue));
    }
    // Nothing of a refused batch ran: the word at p + 16 is still 0.
    assert_eq!(batch(vec![wait(p + 16, 0, 4)]), Ok(()));
}

/// Texture references on the double: one of the guest's own takes settings and binds
/// only the guest's memory and arrays; names the session did not give, a module's
/// reference destroyed, bad modes and a unit other than the default are refused.
#[test]
fn texture_references_bind_only_the_guests_memory_and_take_checked_settings() {
    use vmcuda_wire::array::TexRefSetting;
    let mut s = session(None);
    let p = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    let made = s.tex_ref_create(&CTX, TexRefCreate {}, &[]).unwrap().0;
    let mut set = |texref, setting| {
        s.tex_ref_set(&CTX, TexRefSet { texref, setting }, &[])
            .map(|r| r.0.offset)
    };
    let t = made.texref;
    assert_eq!(
        set(
            t,
            TexRefSetting::Address {
                ptr: p,
                bytes: 4096
            }
        ),
        Ok(0)
    );
    assert_eq!(
        set(t, TexRefSetting::AddressMode { dim: 2, mode: 3 }),
        Ok(0)
    );
    for bad in [
        TexRefSetting::Address {
            ptr: p,
            bytes: 4097,
        },
        TexRefSetting::Address {
            ptr: 0xdead_0000,
            bytes: 16,
        },
        TexRefSetting::Address2D {
            ptr: p,
            format: vmcuda_wire::array::format::FLOAT,
            channels: 4,
            width: 16,
            height: 64,
            pitch: 256,
        },
        TexRefSetting::AddressMode { dim: 3, mode: 0 },
        TexRefSetting::FilterMode(2),
        TexRefSetting::Flags(0x100),
        TexRefSetting::Format {
            format: 0x77,
            channels: 1,
        },
        TexRefSetting::Array {
            array: ArrayHandle(12345),
            flags: 1,
        },
    ] {
        assert_eq!(set(t, bad), Err(CudaStatus::ErrorInvalidValue), "{bad:?}");
    }
    assert_eq!(
        set(t + 1, TexRefSetting::FilterMode(1)),
        Err(CudaStatus::ErrorInvalidValue),
        "a name the session did not give"
    );
    let destroy = |s: &mut Session, texref| s.tex_ref_destroy(&CTX, TexRefDestroy { texref }, &[]);
    assert!(destroy(&mut s, t).is_ok());
    assert_eq!(
        destroy(&mut s, t).map(|_| ()),
        Err(CudaStatus::ErrorInvalidValue)
    );
}

/// `cuCtxRecordEvent` and `cuCtxWaitEvent` take an event of the calling thread's device
/// only (another device's is `CUDA_ERROR_INVALID_HANDLE`, as the driver answers for an
/// event of another context); `cuCtxGetExecAffinity` answers the SM count, its only
/// type.
#[test]
fn context_events_and_affinity_answer_as_the_driver() {
    let mut s = session(None);
    let event = EventHandle(77);
    s.event_create(&CTX, EventCreate { event, flags: 0 }, &[])
        .unwrap();
    s.ctx_record_event(&CTX, CtxRecordEvent { event }, &[])
        .unwrap();
    s.event_synchronize(&CTX, EventSynchronize { event }, &[])
        .unwrap();
    s.ctx_wait_event(&CTX, CtxWaitEvent { event }, &[]).unwrap();
    let other = CallContext { device: 1 };
    let refused = s.ctx_record_event(&other, CtxRecordEvent { event }, &[]);
    assert_eq!(refused.unwrap_err(), CudaStatus::ErrorInvalidResourceHandle);
    let refused = s.ctx_wait_event(&other, CtxWaitEvent { event }, &[]);
    assert_eq!(refused.unwrap_err(), CudaStatus::ErrorInvalidResourceHandle);
    let unknown = EventHandle(78);
    let refused = s.ctx_record_event(&CTX, CtxRecordEvent { event: unknown }, &[]);
    assert_eq!(refused.unwrap_err(), CudaStatus::ErrorInvalidResourceHandle);

    let affinity = s
        .ctx_get_exec_affinity(&CTX, CtxGetExecAffinity { kind: 0 }, &[])
        .unwrap()
        .0;
    assert_eq!(affinity.sm_count, 4, "the double's MULTIPROCESSOR_COUNT");
    let refused = s.ctx_get_exec_affinity(&CTX, CtxGetExecAffinity { kind: 1 }, &[]);
    assert_eq!(refused.unwrap_err(), CudaStatus::ErrorInvalidValue);
}
