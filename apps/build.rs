// The image's memory layout: every app binary links with the workspace's linker script.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let script = std::path::Path::new(&dir).join("../linker.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-T{}", script.display());
    }
}
