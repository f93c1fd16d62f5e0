//! Placeholder; see watcher-example/README.md.
fn main() {}
