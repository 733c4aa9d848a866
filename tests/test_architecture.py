"""The floor plan, asserted from the source's own imports (design §2).

Imports go one way: ``gojson`` ← ``keys`` ← ``transport`` ← ``behaviors``; ``actors`` is a
runtime that imports none of them; ``interlink`` and ``devnet`` build on all of these, and
``devnet`` never imports ``interlink``; ``cli`` sits on top. Only ``interlink/app.py`` and
``cli/`` wire configuration and the devnet together. And a module stays small (``MAX_LINES``)
unless it mirrors one Go file. Comments say why; the figures behind them are in
``bench/README.md``, under the heading they name.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOUNDATION = {"clock", "errors"}  # single modules every layer may use
ALLOWED: dict[str, set[str]] = {
    "gojson": set(),
    "devnet_files": set(),
    "keys": {"gojson"},
    "transport": {"gojson", "keys"},
    "actors": set(),
    "behaviors": {"gojson", "devnet_files", "keys", "transport", "actors"},
    "devnet": {"gojson", "devnet_files", "keys", "transport", "actors", "behaviors"},
    "interlink": {"gojson", "devnet_files", "keys", "transport", "actors", "behaviors", "devnet"},
    "cli": {
        "gojson",
        "devnet_files",
        "keys",
        "transport",
        "actors",
        "behaviors",
        "devnet",
        "interlink",
    },
}
SOCKET_MODULES = {"socket", "aiohttp", "asyncio.streams", "http.server", "urllib.request"}
WIRING: set[tuple[str, ...]] = {("interlink", "configuration"), ("devnet",)}
"""The gateway's configuration and the devnet: what only the wiring may import."""
WIRED_BY: set[tuple[str, ...]] = {("interlink", "app"), ("cli",)}
"""The wiring: ``dmsgw serve``'s assembly, and the commands."""
MAX_LINES = 600
ROOMS: dict[str, set[str]] = {
    "plugin_errors": set(),
    "gateway_log": set(),
    "wire": {"plugin_errors"},
    "capacity": {"wire"},
    "translate": {"wire", "capacity"},
    "records": {"wire", "capacity", "translate"},
    "state": {"wire", "records"},
    "logs": {"plugin_errors", "wire", "translate", "records"},
    "pods": {"plugin_errors", "wire", "capacity", "translate", "records", "state", "logs"},
    "reports": {"wire", "capacity", "records"},
    "server": {"plugin_errors", "wire", "reports"},
    "configuration": {"capacity", "pods", "server"},
}
"""``interlink/``'s rooms, bottom up, and the rooms each may import. The gateway and the app
above them may import any; nothing imports those two but ``cli/``."""


def _sources() -> list[Path]:
    skip = {"tests", "bench", "docs", ".venv", "build"}
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not (set(p.relative_to(ROOT).parts) & skip)
        and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    )


def _module(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


@cache
def _imports(path: Path) -> frozenset[tuple[str, ...]]:
    """Every project module ``path`` imports, as path parts below the package root; plus the
    third-party and standard modules, as a one-element tuple prefixed with ``!``."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module(path) if path.name == "__init__.py" else _module(path)[:-1]
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                found |= {_resolve((*target, a.name)) for a in node.names}
            elif node.module and node.module.split(".")[0] == "dmsgw":
                found.add(tuple(node.module.split(".")[1:]))
            elif node.module:
                found.add(("!" + node.module,))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dmsgw":
                    found.add(tuple(alias.name.split(".")[1:]))
                else:
                    found.add(("!" + alias.name,))
    return frozenset(found)


def _resolve(parts: tuple[str, ...]) -> tuple[str, ...]:
    """``parts`` when it names a module or package, else its parent (an imported name)."""
    path = ROOT.joinpath(*parts)
    return parts if path.is_dir() or path.with_suffix(".py").is_file() else parts[:-1]


def _top(parts: tuple[str, ...] | list[str]) -> str:
    return parts[0] if parts else ""


def _package_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in _sources():
        source = _top(_module(path))
        for target in _imports(path):
            if target and not target[0].startswith("!") and _top(target) != source:
                edges.setdefault(source, set()).add(_top(target))
    return edges


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    used = _package_edges().get(package, set()) - FOUNDATION - {"", "__init__"}
    assert used <= ALLOWED[package], f"{package}/ imports {sorted(used - ALLOWED[package])}"


def test_no_package_level_import_cycle() -> None:
    edges = _package_edges()

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, set()) - seen:
            if nxt == goal or reaches(nxt, goal, seen | {nxt}):
                return True
        return False

    cyclic = sorted(p for p in edges if reaches(p, p, set()))
    assert cyclic == [], f"packages on an import cycle: {cyclic}"


def test_foundation_modules_import_nothing_of_the_project() -> None:
    for name in FOUNDATION:
        project = {t for t in _imports(ROOT / f"{name}.py") if t and not t[0].startswith("!")}
        assert project == set(), f"{name}.py imports {project}"


def test_behaviors_open_no_sockets() -> None:
    for path in (ROOT / "behaviors").rglob("*.py"):
        opened = {t[0][1:] for t in _imports(path) if t[0].startswith("!")} & SOCKET_MODULES
        assert opened == set(), f"{path.relative_to(ROOT)} imports {sorted(opened)}"


def test_only_the_app_and_the_commands_import_the_configuration_and_the_devnet() -> None:
    offenders = []
    for path in _sources():
        module = tuple(_module(path))
        if any(module[: len(w)] == w for w in WIRED_BY):
            continue
        for target in _imports(path):
            for wired in WIRING:
                if target[: len(wired)] == wired and module[: len(wired)] != wired:
                    offenders.append(f"{path.relative_to(ROOT)} imports {'.'.join(target)}")
    assert offenders == [], "only interlink/app.py and cli/ may: " + "; ".join(sorted(offenders))


def test_modules_are_small_unless_they_mirror_one_go_file() -> None:
    """A module over ``MAX_LINES`` lines does more than one job, unless it mirrors one Go file
    of the DMS or of Kubernetes (its docstring says which: "Mirrors …"), where following the Go
    file is what keeps the two comparable."""
    large = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
        and "Mirrors " not in (ast.get_docstring(ast.parse(p.read_text())) or "")
    ]
    assert large == []


def test_no_module_waits_with_asyncio_wait_for() -> None:
    """On Python 3.11 ``asyncio.wait_for`` returns the result when a cancel arrives in the same
    turn, and the cancelled task goes on: a devnet's stop hung for good on one (issue 26).
    ``async with asyncio.timeout(…)`` keeps the cancel."""
    users = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in _sources()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "wait_for"
        and isinstance(node.value, ast.Name)
        and node.value.id == "asyncio"
    ]
    assert users == []


def _room(module: tuple[str, ...] | list[str]) -> str:
    return module[1] if len(module) > 1 and module[0] == "interlink" else ""


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_a_room_of_the_plugin_imports_only_the_rooms_below_it(room: str) -> None:
    used = {
        _room(target)
        for path in _sources()
        if _room(_module(path)) == room
        for target in _imports(path)
        if _room(target) not in ("", room)
    }
    assert used <= ROOMS[room], f"interlink/{room} imports {sorted(used - ROOMS[room])}"


def test_every_room_of_the_plugin_is_in_the_floor_plan() -> None:
    found = {_room(_module(p)) for p in (ROOT / "interlink").rglob("*.py")} - {"", "__init__"}
    assert found == set(ROOMS) | {"app", "gateway"}


def test_no_two_modules_share_a_name() -> None:
    """A reader (and a tool) that follows a module's name lands in one file."""
    by_name: dict[str, list[str]] = {}
    for path in _sources():
        if path.name != "__init__.py":
            by_name.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {n: ps for n, ps in by_name.items() if len(ps) > 1} == {}


FIGURE = re.compile(r"\d[\d.,]*\s*(?:ms|µs|us|ns|[KMG]iB|[kKMG]B)\b")
"""A timing or a size in prose: measured, it goes stale in a comment (bench/README.md)."""
QUOTED = re.compile(r'``.*?``|"[^"\n]*"', re.DOTALL)
"""Literal values (``"512MiB"``, a Go duration) are inputs the code reads, not figures."""
FIGURES_ALLOWED = {"devnet/resource_ledger.py", "interlink/capacity/node_capacity.py"}
"""GPU boards are named by their memory ("RTX 3090 24 GiB"): a name, not a measurement."""
POINTER = re.compile(r'bench/README\.md, "([^"]+)"')


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of ``path``, each with the line it starts on."""
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    statements = (node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Expr))
    for value in statements:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            yield value.lineno, value.value


def test_comments_and_docstrings_quote_no_measured_figures() -> None:
    """Comments say why and point to bench/README.md for the figure (issue 27)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {match.group()!r}"
        for path in _sources()
        if str(path.relative_to(ROOT)) not in FIGURES_ALLOWED
        for line, text in _prose(path)
        for match in FIGURE.finditer(QUOTED.sub("", text))
    ]
    assert found == [], "move the figure to bench/README.md: " + "; ".join(found)


def test_every_pointer_to_bench_readme_names_one_of_its_headings() -> None:
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    headings = {line.lstrip("#").strip() for line in readme if line.startswith("#")}
    named = {
        f"{path.relative_to(ROOT)}: {heading}"
        for path in _sources()
        for heading in POINTER.findall(re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text()))
        if heading not in headings
    }
    assert named == set()


def _test_modules_imported(path: Path) -> set[str]:
    """The test modules (and ``conftest``) that ``path`` imports: ``tests.test_x`` or
    ``tests.conftest``, or bare or relative (``test_x``, ``.test_x``, ``from . import test_x``)."""
    named: set[tuple[str, ...]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            module = tuple(node.module.split(".")) if node.module else ()
            named.add(module)
            named |= {(*module, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {tuple(a.name.split(".")) for a in node.names}
    modules = {name[:2] if name[:1] == ("tests",) else name[:1] for name in named}
    return {
        ".".join(module)
        for module in modules
        if module and (module[-1].startswith("test_") or module[-1] == "conftest")
    }


def test_no_test_module_imports_another() -> None:
    """What tests share lives in ``tests/support/`` (and its fixtures in ``tests/conftest.py``):
    a test module imported by another ties the two together and runs its set-up twice."""
    importers = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (found := _test_modules_imported(path))
    }
    assert importers == {}
