"""Test configuration: the simulator unless CUDAFD_TEST_DRIVER=real, and a
leak check after every test (every native count back to zero).

Flavors: every loop that is installed (asyncio always, uvloop and trio when
importable) plus "blocking". ``flavor`` runs a body under each; ``loop_flavor``
under each loop, except for bodies that call asyncio's own API (mark them
``asyncio_only``, or list their module in ASYNCIO_ONLY_MODULES): those get the
asyncio loops alone."""
from __future__ import annotations

import importlib.util

import pytest
from support import MECHANISMS, REAL, Device, wait_for_zero_counts

import cudafd

if not REAL:
    cudafd.use_simulator()

ASYNCIO_LOOPS = ["asyncio"]
if importlib.util.find_spec("uvloop"):
    ASYNCIO_LOOPS.append("uvloop")
LOOPS = ASYNCIO_LOOPS + (["trio"] if importlib.util.find_spec("trio") else [])
FLAVORS = LOOPS + ["blocking"]

# Test modules whose bodies use asyncio's API (ensure_future, wait_for, ...):
# their loop_flavor tests run under asyncio and uvloop only.
ASYNCIO_ONLY_MODULES: set[str] = set()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "asyncio_only: the body uses asyncio's API: loop_flavor gives asyncio loops only")


def pytest_generate_tests(metafunc):
    if "loop_flavor" in metafunc.fixturenames:
        asyncio_only = (metafunc.definition.get_closest_marker("asyncio_only") is not None
                        or metafunc.module.__name__ in ASYNCIO_ONLY_MODULES)
        metafunc.parametrize("loop_flavor", ASYNCIO_LOOPS if asyncio_only else LOOPS)


def pytest_report_header(config):
    return f"cudafd driver: {'real CUDA (CUDAFD_TEST_DRIVER=real)' if REAL else 'simulator'}; loops: {FLAVORS}"


def pytest_collection_modifyitems(config, items):
    if REAL:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU: run with CUDAFD_TEST_DRIVER=real on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=FLAVORS)
def flavor(request):
    return request.param


@pytest.fixture(params=MECHANISMS)
def mechanism(request):
    return request.param


@pytest.fixture
def dev():
    d = Device(0)
    yield d
    d.close()


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves a native thread, event, eventfd, wait,
    notifier, context record or side stream behind."""
    yield
    counts = wait_for_zero_counts()
    assert not any(counts.values()), f"native resources left after the test: {counts}"
