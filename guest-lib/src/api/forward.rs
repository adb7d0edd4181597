//! One line per plainly forwarded runtime call.
//!
//! `forward!` turns `fn cudaName(arg: Type, ...) => Request { ... };` into the
//! exported `extern "C"` function: the request is built from the arguments (a `?`
//! inside refuses bad ones before anything is sent), sent for the calling thread's
//! device, and waited for; the host's status is the call's. Calls whose semantics need
//! more (outputs, state kept in the guest, posting) stay hand-written.

macro_rules! forward {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $req:expr ; )*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),*) -> $crate::cudaError_t {
                $crate::api::guard(stringify!($name), || {
                    let req = $req;
                    $crate::api::call(&req).map(|_| ())
                })
            }
        )*
    };
}
pub(crate) use forward;
