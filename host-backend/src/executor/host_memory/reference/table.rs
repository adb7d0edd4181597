//! The reference for the table functions (`vmcuda_wire::blas_table`):
//! [`cpu_blas_call`] covers the level-1 routines but the rotations, `gemv`, `ger`,
//! `trsv`, `symm`/`hemm`, `syrk`/`herk`, `geam` and `dgmm`, in every precision and
//! with 32- or 64-bit sizes, computing in double
//! precision. Everything else is `cudaErrorNotSupported` there (the test double's
//! "cuBLAS does not support this here"): it never stands in for a GPU result.

use vmcuda_wire::blas::data_type;
use vmcuda_wire::blas_table::{BlasFn, Extent};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::super::blas_table::{ExecArg, TableCall};
use super::super::super::ExecResult;
use super::{load, store, Cx};

/// The test double's device memory, as the reference reads and writes it.
pub trait CpuMemory {
    fn read(&self, ptr: DevicePtr, len: u64) -> ExecResult<Vec<u8>>;
    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> ExecResult<()>;
}

/// `cublasFillMode_t`, `cublasDiagType_t`, `cublasSideMode_t` values.
const LOWER: i64 = 0;
const UNIT: i64 = 1;
const LEFT: i64 = 0;

/// A call's arguments, read and written by position (after the handle).
struct Args<'a, M> {
    mem: &'a mut M,
    call: &'a mut TableCall,
    /// `cudaDataType` of the elements and of a real scalar.
    elem: i32,
    real: i32,
}

impl<M: CpuMemory> Args<'_, M> {
    fn int(&self, i: usize) -> i64 {
        match self.call.args.get(i) {
            Some(ExecArg::Int(v)) => *v,
            _ => 0,
        }
    }

    fn bytes(&self, i: usize) -> u64 {
        match self.call.extents.get(i) {
            Some(Extent::Bytes(b)) => *b,
            _ => 0,
        }
    }

    /// A scalar's type from its size: the element type, or its real part
    /// (`Csscal`'s alpha, `Scnrm2`'s result, `herk`'s alpha and beta...).
    fn scalar_type(&self, bytes: u64) -> i32 {
        if Some(bytes) == data_type::size(self.elem) {
            self.elem
        } else {
            self.real
        }
    }

    /// The raw bytes of argument `i` (host value, or the device memory it spans).
    fn raw(&self, i: usize) -> ExecResult<Vec<u8>> {
        match self.call.args.get(i) {
            Some(ExecArg::Host(v)) => Ok(v.clone()),
            Some(ExecArg::Device(p)) => self.mem.read(*p, self.bytes(i)),
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn set_raw(&mut self, i: usize, bytes: &[u8]) -> ExecResult<()> {
        match self.call.args.get_mut(i) {
            Some(ExecArg::Host(v)) => {
                v.copy_from_slice(bytes);
                Ok(())
            }
            Some(ExecArg::Device(p)) => {
                let p = *p;
                self.mem.write(p, bytes)
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn scalar(&self, i: usize) -> ExecResult<Cx> {
        let t = self.scalar_type(self.bytes(i));
        Ok(load(t, &self.raw(i)?))
    }

    fn set_scalar(&mut self, i: usize, v: Cx) -> ExecResult<()> {
        let mut b = vec![0; self.bytes(i) as usize];
        store(self.scalar_type(b.len() as u64), v, &mut b);
        self.set_raw(i, &b)
    }

    fn elem_size(&self) -> usize {
        data_type::size(self.elem).unwrap_or(1) as usize
    }

    /// Byte offset of logical element `k` of `n`, `inc` apart (BLAS walks a negative
    /// increment from the far end).
    fn at(&self, k: usize, n: usize, inc: i64) -> usize {
        let step = inc.unsigned_abs() as usize;
        let slot = if inc >= 0 {
            k * step
        } else {
            (n - 1 - k) * step
        };
        slot * self.elem_size()
    }

    fn vector(&self, i: usize, n: i64, inc: i64) -> ExecResult<Vec<Cx>> {
        let n = n.max(0) as usize;
        let raw = self.raw(i)?;
        Ok((0..n)
            .map(|k| load(self.elem, &raw[self.at(k, n, inc)..]))
            .collect())
    }

    fn set_vector(&mut self, i: usize, inc: i64, v: &[Cx]) -> ExecResult<()> {
        let mut raw = self.raw(i)?;
        for (k, x) in v.iter().enumerate() {
            let at = self.at(k, v.len(), inc);
            store(self.elem, *x, &mut raw[at..]);
        }
        self.set_raw(i, &raw)
    }

    /// A column-major `rows x cols` matrix, densely (element `r + c * rows`).
    fn matrix(&self, i: usize, rows: i64, cols: i64, ld: i64) -> ExecResult<Vec<Cx>> {
        let (rows, cols, ld) = (rows.max(0) as usize, cols.max(0) as usize, ld as usize);
        let raw = self.raw(i)?;
        let e = self.elem_size();
        Ok((0..rows * cols)
            .map(|k| load(self.elem, &raw[(k % rows + k / rows * ld) * e..]))
            .collect())
    }

    fn set_matrix(&mut self, i: usize, rows: i64, ld: i64, m: &[Cx]) -> ExecResult<()> {
        let (rows, ld) = (rows.max(1) as usize, ld as usize);
        let mut raw = self.raw(i)?;
        let e = self.elem_size();
        for (k, x) in m.iter().enumerate() {
            store(self.elem, *x, &mut raw[(k % rows + k / rows * ld) * e..]);
        }
        self.set_raw(i, &raw)
    }
}

/// `beta * c`, without reading `c` when `beta` is zero (BLAS: C may hold NaNs then).
fn scaled(beta: Cx, c: Cx) -> Cx {
    if beta == Cx::default() {
        Cx::default()
    } else {
        beta.mul(c)
    }
}

/// |re| + |im|: the magnitude `asum` and `iamax` use.
fn abs1(x: Cx) -> f64 {
    x.re.abs() + x.im.abs()
}

/// The element types of a precision letter.
fn types(precision: &str) -> Option<(i32, i32)> {
    use data_type as d;
    Some(match precision {
        "S" => (d::R_32F, d::R_32F),
        "D" => (d::R_64F, d::R_64F),
        "C" => (d::C_32F, d::R_32F),
        "Z" => (d::C_64F, d::R_64F),
        _ => return None,
    })
}

/// Whether the reference computes this function.
pub fn cpu_blas_supports(f: BlasFn) -> bool {
    types(f.precision()).is_some()
        && matches!(
            f.family(),
            "axpy"
                | "scal"
                | "dot"
                | "dotu"
                | "dotc"
                | "nrm2"
                | "asum"
                | "iamax"
                | "iamin"
                | "copy"
                | "swap"
                | "gemv"
                | "ger"
                | "geru"
                | "gerc"
                | "trsv"
                | "symm"
                | "hemm"
                | "syrk"
                | "herk"
                | "geam"
                | "dgmm"
        )
}

/// Compute a checked table call on the CPU (see the module documentation).
pub fn cpu_blas_call(mem: &mut impl CpuMemory, call: &mut TableCall) -> ExecResult<()> {
    let f = call.function;
    let (elem, real) = types(f.precision()).ok_or(CudaStatus::ErrorNotSupported)?;
    if !cpu_blas_supports(f) {
        return Err(CudaStatus::ErrorNotSupported);
    }
    let mut a = Args {
        mem,
        call,
        elem,
        real,
    };
    match f.family() {
        "axpy" | "scal" | "copy" | "swap" => level1_update(&mut a, f.family()),
        "dot" | "dotu" | "dotc" | "nrm2" | "asum" | "iamax" | "iamin" => {
            level1_reduce(&mut a, f.family())
        }
        "gemv" => gemv(&mut a),
        "ger" | "geru" | "gerc" => ger(&mut a, f.family() == "gerc"),
        "trsv" => trsv(&mut a),
        "symm" | "hemm" => symm(&mut a, f.family() == "hemm"),
        "geam" => geam(&mut a),
        "dgmm" => dgmm(&mut a),
        _ => syrk(&mut a, f.family() == "herk"),
    }
}

/// axpy (n, alpha, x, incx, y, incy), scal (n, alpha, x, incx), copy and swap
/// (n, x, incx, y, incy).
fn level1_update<M: CpuMemory>(a: &mut Args<'_, M>, family: &str) -> ExecResult<()> {
    let n = a.int(0);
    if n <= 0 {
        return Ok(());
    }
    match family {
        "axpy" => {
            let alpha = a.scalar(1)?;
            let x = a.vector(2, n, a.int(3))?;
            let y = a.vector(4, n, a.int(5))?;
            let y: Vec<Cx> = x
                .iter()
                .zip(&y)
                .map(|(x, y)| alpha.mul(*x).add(*y))
                .collect();
            a.set_vector(4, a.int(5), &y)
        }
        "scal" => {
            let alpha = a.scalar(1)?;
            let x: Vec<Cx> = a
                .vector(2, n, a.int(3))?
                .iter()
                .map(|x| alpha.mul(*x))
                .collect();
            a.set_vector(2, a.int(3), &x)
        }
        "copy" => {
            let x = a.vector(1, n, a.int(2))?;
            a.set_vector(3, a.int(4), &x)
        }
        _ => {
            let x = a.vector(1, n, a.int(2))?;
            let y = a.vector(3, n, a.int(4))?;
            a.set_vector(1, a.int(2), &y)?;
            a.set_vector(3, a.int(4), &x)
        }
    }
}

/// dot (n, x, incx, y, incy, result); nrm2, asum, iamax, iamin (n, x, incx, result).
fn level1_reduce<M: CpuMemory>(a: &mut Args<'_, M>, family: &str) -> ExecResult<()> {
    let (n, incx) = (a.int(0), a.int(2));
    if let "dot" | "dotu" | "dotc" = family {
        let x = a.vector(1, n, incx)?;
        let y = a.vector(3, n, a.int(4))?;
        let conj = family == "dotc";
        let sum = x.iter().zip(&y).fold(Cx::default(), |s, (x, y)| {
            s.add(if conj { x.conj() } else { *x }.mul(*y))
        });
        return a.set_scalar(5, sum);
    }
    // BLAS: these see nothing for n <= 0 or a non-positive increment.
    let x = if n > 0 && incx > 0 {
        a.vector(1, n, incx)?
    } else {
        Vec::new()
    };
    match family {
        "nrm2" => {
            let sq: f64 = x.iter().map(|x| x.re * x.re + x.im * x.im).sum();
            a.set_scalar(3, Cx::real(sq.sqrt()))
        }
        "asum" => a.set_scalar(3, Cx::real(x.iter().map(|x| abs1(*x)).sum())),
        _ => {
            // 1-based index of the first largest (smallest) |re| + |im|; 0 when empty.
            let better = |v: f64, best: f64| {
                if family == "iamax" {
                    v > best
                } else {
                    v < best
                }
            };
            let mut index = 0usize;
            for (k, v) in x.iter().map(|x| abs1(*x)).enumerate() {
                if index == 0 || better(v, abs1(x[index - 1])) {
                    index = k + 1;
                }
            }
            // An `int` result, or an `int64_t` one for the `_64` entry points.
            match a.bytes(3) {
                8 => a.set_raw(3, &(index as i64).to_le_bytes()),
                _ => a.set_raw(3, &(index as i32).to_le_bytes()),
            }
        }
    }
}

/// op(X)(r, c) of a dense column-major matrix with `rows` rows.
fn op_at(x: &[Cx], rows: usize, trans: i64, r: usize, c: usize) -> Cx {
    match trans {
        0 => x[r + c * rows],
        1 => x[c + r * rows],
        _ => x[c + r * rows].conj(),
    }
}

/// gemv (trans, m, n, alpha, A, lda, x, incx, beta, y, incy).
fn gemv<M: CpuMemory>(a: &mut Args<'_, M>) -> ExecResult<()> {
    let (trans, m, n) = (a.int(0), a.int(1), a.int(2));
    if m <= 0 || n <= 0 {
        return Ok(());
    }
    let (alpha, beta) = (a.scalar(3)?, a.scalar(8)?);
    let mat = a.matrix(4, m, n, a.int(5))?;
    let (rows, cols) = if trans == 0 { (m, n) } else { (n, m) };
    let x = a.vector(6, cols, a.int(7))?;
    let y = a.vector(9, rows, a.int(10))?;
    let y: Vec<Cx> = (0..rows as usize)
        .map(|i| {
            let s = (0..cols as usize).fold(Cx::default(), |s, j| {
                s.add(op_at(&mat, m as usize, trans, i, j).mul(x[j]))
            });
            alpha.mul(s).add(scaled(beta, y[i]))
        })
        .collect();
    a.set_vector(9, a.int(10), &y)
}

/// geam (transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc):
/// C = alpha op(A) + beta op(B); an operand whose scalar is zero is not read (cuBLAS
/// takes NULL for it then).
fn geam<M: CpuMemory>(a: &mut Args<'_, M>) -> ExecResult<()> {
    let (m, n) = (a.int(2), a.int(3));
    if m <= 0 || n <= 0 {
        return Ok(());
    }
    let mut c = vec![Cx::default(); (m * n) as usize];
    for (scalar, op, ptr, ld) in [(4, 0, 5, 6), (7, 1, 8, 9)] {
        let s = a.scalar(scalar)?;
        if s == Cx::default() {
            continue;
        }
        let trans = a.int(op);
        let rows = if trans == 0 { m } else { n };
        let mat = a.matrix(ptr, rows, if trans == 0 { n } else { m }, a.int(ld))?;
        for j in 0..n as usize {
            for i in 0..m as usize {
                let v = &mut c[i + j * m as usize];
                *v = v.add(s.mul(op_at(&mat, rows as usize, trans, i, j)));
            }
        }
    }
    a.set_matrix(10, m, a.int(11), &c)
}

/// dgmm (mode, m, n, A, lda, x, incx, C, ldc): C = A diag(x) (right) or diag(x) A
/// (left).
fn dgmm<M: CpuMemory>(a: &mut Args<'_, M>) -> ExecResult<()> {
    let (mode, m, n) = (a.int(0), a.int(1), a.int(2));
    if m <= 0 || n <= 0 {
        return Ok(());
    }
    let mat = a.matrix(3, m, n, a.int(4))?;
    let x = a.vector(5, if mode == LEFT { m } else { n }, a.int(6))?;
    let c: Vec<Cx> = (0..(m * n) as usize)
        .map(|k| {
            let (i, j) = (k % m as usize, k / m as usize);
            mat[k].mul(x[if mode == LEFT { i } else { j }])
        })
        .collect();
    a.set_matrix(7, m, a.int(8), &c)
}

/// ger/geru/gerc (m, n, alpha, x, incx, y, incy, A, lda): A += alpha x y^T (y^H).
fn ger<M: CpuMemory>(a: &mut Args<'_, M>, conj: bool) -> ExecResult<()> {
    let (m, n) = (a.int(0), a.int(1));
    if m <= 0 || n <= 0 {
        return Ok(());
    }
    let alpha = a.scalar(2)?;
    let x = a.vector(3, m, a.int(4))?;
    let y = a.vector(5, n, a.int(6))?;
    let lda = a.int(8);
    let mut mat = a.matrix(7, m, n, lda)?;
    for j in 0..n as usize {
        let yj = if conj { y[j].conj() } else { y[j] };
        for i in 0..m as usize {
            let v = &mut mat[i + j * m as usize];
            *v = v.add(alpha.mul(x[i]).mul(yj));
        }
    }
    a.set_matrix(7, m, lda, &mat)
}

/// The triangle `uplo` of an `n x n` matrix as a full triangular matrix (zeros
/// elsewhere, ones on a unit diagonal).
fn triangle(mat: &[Cx], n: usize, uplo: i64, diag: i64) -> Vec<Cx> {
    let mut t = vec![Cx::default(); n * n];
    for c in 0..n {
        for r in 0..n {
            let stored = if uplo == LOWER { r >= c } else { r <= c };
            if r == c && diag == UNIT {
                t[r + c * n] = Cx::real(1.0);
            } else if stored {
                t[r + c * n] = mat[r + c * n];
            }
        }
    }
    t
}

/// trsv (uplo, trans, diag, n, A, lda, x, incx): x = op(A)^-1 x.
fn trsv<M: CpuMemory>(a: &mut Args<'_, M>) -> ExecResult<()> {
    let (uplo, trans, diag, n) = (a.int(0), a.int(1), a.int(2), a.int(3));
    if n <= 0 {
        return Ok(());
    }
    let n_ = n as usize;
    let t = triangle(&a.matrix(4, n, n, a.int(5))?, n_, uplo, diag);
    let m = |r: usize, c: usize| op_at(&t, n_, trans, r, c);
    let incx = a.int(7);
    let mut x = a.vector(6, n, incx)?;
    // op(A) is lower triangular for (lower, N) and (upper, T/C): solve forwards.
    let forward = (uplo == LOWER) == (trans == 0);
    let order: Vec<usize> = if forward {
        (0..n_).collect()
    } else {
        (0..n_).rev().collect()
    };
    for (done, &i) in order.iter().enumerate() {
        let s = order[..done]
            .iter()
            .fold(x[i], |s, &j| s.sub(m(i, j).mul(x[j])));
        x[i] = s.div(m(i, i));
    }
    a.set_vector(6, incx, &x)
}

/// The full symmetric (Hermitian) matrix whose triangle `uplo` is stored.
fn symmetric(mat: &[Cx], n: usize, uplo: i64, hermitian: bool) -> Vec<Cx> {
    let mut s = vec![Cx::default(); n * n];
    for c in 0..n {
        for r in 0..n {
            let stored = if uplo == LOWER { r >= c } else { r <= c };
            let v = if stored {
                mat[r + c * n]
            } else {
                mat[c + r * n]
            };
            s[r + c * n] = match (hermitian, stored, r == c) {
                (true, _, true) => Cx::real(v.re),
                (true, false, false) => v.conj(),
                _ => v,
            };
        }
    }
    s
}

/// symm/hemm (side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc).
fn symm<M: CpuMemory>(a: &mut Args<'_, M>, hermitian: bool) -> ExecResult<()> {
    let (side, uplo, m, n) = (a.int(0), a.int(1), a.int(2), a.int(3));
    if m <= 0 || n <= 0 {
        return Ok(());
    }
    let (alpha, beta) = (a.scalar(4)?, a.scalar(9)?);
    let ka = if side == LEFT { m } else { n } as usize;
    let s = symmetric(
        &a.matrix(5, ka as i64, ka as i64, a.int(6))?,
        ka,
        uplo,
        hermitian,
    );
    let b = a.matrix(7, m, n, a.int(8))?;
    let ldc = a.int(11);
    let mut c = a.matrix(10, m, n, ldc)?;
    let (m_, n_) = (m as usize, n as usize);
    for j in 0..n_ {
        for i in 0..m_ {
            let sum = (0..ka).fold(Cx::default(), |acc, l| {
                acc.add(if side == LEFT {
                    s[i + l * ka].mul(b[l + j * m_])
                } else {
                    b[i + l * m_].mul(s[l + j * ka])
                })
            });
            c[i + j * m_] = alpha.mul(sum).add(scaled(beta, c[i + j * m_]));
        }
    }
    a.set_matrix(10, m, ldc, &c)
}

/// syrk/herk (uplo, trans, n, k, alpha, A, lda, beta, C, ldc): the triangle `uplo`
/// of C = alpha op(A) op(A)^T (^H) + beta C.
fn syrk<M: CpuMemory>(a: &mut Args<'_, M>, hermitian: bool) -> ExecResult<()> {
    let (uplo, trans, n, k) = (a.int(0), a.int(1), a.int(2), a.int(3));
    if n <= 0 {
        return Ok(());
    }
    let (alpha, beta) = (a.scalar(4)?, a.scalar(7)?);
    let (ar, ac) = if trans == 0 { (n, k) } else { (k, n) };
    let mat = a.matrix(5, ar, ac, a.int(6))?;
    let ldc = a.int(9);
    let mut c = a.matrix(8, n, n, ldc)?;
    let (n_, k_) = (n as usize, k.max(0) as usize);
    // op(A) as n x k: A, A^T, or for herk's C, A^H.
    let p = |i: usize, l: usize| op_at(&mat, ar as usize, trans, i, l);
    for j in 0..n_ {
        for i in 0..n_ {
            if (uplo == LOWER && i < j) || (uplo != LOWER && i > j) {
                continue;
            }
            let sum = (0..k_).fold(Cx::default(), |acc, l| {
                let pj = if hermitian { p(j, l).conj() } else { p(j, l) };
                acc.add(p(i, l).mul(pj))
            });
            let mut v = alpha.mul(sum).add(scaled(beta, c[i + j * n_]));
            if hermitian && i == j {
                v.im = 0.0;
            }
            c[i + j * n_] = v;
        }
    }
    a.set_matrix(8, n, ldc, &c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use vmcuda_wire::blas::POINTER_MODE_HOST;
    use vmcuda_wire::blas_table::BlasArg;

    /// Device memory as separate buffers at fixed addresses.
    #[derive(Default)]
    struct Mem(BTreeMap<u64, Vec<u8>>);

    impl CpuMemory for Mem {
        fn read(&self, ptr: DevicePtr, len: u64) -> ExecResult<Vec<u8>> {
            let b = self.0.get(&ptr).ok_or(CudaStatus::ErrorInvalidValue)?;
            Ok(b[..len as usize].to_vec())
        }
        fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> ExecResult<()> {
            let b = self.0.get_mut(&ptr).ok_or(CudaStatus::ErrorInvalidValue)?;
            b[..bytes.len()].copy_from_slice(bytes);
            Ok(())
        }
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn to_f64s(b: &[u8]) -> Vec<f64> {
        b.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Validate `args` as the session does and make the executor's call of it.
    fn call(f: BlasFn, args: Vec<BlasArg>) -> TableCall {
        let extents = f.validate(&args, POINTER_MODE_HOST).unwrap();
        let args = args
            .into_iter()
            .map(|a| match a {
                BlasArg::Int(v) => ExecArg::Int(v.into()),
                BlasArg::Long(v) => ExecArg::Int(v),
                BlasArg::Device(p) => ExecArg::Device(p),
                BlasArg::HostIn(v) | BlasArg::HostInOut(v) => ExecArg::Host(v),
                BlasArg::HostOut(n) => ExecArg::Host(vec![0; n as usize]),
            })
            .collect();
        TableCall {
            stream: 0,
            math_mode: 0,
            pointer_mode: POINTER_MODE_HOST,
            function: f,
            args,
            extents,
        }
    }

    use BlasArg::{Device as D, HostIn, HostOut, Int};

    #[test]
    fn level1_with_negative_and_zero_increments() {
        let mut mem = Mem::default();
        mem.0.insert(0x100, f64s(&[1., 2., 3.]));
        mem.0.insert(0x200, f64s(&[10., 0., 20., 0., 30.]));
        // y (stride -2: 30, 20, 10 for k = 0, 1, 2) += 2 x.
        let mut c = call(
            BlasFn::cublasDaxpy_v2,
            vec![
                Int(3),
                HostIn(f64s(&[2.])),
                D(0x100),
                Int(1),
                D(0x200),
                Int(-2),
            ],
        );
        cpu_blas_call(&mut mem, &mut c).unwrap();
        assert_eq!(to_f64s(&mem.0[&0x200]), [16., 0., 24., 0., 32.]);
        let mut c = call(
            BlasFn::cublasDdot_v2,
            vec![Int(3), D(0x100), Int(1), D(0x100), Int(1), HostOut(8)],
        );
        cpu_blas_call(&mut mem, &mut c).unwrap();
        assert_eq!(c.args[5], ExecArg::Host(f64s(&[14.])));
        let mut c = call(
            BlasFn::cublasIdamax_v2,
            vec![Int(5), D(0x200), Int(1), HostOut(4)],
        );
        cpu_blas_call(&mut mem, &mut c).unwrap();
        assert_eq!(c.args[3], ExecArg::Host(5i32.to_le_bytes().to_vec()));
    }

    #[test]
    fn trsv_solves_what_a_triangular_product_made() {
        let mut mem = Mem::default();
        // Upper A = [2 1; 0 4] (column-major, junk in the unused lower corner).
        mem.0.insert(0x100, f64s(&[2., 99., 1., 4.]));
        mem.0.insert(0x200, f64s(&[4., 8.])); // A * [1, 2]
        let mut c = call(
            BlasFn::cublasDtrsv_v2,
            vec![
                Int(1),
                Int(0),
                Int(0),
                Int(2),
                D(0x100),
                Int(2),
                D(0x200),
                Int(1),
            ],
        );
        cpu_blas_call(&mut mem, &mut c).unwrap();
        assert_eq!(to_f64s(&mem.0[&0x200]), [1., 2.]);
    }

    #[test]
    fn unsupported_families_are_not_supported() {
        let mut mem = Mem::default();
        let mut c = call(
            BlasFn::cublasDrotm_v2,
            vec![Int(0), D(1), Int(1), D(2), Int(1), HostIn(f64s(&[0.; 5]))],
        );
        assert_eq!(
            cpu_blas_call(&mut mem, &mut c),
            Err(CudaStatus::ErrorNotSupported)
        );
    }
}
