//! The functions the op table declares: every C function that is nothing but its op.
//!
//! A line of `vmcuda_wire::op_lines!` may end in `=> driver cuName(...)` or
//! `=> driver_ctx cuName(...)` (a driver function that needs a current context). Each
//! C parameter is a request field of the same name, converted to the field's type, or
//! `out name: T`, a pointer the reply's field `name` is written through. From that,
//! this module generates the function as `__vmcuda_cuName` (libcuda.so.1 exports
//! `cuName` as its alias), through [`crate::driver::guard`], after the driver's
//! initialization (and context) checks, calling or posting by the op's mode, and found
//! by `cuGetProcAddress` through [`lookup`].
//!
//! So adding such a function is its table line plus the host's body; the compiler
//! checks that the parameters and the request and reply fields agree.

use std::ffi::c_void;

/// Expand every driver clause of the table (`vmcuda_wire::driver_clauses!`): each with
/// its request type and mode.
macro_rules! table_exports {
    ($([$abi:ident $cfn:ident $req:ident $mode:ident ($($cargs:tt)*)])*) => {
        $(
            c_export!(@munch $abi $cfn $req $mode [] [] [] $($cargs)*);
        )*

        /// The implementation of a driver function this table exports, by its base or
        /// exported name.
        pub fn lookup(name: &str) -> Option<*mut c_void> {
            $(
                if let Some(f) = driver_entry!($abi $cfn name) {
                    return Some(f);
                }
            )*
            None
        }

        /// The driver functions this table exports, by exported name.
        #[cfg(test)]
        pub fn driver_names() -> Vec<&'static str> {
            let mut names = Vec::new();
            $(
                if driver_entry!($abi $cfn stringify!($cfn)).is_some() {
                    names.push(stringify!($cfn));
                }
            )*
            names
        }
    };
}

/// A driver export's implementation when `$name` names it (as exported, or by its base
/// name without a `_vN` suffix).
macro_rules! driver_entry {
    // A pass-through line's executor method is the host's: no export.
    (exec $cfn:ident $name:expr) => {
        None::<*mut c_void>
    };
    ($abi:ident $cfn:ident $name:expr) => {
        (crate::driver::base_name(stringify!($cfn)) == crate::driver::base_name($name))
            .then_some($cfn as *mut c_void)
    };
}

/// One export, its C parameters sorted into the signature (`sig`), the request's
/// fields (`ins`) and the reply's outputs (`outs`) one by one.
macro_rules! c_export {
    // A pass-through line's executor method is the host's: no export.
    (@munch exec $($clause:tt)*) => {};
    (@munch $abi:ident $cfn:ident $req:ident $mode:ident [$($sig:tt)*] [$($ins:ident)*] [$($outs:ident)*]
        out $a:ident : $t:ty $(, $($rest:tt)*)?) => {
        c_export!(@munch $abi $cfn $req $mode [$($sig)* $a: *mut $t,] [$($ins)*] [$($outs)* $a] $($($rest)*)?);
    };
    (@munch $abi:ident $cfn:ident $req:ident $mode:ident [$($sig:tt)*] [$($ins:ident)*] [$($outs:ident)*]
        $a:ident : $t:ty $(, $($rest:tt)*)?) => {
        c_export!(@munch $abi $cfn $req $mode [$($sig)* $a: $t,] [$($ins)* $a] [$($outs)*] $($($rest)*)?);
    };
    (@munch $abi:ident $cfn:ident $req:ident $mode:ident [$($sig:tt)*] [$($ins:ident)*] [$($outs:ident)*]) => {
        c_export!(@emit $abi $cfn $req $mode [$($sig)*] [$($ins)*] [$($outs)*]);
    };

    (@emit $abi:ident $cfn:ident $req:ident $mode:ident [$($sig:tt)*] [$($ins:ident)*] [$($outs:ident)*]) => {
        #[export_name = concat!("__vmcuda_", stringify!($cfn))]
        #[allow(non_snake_case, clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
        pub extern "C" fn $cfn($($sig)*) -> $crate::driver::CUresult {
            $crate::driver::guard(stringify!($cfn), || {
                c_export!(@check $abi);
                c_export!(@body $mode $req [$($ins)*] [$($outs)*])
            })
        }
    };

    (@check driver) => {
        $crate::driver::check_initialized()?
    };
    (@check driver_ctx) => {
        $crate::driver::context::current_device()?
    };

    // Outputs are checked before anything is sent: a NULL one is the caller's error,
    // and the call must not happen.
    (@body $mode:ident $req:ident [$($ins:ident)*] [$($outs:ident)*]) => {{
        $(
            if $outs.is_null() {
                return Err(vmcuda_wire::CudaStatus::ErrorInvalidValue);
            }
        )*
        let req = vmcuda_wire::op::$req {
            $($ins: $ins.try_into().map_err(|_| vmcuda_wire::CudaStatus::ErrorInvalidValue)?,)*
        };
        #[allow(unused_variables)]
        let reply = c_export!(@send $mode req [$($outs)*]);
        $(
            let value = reply.$outs.try_into().map_err(|_| vmcuda_wire::CudaStatus::ErrorInvalidValue)?;
            // SAFETY: checked non-null above; by the function's CUDA contract the
            // output points to a writable value of its type.
            unsafe { $crate::caller::write($outs, value)? };
        )*
        Ok(())
    }};

    // A call CUDA does not wait for, with nothing coming back, is posted.
    (@send Async $req:ident []) => {
        $crate::driver::inner::post(&$req, &[])?
    };
    (@send $mode:ident $req:ident [$($outs:ident)*]) => {
        $crate::driver::inner::call(&$req)?
    };
}

vmcuda_wire::driver_clauses!(table_exports);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_functions_are_found_by_base_and_exported_name() {
        let names = driver_names();
        assert!(names.contains(&"cuCtxSetLimit"));
        assert!(!names.iter().any(|n| n.starts_with("cuda")));
        assert_eq!(lookup("cuCtxSetLimit"), Some(cuCtxSetLimit as *mut c_void));
        assert_eq!(lookup("cudaDeviceSetLimit"), None);
        assert_eq!(lookup("cuNoSuchFunction"), None);
    }

    #[test]
    fn a_null_output_is_refused_before_anything_is_sent() {
        // No server is reachable in unit tests: trying to reach one would give a
        // different error than the one a NULL output must give.
        assert_eq!(
            crate::driver::inner::device::cudaDeviceGetP2PAttribute(std::ptr::null_mut(), 1, 0, 0),
            vmcuda_wire::CudaStatus::ErrorInvalidValue.0
        );
    }
}
