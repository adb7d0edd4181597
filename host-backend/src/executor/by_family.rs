//! [`by_family!`]: an executor's `impl Executor` written as a list of signatures, each
//! call handed to the inherent method of the same name that the executor's family
//! module defines (`Type::name` finds an inherent method before the trait's).

/// `by_family!(Type; fn name(&mut self, arg: T, ...) -> R; ...)` inside
/// `impl Executor for Type`: one method per signature, calling `Type::name`.
macro_rules! by_family {
    ($ty:ident; $(fn $name:ident(&mut self $(, $arg:ident: $argty:ty)* $(,)?) -> $ret:ty;)*) => {
        $(fn $name(&mut self $(, $arg: $argty)*) -> $ret {
            $ty::$name(self $(, $arg)*)
        })*
    };
}
