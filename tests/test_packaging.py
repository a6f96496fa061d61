"""The packages a user installs: the sdist and the wheel, each in a fresh venv.

The sdist is built with the build backend's own hook and the wheels with pip,
offline and without build isolation (the backend, scikit-build-core, comes
from the test extras; the `cmake` it drives from PATH or the same extras).
One wheel is built from the sdist, as ``pip install cudafd-*.tar.gz`` does,
one from the source tree. Each is installed into its own new venv, where the
demo runs on the simulator and a C program is built against the installed
header and library (``cudafd include``, ``cudafd lib``) and run on the
simulator. The commands ``include`` and ``lib`` are also checked in the
environment running the tests.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from cudafd._cli import main as cli_main
from cudafd._cli import paths

ROOT = Path(__file__).resolve().parents[1]
SOURCE_TREE = (ROOT / "pyproject.toml").is_file() and (ROOT / "CMakeLists.txt").is_file()
CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

_can_build = pytest.mark.skipif(
    not (SOURCE_TREE and importlib.util.find_spec("scikit_build_core") and CC),
    reason="needs the source tree, scikit-build-core (pip install '.[test]') and a C compiler",
)


def needs_build(test):
    """Skipped where nothing can be built; a longer limit: the first such test builds all three packages."""
    return _can_build(pytest.mark.timeout(400)(test))

# A C user of the installed package: the header and libcudafd.so from the
# venv, the simulated driver beside it (CUDAFD_DRIVER). One stream, one
# 300 ms kernel, one watch; the fd must stay quiet while the kernel runs and
# become readable with exactly that token, status 0, when it ends.
C_PROGRAM = r"""
#define _GNU_SOURCE
#include <cudafd.h>
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, " (%s)\n", cudafd_last_error()); return 1; } } while (0)

typedef int (*init_fn)(unsigned);
typedef int (*device_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*release_fn)(int);
typedef int (*set_current_fn)(void *);
typedef int (*stream_create_fn)(void **, unsigned);
typedef int (*stream_destroy_fn)(void *);
typedef int (*sim_launch_fn)(void *, uint64_t, int);

int main(void)
{
    CHECK(cudafd_abi_version() == CUDAFD_ABI_VERSION, "ABI %d", cudafd_abi_version());
    CHECK(cudafd_driver_load() == CUDAFD_OK, "driver load");
    void *drv = dlopen(cudafd_driver_path(), RTLD_NOW | RTLD_NOLOAD);
    CHECK(drv != NULL, "the driver %s is not loaded", cudafd_driver_path());
    init_fn cu_init = (init_fn)dlsym(drv, "cuInit");
    device_get_fn device_get = (device_get_fn)dlsym(drv, "cuDeviceGet");
    retain_fn retain = (retain_fn)dlsym(drv, "cuDevicePrimaryCtxRetain");
    release_fn release = (release_fn)dlsym(drv, "cuDevicePrimaryCtxRelease");
    set_current_fn set_current = (set_current_fn)dlsym(drv, "cuCtxSetCurrent");
    stream_create_fn stream_create = (stream_create_fn)dlsym(drv, "cuStreamCreate");
    stream_destroy_fn stream_destroy = (stream_destroy_fn)dlsym(drv, "cuStreamDestroy");
    sim_launch_fn sim_launch = (sim_launch_fn)dlsym(drv, "cudafdsim_launch");
    CHECK(cu_init && device_get && retain && release && set_current && stream_create
          && stream_destroy && sim_launch, "%s lacks an entry point", cudafd_driver_path());

    int dev = -1;
    void *ctx = NULL, *stream = NULL;
    CHECK(cu_init(0) == 0 && device_get(&dev, 0) == 0 && retain(&ctx, dev) == 0
          && set_current(ctx) == 0 && stream_create(&stream, 1) == 0, "driver setup");

    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(CUDAFD_MECH_EVENT, &n) == CUDAFD_OK, "notifier_create");
    CHECK(sim_launch(stream, 300000000u, 0) == 0, "launch");
    uint64_t token = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)stream, &token) == CUDAFD_OK, "watch_stream");
    CHECK(cudafd_notifier_pending(n) == 1, "pending %d", cudafd_notifier_pending(n));

    cudafd_completion out[4];
    CHECK(cudafd_drain(n, out, 4) == 0, "a completion before the kernel ended");
    struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
    CHECK(poll(&p, 1, 20000) == 1 && (p.revents & POLLIN), "the fd never became readable");
    int got = cudafd_drain(n, out, 4);
    CHECK(got == 1 && out[0].token == token && out[0].status == 0, "drained %d", got);
    CHECK(cudafd_notifier_pending(n) == 0 && cudafd_drain(n, out, 4) == 0, "left over");

    cudafd_notifier_destroy(n);
    CHECK(stream_destroy(stream) == 0 && release(dev) == 0, "driver teardown");
    printf("cudafd %s: token %llu completed with status 0\n", cudafd_version(),
           (unsigned long long)token);
    return 0;
}
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that points Python or cudafd at the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("CUDAFD_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def _run(cmd: list[str], *, cwd: Path, timeout: float = 240, **extra: str) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_clean_env(**extra), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _pip_wheel(source: Path, out: Path) -> Path:
    out.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-index", "--no-deps", "--no-build-isolation",
          "-w", out, source], cwd=out, CMAKE_BUILD_PARALLEL_LEVEL="2")
    (wheel,) = out.glob("cudafd-*.whl")
    return wheel


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    """{"sdist", "wheel from sdist", "wheel from tree"}: built once for the module."""
    base = tmp_path_factory.mktemp("packages")
    sdist_dir = base / "sdist"
    sdist_dir.mkdir()
    name = _run([sys.executable, "-c",
                 "import sys, scikit_build_core.build as b; print(b.build_sdist(sys.argv[1]))", sdist_dir],
                cwd=ROOT).strip().splitlines()[-1]
    sdist = sdist_dir / name
    return {
        "sdist": sdist,
        "wheel from sdist": _pip_wheel(sdist, base / "from-sdist"),
        "wheel from tree": _pip_wheel(ROOT, base / "from-tree"),
    }


@needs_build
def test_sdist_holds_what_a_build_needs(packages):
    with tarfile.open(packages["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    must = {"LICENSE", "README.md", "pyproject.toml", "CMakeLists.txt", "include/cudafd.h", "native/Makefile",
            "native/cuda_abi.h", "src/cudafd/__init__.py", "src/cudafd/_core/lib.py", "src/cudafd/_loops/detect.py",
            "src/cudafd/cudafd_spin.ptx"}
    assert must <= names, sorted(must - names)
    for folder in ("native/core", "native/sim"):
        here = {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob("*.[ch]")}
        assert here and here <= names, sorted(here - names)
    assert not [n for n in names if n.endswith(".so") or n.startswith("bench/results/")]


@needs_build
@pytest.mark.parametrize("which", ["wheel from sdist", "wheel from tree"])
def test_wheel_contents_and_tag(packages, which):
    wheel = packages[which]
    assert wheel.name.endswith(".whl") and "-py3-none-linux_" in wheel.name, wheel.name
    info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"{info}/METADATA").decode()
    must = {"cudafd/_lib/libcudafd.so", "cudafd/_lib/libcudafd_sim.so", "cudafd/include/cudafd.h",
            "cudafd/cudafd_spin.ptx", "cudafd/py.typed", "cudafd/_core/notifier.py", "cudafd/_loops/trio_loop.py",
            f"{info}/licenses/LICENSE"}
    assert must <= names, sorted(must - names)
    assert "License-Expression: Apache-2.0" in meta


def _venv_with(wheel: Path, where: Path) -> Path:
    """A new venv holding only this wheel; returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent)
    python = where / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", "--no-deps", wheel],
         cwd=where.parent)
    return python


@needs_build
@pytest.mark.parametrize("which", ["wheel from sdist", "wheel from tree"])
def test_installed_package_runs_the_demo_and_a_c_program(packages, which, tmp_path):
    venv = (tmp_path / "venv").resolve()
    python = _venv_with(packages[which], venv)
    work = tmp_path / "work"  # not the source tree: nothing there can be imported by accident
    work.mkdir()

    where = _run([python, "-c", "import cudafd, cudafd._core.lib as l; print(cudafd.__file__); print(l.candidate_paths()[0])"],
                 cwd=work).split()
    assert all(Path(p).resolve().is_relative_to(venv) for p in where), where

    out = _run([python, "-m", "cudafd", "demo", "--sim", "--waits", "200", "--streams", "4"], cwd=work, timeout=120)
    assert "simulat" in out, out

    include = Path(_run([venv / "bin" / "cudafd", "include"], cwd=work).strip())
    lib = Path(_run([python, "-m", "cudafd", "lib"], cwd=work).strip())
    assert include.is_relative_to(venv) and (include / "cudafd.h").is_file(), include
    assert lib.is_relative_to(venv) and (lib / "libcudafd.so").is_file() and (lib / "libcudafd_sim.so").is_file()

    src = work / "smoke.c"
    src.write_text(C_PROGRAM)
    exe = work / "smoke"
    _run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", include, "-o", exe, src,
          "-L", lib, f"-Wl,-rpath,{lib}", "-lcudafd", "-ldl"], cwd=work)
    out = _run([exe], cwd=work, timeout=60, CUDAFD_DRIVER=str(lib / "libcudafd_sim.so"))
    assert "completed with status 0" in out, out


# ---- `include` and `lib` in the environment running the tests ---------------


def test_include_prints_the_folder_of_the_header(capsys):
    assert cli_main(["include"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert (folder / "cudafd.h").is_file()
    assert "#define CUDAFD_ABI_VERSION" in (folder / "cudafd.h").read_text()


def test_lib_prints_the_folder_of_the_library_in_use(capsys):
    import cudafd._core.lib as lib

    assert cli_main(["lib"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert (folder / "libcudafd.so").is_file()
    assert Path(lib.candidate_paths()[0]).resolve().parent == folder.resolve()


def test_lib_without_a_library_says_so(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAFD_LIBRARY", str(tmp_path / "libcudafd.so"))
    assert paths.lib_dir() is None
    assert cli_main(["lib"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no libcudafd.so" in captured.err and str(tmp_path) in captured.err
