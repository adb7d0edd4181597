//! The CPU reference math of the host-memory test double: what it computes for the
//! cuBLAS GEMMs ([`gemm`]), the cuBLASLt matmuls ([`matmul`]) and a representative
//! subset of the table functions ([`table`]), so that forwarding can be tested end to
//! end without a GPU. It is never a GPU result.
//!
//! Every element and scalar is computed in double precision ([`Cx`]); this module
//! holds the numbers and the element loads and stores all three share.

use vmcuda_wire::blas::data_type;

pub mod gemm;
pub mod matmul;
pub mod table;

/// A complex number in double precision: every element and scalar of the reference
/// GEMM is computed in it (reals have `im == 0`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Cx {
    pub re: f64,
    pub im: f64,
}

impl Cx {
    pub fn real(re: f64) -> Cx {
        Cx { re, im: 0.0 }
    }
    pub fn add(self, o: Cx) -> Cx {
        Cx {
            re: self.re + o.re,
            im: self.im + o.im,
        }
    }
    pub fn sub(self, o: Cx) -> Cx {
        Cx {
            re: self.re - o.re,
            im: self.im - o.im,
        }
    }
    pub fn mul(self, o: Cx) -> Cx {
        Cx {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }
    pub fn conj(self) -> Cx {
        Cx {
            re: self.re,
            im: -self.im,
        }
    }
    pub fn div(self, o: Cx) -> Cx {
        let d = o.re * o.re + o.im * o.im;
        let n = self.mul(o.conj());
        Cx {
            re: n.re / d,
            im: n.im / d,
        }
    }
}

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let frac = (h & 0x3ff) as f32;
    sign * match exp {
        0 => frac * 2f32.powi(-24),
        31 if frac == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + frac / 1024.0) * 2f32.powi(e as i32 - 15),
    }
}

/// f32 to IEEE half, rounding to nearest even.
pub fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if f.is_nan() {
        return sign | 0x7e00;
    }
    let a = f.abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    if a < 2f32.powi(-24) * 0.5 {
        return sign;
    }
    // Scale so the half's last mantissa bit is worth 1, then round to an integer.
    let e = a.log2().floor().max(-14.0) as i32;
    let unit = 2f32.powi(e - 10);
    let q = (a / unit).round_ties_even() as u32; // 1024..=2048 for normals
    let (e, q) = if q >= 2048 { (e + 1, q / 2) } else { (e, q) };
    if q < 1024 {
        return sign | q as u16; // subnormal
    }
    sign | (((e + 15) as u16) << 10) | (q as u16 & 0x3ff)
}

fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

fn f32_to_bf16(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7fc0;
    }
    let bits = f.to_bits();
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    b[..N].try_into().expect("element size checked")
}

/// One element of type `t` from its bytes.
pub(crate) fn load(t: i32, b: &[u8]) -> Cx {
    use data_type as d;
    match t {
        d::R_32F => Cx::real(f32::from_le_bytes(le(b)) as f64),
        d::R_64F => Cx::real(f64::from_le_bytes(le(b))),
        d::R_16F => Cx::real(f16_to_f32(u16::from_le_bytes(le(b))) as f64),
        d::R_16BF => Cx::real(bf16_to_f32(u16::from_le_bytes(le(b))) as f64),
        d::R_8I => Cx::real(b[0] as i8 as f64),
        d::R_8U => Cx::real(b[0] as f64),
        d::R_32I => Cx::real(i32::from_le_bytes(le(b)) as f64),
        d::C_32F => Cx {
            re: f32::from_le_bytes(le(b)) as f64,
            im: f32::from_le_bytes(le(&b[4..])) as f64,
        },
        d::C_64F => Cx {
            re: f64::from_le_bytes(le(b)),
            im: f64::from_le_bytes(le(&b[8..])),
        },
        _ => Cx::default(),
    }
}

pub(crate) fn store(t: i32, v: Cx, b: &mut [u8]) {
    use data_type as d;
    match t {
        d::R_32F => b[..4].copy_from_slice(&(v.re as f32).to_le_bytes()),
        d::R_64F => b[..8].copy_from_slice(&v.re.to_le_bytes()),
        d::R_16F => b[..2].copy_from_slice(&f32_to_f16(v.re as f32).to_le_bytes()),
        d::R_16BF => b[..2].copy_from_slice(&f32_to_bf16(v.re as f32).to_le_bytes()),
        d::R_32I => b[..4].copy_from_slice(&(v.re as i32).to_le_bytes()),
        d::C_32F => {
            b[..4].copy_from_slice(&(v.re as f32).to_le_bytes());
            b[4..8].copy_from_slice(&(v.im as f32).to_le_bytes());
        }
        d::C_64F => {
            b[..8].copy_from_slice(&v.re.to_le_bytes());
            b[8..16].copy_from_slice(&v.im.to_le_bytes());
        }
        _ => {}
    }
}
