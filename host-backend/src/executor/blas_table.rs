//! The table functions (`vmcuda_wire::blas_table`) at the executor seam. The CPU
//! reference the host-memory test double computes a representative subset with is
//! `host_memory::reference::table`.
//!
//! The session has validated a call with the table's own checks and extents and
//! checked every device range (and each pointer of a pointer array) against the
//! guest's memory; host values arrive as buffers cuBLAS (or the reference) reads and
//! writes in place, and the session returns the written ones to the guest.

use vmcuda_wire::blas_table::{BlasFn, Extent};
use vmcuda_wire::op::DevicePtr;

use super::ExecStream;

/// One argument as the executor gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecArg {
    /// An `int` or `long` argument (an `int` was checked to be one on the wire).
    Int(i64),
    /// Checked device memory, or a device scalar.
    Device(DevicePtr),
    /// A host value: read, and for results and in/out scalars written, in place.
    Host(Vec<u8>),
    /// The session's checked copy of a device array of device pointers.
    Pointers(Vec<u64>),
}

/// A checked table call.
#[derive(Clone, Debug)]
pub struct TableCall {
    pub stream: ExecStream,
    pub math_mode: u32,
    pub pointer_mode: u32,
    pub function: BlasFn,
    pub args: Vec<ExecArg>,
    /// Per argument, what [`BlasFn::validate`] computed.
    pub extents: Vec<Extent>,
}
