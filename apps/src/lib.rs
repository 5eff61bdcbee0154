//! Applications linked into the unikernel image, one binary each. `cargo run -- --app NAME`
//! boots one of them.
#![no_std]
