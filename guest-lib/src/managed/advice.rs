//! Advice and range attributes (`cudaMemAdvise`, `cudaMemRangeGetAttribute`), and the
//! managed-memory device attributes the guest shows.

use super::*;

/// `cudaMemoryAdvise` values.
pub const ADVISE_SET_READ_MOSTLY: u32 = 1;
pub const ADVISE_UNSET_READ_MOSTLY: u32 = 2;
pub const ADVISE_SET_PREFERRED_LOCATION: u32 = 3;
pub const ADVISE_UNSET_PREFERRED_LOCATION: u32 = 4;
pub const ADVISE_SET_ACCESSED_BY: u32 = 5;
pub const ADVISE_UNSET_ACCESSED_BY: u32 = 6;

/// Record advice for `[ptr, ptr + len)`. It changes no behaviour here (every page
/// moves as the model says), but `cudaMemRangeGetAttribute` answers it back.
pub fn advise(ptr: usize, len: usize, advice: u32, location: Location) -> Result<()> {
    let bit = match location {
        Location::Cpu => CPU_BIT,
        Location::Device(d) if (0..63).contains(&d) => 1u64 << d,
        _ => 0,
    };
    let needs_location = matches!(
        advice,
        ADVISE_SET_PREFERRED_LOCATION | ADVISE_SET_ACCESSED_BY | ADVISE_UNSET_ACCESSED_BY
    );
    if needs_location && location == Location::Invalid {
        return Err(CudaStatus::ErrorInvalidDevice);
    }
    let apply: Box<dyn Fn(&mut Page)> = match advice {
        ADVISE_SET_READ_MOSTLY => Box::new(|p| p.read_mostly = true),
        ADVISE_UNSET_READ_MOSTLY => Box::new(|p| p.read_mostly = false),
        ADVISE_SET_PREFERRED_LOCATION => Box::new(move |p| p.preferred = location),
        ADVISE_UNSET_PREFERRED_LOCATION => Box::new(|p| p.preferred = Location::Invalid),
        ADVISE_SET_ACCESSED_BY => Box::new(move |p| p.accessed_by |= bit),
        ADVISE_UNSET_ACCESSED_BY => Box::new(move |p| p.accessed_by &= !bit),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    };
    let mut all = regions();
    for (start, at, n) in spans(&mut all, ptr, len)? {
        let r = all.map.get_mut(&start).expect("span of a region");
        let range = r.pages_of(start, at, n);
        r.pages[range].iter_mut().for_each(&apply);
    }
    Ok(())
}

/// `cudaMemRangeAttribute` values.
pub const RANGE_READ_MOSTLY: u32 = 1;
pub const RANGE_PREFERRED_LOCATION: u32 = 2;
pub const RANGE_ACCESSED_BY: u32 = 3;
pub const RANGE_LAST_PREFETCH_LOCATION: u32 = 4;
pub const RANGE_PREFERRED_LOCATION_TYPE: u32 = 5;
pub const RANGE_PREFERRED_LOCATION_ID: u32 = 6;
pub const RANGE_LAST_PREFETCH_LOCATION_TYPE: u32 = 7;
pub const RANGE_LAST_PREFETCH_LOCATION_ID: u32 = 8;

/// One range attribute of `[ptr, ptr + len)` as the 32-bit values CUDA writes:
/// `slots` values for `RANGE_ACCESSED_BY` (unused ones `cudaInvalidDeviceId`), one for
/// the others. A location that differs across the range is none.
pub fn range_attribute(ptr: usize, len: usize, attribute: u32, slots: usize) -> Result<Vec<i32>> {
    let mut all = regions();
    let mut pages = Vec::new();
    for (start, at, n) in spans(&mut all, ptr, len)? {
        let r = &all.map[&start];
        pages.extend_from_slice(&r.pages[r.pages_of(start, at, n)]);
    }
    let uniform = |f: fn(&Page) -> Location| {
        let first = f(&pages[0]);
        if pages.iter().all(|p| f(p) == first) {
            first
        } else {
            Location::Invalid
        }
    };
    Ok(match attribute {
        RANGE_READ_MOSTLY => vec![i32::from(pages.iter().all(|p| p.read_mostly))],
        RANGE_PREFERRED_LOCATION => vec![uniform(|p| p.preferred).device_id()],
        RANGE_LAST_PREFETCH_LOCATION => vec![uniform(|p| p.last_prefetch).device_id()],
        RANGE_PREFERRED_LOCATION_TYPE => vec![uniform(|p| p.preferred).mem_location().0],
        RANGE_PREFERRED_LOCATION_ID => vec![uniform(|p| p.preferred).mem_location().1],
        RANGE_LAST_PREFETCH_LOCATION_TYPE => vec![uniform(|p| p.last_prefetch).mem_location().0],
        RANGE_LAST_PREFETCH_LOCATION_ID => vec![uniform(|p| p.last_prefetch).mem_location().1],
        RANGE_ACCESSED_BY => {
            let common = pages.iter().fold(u64::MAX, |m, p| m & p.accessed_by);
            let mut out: Vec<i32> = (0..63).filter(|d| common & (1 << d) != 0).collect();
            if common & CPU_BIT != 0 {
                out.push(-1);
            }
            out.resize(slots.max(out.len()), -2);
            out.truncate(slots);
            out
        }
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// The guest's devices as this model provides them: managed memory, but no
/// concurrent access and no pageable memory access from the device.
pub fn guest_view(props: &mut vmcuda_wire::device::DeviceProperties) {
    const MANAGED_MEMORY: u32 = 83;
    const PAGEABLE_MEMORY_ACCESS: u32 = 88;
    const CONCURRENT_MANAGED_ACCESS: u32 = 89;
    const PAGEABLE_USES_HOST_PAGE_TABLES: u32 = 100;
    const DIRECT_MANAGED_FROM_HOST: u32 = 101;
    for (attr, value) in &mut props.attributes {
        *value = match *attr {
            MANAGED_MEMORY => 1,
            PAGEABLE_MEMORY_ACCESS
            | CONCURRENT_MANAGED_ACCESS
            | PAGEABLE_USES_HOST_PAGE_TABLES
            | DIRECT_MANAGED_FROM_HOST => 0,
            _ => *value,
        };
    }
}
