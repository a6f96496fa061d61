"""A progress display for long command-line runs (the demo, the bench).

On a terminal it is a bar drawn by rich, or by tqdm, whichever is importable
(``pip install 'cudafd[progress]'`` brings rich); neither is a dependency.
Otherwise (no terminal, or neither library) it prints a plain line at a
quarter, half and three quarters of the way (unless told not to). ``line(text)`` prints a line above the bar, or plainly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import IO, Any

__all__ = ["Progress", "backend"]


def backend(stream: IO[str] | None = None) -> str:
    """"rich", "tqdm" or "plain": what Progress draws with on ``stream`` (stdout by default).

    ``CUDAFD_PROGRESS=plain`` forces plain lines."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("CUDAFD_PROGRESS") == "plain" or not getattr(stream, "isatty", lambda: False)():
        return "plain"
    for name in ("rich", "tqdm"):
        if importlib.util.find_spec(name) is not None:
            return name
    return "plain"


class Progress:
    """``with Progress(total, "waits") as p: p.update(done, note)``."""

    def __init__(
        self, total: int, unit: str, stream: IO[str] | None = None, label: str = "", quarters: bool = True
    ) -> None:
        self.total = max(1, int(total))
        self.unit = unit
        self.label = label
        self.stream = sys.stdout if stream is None else stream
        self.kind = backend(self.stream)
        self._bar: Any = None
        self._task: Any = None
        self._next_quarter = 1 if quarters else 4  # plain: a line at 1/4, 1/2, 3/4
        self._done = 0

    def __enter__(self) -> Progress:
        if self.kind == "rich":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress as RichProgress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label or " ", total=self.total, note="")
        elif self.kind == "tqdm":
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit=f" {self.unit}", desc=self.label or None, file=self.stream, leave=False)
        return self

    def update(self, done: int, note: str = "") -> None:
        """``done`` of ``total`` are finished; ``note``: a short word on the current step."""
        done = min(int(done), self.total)
        if self.kind == "rich":
            self._bar.update(self._task, completed=done, note=note)
        elif self.kind == "tqdm":
            self._bar.update(done - self._done)
            if note:
                self._bar.set_postfix_str(note, refresh=False)
        else:
            while self._next_quarter < 4 and done >= self._next_quarter * self.total / 4:
                self.line(f"  {done:,}/{self.total:,} {self.unit}" + (f"  {note}" if note else ""))
                self._next_quarter += 1
        self._done = done

    def line(self, text: str) -> None:
        """A line of output that does not break the bar."""
        if self.kind == "rich":
            self._bar.console.print(text, markup=False, highlight=False)
        elif self.kind == "tqdm":
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            if self.kind == "rich":
                self._bar.stop()
            else:
                self._bar.close()
            self._bar = None
