"""Layers import downward only, and no module imports itself back through others (docs/architecture.md).

The order, lowest first (a module may import its own layer and every layer below it):

    base            hybridperf/__init__, errors, jsonio, csvio, ops, stats, timing, atomic, guard:
                    vocabulary, safe I/O and the output guard
    devices         GPU and node specs, the catalog, name resolution
    datasets        the canonical kernel-record schema, loaders of public tables, the collector
    priors          the analytical models (roofline, GEMM tiles, memory, launch floor, collectives)
    residual_models features and the ONNX bundle runtime
    predictor       prior x residual with intervals: the kernel prediction path (and aic_kernels, the same
                    for aiconfigurator's perf-table schema, whose rows aic_rows checks)
    transfer        few-shot adaptation of the predictor to a new GPU (suggest, adapt, export, aic_calibrate)
    graphs          model families -> kernel graphs, composition, parallelism
    serving         engine schedulers over the graphs' step times
    training        fitting the residuals and the collectives model (offline; may read every layer above)
    cli             the commands

`datasets` sits under `priors`: the schema and loaders name and check what a row is, the priors price it.
`transfer` sits under `graphs`: a model's kernels are handed to it, it never builds a graph. `training`
sits just under `cli`: nothing at prediction time imports it. Imports anywhere in a module count, those
inside functions included, since they couple the modules as much as the ones at the top.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybridperf"

LAYERS = (
    ("hybridperf", "hybridperf.errors", "hybridperf.jsonio", "hybridperf.csvio", "hybridperf.ops",
     "hybridperf.stats", "hybridperf.timing", "hybridperf.atomic", "hybridperf.guard"),
    ("hybridperf.devices",),
    ("hybridperf.datasets",),
    ("hybridperf.priors",),
    ("hybridperf.residual_models",),
    ("hybridperf.predictor", "hybridperf.aic_kernels", "hybridperf.aic_rows"),  # aiconfigurator rows and predictor
    ("hybridperf.transfer",),
    ("hybridperf.graphs",),
    ("hybridperf.serving",),
    ("hybridperf.training",),
    ("hybridperf.cli", "hybridperf.__main__"),
)

#: (importer, imported) pairs that break the order today and cannot be fixed where they stand; each says why.
#: An entry that no longer occurs fails the test, so the list only shrinks.
ALLOWED_UPWARD: dict = {}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (top-level and inside functions);
    `from pkg import name` counts as importing pkg.name where that is a module, and pkg where it is not."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                submodules = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in files}
                targets.update(submodules if len(submodules) == len(node.names) else submodules | {mod})
        resolved = set()
        for t in targets:
            while t and t not in files:
                t = t.rpartition(".")[0]
            if t and t != name and t.split(".")[0] == root.name:
                resolved.add(t)
        graph[name] = resolved
    return graph


def layer_of(module: str, layers=LAYERS) -> int | None:
    """Index of the layer holding `module` (the longest listed prefix), or None if no layer lists it. The
    root package (a name without a dot) holds only itself, so that a new top-level module must be placed."""
    best, best_len = None, -1
    for i, names in enumerate(layers):
        for prefix in names:
            inside = "." in prefix and module.startswith(prefix + ".")
            if (module == prefix or inside) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def upward_imports(graph: dict[str, set[str]], layers=LAYERS) -> set[tuple[str, str]]:
    return {(m, t) for m, ts in graph.items() for t in ts if layer_of(t, layers) > layer_of(m, layers)}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


GRAPH = import_graph(PACKAGE)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in GRAPH if layer_of(m) is None)
    assert not unplaced, f"place these modules in LAYERS (tests/test_layering.py, docs/architecture.md): {unplaced}"


def test_layers_import_downward_only():
    found = upward_imports(GRAPH)
    new = sorted(found - set(ALLOWED_UPWARD))
    assert not new, "upward imports (importer, imported): " + "; ".join(f"{a} -> {b}" for a, b in new)
    stale = sorted(set(ALLOWED_UPWARD) - found)
    assert not stale, f"allowed upward imports that no longer occur; remove them from ALLOWED_UPWARD: {stale}"


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


def test_checks_catch_an_upward_import_and_a_cycle_inside_a_function(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.high import b\n",
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "from ..low import a\nfrom pkg.low import VALUE\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.low.a"] == {"pkg.high.b"} and graph["pkg.high.b"] == {"pkg.low", "pkg.low.a"}
    layers = (("pkg",), ("pkg.low",), ("pkg.high",))
    assert upward_imports(graph, layers) == {("pkg.low.a", "pkg.high.b")}
    assert cycles(graph) == [["pkg.high.b", "pkg.low.a"]]
    assert layer_of("pkg.other", (("pkg.low",),)) is None
    assert layer_of("pkg.other", (("pkg",), ("pkg.low",))) is None  # the root holds only itself
