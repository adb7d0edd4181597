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

use serde::{Deserialize, Serialize};

use crate::blas::{data_type, matrix_span, BlasHandle, POINTER_MODE_DEVICE, POINTER_MODE_HOST};
use crate::handle::{DevicePtr, StreamHandle};

/// How an argument of a table function is passed (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    Int,
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

fn as_int(a: &BlasArg) -> i64 {
    match a {
        BlasArg::Int(v) => *v as i64,
        _ => 0,
    }
}

/// The extent of one argument, from its kind and the table's expression.
macro_rules! extent {
    ($name:expr, int) => {
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
                (ArgKind::Int, BlasArg::Int(_)) => true,
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
/// entry points are called with: a C `int`, or a pointer.
#[macro_export]
macro_rules! blas_c_type {
    (int) => {
        std::ffi::c_int
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

    /// Whether each C parameter after the handle is a pointer, per the header.
    fn pointer_params(header: &str, name: &str) -> Option<Vec<bool>> {
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
                .map(|p| p.contains('*') || p.contains('['))
                .collect(),
        )
    }

    /// The host calls each function through a pointer typed from the table (C ints
    /// and pointers): every line must have its header prototype's shape.
    #[test]
    fn every_table_line_has_the_shape_of_its_cublas_prototype() {
        let Some(header) = header() else {
            eprintln!("cublas_api.h not found (set VMCUDA_CUBLAS_API_H): not compared");
            return;
        };
        for f in BlasFn::ALL {
            let params = pointer_params(&header, f.name())
                .unwrap_or_else(|| panic!("{} is not in cublas_api.h", f.name()));
            let table: Vec<bool> = f.kinds().iter().map(|k| *k != ArgKind::Int).collect();
            assert_eq!(table, params, "{}", f.name());
        }
    }
}
