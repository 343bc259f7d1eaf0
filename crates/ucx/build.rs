//! Links UCX's `ucp` and `ucs` libraries, and only with the feature `ucx`: without it the crate is
//! empty and the workspace builds with nothing but cargo.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("CARGO_FEATURE_UCX").is_none() {
        return;
    }
    // A UCX installed elsewhere than the system's library directories (e.g. under /opt) says
    // where through its pkg-config file; Debian's is found without it.
    if let Ok(out) = Command::new("pkg-config").args(["--libs-only-L", "ucx"]).output()
        && out.status.success()
    {
        for dir in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = dir.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=ucp");
    println!("cargo:rustc-link-lib=dylib=ucs");
}
