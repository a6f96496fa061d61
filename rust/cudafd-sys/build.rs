//! Finds or builds libcudafd.so (and the simulator, libcudafd_sim.so) and
//! links it.
//!
//! - `CUDAFD_LIB_DIR` set: link the libcudafd.so in that folder (an installed
//!   copy, or the Python package's `cudafd/_lib`). Nothing is built.
//! - Otherwise: build the C sources shipped with this crate (`native/`, with
//!   `include/` beside it) with `make`, into `$OUT_DIR/lib`. Needs `make` and
//!   a C11 compiler (`$CC`, default `cc`); no CUDA toolkit.
//!
//! The folder is passed on as `DEP_CUDAFD_LIB_DIR` to the build scripts of
//! crates that depend on this one directly (a binary's build.rs can put it in
//! its rpath), and compiled in as `cudafd_sys::LIB_DIR`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CUDAFD_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = match env::var_os("CUDAFD_LIB_DIR") {
        Some(dir) if !dir.is_empty() => installed(Path::new(&dir)),
        _ => build(),
    };
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("libcudafd.so").display()
    );
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=cudafd");
    println!("cargo:lib_dir={}", dir.display());
    println!("cargo:rustc-env=CUDAFD_SYS_LIB_DIR={}", dir.display());
}

fn installed(dir: &Path) -> PathBuf {
    match dir.canonicalize() {
        Ok(dir) if dir.join("libcudafd.so").is_file() => dir,
        _ => fail(&format!(
            "CUDAFD_LIB_DIR={} holds no libcudafd.so (build one with `make -C native DEST=<dir>`, \
             or unset CUDAFD_LIB_DIR to build it from this crate's sources)",
            dir.display()
        )),
    }
}

fn build() -> PathBuf {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let native = manifest.join("native");
    if !native.join("Makefile").is_file() {
        fail(&format!(
            "{} is missing: set CUDAFD_LIB_DIR to a folder holding libcudafd.so",
            native.display()
        ));
    }
    println!("cargo:rerun-if-changed={}", native.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("include").display()
    );
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=CFLAGS");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("lib");
    let status = Command::new(env::var_os("MAKE").unwrap_or_else(|| "make".into()))
        .arg("-C")
        .arg(&native)
        .arg(format!("DEST={}", out.display()))
        .arg("all")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!("`make -C {}` failed ({s})", native.display())),
        Err(e) => fail(&format!("could not run make: {e}")),
    }
    out
}

fn fail(message: &str) -> ! {
    eprintln!("cudafd-sys: {message}");
    std::process::exit(1);
}
