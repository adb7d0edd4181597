//! The op-code table: every forwarded call, declared once.
//!
//! [`op_lines!`](crate::op_lines) holds the table, grouped by API family. One line per
//! op gives:
//!
//! - its explicit op code (append-only, never positional: `wire/ops.snapshot` guards
//!   them) and its name, the same from guest to executor;
//! - its request and reply types: declared inline (`Name { field: Type, ... }`, a
//!   struct generated here) or named (a type with more to it, in the family's module);
//! - whether CUDA lets the caller run on without waiting (`Async`: the guest posts it)
//!   or not (`Sync`: the guest waits for the reply);
//! - the handler method of its family's trait (`DeviceOps`, `MemoryOps`, ...), which
//!   the host's session implements in `session/<family>.rs`;
//! - optionally, `=> exec name(field: Type, ...)`: the op passes through (no handle,
//!   range or quota of the session's to check): its handler is the executor's method
//!   `name` of [`PassThroughExec`] with those request fields, answering the reply, and
//!   the session's part is [`PassThrough`] (the executor, ready for the call), once for
//!   every such op;
//! - optionally, the driver functions that are nothing but this op (`=> driver
//!   cuName(...)`, or `=> driver_ctx cuName(...)` for one that needs a current
//!   context): each C parameter is a request field of the same name, or `out name:
//!   Type`, a reply field written through the pointer.
//!   The guest library generates those functions from the same lines
//!   (`guest-lib/src/driver/table.rs`), so such a function is one line here plus
//!   its host body.
//!
//! The macro expands the table into [`Op`], the [`Request`] impls the guest calls
//! through, one handler trait per family, [`Handler`] (all of them) and [`dispatch`].
//! Other crates expand the same lines with macros of their own:
//! `vmcuda_wire::op_lines!(their_macro)`, or only the lines' driver clauses,
//! `vmcuda_wire::driver_clauses!(their_macro)`.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use thiserror::Error;

pub use crate::array::{
    ArrayCreate, ArrayHandle, ArrayMade, Copy3D, LevelMade, MipmappedArrayCreate, MipmappedHandle,
    MipmappedMade, TexObjectCreate, TexRefId, TexRefSetting, TexRefState,
};
pub use crate::device::{DeviceProperties, GpuStatus, GuestProcess};
pub use crate::driver::{
    AllocationHandle, AllocationProp, Granularity, Link, Linked, MemAddressFree, MemAddressReserve,
    MemBatchDecompress, MemCreate, MemCreated, MemGetAllocationGranularity,
    MemGetAllocationProperties, MemMap, MemRelease, MemRetainAllocationHandle, MemSetAccess,
    MemUnmap, MemsetElements, Reserved, StreamBatchMemOp, StreamWaitValue, StreamWriteValue32,
    StreamWriteValue64, TensorMapEncodeIm2col, TensorMapEncodeTiled, TensorMapReplaceAddress,
};
pub use crate::graph::{
    CaptureGraph, ConditionalNodeMade, DotText, EdgeData, EdgeList, ExecUpdateResult,
    GraphAddConditionalNode, GraphAddNode, GraphDebugDot, GraphDestroy, GraphExecDestroy,
    GraphExecMade, GraphGetNodes, GraphInstantiate, GraphLaunch, GraphMade, GraphNodeCopyParams,
    GraphNodeGetDependencies, GraphNodeMade, GraphNodes, LinkedNodes, MemAllocAsync,
    MemAllocFromPoolAsync, MemFreeAsync, MemPoolCreate, MemPoolDestroy, MemPoolGetAccess,
    MemPoolGetAttribute, MemPoolHandle, MemPoolSetAccess, MemPoolSetAttribute, MemPoolTrimTo,
    PlainNode, PoolAccess, PoolAttributeValue, PoolMade, PoolRef, RawEdge, StreamBeginCapture,
    StreamBeginCaptureToGraph, StreamEndCapture, StreamGetCaptureGraph,
};
pub use crate::handle::{
    DevicePtr, EventHandle, FunctionHandle, GraphExecHandle, GraphHandle, GraphNodeHandle,
    ModuleHandle, StreamHandle, HANDLE_SPACE_SHIFT,
};
pub use crate::handshake::{
    ExecutorKind, Hello, HelloReply, SessionResume, SessionResumed, SessionTicket,
};
pub use crate::memory::{
    DoneWord, GuestPagesExtend, GuestPagesGrant, HostRegisterGuestPages, HostRegisterShared,
    MemcpyShared, PointerAttributes, RingAttach, RingPlace, SharedHostMemory, MAX_STAGING_LEN,
    SHARED_STAGING,
};
pub use crate::module::{
    FuncAttributes, FunctionInfo, LaunchAttribute, LaunchKernel, ModuleLoadCached,
    ModuleLoadedCached, ParamInfo,
};
use crate::status::CudaStatus;

/// Whether CUDA makes the calling host thread wait for the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Sync,
    Async,
}

/// A request type, tied to its op code and reply type by the table.
pub trait Request: Serialize + DeserializeOwned {
    const OP: Op;
    type Reply: Serialize + DeserializeOwned;
}

/// Per-call facts from the frame header.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallContext {
    /// The calling guest thread's current device.
    pub device: i32,
}

/// A handler's answer: the reply and its bulk data (empty for most ops).
pub type HandlerResult<R> = Result<(R, Vec<u8>), CudaStatus>;

#[derive(Debug, Error)]
pub enum DispatchError {
    #[error("undecodable arguments for {op:?}: {source}")]
    Decode {
        op: Op,
        #[source]
        source: postcard::Error,
    },
    #[error("{0}")]
    Cuda(CudaStatus),
}

/// An encoded reply: argument block and bulk data.
pub struct EncodedReply {
    pub meta: Vec<u8>,
    pub data: Vec<u8>,
}

/// A request or reply type of a table line: generated when the line declares its
/// fields inline, nothing when it names a type defined elsewhere.
macro_rules! message_type {
    ($(#[$m:meta])* $name:ident {}) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
        pub struct $name;
    };
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
        pub struct $name { $($(#[$fm])* pub $field: $ty,)+ }
    };
    ($(#[$m:meta])* $name:ident) => {};
    ($(#[$m:meta])* ()) => {};
}

/// A family trait's handler method for one line: none for a pass-through line (one with
/// an `=> exec` clause), whose handler [`PassThroughExec`] is instead.
macro_rules! family_method {
    ([] $(#[$doc:meta])* $method:ident $req:ident $reply:tt) => {
        $(#[$doc])*
        fn $method(&mut self, ctx: &CallContext, req: $req, data: &[u8]) -> HandlerResult<$reply>;
    };
    ([[exec $($clause:tt)*] $($rest:tt)*] $($line:tt)*) => {};
    ([[$abi:ident $($clause:tt)*] $($rest:tt)*] $($line:tt)*) => {
        family_method!([$($rest)*] $($line)*);
    };
}

/// A pass-through line's executor method (its `=> exec name(field: Type, ...)` clause);
/// nothing for any other line.
macro_rules! pass_through_method {
    ([] $($line:tt)*) => {};
    ([[exec $exec:ident ($($arg:ident : $ty:ty),* $(,)?)] $($rest:tt)*] [$(#[$doc:meta])*] $reply:tt) => {
        $(#[$doc])*
        fn $exec(&mut self, $($arg: $ty),*) -> Result<$reply, CudaStatus>;
    };
    ([[$abi:ident $($clause:tt)*] $($rest:tt)*] $($line:tt)*) => {
        pass_through_method!([$($rest)*] $($line)*);
    };
}

/// One line's call in [`dispatch`]: its family trait's handler, or for a pass-through
/// line the executor's method with the request's fields of the clause's names.
macro_rules! dispatch_call {
    ([] $handler:ident $ctx:ident $req:ident $data:ident $Family:ident $method:ident) => {
        $Family::$method($handler, $ctx, $req, $data)
    };
    ([[exec $exec:ident ($($arg:ident : $ty:ty),* $(,)?)] $($rest:tt)*]
        $handler:ident $ctx:ident $req:ident $data:ident $Family:ident $method:ident) => {
        {
            let _ = &$req;
            PassThrough::pass_through($handler, $ctx)
                .and_then(|exec| exec.$exec($($req.$arg),*))
                .map(|reply| (reply, Vec::new()))
        }
    };
    ([[$abi:ident $($clause:tt)*] $($rest:tt)*] $($line:tt)*) => {
        dispatch_call!([$($rest)*] $($line)*)
    };
}

/// One method of [`forward_pass_through!`](crate::forward_pass_through).
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_pass_through_method {
    ([] $($line:tt)*) => {};
    ([[exec $exec:ident ($($arg:ident : $ty:ty),* $(,)?)] $($rest:tt)*] $inner:ident $after:ident ()) => {
        fn $exec(&mut self, $($arg: $ty),*) -> ::core::result::Result<(), $crate::CudaStatus> {
            let r = self.$inner.$exec($($arg),*);
            self.$after();
            r
        }
    };
    ([[exec $exec:ident ($($arg:ident : $ty:ty),* $(,)?)] $($rest:tt)*] $inner:ident $after:ident $reply:ident) => {
        fn $exec(&mut self, $($arg: $ty),*) -> ::core::result::Result<$crate::op::$reply, $crate::CudaStatus> {
            let r = self.$inner.$exec($($arg),*);
            self.$after();
            r
        }
    };
    ([[$abi:ident $($clause:tt)*] $($rest:tt)*] $($line:tt)*) => {
        $crate::__forward_pass_through_method!([$($rest)*] $($line)*);
    };
}

/// The host side of the pass-through lines: the executor that runs them, ready for
/// the call (its device current). A pass-through op needs no check of the session's
/// (no handle, range or quota): its values go to the executor as the guest sent them,
/// and the driver there answers for them as natively.
pub trait PassThrough {
    fn pass_through(&mut self, ctx: &CallContext) -> Result<&mut dyn PassThroughExec, CudaStatus>;
}

macro_rules! op_table {
    ($d:tt $(
        $(#[$family_doc:meta])*
        $family:ident $Family:ident {
            $(
                $(#[$doc:meta])*
                $code:literal $name:ident => $method:ident ( $req:ident $({ $($req_fields:tt)* })? )
                    -> $reply:tt $({ $($reply_fields:tt)* })?, $mode:ident
                    $( => $abi:ident $cfn:ident ( $($cargs:tt)* ) )* ;
            )*
        }
    )*) => {
        $($(
            message_type!($(#[$doc])* $req $({ $($req_fields)* })?);
            message_type!($reply $({ $($reply_fields)* })?);
        )*)*

        /// Every op code. The numbers are the protocol: never change or reuse one.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Op { $($($name = $code,)*)* }

        impl Op {
            pub const ALL: &'static [Op] = &[$($(Op::$name,)*)*];

            pub fn from_code(code: u16) -> Option<Op> {
                match code { $($($code => Some(Op::$name),)*)* _ => None }
            }
            pub fn code(self) -> u16 {
                self as u16
            }
            pub fn name(self) -> &'static str {
                match self { $($(Op::$name => stringify!($name),)*)* }
            }
            pub fn mode(self) -> Mode {
                match self { $($(Op::$name => Mode::$mode,)*)* }
            }
            /// The API family the op belongs to (the table's grouping).
            pub fn family(self) -> &'static str {
                match self { $($(Op::$name => stringify!($family),)*)* }
            }
        }

        $($(impl Request for $req {
            const OP: Op = Op::$name;
            type Reply = $reply;
        })*)*

        $(
            $(#[$family_doc])*
            pub trait $Family {
                $(family_method!([$([$abi $cfn ($($cargs)*)])*] $(#[$doc])* $method $req $reply);)*
            }
        )*

        /// The executor's methods of the pass-through lines, one per line, named as the
        /// line's clause names it (the op's handler name): the executor of the host
        /// implements them, its test double too.
        pub trait PassThroughExec {
            $($(pass_through_method!([$([$abi $cfn ($($cargs)*)])*] [$(#[$doc])*] $reply);)*)*
        }

        /// `forward_pass_through!(inner, after)` in an `impl PassThroughExec for W`:
        /// every method of the pass-through lines, forwarded to `self.inner`, then
        /// `self.after()` (a wrapper that watches an executor, as the fuzz harness's
        /// does, follows every line added to the table without an edit).
        #[macro_export]
        macro_rules! forward_pass_through {
            ($d inner:ident, $d after:ident) => {
                $($($crate::__forward_pass_through_method!(
                    [$([$abi $cfn ($($cargs)*)])*] $d inner $d after $reply
                );)*)*
            };
        }

        /// `driver_clauses!(my_macro)` calls `my_macro! { [ABI CFN REQUEST MODE (ARGS)] ... }`
        /// with every `=> ABI CFN(ARGS)` clause of the table (`exec` ones included), its
        /// line's request type and mode beside it: what the guest library makes its
        /// driver exports of, without parsing the lines again.
        #[macro_export]
        macro_rules! driver_clauses {
            ($d callback:path) => {
                $d callback! {
                    $($($([$abi $cfn $req $mode ($($cargs)*)])*)*)*
                }
            };
        }

        /// The host side of the table: every family's handler trait, and the
        /// pass-through lines' executor.
        pub trait Handler: $($Family +)* PassThrough {}
        impl<T: ?Sized + $($Family +)* PassThrough> Handler for T {}

        /// Decode a request, run its handler and encode the reply.
        pub fn dispatch<H: Handler + ?Sized>(
            handler: &mut H,
            ctx: &CallContext,
            op: Op,
            meta: &[u8],
            data: &[u8],
        ) -> Result<EncodedReply, DispatchError> {
            match op {
                $($(Op::$name => {
                    let req: $req = postcard::from_bytes(meta)
                        .map_err(|source| DispatchError::Decode { op, source })?;
                    let (reply, data) = dispatch_call!([$([$abi $cfn ($($cargs)*)])*] handler ctx req data $Family $method)
                        .map_err(DispatchError::Cuda)?;
                    let meta = postcard::to_stdvec(&reply).expect("reply types always encode");
                    Ok(EncodedReply { meta, data })
                })*)*
            }
        }
    };
}

crate::op_lines!(op_table, $);

/// Host-to-guest event (flag `FLAG_EVENT`, not in the table because guests never send
/// it): kernel `printf` and device-assert text, in the data section, for the guest's
/// stdout (`fd` 1) or stderr (`fd` 2), sent just before the reply of the call during
/// which the driver produced it.
pub const OP_CONSOLE: u16 = 0xF001;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Console {
    pub fd: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op codes are the protocol. This snapshot only ever grows: a code that
    /// changes, disappears or gets reused breaks every deployed guest.
    #[test]
    fn op_codes_are_append_only() {
        let snapshot = include_str!("../ops.snapshot");
        let current: Vec<String> = Op::ALL
            .iter()
            .map(|op| format!("{:#06x} {}", op.code(), op.name()))
            .collect();
        for line in snapshot.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                current.iter().any(|c| c == line),
                "op `{line}` from ops.snapshot is gone or renumbered"
            );
        }
        for line in &current {
            assert!(
                snapshot.lines().any(|l| l == line),
                "new op `{line}`: append it to wire/ops.snapshot"
            );
        }
    }

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut codes: Vec<u16> = Op::ALL.iter().map(|o| o.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Op::ALL.len());
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(*op));
        }
        assert_eq!(Op::from_code(0xEEEE), None);
        assert!(Op::from_code(OP_CONSOLE).is_none());
    }

    #[test]
    fn request_types_know_their_op() {
        assert_eq!(<MemAlloc as Request>::OP, Op::MemAlloc);
        assert_eq!(Op::LaunchKernel.mode(), Mode::Async);
        assert_eq!(Op::MemcpyDtoH.mode(), Mode::Sync);
    }
}
