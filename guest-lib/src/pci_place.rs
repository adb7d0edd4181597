//! Where a device sits on the guest's PCI bus, as the driver and NVML answer it
//! (`CU_DEVICE_ATTRIBUTE_PCI_*`, `cuDeviceGetPCIBusId`, `nvmlDeviceGetPciInfo`).
//!
//! The host's GPU has no PCI function in the guest. Programs that read the guest's
//! `/sys` for the bus id the driver gives cope with a bus id that is not there: NCCL
//! (its topology detection, `ncclTopoGetXmlFromSys`) then takes the device's vendor
//! and link from NVML and attaches it to the CPU. A bus id that names *another* device
//! of the guest misleads them: inside a VM the host's address is often taken (the
//! test double's `0000:00:00.0` is every guest's host bridge; a host GPU at
//! `0000:01:00.0` meets a q35 guest's first device behind a root port), and NCCL,
//! reading that device's class from `/sys`, fails its communicator's initialisation
//! ("Attribute class of node gpu not found" on a bridge).
//!
//! So the guest keeps the host's address unless its own `/sys` has a different device
//! there (one that is not an NVIDIA display controller: on the GPU's own host, the
//! address is the GPU itself); then the device is shown at the same bus and device
//! numbers in a PCI domain the guest does not have, the first free from
//! [`FIRST_DOMAIN`], where nothing in `/sys` can be confused with it.

use std::collections::BTreeSet;
use std::path::Path;

use vmcuda_wire::device::DeviceProperties;

/// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`, `_PCI_DEVICE_ID`, `_PCI_DOMAIN_ID`.
const ATTR_BUS: u32 = 33;
const ATTR_DEVICE: u32 = 34;
const ATTR_DOMAIN: u32 = 50;

/// The first domain a device moved off a taken address is shown in. Four hex digits,
/// as NCCL's and the driver's bus ids have room for (`DDDD:BB:DD.F`).
pub const FIRST_DOMAIN: u32 = 0x1000;

/// Where the guest's kernel lists its PCI functions.
const GUEST_DEVICES: &str = "/sys/bus/pci/devices";

/// A PCI address: domain, bus, device (function 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl Address {
    /// The name of its directory in `/sys/bus/pci/devices`.
    fn sysfs_name(&self) -> String {
        format!("{:04x}:{:02x}:{:02x}.0", self.domain, self.bus, self.device)
    }
}

/// What `devices` (a `/sys/bus/pci/devices` directory) holds at `at`.
enum Occupant {
    Nothing,
    NvidiaDisplay,
    Other,
}

fn read_hex(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    u32::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

fn occupant(devices: &Path, at: Address) -> Occupant {
    let dir = devices.join(at.sysfs_name());
    if !dir.exists() {
        return Occupant::Nothing;
    }
    const NVIDIA: u32 = 0x10de;
    // Base class 0x03: display controllers (VGA 0x0300, 3D 0x0302).
    match (read_hex(&dir.join("vendor")), read_hex(&dir.join("class"))) {
        (Some(NVIDIA), Some(class)) if class >> 16 == 0x03 => Occupant::NvidiaDisplay,
        _ => Occupant::Other,
    }
}

/// The PCI domains `devices` names (the part of each entry before its first ':').
fn domains_in(devices: &Path) -> BTreeSet<u32> {
    let Ok(entries) = std::fs::read_dir(devices) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            u32::from_str_radix(name.split(':').next()?, 16).ok()
        })
        .collect()
}

/// Where the guest shows a device the host has at `host`, its own PCI functions being
/// those listed in `devices`.
pub fn place(host: Address, devices: &Path) -> Address {
    match occupant(devices, host) {
        Occupant::Nothing | Occupant::NvidiaDisplay => host,
        Occupant::Other => {
            let taken = domains_in(devices);
            let domain = (FIRST_DOMAIN..=0xffff)
                .find(|d| !taken.contains(d))
                .unwrap_or(FIRST_DOMAIN);
            Address { domain, ..host }
        }
    }
}

/// The device's properties as the guest answers them: its PCI address placed by
/// [`place`] over the guest's own `/sys`.
pub fn guest_view(props: &mut DeviceProperties) {
    guest_view_over(props, Path::new(GUEST_DEVICES));
}

fn guest_view_over(props: &mut DeviceProperties, devices: &Path) {
    let (Some(domain), Some(bus), Some(device)) = (
        props.attribute(ATTR_DOMAIN),
        props.attribute(ATTR_BUS),
        props.attribute(ATTR_DEVICE),
    ) else {
        return;
    };
    let (Ok(domain), Ok(bus), Ok(device)) = (
        u32::try_from(domain),
        u32::try_from(bus),
        u32::try_from(device),
    ) else {
        return;
    };
    let shown = place(
        Address {
            domain,
            bus,
            device,
        },
        devices,
    );
    for (attr, value) in &mut props.attributes {
        if *attr == ATTR_DOMAIN {
            // At most 0xffff: fits.
            *value = shown.domain as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/sys/bus/pci/devices` of the given (name, vendor, class) entries, removed
    /// when dropped.
    struct FakeSysfs(std::path::PathBuf);

    impl FakeSysfs {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn fake_sysfs(entries: &[(&str, &str, &str)]) -> FakeSysfs {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = FakeSysfs(std::env::temp_dir().join(format!(
            "vmcuda-pci-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )));
        std::fs::create_dir_all(dir.path()).unwrap();
        for (name, vendor, class) in entries {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        }
        dir
    }

    const BRIDGE: (&str, &str, &str) = ("0000:00:00.0", "0x8086", "0x060000");

    fn at(domain: u32, bus: u32, device: u32) -> Address {
        Address {
            domain,
            bus,
            device,
        }
    }

    #[test]
    fn an_address_the_guest_does_not_have_is_kept() {
        let sys = fake_sysfs(&[BRIDGE, ("0000:00:03.0", "0x1af4", "0x020000")]);
        assert_eq!(place(at(0, 0x1b, 0), sys.path()), at(0, 0x1b, 0));
    }

    #[test]
    fn the_gpu_itself_keeps_its_address() {
        let sys = fake_sysfs(&[BRIDGE, ("0000:1b:00.0", "0x10de", "0x030200")]);
        assert_eq!(place(at(0, 0x1b, 0), sys.path()), at(0, 0x1b, 0));
    }

    #[test]
    fn an_address_another_device_has_moves_to_a_free_domain() {
        // The test double's 0000:00:00.0 is the guest's host bridge.
        let sys = fake_sysfs(&[BRIDGE, ("1000:00:01.0", "0x1af4", "0x010000")]);
        assert_eq!(place(at(0, 0, 0), sys.path()), at(0x1001, 0, 0));
        // A q35 guest's device behind a root port at a host GPU's address.
        let sys = fake_sysfs(&[BRIDGE, ("0000:01:00.0", "0x1af4", "0x020000")]);
        assert_eq!(place(at(0, 1, 0), sys.path()), at(FIRST_DOMAIN, 1, 0));
        // An NVIDIA device that is no GPU (an NVSwitch, a bridge) is another device.
        let sys = fake_sysfs(&[("0000:05:00.0", "0x10de", "0x068000")]);
        assert_eq!(place(at(0, 5, 0), sys.path()), at(FIRST_DOMAIN, 5, 0));
    }

    #[test]
    fn no_sysfs_keeps_the_host_address() {
        let missing = Path::new("/nonexistent/vmcuda/pci");
        assert_eq!(place(at(0, 0, 0), missing), at(0, 0, 0));
    }

    #[test]
    fn the_properties_carry_the_placed_domain() {
        let sys = fake_sysfs(&[BRIDGE]);
        let mut props = DeviceProperties {
            attributes: vec![(ATTR_BUS, 0), (ATTR_DEVICE, 0), (ATTR_DOMAIN, 0), (1, 1024)],
            ..Default::default()
        };
        guest_view_over(&mut props, sys.path());
        assert_eq!(props.attribute(ATTR_DOMAIN), Some(FIRST_DOMAIN as i32));
        assert_eq!(props.attribute(ATTR_BUS), Some(0));
        assert_eq!(props.attribute(1), Some(1024));
    }
}
