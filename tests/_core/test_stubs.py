"""Every compiled module that hvlite's Python imports has a .pyi stub beside it (editors and type
checkers see nothing in a .so), and each stub declares exactly the module's public names, so a
stub cannot fall behind the module it describes. No MPI job: importing the core starts none."""
import ast
import importlib
import inspect
import pathlib

import test_layers

CORE = test_layers.PACKAGE / "_core"


def compiled_imported_by_python():
    """Core modules (compiled: a .pyx) that a .py file of the package imports."""
    edges = test_layers.graph()
    known = test_layers.modules()
    found = set()
    for module, targets in edges.items():
        if not any(p.suffix == ".py" for p in known[module]) or module.startswith("hvlite._core"):
            continue
        for t in targets:
            if t.startswith("hvlite._core.") and any(p.suffix == ".pyx" for p in known[t]):
                found.add(t)
    return found


def stub_names(path):
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def module_names(module):
    return {n for n, v in vars(module).items() if not n.startswith("_")
            and not inspect.ismodule(v) and not (isinstance(v, type) and v.__module__ != module.__name__)}


def test_the_walk_finds_the_compiled_modules_python_imports():
    found = compiled_imported_by_python()
    assert {"hvlite._core.coordinator", "hvlite._core.codes", "hvlite._core.submission"} <= found


def test_every_compiled_module_python_imports_has_a_stub():
    missing = sorted(m for m in compiled_imported_by_python()
                     if not (test_layers.PACKAGE.parent / (m.replace(".", "/") + ".pyi")).exists())
    assert missing == [], f"compiled modules without a .pyi stub: {missing}"
    assert (test_layers.PACKAGE / "py.typed").exists()


def test_each_stub_declares_its_modules_public_names():
    wrong = []
    for stub in sorted(CORE.rglob("*.pyi")):
        name = ".".join(stub.relative_to(test_layers.PACKAGE.parent).with_suffix("").parts)
        module = importlib.import_module(name)
        have, declared = module_names(module), stub_names(stub)
        if have != declared:
            wrong.append(f"{stub.name}: missing {sorted(have - declared)}, "
                         f"not in the module {sorted(declared - have)}")
    assert wrong == [], "\n".join(wrong)


def test_a_stale_stub_is_caught(tmp_path):
    stub = tmp_path / "x.pyi"
    stub.write_text("def a() -> None: ...\nclass B: ...\nC: int\n")
    assert stub_names(stub) == {"a", "B", "C"}
