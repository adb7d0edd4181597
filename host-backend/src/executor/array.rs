//! The array part of the executor seam: CUDA arrays and mipmapped arrays, copies in
//! three dimensions between device memory, arrays and this process's memory, and
//! texture and surface objects.
//!
//! Array and mipmapped-array ids are the executor's own; the session names them for
//! the guest, checks every copy's extent against both sides, and hands over places
//! it has checked ([`Place`]). Texture and surface objects are the driver's values.

use vmcuda_wire::array::{ArrayDesc, TexRefSetting, TexRefState, TextureDesc, ViewDesc};
use vmcuda_wire::op::DevicePtr;

use super::{ExecFunction, ExecModule, ExecResult, StreamOrder};

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
        order: StreamOrder,
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
    /// A module's texture reference (`cuModuleGetTexRef`) and its settings.
    fn module_tex_ref(
        &mut self,
        module: ExecModule,
        name: &str,
    ) -> ExecResult<(ExecTexRef, TexRefState)>;
    /// A module's surface reference (`cuModuleGetSurfRef`).
    fn module_surf_ref(&mut self, module: ExecModule, name: &str) -> ExecResult<ExecTexRef>;
    /// A texture reference of the guest's own (`cuTexRefCreate`) and its settings.
    fn tex_ref_create(&mut self) -> ExecResult<(ExecTexRef, TexRefState)>;
    /// One made by `tex_ref_create` (never a module's).
    fn tex_ref_destroy(&mut self, texref: ExecTexRef) -> ExecResult<()>;
    /// One `cuTexRefSet*` call; its answer is `cuTexRefSetAddress`'s byte offset (0
    /// for the rest).
    fn tex_ref_set(&mut self, texref: ExecTexRef, setting: ExecTexRefSetting) -> ExecResult<u64>;
    fn surf_ref_set_array(
        &mut self,
        surfref: ExecTexRef,
        array: ExecArray,
        flags: u32,
    ) -> ExecResult<()>;
    /// `cuParamSetTexRef` (`texunit` checked: `CU_PARAM_TR_DEFAULT`).
    fn param_set_tex_ref(
        &mut self,
        function: ExecFunction,
        texunit: i32,
        texref: ExecTexRef,
    ) -> ExecResult<()>;
}

/// A texture or surface reference of the executor's.
pub type ExecTexRef = u64;

/// A texture reference's setting, its memory checked by the session.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExecTexRefSetting {
    /// Bound to an array, a mipmapped array (`flags`: `CU_TRSA_*`), linear memory
    /// (`cuTexRefSetAddress`; its format and channels unused) or pitched memory
    /// (`cuTexRefSetAddress2D`).
    Bind {
        resource: ExecTexResource,
        flags: u32,
    },
    /// Any setting that names no memory (never one of the binding ones).
    Other(TexRefSetting),
}
