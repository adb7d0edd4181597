//! TLS for the TCP transport: rustls with its `ring` provider, TLS 1.3 only (both ends
//! are ours, so nothing older needs to be spoken).
//!
//! The server authenticates with a certificate; the guest trusts the CA it is given and
//! still presents its token in the hello, so TLS adds confidentiality and host
//! authentication on top of the token's guest authentication.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;

pub use crate::no_sigpipe::NoSigPipe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;

/// The first byte of every TLS connection (a handshake record); no vmcuda frame starts
/// with it (frames start with the magic `VMCU`), so one peeked byte tells them apart.
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Pem {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{0} holds no PEM certificate")]
    NoCertificate(PathBuf),
    #[error("{path}: not a usable certificate: {source}")]
    BadCertificate {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("{key} is not the private key of the certificate in {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{0}")]
    Config(rustls::Error),
    #[error("`{0}` is not a usable TLS server name")]
    BadName(String),
    /// The TCP connection could not be made; nothing TLS was tried.
    #[error("{0}")]
    Connect(io::Error),
    #[error("{}", handshake_reason(.0))]
    Handshake(io::Error),
}

/// A failed handshake's rustls error in its own words (I/O errors wrap it).
fn handshake_reason(e: &io::Error) -> String {
    match rustls_error(e) {
        Some(tls) => tls.to_string(),
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            "the peer closed the connection during the handshake (is it a TLS listener?)".into()
        }
        None if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) =>
        {
            "the peer sent nothing in time (timed out)".into()
        }
        None => e.to_string(),
    }
}

impl TlsError {
    /// The rustls error behind a failed handshake, to explain it further.
    pub fn rustls(&self) -> Option<&rustls::Error> {
        match self {
            TlsError::Handshake(e) => rustls_error(e),
            TlsError::Config(e) => Some(e),
            TlsError::BadCertificate { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file, in order; at least one.
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        path: path.to_path_buf(),
        source,
    })
}

/// The server's configuration: the certificate chain in `cert` (leaf first) and its
/// private key in `key`. A key that does not belong to the certificate is refused here.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = load_certificates(cert)?;
    let key_der = load_private_key(key)?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                TlsError::KeyMismatch {
                    cert: cert.to_path_buf(),
                    key: key.to_path_buf(),
                }
            }
            e => TlsError::Config(e),
        })?;
    Ok(Arc::new(config))
}

/// The client's configuration: trust exactly the CA certificates in `ca`.
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certificates(ca)? {
        roots.add(cert).map_err(|source| TlsError::BadCertificate {
            path: ca.to_path_buf(),
            source,
        })?;
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The roots of trust in a CA file: every certificate in it.
fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certificates(ca)? {
        roots.add(cert).map_err(|source| TlsError::BadCertificate {
            path: ca.to_path_buf(),
            source,
        })?;
    }
    Ok(roots)
}

/// A key that does not belong to its certificate, in the files' names.
fn keys_error(e: rustls::Error, cert: &Path, key: &Path) -> TlsError {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            TlsError::KeyMismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            }
        }
        e => TlsError::Config(e),
    }
}

/// A server that authenticates with `cert`/`key` and admits only clients presenting a
/// certificate the CA in `ca` signed (mutual TLS, for daemons talking to daemons).
pub fn mutual_server_config(
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(ca)?),
        provider(),
    )
    .build()
    .map_err(|e| TlsError::Config(rustls::Error::General(e.to_string())))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certificates(cert)?, load_private_key(key)?)
        .map_err(|e| keys_error(e, cert, key))?;
    Ok(Arc::new(config))
}

/// A client that trusts exactly the CA in `ca` and presents `cert`/`key` to the server
/// (the other side of [`mutual_server_config`]).
pub fn mutual_client_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ClientConfig>, TlsError> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(load_certificates(cert)?, load_private_key(key)?)
        .map_err(|e| keys_error(e, cert, key))?;
    Ok(Arc::new(config))
}

/// Fill `buf` with bytes from the system's secure random source.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), TlsError> {
    provider()
        .secure_random
        .fill(buf)
        .map_err(|_| TlsError::Config(rustls::Error::FailedToGetRandomBytes))
}

/// The host part of `HOST:PORT`, without the brackets of an IPv6 literal.
pub fn host_of(host_port: &str) -> &str {
    let host = host_port
        .rsplit_once(':')
        .map_or(host_port, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A guest's TLS stream to the host.
pub type ClientStream = rustls::StreamOwned<ClientConnection, NoSigPipe<TcpStream>>;
/// A worker's TLS stream to its guest.
pub type ServerStream = rustls::StreamOwned<ServerConnection, NoSigPipe<TcpStream>>;

/// Connect to `host_port` over TCP and complete a TLS handshake with it, verifying its
/// certificate for `server_name`. Certificate problems surface here, not at the first
/// request.
pub fn connect(
    host_port: &str,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> Result<Shared<ClientStream>, TlsError> {
    let name = ServerName::try_from(server_name.to_string())
        .map_err(|_| TlsError::BadName(server_name.into()))?;
    let tcp = TcpStream::connect(host_port).map_err(TlsError::Connect)?;
    // Requests are small and latency-bound.
    tcp.set_nodelay(true).map_err(TlsError::Connect)?;
    let conn = ClientConnection::new(config, name).map_err(TlsError::Config)?;
    handshake(rustls::StreamOwned::new(conn, NoSigPipe(tcp)))
}

/// [`connect`] over a TCP connection already made (one with timeouts set, say).
pub fn connect_over(
    tcp: TcpStream,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> Result<Shared<ClientStream>, TlsError> {
    let name = ServerName::try_from(server_name.to_string())
        .map_err(|_| TlsError::BadName(server_name.into()))?;
    let conn = ClientConnection::new(config, name).map_err(TlsError::Config)?;
    handshake(rustls::StreamOwned::new(conn, NoSigPipe(tcp)))
}

/// The server side of a handshake on an accepted connection.
pub fn accept(tcp: TcpStream, config: Arc<ServerConfig>) -> Result<Shared<ServerStream>, TlsError> {
    let conn = ServerConnection::new(config).map_err(TlsError::Config)?;
    handshake(rustls::StreamOwned::new(conn, NoSigPipe(tcp)))
}

/// [`accept`], but the whole handshake must be done within `limit`, however slowly
/// the peer's bytes come (each read waits at most what is left; the socket's read
/// timeout is left as set for after). A peer that says nothing cannot hold the
/// connection longer.
pub fn accept_within(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    limit: std::time::Duration,
) -> Result<Shared<ServerStream>, TlsError> {
    let deadline = std::time::Instant::now() + limit;
    let after = tcp.read_timeout().map_err(TlsError::Handshake)?;
    let conn = ServerConnection::new(config).map_err(TlsError::Config)?;
    let mut stream = rustls::StreamOwned::new(conn, NoSigPipe(tcp));
    while stream.conn.is_handshaking() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(TlsError::Handshake(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no TLS handshake within {} ms", limit.as_millis()),
            )));
        }
        stream
            .sock
            .0
            .set_read_timeout(Some(left))
            .map_err(TlsError::Handshake)?;
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(TlsError::Handshake)?;
    }
    stream
        .sock
        .0
        .set_read_timeout(after)
        .map_err(TlsError::Handshake)?;
    Ok(Shared::new(stream))
}

fn handshake<C, S>(
    mut stream: rustls::StreamOwned<C, NoSigPipe<TcpStream>>,
) -> Result<Shared<rustls::StreamOwned<C, NoSigPipe<TcpStream>>>, TlsError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(TlsError::Handshake)?;
    }
    Ok(Shared::new(stream))
}

/// One stream shared by a reader half and a writer half, which the transports hand to
/// separate owners (the guest's `BufReader` and its writer, the worker's reader and
/// writer). A TLS connection cannot be split like a socket: both directions update the
/// same session state. The halves never run at the same time (the guest holds its
/// connection lock for a whole exchange; a worker is one thread), so the lock is
/// uncontended and a blocked read never holds up a write that was due.
pub struct Shared<S>(Arc<Mutex<S>>);

impl<S> Shared<S> {
    pub fn new(stream: S) -> Shared<S> {
        Shared(Arc::new(Mutex::new(stream)))
    }

    /// The stream itself, once this is its last half (`None` while another lives).
    pub fn into_inner(self) -> Option<S> {
        let stream = Arc::try_unwrap(self.0).ok()?;
        Some(stream.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, S> {
        // A half that panicked mid-call leaves a connection the protocol will notice
        // is out of step; the lock itself stays usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<S> fmt::Debug for Shared<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Shared(TLS stream)")
    }
}

impl<S: Read> Read for Shared<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.lock().read(buf)
    }
}

impl<S: Write> Write for Shared<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.lock().write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

/// A throwaway CA and a server certificate it signed, generated per test run (no key
/// ever lives in the repository).
#[cfg(any(test, feature = "test-pki"))]
pub mod testing {
    use std::path::{Path, PathBuf};

    pub struct TestPki {
        pub dir: PathBuf,
        pub ca: PathBuf,
        pub cert: PathBuf,
        pub key: PathBuf,
    }

    impl TestPki {
        /// A CA, and a certificate for `names` (DNS names or IP addresses) it signed.
        pub fn new(dir: &Path, names: &[&str]) -> TestPki {
            Self::with_leaves(dir, names, &[]).0
        }

        /// [`TestPki::new`], and more certificates the same CA signed, one for each
        /// `(file stem, names)`: their certificate and key files, in order.
        pub fn with_leaves(
            dir: &Path,
            names: &[&str],
            leaves: &[(&str, &[&str])],
        ) -> (TestPki, Vec<(PathBuf, PathBuf)>) {
            std::fs::create_dir_all(dir).unwrap();
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            // Named after its directory: two test CAs with one name would look like the
            // same issuer with a bad signature rather than an unknown one.
            ca_params.distinguished_name.push(
                rcgen::DnType::CommonName,
                format!("vmcuda test CA {}", dir.display()),
            );
            let ca = ca_params.self_signed(&ca_key).unwrap();
            let key = rcgen::KeyPair::generate().unwrap();
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let cert = rcgen::CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &ca, &ca_key)
                .unwrap();
            let pki = TestPki {
                dir: dir.to_path_buf(),
                ca: dir.join("ca.pem"),
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            };
            std::fs::write(&pki.ca, ca.pem()).unwrap();
            std::fs::write(&pki.cert, cert.pem()).unwrap();
            std::fs::write(&pki.key, key.serialize_pem()).unwrap();
            let mut issued = Vec::new();
            for (stem, names) in leaves {
                let key = rcgen::KeyPair::generate().unwrap();
                let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
                let cert = rcgen::CertificateParams::new(names)
                    .unwrap()
                    .signed_by(&key, &ca, &ca_key)
                    .unwrap();
                let files = (
                    dir.join(format!("{stem}-cert.pem")),
                    dir.join(format!("{stem}-key.pem")),
                );
                std::fs::write(&files.0, cert.pem()).unwrap();
                std::fs::write(&files.1, key.serialize_pem()).unwrap();
                issued.push(files);
            }
            (pki, issued)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TestPki;
    use super::*;
    use std::net::TcpListener;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("vmcuda-tls-{name}-{}", std::process::id()))
    }

    /// Serve one connection on loopback: handshake, then echo what arrives, doubled.
    fn echo_server(
        config: Arc<ServerConfig>,
    ) -> (String, std::thread::JoinHandle<Result<(), TlsError>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let tls = accept(tcp, config)?;
            let (mut reader, mut writer) = (tls.clone(), tls);
            let mut buf = [0u8; 5];
            reader.read_exact(&mut buf).map_err(TlsError::Handshake)?;
            writer.write_all(&buf).map_err(TlsError::Handshake)?;
            writer.write_all(&buf).map_err(TlsError::Handshake)?;
            writer.flush().map_err(TlsError::Handshake)?;
            Ok(())
        });
        (addr, server)
    }

    #[test]
    fn a_client_trusting_the_ca_talks_to_the_server_through_split_halves() {
        let dir = temp("roundtrip");
        let pki = TestPki::new(&dir, &["gpuhost.test"]);
        let (addr, server) = echo_server(server_config(&pki.cert, &pki.key).unwrap());
        let tls = connect(&addr, "gpuhost.test", client_config(&pki.ca).unwrap()).unwrap();
        let (mut reader, mut writer) = (std::io::BufReader::new(tls.clone()), tls);
        writer.write_all(b"hello").unwrap();
        let mut got = [0u8; 10];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hellohello");
        server.join().unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_certificate_from_another_ca_or_for_another_name_is_refused_at_connect() {
        let dir = temp("refused");
        let pki = TestPki::new(&dir.join("right"), &["gpuhost.test"]);
        let other = TestPki::new(&dir.join("other"), &["gpuhost.test"]);
        let config = server_config(&pki.cert, &pki.key).unwrap();

        let (addr, server) = echo_server(config.clone());
        let e = connect(&addr, "gpuhost.test", client_config(&other.ca).unwrap()).unwrap_err();
        assert!(
            matches!(
                e.rustls(),
                Some(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer
                ))
            ),
            "{e}"
        );
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        assert!(
            server.join().unwrap().is_err(),
            "the server saw it fail too"
        );

        let (addr, server) = echo_server(config);
        let e = connect(&addr, "elsewhere.test", client_config(&pki.ca).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not valid for name"), "{e}");
        assert!(server.join().unwrap().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unusable_files_are_refused_with_the_reason() {
        let dir = temp("files");
        let pki = TestPki::new(&dir.join("a"), &["localhost"]);
        let other = TestPki::new(&dir.join("b"), &["localhost"]);
        let missing = dir.join("missing.pem");
        let e = server_config(&missing, &pki.key).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let e = server_config(&pki.cert, &other.key).unwrap_err();
        assert!(
            matches!(e, TlsError::KeyMismatch { .. }),
            "a key of another certificate: {e}"
        );
        // The key file holds no certificate; the certificate file holds no key.
        assert!(matches!(
            load_certificates(&pki.key),
            Err(TlsError::NoCertificate(_))
        ));
        assert!(server_config(&pki.cert, &pki.cert).is_err());
        assert!(client_config(&missing).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn host_names_come_from_host_port() {
        assert_eq!(host_of("gpuhost:7731"), "gpuhost");
        assert_eq!(host_of("10.0.0.1:1"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7731"), "::1");
        assert_eq!(host_of("gpuhost"), "gpuhost");
    }
}
