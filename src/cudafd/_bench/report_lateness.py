"""The lateness section's tables: compact (at most 120 columns), one set per loop.

* one stream: lateness minus the spin floor, ``p50/p99`` µs, one column per
  kernel length (and the 100 µs waits after the history run's long stretch);
  the floor's own raw figures on the last line;
* one stream: process CPU cores per method and length, and by thread
  (the loop's and cudafd's native threads);
* N streams, random lengths: raw ``p50/p99`` µs (over the timed waits),
  cores, and thousands of waits a second (all of them).
"""

from __future__ import annotations

import textwrap

from .tables import table
from .waiters import FLOOR, HANDOFF, LABELS

__all__ = ["one_line", "render", "cell", "loop_per_wait"]


def _n(x: float | None) -> str:
    """Microseconds in at most 4 characters, so that a table stays within 120 columns
    whatever its figures: 9.5, 950, 9.5k, 95k, 1.2M; below zero (the simulator's
    estimated ends, a loaded machine's floor) -9.5, -950, -9k, -95k, -.5M."""
    if x is None:
        return "-"
    a = abs(x)
    if x < 0:
        if a < 9.95:
            return f"{x:.1f}"
        if a < 999.5:
            return f"{x:.0f}"
        if a < 99.5e3:
            return f"-{a / 1e3:.0f}k"
        if a < 0.95e6:
            return f"-.{a / 1e5:.0f}M"
        return f"-{a / 1e6:.0f}M" if a < 9.5e6 else "-big"
    if a < 9.95:
        return f"{x:.1f}"
    if a < 999.5:
        return f"{x:.0f}"
    if a < 9.95e3:
        return f"{x / 1e3:.1f}k"
    if a < 999.5e3:
        return f"{x / 1e3:.0f}k"
    return f"{x / 1e6:.1f}M" if a < 9.95e6 else f"{x / 1e6:.0f}M"


def cell(m: dict | None, field: str | None = "net") -> str:
    """``p50/p99`` of a method's figures (its ``net`` ones where ``field`` names them and they exist)."""
    if not m or not m.get("n"):
        return ""
    d = m.get(field) if field else None
    d = d or m
    return f"{_n(d.get('p50'))}/{_n(d.get('p99'))}"


def _cores(m: dict | None) -> str:
    return f"{m['cores']:.3f}" if m and m.get("cores") is not None else ""


def _split(m: dict | None) -> str:
    """``loop+cudafd`` cores, two decimals without the leading zero (``.12+.08``); the rest of
    the process's is its cores less these."""
    if not m or m.get("cores_loop") is None:
        return ""
    return "+".join(f"{x:.2f}".removeprefix("0") for x in (m["cores_loop"], m.get("cores_cudafd", 0.0)))


def loop_per_wait(m: dict | None) -> str:
    """µs of the loop's thread per wait (its cores over the waits a second of the same
    rounds): what one wait costs the loop, whatever the kernels' length."""
    if not m or m.get("cores_loop") is None or not m.get("waits_per_s"):
        return ""
    return _n(m["cores_loop"] / m["waits_per_s"] * 1e6)


def _keys(workloads: list[dict]) -> list[str]:
    keys: list[str] = []
    for w in workloads:
        keys += [k for k in w.get("methods", {}) if k not in keys]
    return keys


def _one_stream(res: dict) -> list[str]:
    wl = res.get("workloads", {})
    ones = {k[2:]: w for k, w in wl.items() if k.startswith("1x")}
    hist = wl.get("history") or {}
    if not ones:
        return []
    keys = [k for k in _keys(list(ones.values())) if k != FLOOR]
    head = ["method"] + list(ones) + (["hist 100us"] if hist.get("methods") else [])
    rows = []
    for k in keys:
        row = [LABELS[k]] + [cell(w["methods"].get(k)) for w in ones.values()]
        if hist.get("methods"):
            row.append(cell(hist.get("bound") if k == HANDOFF else hist["methods"].get(k)))
        rows.append(row)
    rows.append([LABELS[FLOOR] + " (raw)"] + [cell(w["methods"].get(FLOOR), None) for w in ones.values()]
                + ([""] if hist.get("methods") else []))
    lat = f"One stream, {res['loop']}: lateness minus the spin floor's p50, p50/p99 us (raw: add the floor's p50)"
    cpu_rows = [[LABELS[k]] + [_cores(w["methods"].get(k)) for w in ones.values()] for k in keys]
    cpu = f"One stream, {res['loop']}: process CPU cores (CPU s per wall s over the method's rounds)"
    out = [lat + "\n" + table(head, rows), cpu + "\n" + table(["method"] + list(ones), cpu_rows)]
    split_rows = [[LABELS[k]] + [_split(w["methods"].get(k)) for w in ones.values()] for k in keys]
    if any(c for r in split_rows for c in r[1:]):
        by = f"One stream, {res['loop']}: CPU by thread, cores: the loop's + cudafd's native threads"
        out.append(by + "\n" + table(["method"] + list(ones), split_rows))
        per_rows = [[LABELS[k]] + [loop_per_wait(w["methods"].get(k)) for w in ones.values()] for k in keys]
        per = f"One stream, {res['loop']}: the loop's thread per wait, us (its CPU over the waits)"
        out.append(per + "\n" + table(["method"] + list(ones), per_rows))
    if hist.get("methods"):
        parts = []
        for k, m in hist["methods"].items():
            fb = m.get("first_block") or {}
            parts.append(f"{LABELS[k]}: all {cell(m)}, first {fb.get('n')} {cell(fb)}")
        if hist.get("bound"):
            parts.append(f"{LABELS[HANDOFF]} (the same waits, no stretch before): {cell(hist['bound'])}")
        line = (f"History, {res['loop']}: {hist.get('stretch_s')} s of {hist.get('stretch_kernel_us', 0):.0f} us "
                f"waits, then {hist.get('after_us', 0):.0f} us waits, p50/p99 us minus the floor: " + "; ".join(parts))
        out.append(textwrap.fill(line, 118, subsequent_indent="  "))
    return out


def _many(res: dict) -> list[str]:
    many = {k: w for k, w in res.get("workloads", {}).items() if k[0].isdigit() and not k.startswith("1x")}
    if not many:
        return []
    keys = _keys(list(many.values()))
    head = ["method"] + [h for k in many for h in (f"{k.split('x')[0]}-stream p50/p99", "cores", "k/s")]
    rows = []
    for k in keys:
        row = [LABELS[k]]
        for w in many.values():
            m = w["methods"].get(k)
            row += [cell(m, None), _cores(m), f"{m['waits_per_s'] / 1e3:.1f}" if m and m.get("waits_per_s") else ""]
        rows.append(row)
    lo, hi = res.get("random_us", [50, 3000])
    every = max(int(w.get("timed_every", 1)) for w in many.values())
    timed = f", timed: 1 wait in {every}" if every > 1 else ""
    title = (f"N streams, {res['loop']}: each a task looping (random {lo:.0f}-{hi:.0f} us kernel, await); "
             f"lateness us{timed};\nk/s: thousand waits a second")
    return [title + "\n" + table(head, rows)]


def _collector(res: dict) -> str:
    """Whether the set-up was frozen out of the garbage collector, and its longest pause in a measured stretch."""
    longest = (0.0, "", "")
    for name, w in res.get("workloads", {}).items():
        for key, m in (w.get("methods") or {}).items():
            if m.get("gc_max_ms", 0.0) > longest[0]:
                longest = (m["gc_max_ms"], LABELS[key], name)
    frozen = "set-up frozen (gc.freeze)" if res.get("gc_frozen") else "set-up not frozen"
    where = f" ({longest[1]}, {longest[2]})" if longest[1] else ""
    return f"garbage collector: {frozen}; its longest pause in a measured stretch {longest[0]:.1f} ms{where}"


def render(per_loop: dict) -> str:
    """Every lateness table of the run, and how kernel ends were known."""
    parts = []
    for loop, res in per_loop.items():
        if res.get("error") and not res.get("workloads"):
            parts.append(f"Lateness, {loop}: {res['error']}")
            continue
        k = res.get("kernels") or {}
        cal = k.get("calibration") or {}
        how = f"kernels: {k.get('kind')}" + (
            f" (torch.cuda._sleep at {cal['cycles_per_s'] / 1e6:.0f} cycles/us)" if cal.get("cycles_per_s") else ""
        )
        lines = [f"Lateness, {loop}: the time the awaiting coroutine resumed minus the time its kernel ended"]
        lines += [f"{how}; ends: {k.get('timing')}", _collector(res)]
        lines += [f"note: {n}" for n in res.get("notes") or []]
        parts.append("\n".join(textwrap.fill(x, 118, subsequent_indent="  ") for x in lines))
        parts += _one_stream(res) + _many(res)
    return "\n\n".join(parts)


def one_line(res: dict) -> str:
    """The progress digest: the default's p50 on the random one-stream and the 64-stream workloads."""
    wl = res.get("workloads", {})
    parts = []
    for name in ("1xrandom", "64x_random"):
        m = (wl.get(name) or {}).get("methods", {}).get("cudafd_default")
        if m:
            parts.append(f"{name} {cell(m, 'net' if name.startswith('1x') else None)} us")
    return "cudafd default " + ", ".join(parts) if parts else "done"
