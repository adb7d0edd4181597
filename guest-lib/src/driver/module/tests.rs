use super::launch::checked_here;
use super::*;
use vmcuda_wire::module::FuncAttributes;

fn attribute(id: u32, words: &[u32]) -> LaunchAttribute {
    let mut value = vec![0u8; 64];
    for (i, w) in words.iter().enumerate() {
        value[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    LaunchAttribute { id, value }
}

fn sm90() -> FuncAttributes {
    FuncAttributes {
        binary_version: 90,
        ..FuncAttributes::default()
    }
}

#[test]
fn the_loading_mode_is_lazy_unless_the_environment_asks_for_eager() {
    use std::ffi::OsStr;
    assert_eq!(loading_mode(None), CU_MODULE_LAZY_LOADING);
    assert_eq!(
        loading_mode(Some(OsStr::new("LAZY"))),
        CU_MODULE_LAZY_LOADING
    );
    assert_eq!(
        loading_mode(Some(OsStr::new("EAGER"))),
        CU_MODULE_EAGER_LOADING
    );
}

#[test]
fn launches_with_attributes_the_guest_can_check_go_without_a_reply() {
    let f = sm90();
    assert!(checked_here(&attribute(0, &[]), &f));
    assert!(checked_here(&attribute(4, &[1, 1, 1]), &f));
    assert!(checked_here(&attribute(6, &[1]), &f));
    assert!(checked_here(&attribute(5, &[2]), &f));
    assert!(checked_here(&attribute(10, &[1]), &f));
}

#[test]
fn attributes_only_the_driver_can_judge_wait_for_its_answer() {
    let f = sm90();
    // The driver takes a synchronization policy for streams only.
    assert!(
        !checked_here(&attribute(3, &[1]), &f),
        "a stream's attribute"
    );
    // Out of their enums' ranges: the driver's CUDA_ERROR_INVALID_VALUE, at once.
    assert!(!checked_here(&attribute(5, &[3]), &f));
    assert!(!checked_here(&attribute(10, &[2]), &f));
    // Clusters of several blocks, whose fit the GPU decides.
    assert!(!checked_here(&attribute(4, &[2, 1, 1]), &f));
    // A cluster before sm_90, or on a kernel that fixes its own.
    let old = FuncAttributes {
        binary_version: 80,
        ..FuncAttributes::default()
    };
    assert!(!checked_here(&attribute(4, &[1, 1, 1]), &old));
    let fixed = FuncAttributes {
        required_cluster_width: 2,
        ..sm90()
    };
    assert!(!checked_here(&attribute(4, &[1, 1, 1]), &fixed));
    // Cooperative launches, access policy windows, events, priorities: the host's.
    for id in [1, 2, 7, 8, 12] {
        assert!(!checked_here(&attribute(id, &[1]), &f), "attribute {id}");
    }
    // A value too short to read (of an attribute whose full value would do).
    let short = LaunchAttribute {
        id: 5,
        value: vec![1],
    };
    assert!(!checked_here(&short, &f));
}
