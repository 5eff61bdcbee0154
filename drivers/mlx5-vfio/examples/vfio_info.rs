//! Brings a ConnectX function bound to vfio-pci up, prints what the driver learned, and tears
//! it down: `cargo run -p mlx5-vfio --example vfio_info -- [--iova-mode alloc|pa] 0000:3b:00.0`.
//! See README.md.

use mlx5::{Context, ContextConfig};
use mlx5_vfio::{IovaMode, VfioHal};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, bdf) = match args.as_slice() {
        [bdf] => (Ok(IovaMode::Allocated), bdf),
        [flag, mode, bdf] if flag == "--iova-mode" => (mode.parse::<IovaMode>(), bdf),
        _ => {
            eprintln!("usage: vfio_info [--iova-mode alloc|pa] <PCI address, e.g. 0000:3b:00.0>");
            std::process::exit(2);
        }
    };
    let hal = match mode.and_then(|m| VfioHal::open_with(format!("/sys/bus/pci/devices/{bdf}"), m))
    {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{bdf}: {e}");
            std::process::exit(1);
        }
    };
    let ctx = match Context::open(hal, ContextConfig::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bring-up failed: {e}");
            std::process::exit(1);
        }
    };
    let (maj, min, sub) = ctx.fw_version();
    let m = ctx.mac();
    println!("firmware {maj}.{min}.{sub}");
    println!(
        "mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    );
    let c = ctx.caps();
    println!(
        "port_type {} num_ports {} roce {} atomic {} bf {}",
        c.port_type, c.num_ports, c.roce, c.atomic, c.bf
    );
    println!(
        "log_max_qp {} log_max_qp_sz {} log_max_cq {} log_max_cq_sz {} log_max_mkey {} log_max_msg {}",
        c.log_max_qp, c.log_max_qp_sz, c.log_max_cq, c.log_max_cq_sz, c.log_max_mkey, c.log_max_msg
    );
    println!(
        "firmware pages held: {}, commands sent: {}",
        ctx.pages_held(),
        ctx.commands_sent()
    );
    if let Ok((gid, _, ver)) = ctx.query_gid(0) {
        println!("gid[0] {gid:02x?} (RoCE version field {ver})");
    }
    if let Err(e) = ctx.close() {
        eprintln!("teardown: {e}");
        std::process::exit(1);
    }
    println!("torn down");
}
