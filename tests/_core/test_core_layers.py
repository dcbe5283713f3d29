"""The core reads bottom-up too: every cimport and import between hvlite._core's modules goes to
the same layer or a lower one (the order below, written once here and in docs/architecture.md),
and every module belongs to a layer. Loops are test_layers.py's rule, which walks the core as
well."""
import test_layers

CORE = "hvlite._core"
# Bottom-up. A module belongs to the layer of its longest matching prefix.
LAYERS = [
    ("vocabulary", ["codes", "dtypes", "sync", "request", "liveness", "trace", "memory"]),
    ("kernels", ["kernels"]),
    ("algorithms", ["algorithms"]),
    ("shm", ["shm"]),
    ("tuning", ["tuning"]),
    ("negotiation", ["negotiation"]),
    ("execute", ["execute"]),
    ("faces", ["", "coordinator", "submission", "failure", "pending", "engine", "ps", "lean"]),
]


def layer_of(module, layers=LAYERS):
    """The index of `module`'s layer (module relative to hvlite._core; "" is the package)."""
    best = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or (prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"hvlite._core.{module} belongs to no layer: add it to LAYERS"
    return best[0]


def core_graph():
    def short(m):
        return m[len(CORE) + 1:] if m != CORE else ""
    return {short(m): {short(t) for t in targets if t == CORE or t.startswith(CORE + ".")}
            for m, targets in test_layers.graph().items() if m == CORE or m.startswith(CORE + ".")}


def upward(edges, layers=LAYERS):
    return [f"{m or CORE} ({layers[layer_of(m, layers)][0]}) imports {t} "
            f"({layers[layer_of(t, layers)][0]})"
            for m, targets in sorted(edges.items()) for t in sorted(targets)
            if layer_of(t, layers) > layer_of(m, layers)]


def test_the_walk_sees_the_cimports_it_must():
    edges = core_graph()
    assert "algorithms.algorithm" in edges["algorithms.ring"]        # a .pxd-only interface
    assert "execute.dispatch" in edges["coordinator"]
    assert "kernels.reduce" in edges["negotiation.agree"]
    assert len(edges) > 40


def test_every_core_module_has_a_layer():
    for module in core_graph():
        layer_of(module)


def test_core_imports_only_go_down():
    found = upward(core_graph())
    assert found == [], "cimports from a lower layer of the core to a higher one:\n" + "\n".join(found)


def test_an_upward_cimport_is_caught():
    edges = {"kernels.reduce": {"codes", "execute.fusion"}, "execute.fusion": {"kernels.reduce"}}
    assert upward(edges) == ["kernels.reduce (kernels) imports execute.fusion (execute)"]


def test_few_files_stay_at_the_root():
    root = [p for p in test_layers.PACKAGE.joinpath("_core").iterdir()
            if p.suffix in (".pyx", ".pxd", ".h", ".py")]      # sources; stubs (.pyi) aside
    assert len(root) <= 24, sorted(p.name for p in root)
