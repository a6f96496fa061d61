//! `sim::load_from` with bad paths and libraries, in a process of its own:
//! these need the simulator not loaded yet, and another driver loaded.
use std::path::{Path, PathBuf};

use cudafd::{sim, Error};

/// Whether a file of that path is mapped into this process.
fn mapped(path: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = path.to_str().unwrap();
    maps.lines().any(|l| l.ends_with(path))
}

fn message(e: &Error) -> String {
    match e {
        Error::Cudafd { message, .. } => message.clone(),
        other => panic!("not a cudafd error: {other:?}"),
    }
}

#[test]
fn bad_paths_are_errors_and_a_refused_library_is_not_kept_loaded() {
    let err = sim::load_from(Path::new("/tmp/lib\0cudafd_sim.so")).unwrap_err();
    assert!(message(&err).contains("NUL"), "{err}");
    let err = sim::load_from(Path::new("/nonexistent/libcudafd_sim.so")).unwrap_err();
    assert!(message(&err).contains("cannot load"), "{err}");
    let libcudafd = Path::new(cudafd_sys::LIB_DIR).join("libcudafd.so");
    let err = sim::load_from(&libcudafd).unwrap_err();
    assert!(message(&err).contains("cudafdsim_abi_version"), "{err}");

    // Another copy of the simulator is loaded as the driver first: loading
    // this one then fails at set_driver.
    let original = sim::default_path();
    let dir = std::env::temp_dir().join(format!("cudafd-sim-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy: PathBuf = dir.join("libcudafd_sim.so");
    std::fs::copy(&original, &copy).unwrap();
    cudafd::set_driver(&copy).unwrap();
    cudafd::driver_load().unwrap();
    assert!(!mapped(&original));
    let err = sim::load_from(&original).unwrap_err();
    assert!(message(&err).contains("already loaded"), "{err}");
    assert!(
        !mapped(&original),
        "{} stayed loaded after it was refused",
        original.display()
    );
    // The driver's own path still loads as the simulator.
    let s = sim::load_from(&copy).unwrap();
    drop(s.context(0).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
