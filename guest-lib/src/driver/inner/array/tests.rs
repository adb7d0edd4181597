use super::batch::{batch_parms, OPERAND_POINTER};
use super::*;
use crate::abi::runtime::Extent;

#[test]
fn batch_ops_have_cudas_layout_and_become_3d_copies() {
    // cudaMemcpy3DOperand is 40 bytes (a type, then a union of 32), the op 112.
    assert_eq!(std::mem::size_of::<Memcpy3DOperand>(), 40);
    assert_eq!(std::mem::size_of::<Memcpy3DBatchOp>(), 112);
    let pointer = |ptr: usize, row: usize, layer: usize| Memcpy3DOperand {
        kind: OPERAND_POINTER,
        op: [ptr, row, layer, 0],
    };
    let mut op = Memcpy3DBatchOp {
        src: pointer(0x1000, 0, 0),
        dst: pointer(0x9000, 40, 7),
        extent: Extent {
            width: 32,
            height: 5,
            depth: 2,
        },
        src_access_order: 1,
        flags: 0,
    };
    // Between pointers an element is a byte; a length of 0 is the copy's own.
    let p = batch_parms(&op).unwrap();
    assert_eq!((p.src_ptr.pitch, p.src_ptr.ysize), (32, 5));
    assert_eq!((p.dst_ptr.pitch, p.dst_ptr.ysize), (40, 7));
    assert_eq!((p.extent.width, p.kind), (32, 4));
    // Rows shorter than the copy, an empty extent, an unknown access order or
    // operand type: refused.
    op.dst = pointer(0x9000, 31, 0);
    assert!(batch_parms(&op).is_err());
    op.dst = pointer(0x9000, 0, 0);
    for bad in [
        Memcpy3DBatchOp {
            extent: Extent {
                width: 0,
                ..op.extent
            },
            ..op
        },
        Memcpy3DBatchOp {
            src_access_order: 0,
            ..op
        },
        Memcpy3DBatchOp {
            src: Memcpy3DOperand { kind: 9, ..op.src },
            ..op
        },
    ] {
        assert_eq!(batch_parms(&bad).err(), Some(CudaStatus::ErrorInvalidValue));
    }
}

#[test]
fn channel_descriptors_name_the_drivers_formats() {
    let float4 = ChannelFormatDesc {
        x: 32,
        y: 32,
        z: 32,
        w: 32,
        kind: KIND_FLOAT,
    };
    assert_eq!(float4.format(), Ok((format::FLOAT, 4)));
    assert_eq!(ChannelFormatDesc::of(format::FLOAT, 4), float4);
    let uchar1 = ChannelFormatDesc::of(format::UNSIGNED_INT8, 1);
    assert_eq!(uchar1.format(), Ok((format::UNSIGNED_INT8, 1)));
    let three = ChannelFormatDesc { w: 0, ..float4 };
    assert!(three.format().is_err());
    let gap = ChannelFormatDesc { y: 0, ..float4 };
    assert!(gap.format().is_err());
}

#[test]
fn linear_copies_split_into_rows() {
    assert_eq!(linear_pieces(0, 0, 100, 100).unwrap(), vec![(0, 0, 100, 1)]);
    assert_eq!(
        linear_pieces(10, 2, 300, 100).unwrap(),
        vec![(10, 2, 90, 1), (0, 3, 100, 2), (0, 5, 10, 1)]
    );
    assert_eq!(linear_pieces(10, 0, 20, 100).unwrap(), vec![(10, 0, 20, 1)]);
    assert!(linear_pieces(100, 0, 1, 100).is_err());
}
