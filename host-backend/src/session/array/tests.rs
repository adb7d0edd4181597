use vmcuda_wire::array::*;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use crate::executor::array::ExecTexResource;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::policy::Grant;
use crate::session::Session;

const CTX: CallContext = CallContext { device: 0 };
const REFUSED: CudaStatus = CudaStatus::ErrorInvalidValue;

fn session(quota: u64) -> Session {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = Some(quota);
    Session::new(Box::new(exec), grant)
}

fn float_desc(width: u64, height: u64) -> ArrayDesc {
    ArrayDesc {
        width,
        height,
        depth: 0,
        format: format::FLOAT,
        channels: 1,
        flags: 0,
    }
}

#[test]
fn arrays_are_charged_checked_on_both_sides_and_refunded() {
    let mut s = session(1 << 20);
    let free = |s: &mut Session| s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0.free;
    let create = |s: &mut Session, desc| s.array_create(&CTX, ArrayCreate { desc }, &[]);
    let array = create(&mut s, float_desc(64, 32)).unwrap().0.array;
    assert_eq!(
        free(&mut s),
        (1 << 20) - (64 << 10),
        "8 KiB charged as 64 KiB"
    );
    // Over the quota, an unknown format, three channels, unknown flags: refused.
    assert_eq!(
        create(&mut s, float_desc(1024, 1024)).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
    for bad in [
        ArrayDesc {
            format: 0x77,
            ..float_desc(4, 4)
        },
        ArrayDesc {
            channels: 3,
            ..float_desc(4, 4)
        },
        ArrayDesc {
            flags: 0x100,
            ..float_desc(4, 4)
        },
    ] {
        assert_eq!(create(&mut s, bad).unwrap_err(), REFUSED);
    }
    let copy = |src, dst, width, height| Copy3D {
        src,
        dst,
        width,
        height,
        depth: 1,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    let at = |x, y| CopyPlace::Array { array, x, y, z: 0 };
    // The frame's bytes into the array, and back out.
    let bytes: Vec<u8> = (0..=255).cycle().take(256 * 32).collect();
    s.copy_3d(&CTX, copy(CopyPlace::Frame, at(0, 0), 256, 32), &bytes)
        .unwrap();
    let (_, back) = s
        .copy_3d(&CTX, copy(at(0, 0), CopyPlace::Frame, 256, 32), &[])
        .unwrap();
    assert_eq!(back, bytes);
    // Past the array's row or rows, bytes that are not the extent's, another
    // guest's memory, an unknown array: refused.
    let refused = [
        (copy(CopyPlace::Frame, at(4, 0), 256, 1), vec![0u8; 256]),
        (copy(CopyPlace::Frame, at(0, 31), 4, 2), vec![0u8; 8]),
        (copy(CopyPlace::Frame, at(0, 0), 8, 1), vec![0u8; 4]),
    ];
    for (req, data) in refused {
        assert_eq!(s.copy_3d(&CTX, req, &data).unwrap_err(), REFUSED);
    }
    let wild = CopyPlace::Device {
        ptr: 0xdead_0000,
        pitch: 256,
        height: 1,
    };
    assert_eq!(
        s.copy_3d(&CTX, copy(wild, at(0, 0), 256, 1), &[])
            .unwrap_err(),
        REFUSED
    );
    let unknown = CopyPlace::Array {
        array: ArrayHandle(0x5151),
        x: 0,
        y: 0,
        z: 0,
    };
    assert_eq!(
        s.copy_3d(&CTX, copy(unknown, CopyPlace::Frame, 4, 1), &[])
            .unwrap_err(),
        REFUSED
    );
    // A texture over memory that is not the guest's is refused; one over its
    // array is made, and destroyed once.
    let texture = TextureDesc::default();
    let wild = TexObjectCreate {
        resource: TexResource::Linear {
            ptr: 0xdead_0000,
            format: format::FLOAT,
            channels: 1,
            bytes: 64,
        },
        texture,
        view: None,
    };
    assert_eq!(s.tex_object_create(&CTX, wild, &[]).unwrap_err(), REFUSED);
    // A linear texture declared past the end of the guest's allocation (as
    // NVIDIA's convolutionFFT2D sample declares one) is made, cut at that end.
    let p = s
        .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
        .unwrap()
        .0
        .ptr;
    let linear = |bytes| TexResource::Linear {
        ptr: p + 64,
        format: format::FLOAT,
        channels: 2,
        bytes,
    };
    match s.tex_resource(linear(1 << 20)).unwrap() {
        ExecTexResource::Linear { bytes, .. } => assert_eq!(bytes, 4096 - 64),
        other => panic!("{other:?}"),
    }
    match s.tex_resource(linear(256)).unwrap() {
        ExecTexResource::Linear { bytes, .. } => assert_eq!(bytes, 256),
        other => panic!("{other:?}"),
    }
    // Wider than the device's widest linear texture: refused, as the driver does.
    assert_eq!(s.tex_resource(linear(1 << 40)).unwrap_err(), REFUSED);
    let long = TexObjectCreate {
        resource: linear(1 << 20),
        texture,
        view: None,
    };
    let tex = s.tex_object_create(&CTX, long, &[]).unwrap().0.tex;
    s.tex_object_destroy(&CTX, TexObjectDestroy { tex }, &[])
        .unwrap();
    s.mem_free(&CTX, MemFree { ptr: p }, &[]).unwrap();
    let bad_mode = TexObjectCreate {
        resource: TexResource::Array(array),
        texture: TextureDesc {
            address_mode: [9, 0, 0],
            ..texture
        },
        view: None,
    };
    assert_eq!(
        s.tex_object_create(&CTX, bad_mode, &[]).unwrap_err(),
        REFUSED
    );
    let made = TexObjectCreate {
        resource: TexResource::Array(array),
        texture,
        view: None,
    };
    let tex = s.tex_object_create(&CTX, made, &[]).unwrap().0.tex;
    s.tex_object_destroy(&CTX, TexObjectDestroy { tex }, &[])
        .unwrap();
    assert_eq!(
        s.tex_object_destroy(&CTX, TexObjectDestroy { tex }, &[])
            .unwrap_err(),
        REFUSED
    );
    // A mipmapped array's levels are its own.
    let mip = MipmappedArrayCreate {
        desc: float_desc(64, 64),
        levels: 3,
    };
    let mipmap = s.mipmapped_array_create(&CTX, mip, &[]).unwrap().0.mipmap;
    let level = MipmappedArrayGetLevel { mipmap, level: 1 };
    let made = s.mipmapped_array_get_level(&CTX, level, &[]).unwrap().0;
    assert_eq!((made.desc.width, made.desc.height), (32, 32));
    let destroy = ArrayDestroy { array: made.array };
    assert_eq!(s.array_destroy(&CTX, destroy, &[]).unwrap_err(), REFUSED);
    s.mipmapped_array_destroy(&CTX, MipmappedArrayDestroy { mipmap }, &[])
        .unwrap();
    s.array_destroy(&CTX, ArrayDestroy { array }, &[]).unwrap();
    assert_eq!(free(&mut s), 1 << 20, "everything refunded");
}
