"""The terminal report: one table per section, the targets, and the simulator warning."""

from __future__ import annotations

import textwrap

from . import SECTIONS, report_lateness
from .tables import table
from .methods import LABELS
from .targets import vs

__all__ = ["SIM_BANNER", "one_line", "render", "table"]

SIM_BANNER = (
    "*** SIMULATOR: no GPU was used. These figures come from cudafd's simulated driver and are "
    "NOT meaningful as performance numbers; they only show that the suite runs. ***"
)


SIM_MARK = "[simulator: not GPU figures]"


def _f(x: object, fmt: str = "{:.1f}") -> str:
    return "" if x is None else fmt.format(x)


def _ordered_keys(per_loop: dict, field: str) -> list[str]:
    keys: list[str] = []
    for res in per_loop.values():
        for k in res.get(field, {}):
            if k not in keys:
                keys.append(k)
    return keys


def _errors(title: str, per: dict) -> list[str]:
    out = []
    for where, res in per.items():
        for k, e in (res.get("errors") or {}).items():
            out.append(f"  {title} {where}: {LABELS.get(k, k)}: {e}")
        if res.get("error"):
            out.append(f"  {title} {where}: {res['error']}")
        if res.get("truncated"):
            out.append(f"  {title} {where}: cut short by its time budget")
    return out


def _latency(per_loop: dict) -> str:
    loops = list(per_loop)
    headers = ["method"] + [h for loop in loops for h in (f"{loop} p50 us", "p99", "x floor")]
    rows = []
    for k in _ordered_keys(per_loop, "methods"):
        row: list[object] = [LABELS.get(k, k)]
        for loop in loops:
            m = per_loop[loop].get("methods", {}).get(k, {})
            row += [_f(m.get("p50")), _f(m.get("p99")), _f(m.get("x_floor"), "{:.2f}")]
        rows.append(row)
    n = ", ".join(f"{loop}: {r.get('rounds')} rounds in blocks of {r.get('block')}" for loop, r in per_loop.items())
    return f"Await latency, tiny kernel ({n})\n" + table(headers, rows)


def _cpu(per_loop: dict) -> str:
    loops = list(per_loop)
    headers = ["method"] + [h for loop in loops for h in (f"{loop} cores", "overhead us")]
    rows = []
    for k in _ordered_keys(per_loop, "methods"):
        row: list[object] = [LABELS.get(k, k)]
        for loop in loops:
            m = per_loop[loop].get("methods", {}).get(k, {})
            row += [_f(m.get("cores"), "{:.3f}"), _f(m.get("overhead_us"))]
        rows.append(row)
    return "CPU while awaiting 2 ms kernels back to back (process CPU s per wall s)\n" + table(headers, rows)


def _point(key: str) -> str:
    return ("cudafd " + key[len("cudafd_") :]) if key.startswith("cudafd_") else key.replace("_", " ")


def _bubble(res: dict) -> str:
    rows = [
        [
            _point(k),
            _f(v.get("us_per_kernel"), "{:.2f}"),
            _f(v.get("us_per_point"), "{:.2f}"),
            _f(v.get("host_us_per_point"), "{:.2f}"),
        ]
        for k, v in res.get("variants", {}).items()
    ]
    head = (
        f"Stream bubble: {res.get('kernels')} kernels of {res.get('kernel_us')} us, a point after each "
        f"(timing: {res.get('timing')}; gate too short in {res.get('gate_short', 0)} batches)"
    )
    return head + "\n" + table(["point", "us/kernel", "us added/point", "host us/point"], rows)


def _throughput(per_loop: dict) -> str:
    loops = list(per_loop)
    headers = ["method"] + [h for loop in loops for h in (f"{loop} awaits/s", "x sleep0", "cores")]
    rows = []
    for k in _ordered_keys(per_loop, "methods"):
        row: list[object] = [LABELS.get(k, k)]
        for loop in loops:
            methods = per_loop[loop].get("methods", {})
            m = methods.get(k, {})
            ratio = vs(methods, k, "sleep0")
            row += [_f(m.get("awaits_per_s"), "{:,.0f}"), _f(ratio and ratio[0], "{:.2f}"), _f(m.get("cores"), "{:.2f}")]
        rows.append(row)
    any_res: dict = next(iter(per_loop.values()), {})
    head = (
        f"Throughput: {any_res.get('streams')} streams each looping ({any_res.get('kernel_us', 0):.0f} us kernel "
        f"via {'PyTorch' if any_res.get('launch') == 'torch' else 'cudafd_spin'}, "
        f"await); CUDA_DEVICE_MAX_CONNECTIONS={any_res.get('max_connections')}; awaits/s and cores: medians "
        f"of {any_res.get('rounds', '?')} rounds; x sleep0: the median of the ratios within a round"
    )
    return head + "\n" + table(headers, rows)


def _scale(per_mech: dict) -> str:
    rows = []
    for mech, r in per_mech.items():
        rows.append(
            [
                mech,
                f"{r.get('completed', '?')}/{r.get('waits')}",
                r.get("all_pending_when_measured"),
                f"{r.get('peak_native_threads')} (cap {r.get('thread_cap')})",
                r.get("peak_process_threads"),
                _f(r.get("bytes_per_wait")),
                _f(r.get("watch_us"), "{:.2f}"),
                _f((r.get("slowest_watches") or {}).get("us_per_watch"), "{:.1f}"),
                _f(r.get("drain_per_s"), "{:,.0f}"),
            ]
        )
    any_res: dict = next(iter(per_mech.values()), {})
    head = f"Scale: {any_res.get('waits')} pending waits on {any_res.get('streams')} streams, one Notifier"
    headers = [
        "mechanism",
        "completed",
        "all pending",
        "cudafd threads",
        "all threads",
        "B/wait",
        "watch us",
        "us/watch, slowest 100",
        "completions/s",
    ]
    return head + "\n" + table(headers, rows)


def _c(res: dict) -> str:
    if res.get("skipped"):
        return f"C level (bench/c): skipped: {res['skipped']}"
    if "latency" not in res:
        return f"C level (bench/c): {res.get('error', 'no result')}"
    floor = res["latency"].get("query_spin", {}).get("p50")
    rows = [
        [v.get("label", k), _f(v.get("p50")), _f(v.get("p99")), _f(v["p50"] / floor if floor else None, "{:.2f}")]
        for k, v in res["latency"].items()
    ]
    out = f"C level: launch + notification round trip ({res.get('rounds')} rounds)\n"
    out += table(["path", "p50 us", "p99 us", "x query spin"], rows)
    b = res.get("bubble", {})
    rows = [
        [_point(k), _f(v.get("us_per_kernel"), "{:.2f}"), _f(v.get("us_per_point"), "{:.2f}")]
        for k, v in b.get("variants", {}).items()
    ]
    out += f"\nC level: bubble, {b.get('kernels')} kernels of 5 us (timing: {b.get('timing')})\n"
    return out + table(["point", "us/kernel", "us added/point"], rows)


WIDTH = 100  # the targets block fits this many columns


def _wrapped(label: str, text: str, indent: int) -> list[str]:
    lead = " " * indent
    return textwrap.wrap(
        text, WIDTH, initial_indent=f"{lead}{label:<9s}", subsequent_indent=lead + " " * 9, break_on_hyphens=False
    ) or [f"{lead}{label}"]


def _targets(rows: list[dict], simulator: bool) -> str:
    """Each target as a short block (status, figure; its target; what was measured), wrapped to WIDTH."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items()) or "none evaluated"
    head = f"Targets (docs/performance.md): {summary}; ratios measured side by side in this run"
    if simulator:
        head += "\n  (simulator: pass or miss says nothing of a GPU)"
    out = [head]
    for r in rows:
        out += textwrap.wrap(f"{r['status']:<13s}{r['figure']}", WIDTH, initial_indent="  ", subsequent_indent=" " * 15)
        out += _wrapped("target", r["target"], 15)
        out += _wrapped("measured", r["measured"], 15)
    return "\n".join(out)


def one_line(section: str, res: dict) -> str:
    """A one-line digest of a finished child, for the progress output."""
    if res.get("error"):
        return f"FAILED: {res['error'].splitlines()[0]}"
    if section == "latency":
        m = res.get("methods", {})
        parts = [f"{LABELS[k].split(':')[0]} {m[k]['p50']:.1f} us" for k in ("floor", "cudafd_event") if k in m]
        return "p50 " + ", ".join(parts)
    if section == "cpu":
        m = res.get("methods", {}).get("cudafd_event", {})
        return f"cudafd event {m.get('cores', float('nan')):.3f} cores"
    if section == "throughput":
        m = res.get("methods", {}).get("cudafd_event", {})
        return f"cudafd event {m.get('awaits_per_s', 0):,.0f} awaits/s"
    if section == "bubble":
        v = res.get("variants", {}).get("cudafd_event", {})
        return f"cudafd event {v.get('us_per_point', float('nan')):.2f} us per point"
    if section == "scale":
        return f"{res.get('completed')}/{res.get('waits')} done, {res.get('bytes_per_wait')} B/wait"
    if section == "lateness":
        return report_lateness.one_line(res)
    if section == "numba_probe":
        return "works" if res.get("ok") else f"does not work: {res.get('error')}"
    return "done"


def _scope(doc: dict) -> str:
    """"full run" / "quick run" when every section ran, else which ones did."""
    kind = "quick" if doc["quick"] else "full"
    ran = [k for k in SECTIONS if doc["sections"].get(k)]
    return f"{kind} run" if len(ran) == len(SECTIONS) else f"{kind} settings, sections {','.join(ran) or 'none'}"


def render(doc: dict) -> str:
    """The whole report of a run (the JSON document) as text."""
    s = doc["sections"]
    parts = []
    if doc["environment"].get("simulator"):
        parts.append(SIM_BANNER)
    env = doc["environment"]
    parts.append(
        f"cudafd bench on {env.get('device')} (CUDA {env.get('cuda_version')}, driver {env.get('nvidia_driver') or env.get('driver_library')}), "
        f"Python {env.get('python')}, {env.get('cpu_count')} CPUs; {doc['date_utc']}; {_scope(doc)}"
    )
    sim = bool(env.get("simulator"))

    def add(text: str) -> None:
        """A section's tables; on the simulator a line under the title says so, beside the figures."""
        if sim:
            title, _, rest = text.partition("\n")
            text = f"{title}\n{SIM_MARK}" + ("\n" + rest if rest else "")
        parts.append(text)

    if s.get("latency"):
        add(_latency(s["latency"]))
    numba = doc.get("numba") or {}
    if numba:
        parts.append(
            "numba-cuda async_done: "
            + "; ".join(f"{loop}: {'works' if r.get('ok') else r.get('error')}" for loop, r in numba.items())
        )
    if s.get("cpu"):
        add(_cpu(s["cpu"]))
    if s.get("bubble"):
        add(_bubble(s["bubble"]))
    if s.get("throughput"):
        add(_throughput(s["throughput"]))
    if s.get("scale"):
        add(_scale(s["scale"]))
    if s.get("c"):
        add(_c(s["c"]))
    if s.get("lateness"):
        for block in report_lateness.render(s["lateness"]).split("\n\n"):
            add(block)
    problems = []
    for name in ("latency", "cpu", "throughput", "scale", "lateness"):
        problems += _errors(name, s.get(name) or {})
    for name in ("bubble", "c"):
        if s.get(name):
            problems += _errors(name, {"": s[name]})
    if problems:
        wrapped = [textwrap.fill(p, WIDTH, subsequent_indent="    ", break_on_hyphens=False) for p in problems]
        parts.append("Problems:\n" + "\n".join(wrapped))
    parts.append(_targets(doc.get("targets", []), bool(env.get("simulator"))))
    if doc.get("notes"):
        parts.append("Notes:\n" + "\n".join(f"  {n}" for n in doc["notes"]))
    if env.get("simulator"):
        parts.append(SIM_BANNER)
    return "\n\n".join(parts) + "\n"
