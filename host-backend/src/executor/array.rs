//! The array part of the executor seam: CUDA arrays and mipmapped arrays, copies in
//! three dimensions between device memory, arrays and this process's memory, and
//! texture and surface objects.
//!
//! Array and mipmapped-array ids are the executor's own; the session names them for
//! the guest, checks every copy's extent against both sides, and hands over places
//! it has checked ([`Place`]). Texture and surface objects are the driver's values.

use vmcuda_wire::array::{ArrayDesc, TextureDesc, ViewDesc};
use vmcuda_wire::op::DevicePtr;

use super::{ExecResult, ExecStream};

pub type ExecArray = u64;
pub type ExecMipmap = u64;

/// One side of a 3D copy, checked by the session: the whole extent of the copy lies
/// inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The guest's device memory, rows `pitch` bytes apart, slices `slice` bytes apart.
    Device {
        ptr: DevicePtr,
        pitch: u64,
        slice: u64,
    },
    /// This process's memory (a mapping of the guest's shared memory, or a frame's
    /// bytes), rows `pitch` bytes apart, slices `slice` bytes apart.
    Host { addr: u64, pitch: u64, slice: u64 },
    /// An array, at byte `x` of row `y` of slice `z`.
    Array {
        array: ExecArray,
        x: u64,
        y: u64,
        z: u64,
    },
}

/// A copy's extent: `depth` slices of `height` rows of `width` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent3 {
    pub width: u64,
    pub height: u64,
    pub depth: u64,
}

/// What a texture reads, checked by the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecTexResource {
    Array(ExecArray),
    Mipmapped(ExecMipmap),
    Linear {
        ptr: DevicePtr,
        format: u32,
        channels: u32,
        bytes: u64,
    },
    Pitch2D {
        ptr: DevicePtr,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
}

pub trait ArrayExec {
    /// An array of `desc` (its format, channels and flags checked by the session).
    fn array_create(&mut self, desc: &ArrayDesc) -> ExecResult<ExecArray>;
    fn array_destroy(&mut self, array: ExecArray) -> ExecResult<()>;
    fn mipmapped_create(&mut self, desc: &ArrayDesc, levels: u32) -> ExecResult<ExecMipmap>;
    /// Level `level` of a mipmapped array: an array it owns, and its extent.
    fn mipmapped_level(
        &mut self,
        mipmap: ExecMipmap,
        level: u32,
    ) -> ExecResult<(ExecArray, ArrayDesc)>;
    fn mipmapped_destroy(&mut self, mipmap: ExecMipmap) -> ExecResult<()>;
    /// Copy `extent` from `src` to `dst` in `stream`'s order; a `Host` side is done
    /// with before this returns.
    fn copy_3d(
        &mut self,
        src: Place,
        dst: Place,
        extent: Extent3,
        stream: ExecStream,
        is_async: bool,
    ) -> ExecResult<()>;
    fn tex_create(
        &mut self,
        resource: ExecTexResource,
        texture: &TextureDesc,
        view: Option<&ViewDesc>,
    ) -> ExecResult<u64>;
    fn tex_destroy(&mut self, tex: u64) -> ExecResult<()>;
    fn surf_create(&mut self, array: ExecArray) -> ExecResult<u64>;
    fn surf_destroy(&mut self, surf: u64) -> ExecResult<()>;
}
