"""The HTTP service example serves requests in both modes and reports them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from support import REAL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(REAL, reason="runs on the simulator; bench/device_run.sh runs it on a GPU")
def test_http_service_bench_runs():
    env = dict(os.environ, CUDAFD_SIMULATOR="1")
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "http_service", "service.py"),
         "--bench", "--seconds", "0.5", "--clients", "4"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if "req/s" in line}
    assert set(lines) == {"executor", "cudafd"}, r.stdout
    for line in lines.values():
        assert float(line.split()[1].replace(",", "")) > 0, line


@pytest.mark.parametrize("args, message", [
    (("--seconds", "0"), "--seconds must be positive"),
    (("--seconds", "-1"), "--seconds must be positive"),
    (("--clients", "0"), "--clients must be at least 1"),
    (("--serve", "--port", "70000"), "--port must be 0 to 65535"),
])
def test_bad_arguments_are_usage_errors(args, message):
    env = dict(os.environ, CUDAFD_SIMULATOR="1")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "http_service", "service.py"), *args],
                       capture_output=True, text=True, timeout=60, check=False, env=env)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(REAL, reason="runs on the simulator")
def test_serve_answers_and_ctrl_c_stops_it_cleanly():
    env = dict(os.environ, CUDAFD_SIMULATOR="1")
    # A child of a shell started in the background inherits SIGINT ignored: restore it.
    p = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "examples", "http_service", "service.py"), "--serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 (async-signal-safe)
    )
    try:
        line = p.stdout.readline()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert port != 0, line
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /infer HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok"):
                chunk = s.recv(4096)
                assert chunk, answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK"), answer
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0 and "Traceback" not in err, (out, err)


@pytest.mark.skipif(REAL, reason="runs on the simulator")
def test_a_port_in_use_is_an_error_line_not_a_traceback():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "http_service", "service.py"),
                            "--serve", "--port", str(port)], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, CUDAFD_SIMULATOR="1"))
    assert r.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(REAL, reason="runs on the simulator")
def test_simulator_asked_for_is_used_where_torch_sees_a_gpu(tmp_path):
    # A torch that claims a GPU and has nothing else: CUDAFD_SIMULATOR=1 must keep the service off it.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_available():\n        return True\n"
    )
    env = dict(os.environ, CUDAFD_SIMULATOR="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "http_service", "service.py"),
         "--bench", "--seconds", "0.2", "--clients", "2"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )
    assert r.returncode == 0 and "the cudafd simulator" in r.stdout, (r.stdout, r.stderr)
