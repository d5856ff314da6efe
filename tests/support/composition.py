"""The composition root's rules, checked from source (no imports executed).

- A builder (`runtime/build/`) never takes the container: it imports nothing of `runtime.services`,
  and no parameter of it is called `services`/`container` or annotated `Services`/`Container`.
- No part is wired after it is built: no `from_services`, `attach`, `build(services, ...)` anywhere
  in the package, and no builder (nor `runtime/services.py`) sets an attribute on what it built.
- Who reacts to whose writes is one table: `.subscribe(` and `.add_listener(` are called only in
  `runtime/events.py`.
- The model is handed over one way, as a provider (`runtime/build/types.ModelProvider`,
  `Callable[[], ModelClient | None]` below runtime): no constructor, no builder and no parameter
  called `model` is annotated with a `ModelClient` value. Read from annotations (every parameter in
  the package has one: ruff and the type checker see to it); a function that only makes a call with
  a client it is given (`client: ModelClient`) is no hand-over and passes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.layering import imports, modules

BUILD = "runtime/build"
EVENTS = "runtime/events.py"
ROOT_MODULE = "runtime/services.py"
WIRING_NAMES = ("from_services", "attach")
LISTEN_CALLS = ("subscribe", "add_listener")
CONTAINER_NAMES = ("services", "container")
CONTAINER_TYPE = re.compile(r"\b(Services|Container)\b")
CLIENT_TYPE = re.compile(r"\bModelClient\b")
PROVIDER_TYPE = re.compile(r"\b(Callable|ModelProvider)\b")


def check(root: Path, package: str) -> list[str]:
    """Every breach, as `file:line what`."""
    known = modules(root, package)
    out: list[str] = []
    for path in known.values():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        builder = rel.startswith(BUILD + "/")
        if builder:
            out += [f"{rel}:{line} imports {target}: a builder takes explicit arguments, never the container"
                    for target, line, _ in imports(path, package, known) if target == f"{package}.runtime.services"]
        for node in ast.walk(tree):
            out += _wiring(rel, node, builder)
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr in LISTEN_CALLS and rel != EVENTS:
                out.append(f"{rel}:{node.lineno} calls .{call.attr}(): listeners go in {EVENTS}")
            if (builder or rel == ROOT_MODULE) and isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        out.append(f"{rel}:{node.lineno} sets .{t.attr} on a built part: give it a constructor argument")
    return sorted(out)


def _wiring(rel: str, node: ast.AST, builder: bool) -> list[str]:
    out = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        named = [a for a in params if a.arg != "self"]
        if node.name in WIRING_NAMES:
            out.append(f"{rel}:{node.lineno} defines {node.name}(): a part is built whole by its builder")
        if node.name == "build" and named and named[0].arg in CONTAINER_NAMES:
            out.append(f"{rel}:{node.lineno} defines build({named[0].arg}, ...): take explicit arguments")
        for a in named:
            note = ast.unparse(a.annotation) if a.annotation is not None else ""
            if builder and (a.arg in CONTAINER_NAMES or CONTAINER_TYPE.search(note)):
                out.append(f"{rel}:{node.lineno} {node.name}({a.arg}: {note or '?'}) takes the container")
            hands_over = builder or node.name == "__init__" or a.arg == "model"
            if hands_over and CLIENT_TYPE.search(note) and not PROVIDER_TYPE.search(note):
                out.append(f"{rel}:{node.lineno} {node.name}({a.arg}: {note}) takes the model client as a value:"
                           " hand it over as a provider (ModelProvider)")
    if isinstance(node, ast.Attribute) and node.attr in WIRING_NAMES and isinstance(node.ctx, ast.Load):
        out.append(f"{rel}:{node.lineno} uses .{node.attr}: a part is built whole by its builder")
    return out
