//! A device's UUID: read from the driver, written as nvidia-smi writes it.

use cudarc::driver::{result, sys};

use super::status;
use crate::executor::ExecResult;

/// A device's UUID bytes.
pub(super) fn device_uuid(handle: sys::CUdevice) -> ExecResult<[u8; 16]> {
    let uuid = result::device::get_uuid(handle).map_err(status)?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// A UUID as nvidia-smi writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
