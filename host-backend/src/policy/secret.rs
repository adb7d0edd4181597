//! Token bytes that are overwritten when let go, so that a worker, once admitted, keeps
//! no other VM's credential in memory it might leak.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zeroize::Zeroize;

/// A token: its bytes are zeroed (by writes the compiler may not drop) before its
/// memory is freed, and it never prints.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(token: String) -> Secret {
        Secret(token)
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Zero every byte of the buffer, its spare capacity too, and empty it; the
    /// buffer itself stays allocated until the value is dropped.
    fn wipe(&mut self) {
        self.0.zeroize();
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// For the run-time grants file only ([`crate::policy::grants`]), which is kept as a
/// token file is.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Drop` runs leaves every byte the token occupied zero, while the buffer
    /// is still there to be read.
    #[test]
    fn wiping_zeroes_the_tokens_bytes() {
        let mut token = String::with_capacity(64);
        token.push_str("a-token-of-vm-one-that-must-not-linger");
        let (ptr, capacity) = (token.as_ptr(), token.capacity());
        let mut secret = Secret::new(token);
        secret.wipe();
        assert!(secret.is_empty());
        // SAFETY: the buffer is still allocated (wiping keeps it; `secret` owns it
        // until the end of this test) and every byte of it was written.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, capacity) };
        assert!(bytes.iter().all(|&b| b == 0), "{bytes:?}");
    }

    #[test]
    fn a_token_never_prints() {
        let secret = Secret::new("a-token-of-vm-one-that-must-not-linger".into());
        assert_eq!(format!("{secret:?}"), "Secret(..)");
    }
}
