"""The lateness targets (docs/performance.md), checked against one run's lateness section (per loop).

Judged: the default (``await cudafd.wait(stream)``) unless the row names a
mechanism. One-stream figures are net of the spin floor (:func:`.clocks.net`);
N-stream figures are raw. Each row: pass, miss, or n/a (a figure missing:
the workload or the method did not run), with the measured values.
"""

from __future__ import annotations

import math

from .pareto import beaten_by
from .waiters import BASELINES, BOUNDS, HANDOFF, LABELS

__all__ = ["evaluate", "ONE_STREAM_P50_US", "ONE_STREAM_P99_US"]

JUDGED = "cudafd_default"
ONE_STREAM_P50_US, ONE_STREAM_P99_US = 30.0, 200.0
LONG_P50_US, LONG_P99_US = 100.0, 300.0  # 5 ms kernels
FOUR_P50_US, FOUR_P99_US = 40.0, 300.0
MANY_P99_US, MANY_CORES = 1000.0, 0.8
CPU_VS_EXECUTOR, CPU_10MS = 0.8, 0.05
SPIN_SLACK_US = 10.0
ML_P50_US = 600.0


def _row(figure: str, target: str, measured: str, ok: bool | None) -> dict:
    return {"figure": figure, "target": target, "measured": measured,
            "status": "n/a" if ok is None else "pass" if ok else "miss"}


def _m(res: dict, workload: str, key: str) -> dict | None:
    m = (res.get("workloads", {}).get(workload) or {}).get("methods", {}).get(key)
    return m if m and m.get("n") else None


def _fig(m: dict, net: bool) -> dict:
    return (m.get("net") or {}) if net else m


def _n(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 10 else f"{x:.0f}"


def _short(workload: str) -> str:
    """"1x50us" -> "50us", "4x_random" -> "random"."""
    return workload.split("x", 1)[1].lstrip("_")


def _meeting(res: dict, workload: str, ok, net: bool) -> str:
    """The ways of this run, the default's own aside, whose (net) figures pass ``ok``, cheapest
    first with their cores: what meeting the target cost here (none: nothing did)."""
    ways = (res.get("workloads", {}).get(workload) or {}).get("methods") or {}
    met = sorted((m["cores"], LABELS[k]) for k, m in ways.items()
                 if k not in (JUDGED, "spin_floor") and k not in BOUNDS and m.get("n") and m.get("cores") is not None
                 and ok(_fig(m, net)))
    if not met:
        return f"{_short(workload)}: none"
    return f"{_short(workload)}: " + ", ".join(f"{label} {cores:.2f}" for cores, label in met[:3])


def _bounded(res: dict, loop: str, names: list[str], p50: float, p99: float, title: str, net: bool) -> dict:
    figure = f"lateness, {title}, {loop}"
    target = f"p50 <= {p50:.0f} us, p99 <= {p99:.0f} us" + (" (minus the spin floor)" if net else "")
    parts, oks = [], []
    for name in names:
        m = _m(res, name, JUDGED)
        d = _fig(m, net) if m else {}
        if "p50" not in d or "p99" not in d:
            parts.append(f"{_short(name)} not measured")
            oks.append(None)
            continue
        parts.append(f"{_short(name)} {_n(d['p50'])}/{_n(d['p99'])}")
        oks.append(d["p50"] <= p50 and d["p99"] <= p99)
    ok = None if None in oks or not oks else all(oks)
    measured = "p50/p99 us: " + ", ".join(parts)
    bounds = [f"{_short(name)} {_n(b['p50'])}" for name in names
              if (b := _fig(_m(res, name, HANDOFF) or {}, net)) and "p50" in b]
    if bounds:  # waiters.BOUNDS: the least a loop asleep until told is late here
        measured += f"; {LABELS[HANDOFF]}, p50 us: " + ", ".join(bounds)
    cores = [f"{_short(name)} {m['cores']:.2f}" for name in names if (m := _m(res, name, JUDGED)) and m.get("cores")]
    measured += "; the default's cores: " + ", ".join(cores)
    measured += "; ways within the p50 target here, cores: " + "; ".join(
        _meeting(res, name, lambda d: d.get("p50", float("inf")) <= p50, net) for name in names)
    return _row(figure, target, measured, ok)


def _many(res: dict, loop: str) -> dict:
    figure = f"lateness, 64 streams random, {loop}"
    target = f"p50 <= sleep(0)'s, p99 <= {MANY_P99_US:.0f} us, <= {MANY_CORES} cores"
    m, s0 = _m(res, "64x_random", JUDGED), _m(res, "64x_random", "sleep0")
    if m is None or s0 is None or m.get("cores") is None:
        return _row(figure, target, "not measured", None)
    measured = f"p50 {_n(m['p50'])} us (sleep(0) {_n(s0['p50'])}), p99 {_n(m['p99'])} us, {m['cores']:.2f} cores"
    if (b := _m(res, "64x_random", HANDOFF)) is not None:
        measured += f"; {LABELS[HANDOFF]}: p50 {_n(b['p50'])} us"
    measured += "; ways at sleep(0)'s p50 or under here, cores: " + _meeting(
        res, "64x_random", lambda d: d.get("p50", float("inf")) <= s0["p50"], False)
    ok = m["p50"] <= s0["p50"] and m["p99"] <= MANY_P99_US and m["cores"] <= MANY_CORES
    return _row(figure, target, measured, ok)


def _by_thread(m: dict) -> str:
    """`` (loop's thread L, cudafd's threads C)`` where the run split the CPU by thread."""
    if m.get("cores_loop") is None:
        return ""
    return f" (loop's thread {m['cores_loop']:.3f}, cudafd's threads {m.get('cores_cudafd', 0.0):.3f})"


ONE_WAKE = ("executor", "cudafd_hostfunc")  # the ways that tell a sleeping loop with one wake of a thread


def cpu_bound(res: dict, workload: str) -> tuple[float, str] | None:
    """The least CPU (cores) a way whose loop sleeps until it is told can cost on ``workload``,
    from this run's split by thread, and the way that set it: the loop's thread of the bound (a
    loop told at once by a spinning thread: its loop's share of a wait and nothing else) plus
    everything but the loop's thread of the cheapest way here that finds the end with one wake of
    a thread asleep in the driver (the executor's thread in a blocking sync, or the driver's own
    thread calling hostfunc's trampoline). None where the run did not split the CPU."""
    b = _m(res, workload, HANDOFF)
    if not b or b.get("cores_loop") is None:
        return None
    rest = [(max(0.0, w["cores"] - w["cores_loop"]), LABELS[k]) for k in ONE_WAKE
            if (w := _m(res, workload, k)) and w.get("cores") is not None and w.get("cores_loop") is not None]
    if not rest:
        return None
    least, label = min(rest)
    return b["cores_loop"] + least, label


def ask_bound(res: dict, workload: str, budget_us: float | None = None) -> tuple[float, int, float] | None:
    """The least CPU (cores) a way that honours a max_lateness of ``budget_us`` (default: the
    default Notifier's) by asking can cost on the one-stream ``workload``, from this run, at
    the default's waits per second: per wait, the loop's thread of the bound (a loop told at
    once: a wait's share of the loop and nothing else) plus ceil(kernel / budget) wakes of an
    asking thread (never more than a budget between two asks from the wait's start to the
    ask that finds its end: the k-th ask is at most k budgets in, and the one that finds the
    end no earlier than the kernel's length) at this run's CPU per wake of the core's poller
    (the default's on this workload, whose naps are no longer than a budget). Returns (cores,
    asks per wait, µs per wake); None where a figure is missing."""
    budget_us = budget_us or res.get("max_lateness_us")
    wl = res.get("workloads", {}).get(workload) or {}
    b, m = _m(res, workload, HANDOFF), _m(res, workload, JUDGED)
    if not budget_us or not wl.get("kernel_s") or not b or not m or b.get("cores_loop") is None:
        return None
    per_wake, rate, b_rate = m.get("cudafd_us_per_wake"), m.get("waits_per_s"), b.get("waits_per_s")
    if not per_wake or not rate or not b_rate:
        return None
    asks = math.ceil(wl["kernel_s"] * 1e6 / budget_us - 1e-9)  # (1e-9: a length that is a whole number of budgets)
    return rate * (b["cores_loop"] / b_rate + asks * per_wake * 1e-6), asks, per_wake


def _ask_text(res: dict, workload: str, budget_us: float | None = None, named: bool = True) -> str | None:
    """ask_bound as a row's words (``named``: led by the workload's name); None where it has
    no asks to count (no kernel length: random lengths)."""
    got = ask_bound(res, workload, budget_us)
    if got is None or not got[1]:
        return None
    cores, asks, per_wake = got
    budget = budget_us or res["max_lateness_us"]
    text = (f"finding the end within {_n(budget)} us by asking: a loop told at once "
            f"+ {asks} wake{'' if asks == 1 else 's'} a wait at {per_wake:.1f} us = {cores:.3f} cores")
    return f"{_short(workload)} bound, {text}" if named else text


def _cpu(res: dict, loop: str) -> dict:
    figure = f"CPU, one stream back to back, {loop}"
    target = f"<= {CPU_VS_EXECUTOR}x the executor's at 1 ms and 2 ms; <= {CPU_10MS} cores at 10 ms"
    parts, oks = [], []
    for name in ("1x1ms", "1x2ms"):
        m, ex = _m(res, name, JUDGED), _m(res, name, "executor")
        if not m or not ex or m.get("cores") is None or not ex.get("cores"):
            parts.append(f"{name[2:]} not measured")
            oks.append(None)
            continue
        ratio = m["cores"] / ex["cores"]
        parts.append(f"{name[2:]} {m['cores']:.3f} = {ratio:.2f}x executor ({ex['cores']:.3f})" + _by_thread(m))
        if (bound := cpu_bound(res, name)) is not None:
            parts.append(f"{name[2:]} bound: a loop told by one wake {bound[0]:.3f} = {bound[0] / ex['cores']:.2f}x "
                         f"executor (the wake: {bound[1]}'s)")
        if (text := _ask_text(res, name)) is not None:
            parts.append(text)
        oks.append(ratio <= CPU_VS_EXECUTOR)
    for name in ("1x1ms", "1x2ms"):  # what being that cheap cost here: the lateness of the ways that were
        ex = _m(res, name, "executor")
        if ex and ex.get("cores"):
            cap = CPU_VS_EXECUTOR * ex["cores"]
            ways = (res["workloads"][name].get("methods") or {})
            cheap = sorted((_fig(w, True).get("p50", w["p50"]), LABELS[k]) for k, w in ways.items()
                           if k not in (JUDGED, "spin_floor") and k not in BOUNDS and w.get("n")
                           and w.get("cores") is not None and w["cores"] <= cap)
            parts.append(f"{name[2:]}: ways at <= {cap:.3f} cores here, p50 us: "
                         + (", ".join(f"{label} {_n(p)}" for p, label in cheap[:3]) or "none"))
    m = _m(res, "1x10ms", JUDGED)
    if m and m.get("cores") is not None:
        parts.append(f"10ms {m['cores']:.3f} cores" + _by_thread(m))
        if (bound := cpu_bound(res, "1x10ms")) is not None:
            parts.append(f"10ms bound: a loop told by one wake {bound[0]:.3f} cores (the wake: {bound[1]}'s)")
        if (text := _ask_text(res, "1x10ms")) is not None:
            parts.append(text)
        oks.append(m["cores"] <= CPU_10MS)
    else:
        parts.append("10ms not measured")
        oks.append(None)
    return _row(figure, target, "; ".join(parts), None if None in oks else all(oks))


def points(res: dict, workload: str) -> dict[str, tuple[float, float]]:
    """(cores, p50 µs) of every method measured on ``workload`` with both figures, the floor and bounds left out."""
    out = {}
    for k, m in ((res.get("workloads", {}).get(workload) or {}).get("methods") or {}).items():
        if k != "spin_floor" and k not in BOUNDS and m.get("n") and m.get("cores") is not None:
            out[k] = (m["cores"], m["p50"])
    return out


def _pareto(res: dict, loop: str) -> dict:
    figure = f"Pareto, every workload, {loop}"
    target = "no baseline both earlier (p50) and cheaper (CPU) than the default"
    names = [w for w in res.get("workloads", {}) if w != "history"]
    beaten, judged = [], 0
    for w in names:
        pts = points(res, w)
        if JUDGED not in pts:
            continue
        judged += 1
        by = beaten_by(pts, JUDGED, list(BASELINES))
        if by:
            text = f"{w}: " + ", ".join(f"{LABELS[k]} {_n(pts[k][1])} us at {pts[k][0]:.3f}" for k in by)
            text += f" (the default {_n(pts[JUDGED][1])} at {pts[JUDGED][0]:.3f}"
            if (b := _m(res, w, HANDOFF)) is not None:
                text += f"; a loop told at once {_n(b['p50'])} us"
            if (ask := _ask_text(res, w, named=False)) is not None:
                text += "; " + ask
            beaten.append(text + ")")
    if not judged:
        return _row(figure, target, "not measured", None)
    measured = f"beaten on {len(beaten)} of {judged} workloads" + (": " + "; ".join(beaten) if beaten else "")
    return _row(figure, target, measured, False if beaten else True if judged == len(names) else None)


def _spin(res: dict, loop: str) -> dict:
    figure = f"spin mechanism, one stream, {loop}"
    target = f"p50 within {SPIN_SLACK_US:.0f} us of sleep(0)'s on every one-stream workload"
    names = [w for w in res.get("workloads", {}) if w.startswith("1x")]
    parts, oks = [], []
    for w in names:
        m, s0 = _m(res, w, "cudafd_spin"), _m(res, w, "sleep0")
        if not m or not s0:
            parts.append(f"{w[2:]} not measured")
            oks.append(None)
            continue
        d = m["p50"] - s0["p50"]
        parts.append(f"{w[2:]} {d:+.1f}")
        oks.append(d <= SPIN_SLACK_US)
    ok = None if not oks or None in oks else all(oks)
    return _row(figure, target, "spin p50 - sleep(0) p50, us: " + ", ".join(parts), ok)


def _max_lateness(res: dict, loop: str) -> dict:
    figure = f"max_lateness=1e-3, one stream, {loop}"
    target = f"CPU <= sleep(1 ms) polling's and p50 <= {ML_P50_US:.0f} us, at 2 ms and 10 ms"
    if "cudafd_ml1ms" in (res.get("errors") or {}):
        return _row(figure, target, f"not measured: {res['errors']['cudafd_ml1ms']}", None)
    parts, oks = [], []
    for w in ("1x2ms", "1x10ms"):
        m, s1 = _m(res, w, "cudafd_ml1ms"), _m(res, w, "sleep1ms")
        if not m or not s1 or m.get("cores") is None or s1.get("cores") is None:
            parts.append(f"{w[2:]} not measured")
            oks.append(None)
            continue
        p50 = _fig(m, True).get("p50", m["p50"])
        parts.append(f"{w[2:]} {m['cores']:.3f} cores (sleep(1 ms) {s1['cores']:.3f}), p50 {_n(p50)} us")
        if (text := _ask_text(res, w, 1000.0)) is not None:
            parts.append(text)
        oks.append(m["cores"] <= s1["cores"] and p50 <= ML_P50_US)
    return _row(figure, target, "; ".join(parts), None if None in oks else all(oks))


def _history(res: dict, loop: str) -> dict:
    h = res.get("workloads", {}).get("history") or {}
    figure = f"history: 100 us waits after {h.get('stretch_s', '?')} s of 10 ms waits, {loop}"
    target = f"p50 <= {ONE_STREAM_P50_US:.0f} us, p99 <= {ONE_STREAM_P99_US:.0f} us (minus the spin floor)"
    m = (h.get("methods") or {}).get(JUDGED)
    d = (m or {}).get("net") or {}
    if "p50" not in d:
        return _row(figure, target, "not measured", None)
    fb = (m.get("first_block") or {}).get("net") or {}
    measured = f"{_n(d['p50'])}/{_n(d['p99'])} us"
    if fb:
        measured += f" (the first {m['first_block'].get('n')}: {_n(fb['p50'])}/{_n(fb['p99'])})"
    if "p50" in (b := (h.get("bound") or {}).get("net") or {}):
        measured += f"; {LABELS[HANDOFF]}, the same waits in the same blocks: {_n(b['p50'])}/{_n(b['p99'])} us"
    return _row(figure, target, measured, d["p50"] <= ONE_STREAM_P50_US and d["p99"] <= ONE_STREAM_P99_US)


def evaluate(sections: dict) -> list[dict]:
    """Every lateness target row, per loop measured."""
    rows = []
    for loop, res in (sections.get("lateness") or {}).items():
        if not res.get("workloads"):
            continue
        rows.append(_bounded(res, loop, ["1x50us", "1x200us", "1x1ms", "1xrandom"], ONE_STREAM_P50_US,
                             ONE_STREAM_P99_US, "one stream 50 us, 200 us, 1 ms, random", True))
        rows.append(_bounded(res, loop, ["1x5ms"], LONG_P50_US, LONG_P99_US, "one stream 5 ms", True))
        rows.append(_bounded(res, loop, ["4x_random"], FOUR_P50_US, FOUR_P99_US, "4 streams random", False))
        rows += [_many(res, loop), _cpu(res, loop), _pareto(res, loop), _spin(res, loop),
                 _max_lateness(res, loop), _history(res, loop)]
    return rows
