//! Checked values at the executor seam: device memory the session has found to lie
//! wholly inside the guest's own memory. Only the session makes one (after
//! `Session::check_range` and its pitched twin, or for memory it has just allocated
//! for the guest), so an executor takes the range as given and never checks the same
//! lengths again. They live here, below the session, so that the executor does not
//! import the session; `tests/tests/layers.rs` checks that no module outside
//! `session/` makes one.

use vmcuda_wire::op::DevicePtr;

/// `len` bytes of device memory from `ptr`, all the guest's; `ptr + len` does not
/// overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRange {
    ptr: DevicePtr,
    len: u64,
}

impl DeviceRange {
    /// Only for ranges the session checked or made itself.
    pub(crate) fn new(ptr: DevicePtr, len: u64) -> DeviceRange {
        DeviceRange { ptr, len }
    }

    /// A range for an executor's own unit tests, which have no session.
    #[cfg(test)]
    pub(crate) fn for_tests(ptr: DevicePtr, len: u64) -> DeviceRange {
        DeviceRange { ptr, len }
    }

    pub fn ptr(self) -> DevicePtr {
        self.ptr
    }

    pub fn len(self) -> u64 {
        self.len
    }

    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The length as a host size (a range the guest could name fits one).
    pub fn len_usize(self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
    }
}

/// `height` rows of `width` bytes, `pitch` bytes apart, from `ptr`: every byte from the
/// first row's start to the last row's end is the guest's, and `width * height` (the
/// rows packed) does not overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PitchedRange {
    ptr: DevicePtr,
    pitch: u64,
    width: u64,
    height: u64,
}

impl PitchedRange {
    /// Only for ranges the session checked.
    pub(crate) fn new(ptr: DevicePtr, pitch: u64, width: u64, height: u64) -> PitchedRange {
        PitchedRange {
            ptr,
            pitch,
            width,
            height,
        }
    }

    /// A range for an executor's own unit tests, which have no session.
    #[cfg(test)]
    pub(crate) fn for_tests(ptr: DevicePtr, pitch: u64, width: u64, height: u64) -> PitchedRange {
        PitchedRange::new(ptr, pitch, width, height)
    }

    pub fn ptr(self) -> DevicePtr {
        self.ptr
    }

    pub fn pitch(self) -> u64 {
        self.pitch
    }

    pub fn width(self) -> u64 {
        self.width
    }

    pub fn height(self) -> u64 {
        self.height
    }

    /// The rows packed: `width * height` bytes.
    pub fn packed_len(self) -> usize {
        usize::try_from(self.width * self.height).unwrap_or(usize::MAX)
    }
}
