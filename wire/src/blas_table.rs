//! The cuBLAS API beyond the GEMMs, from one declarative table.
//!
//! [`blas_table!`](crate::blas_table) holds one line per forwarded cuBLAS function:
//! a function id (append-only, never reused: it travels on the wire), the C name, its
//! precision and family (`[S axpy]`: element sizes `T` and `R`, and what the host's
//! reference implementation computes), and its C arguments after the handle, each with
//! its kind and, for memory, its extent:
//!
//! - `int`: a C `int` (sizes, strides, and enums, which travel as plain numbers and
//!   are judged by cuBLAS itself), optionally `if (condition)`: the argument check
//!   cuBLAS makes before it queues anything (`CUBLAS_STATUS_INVALID_VALUE`);
//! - `long`: a 64-bit integer (`int64_t`, `long long`), as `int` otherwise: the sizes
//!   of the `_64` entry points and the batch strides;
//! - `sc(bytes)`: a scalar read by cuBLAS, in the handle's pointer mode: host scalars
//!   travel by value, device scalars as device pointers;
//! - `io(bytes)`: a scalar read and written (`rotg`, `rotmg`): by value both ways in
//!   host pointer mode (the call waits for the reply), a device pointer otherwise;
//! - `out(bytes)`: a result (`dot`, `nrm2`, `iamax`...): in host pointer mode the
//!   reply carries it and the call waits; in device pointer mode a device pointer;
//! - `dev(extent)` / `optdev(extent)`: device memory spanning `extent` bytes from the
//!   pointer (`optdev`: NULL allowed), checked by the host against the guest's own
//!   allocations before cuBLAS sees it;
//! - `ptrs(count, extent)`: a device array of `count` device pointers, each spanning
//!   `extent` bytes (the batched solvers): the host reads the array, checks every
//!   pointer and hands cuBLAS its own copy;
//! - `info`: a host `int` cuBLAS writes whatever the pointer mode (`getrsBatched`).
//!
//! From the table, the wire side generates [`BlasFn`] (ids, names, argument kinds)
//! and [`BlasFn::validate`], the checks and extents both ends compute; the guest
//! generates its exports (guest-lib/src/blas/table.rs) and the host its dispatch to
//! the cuBLAS function of the same name (host-backend/src/executor/cuda/blas_table.rs),
//! each from its own macro over the same lines. Covering another function is one line.
//!
//! A `_64` entry point (`cublasSaxpy_v2_64`: the same operation with 64-bit sizes) is
//! its own line, with id `0x0200 | ` its 32-bit sibling's id.

use serde::{Deserialize, Serialize};

use crate::blas::{
    batch_span, data_type, matrix_span, BlasHandle, POINTER_MODE_DEVICE, POINTER_MODE_HOST,
};
use crate::handle::{DevicePtr, StreamHandle};

/// How an argument of a table function is passed (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    Int,
    Long,
    Scalar,
    InOut,
    Out,
    Device,
    OptDevice,
    Pointers,
    Info,
}

impl ArgKind {
    /// Whether the argument is a host value the reply brings back (host pointer mode).
    pub fn returns_in_host_mode(self) -> bool {
        matches!(self, ArgKind::InOut | ArgKind::Out | ArgKind::Info)
    }
}

/// One argument on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlasArg {
    Int(i32),
    Long(i64),
    /// A device pointer: memory, a device scalar, or an array of device pointers.
    Device(DevicePtr),
    /// A host scalar's bytes, read in the guest at the call.
    HostIn(Vec<u8>),
    /// A host value's bytes, sent and brought back updated in the reply.
    HostInOut(Vec<u8>),
    /// A host result of this many bytes, brought back in the reply.
    HostOut(u32),
}

impl BlasArg {
    /// Whether the reply brings this argument back.
    pub fn returns(&self) -> bool {
        matches!(self, BlasArg::HostInOut(_) | BlasArg::HostOut(_))
    }
}

/// What an argument touches, once its function's checks passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Not memory (an `int`).
    None,
    /// Bytes from the pointer (device memory), or of the host value.
    Bytes(u64),
    /// `count` device pointers, each spanning `each` bytes.
    Pointers { count: u64, each: u64 },
}

/// A table function's call, posted (no host value comes back).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlasCall {
    pub handle: BlasHandle,
    pub stream: StreamHandle,
    /// The handle's `cublasMath_t` and `cublasPointerMode_t`, set before the call.
    pub math_mode: u32,
    pub pointer_mode: u32,
    /// [`BlasFn::id`].
    pub function: u16,
    pub args: Vec<BlasArg>,
}

/// The same call, waited for: it returns host values ([`BlasArg::returns`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlasCallWaited(pub BlasCall);

/// The returned host values, concatenated in argument order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BlasOutputs {
    pub bytes: Vec<u8>,
}

/// Why a table call is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlasArgError {
    #[error("unknown cuBLAS function id {0:#06x}")]
    UnknownFunction(u16),
    #[error("{0}: wrong number of arguments")]
    Arity(&'static str),
    /// cuBLAS's own argument check: position from 1, after the handle.
    #[error("{0}: argument {1} is invalid")]
    Invalid(&'static str, usize),
    #[error("{0}: argument {1} does not travel as its kind and the pointer mode require")]
    Travel(&'static str, usize),
    #[error("{0}: an argument's extent overflows")]
    Overflow(&'static str),
}

impl BlasArgError {
    /// The `cublasStatus_t` cuBLAS returns for it.
    pub fn status(self) -> u32 {
        crate::blas::status::INVALID_VALUE
    }
}

/// Element and real-part sizes of a precision letter (`X`: sizes come from type
/// arguments).
pub const fn sizes(precision: &str) -> (i64, i64) {
    match precision.as_bytes() {
        b"S" => (4, 4),
        b"D" => (8, 8),
        b"C" => (8, 4),
        b"Z" => (16, 8),
        _ => (0, 0),
    }
}

// Helpers the table's conditions and extents are written in (all in i64, extents
// `None` on overflow).

/// `cublasOperation_t`: N, T or C.
fn is_op(t: i64) -> bool {
    (0..=2).contains(&t)
}
/// `cublasFillMode_t`: lower or upper.
fn is_fill(u: i64) -> bool {
    u == 0 || u == 1
}
/// `cublasDiagType_t`: non-unit or unit.
fn is_diag(d: i64) -> bool {
    d == 0 || d == 1
}
/// `cublasSideMode_t`: left or right.
fn is_side(s: i64) -> bool {
    s == 0 || s == 1
}
fn max1(v: i64) -> i64 {
    v.max(1)
}
/// `a` when `sel` is 0 (no transpose, left side), `b` otherwise.
fn pick(sel: i64, a: i64, b: i64) -> i64 {
    if sel == 0 {
        a
    } else {
        b
    }
}
/// Bytes of a `cudaDataType` (0: not one the table's functions take).
fn dsize(t: i64) -> i64 {
    i32::try_from(t)
        .ok()
        .and_then(data_type::size)
        .map_or(0, |s| s as i64)
}
/// Bytes of `n` elements of `elem` bytes, `inc` apart (`|inc|`: a negative increment
/// walks the same memory backwards).
fn vspan(n: i64, inc: i64, elem: i64) -> Option<u64> {
    if n <= 0 {
        return Some(0);
    }
    let elems = (n as u64 - 1)
        .checked_mul(inc.unsigned_abs())?
        .checked_add(1)?;
    elems.checked_mul(elem as u64)
}
/// Bytes of a column-major `rows x cols` matrix with leading dimension `ld`.
fn mspan(rows: i64, cols: i64, ld: i64, elem: i64) -> Option<u64> {
    matrix_span(rows, cols, ld, elem as u64)
}
/// Bytes of `n` C ints.
fn ints(n: i64) -> Option<u64> {
    if n <= 0 {
        return Some(0);
    }
    (n as u64).checked_mul(4)
}

/// The bytes a batch of `count` operands spans, each `span` bytes and `stride`
/// elements of `elem` bytes after the previous one (`None` on overflow, and for a
/// negative stride, which would reach before the pointer).
fn strided(count: i64, stride: i64, span: Option<u64>, elem: i64) -> Option<u64> {
    if stride < 0 {
        return None;
    }
    batch_span(span?, stride, count, elem as u64)
}

fn as_int(a: &BlasArg) -> i64 {
    match a {
        BlasArg::Int(v) => *v as i64,
        BlasArg::Long(v) => *v,
        _ => 0,
    }
}

/// The extent of one argument, from its kind and the table's expression.
macro_rules! extent {
    ($name:expr, int) => {
        Extent::None
    };
    ($name:expr, long) => {
        Extent::None
    };
    ($name:expr, info) => {
        Extent::Bytes(4)
    };
    ($name:expr, ptrs($count:expr, $each:expr)) => {
        Extent::Pointers {
            count: u64::try_from($count).map_err(|_| BlasArgError::Overflow($name))?,
            each: $each.ok_or(BlasArgError::Overflow($name))?,
        }
    };
    ($name:expr, dev($e:expr)) => {
        Extent::Bytes($e.ok_or(BlasArgError::Overflow($name))?)
    };
    ($name:expr, optdev($e:expr)) => {
        Extent::Bytes($e.ok_or(BlasArgError::Overflow($name))?)
    };
    ($name:expr, $scalar:ident($e:expr)) => {
        Extent::Bytes(u64::try_from($e).map_err(|_| BlasArgError::Overflow($name))?)
    };
}

macro_rules! kind {
    (int) => {
        ArgKind::Int
    };
    (long) => {
        ArgKind::Long
    };
    (sc) => {
        ArgKind::Scalar
    };
    (io) => {
        ArgKind::InOut
    };
    (out) => {
        ArgKind::Out
    };
    (dev) => {
        ArgKind::Device
    };
    (optdev) => {
        ArgKind::OptDevice
    };
    (ptrs) => {
        ArgKind::Pointers
    };
    (info) => {
        ArgKind::Info
    };
}

/// The wire side of the table.
macro_rules! wire_side {
    ($(
        $id:literal $name:ident [$p:ident $family:ident] (
            $( $arg:ident : $kind:ident $( ( $($spec:tt)* ) )? $( if ( $($cond:tt)* ) )? ),* $(,)?
        );
    )*) => {
        /// Every function of the table.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum BlasFn { $( $name = $id, )* }

        impl BlasFn {
            pub const ALL: &'static [BlasFn] = &[$( BlasFn::$name, )*];

            pub fn from_id(id: u16) -> Option<BlasFn> {
                match id { $( $id => Some(BlasFn::$name), )* _ => None }
            }
            pub fn id(self) -> u16 {
                self as u16
            }
            /// The C name, e.g. `cublasSaxpy_v2`.
            pub fn name(self) -> &'static str {
                match self { $( BlasFn::$name => stringify!($name), )* }
            }
            /// The precision letter: S, D, C, Z, or X (types given as arguments).
            pub fn precision(self) -> &'static str {
                match self { $( BlasFn::$name => stringify!($p), )* }
            }
            /// The operation, e.g. `axpy` (also for `Csscal`, `Scnrm2`...).
            pub fn family(self) -> &'static str {
                match self { $( BlasFn::$name => stringify!($family), )* }
            }
            /// The kinds of the arguments after the handle.
            pub fn kinds(self) -> &'static [ArgKind] {
                match self { $( BlasFn::$name => &[$( kind!($kind), )*], )* }
            }
            /// cuBLAS's argument checks, then every argument's extent. Only `Int`
            /// arguments are read: the guest runs it before it reads host scalars.
            pub fn layout(self, args: &[BlasArg]) -> Result<Vec<Extent>, BlasArgError> {
                match self { $( BlasFn::$name => {
                    #[allow(non_snake_case, unused_variables, unused_mut, unused_assignments, dead_code, clippy::identity_op)]
                    fn layout(args: &[BlasArg]) -> Result<Vec<Extent>, BlasArgError> {
                        const NAME: &str = stringify!($name);
                        const T: i64 = sizes(stringify!($p)).0;
                        const R: i64 = sizes(stringify!($p)).1;
                        let [$( $arg, )*] = args else {
                            return Err(BlasArgError::Arity(NAME));
                        };
                        $( let $arg: i64 = as_int($arg); )*
                        let mut position = 0;
                        $(
                            position += 1;
                            $( if !($($cond)*) {
                                return Err(BlasArgError::Invalid(NAME, position));
                            } )?
                        )*
                        Ok(vec![$( extent!(NAME, $kind $( ( $($spec)* ) )?), )*])
                    }
                    layout(args)
                } )* }
            }
        }
    };
}

impl BlasFn {
    /// [`BlasFn::layout`], and that every argument travels as its kind requires in
    /// `pointer_mode` (a host value never stands where cuBLAS will be handed a
    /// device pointer, nor the reverse), with host values of the right size.
    pub fn validate(
        self,
        args: &[BlasArg],
        pointer_mode: u32,
    ) -> Result<Vec<Extent>, BlasArgError> {
        let extents = self.layout(args)?;
        let host = match pointer_mode {
            POINTER_MODE_HOST => true,
            POINTER_MODE_DEVICE => false,
            _ => return Err(BlasArgError::Travel(self.name(), 0)),
        };
        for (i, ((kind, arg), extent)) in self.kinds().iter().zip(args).zip(&extents).enumerate() {
            let bytes = match extent {
                Extent::Bytes(b) => *b,
                _ => 0,
            };
            let ok = match (kind, arg) {
                (ArgKind::Int, BlasArg::Int(_)) | (ArgKind::Long, BlasArg::Long(_)) => true,
                (ArgKind::Device | ArgKind::OptDevice | ArgKind::Pointers, BlasArg::Device(_)) => {
                    true
                }
                (ArgKind::Scalar | ArgKind::InOut | ArgKind::Out, BlasArg::Device(_)) => !host,
                (ArgKind::Scalar, BlasArg::HostIn(v)) | (ArgKind::InOut, BlasArg::HostInOut(v)) => {
                    host && v.len() as u64 == bytes
                }
                (ArgKind::Out, BlasArg::HostOut(n)) => host && *n as u64 == bytes,
                (ArgKind::Info, BlasArg::HostOut(n)) => *n == 4,
                _ => false,
            };
            if !ok {
                return Err(BlasArgError::Travel(self.name(), i + 1));
            }
        }
        Ok(extents)
    }
}

crate::blas_table!(wire_side);

/// The C type of an argument kind, as the guest's exports take it and the host's
/// entry points are called with: a C `int`, a 64-bit integer, or a pointer.
#[macro_export]
macro_rules! blas_c_type {
    (int) => {
        std::ffi::c_int
    };
    (long) => {
        i64
    };
    ($other:ident) => {
        *mut std::ffi::c_void
    };
}

/// The table: one line per function (see the module documentation). Expanded by a
/// macro named by the caller, which receives every line.
#[macro_export]
macro_rules! blas_table {
    ($cb:ident) => { $cb! {
        0x0001 cublasSaxpy_v2 [S axpy] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0002 cublasDaxpy_v2 [D axpy] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0003 cublasCaxpy_v2 [C axpy] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0004 cublasZaxpy_v2 [Z axpy] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0005 cublasSscal_v2 [S scal] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int);
        0x0006 cublasDscal_v2 [D scal] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int);
        0x0007 cublasCscal_v2 [C scal] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int);
        0x0008 cublasZscal_v2 [Z scal] (n: int, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int);
        0x0009 cublasCsscal_v2 [C scal] (n: int, alpha: sc(R), x: dev(vspan(n, incx, T)), incx: int);
        0x000a cublasZdscal_v2 [Z scal] (n: int, alpha: sc(R), x: dev(vspan(n, incx, T)), incx: int);
        0x000b cublasSdot_v2 [S dot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x000c cublasDdot_v2 [D dot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x000d cublasCdotu_v2 [C dotu] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x000e cublasCdotc_v2 [C dotc] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x000f cublasZdotu_v2 [Z dotu] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x0010 cublasZdotc_v2 [Z dotc] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, result: out(T));
        0x0011 cublasSnrm2_v2 [S nrm2] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0012 cublasDnrm2_v2 [D nrm2] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0013 cublasScnrm2_v2 [C nrm2] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0014 cublasDznrm2_v2 [Z nrm2] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0015 cublasSasum_v2 [S asum] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0016 cublasDasum_v2 [D asum] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0017 cublasScasum_v2 [C asum] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0018 cublasDzasum_v2 [Z asum] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(R));
        0x0019 cublasIsamax_v2 [S iamax] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001a cublasIdamax_v2 [D iamax] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001b cublasIcamax_v2 [C iamax] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001c cublasIzamax_v2 [Z iamax] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001d cublasIsamin_v2 [S iamin] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001e cublasIdamin_v2 [D iamin] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x001f cublasIcamin_v2 [C iamin] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x0020 cublasIzamin_v2 [Z iamin] (n: int, x: dev(vspan(n, incx, T)), incx: int, result: out(4));
        0x0021 cublasScopy_v2 [S copy] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0022 cublasDcopy_v2 [D copy] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0023 cublasCcopy_v2 [C copy] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0024 cublasZcopy_v2 [Z copy] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0025 cublasSswap_v2 [S swap] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0026 cublasDswap_v2 [D swap] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0027 cublasCswap_v2 [C swap] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0028 cublasZswap_v2 [Z swap] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int);
        0x0029 cublasSrot_v2 [S rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(R));
        0x002a cublasDrot_v2 [D rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(R));
        0x002b cublasCrot_v2 [C rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(T));
        0x002c cublasCsrot_v2 [C rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(R));
        0x002d cublasZrot_v2 [Z rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(T));
        0x002e cublasZdrot_v2 [Z rot] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, c: sc(R), s: sc(R));
        0x002f cublasSrotg_v2 [S rotg] (a: io(T), b: io(T), c: io(R), s: io(T));
        0x0030 cublasDrotg_v2 [D rotg] (a: io(T), b: io(T), c: io(R), s: io(T));
        0x0031 cublasCrotg_v2 [C rotg] (a: io(T), b: io(T), c: io(R), s: io(T));
        0x0032 cublasZrotg_v2 [Z rotg] (a: io(T), b: io(T), c: io(R), s: io(T));
        0x0033 cublasSrotm_v2 [S rotm] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, param: sc(5 * T));
        0x0034 cublasDrotm_v2 [D rotm] (n: int, x: dev(vspan(n, incx, T)), incx: int, y: dev(vspan(n, incy, T)), incy: int, param: sc(5 * T));
        0x0035 cublasSrotmg_v2 [S rotmg] (d1: io(T), d2: io(T), x1: io(T), y1: sc(T), param: io(5 * T));
        0x0036 cublasDrotmg_v2 [D rotmg] (d1: io(T), d2: io(T), x1: io(T), y1: sc(T), param: io(5 * T));
        0x0037 cublasDotEx [X dot_ex] (n: int, x: dev(vspan(n, incx, dsize(xtype))), xtype: int if (dsize(xtype) > 0), incx: int, y: dev(vspan(n, incy, dsize(ytype))), ytype: int if (dsize(ytype) > 0), incy: int, result: out(dsize(rtype)), rtype: int if (dsize(rtype) > 0), etype: int);
        0x0038 cublasSgemv_v2 [S gemv] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: int, x: dev(vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: int);
        0x0039 cublasDgemv_v2 [D gemv] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: int, x: dev(vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: int);
        0x003a cublasCgemv_v2 [C gemv] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: int, x: dev(vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: int);
        0x003b cublasZgemv_v2 [Z gemv] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: int, x: dev(vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: int);
        0x003c cublasSger_v2 [S ger] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x003d cublasDger_v2 [D ger] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x003e cublasCgeru_v2 [C geru] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x003f cublasCgerc_v2 [C gerc] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x0040 cublasZgeru_v2 [Z geru] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x0041 cublasZgerc_v2 [Z gerc] (m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)));
        0x0042 cublasSsymv_v2 [S symv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0043 cublasDsymv_v2 [D symv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0044 cublasCsymv_v2 [C symv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0045 cublasZsymv_v2 [Z symv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0046 cublasChemv_v2 [C hemv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0047 cublasZhemv_v2 [Z hemv] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: int if (incy != 0));
        0x0048 cublasSsyr_v2 [S syr] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0049 cublasDsyr_v2 [D syr] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004a cublasCsyr_v2 [C syr] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004b cublasZsyr_v2 [Z syr] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004c cublasCher_v2 [C her] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(R), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004d cublasZher_v2 [Z her] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(R), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004e cublasSsyr2_v2 [S syr2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x004f cublasDsyr2_v2 [D syr2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0050 cublasCsyr2_v2 [C syr2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0051 cublasZsyr2_v2 [Z syr2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0052 cublasCher2_v2 [C her2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0053 cublasZher2_v2 [Z her2] (uplo: int if (is_fill(uplo)), n: int if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: int if (incx != 0), y: dev(vspan(n, incy, T)), incy: int if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)));
        0x0054 cublasStrmv_v2 [S trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x0055 cublasDtrmv_v2 [D trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x0056 cublasCtrmv_v2 [C trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x0057 cublasZtrmv_v2 [Z trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x0058 cublasStrsv_v2 [S trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x0059 cublasDtrsv_v2 [D trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x005a cublasCtrsv_v2 [C trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x005b cublasZtrsv_v2 [Z trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: int if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: int if (incx != 0));
        0x005c cublasSsymm_v2 [S symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x005d cublasDsymm_v2 [D symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x005e cublasCsymm_v2 [C symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x005f cublasZsymm_v2 [Z symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0060 cublasChemm_v2 [C hemm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0061 cublasZhemm_v2 [Z hemm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0062 cublasSsyrk_v2 [S syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0063 cublasDsyrk_v2 [D syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0064 cublasCsyrk_v2 [C syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0065 cublasZsyrk_v2 [Z syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0066 cublasCherk_v2 [C herk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(R), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0067 cublasZherk_v2 [Z herk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(R), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0068 cublasSsyr2k_v2 [S syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0069 cublasDsyr2k_v2 [D syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x006a cublasCsyr2k_v2 [C syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x006b cublasZsyr2k_v2 [Z syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x006c cublasCher2k_v2 [C her2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x006d cublasZher2k_v2 [Z her2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x006e cublasStrmm_v2 [S trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x006f cublasDtrmm_v2 [D trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0070 cublasCtrmm_v2 [C trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0071 cublasZtrmm_v2 [Z trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0072 cublasStrsm_v2 [S trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)));
        0x0073 cublasDtrsm_v2 [D trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)));
        0x0074 cublasCtrsm_v2 [C trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)));
        0x0075 cublasZtrsm_v2 [Z trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)));
        0x0076 cublasStrsmBatched [S trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), batch: int if (batch >= 0));
        0x0077 cublasDtrsmBatched [D trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), batch: int if (batch >= 0));
        0x0078 cublasCtrsmBatched [C trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), batch: int if (batch >= 0));
        0x0079 cublasZtrsmBatched [Z trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: int if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: int if (ldb >= max1(m)), batch: int if (batch >= 0));
        0x007a cublasSgetrfBatched [S getrf_batched] (n: int if (n >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: optdev(ints(n * batch)), infos: dev(ints(batch)), batch: int if (batch >= 0));
        0x007b cublasDgetrfBatched [D getrf_batched] (n: int if (n >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: optdev(ints(n * batch)), infos: dev(ints(batch)), batch: int if (batch >= 0));
        0x007c cublasCgetrfBatched [C getrf_batched] (n: int if (n >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: optdev(ints(n * batch)), infos: dev(ints(batch)), batch: int if (batch >= 0));
        0x007d cublasZgetrfBatched [Z getrf_batched] (n: int if (n >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: optdev(ints(n * batch)), infos: dev(ints(batch)), batch: int if (batch >= 0));
        0x007e cublasSgetrsBatched [S getrs_batched] (trans: int if (is_op(trans)), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: dev(ints(n * batch)), b: ptrs(batch, mspan(n, nrhs, ldb, T)), ldb: int if (ldb >= max1(n)), info: info, batch: int if (batch >= 0));
        0x007f cublasDgetrsBatched [D getrs_batched] (trans: int if (is_op(trans)), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: dev(ints(n * batch)), b: ptrs(batch, mspan(n, nrhs, ldb, T)), ldb: int if (ldb >= max1(n)), info: info, batch: int if (batch >= 0));
        0x0080 cublasCgetrsBatched [C getrs_batched] (trans: int if (is_op(trans)), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: dev(ints(n * batch)), b: ptrs(batch, mspan(n, nrhs, ldb, T)), ldb: int if (ldb >= max1(n)), info: info, batch: int if (batch >= 0));
        0x0081 cublasZgetrsBatched [Z getrs_batched] (trans: int if (is_op(trans)), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(n, n, lda, T)), lda: int if (lda >= max1(n)), pivots: dev(ints(n * batch)), b: ptrs(batch, mspan(n, nrhs, ldb, T)), ldb: int if (ldb >= max1(n)), info: info, batch: int if (batch >= 0));
        0x0082 cublasSgeqrfBatched [S geqrf_batched] (m: int if (m >= 0), n: int if (n >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), tau: ptrs(batch, mspan(m.min(n), 1, 1, T)), info: info, batch: int if (batch >= 0));
        0x0083 cublasDgeqrfBatched [D geqrf_batched] (m: int if (m >= 0), n: int if (n >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), tau: ptrs(batch, mspan(m.min(n), 1, 1, T)), info: info, batch: int if (batch >= 0));
        0x0084 cublasCgeqrfBatched [C geqrf_batched] (m: int if (m >= 0), n: int if (n >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), tau: ptrs(batch, mspan(m.min(n), 1, 1, T)), info: info, batch: int if (batch >= 0));
        0x0085 cublasZgeqrfBatched [Z geqrf_batched] (m: int if (m >= 0), n: int if (n >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), tau: ptrs(batch, mspan(m.min(n), 1, 1, T)), info: info, batch: int if (batch >= 0));
        0x0086 cublasSgelsBatched [S gels_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), c: ptrs(batch, mspan(m.max(n), nrhs, ldc, T)), ldc: int if (ldc >= max1(m.max(n))), info: info, dev_infos: optdev(ints(batch)), batch: int if (batch >= 0));
        0x0087 cublasDgelsBatched [D gels_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), c: ptrs(batch, mspan(m.max(n), nrhs, ldc, T)), ldc: int if (ldc >= max1(m.max(n))), info: info, dev_infos: optdev(ints(batch)), batch: int if (batch >= 0));
        0x0088 cublasCgelsBatched [C gels_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), c: ptrs(batch, mspan(m.max(n), nrhs, ldc, T)), ldc: int if (ldc >= max1(m.max(n))), info: info, dev_infos: optdev(ints(batch)), batch: int if (batch >= 0));
        0x0089 cublasZgelsBatched [Z gels_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), nrhs: int if (nrhs >= 0), a: ptrs(batch, mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), c: ptrs(batch, mspan(m.max(n), nrhs, ldc, T)), ldc: int if (ldc >= max1(m.max(n))), info: info, dev_infos: optdev(ints(batch)), batch: int if (batch >= 0));
        0x008a cublasSgemmEx [X gemm_ex] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: int if (m >= 0), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(4), a: dev(mspan(pick(transa, m, k), pick(transa, k, m), lda, dsize(atype))), atype: int if (dsize(atype) > 0), lda: int if (lda >= max1(pick(transa, m, k))), b: dev(mspan(pick(transb, k, n), pick(transb, n, k), ldb, dsize(btype))), btype: int if (dsize(btype) > 0), ldb: int if (ldb >= max1(pick(transb, k, n))), beta: sc(4), c: dev(mspan(m, n, ldc, dsize(ctype))), ctype: int if (dsize(ctype) > 0), ldc: int if (ldc >= max1(m)));
        0x008b cublasSgeam [S geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: int if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: int if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x008c cublasDgeam [D geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: int if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: int if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x008d cublasCgeam [C geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: int if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: int if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x008e cublasZgeam [Z geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: int if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: int if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x008f cublasSdgmm [S dgmm] (mode: int if (is_side(mode)), m: int if (m >= 0), n: int if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: int, c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0090 cublasDdgmm [D dgmm] (mode: int if (is_side(mode)), m: int if (m >= 0), n: int if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: int, c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0091 cublasCdgmm [C dgmm] (mode: int if (is_side(mode)), m: int if (m >= 0), n: int if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: int, c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0092 cublasZdgmm [Z dgmm] (mode: int if (is_side(mode)), m: int if (m >= 0), n: int if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: int if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: int, c: dev(mspan(m, n, ldc, T)), ldc: int if (ldc >= max1(m)));
        0x0093 cublasSsyrkx [S syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0094 cublasDsyrkx [D syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0095 cublasCsyrkx [C syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0096 cublasZsyrkx [Z syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0097 cublasCherkx [C herkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0098 cublasZherkx [Z herkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: int if (n >= 0), k: int if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: int if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: int if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: int if (ldc >= max1(n)));
        0x0099 cublasSgemvStridedBatched [S gemv_strided_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: int, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: int, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: int, stridey: long, batch: int if (batch >= 0));
        0x009a cublasDgemvStridedBatched [D gemv_strided_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: int, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: int, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: int, stridey: long, batch: int if (batch >= 0));
        0x009b cublasCgemvStridedBatched [C gemv_strided_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: int, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: int, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: int, stridey: long, batch: int if (batch >= 0));
        0x009c cublasZgemvStridedBatched [Z gemv_strided_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: int, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: int, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: int, stridey: long, batch: int if (batch >= 0));
        0x009d cublasSgemvBatched [S gemv_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: int, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: int, batch: int if (batch >= 0));
        0x009e cublasDgemvBatched [D gemv_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: int, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: int, batch: int if (batch >= 0));
        0x009f cublasCgemvBatched [C gemv_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: int, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: int, batch: int if (batch >= 0));
        0x00a0 cublasZgemvBatched [Z gemv_batched] (trans: int if (is_op(trans)), m: int if (m >= 0), n: int if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: int, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: int, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: int, batch: int if (batch >= 0));
        0x0201 cublasSaxpy_v2_64 [S axpy] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0202 cublasDaxpy_v2_64 [D axpy] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0203 cublasCaxpy_v2_64 [C axpy] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0204 cublasZaxpy_v2_64 [Z axpy] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0205 cublasSscal_v2_64 [S scal] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long);
        0x0206 cublasDscal_v2_64 [D scal] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long);
        0x0207 cublasCscal_v2_64 [C scal] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long);
        0x0208 cublasZscal_v2_64 [Z scal] (n: long, alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long);
        0x0209 cublasCsscal_v2_64 [C scal] (n: long, alpha: sc(R), x: dev(vspan(n, incx, T)), incx: long);
        0x020a cublasZdscal_v2_64 [Z scal] (n: long, alpha: sc(R), x: dev(vspan(n, incx, T)), incx: long);
        0x020b cublasSdot_v2_64 [S dot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x020c cublasDdot_v2_64 [D dot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x020d cublasCdotu_v2_64 [C dotu] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x020e cublasCdotc_v2_64 [C dotc] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x020f cublasZdotu_v2_64 [Z dotu] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x0210 cublasZdotc_v2_64 [Z dotc] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, result: out(T));
        0x0211 cublasSnrm2_v2_64 [S nrm2] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0212 cublasDnrm2_v2_64 [D nrm2] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0213 cublasScnrm2_v2_64 [C nrm2] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0214 cublasDznrm2_v2_64 [Z nrm2] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0215 cublasSasum_v2_64 [S asum] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0216 cublasDasum_v2_64 [D asum] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0217 cublasScasum_v2_64 [C asum] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0218 cublasDzasum_v2_64 [Z asum] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(R));
        0x0219 cublasIsamax_v2_64 [S iamax] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021a cublasIdamax_v2_64 [D iamax] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021b cublasIcamax_v2_64 [C iamax] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021c cublasIzamax_v2_64 [Z iamax] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021d cublasIsamin_v2_64 [S iamin] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021e cublasIdamin_v2_64 [D iamin] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x021f cublasIcamin_v2_64 [C iamin] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x0220 cublasIzamin_v2_64 [Z iamin] (n: long, x: dev(vspan(n, incx, T)), incx: long, result: out(8));
        0x0221 cublasScopy_v2_64 [S copy] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0222 cublasDcopy_v2_64 [D copy] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0223 cublasCcopy_v2_64 [C copy] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0224 cublasZcopy_v2_64 [Z copy] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0225 cublasSswap_v2_64 [S swap] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0226 cublasDswap_v2_64 [D swap] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0227 cublasCswap_v2_64 [C swap] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0228 cublasZswap_v2_64 [Z swap] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long);
        0x0229 cublasSrot_v2_64 [S rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(R));
        0x022a cublasDrot_v2_64 [D rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(R));
        0x022b cublasCrot_v2_64 [C rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(T));
        0x022c cublasCsrot_v2_64 [C rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(R));
        0x022d cublasZrot_v2_64 [Z rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(T));
        0x022e cublasZdrot_v2_64 [Z rot] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, c: sc(R), s: sc(R));
        0x0233 cublasSrotm_v2_64 [S rotm] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, param: sc(5 * T));
        0x0234 cublasDrotm_v2_64 [D rotm] (n: long, x: dev(vspan(n, incx, T)), incx: long, y: dev(vspan(n, incy, T)), incy: long, param: sc(5 * T));
        0x0237 cublasDotEx_64 [X dot_ex] (n: long, x: dev(vspan(n, incx, dsize(xtype))), xtype: int if (dsize(xtype) > 0), incx: long, y: dev(vspan(n, incy, dsize(ytype))), ytype: int if (dsize(ytype) > 0), incy: long, result: out(dsize(rtype)), rtype: int if (dsize(rtype) > 0), etype: int);
        0x0238 cublasSgemv_v2_64 [S gemv] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: long, x: dev(vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: long);
        0x0239 cublasDgemv_v2_64 [D gemv] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: long, x: dev(vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: long);
        0x023a cublasCgemv_v2_64 [C gemv] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: long, x: dev(vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: long);
        0x023b cublasZgemv_v2_64 [Z gemv] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(m, n, lda, T)), lda: long, x: dev(vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: dev(vspan(pick(trans, m, n), incy, T)), incy: long);
        0x023c cublasSger_v2_64 [S ger] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x023d cublasDger_v2_64 [D ger] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x023e cublasCgeru_v2_64 [C geru] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x023f cublasCgerc_v2_64 [C gerc] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x0240 cublasZgeru_v2_64 [Z geru] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x0241 cublasZgerc_v2_64 [Z gerc] (m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(m, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)));
        0x0242 cublasSsymv_v2_64 [S symv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0243 cublasDsymv_v2_64 [D symv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0244 cublasCsymv_v2_64 [C symv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0245 cublasZsymv_v2_64 [Z symv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0246 cublasChemv_v2_64 [C hemv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0247 cublasZhemv_v2_64 [Z hemv] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), beta: sc(T), y: dev(vspan(n, incy, T)), incy: long if (incy != 0));
        0x0248 cublasSsyr_v2_64 [S syr] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0249 cublasDsyr_v2_64 [D syr] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024a cublasCsyr_v2_64 [C syr] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024b cublasZsyr_v2_64 [Z syr] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024c cublasCher_v2_64 [C her] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(R), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024d cublasZher_v2_64 [Z her] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(R), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024e cublasSsyr2_v2_64 [S syr2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x024f cublasDsyr2_v2_64 [D syr2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0250 cublasCsyr2_v2_64 [C syr2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0251 cublasZsyr2_v2_64 [Z syr2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0252 cublasCher2_v2_64 [C her2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0253 cublasZher2_v2_64 [Z her2] (uplo: int if (is_fill(uplo)), n: long if (n >= 0), alpha: sc(T), x: dev(vspan(n, incx, T)), incx: long if (incx != 0), y: dev(vspan(n, incy, T)), incy: long if (incy != 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)));
        0x0254 cublasStrmv_v2_64 [S trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x0255 cublasDtrmv_v2_64 [D trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x0256 cublasCtrmv_v2_64 [C trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x0257 cublasZtrmv_v2_64 [Z trmv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x0258 cublasStrsv_v2_64 [S trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x0259 cublasDtrsv_v2_64 [D trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x025a cublasCtrsv_v2_64 [C trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x025b cublasZtrsv_v2_64 [Z trsv] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), n: long if (n >= 0), a: dev(mspan(n, n, lda, T)), lda: long if (lda >= max1(n)), x: dev(vspan(n, incx, T)), incx: long if (incx != 0));
        0x025c cublasSsymm_v2_64 [S symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x025d cublasDsymm_v2_64 [D symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x025e cublasCsymm_v2_64 [C symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x025f cublasZsymm_v2_64 [Z symm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0260 cublasChemm_v2_64 [C hemm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0261 cublasZhemm_v2_64 [Z hemm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), beta: sc(T), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0262 cublasSsyrk_v2_64 [S syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0263 cublasDsyrk_v2_64 [D syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0264 cublasCsyrk_v2_64 [C syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0265 cublasZsyrk_v2_64 [Z syrk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0266 cublasCherk_v2_64 [C herk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(R), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0267 cublasZherk_v2_64 [Z herk] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(R), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0268 cublasSsyr2k_v2_64 [S syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0269 cublasDsyr2k_v2_64 [D syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x026a cublasCsyr2k_v2_64 [C syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x026b cublasZsyr2k_v2_64 [Z syr2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x026c cublasCher2k_v2_64 [C her2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x026d cublasZher2k_v2_64 [Z her2k] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x026e cublasStrmm_v2_64 [S trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x026f cublasDtrmm_v2_64 [D trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0270 cublasCtrmm_v2_64 [C trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0271 cublasZtrmm_v2_64 [Z trmm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0272 cublasStrsm_v2_64 [S trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)));
        0x0273 cublasDtrsm_v2_64 [D trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)));
        0x0274 cublasCtrsm_v2_64 [C trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)));
        0x0275 cublasZtrsm_v2_64 [Z trsm] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: dev(mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)));
        0x0276 cublasStrsmBatched_64 [S trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), batch: long if (batch >= 0));
        0x0277 cublasDtrsmBatched_64 [D trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), batch: long if (batch >= 0));
        0x0278 cublasCtrsmBatched_64 [C trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), batch: long if (batch >= 0));
        0x0279 cublasZtrsmBatched_64 [Z trsm_batched] (side: int if (is_side(side)), uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), diag: int if (is_diag(diag)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(pick(side, m, n), pick(side, m, n), lda, T)), lda: long if (lda >= max1(pick(side, m, n))), b: ptrs(batch, mspan(m, n, ldb, T)), ldb: long if (ldb >= max1(m)), batch: long if (batch >= 0));
        0x028a cublasSgemmEx_64 [X gemm_ex] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: long if (m >= 0), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(4), a: dev(mspan(pick(transa, m, k), pick(transa, k, m), lda, dsize(atype))), atype: int if (dsize(atype) > 0), lda: long if (lda >= max1(pick(transa, m, k))), b: dev(mspan(pick(transb, k, n), pick(transb, n, k), ldb, dsize(btype))), btype: int if (dsize(btype) > 0), ldb: long if (ldb >= max1(pick(transb, k, n))), beta: sc(4), c: dev(mspan(m, n, ldc, dsize(ctype))), ctype: int if (dsize(ctype) > 0), ldc: long if (ldc >= max1(m)));
        0x028b cublasSgeam_64 [S geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: long if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: long if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x028c cublasDgeam_64 [D geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: long if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: long if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x028d cublasCgeam_64 [C geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: long if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: long if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x028e cublasZgeam_64 [Z geam] (transa: int if (is_op(transa)), transb: int if (is_op(transb)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: optdev(mspan(pick(transa, m, n), pick(transa, n, m), lda, T)), lda: long if (lda >= max1(pick(transa, m, n))), beta: sc(T), b: optdev(mspan(pick(transb, m, n), pick(transb, n, m), ldb, T)), ldb: long if (ldb >= max1(pick(transb, m, n))), c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x028f cublasSdgmm_64 [S dgmm] (mode: int if (is_side(mode)), m: long if (m >= 0), n: long if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: long, c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0290 cublasDdgmm_64 [D dgmm] (mode: int if (is_side(mode)), m: long if (m >= 0), n: long if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: long, c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0291 cublasCdgmm_64 [C dgmm] (mode: int if (is_side(mode)), m: long if (m >= 0), n: long if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: long, c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0292 cublasZdgmm_64 [Z dgmm] (mode: int if (is_side(mode)), m: long if (m >= 0), n: long if (n >= 0), a: dev(mspan(m, n, lda, T)), lda: long if (lda >= max1(m)), x: dev(vspan(pick(mode, m, n), incx, T)), incx: long, c: dev(mspan(m, n, ldc, T)), ldc: long if (ldc >= max1(m)));
        0x0293 cublasSsyrkx_64 [S syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0294 cublasDsyrkx_64 [D syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0295 cublasCsyrkx_64 [C syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0296 cublasZsyrkx_64 [Z syrkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(T), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0297 cublasCherkx_64 [C herkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0298 cublasZherkx_64 [Z herkx] (uplo: int if (is_fill(uplo)), trans: int if (is_op(trans)), n: long if (n >= 0), k: long if (k >= 0), alpha: sc(T), a: dev(mspan(pick(trans, n, k), pick(trans, k, n), lda, T)), lda: long if (lda >= max1(pick(trans, n, k))), b: dev(mspan(pick(trans, n, k), pick(trans, k, n), ldb, T)), ldb: long if (ldb >= max1(pick(trans, n, k))), beta: sc(R), c: dev(mspan(n, n, ldc, T)), ldc: long if (ldc >= max1(n)));
        0x0299 cublasSgemvStridedBatched_64 [S gemv_strided_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: long, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: long, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: long, stridey: long, batch: long if (batch >= 0));
        0x029a cublasDgemvStridedBatched_64 [D gemv_strided_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: long, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: long, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: long, stridey: long, batch: long if (batch >= 0));
        0x029b cublasCgemvStridedBatched_64 [C gemv_strided_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: long, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: long, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: long, stridey: long, batch: long if (batch >= 0));
        0x029c cublasZgemvStridedBatched_64 [Z gemv_strided_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: dev(strided(batch, stridea, mspan(m, n, lda, T), T)), lda: long, stridea: long, x: dev(strided(batch, stridex, vspan(pick(trans, n, m), incx, T), T)), incx: long, stridex: long, beta: sc(T), y: dev(strided(batch, stridey, vspan(pick(trans, m, n), incy, T), T)), incy: long, stridey: long, batch: long if (batch >= 0));
        0x029d cublasSgemvBatched_64 [S gemv_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: long, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: long, batch: long if (batch >= 0));
        0x029e cublasDgemvBatched_64 [D gemv_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: long, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: long, batch: long if (batch >= 0));
        0x029f cublasCgemvBatched_64 [C gemv_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: long, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: long, batch: long if (batch >= 0));
        0x02a0 cublasZgemvBatched_64 [Z gemv_batched] (trans: int if (is_op(trans)), m: long if (m >= 0), n: long if (n >= 0), alpha: sc(T), a: ptrs(batch, mspan(m, n, lda, T)), lda: long, x: ptrs(batch, vspan(pick(trans, n, m), incx, T)), incx: long, beta: sc(T), y: ptrs(batch, vspan(pick(trans, m, n), incy, T)), incy: long, batch: long if (batch >= 0));
    } };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn ints(v: &[i32]) -> Vec<BlasArg> {
        v.iter().map(|i| BlasArg::Int(*i)).collect()
    }

    /// `cublasSgemv_v2` arguments after the handle, host scalars.
    fn sgemv(trans: i32, m: i32, n: i32, lda: i32, incx: i32, incy: i32) -> Vec<BlasArg> {
        let f = 1f32.to_le_bytes().to_vec();
        let mut a = ints(&[trans, m, n]);
        a.push(BlasArg::HostIn(f.clone()));
        a.push(BlasArg::Device(0x1000));
        a.push(BlasArg::Int(lda));
        a.push(BlasArg::Device(0x2000));
        a.push(BlasArg::Int(incx));
        a.push(BlasArg::HostIn(f));
        a.push(BlasArg::Device(0x3000));
        a.push(BlasArg::Int(incy));
        a
    }

    #[test]
    fn ids_and_names_are_unique_and_round_trip() {
        let ids: HashSet<u16> = BlasFn::ALL.iter().map(|f| f.id()).collect();
        let names: HashSet<&str> = BlasFn::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(ids.len(), BlasFn::ALL.len());
        assert_eq!(names.len(), BlasFn::ALL.len());
        for f in BlasFn::ALL {
            assert_eq!(BlasFn::from_id(f.id()), Some(*f));
            assert!(f.name().starts_with("cublas"));
        }
        assert_eq!(BlasFn::from_id(0), None);
    }

    #[test]
    fn gemv_extents_follow_the_transpose_and_increments() {
        let e = BlasFn::cublasSgemv_v2
            .validate(&sgemv(0, 3, 2, 4, 1, -2), POINTER_MODE_HOST)
            .unwrap();
        // A: (2 - 1) * 4 + 3 floats; x: n = 2 elements; y: m = 3 elements, |incy| = 2.
        assert_eq!(e[4], Extent::Bytes((4 + 3) * 4));
        assert_eq!(e[6], Extent::Bytes(2 * 4));
        assert_eq!(e[9], Extent::Bytes((2 * 2 + 1) * 4));
        assert_eq!(e[3], Extent::Bytes(4), "alpha: one float");
        let e = BlasFn::cublasSgemv_v2
            .validate(&sgemv(1, 3, 2, 4, 1, 1), POINTER_MODE_HOST)
            .unwrap();
        assert_eq!((e[6], e[9]), (Extent::Bytes(12), Extent::Bytes(8)));
    }

    #[test]
    fn cublas_argument_checks_name_the_first_bad_argument() {
        let bad = |a: Vec<BlasArg>| BlasFn::cublasSgemv_v2.validate(&a, POINTER_MODE_HOST);
        assert_eq!(
            bad(sgemv(3, 3, 2, 4, 1, 1)),
            Err(BlasArgError::Invalid("cublasSgemv_v2", 1))
        );
        assert_eq!(
            bad(sgemv(0, -1, 2, 4, 1, 1)),
            Err(BlasArgError::Invalid("cublasSgemv_v2", 2))
        );
        // cuBLAS 13 runs gemv with lda < m or a zero increment (measured on the
        // H200: CUBLAS_STATUS_SUCCESS, against its documentation), so these pass.
        assert!(bad(sgemv(0, 3, 2, 2, 1, 1)).is_ok());
        assert!(bad(sgemv(0, 3, 2, 4, 0, 1)).is_ok());
        assert!(bad(sgemv(0, 3, 2, 4, 1, 0)).is_ok());
        assert_eq!(
            BlasFn::cublasSgemv_v2.validate(&sgemv(0, 3, 2, 4, 1, 1)[..5], POINTER_MODE_HOST),
            Err(BlasArgError::Arity("cublasSgemv_v2"))
        );
        let big = sgemv(0, i32::MAX, i32::MAX, i32::MAX, 1, 1);
        assert!(BlasFn::cublasZgemv_v2
            .validate(&big, POINTER_MODE_HOST)
            .is_err());
    }

    #[test]
    fn host_values_never_stand_where_a_device_pointer_goes() {
        let f = BlasFn::cublasSgemv_v2;
        // Host scalars in device pointer mode, and a device scalar in host mode.
        assert!(matches!(
            f.validate(&sgemv(0, 3, 2, 4, 1, 1), POINTER_MODE_DEVICE),
            Err(BlasArgError::Travel(_, 4))
        ));
        let mut a = sgemv(0, 3, 2, 4, 1, 1);
        a[3] = BlasArg::Device(0x4000);
        assert!(matches!(
            f.validate(&a, POINTER_MODE_HOST),
            Err(BlasArgError::Travel(_, 4))
        ));
        // A host value where a matrix goes, a short host scalar, an unknown mode.
        let mut a = sgemv(0, 3, 2, 4, 1, 1);
        a[4] = BlasArg::HostIn(vec![0; 4]);
        assert!(f.validate(&a, POINTER_MODE_HOST).is_err());
        let mut a = sgemv(0, 3, 2, 4, 1, 1);
        a[3] = BlasArg::HostIn(vec![0; 2]);
        assert!(f.validate(&a, POINTER_MODE_HOST).is_err());
        assert!(f.validate(&sgemv(0, 3, 2, 4, 1, 1), 7).is_err());
        // The solvers' info is a host int in either mode.
        let mut a = ints(&[0, 2, 1]);
        a.extend([
            BlasArg::Device(1),
            BlasArg::Int(2),
            BlasArg::Device(2),
            BlasArg::Device(3),
        ]);
        a.extend([BlasArg::Int(2), BlasArg::HostOut(4), BlasArg::Int(3)]);
        let e = BlasFn::cublasDgetrsBatched
            .validate(&a, POINTER_MODE_DEVICE)
            .unwrap();
        assert_eq!(
            e[3],
            Extent::Pointers {
                count: 3,
                each: 4 * 8
            }
        );
        assert_eq!(e[5], Extent::Bytes(2 * 3 * 4), "pivots: n per matrix");
    }

    #[test]
    fn runtime_typed_functions_size_their_operands_from_their_type_arguments() {
        // cublasDotEx(n, x, xtype, incx, y, ytype, incy, result, rtype, etype)
        let mut a = vec![
            BlasArg::Int(5),
            BlasArg::Device(1),
            BlasArg::Int(data_type::R_16F),
        ];
        a.extend([
            BlasArg::Int(1),
            BlasArg::Device(2),
            BlasArg::Int(data_type::R_16F),
        ]);
        a.extend([
            BlasArg::Int(1),
            BlasArg::HostOut(2),
            BlasArg::Int(data_type::R_16F),
        ]);
        a.push(BlasArg::Int(data_type::R_32F));
        let e = BlasFn::cublasDotEx.validate(&a, POINTER_MODE_HOST).unwrap();
        assert_eq!((e[1], e[7]), (Extent::Bytes(10), Extent::Bytes(2)));
        a[2] = BlasArg::Int(99);
        assert_eq!(
            BlasFn::cublasDotEx.layout(&a),
            Err(BlasArgError::Invalid("cublasDotEx", 3))
        );
    }

    #[test]
    fn sixty_four_bit_sizes_span_past_int_max_and_overflow_cleanly() {
        // cublasSaxpy_v2_64(n, alpha, x, incx, y, incy) with n above INT_MAX.
        let n = 3_000_000_000i64;
        let args = |n: i64, inc: i64| {
            vec![
                BlasArg::Long(n),
                BlasArg::HostIn(vec![0; 4]),
                BlasArg::Device(1),
                BlasArg::Long(inc),
                BlasArg::Device(2),
                BlasArg::Long(1),
            ]
        };
        let f = BlasFn::cublasSaxpy_v2_64;
        assert_eq!(f.id(), 0x0200 | BlasFn::cublasSaxpy_v2.id());
        let e = f.validate(&args(n, 1), POINTER_MODE_HOST).unwrap();
        assert_eq!(e[2], Extent::Bytes(n as u64 * 4));
        assert_eq!(
            f.validate(&args(i64::MAX, i64::MAX), POINTER_MODE_HOST),
            Err(BlasArgError::Overflow("cublasSaxpy_v2_64"))
        );
        // A 32-bit value where a 64-bit one goes does not travel, nor the reverse.
        let mut a = args(5, 1);
        a[0] = BlasArg::Int(5);
        assert!(matches!(
            f.validate(&a, POINTER_MODE_HOST),
            Err(BlasArgError::Travel(_, 1))
        ));
        assert!(BlasFn::cublasSaxpy_v2
            .validate(&args(5, 1), POINTER_MODE_HOST)
            .is_err());
        // A strided batch with a negative stride would reach before its pointer.
        let gemv = |stride: i64| {
            let f = 1f32.to_le_bytes().to_vec();
            vec![
                BlasArg::Int(0),
                BlasArg::Int(2),
                BlasArg::Int(2),
                BlasArg::HostIn(f.clone()),
                BlasArg::Device(1),
                BlasArg::Int(2),
                BlasArg::Long(stride),
                BlasArg::Device(2),
                BlasArg::Int(1),
                BlasArg::Long(2),
                BlasArg::HostIn(f),
                BlasArg::Device(3),
                BlasArg::Int(1),
                BlasArg::Long(2),
                BlasArg::Int(3),
            ]
        };
        let e = BlasFn::cublasSgemvStridedBatched
            .validate(&gemv(4), POINTER_MODE_HOST)
            .unwrap();
        assert_eq!(
            e[4],
            Extent::Bytes((2 * 4 + 4) * 4),
            "two strides and one matrix"
        );
        assert!(BlasFn::cublasSgemvStridedBatched
            .validate(&gemv(-4), POINTER_MODE_HOST)
            .is_err());
    }

    /// The C prototypes in the installed cuBLAS header, if there is one.
    fn header() -> Option<String> {
        let path = std::env::var("VMCUDA_CUBLAS_API_H").ok().or_else(|| {
            let home = std::env::var("HOME").ok()?;
            let venv = format!("{home}/.cache/vmcuda/nvcc-venv/lib");
            std::fs::read_dir(venv).ok()?.flatten().find_map(|d| {
                let p = d
                    .path()
                    .join("site-packages/nvidia/cu13/include/cublas_api.h");
                p.exists().then(|| p.to_string_lossy().into_owned())
            })
        })?;
        std::fs::read_to_string(path).ok()
    }

    /// How each C parameter after the handle is passed, per the header: a pointer, a
    /// 64-bit integer, or a C `int` (or enum).
    fn param_kinds(header: &str, name: &str) -> Option<Vec<&'static str>> {
        let call = format!("{name}(");
        let at = header.match_indices(&call).map(|(i, _)| i).find(|&i| {
            let before = header[..i].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })?;
        let rest = &header[at + call.len()..];
        let params = &rest[..rest.find(')')?];
        Some(
            params
                .split(',')
                .skip(1)
                .map(|p| {
                    if p.contains('*') || p.contains('[') {
                        "pointer"
                    } else if p.contains("int64_t") || p.contains("long long") {
                        "long"
                    } else {
                        "int"
                    }
                })
                .collect(),
        )
    }

    /// The host calls each function through a pointer typed from the table (C ints,
    /// 64-bit integers and pointers): every line must have its header prototype's shape.
    #[test]
    fn every_table_line_has_the_shape_of_its_cublas_prototype() {
        let Some(header) = header() else {
            eprintln!("cublas_api.h not found (set VMCUDA_CUBLAS_API_H): not compared");
            return;
        };
        for f in BlasFn::ALL {
            let params = param_kinds(&header, f.name())
                .unwrap_or_else(|| panic!("{} is not in cublas_api.h", f.name()));
            let table: Vec<&str> = f
                .kinds()
                .iter()
                .map(|k| match k {
                    ArgKind::Int => "int",
                    ArgKind::Long => "long",
                    _ => "pointer",
                })
                .collect();
            assert_eq!(table, params, "{}", f.name());
        }
    }
}
