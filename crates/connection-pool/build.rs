//! Declares the `weir_loom` cfg (set through RUSTFLAGS to model-check the combiner), so normal
//! builds do not warn about an unknown cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(weir_loom)");
}
