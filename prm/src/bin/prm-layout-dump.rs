//! Prints the PRM layout dump for `shared/checks/prm_layout_check.py`:
//! `cargo run -q -p mlx5-prm --bin prm-layout-dump | python3 ../shared/checks/prm_layout_check.py -`

use std::io::Write;

fn main() {
    let mut s = String::new();
    mlx5_prm::write_layout_json(&mut s).expect("formatting into a String cannot fail");
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(s.as_bytes()).and_then(|_| stdout.flush()) {
        eprintln!("prm-layout-dump: {e}");
        std::process::exit(1);
    }
}
