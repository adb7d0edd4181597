//! What the guest presents to the host: its TLS settings for `tls:` hosts and its
//! token for the hello.

use std::path::PathBuf;

use vmcuda_wire::tls::{self, TlsError};
use vmcuda_wire::transport::TlsClient;

/// The CA a `tls:` host's certificate must be signed by, when VMCUDA_TLS_CA is not set.
pub const DEFAULT_TLS_CA: &str = "/etc/vmcuda/ca.pem";

/// A `tls:` connection's settings, and where its trusted CAs came from (for messages).
pub struct GuestTls {
    pub client: TlsClient,
    pub ca: PathBuf,
}

impl GuestTls {
    /// Where the trusted CA certificates are read from: `VMCUDA_TLS_CA`, else the default.
    pub fn ca_path() -> PathBuf {
        std::env::var_os("VMCUDA_TLS_CA")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_TLS_CA), PathBuf::from)
    }

    /// Trust the CA certificates in `VMCUDA_TLS_CA` (PEM, default /etc/vmcuda/ca.pem);
    /// expect the host's certificate to name `VMCUDA_TLS_NAME`, else the address's host.
    pub fn from_env() -> Result<GuestTls, TlsError> {
        let ca = Self::ca_path();
        Ok(GuestTls {
            client: TlsClient {
                config: tls::client_config(&ca)?,
                server_name: std::env::var("VMCUDA_TLS_NAME")
                    .ok()
                    .filter(|n| !n.is_empty()),
            },
            ca,
        })
    }

    /// What to do about a certificate this guest would not accept.
    pub fn hint(&self, e: &TlsError) -> String {
        use rustls::{CertificateError, Error};
        match e.rustls() {
            Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
                " (the host's certificate is not signed by a CA in {}; set VMCUDA_TLS_CA)",
                self.ca.display()
            ),
            Some(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => " (set VMCUDA_TLS_NAME to a name the certificate was issued for)".into(),
            _ => String::new(),
        }
    }
}

/// Where the guest keeps its token for TCP hosts when VMCUDA_TOKEN is not set.
pub const DEFAULT_TOKEN_FILE: &str = "/etc/vmcuda/token";

/// A token found for the hello, and where it was found (for `vmcuda doctor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub bytes: Vec<u8>,
    pub source: String,
}

/// The token presented in the hello: `VMCUDA_TOKEN`, else the first line of
/// `VMCUDA_TOKEN_FILE` or /etc/vmcuda/token, else none (vsock hosts know their VMs
/// without one).
pub fn find_token() -> Option<Token> {
    if let Ok(t) = std::env::var("VMCUDA_TOKEN") {
        return Some(Token {
            bytes: t.into_bytes(),
            source: "VMCUDA_TOKEN".into(),
        });
    }
    let file = std::env::var("VMCUDA_TOKEN_FILE").unwrap_or_else(|_| DEFAULT_TOKEN_FILE.into());
    let text = std::fs::read_to_string(&file).ok()?;
    let line = text.lines().next()?;
    Some(Token {
        bytes: line.trim().as_bytes().to_vec(),
        source: file,
    })
}

/// [`find_token`]'s bytes, empty when there is none.
pub fn token() -> Vec<u8> {
    find_token().map(|t| t.bytes).unwrap_or_default()
}
