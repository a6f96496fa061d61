"""The API reference is generated from the docstrings and must match them."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_reference_is_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_api.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
