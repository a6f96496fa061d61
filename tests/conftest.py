"""Test configuration: the simulator unless CUDAFD_TEST_DRIVER=real, and a
leak check after every test (every native count back to zero)."""
from __future__ import annotations

import importlib.util

import pytest

import cudafd
from support import MECHANISMS, REAL, Device, wait_for_zero_counts

if not REAL:
    cudafd.use_simulator()

FLAVORS = ["asyncio", "blocking"]
if importlib.util.find_spec("uvloop"):
    FLAVORS.insert(1, "uvloop")
LOOPS = [f for f in FLAVORS if f != "blocking"]


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


@pytest.fixture(params=LOOPS)
def loop_flavor(request):
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
