//! `cut-proxy LISTEN TARGET EVERY_MS`: relay Unix connections from LISTEN to the
//! daemon's socket TARGET, cutting every one of them every EVERY_MS milliseconds (the
//! GPU runs of tests/gpu/run-reconnect.sh). `cut-proxy tcp TARGET EVERY_MS` relays TCP
//! (a `tls:` or `tcp:` guest's) from a loopback port it prints first to the daemon's
//! TCP listener TARGET (HOST:PORT). Prints one line per cut.

use std::path::Path;
use std::time::Duration;

use vmcuda_tests::cut_proxy::CutProxy;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: cut-proxy LISTEN TARGET EVERY_MS | cut-proxy tcp HOST:PORT EVERY_MS");
        std::process::exit(2);
    }
    let every: u64 = args[3].parse().expect("EVERY_MS is a number");
    let proxy = if args[1] == "tcp" {
        CutProxy::start_tcp(&args[2])
    } else {
        CutProxy::start(Path::new(&args[1]), Path::new(&args[2]))
    }
    .expect("cannot listen");
    println!("listening on {}", proxy.address);
    loop {
        std::thread::sleep(Duration::from_millis(every));
        let n = proxy.cut();
        if n > 0 {
            println!(
                "cut {n} connection(s); {} relayed so far",
                proxy.connections()
            );
        }
    }
}
