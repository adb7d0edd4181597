use vmcuda_wire::driver::AccessDesc;
use vmcuda_wire::op::*;

use super::*;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::policy::Grant;

const MIB2: u64 = 2 << 20;

fn session(quota: Option<u64>) -> Session {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = quota;
    Session::new(Box::new(exec), grant)
}

fn prop() -> AllocationProp {
    AllocationProp {
        alloc_type: MEM_ALLOCATION_TYPE_PINNED,
        location_type: MEM_LOCATION_TYPE_DEVICE,
        ..Default::default()
    }
}

fn create(s: &mut Session, size: u64) -> Result<AllocationHandle, CudaStatus> {
    s.mem_create(
        &CallContext::default(),
        MemCreate {
            size,
            prop: prop(),
            flags: 0,
        },
        &[],
    )
    .map(|(r, _)| r.handle)
}

fn map(s: &mut Session, ptr: u64, h: AllocationHandle) -> Result<(), CudaStatus> {
    s.mem_map(
        &CallContext::default(),
        MemMap {
            ptr,
            size: MIB2,
            offset: 0,
            handle: h,
            flags: 0,
        },
        &[],
    )
    .map(|_| ())
}

#[test]
fn mapped_memory_is_the_guests_across_adjacent_mappings_and_counted() {
    let mut s = session(Some(5 << 20));
    let va = s
        .mem_address_reserve(
            &CallContext::default(),
            MemAddressReserve {
                size: 2 * MIB2,
                alignment: 0,
                addr: 0,
                flags: 0,
            },
            &[],
        )
        .unwrap()
        .0
        .ptr;
    let (a, b) = (create(&mut s, MIB2).unwrap(), create(&mut s, MIB2).unwrap());
    // A third would take the guest over its 5 MiB quota.
    assert_eq!(create(&mut s, MIB2), Err(CudaStatus::ErrorMemoryAllocation));
    map(&mut s, va, a).unwrap();
    map(&mut s, va + MIB2, b).unwrap();
    let access = AccessDesc {
        location_type: 1,
        location_id: 0,
        flags: 3,
    };
    s.mem_set_access(
        &CallContext::default(),
        MemSetAccess {
            ptr: va,
            size: 2 * MIB2,
            descs: vec![access],
        },
        &[],
    )
    .unwrap();
    // The range check accepts a span across both mappings, not past them.
    assert!(s.owns(va + MIB2 - 8, 16));
    assert!(!s.owns(va + 2 * MIB2 - 8, 16));
    // Outside any reservation, or over a mapping: refused.
    assert_eq!(
        map(&mut s, va + 4 * MIB2, a),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(map(&mut s, va, b), Err(CudaStatus::ErrorInvalidValue));
    // The reservation cannot go while mapped.
    let free = MemAddressFree {
        ptr: va,
        size: 2 * MIB2,
    };
    assert_eq!(
        s.mem_address_free(&CallContext::default(), free.clone(), &[]),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Released while mapped: the memory stays (and counts) until unmapped.
    s.mem_release(&CallContext::default(), MemRelease { handle: a }, &[])
        .unwrap();
    assert!(s.owns(va, 8));
    assert_eq!(s.charged_bytes(), 2 * MIB2);
    s.mem_unmap(
        &CallContext::default(),
        MemUnmap {
            ptr: va,
            size: 2 * MIB2,
        },
        &[],
    )
    .unwrap();
    assert_eq!(s.charged_bytes(), MIB2, "a is gone, b is still held");
    let ctx = CallContext::default();
    let read = MemcpyDtoH {
        src: va,
        size: 4,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    assert_eq!(
        s.memcpy_dtoh(&ctx, read, &[]).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    s.mem_address_free(&CallContext::default(), free, &[])
        .unwrap();
    s.mem_release(&CallContext::default(), MemRelease { handle: b }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
}

#[test]
fn stale_handles_and_ranges_are_refused() {
    let mut s = session(None);
    let h = create(&mut s, MIB2).unwrap();
    s.mem_release(&CallContext::default(), MemRelease { handle: h }, &[])
        .unwrap();
    // Released, so gone: every use of it is refused.
    assert_eq!(
        s.mem_release(&CallContext::default(), MemRelease { handle: h }, &[])
            .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        s.mem_get_allocation_properties(
            &CallContext::default(),
            MemGetAllocationProperties { handle: h },
            &[]
        )
        .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    let wild = AllocationHandle(0xdead);
    assert_eq!(
        map(&mut s, 0x1000, wild),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        s.mem_unmap(
            &CallContext::default(),
            MemUnmap {
                ptr: 0x1000,
                size: MIB2
            },
            &[]
        )
        .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        s.mem_retain_allocation_handle(
            &CallContext::default(),
            MemRetainAllocationHandle { ptr: 0x1000 },
            &[]
        )
        .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    // Unsupported allocation kinds and absurd shapes.
    let mut odd = prop();
    odd.alloc_type = 7;
    assert_eq!(
        s.mem_create(
            &CallContext::default(),
            MemCreate {
                size: MIB2,
                prop: odd,
                flags: 0
            },
            &[]
        )
        .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(create(&mut s, 0), Err(CudaStatus::ErrorInvalidValue));
    let memset = MemsetElements {
        dst: 0x1000,
        value: 1,
        element_size: 4,
        count: u64::MAX,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    assert_eq!(
        s.memset_elements(&CallContext::default(), memset, &[])
            .err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
}

/// Releasing a handle more often than it was created or retained is refused, as
/// the driver refuses it: the count cannot wrap, the quota does not leak, and the
/// end of the session releases nothing twice.
#[test]
fn a_handle_released_too_often_is_refused_and_the_quota_holds() {
    let mut s = session(Some(4 * MIB2));
    let ctx = CallContext::default();
    let reserve = MemAddressReserve {
        size: MIB2,
        alignment: 0,
        addr: 0,
        flags: 0,
    };
    let va = s.mem_address_reserve(&ctx, reserve, &[]).unwrap().0.ptr;
    let h = create(&mut s, MIB2).unwrap();
    map(&mut s, va, h).unwrap();
    let release = MemRelease { handle: h };
    s.mem_release(&ctx, release.clone(), &[]).unwrap();
    for _ in 0..3 {
        assert_eq!(
            s.mem_release(&ctx, release.clone(), &[]).err(),
            Some(CudaStatus::ErrorInvalidValue)
        );
    }
    assert_eq!(s.vmm.allocations[&h].refs, 0);
    assert_eq!(s.charged_bytes(), MIB2, "still mapped, still charged");
    // Retained again through its mapping: one more release is the guest's.
    let again = s
        .mem_retain_allocation_handle(&ctx, MemRetainAllocationHandle { ptr: va }, &[])
        .unwrap()
        .0
        .handle;
    assert_eq!(again, h);
    s.mem_release(&ctx, release.clone(), &[]).unwrap();
    assert_eq!(
        s.mem_release(&ctx, release, &[]).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    s.mem_unmap(
        &ctx,
        MemUnmap {
            ptr: va,
            size: MIB2,
        },
        &[],
    )
    .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert!(s.vmm.allocations.is_empty());
    // The whole quota is there again.
    let h = create(&mut s, 4 * MIB2).unwrap();
    s.mem_release(&ctx, MemRelease { handle: h }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
}

#[test]
fn the_sessions_end_unmaps_and_releases_everything() {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut s = Session::new(Box::new(exec), Grant::unlimited("test"));
    let va = s
        .mem_address_reserve(
            &CallContext::default(),
            MemAddressReserve {
                size: MIB2,
                alignment: 0,
                addr: 0,
                flags: 0,
            },
            &[],
        )
        .unwrap()
        .0
        .ptr;
    let h = create(&mut s, MIB2).unwrap();
    map(&mut s, va, h).unwrap();
    s.vmm_drop_all();
    assert!(s.vmm.mappings.is_empty() && s.vmm.allocations.is_empty());
    assert!(s.vmm.reservations.is_empty());
    assert!(!s.owns(va, 8));
}
