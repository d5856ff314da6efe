"""Export and import of an agent's memory files (`mateclaw-mem export` / `import`).

Export writes the files exactly as on disk (frontmatter included) to a zip or a folder, with a
`manifest.json` (format version, agent, time, every file's sha256). Import takes such an export or
any folder of .md files (a MateClaw/OpenClaw agent folder, an Obsidian vault) and sends every file
through the one writer (`WorkspaceStore`, actor "import"): compare-and-swap against the version the
plan read, history, ceilings with archive, pinned sections. All writes of one import carry one batch
id (`import-<agent>-<YYYYmmddTHHMMSS>`), so `undo_batch` takes the whole import back.

A file that exists and differs follows the strategy: `skip` (default — a person's file is never
clobbered silently), `overwrite`, or `merge` (append the incoming sections and lines not present).
A file that is still exactly its seed is replaced under every strategy: `init` then `import` is the
normal way in, and a seed is nobody's edit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, InvalidPathError, MateclawError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.merge import append_missing
from mateclaw_mem.workspace.import_source import MANIFEST, Limits, SourceFile, read_source
from mateclaw_mem.workspace.paths import check_agent, check_relative, owner_dirname
from mateclaw_mem.workspace.listing import ALWAYS_ON
from mateclaw_mem.workspace.store import WorkspaceStore, atomic_write, sha256
from mateclaw_mem.workspace.walk import normalise_owner, walk_files

log = logging.getLogger(__name__)

ACTOR = "import"
FORMAT = "mateclaw-mem-export"
FORMAT_VERSION = 1
STRATEGIES: tuple[str, ...] = ("skip", "overwrite", "merge")
WRITES = ("create", "overwrite", "merge")


@dataclass(frozen=True)
class ExportedFile:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ExportResult:
    agent: str
    owner: str | None
    out: Path
    files: list[ExportedFile]
    skipped: list[tuple[str, str]]  # (path, reason)
    history_files: int = 0


@dataclass(frozen=True)
class ImportItem:
    source: str  # path inside the source
    rel: str  # target path inside the agent's (or owner's) folder; "" when skipped before mapping
    owner: str | None
    action: str  # create | overwrite | merge | unchanged | conflict | skip | failed
    reason: str = ""
    archived: tuple[str, ...] = ()  # where a ceiling moved cut text
    text: str = field(default="", repr=False, compare=False)  # what would be written
    expected_sha: str = field(default="", repr=False, compare=False)  # the version the plan read
    incoming: str = field(default="", repr=False, compare=False)  # the file as it came in


@dataclass(frozen=True)
class ImportReport:
    agent: str
    strategy: str
    dry_run: bool
    batch: str | None  # None for a dry run or when nothing was written
    items: list[ImportItem]
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.action] = out.get(item.action, 0) + 1
        return out

    @property
    def written(self) -> int:
        return sum(1 for i in self.items if i.action in WRITES)

    @property
    def failed(self) -> int:
        return sum(1 for i in self.items if i.action == "failed")

    def log_line(self, source: str, owner: str | None, ms: float) -> str:
        """`import default from notes.zip: updated MEMORY.md, notes/a.md (1 create, 1 merge) in 12 ms`."""
        files = [i.rel for i in self.items if i.action in WRITES]
        outcome = "updated" if files else "failed" if self.failed else "no_change"
        counts = ", ".join(f"{n} {action}" for action, n in sorted(self.counts().items()))
        who = self.agent + (f" (owner {owner})" if owner else "")
        return f"import {who} from {source}: {outcome} {', '.join(files)} ({counts or 'no files'}) in {ms:.0f} ms"


class Transfer:
    def __init__(self, store: WorkspaceStore, *, limits: Limits | None = None) -> None:
        self.store = store
        self.limits = limits or Limits()

    # -- export ----------------------------------------------------------------------------------

    def default_export_path(self, agent: str, owner: str | None = None, folder: Path | None = None) -> Path:
        stamp = f"{self.store.clock.now():%Y%m%d-%H%M%S}"
        who = f"{agent}-{owner_dirname(owner)}" if owner else agent
        return (folder or Path.cwd()) / f"mateclaw-{who}-{stamp}.zip"

    def export(
        self, agent: str, out: Path | None = None, *, owner: str | None = None, include_history: bool = False
    ) -> ExportResult:
        """Write the agent's Markdown files to `out` (a `.zip`, else a folder that must be new or
        empty). `.mateclaw/` state goes in only with `include_history` (that agent's kept versions)."""
        check_agent(agent)
        owner = self._owner(owner)
        base = self.store.agent_dir(agent, owner)
        if not base.is_dir():
            raise NotFoundError(f"agent {agent!r} has no memory files in {self.store.root}")
        out = Path(out) if out is not None else self.default_export_path(agent, owner)
        self._check_out(out)
        files: dict[str, bytes] = {}
        skipped: list[tuple[str, str]] = []
        for name, rel, file_owner in self._exported(agent, owner, base, skipped):
            try:
                snap = self.store.read(agent, rel, owner=file_owner)
            except MateclawError as exc:
                skipped.append((name, exc.message))
                continue
            files[name] = snap.text.encode("utf-8")  # lossless: the bytes on disk
        history: dict[str, bytes] = {}
        if include_history:
            hist_root = self.store.history_store.root / self.store.agent_key(agent, owner)
            if hist_root.is_dir():
                for p in sorted(hist_root.rglob("*")):
                    if p.is_file() and not p.is_symlink():
                        history[".mateclaw/history/" + p.relative_to(hist_root).as_posix()] = p.read_bytes()
        listed = [ExportedFile(rel, sha256(data), len(data)) for rel, data in files.items()]
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "agent": agent,
            "owner": owner,
            "exported_at": self.store.clock.now().isoformat(timespec="seconds"),
            "include_history": include_history,
            "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in listed],
        }
        if include_history:
            manifest["history_files"] = len(history)
        payload = {MANIFEST: (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8")}
        payload.update(files)
        payload.update(history)
        if out.suffix.lower() == ".zip":
            self._write_zip(out, payload)
        else:
            for rel, data in payload.items():
                atomic_write(out.joinpath(*rel.split("/")), data)
        return ExportResult(agent, owner, out, listed, skipped, len(history))

    def _owner(self, owner: str | None) -> str | None:
        # Without owner isolation nobody has a folder of their own: an owner is ignored, as by the store.
        return normalise_owner(owner) if self.store.owner_isolation else None

    def _exported(
        self, agent: str, owner: str | None, base: Path, skipped: list[tuple[str, str]]
    ) -> Iterator[tuple[str, str, str | None]]:
        """(path in the export, rel, owner) of every file in `base`, the agent's or the owner's folder.
        A whole-agent export takes owners' folders too, also with isolation off: a backup leaves
        nobody's files behind. Hidden files are state or editor leftovers and stay behind silently;
        anything else left out is reported in `skipped`."""

        def left_out(path: Path, reason: str) -> None:
            if base in path.parents:
                skipped.append((path.relative_to(base).as_posix(), reason))

        for f in walk_files(self.store.root, [agent], owner_isolation=True, left_out=left_out):
            if base not in f.path.parents:
                continue  # another owner's file, in an owner's export
            name = f.path.relative_to(base).as_posix()
            if f.path.is_symlink():
                skipped.append((name, "symbolic link, not followed"))
            elif owner is not None:
                yield name, name, owner
            else:
                yield name, *self._target(agent, name, None)

    def _check_out(self, out: Path) -> None:
        root = self.store.root.resolve()
        target = out.resolve()
        if target == root or root in target.parents:
            # Files put there would bypass the writer (no history, no index) and could become an agent.
            raise InvalidInputError(f"{out} is inside the workspace; export to a place outside {self.store.root}")
        if out.suffix.lower() == ".zip":
            if out.exists():
                raise InvalidInputError(f"{out} already exists; choose another --out")
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InvalidInputError(f"{out} already exists and is not an empty folder; choose another --out")

    def _write_zip(self, out: Path, payload: dict[str, bytes]) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:12]}.tmp"
        stamp = self.store.clock.now().timetuple()[:6]
        try:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for rel, data in payload.items():
                    info = zipfile.ZipInfo(rel, date_time=stamp)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o100644 << 16  # a regular file, never a link
                    zf.writestr(info, data)
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    # -- import ----------------------------------------------------------------------------------

    def import_(
        self,
        path: Path,
        *,
        agent: str | None = None,
        default_agent: str = "default",
        owner: str | None = None,
        strategy: str = "skip",
        dry_run: bool = False,
    ) -> ImportReport:
        """Plan the import of `path`, and unless `dry_run`, write it as one undoable batch."""
        t0 = time.monotonic()
        owner = self._owner(owner)
        if strategy not in STRATEGIES:
            raise InvalidInputError(f"unknown import strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
        source = read_source(Path(path), self.limits)
        manifest = source.manifest or {}
        # Into an agent that exists (`init` first): an import never makes a half agent by itself.
        target = self.store.require_agent(agent or _manifest_agent(manifest) or default_agent)
        notes = [source.manifest_error] if source.manifest_error else []
        expected = {
            f["path"]: f.get("sha256") for f in manifest.get("files", []) if isinstance(f, dict) and "path" in f
        }
        present = {f.path for f in source.files}
        notes += [f"{p} is listed in the manifest but missing from {source.name}" for p in expected
                  if p not in present]
        items = [self._plan(target, owner, f, strategy, expected.get(f.path)) for f in source.files]
        if dry_run or not any(i.action in WRITES for i in items):
            report = ImportReport(target, strategy, dry_run, None, items, notes)
        else:
            batch = self._batch_id(target)
            done = [self._apply(target, item, batch) if item.action in WRITES else item for item in items]
            wrote = any(i.action in WRITES for i in done)
            report = ImportReport(target, strategy, False, batch if wrote else None, done, notes)
        if not dry_run:  # a dry run writes nothing: the face shows its plan
            log.info("%s", report.log_line(source.name, owner, (time.monotonic() - t0) * 1000))
        return report

    def _plan(self, agent: str, owner: str | None, f: SourceFile, strategy: str, want_sha: Any) -> ImportItem:
        if f.data is None:
            return ImportItem(f.path, "", owner, "skip", f.skipped)
        if isinstance(want_sha, str) and want_sha and sha256(f.data) != want_sha:
            return ImportItem(f.path, "", owner, "skip", "does not match the sha256 in the manifest (damaged?)")
        try:
            text = f.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ImportItem(f.path, "", owner, "skip", f"not UTF-8 text (byte {exc.start}); save it as UTF-8")
        if "\x00" in text:
            return ImportItem(f.path, "", owner, "skip", "contains NUL characters")
        rel, file_owner = self._target(agent, f.path, owner)
        return self._plan_file(agent, ImportItem(f.path, rel, file_owner, "create", text=text), strategy)

    def _plan_file(self, agent: str, item: ImportItem, strategy: str) -> ImportItem:
        """What to do with one decoded incoming file (`item.text`) against the file on disk now."""
        try:
            check_relative(item.rel)
            current = self.store.read(agent, item.rel, owner=item.owner)
        except MateclawError as exc:
            return replace(item, action="skip", reason=exc.message, text="")
        item = replace(item, expected_sha=current.sha, incoming=item.text)
        if not current.exists:
            return item
        if current.text == item.text:
            return replace(item, action="unchanged")
        if _is_seed(item.rel, current.text):
            return replace(item, action="overwrite", reason="replaces the untouched seed")
        if strategy == "overwrite":
            return replace(item, action="overwrite")
        if strategy == "merge":
            block, body = frontmatter.split(current.text)
            merged = block + append_missing(body, frontmatter.body(item.text))
            if merged == current.text:
                return replace(item, action="unchanged", reason="everything incoming is already there")
            return replace(item, action="merge", text=merged)
        return replace(item, action="conflict",
                       reason="exists and differs; kept as it is (use --strategy overwrite or merge)")

    def _target(self, agent: str, rel: str, owner: str | None) -> tuple[str, str | None]:
        """A file of a whole-agent export that lies in an owner's folder is that owner's file (isolation on)."""
        where = self.store.locate(self.store.root / agent / rel) if owner is None else None
        if where is not None and where[1] is not None:
            _, key, inner = where
            with contextlib.suppress(InvalidPathError):
                if f"{self.store.agent_key(agent, key)}/{inner}" == f"{agent}/{rel}":  # spelled as the store would
                    return inner, key
        return rel, owner

    def _apply(self, agent: str, item: ImportItem, batch: str) -> ImportItem:
        try:
            result = self.store.write(agent, item.rel, item.text, expected_sha=item.expected_sha, actor=ACTOR,
                                      owner=item.owner, reason=f"import ({item.action} from {item.source})",
                                      batch=batch)
        except ConflictError as exc:
            versions = self.store.history(agent, item.rel, owner=item.owner)
            if versions and versions[-1].batch == batch and item.action != "merge":
                # This import itself just made the file (a ceiling archived MEMORY.md's tail into the
                # archive the export also holds): nobody's edit, so merge into it.
                again = self._plan_file(agent, replace(item, text=item.incoming, action="create"), "merge")
                return self._apply(agent, again, batch) if again.action in WRITES else again
            return replace(item, action="failed", reason=exc.message)
        except MateclawError as exc:
            return replace(item, action="failed", reason=exc.message)
        if not result.changed:
            return replace(item, action="unchanged", reason="identical after the writer's rules")
        return replace(item, archived=result.archived)

    def _batch_id(self, agent: str) -> str:
        base = f"import-{agent}-{self.store.clock.now():%Y%m%dT%H%M%S}"
        batch, n = base, 1
        # Two imports in one second must stay two undoable runs.
        while self.store.history_store.batch(batch):
            n += 1
            batch = f"{base}-{n}"
        return batch


def _manifest_agent(manifest: dict[str, Any]) -> str | None:
    agent = manifest.get("agent") if manifest.get("format") == FORMAT else None
    return agent if isinstance(agent, str) and agent else None


def _is_seed(rel: str, text: str) -> bool:
    if rel not in ALWAYS_ON:
        return False
    seed = resources.files("mateclaw_mem.workspace") / "seeds" / rel
    try:
        return seed.read_text(encoding="utf-8") == text
    except OSError:
        return False
