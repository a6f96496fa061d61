//! Links the example against libcudafd.so and records where it lives.
//!
//! CUDAFD_LIBDIR names the folder holding libcudafd.so (default: the Python
//! package's ../../src/cudafd/_lib, where `make -C native` puts it). A relative
//! path is taken from this crate's folder: cargo runs build scripts there.
//! The folder also goes into the binary's rpath (DT_RUNPATH), so the program
//! runs without LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=CUDAFD_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let dir = env::var_os("CUDAFD_LIBDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../../src/cudafd/_lib"));
    let dir = manifest.join(dir); // no-op for an absolute path
    let dir = match dir.canonicalize() {
        Ok(dir) if dir.join("libcudafd.so").is_file() => dir,
        _ => panic!(
            "libcudafd.so not found in {}: build it with `make -C native OUT=<dir>` \
             and set CUDAFD_LIBDIR=<dir>",
            dir.display()
        ),
    };
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("libcudafd.so").display()
    );
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=cudafd");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
