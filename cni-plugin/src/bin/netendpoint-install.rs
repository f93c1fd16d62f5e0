//! Installer placeholder.
fn main() {}
