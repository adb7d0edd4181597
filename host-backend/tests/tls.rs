//! TLS on the daemon's TCP listeners: TLS guests are served, plain ones are told to use
//! TLS (or served, where `require_tls = false`), failed handshakes end only their own
//! connection, and unusable certificates stop the daemon at start.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use vmcuda_wire::op::*;
use vmcuda_wire::tls::testing::TestPki;
use vmcuda_wire::tls::{self, TlsError};
use vmcuda_wire::CudaStatus;

mod common;
use common::*;

const TOKEN: &[u8] = b"tls-test-token-0123456789";

fn config(pki: &TestPki, extra: &str) -> String {
    format!(
        "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}\n\
         [[vm]]\nname = \"remote\"\ntcp = true\ntoken = \"{}\"\n",
        pki.cert.display(),
        pki.key.display(),
        String::from_utf8_lossy(TOKEN)
    )
}

fn connect_tls(
    addr: &str,
    ca: &Path,
    name: &str,
) -> Result<tls::Shared<tls::ClientStream>, TlsError> {
    tls::connect(addr, name, tls::client_config(ca).unwrap())
}

#[test]
fn tls_guests_are_served_and_plain_ones_are_told_to_use_tls() {
    let addr = free_tcp_addr();
    let dir = std::env::temp_dir().join(format!("vmcuda-tls-daemon-{}", std::process::id()));
    let pki = TestPki::new(&dir.join("host"), &["localhost", "127.0.0.1"]);
    let stranger = TestPki::new(&dir.join("stranger"), &["localhost"]);
    let d = Daemon::with_config("tls", Some(&config(&pki, "")), &["--tcp", &addr]);
    drop(connect_tcp(&addr));

    let served = || {
        let mut s = connect_tls(&addr, &pki.ca, "localhost").unwrap();
        let (status, _, _) = hello_with(&mut s, TOKEN);
        assert_eq!(status, CudaStatus::Success);
        send(&mut s, Op::MemAlloc, &MemAlloc { size: 64 }, &[]);
        assert_eq!(reply(&mut s).0, CudaStatus::Success);
    };
    served();

    // TLS does not replace the token.
    let mut s = connect_tls(&addr, &pki.ca, "127.0.0.1").unwrap();
    let (status, _, reason) = hello_with(&mut s, b"");
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    assert!(String::from_utf8_lossy(&reason).contains("need a token"));

    // A plain-TCP guest is told what to do instead, and let go.
    let mut plain = connect_tcp(&addr);
    let (status, _, reason) = hello_with(&mut plain, TOKEN);
    assert_eq!(status, CudaStatus::ErrorNotPermitted);
    let reason = String::from_utf8(reason).unwrap();
    assert!(
        reason.contains("only over TLS") && reason.contains("tls:"),
        "{reason}"
    );
    assert!(closed(&mut plain));

    // A certificate the guest does not trust, or for another name: refused at connect.
    let e = connect_tls(&addr, &stranger.ca, "localhost").unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    let e = connect_tls(&addr, &pki.ca, "gpuhost.example").unwrap_err();
    assert!(e.to_string().contains("not valid for name"), "{e}");

    // Not a guest at all, and a peer that leaves at once.
    let mut junk = connect_tcp(&addr);
    junk.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
        .unwrap();
    assert!(closed(&mut junk));
    drop(connect_tcp(&addr));

    // None of that touched the daemon or other guests.
    served();
    let mut d = d;
    assert!(d.alive());
    std::thread::sleep(Duration::from_millis(200));
    let log = d.log();
    for said in [
        "tls=true",
        "plain TCP to a TLS listener",
        "crossed the network unencrypted",
        "TLS handshake failed",
    ] {
        assert!(log.contains(said), "{said:?} not in the log:\n{log}");
    }
    assert!(
        !log.contains(std::str::from_utf8(TOKEN).unwrap()),
        "tokens never reach the log"
    );
    drop(d);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_require_tls_off_plain_and_tls_guests_share_the_listener() {
    let addr = free_tcp_addr();
    let dir = std::env::temp_dir().join(format!("vmcuda-tls-optional-{}", std::process::id()));
    let pki = TestPki::new(&dir, &["localhost"]);
    let _d = Daemon::with_config(
        "tls-optional",
        Some(&config(&pki, "require_tls = false")),
        &["--tcp", &addr],
    );
    let mut plain = connect_tcp(&addr);
    assert_eq!(hello_with(&mut plain, TOKEN).0, CudaStatus::Success);
    let mut s = connect_tls(&addr, &pki.ca, "localhost").unwrap();
    assert_eq!(hello_with(&mut s, TOKEN).0, CudaStatus::Success);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_certificates_stop_the_daemon_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("vmcuda-tls-badconf-{}", std::process::id()));
    let pki = TestPki::new(&dir.join("a"), &["localhost"]);
    let other = TestPki::new(&dir.join("b"), &["localhost"]);
    let tcp = |cert: &Path, key: &Path| {
        format!(
            "[tcp]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            cert.display(),
            key.display()
        )
    };
    let cases = [
        (tcp(&dir.join("nope.pem"), &pki.key), "nope.pem"),
        (tcp(&pki.cert, &other.key), "is not the private key"),
        (tcp(&pki.cert, &dir.join("nokey.pem")), "nokey.pem"),
        ("[tcp]\nrequire_tls = true\n".into(), "needs tls_cert"),
    ];
    for (config, why) in cases {
        let path = dir.join("host.toml");
        std::fs::write(&path, &config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_vmcuda-host"))
            .args(["serve", "--executor", "host-memory", "--unix"])
            .arg(dir.join("s.sock"))
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{config}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{config}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
