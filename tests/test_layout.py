"""The package's layout: no import cycle (function-level imports included), and every path the
map in AUTHORING.md names exists."""

import ast
import re
from pathlib import Path

PACKAGE = "flashcourse"


def _modules(src: Path) -> dict[str, Path]:
    found = {}
    for path in (src / PACKAGE).rglob("*.py"):
        name = ".".join(path.relative_to(src).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for target in names:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
    return targets


def test_no_import_cycle(root):
    modules = _modules(root / "src")
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_map_in_authoring_names_real_paths(root):
    text = (root / "AUTHORING.md").read_text()
    section = text[text.index("## Map of the repository"):text.index("## The source format")]
    for path in re.findall(r"`((?:lessons|tests|gpu|checks|kernels|grader)/[\w./-]+)`", section):
        where = root / "src" / PACKAGE / path if path.startswith(("checks", "kernels",
                                                                 "grader")) else root / path
        assert where.exists(), path
