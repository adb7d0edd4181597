//! `vmcuda guest-ram-broker`: the guest service behind [`vmcuda_guest::guest_ram`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;

use nix::sys::socket as sock;
use vmcuda_guest::guest_ram::{self, BrokerConfig, HostConnector};
use vmcuda_wire::transport::ServerAddr;

pub fn run(path: &Path, max_area_mib: usize, max_per_user: usize) -> ExitCode {
    match serve(path, max_area_mib, max_per_user) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmcuda guest-ram-broker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: &Path, max_area_mib: usize, max_per_user: usize) -> Result<(), String> {
    // The host it connects to is the guest's own setting, never a process's wish.
    let host = vmcuda_guest::client::servers()
        .map_err(|e| e.to_string())?
        .addrs()
        .iter()
        .find_map(|a| match *a {
            ServerAddr::Vsock { cid, port } => Some((cid, port)),
            _ => None,
        })
        .ok_or("the guest's host is not on vsock: there is no guest RAM to serve")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let listener = guest_ram::seqpacket().map_err(|e| format!("no socket: {e}"))?;
    let addr = sock::UnixAddr::new(path).map_err(|e| format!("{}: {e}", path.display()))?;
    sock::bind(listener.as_raw_fd(), &addr).map_err(|e| format!("{}: {e}", path.display()))?;
    // Every user of the guest may ask; what each gets is bounded below.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    sock::listen(
        &listener,
        sock::Backlog::new(64).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let (cid, port) = host;
    let connect: Box<HostConnector> = Box::new(move || {
        vmcuda_wire::transport::connect_vsock_from_reserved_port(cid, port)
            .map(OwnedFd::from)
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "cannot reach vsock:{cid}:{port} from a reserved port (run the broker as root)"
                ))
            })
    });
    eprintln!(
        "vmcuda guest-ram-broker: serving {} for vsock:{cid}:{port}",
        path.display()
    );
    guest_ram::serve(
        listener,
        BrokerConfig {
            host,
            huge_pages: true,
            max_area: max_area_mib << 20,
            max_per_user,
        },
        connect,
    )
    .map_err(|e| e.to_string())
}
