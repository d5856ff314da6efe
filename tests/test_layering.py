"""The house rules, enforced: imports point down DESIGN's layers, no import cycles (type-only edges count),
no module over 700 lines (a warning past 450).

The checker reads source only (tests/support/layering.py); the second half proves that it fails on
each kind of breach by running it on small packages written into a temp folder.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.support import composition
from tests.support.layering import LAYERS, MAX_LINES, WARN_LINES, check

PACKAGE = Path(__file__).resolve().parents[1] / "mateclaw_mem"


@pytest.fixture(scope="module")
def report():
    return check(PACKAGE, "mateclaw_mem")


def test_every_folder_has_a_layer(report):
    assert report.unknown == []


def test_imports_point_down(report):
    assert report.upward == [], "\n".join(report.upward)


def test_no_import_cycles(report):
    """Type-only edges (`if TYPE_CHECKING:`) count: a shared type goes in a module both sides import,
    or the lower side takes a Protocol or explicit arguments (docs/ENGINEERING.md)."""
    assert report.cycles == [], "\n".join(" <-> ".join(c) for c in report.cycles)


def test_no_module_over_the_limit(report):
    if report.long:
        listed = "\n".join(report.long)
        warnings.warn(f"modules over {WARN_LINES} lines:\n{listed}", stacklevel=1)
    assert report.too_long == [], "\n".join(report.too_long)


def test_one_composition_root():
    """Builders take explicit arguments (never the container), no part is wired after it is built,
    and who listens to whom is runtime/events.py's table alone (docs/ENGINEERING.md, the three tables)."""
    assert composition.check(PACKAGE, "mateclaw_mem") == []


def test_the_parts_build_order_is_derived_and_complete():
    from mateclaw_mem.runtime.services import BUILD_ORDER, Services

    listed = [name for name, value in vars(Services).items() if type(value).__name__ == "_service"]
    assert list(BUILD_ORDER) == listed and len(set(listed)) == len(listed)


# -- the checker can fail ------------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent != root and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
        path.write_text(text)
    return root


def test_an_upward_import_is_caught(tmp_path):
    root = _package(tmp_path, {
        "workspace/store.py": "from pkg.memory.extraction import service\n",
        "memory/extraction/service.py": "from pkg.workspace import store\n",
    })
    r = check(root, "pkg")
    assert len(r.upward) == 1
    assert r.upward[0].startswith("workspace/store.py:1 imports pkg.memory.extraction.service")


def test_a_lazy_upward_import_is_caught_too(tmp_path):
    root = _package(tmp_path, {"markdown/sections.py": "def f():\n    from pkg.api import app\n", "api/app.py": ""})
    assert [u.split(" imports ")[0] for u in check(root, "pkg").upward] == ["markdown/sections.py:2"]


def test_an_upward_import_under_type_checking_still_counts_as_upward(tmp_path):
    root = _package(tmp_path, {
        "index/search.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.runtime import services\n",
        "runtime/services.py": "",
    })
    assert len(check(root, "pkg").upward) == 1


def test_a_cycle_is_caught_and_so_is_a_type_only_one(tmp_path):
    root = _package(tmp_path, {
        "memory/a.py": "from pkg.memory import b\n",
        "memory/b.py": "def f():\n    from pkg.memory.c import x\n",
        "memory/c.py": "from pkg.memory.a import y\n",
        "index/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.index.e import z\n",
        "index/e.py": "from pkg.index import d\n",
        "index/f.py": "from pkg.index import g\n",  # one way only: no cycle
        "index/g.py": "",
    })
    assert check(root, "pkg").cycles == [["pkg.index.d", "pkg.index.e"], ["pkg.memory.a", "pkg.memory.b", "pkg.memory.c"]]


def test_a_cycle_both_of_whose_edges_are_type_only_is_caught(tmp_path):
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.markdown.{} import T\n"
    root = _package(tmp_path, {"markdown/p.py": guarded.format("q"), "markdown/q.py": guarded.format("p")})
    assert check(root, "pkg").cycles == [["pkg.markdown.p", "pkg.markdown.q"]]


def test_a_long_module_and_a_folder_without_a_layer_are_caught(tmp_path):
    root = _package(tmp_path, {"llm/client.py": "x = 1\n" * (MAX_LINES + 1), "gadgets/thing.py": "",
                               "llm/big.py": "x = 1\n" * (WARN_LINES + 1)})
    r = check(root, "pkg")
    assert r.too_long == [f"llm/client.py: {MAX_LINES + 1} lines (limit {MAX_LINES})"]
    assert r.long == [f"llm/big.py: {WARN_LINES + 1} lines (over {WARN_LINES}: look at its design)"]
    assert r.unknown == ["gadgets/: a folder in no layer"]


def test_the_layers_are_designs_order():
    tops = [names[0] for names in LAYERS]
    assert tops == ["settings", "markdown", "workspace", "index", "memory", "runtime", "cli"]


def test_the_composition_rules_catch_each_breach(tmp_path):
    root = _package(tmp_path, {
        "runtime/services.py": "class Services:\n    pass\n",
        "runtime/build/index.py": (
            "from pkg.runtime.services import Services\n"
            "def search(services: Services):\n    pass\n"
            "def watcher(settings, parts: 'Container'):\n    pass\n"
            "def proxy(settings):\n    p = object()\n    p.upstream = 1\n    return p\n"
            "def reranker(settings, client: ModelClient | None):\n    pass\n"
            "def aml(settings, model: ModelProvider, ask: Callable[[], ModelClient | None]):\n    pass\n"),
        "memory/x.py": (
            "class X:\n    @classmethod\n    def from_services(cls, s):\n        pass\n"
            "    def attach(self, s):\n        pass\n"
            "def build(services):\n    pass\n"
            "def wire(store, fi):\n    store.subscribe(fi.on_write)\n    store.attach(fi)\n"
            "class Facts:\n    def __init__(self, store, client: 'ModelClient') -> None:\n        pass\n"
            "def open_service(settings, *, model: ModelClient | None = None):\n    pass\n"
            "def ask(client: ModelClient, question: str):\n    pass\n"),
        "runtime/events.py": "def wire(store, fi):\n    store.subscribe(fi.on_write)\n",
    })
    found = {f.split(" ", 1)[0]: f.split(" ", 1)[1] for f in composition.check(root, "pkg")}
    assert found == {
        "memory/x.py:3": "defines from_services(): a part is built whole by its builder",
        "memory/x.py:5": "defines attach(): a part is built whole by its builder",
        "memory/x.py:7": "defines build(services, ...): take explicit arguments",
        "memory/x.py:10": "calls .subscribe(): listeners go in runtime/events.py",
        "memory/x.py:11": "uses .attach: a part is built whole by its builder",
        "runtime/build/index.py:1": "imports pkg.runtime.services: a builder takes explicit arguments, never the container",
        "runtime/build/index.py:2": "search(services: Services) takes the container",
        "runtime/build/index.py:4": "watcher(parts: 'Container') takes the container",
        "runtime/build/index.py:8": "sets .upstream on a built part: give it a constructor argument",
        "runtime/build/index.py:10": ("reranker(client: ModelClient | None) takes the model client as a value:"
                                      " hand it over as a provider (ModelProvider)"),
        "memory/x.py:13": ("__init__(client: 'ModelClient') takes the model client as a value:"
                           " hand it over as a provider (ModelProvider)"),
        "memory/x.py:15": ("open_service(model: ModelClient | None) takes the model client as a value:"
                           " hand it over as a provider (ModelProvider)"),
    }  # runtime/events.py's own subscribe is the table's: not a breach; a provider, or a client used
    # for a call (`ask`), is no hand-over
