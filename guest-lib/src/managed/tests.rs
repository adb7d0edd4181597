//! The page model with a fake device: a byte array standing in for device memory,
//! and real faults on real guest pages.

use super::*;
use std::sync::atomic::AtomicUsize;

/// A device copy as plain memory, counting the bytes each way.
struct FakeDevice {
    base: usize,
    memory: Mutex<Vec<u8>>,
    sent: AtomicUsize,
    fetched: AtomicUsize,
}

impl FakeDevice {
    fn new(base: usize, len: usize) -> &'static FakeDevice {
        Box::leak(Box::new(FakeDevice {
            base,
            memory: Mutex::new(vec![0; len]),
            sent: AtomicUsize::new(0),
            fetched: AtomicUsize::new(0),
        }))
    }

    /// What a kernel would do: write device memory directly.
    fn write(&self, offset: usize, bytes: &[u8]) {
        self.memory.lock().unwrap()[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        self.memory.lock().unwrap()[offset..offset + len].to_vec()
    }
}

impl Mover for FakeDevice {
    fn to_device(
        &self,
        _device: i32,
        addr: usize,
        via: usize,
        len: usize,
        _shared: bool,
    ) -> Result<()> {
        // SAFETY: the model hands over a region's readable writable view.
        let bytes = unsafe { std::slice::from_raw_parts(via as *const u8, len) };
        self.write(addr - self.base, bytes);
        self.sent.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    fn to_host(
        &self,
        _device: i32,
        addr: usize,
        via: usize,
        len: usize,
        _shared: bool,
    ) -> Result<()> {
        let bytes = self.read(addr - self.base, len);
        // SAFETY: the model hands over a region's writable view of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), via as *mut u8, len) };
        self.fetched.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }
}

/// Read managed memory the way the program does: a plain load, which may fault.
fn peek<T: Copy>(addr: usize) -> T {
    // SAFETY: every address the tests pass lies in a region of the model, mapped (the
    // fault handler brings its pages back) and aligned for `T`.
    unsafe { std::ptr::read_volatile(addr as *const T) }
}

/// Write managed memory the way the program does: a plain store, which may fault.
fn poke<T: Copy>(addr: usize, value: T) {
    // SAFETY: as for `peek`.
    unsafe { std::ptr::write_volatile(addr as *mut T, value) }
}

/// Reserve addresses for a region, as the device-range reservation would: aligned
/// to a fault window, as device allocations are, so what moves is the same each run.
fn region(len: usize, fresh: bool) -> (usize, &'static FakeDevice) {
    // SAFETY: a new PROT_NONE reservation placed by the kernel (its unaligned head and
    // tail are left reserved).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + WINDOW,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let addr = (p as usize + WINDOW - 1) & !(WINDOW - 1);
    let device = FakeDevice::new(addr, len);
    add_region(addr, len, 0, fresh, Origin::Variable, device).unwrap();
    (addr, device)
}

fn state_of(addr: usize) -> State {
    let mut all = regions();
    let (start, r) = all.find(addr).unwrap();
    r.pages[(addr - start) / PAGE].state
}

/// The page counts the model keeps agree with its pages.
fn check_counts() {
    let all = regions();
    let mut total = 0;
    for r in all.map.values() {
        let on_host = r.pages.iter().filter(|p| p.state != State::Device).count();
        assert_eq!(r.host_pages, on_host);
        total += on_host;
    }
    assert_eq!(all.on_host, total);
}

// The model is global (the fault handler sees every region), and the tests count
// what moved: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_fresh_allocation_is_filled_without_faults_and_only_touched_pages_travel() {
    let _s = serial();
    let len = 4 << 20;
    let (addr, device) = region(len, true);
    let at_start = FAULTS.load(Ordering::Relaxed);
    let first = peek::<u64>(addr);
    assert_eq!(first, 0);
    poke::<u64>(addr + 8, 0xabcd);
    poke::<u8>(addr + WINDOW + 4 * PAGE, 7);
    assert_eq!(
        FAULTS.load(Ordering::Relaxed),
        at_start,
        "no fault while filling"
    );
    assert_eq!(state_of(addr), State::Dirty);
    settle_all().unwrap();
    assert_eq!(state_of(addr), State::Device);
    assert_eq!(
        device.sent.load(Ordering::Relaxed),
        2 * PAGE,
        "only the touched pages"
    );
    assert_eq!(&device.read(8, 8), &0xabcdu64.to_ne_bytes());
    assert_eq!(device.read(WINDOW + 4 * PAGE, 1), vec![7]);
    // No longer fresh: a touch now fetches.
    // SAFETY: as above; the fault brings the window back.
    assert_eq!(peek::<u64>(addr + 8), 0xabcd);
    assert_eq!(device.fetched.load(Ordering::Relaxed), WINDOW);
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn device_writes_are_fetched_on_the_next_touch() {
    let _s = serial();
    let len = 3 * WINDOW;
    let (addr, device) = region(len, true);
    // A launch: nothing dirty to send, the region is no longer fresh.
    settle_all().unwrap();
    device.write(WINDOW + 100, b"from the device");
    // SAFETY: the region's pages; the fault handler fetches them.
    let got = unsafe { std::slice::from_raw_parts((addr + WINDOW + 100) as *const u8, 15) };
    assert_eq!(got, b"from the device");
    // The fault brought back its 2 MiB window, no more.
    assert_eq!(device.fetched.load(Ordering::Relaxed), WINDOW);
    assert_eq!(state_of(addr), State::Device);
    assert_eq!(state_of(addr + WINDOW), State::Clean);
    assert_eq!(state_of(addr + 2 * WINDOW), State::Device);
    // Clean pages go back without a copy.
    settle_all().unwrap();
    assert_eq!(device.sent.load(Ordering::Relaxed), 0);
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn prefetch_moves_ranges_both_ways_and_is_remembered() {
    let _s = serial();
    let len = 8 * PAGE;
    let (addr, device) = region(len, false);
    device.write(0, &[7; 8 * PAGE]);
    prefetch(addr, len, Location::Cpu).unwrap();
    assert_eq!(device.fetched.load(Ordering::Relaxed), len);
    // SAFETY: the region's pages, prefetched readable.
    assert_eq!(peek::<u8>(addr + 5 * PAGE), 7);
    poke::<u8>(addr + PAGE, 9);
    prefetch(addr, 2 * PAGE, Location::Device(0)).unwrap();
    assert_eq!(device.read(PAGE, 1), vec![9]);
    assert_eq!(state_of(addr), State::Device);
    // The write made its 64 KiB block dirty; only the prefetched pages went.
    assert_eq!(state_of(addr + 3 * PAGE), State::Dirty);
    assert_eq!(device.sent.load(Ordering::Relaxed), 2 * PAGE);
    let last = range_attribute(addr, PAGE, RANGE_LAST_PREFETCH_LOCATION, 1).unwrap();
    assert_eq!(last, vec![0]);
    let mixed = range_attribute(addr, len, RANGE_LAST_PREFETCH_LOCATION, 1).unwrap();
    assert_eq!(mixed, vec![-2], "a range prefetched to two places has none");
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn advice_is_answered_back_per_range() {
    let _s = serial();
    let len = 4 * PAGE;
    let (addr, _) = region(len, true);
    advise(addr, len, ADVISE_SET_READ_MOSTLY, Location::Invalid).unwrap();
    advise(addr, PAGE, ADVISE_SET_PREFERRED_LOCATION, Location::Cpu).unwrap();
    advise(addr, len, ADVISE_SET_ACCESSED_BY, Location::Device(0)).unwrap();
    advise(addr, len, ADVISE_SET_ACCESSED_BY, Location::Cpu).unwrap();
    assert_eq!(
        range_attribute(addr, len, RANGE_READ_MOSTLY, 1).unwrap(),
        vec![1]
    );
    assert_eq!(
        range_attribute(addr, PAGE, RANGE_PREFERRED_LOCATION, 1).unwrap(),
        vec![-1]
    );
    assert_eq!(
        range_attribute(addr, len, RANGE_PREFERRED_LOCATION, 1).unwrap(),
        vec![-2]
    );
    assert_eq!(
        range_attribute(addr, PAGE, RANGE_PREFERRED_LOCATION_TYPE, 1).unwrap(),
        vec![2]
    );
    assert_eq!(
        range_attribute(addr, len, RANGE_ACCESSED_BY, 3).unwrap(),
        vec![0, -1, -2]
    );
    advise(addr, len, ADVISE_UNSET_READ_MOSTLY, Location::Invalid).unwrap();
    assert_eq!(
        range_attribute(addr, len, RANGE_READ_MOSTLY, 1).unwrap(),
        vec![0]
    );
    assert_eq!(
        advise(addr, len, ADVISE_SET_PREFERRED_LOCATION, Location::Invalid),
        Err(CudaStatus::ErrorInvalidDevice)
    );
    assert_eq!(
        advise(addr + len, PAGE, ADVISE_SET_READ_MOSTLY, Location::Invalid),
        Err(CudaStatus::ErrorInvalidValue)
    );
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn threads_touching_one_window_see_one_fetch() {
    let _s = serial();
    let len = WINDOW;
    let (addr, device) = region(len, false);
    device.write(0, &[3; WINDOW]);
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (0..WINDOW / PAGE)
                        .filter(|p| p % 4 == t)
                        // SAFETY: the region's pages; faults bring them back.
                        .map(|p| u64::from(peek::<u8>(addr + p * PAGE)))
                        .sum()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums.iter().sum::<u64>(), 3 * (WINDOW / PAGE) as u64);
    assert_eq!(device.fetched.load(Ordering::Relaxed), WINDOW);
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn discarded_pages_are_not_sent() {
    let _s = serial();
    let len = 2 * PAGE;
    let (addr, device) = region(len, true);
    poke::<u8>(addr, 1);
    discard(addr, len).unwrap();
    settle_all().unwrap();
    assert_eq!(device.sent.load(Ordering::Relaxed), 0);
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn runs_group_consecutive_pages() {
    let page = |state| Page {
        state,
        read_mostly: false,
        preferred: Location::Invalid,
        last_prefetch: Location::Invalid,
        accessed_by: 0,
    };
    let pages: Vec<Page> = [State::Dirty, State::Dirty, State::Clean, State::Dirty]
        .into_iter()
        .map(page)
        .collect();
    assert_eq!(
        runs(&pages, 0..4, |p| p.state == State::Dirty),
        vec![0..2, 3..4]
    );
    assert_eq!(runs(&pages, 1..3, |p| p.state != State::Device), vec![1..3]);
}

#[test]
fn variables_move_only_their_own_bytes_and_share_pages() {
    let _s = serial();
    let len = 2 * PAGE;
    // SAFETY: a new PROT_NONE reservation placed by the kernel.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    } as usize;
    let device = FakeDevice::new(base, len);
    device.write(0, &[1; 2 * PAGE]);
    // Two variables, the second across the page boundary.
    add_variable(base + 16, 8, 0, device).unwrap();
    add_variable(base + PAGE - 4, 8, 0, device).unwrap();
    let first = peek::<u8>(base + 16);
    let beside = peek::<u8>(base + 100);
    assert_eq!(
        (first, beside),
        (1, 0),
        "only the variables' bytes were fetched"
    );
    poke::<u8>(base + PAGE + 2, 5);
    settle_all().unwrap();
    assert_eq!(device.read(PAGE + 2, 1), vec![5]);
    assert_eq!(
        device.sent.load(Ordering::Relaxed),
        4,
        "the second variable's bytes on its second page"
    );
    remove_region(base).unwrap();
    remove_region(base + PAGE).unwrap();
}

#[test]
fn sequential_passes_take_bigger_steps() {
    let _s = serial();
    let len = 16 * WINDOW;
    let (addr, device) = region(len, false);
    let faults = || FAULTS.load(Ordering::Relaxed);
    // A sequential writer: the second block's fault dirties the rest of the window.
    let at_start = faults();
    for i in (0..WINDOW).step_by(PAGE) {
        poke::<u8>(addr + i, 1);
    }
    assert_eq!(state_of(addr + WINDOW - PAGE), State::Dirty);
    assert_eq!(faults() - at_start, 2);
    settle_all().unwrap();
    assert_eq!(device.sent.load(Ordering::Relaxed), WINDOW);
    // A sequential reader: after the first window, four at a time.
    let mut sum = 0u64;
    let at_start = faults();
    for i in (0..len).step_by(PAGE) {
        // SAFETY: as above.
        sum += u64::from(peek::<u8>(addr + i));
    }
    assert_eq!(sum, (WINDOW / PAGE) as u64);
    // Windows at 0, 2, 10, 18 and 26 MiB (and the writer's window before).
    assert_eq!(faults() - at_start, 5);
    assert_eq!(device.fetched.load(Ordering::Relaxed), WINDOW + len);
    assert_eq!(state_of(addr + 5 * WINDOW), State::Clean);
    check_counts();
    remove_region(addr).unwrap();
}

#[test]
fn work_that_may_reach_device_memory_settles_and_queries_do_not() {
    use vmcuda_wire::op::Op;
    for op in [
        Op::LaunchKernel,
        Op::GraphLaunch,
        Op::MemcpyHtoD,
        Op::Memset,
        Op::MemcpyShared,
    ] {
        assert!(reaches_memory(op), "{op:?}");
    }
    for op in [
        Op::StreamSynchronize,
        Op::EventQuery,
        Op::MemAlloc,
        Op::DeviceGetProperties,
        Op::StreamBeginCapture,
    ] {
        assert!(!reaches_memory(op), "{op:?}");
    }
}
