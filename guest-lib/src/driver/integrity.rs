//! The driver's answer to the runtime's integrity check (export table `d4082055...`,
//! slot 1): HMAC-MD2 (RFC 2104 over RFC 1319's MD2) of what the driver reports about
//! itself, its process and its devices. NVIDIA's runtime computes the same value from
//! the same driver answers and compares; a wrong answer makes every runtime call fail
//! with `cudaErrorSoftwareValidityNotEstablished`. vmcuda computes it from the guest's
//! own answers, so it is consistent with whatever the host reports.
//!
//! The layout (key, message, the two fixed answers) is what public implementations of
//! this table describe; it must be checked against the real driver on the GPU
//! (`export-tables-probe.sh` recomputes the real driver's answer).

/// RFC 1319's substitution table (the digits of pi).
const PI_SUBST: [u8; 256] = [
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243, 192, 199,
    115, 140, 152, 147, 43, 217, 188, 76, 130, 202, 30, 155, 87, 60, 253, 212, 224, 22, 103, 66,
    111, 24, 138, 23, 229, 18, 190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47,
    238, 122, 169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33, 128, 127, 93,
    154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, 255, 25, 48, 179, 72, 165, 181, 209,
    215, 94, 146, 42, 172, 86, 170, 198, 79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226,
    156, 116, 4, 241, 69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, 27,
    96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81,
    175, 58, 195, 92, 249, 206, 186, 197, 234, 38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205,
    244, 65, 129, 77, 82, 106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
    120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, 242, 239, 183, 14,
    102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49, 68, 80, 180, 143, 237, 31, 26,
    219, 153, 141, 51, 159, 17, 131, 20,
];

/// MD2 (RFC 1319) of `data`.
pub fn md2(data: &[u8]) -> [u8; 16] {
    // Padding: i bytes of value i, 1 <= i <= 16, to a multiple of 16.
    let pad = 16 - data.len() % 16;
    let mut message = data.to_vec();
    message.extend(std::iter::repeat_n(pad as u8, pad));
    // The checksum block, appended.
    let mut checksum = [0u8; 16];
    let mut last = 0u8;
    for block in message.chunks_exact(16) {
        for (c, &m) in checksum.iter_mut().zip(block) {
            *c ^= PI_SUBST[usize::from(m ^ last)];
            last = *c;
        }
    }
    message.extend_from_slice(&checksum);
    let mut x = [0u8; 48];
    for block in message.chunks_exact(16) {
        for j in 0..16 {
            x[16 + j] = block[j];
            x[32 + j] = x[16 + j] ^ x[j];
        }
        let mut t = 0u8;
        for round in 0..18u8 {
            for byte in x.iter_mut() {
                *byte ^= PI_SUBST[usize::from(t)];
                t = *byte;
            }
            t = t.wrapping_add(round);
        }
    }
    let mut digest = [0u8; 16];
    digest.copy_from_slice(&x[..16]);
    digest
}

/// HMAC (RFC 2104) over MD2, whose block is 16 bytes; `key` is one block.
pub fn hmac_md2(key: &[u8; 16], message: &[u8]) -> [u8; 16] {
    let mut inner: Vec<u8> = key.iter().map(|k| k ^ 0x36).collect();
    inner.extend_from_slice(message);
    let mut outer: Vec<u8> = key.iter().map(|k| k ^ 0x5c).collect();
    outer.extend_from_slice(&md2(&inner));
    md2(&outer)
}

/// The integrity check's key.
const KEY: [u8; 16] = [
    0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
];

/// What the driver reports about one device, in the order `cuDeviceGetCount` numbers them.
#[derive(Clone, Copy, Debug)]
pub struct DeviceFacts {
    pub uuid: [u8; 16],
    pub pci_domain: i32,
    pub pci_bus: i32,
    pub pci_device: i32,
}

/// Everything slot 1 hashes besides the devices.
#[derive(Clone, Copy, Debug)]
pub struct CallFacts {
    /// What `cuDriverGetVersion` answers.
    pub driver_version: u32,
    /// The runtime's argument (13000, 13001, 13002 for CUDA 13.0).
    pub version: u32,
    pub pid: u32,
    /// The low 32 bits of `pthread_self()`.
    pub thread: u32,
    /// The addresses of the CUDART_INTERFACE table, the integrity table and slot 1.
    pub cudart_table: u64,
    pub integrity_table: u64,
    pub slot: u64,
    pub unix_seconds: u64,
}

/// The 16 bytes slot 1 writes, as two native words.
pub fn answer(call: &CallFacts, devices: &[DeviceFacts]) -> [u64; 2] {
    match call.version % 10 {
        0 => return [0x3341181c03cb675c, 0x8ed383aa1f4cd1e8],
        1 => return [0x1841181c03cb675c, 0x8ed383aa1f4cd1e8],
        _ => {}
    }
    let mut message = Vec::with_capacity(48 + 28 * devices.len());
    for word in [call.driver_version, call.version, call.pid, call.thread] {
        message.extend_from_slice(&word.to_le_bytes());
    }
    for word in [
        call.cudart_table,
        call.integrity_table,
        call.slot,
        call.unix_seconds,
    ] {
        message.extend_from_slice(&word.to_le_bytes());
    }
    for d in devices {
        message.extend_from_slice(&d.uuid);
        for v in [d.pci_domain, d.pci_bus, d.pci_device] {
            message.extend_from_slice(&v.to_le_bytes());
        }
    }
    let digest = hmac_md2(&KEY, &message);
    let (lo, hi) = digest.split_at(8);
    [
        u64::from_le_bytes(lo.try_into().expect("8 bytes")),
        u64::from_le_bytes(hi.try_into().expect("8 bytes")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 1319, appendix A.5.
    #[test]
    fn md2_gives_the_rfc_test_vectors() {
        for (input, digest) in [
            ("", "8350e5a3e24c153df2275c9f80692773"),
            ("a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"),
            ("abc", "da853b0d3f88d99b30283a69e6ded6bb"),
            ("message digest", "ab4f496bfb2a530b219ff33031fe06b0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "4e8ddff3650292ab5a4108c3aa47940b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "da33def2a42df13975352846c30338cd",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "d5976f79d83d3a0dc9806c3c66f3efd8",
            ),
        ] {
            assert_eq!(hex(&md2(input.as_bytes())), digest, "MD2({input:?})");
        }
    }

    /// HMAC as RFC 2104 defines it, spelled out with the digest above.
    #[test]
    fn hmac_is_md2_of_the_padded_keys() {
        let key = [7u8; 16];
        let mut inner = vec![7 ^ 0x36; 16];
        inner.extend_from_slice(b"what is hashed");
        let mut outer = vec![7 ^ 0x5c; 16];
        outer.extend_from_slice(&md2(&inner));
        assert_eq!(hmac_md2(&key, b"what is hashed"), md2(&outer));
        assert_ne!(
            hmac_md2(&key, b"what is hashed"),
            hmac_md2(&key, b"what is hashed!")
        );
    }

    #[test]
    fn the_answer_depends_on_every_fact() {
        let call = CallFacts {
            driver_version: 13000,
            version: 13002,
            pid: 1234,
            thread: 0x5678,
            cudart_table: 0x1000,
            integrity_table: 0x2000,
            slot: 0x3000,
            unix_seconds: 1_700_000_000,
        };
        let dev = DeviceFacts {
            uuid: [9; 16],
            pci_domain: 0,
            pci_bus: 0x1b,
            pci_device: 0,
        };
        let base = answer(&call, &[dev]);
        assert_eq!(base, answer(&call, &[dev]), "deterministic");
        assert_ne!(base, answer(&CallFacts { pid: 1235, ..call }, &[dev]));
        assert_ne!(
            base,
            answer(
                &CallFacts {
                    slot: 0x3008,
                    ..call
                },
                &[dev]
            )
        );
        assert_ne!(
            base,
            answer(
                &call,
                &[DeviceFacts {
                    pci_bus: 0x1c,
                    ..dev
                }]
            )
        );
        assert_ne!(base, answer(&call, &[]));
        // Versions ending in 0 and 1 have fixed answers.
        let fixed = answer(
            &CallFacts {
                version: 13000,
                ..call
            },
            &[dev],
        );
        assert_eq!(fixed, [0x3341181c03cb675c, 0x8ed383aa1f4cd1e8]);
        let fixed = answer(
            &CallFacts {
                version: 13001,
                ..call
            },
            &[],
        );
        assert_eq!(fixed, [0x1841181c03cb675c, 0x8ed383aa1f4cd1e8]);
    }
}
