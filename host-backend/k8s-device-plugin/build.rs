//! The kubelet's device plugin services (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1)
//! generated from method tables: the messages are written by hand in src/api.rs, so
//! no protoc and no .proto file are needed to build.

use tonic_build::manual::{Builder, Method, Service};

fn method(
    name: &str,
    route: &str,
    input: &str,
    output: &str,
) -> tonic_build::manual::MethodBuilder {
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::api::{input}"))
        .output_type(format!("crate::api::{output}"))
        .codec_path("tonic::codec::ProstCodec")
}

fn main() {
    let registration = Service::builder()
        .name("Registration")
        .package("v1beta1")
        .method(method("register", "Register", "RegisterRequest", "Empty").build())
        .build();
    let device_plugin = Service::builder()
        .name("DevicePlugin")
        .package("v1beta1")
        .method(
            method(
                "get_device_plugin_options",
                "GetDevicePluginOptions",
                "Empty",
                "DevicePluginOptions",
            )
            .build(),
        )
        .method(
            method(
                "list_and_watch",
                "ListAndWatch",
                "Empty",
                "ListAndWatchResponse",
            )
            .server_streaming()
            .build(),
        )
        .method(
            method(
                "get_preferred_allocation",
                "GetPreferredAllocation",
                "PreferredAllocationRequest",
                "PreferredAllocationResponse",
            )
            .build(),
        )
        .method(
            method(
                "allocate",
                "Allocate",
                "AllocateRequest",
                "AllocateResponse",
            )
            .build(),
        )
        .method(
            method(
                "pre_start_container",
                "PreStartContainer",
                "PreStartContainerRequest",
                "PreStartContainerResponse",
            )
            .build(),
        )
        .build();
    Builder::new().compile(&[registration, device_plugin]);
    println!("cargo:rerun-if-changed=build.rs");
}
