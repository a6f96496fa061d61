"""Entry point of one benchmark child: ``python -m cudafd._bench.child SECTION PARAMS_JSON RESULT_PATH``.

Runs ``cudafd._bench.<SECTION>.run(params, progress)`` and writes the dict
it returns to RESULT_PATH as JSON. Never hangs: a watchdog thread writes
what the section has so far (``progress.partial``) with ``"timed_out":
true`` and exits at ``params["hard_s"]``; faulthandler dumps every thread's
stack and exits a little later in case the watchdog itself cannot run (a
thread holding the GIL forever). The parent kills the process after that.
"""

from __future__ import annotations

import asyncio
import faulthandler
import importlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["Progress", "main", "new_loop", "take_turns"]


class Progress:
    """Progress lines on stderr (at most one a second) and the partial result for the watchdog."""

    def __init__(self, prefix: str, result_path: str, hard_s: float) -> None:
        self.prefix = prefix
        self.result_path = result_path
        self.partial: Callable[[], dict] | None = None
        self.last = ""
        self._printed = 0.0
        self._lock = threading.Lock()
        self._written = False
        self._deadline = time.monotonic() + hard_s

    def tick(self, message: str, force: bool = False) -> None:
        self.last = message
        now = time.monotonic()
        if force or now - self._printed >= 1.0:
            self._printed = now
            print(f"    {self.prefix}: {message}", file=sys.stderr, flush=True)

    def write(self, result: dict) -> bool:
        """Write the result once (the first of the section and the watchdog wins)."""
        with self._lock:
            if self._written:
                return False
            self._written = True
        tmp = self.result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, default=str)
        os.replace(tmp, self.result_path)
        return True

    def start_watchdog(self) -> None:
        threading.Thread(target=self._watch, name="bench-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while time.monotonic() < self._deadline:
            time.sleep(0.05)
        partial: dict = {}
        try:
            if self.partial is not None:
                partial = self.partial()
        except Exception as exc:  # the data may be mid-update: say so rather than fail
            partial = {"partial_error": repr(exc)}
        partial.update(timed_out=True, error=f"timed out; last progress: {self.last or 'none'}")
        if self.write(partial):
            print(f"    {self.prefix}: TIMED OUT ({self.last})", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(file=sys.stderr)
        os._exit(3)


def take_turns(
    keys: list[str],
    p: dict,
    state: dict,
    progress: Progress,
    measure: Callable[[str], dict],
    measured: Callable[[str, list[dict]], None],
) -> None:
    """``p["rounds"]`` rounds in which the methods ``keys`` take turns, each round
    in an order rotated by one, so a slow spell of a shared machine falls on
    all of them: ``measure(key)`` gives one sample, and ``measured(key,
    samples)`` is called after each. A method that raises is recorded in
    ``state["errors"]`` and skipped from then on; past ``p["soft_s"]`` the
    rest is skipped and ``state["truncated"]`` set."""
    deadline = time.monotonic() + float(p["soft_s"])
    samples: dict[str, list[dict]] = {k: [] for k in keys}
    rounds = int(p.get("rounds", 1))
    for r in range(rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            if key in state["errors"]:
                continue
            if time.monotonic() > deadline:
                state["truncated"] = True
                return
            try:
                samples[key].append(measure(key))
            except Exception as exc:
                state["errors"][key] = f"{type(exc).__name__}: {exc}"
            measured(key, samples[key])
            progress.tick(f"{key} round {r + 1} of {rounds}")


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop: "asyncio" (the selector loop) or "uvloop"."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name != "asyncio":
        raise ValueError(f"unknown loop {name!r}")
    return asyncio.SelectorEventLoop()


def main(argv: list[str]) -> int:
    section, params_text, result_path = argv
    params = json.loads(params_text)
    hard = float(params.get("hard_s", 60))
    faulthandler.dump_traceback_later(hard + 5, exit=True)
    label = section + (f" {params['loop']}" if params.get("loop") else "")
    label += f" {params['mechanism']}" if params.get("mechanism") else ""
    progress = Progress(label, result_path, hard)
    progress.start_watchdog()
    try:
        module = importlib.import_module(f"{__package__}.{section}")
        result = module.run(params, progress)
    except BaseException as exc:  # report it to the parent, which carries on with the next section
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        if progress.partial is not None:
            try:
                result = {**progress.partial(), **result}
            except Exception:
                pass
        progress.write(result)
        return 1
    progress.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
