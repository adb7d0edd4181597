//! `test-pki DIR NAME...`: a throwaway CA (DIR/ca.pem) and a server certificate it
//! signed for NAME... (DNS names or IP addresses; DIR/cert.pem, DIR/key.pem), for the GPU
//! runs that need a TLS daemon (tests/gpu/run-reconnect.sh). No key lives in the
//! repository: each run makes its own.

use std::path::Path;

use vmcuda_wire::tls::testing::TestPki;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: test-pki DIR NAME...");
        std::process::exit(2);
    }
    let names: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let pki = TestPki::new(Path::new(&args[0]), &names);
    println!(
        "{} {} {}",
        pki.ca.display(),
        pki.cert.display(),
        pki.key.display()
    );
}
