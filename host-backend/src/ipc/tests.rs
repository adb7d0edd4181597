use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, OnceLock};

use vmcuda_wire::CudaStatus;

use super::proto::{Export, Kind, Refusal, Reply, Request, HANDLE_LEN};
use super::{IpcError, IpcLink, Registry};

fn memory(size: u64) -> Export {
    Export {
        kind: Kind::Memory,
        device: 0,
        size,
        handle: [size as u8; HANDLE_LEN],
    }
}

fn token(reply: Reply) -> [u8; 16] {
    match reply {
        Reply::Token(t) => t,
        other => panic!("no token: {other:?}"),
    }
}

#[test]
fn an_export_opens_for_its_vm_only_and_never_for_its_exporter() {
    let r = Registry::new(16);
    let t = token(
        r.serve(1, Some("vm1"), Request::Export(memory(4096)), None)
            .0,
    );
    // Another worker of the VM gets the driver's handle.
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Import(t), None).0,
        Reply::Exported(memory(4096))
    );
    // The exporter itself: what the driver says of a process opening its own handle.
    assert_eq!(
        r.serve(1, Some("vm1"), Request::Import(t), None).0,
        Reply::Refused(Refusal::OwnExport)
    );
    // Another VM's worker is told what a forger is told.
    assert_eq!(
        r.serve(3, Some("vm2"), Request::Import(t), None).0,
        Reply::Refused(Refusal::Unknown)
    );
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Import([0x5a; 16]), None).0,
        Reply::Refused(Refusal::Unknown)
    );
    // Nor may anyone but the exporter withdraw it.
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Withdraw(t), None).0,
        Reply::Refused(Refusal::Unknown)
    );
    assert_eq!(r.exports_of("vm1"), 1);
}

#[test]
fn a_withdrawn_or_orphaned_export_is_gone() {
    let r = Registry::new(16);
    let t = token(r.serve(1, Some("vm1"), Request::Export(memory(1)), None).0);
    assert_eq!(
        r.serve(1, Some("vm1"), Request::Withdraw(t), None).0,
        Reply::Done
    );
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Import(t), None).0,
        Reply::Refused(Refusal::Unknown)
    );
    // A worker that ends takes its exports with it.
    let t = token(r.serve(1, Some("vm1"), Request::Export(memory(2)), None).0);
    r.forget_worker(1);
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Import(t), None).0,
        Reply::Refused(Refusal::Unknown)
    );
    assert_eq!(r.exports_of("vm1"), 0);
}

#[test]
fn a_flood_of_exports_stops_at_the_vms_limit_and_leaves_other_vms_theirs() {
    let r = Registry::new(3);
    let mut tokens = Vec::new();
    for n in 0..3 {
        tokens.push(token(
            r.serve(n, Some("vm1"), Request::Export(memory(n)), None).0,
        ));
    }
    assert_eq!(
        r.serve(9, Some("vm1"), Request::Export(memory(9)), None).0,
        Reply::Refused(Refusal::TooMany)
    );
    // Tokens are drawn afresh for each export.
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 3);
    assert!(matches!(
        r.serve(1, Some("vm2"), Request::Export(memory(1)), None).0,
        Reply::Token(_)
    ));
    // One gone makes room for one more.
    r.forget_worker(0);
    assert!(matches!(
        r.serve(9, Some("vm1"), Request::Export(memory(9)), None).0,
        Reply::Token(_)
    ));
}

#[test]
fn a_worker_not_admitted_is_refused_everything() {
    let r = Registry::new(3);
    for req in [
        Request::Export(memory(1)),
        Request::Import([1; 16]),
        Request::Withdraw([1; 16]),
    ] {
        assert_eq!(
            r.serve(1, None, req, None).0,
            Reply::Refused(Refusal::NotAdmitted)
        );
    }
    assert_eq!(r.exports_of("vm1"), 0);
}

/// Two workers' links over real sockets: the exporter's descriptor reaches the
/// importer, and refusals arrive as the CUDA errors the guest gets.
#[test]
fn links_pass_the_shared_memory_to_the_importer() {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let registry = Arc::new(Registry::new(8));
    let mut links = Vec::new();
    for owner in [1u64, 2] {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let vm = Arc::new(OnceLock::new());
        vm.set("vm1".to_string()).unwrap();
        let r = registry.clone();
        std::thread::spawn(move || r.serve_worker(UnixStream::from(ours), owner, vm));
        links.push(IpcLink::new(theirs));
    }
    let file = std::fs::File::open("/dev/null").unwrap();
    let t = links[0].export(memory(64), Some(file.as_fd())).unwrap();
    let (export, fd) = links[1].import(t).unwrap();
    assert_eq!(export, memory(64));
    assert!(fd.is_some());
    let own = links[0].import(t).unwrap_err();
    assert_eq!(own.status(), CudaStatus::ErrorDeviceUninitialized);
    links[0].withdraw(t).unwrap();
    let stale = links[1].import(t).unwrap_err();
    assert!(matches!(stale, IpcError::Refused(Refusal::Unknown)));
    assert_eq!(stale.status(), CudaStatus::ErrorInvalidValue);
    // The exporter's link closes: its exports go.
    let t = links[0].export(memory(8), None).unwrap();
    drop(links.remove(0));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while registry.exports_of("vm1") != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(links[0].import(t).is_err());
}

/// A pool (its driver descriptor riding along) and a pointer of it (the driver's 64
/// bytes of export data as its handle) are exports like any other: opened by the VM's
/// other workers only, gone once withdrawn, and counted together against the VM's
/// limit.
#[test]
fn pools_and_their_pointers_are_exports_of_their_vm() {
    use std::os::fd::OwnedFd;
    let r = Registry::new(3);
    let pool = Export {
        kind: Kind::Pool,
        device: 0,
        size: 0,
        handle: [0; HANDLE_LEN],
    };
    let pointer = Export {
        kind: Kind::PoolPointer,
        device: 0,
        size: 1 << 20,
        handle: [0x42; HANDLE_LEN],
    };
    let descriptor: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let pool_token = token(
        r.serve(
            1,
            Some("vm1"),
            Request::Export(pool.clone()),
            Some(descriptor),
        )
        .0,
    );
    let pointer_token = token(
        r.serve(1, Some("vm1"), Request::Export(pointer.clone()), None)
            .0,
    );
    let (reply, fd) = r.serve(2, Some("vm1"), Request::Import(pool_token), None);
    assert_eq!(reply, Reply::Exported(pool));
    assert!(fd.is_some(), "the pool's descriptor goes to the importer");
    let (reply, fd) = r.serve(2, Some("vm1"), Request::Import(pointer_token), None);
    assert_eq!(reply, Reply::Exported(pointer.clone()));
    assert!(fd.is_none());
    for t in [pool_token, pointer_token] {
        assert_eq!(
            r.serve(3, Some("vm2"), Request::Import(t), None).0,
            Reply::Refused(Refusal::Unknown),
            "another VM's worker"
        );
    }
    // Flooded: the third export fills the VM's allowance, whatever its kind.
    assert!(matches!(
        r.serve(1, Some("vm1"), Request::Export(pointer.clone()), None)
            .0,
        Reply::Token(_)
    ));
    assert_eq!(
        r.serve(1, Some("vm1"), Request::Export(pointer.clone()), None)
            .0,
        Reply::Refused(Refusal::TooMany)
    );
    // The exporter freed the allocation: its pointer data opens no more.
    assert_eq!(
        r.serve(1, Some("vm1"), Request::Withdraw(pointer_token), None)
            .0,
        Reply::Done
    );
    assert_eq!(
        r.serve(2, Some("vm1"), Request::Import(pointer_token), None)
            .0,
        Reply::Refused(Refusal::Unknown)
    );
    assert_eq!(r.exports_of("vm1"), 2);
}
