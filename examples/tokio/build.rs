//! Puts the folder of the libcudafd.so that cudafd-sys linked into the
//! binary's rpath (DT_RUNPATH), so that it runs without LD_LIBRARY_PATH.
fn main() {
    if let Ok(dir) = std::env::var("DEP_CUDAFD_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
