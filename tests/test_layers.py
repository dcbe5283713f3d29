"""The package reads bottom-up: every import of hvlite's own modules goes to the same layer or a
lower one, and no chain of imports comes back to where it started. Walks the source (Python by
its syntax tree, Cython by its import lines), lazy imports inside functions included."""
import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "hvlite"

# Bottom-up. A module belongs to the layer of its longest matching prefix.
LAYERS = [
    ("foundation", ["hvlite.errors", "hvlite.outputs"]),
    ("core", ["hvlite._core", "hvlite.work"]),
    ("tables", ["hvlite.ops", "hvlite.config", "hvlite.gpu.arrays", "hvlite.gpu.copy_engine",
                "hvlite.gpu.staging", "hvlite.gpu.cuda_aware", "hvlite.gpu.ring"]),
    ("state", ["hvlite.process_sets", "hvlite.runtime"]),
    ("host path", ["hvlite.submit"]),
    ("device path", ["hvlite.gpu"]),
    ("router", ["hvlite.route"]),
    ("front door", ["hvlite.collectives"]),
    ("libraries", ["hvlite.optim", "hvlite.compression", "hvlite.ps", "hvlite.timeline",
                   "hvlite.torch", "hvlite.run", "hvlite.elastic", "hvlite"]),
]

_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(hvlite[\w.]*)\s+c?import\s+([\w, ()*]+)"
                            r"|c?import\s+(hvlite[\w.]*))", re.M)


def modules():
    """{module name: file} for every .py / .pyx / .pxd of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".pyx", ".pxd"):
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.setdefault(".".join(parts), []).append(path)
    return found


def _resolve(target, names, known):
    """The modules an import statement reaches: `from a.b import c` is a.b.c when that is a
    module, else a.b."""
    out = set()
    for name in names:
        full = f"{target}.{name}"
        out.add(full if full in known else target)
    if not names:
        out.add(target)
    return {m for m in out if m in known}


def imports(name, paths, known):
    """hvlite modules that `name` imports."""
    out = set()
    for path in paths:
        text = path.read_text()
        if path.suffix == ".py":
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Import):
                    out |= _resolve(node.names[0].name, [], known) | {
                        a.name for a in node.names if a.name in known}
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = package.split(".")[:len(package.split(".")) - node.level + 1]
                        base = ".".join(up + ([node.module] if node.module else []))
                    if base.startswith("hvlite"):
                        out |= _resolve(base, [a.name for a in node.names], known)
        else:
            for m in _CYTHON_IMPORT.finditer(text):
                if m.group(1):
                    names = [n.strip(" ()") for n in m.group(2).split(",") if n.strip(" ()*")]
                    out |= _resolve(m.group(1), names, known)
                else:
                    out |= _resolve(m.group(3), [], known)
    out.discard(name)
    return out


def layer_of(module):
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS"
    return best[0]


def graph():
    known = modules()
    return {name: imports(name, paths, known) for name, paths in known.items()}


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_imports_it_must():
    edges = graph()
    assert "hvlite.submit" in edges["hvlite.collectives"]
    assert "hvlite.runtime" in edges["hvlite.submit"]
    assert "hvlite._core.codes" in edges["hvlite._core.coordinator"]     # a cimport
    assert "hvlite.errors" in edges["hvlite._core.codes"]                # a lazy import


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_only_go_down():
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
              for m, targets in sorted(graph().items()) for t in sorted(targets)
              if layer_of(t) > layer_of(m)]
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(upward)
