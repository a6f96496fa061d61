"""The shape of the code: imports and calls only go downward.

* The Python package: no import cycle (every ``import`` that runs, at the
  top of a module or inside a function; ``if TYPE_CHECKING:`` blocks do not
  run); ``cudafd._core`` imports nothing of cudafd outside itself, so never
  the loop layer; ``cudafd._loops`` imports only the core and itself; the
  tools (``_cli``, ``_bench``, ``sim``, ``_jax``) import only the public
  package, the core and the tools' folders (never the loop layer itself);
  each loop module is at most
  MAX_LOOP_MODULE_LINES lines.
* The native core: the file-level call graph of ``native/core/*.c`` (an
  edge A -> B when A calls a function defined, non-static, in B) goes only
  to a lower layer of docs/design.md's diagram (NATIVE_LAYERS), so it has
  no cycle.
* No source file names a results folder (a folder under bench/results, or a
  run's name: a date and the GPU's name): the docs cite measurements, the
  code states the facts it relies on.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "cudafd"
NATIVE_CORE = ROOT / "native" / "core"
MAX_LOOP_MODULE_LINES = 400


# ---- the Python package ----------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST):
    """The Import/ImportFrom nodes that can run (not under ``if TYPE_CHECKING:``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """cudafd module -> the cudafd modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                bases = [alias.name for alias in node.names]
                names: list[str] = []
            else:
                if node.level:
                    base_parts = package.split(".")
                    if node.level > 1:
                        base_parts = base_parts[: -(node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                bases = [base]
                names = [alias.name for alias in node.names]
            for base in bases:
                if base not in modules:
                    continue
                subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                targets.update(subs)
                if len(subs) < len(names) or not names:  # a name of the module itself
                    targets.add(base)
        targets.discard(name)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    assert _cycles(import_graph()) == []


def test_the_core_imports_only_itself():
    for module, targets in import_graph().items():
        if module == "cudafd._core" or module.startswith("cudafd._core."):
            outside = {t for t in targets if not t.startswith("cudafd._core")}
            assert not outside, f"{module} imports {sorted(outside)}"


def test_the_loop_layer_imports_only_the_core_and_itself():
    for module, targets in import_graph().items():
        if module.startswith("cudafd._loops"):
            outside = {t for t in targets if not t.startswith(("cudafd._core", "cudafd._loops"))}
            assert not outside, f"{module} imports {sorted(outside)}"


def test_tools_import_only_the_public_package_and_the_core():
    tools = ("cudafd._cli", "cudafd._bench", "cudafd.sim", "cudafd._jax")
    for module, targets in import_graph().items():
        tool = next((t for t in tools if module == t or module.startswith(t + ".")), None)
        if tool is None:
            continue
        allowed = ("cudafd._core",) + tools
        bad = {t for t in targets if t != "cudafd" and not t.startswith(allowed)}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_loop_modules_are_small():
    for path in sorted((PACKAGE / "_loops").glob("*.py")):
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_LOOP_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_the_import_graph_is_what_the_checks_see():
    # The parser itself: a known downward edge, a lazy import inside a function, and
    # the hook that replaces an upward one.
    graph = import_graph()
    assert "cudafd._core.notifier" in graph["cudafd._core.fence"]
    assert "cudafd._loops.trio_run" in graph["cudafd._loops.detect"]  # imported on first use
    assert "cudafd._core.loop_hook" in graph["cudafd._loops"]
    assert "cudafd._loops" in graph["cudafd"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---- the native core ---------------------------------------------------------------

_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "defined"}
_DEFINITION = re.compile(r"^(?P<static>static\s+)?(?!typedef\b)[A-Za-z_][\w \t\*]*?\b(?P<name>[A-Za-z_]\w*)\s*\([^;{}]*\)"
                         r"(?:\s*__attribute__\s*\(\(.*?\)\))?\s*\{", re.M | re.S)
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _strip_c(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])+'", "' '", text)
    return re.sub(r"^[ \t]*#[^\n]*(?:\\\n[^\n]*)*", " ", text, flags=re.M)


def native_call_graph() -> dict[str, dict[str, set[str]]]:
    """file -> {file it calls: the functions it calls there}, for native/core/*.c."""
    texts = {p.name: _strip_c(p.read_text()) for p in sorted(NATIVE_CORE.glob("*.c"))}
    public: dict[str, str] = {}  # function -> the file defining it (not static)
    local: dict[str, set[str]] = {f: set() for f in texts}
    for f, text in texts.items():
        for m in _DEFINITION.finditer(text):
            name = m.group("name")
            if name in _KEYWORDS:
                continue
            if m.group("static"):
                local[f].add(name)
            else:
                assert public.setdefault(name, f) == f, f"{name} is defined in {public[name]} and {f}"
    graph: dict[str, dict[str, set[str]]] = {f: {} for f in texts}
    for f, text in texts.items():
        for m in _CALL.finditer(text):
            name = m.group(1)
            where = public.get(name)
            if where is None or where == f or name in local[f]:
                continue
            graph[f].setdefault(where, set()).add(name)
    return graph


# The layers of docs/design.md's diagram of native/core, from the bottom: a file
# calls only functions of files in a lower layer.
NATIVE_LAYERS = [
    {"driver.c"},
    {"queue.c", "contexts.c", "syncfd.c", "accounting.c", "fork.c"},
    {"waits.c"},
    {"waiters.c", "hostfunc.c"},
    {"ask.c"},
    {"watch.c", "notifier.c"},
]


def test_native_core_files_call_only_downward():
    graph = native_call_graph()
    layer = {f: i for i, files in enumerate(NATIVE_LAYERS) for f in files}
    assert set(layer) == set(graph), f"files not in NATIVE_LAYERS (docs/design.md): {set(graph) ^ set(layer)}"
    upward = {(f, g): sorted(fns) for f, callees in graph.items() for g, fns in callees.items() if layer[g] >= layer[f]}
    assert upward == {}, f"calls to a file in the same or a higher layer: {upward}"


def test_the_native_call_graph_is_what_the_check_sees():
    graph = native_call_graph()
    assert "cfd_fail" in graph["notifier.c"]["driver.c"]  # every layer reports errors through driver.c
    assert "cfd_lane_pop" in graph["waiters.c"]["waits.c"]
    assert "cfd_notifier_push" in graph["waits.c"]["queue.c"]
    assert graph["driver.c"] == {} and graph["queue.c"] == {}  # the bottom: they call no other file


# ---- results folders ----------------------------------------------------------------

_RESULTS = re.compile("bench/" + "results/[A-Za-z0-9]|" + r"\b20\d\d-[01]\d-[0-3]\d-[a-z]")
_SOURCE_SUFFIXES = {".py", ".c", ".h", ".rs", ".sh", ".toml", ".txt", ".ptx", ".cfg"}


def _source_files():
    for top in ("src", "native", "include", "rust", "tests", "bench", "tools", "examples", ".ci"):
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if not path.is_file() or rel.parts[:2] == ("bench", "results") or "target" in rel.parts:
                continue
            if path.suffix in _SOURCE_SUFFIXES or path.name in ("Makefile", "run", "aarch64") or path.suffix == "":
                yield path


def test_no_source_file_names_a_results_folder():
    named = []
    for path in _source_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _RESULTS.search(line):
                named.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not named, "\n".join(named)
