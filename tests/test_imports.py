"""The package's imports flow one way (ARCHITECTURE.md): no cycle, and no stage imports a later
one. Read from the source (every ``import``, at module level or inside a function), so a lazy
import counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayeslat"
# The stages in the order data flows; a module may import its own stage and earlier ones.
STAGES = (
    ("bayeslat.version", "bayeslat.errors", "bayeslat.files", "bayeslat.theory",
     "bayeslat.scaling", "bayeslat.mcmc", "bayeslat.compiled", "bayeslat.parallel",
     "bayeslat.checks"),
    ("bayeslat.data", "bayeslat.simulate"),
    ("bayeslat.models", "bayeslat.fitting"),
    ("bayeslat.adequacy", "bayeslat.decide"),
    ("bayeslat.report", "bayeslat.validate", "bayeslat.validate_page", "bayeslat.calibration"),
    ("bayeslat.api", "bayeslat.cli", "bayeslat.__main__", "bayeslat"),
)


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names if a.name.startswith("bayeslat")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(head + ([base] if base else []))
            if base.startswith("bayeslat"):
                found |= {resolve(f"{base}.{a.name}") for a in node.names}
    return found - {None, name}


def stage(name: str) -> int:
    """The stage of a module: that of the longest prefix listed in :data:`STAGES`."""
    best = max((prefix for group in STAGES for prefix in group
                if name == prefix or name.startswith(prefix + ".")), key=len)
    return next(i for i, group in enumerate(STAGES) if best in group)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_stage(graph):
    for name in graph:
        stage(name)  # raises where no prefix matches


def test_no_stage_imports_a_later_one(graph):
    later = [f"{name} (stage {stage(name)}) imports {dep} (stage {stage(dep)})"
             for name, deps in sorted(graph.items()) for dep in sorted(deps)
             if stage(dep) > stage(name)]
    assert later == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles of ``graph``, each as the path that closes it."""
    seen, path, found = set(), [], []

    def visit(name):
        if name in path:
            found.append(path[path.index(name):] + [name])
            return
        if name in seen:
            return
        seen.add(name)
        path.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        path.pop()

    for name in sorted(graph):
        visit(name)
    return found


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_the_walk_sees_a_cycle_and_a_late_import(tmp_path):
    """The checks above can fail: two modules importing each other, one lazily."""
    (tmp_path / "bayeslat").mkdir()
    (tmp_path / "bayeslat" / "theory.py").write_text("def f():\n    from bayeslat import decide\n")
    (tmp_path / "bayeslat" / "decide.py").write_text("from bayeslat.theory import f\n")
    known = {"bayeslat.theory": tmp_path / "bayeslat" / "theory.py",
             "bayeslat.decide": tmp_path / "bayeslat" / "decide.py"}
    deps = {name: imports(name, path, known) for name, path in known.items()}
    assert deps == {"bayeslat.theory": {"bayeslat.decide"}, "bayeslat.decide": {"bayeslat.theory"}}
    assert cycles(deps) == [["bayeslat.decide", "bayeslat.theory", "bayeslat.decide"]]
    assert stage("bayeslat.decide") > stage("bayeslat.theory")
