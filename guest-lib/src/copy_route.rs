//! Which way a copy's bytes travel: decided here, for every copy the guest makes.
//!
//! The copy paths the driver's `cuMemcpy*` share (`driver::inner::memory::copy`,
//! plain and 2D) decide here, and so, through them, do symbol copies. The routes:
//! - [`Route::Guest`]: both sides are the program's host memory; the guest copies.
//! - [`Route::Device`]: both sides are device memory; one request, the host copies.
//! - [`Route::Pinned`]: the host side is pinned memory shared with the host
//!   ([`crate::shared`]); the GPU's DMA engine reads or writes it, no bytes on the socket.
//! - [`Route::Staged`]: large pageable copies through the staging area
//!   ([`crate::staging`]: a shared memfd, or guest huge pages in a VM,
//!   [`crate::guest_pages`]) where this process has one.
//! - [`Route::Socket`]: the bytes travel with the requests (and their replies).
//!
//! Pitched (2D) copies with a host side always use the socket. Only copies that the
//! host's DMA engine can make later, from memory both sides share, can be captured
//! into a graph ([`capturable`]).

use vmcuda_wire::CudaStatus;

use crate::staging;
use crate::state::registry;

/// `cudaMemcpyKind` values.
pub const HOST_TO_HOST: u32 = 0;
pub const HOST_TO_DEVICE: u32 = 1;
pub const DEVICE_TO_HOST: u32 = 2;
pub const DEVICE_TO_DEVICE: u32 = 3;
pub const DEFAULT: u32 = 4;

/// A copy's direction, `cudaMemcpyDefault` resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// A copy's shape: contiguous bytes, or rows at a pitch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Linear,
    Pitched,
}

/// Which way a copy's bytes travel (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Guest,
    Device,
    Pinned,
    Staged,
    Socket,
}

fn is_device(ptr: usize) -> bool {
    registry().device_range(ptr as u64).is_some()
}

impl Direction {
    /// The direction of a `cudaMemcpyKind`, `cudaMemcpyDefault` resolved from where the
    /// pointers live.
    pub fn resolve(kind: u32, dst: usize, src: usize) -> Result<Direction, CudaStatus> {
        // Managed memory is where its pointer says, whatever the kind claims: its
        // current copy is on the device once device work begins.
        let kind = if kind <= DEFAULT
            && (crate::managed::is_managed(dst) || crate::managed::is_managed(src))
        {
            DEFAULT
        } else {
            kind
        };
        Ok(match kind {
            HOST_TO_HOST => Direction::HostToHost,
            HOST_TO_DEVICE => Direction::HostToDevice,
            DEVICE_TO_HOST => Direction::DeviceToHost,
            DEVICE_TO_DEVICE => Direction::DeviceToDevice,
            DEFAULT => match (is_device(dst), is_device(src)) {
                (false, false) => Direction::HostToHost,
                (true, false) => Direction::HostToDevice,
                (false, true) => Direction::DeviceToHost,
                (true, true) => Direction::DeviceToDevice,
            },
            _ => return Err(CudaStatus::ErrorInvalidMemcpyDirection),
        })
    }

    /// The host side of a copy between host and device memory: `src` or `dst`.
    fn host_side(self, dst: usize, src: usize) -> Option<usize> {
        match self {
            Direction::HostToDevice => Some(src),
            Direction::DeviceToHost => Some(dst),
            Direction::HostToHost | Direction::DeviceToDevice => None,
        }
    }
}

/// The decision itself. `pinned`: the host side lies in pinned memory shared with the
/// host; `staging`: whether this process has a staging area, asked only for a copy
/// that would use it (asking makes the area on first use).
pub fn choose(
    direction: Direction,
    shape: Shape,
    count: usize,
    pinned: bool,
    staging: impl FnOnce() -> bool,
) -> Route {
    match (direction, shape) {
        (Direction::HostToHost, _) => Route::Guest,
        (Direction::DeviceToDevice, _) => Route::Device,
        (_, Shape::Pitched) => Route::Socket,
        (_, Shape::Linear) if pinned => Route::Pinned,
        (_, Shape::Linear) if count >= staging::MIN_STAGED && staging() => Route::Staged,
        (_, Shape::Linear) => Route::Socket,
    }
}

/// Whether all of `[ptr, ptr + len)` is pinned memory shared with the host: its bytes
/// need not travel.
pub fn pinned_region(ptr: usize, len: usize) -> bool {
    registry()
        .host_range(ptr)
        .is_some_and(|(_, r)| r.shared.is_some_and(|s| ptr + len <= s.start + s.len))
}

/// The route of a copy of `count` bytes (per row, for a pitched copy) now.
pub fn route(direction: Direction, shape: Shape, dst: usize, src: usize, count: usize) -> Route {
    let pinned = shape == Shape::Linear
        && direction
            .host_side(dst, src)
            .is_some_and(|h| pinned_region(h, count));
    choose(direction, shape, count, pinned, || {
        staging::staging().is_some()
    })
}

/// Whether such a copy can be captured into a graph: only one the host's DMA engine can
/// make later from memory both sides share (pageable copies travel now).
pub fn capturable(
    direction: Direction,
    shape: Shape,
    dst: usize,
    src: usize,
    count: usize,
) -> bool {
    let pinned = shape == Shape::Linear
        && direction
            .host_side(dst, src)
            .is_some_and(|h| pinned_region(h, count));
    // Whether a staging area exists does not change this answer: never ask for one.
    matches!(
        choose(direction, shape, count, pinned, || false),
        Route::Device | Route::Pinned
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::*;

    const BIG: usize = staging::MIN_STAGED;
    const SMALL: usize = staging::MIN_STAGED - 1;

    fn never() -> bool {
        panic!("the staging area was asked for")
    }

    #[test]
    fn host_to_host_stays_in_the_guest_and_device_to_device_on_the_host() {
        for shape in [Shape::Linear, Shape::Pitched] {
            for pinned in [false, true] {
                assert_eq!(choose(HostToHost, shape, BIG, pinned, never), Route::Guest);
                assert_eq!(
                    choose(DeviceToDevice, shape, BIG, pinned, never),
                    Route::Device
                );
            }
        }
    }

    #[test]
    fn shared_pinned_memory_needs_no_bytes_on_the_socket() {
        for dir in [HostToDevice, DeviceToHost] {
            assert_eq!(choose(dir, Shape::Linear, 1, true, never), Route::Pinned);
            assert_eq!(choose(dir, Shape::Linear, BIG, true, never), Route::Pinned);
        }
    }

    #[test]
    fn large_pageable_copies_are_staged_where_a_staging_area_exists() {
        for dir in [HostToDevice, DeviceToHost] {
            assert_eq!(
                choose(dir, Shape::Linear, BIG, false, || true),
                Route::Staged
            );
            assert_eq!(
                choose(dir, Shape::Linear, BIG, false, || false),
                Route::Socket
            );
            // Small ones never ask for the staging area.
            assert_eq!(
                choose(dir, Shape::Linear, SMALL, false, never),
                Route::Socket
            );
        }
    }

    #[test]
    fn pitched_copies_with_a_host_side_use_the_socket() {
        for dir in [HostToDevice, DeviceToHost] {
            for pinned in [false, true] {
                assert_eq!(
                    choose(dir, Shape::Pitched, BIG, pinned, never),
                    Route::Socket
                );
            }
        }
    }

    #[test]
    fn only_device_and_pinned_copies_are_capturable() {
        // Pointers this process never registered: pageable host memory.
        let (host, other) = (0x10_0000usize, 0x20_0000usize);
        assert!(!capturable(HostToHost, Shape::Linear, host, other, 8));
        assert!(!capturable(HostToDevice, Shape::Linear, other, host, BIG));
        assert!(!capturable(DeviceToHost, Shape::Linear, host, other, BIG));
        assert!(capturable(DeviceToDevice, Shape::Linear, host, other, BIG));
        assert!(capturable(DeviceToDevice, Shape::Pitched, host, other, 8));
        assert!(!capturable(HostToDevice, Shape::Pitched, other, host, 8));
    }

    #[test]
    fn kinds_resolve_and_bad_ones_are_refused() {
        assert_eq!(Direction::resolve(HOST_TO_DEVICE, 0, 0), Ok(HostToDevice));
        assert_eq!(Direction::resolve(DEVICE_TO_HOST, 0, 0), Ok(DeviceToHost));
        assert_eq!(Direction::resolve(DEFAULT, 0x10, 0x20), Ok(HostToHost));
        let device = 0x2350_0000_0000usize;
        registry().add_device_range(device as u64, 4096, 0);
        assert_eq!(Direction::resolve(DEFAULT, device, 0x20), Ok(HostToDevice));
        assert_eq!(
            Direction::resolve(DEFAULT, 0x20, device + 8),
            Ok(DeviceToHost)
        );
        assert_eq!(
            Direction::resolve(DEFAULT, device, device),
            Ok(DeviceToDevice)
        );
        registry().remove_device_range(device as u64);
        assert_eq!(
            Direction::resolve(5, 0, 0),
            Err(CudaStatus::ErrorInvalidMemcpyDirection)
        );
    }
}
