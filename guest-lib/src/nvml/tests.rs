use super::*;

#[test]
fn the_export_list_names_every_implemented_function() {
    let names: Vec<&str> = (0..).map_while(function_name).collect();
    assert!(names.len() > 400, "{}", names.len());
    for n in [
        "nvmlInit_v2",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetP2PStatus",
    ] {
        assert!(names.contains(&n), "{n}");
    }
}

#[test]
fn state_changes_are_refused_and_readings_not_offered() {
    let names: Vec<&str> = (0..).map_while(function_name).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap() as u32;
    assert_eq!(
        nvml_not_supported(at("nvmlDeviceSetPowerManagementLimit")),
        ERROR_NO_PERMISSION
    );
    assert_eq!(
        nvml_not_supported(at("nvmlDeviceResetGpuLockedClocks")),
        ERROR_NO_PERMISSION
    );
    assert_eq!(
        nvml_not_supported(at("nvmlDeviceGetEncoderUtilization")),
        ERROR_NOT_SUPPORTED
    );
}

#[test]
fn bus_ids_are_written_as_nvml_writes_them() {
    let pci = Pci {
        domain: 0,
        bus: 0x1b,
        device: 0,
    };
    assert_eq!(pci.bus_id(), "00000000:1B:00.0");
    assert_eq!(pci.legacy_bus_id(), "0000:1B:00.0");
    assert_eq!(std::mem::size_of::<PciInfo>(), 68);
    assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
    assert_eq!(std::mem::size_of::<ProcessInfoV1>(), 16);
    assert_eq!(std::mem::size_of::<FieldValue>(), 40);
    assert_eq!(std::mem::size_of::<MemoryV2>(), 40);
}

#[test]
fn calls_before_init_are_refused() {
    let mut n = 0;
    assert_eq!(nvml_device_get_count_v2(&mut n), ERROR_UNINITIALIZED);
    assert_eq!(nvml_shutdown(), ERROR_UNINITIALIZED);
}
