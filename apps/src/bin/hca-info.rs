//! Finds the first Mellanox function, claims it, and reads the firmware and command-interface
//! revisions from BAR0's initialization segment. Exits 0 when a ConnectX answers with cmdif 5.
#![no_std]
#![no_main]

use kernel::pci::platform;
use kernel::{println, AppContext};
use mlx5_prm::initial_seg;

kernel::entry_point!(main);

/// PCI vendor ID of Mellanox Technologies (pci.ids).
const VENDOR_MELLANOX: u16 = 0x15b3;

fn main(_ctx: &AppContext) -> i32 {
    let Some(f) = platform::functions()
        .iter()
        .find(|f| f.vendor == VENDOR_MELLANOX)
    else {
        println!("hca: no Mellanox function found");
        return 2;
    };
    let f = match platform::claim(f.bdf) {
        Ok(f) => f,
        Err(e) => {
            println!("hca: cannot claim {}: {e:?}", f.bdf);
            return 3;
        }
    };
    let Some(bar0) = f
        .bars
        .iter()
        .find(|b| b.index == 0 && b.kind != kernel::pci::BarKind::Io)
    else {
        println!("hca: {} has no memory BAR0", f.bdf);
        return 4;
    };
    // The first 8 bytes of the initialization segment, as big-endian dwords.
    let mut seg = [0u8; 8];
    for (i, chunk) in seg.chunks_mut(4).enumerate() {
        // SAFETY: BAR0 was mapped uncached by `claim`; offsets 0 and 4 are inside it.
        let v = unsafe { core::ptr::read_volatile((bar0.addr + 4 * i as u64) as *const u32) };
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    let field = |f: mlx5_prm::Field| f.get(&seg).unwrap_or(0);
    let (major, minor, sub) = (
        field(initial_seg::FW_REV_MAJOR),
        field(initial_seg::FW_REV_MINOR),
        field(initial_seg::FW_REV_SUBMINOR),
    );
    let cmdif = field(initial_seg::CMD_INTERFACE_REV);
    println!(
        "hca: {} {:04x}:{:04x} fw_rev={major}.{minor}.{sub} cmdif_rev={cmdif}",
        f.bdf, f.vendor, f.device
    );
    if cmdif == 5 {
        0
    } else {
        1
    }
}
