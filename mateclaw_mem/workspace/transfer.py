"""Export and import of an agent's memory files (`mateclaw-mem export` / `import`, the HTTP snapshots).

Export writes the snapshot's files (snapshot_rules: the seed's whitelist, or every .md for a vault
import) to a zip or a folder, `manifest.json` first (format version, exportedAt, agentId, agentName,
every file's sha256), each file as on disk but without `enabled` / `sort_order`: the target decides
those. Import takes such an export or, as a vault import, any folder of .md files (a MateClaw/OpenClaw
agent folder, an Obsidian vault) into the agent the caller names — never the manifest's — and sends
every file through the one writer (`WorkspaceStore`, actor "import"): compare-and-swap against the
version the plan read, history, ceilings with archive, pinned sections. All writes of one import
carry one batch id (`import-<agent>-<YYYYmmddTHHMMSS>`), so `undo_batch` takes the whole import
back; a write that fails undoes the batch at once, so an import is all or nothing.

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
import shutil
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

from mateclaw_mem.errors import (
    ConflictError,
    InvalidInputError,
    InvalidPathError,
    MateclawError,
    NotFoundError,
    RejectedError,
)
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.merge import append_missing
from mateclaw_mem.workspace.import_source import MANIFEST, Source, SourceFile, read_source
from mateclaw_mem.workspace.journal import Step
from mateclaw_mem.workspace.listing import ALWAYS_ON
from mateclaw_mem.workspace.paths import check_agent, check_relative, owner_dirname
from mateclaw_mem.workspace.snapshot_records import (
    ACTOR,
    FORMAT,
    FORMAT_VERSION,
    STRATEGIES,
    WRITES,
    ExportedFile,
    ExportResult,
    ImportItem,
    ImportReport,
    Sidecar,
)
from mateclaw_mem.workspace.snapshot_rules import Limits, Policy, adopt_target_keys, strip_target_keys
from mateclaw_mem.workspace.store import WorkspaceStore, atomic_write, sha256
from mateclaw_mem.workspace.walk import normalise_owner, walk_files

log = logging.getLogger(__name__)

class Transfer:
    def __init__(self, store: WorkspaceStore, *, limits: Limits | None = None, policy: Policy | None = None,
                 sidecars: Sequence[Sidecar] = ()) -> None:
        self.store = store
        self.sidecars = {s.name: s for s in sidecars}
        self.policy = replace(policy or Policy(), data_files=frozenset(self.sidecars))
        self.limits = limits or self.policy.bounds

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
            files[name] = strip_target_keys(snap.text).encode("utf-8")  # the bytes on disk, less the target's keys
        for name, sidecar in self.sidecars.items() if owner is None else ():
            if data := sidecar.export(agent):
                files[name] = data
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
            "exportedAt": self.store.clock.now().isoformat(timespec="seconds"),
            "agentId": agent,
            "agentName": agent,
            "owner": owner,
            "includeHistory": include_history,
            "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in listed],
        }
        if include_history:
            manifest["historyFiles"] = len(history)
        payload = {MANIFEST: (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8")}
        payload.update(files)
        payload.update(history)
        if out.suffix.lower() == ".zip":
            self._write_zip(out, payload)
        else:
            for rel, data in payload.items():
                atomic_write(out.joinpath(*rel.split("/")), data)
        return ExportResult(agent, owner, out, listed, skipped, len(history))

    def export_stream(self, agent: str, *, owner: str | None = None) -> tuple[ExportResult, Iterator[bytes]]:
        """The export as a zip to stream (HTTP): written to a temp file that is gone once read."""
        folder = Path(tempfile.mkdtemp(prefix="mateclaw-export-"))
        try:
            result = self.export(agent, folder / self.default_export_path(agent, owner, folder).name, owner=owner)
        except BaseException:
            folder.rmdir()
            raise

        def chunks() -> Iterator[bytes]:
            try:
                with open(result.out, "rb") as fh:
                    while chunk := fh.read(256 * 1024):
                        yield chunk
            finally:
                with contextlib.suppress(OSError):
                    result.out.unlink()
                    folder.rmdir()

        return result, chunks()

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
            try:
                why = self.policy.skip_reason(name)
            except InvalidInputError as exc:
                why = exc.message
            if why:
                skipped.append((name, why))
            elif f.path.is_symlink():
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
        """Plan the import of `path`, and unless `dry_run`, write it as one undoable batch: all of
        it, or (a write failed) none of it — then RejectedError names the file and why."""
        t0 = time.monotonic()
        owner = self._owner(owner)
        if strategy not in STRATEGIES:
            raise InvalidInputError(f"unknown import strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
        # Into an agent that exists (`init` first), the one the caller names: a snapshot's manifest
        # says where it came from, never where it goes.
        target = self.store.require_agent(agent or default_agent)
        with read_source(Path(path), self.limits, self.policy) as source:
            manifest = source.manifest or {}
            notes = [source.manifest_error] if source.manifest_error else []
            came_from = manifest.get("agentId", manifest.get("agent"))
            if isinstance(came_from, str) and came_from and came_from != target:
                notes.append(f"exported from agent {came_from!r}; imported into {target!r}")
            expected = {
                f["path"]: f.get("sha256") for f in manifest.get("files", []) if isinstance(f, dict) and "path" in f
            }
            present = {f.path for f in source.files}
            notes += [f"{p} is listed in the manifest but missing from {source.name}" for p in expected
                      if p not in present]
            items = [self._plan(target, owner, f, strategy, expected.get(f.path), source) for f in source.files]
            if dry_run or not any(i.action in WRITES for i in items):
                report = ImportReport(target, strategy, dry_run, None, items, notes)
            else:
                batch = self._batch_id(target)
                steps, finish, staged = self._intent(target, items, source)
                # Every planned file staged in the journal before the first write: a kill mid-way is
                # finished at the next start (workspace/journal.py), never left half imported.
                with self.store.journal.operation("import", batch, steps, finish=finish, staged=staged):
                    done: list[ImportItem] = []
                    for item in items:
                        if any(i.action == "failed" for i in done):  # all or nothing: stop at the first failure
                            done.append(replace(item, action="skip", reason="not written: the import stopped"))
                        else:
                            done.append(self._apply(target, item, batch, source, strategy)
                                        if item.action in WRITES and item.source not in self.sidecars else item)
                    if not any(i.action == "failed" for i in done):  # a log, not a file: added once the files are in
                        done = [self._apply_sidecar(target, i, source) if i.source in self.sidecars
                                and i.action in WRITES else i for i in done]
                    self._all_or_nothing(source.name, done, batch)
                wrote = any(i.action in WRITES for i in done)
                report = ImportReport(target, strategy, False, batch if wrote else None, done, notes)
        if not dry_run:  # a dry run writes nothing: the face shows its plan
            log.info("%s", report.log_line(source.name, owner, (time.monotonic() - t0) * 1000))
        return report

    def import_upload(self, upload: BinaryIO, *, agent: str, strategy: str = "skip",
                      dry_run: bool = False, owner: str | None = None) -> ImportReport:
        """Import an uploaded zip (HTTP): copied to a temp file in chunks, so the archive is never
        held in memory, then read like any zip."""
        with tempfile.TemporaryDirectory(prefix="mateclaw-import-") as folder:
            path = Path(folder) / "upload.zip"
            with open(path, "wb") as out:
                shutil.copyfileobj(upload, out, 256 * 1024)
            if not zipfile.is_zipfile(path):
                raise InvalidInputError("the uploaded file is not a zip archive (send an export's .zip as `file`)")
            return self.import_(path, agent=agent, strategy=strategy, dry_run=dry_run, owner=owner)

    def _intent(self, agent: str, items: list[ImportItem], source: Source
                ) -> tuple[list[Step], dict[str, Any], dict[str, Path | bytes]]:
        """The journal's plan: each file to write with the text planned for it; a sidecar's bytes
        staged for `finish_sidecars` (it is applied after the files)."""
        steps = [Step(agent, i.owner, i.rel, i.old_sha, i.planned.encode("utf-8"), ACTOR,
                      f"import ({i.action} from {i.source})")
                 for i in items if i.action in WRITES and i.source not in self.sidecars]
        staged: dict[str, Path | bytes] = {}
        for i in items:
            if i.action in WRITES and i.source in self.sidecars and i.entry is not None:
                staged[i.source] = source.load(i.entry)
        return steps, ({"agent": agent, "sidecars": sorted(staged)} if staged else {}), staged

    def finish_sidecars(self, finish: dict[str, Any]) -> str:
        """The journal's finisher: the sidecars of an import killed after its files (their apply adds
        only the events not there yet, so one applied before the kill adds nothing again)."""
        added = 0
        for name in finish.get("sidecars", []):
            sidecar = self.sidecars.get(name)
            if sidecar is not None:
                data = Path(finish["staged"][name]).read_bytes()
                added += sidecar.apply(finish["agent"], sidecar.plan(data))
        return f"{added} fact event(s) added from the import's sidecar" if added else ""

    def _apply_sidecar(self, agent: str, item: ImportItem, source: Source) -> ImportItem:
        sidecar = self.sidecars[item.source]
        assert item.entry is not None
        try:
            added = sidecar.apply(agent, sidecar.plan(source.load(item.entry)))
        except MateclawError as exc:
            return replace(item, action="failed", reason=exc.message)
        return replace(item, reason=f"{added} fact events added")

    def _all_or_nothing(self, name: str, done: list[ImportItem], batch: str) -> None:
        failed = [i for i in done if i.action == "failed"]
        if not failed:
            return
        undone = ""
        if self.store.history_store.batch(batch):
            try:
                self.store.undo_batch(batch, actor=ACTOR)
            except MateclawError as exc:
                undone = f"; undoing the files already written failed too ({exc.message}): undo run {batch}"
        why = "; ".join(f"{i.rel or i.source}: {i.reason}" for i in failed)
        log.warning("import from %s failed and was undone: %s%s", name, why, undone)
        raise RejectedError(f"import from {name} failed, so nothing of it was kept: {why}{undone}")

    def _plan(self, agent: str, owner: str | None, f: SourceFile, strategy: str, want_sha: Any,
              source: Source) -> ImportItem:
        if f.skipped:
            return ImportItem(f.path, "", owner, "skip", f.skipped)
        if isinstance(want_sha, str) and want_sha and f.sha != want_sha:
            return ImportItem(f.path, "", owner, "skip", "does not match the sha256 in the manifest (damaged?)")
        if f.path in self.sidecars:
            sidecar = self.sidecars[f.path]
            new = sidecar.apply(agent, sidecar.plan(source.load(f)), dry_run=True)
            return ImportItem(f.path, f.path, None, "create" if new else "unchanged", f"{new} new fact events",
                              new_sha=f.sha, new_size=f.size, entry=f)
        rel, file_owner = self._target(agent, f.path, owner)
        item = ImportItem(f.path, rel, file_owner, "create", entry=f)
        return self._plan_file(agent, item, source.load(f).decode("utf-8"), strategy)[0]

    def _plan_file(self, agent: str, item: ImportItem, incoming: str, strategy: str) -> tuple[ImportItem, str]:
        """What to do with one decoded incoming file against the file on disk now, and the text to write."""
        try:
            check_relative(item.rel)
            current = self.store.read(agent, item.rel, owner=item.owner)
        except MateclawError as exc:
            return replace(item, action="skip", reason=exc.message), ""
        text = adopt_target_keys(incoming, current.text)
        item = replace(item, old_sha=current.sha, old_size=len(current.text.encode("utf-8")) if current.exists else 0)

        def out(action: str, new_text: str, reason: str = "") -> tuple[ImportItem, str]:
            data = new_text.encode("utf-8")
            return replace(item, action=action, reason=reason, new_sha=sha256(data), new_size=len(data),
                           planned=new_text), new_text

        if not current.exists:
            return out("create", text)
        if current.text == text:
            return out("unchanged", text)
        if _is_seed(item.rel, current.text):
            return out("overwrite", text, "replaces the untouched seed")
        if strategy == "overwrite":
            return out("overwrite", text)
        if strategy == "merge":
            block, body = frontmatter.split(current.text)
            merged = block + append_missing(body, frontmatter.body(text))
            if merged == current.text:
                return out("unchanged", merged, "everything incoming is already there")
            return out("merge", merged)
        return out("conflict", current.text, "exists and differs; kept as it is (use --strategy overwrite or merge)")

    def _target(self, agent: str, rel: str, owner: str | None) -> tuple[str, str | None]:
        """A file of a whole-agent export that lies in an owner's folder is that owner's file (isolation on)."""
        where = self.store.locate(self.store.root / agent / rel) if owner is None else None
        if where is not None and where[1] is not None:
            _, key, inner = where
            with contextlib.suppress(InvalidPathError):
                if f"{self.store.agent_key(agent, key)}/{inner}" == f"{agent}/{rel}":  # spelled as the store would
                    return inner, key
        return rel, owner

    def _apply(self, agent: str, item: ImportItem, batch: str, source: Source, strategy: str) -> ImportItem:
        assert item.entry is not None
        try:
            again, text = self._plan_file(agent, item, source.load(item.entry).decode("utf-8"), strategy)
            if (again.action, again.new_sha) != (item.action, item.new_sha):
                return replace(item, action="failed", reason="changed on disk after the plan was made; import again")
            result = self.store.write(agent, item.rel, text, expected_sha=item.old_sha, actor=ACTOR,
                                      owner=item.owner, reason=f"import ({item.action} from {item.source})",
                                      batch=batch)
        except ConflictError as exc:
            versions = self.store.history(agent, item.rel, owner=item.owner)
            if versions and versions[-1].batch == batch and item.action != "merge":
                # This import itself just made the file (a ceiling archived MEMORY.md's tail into the
                # archive the export also holds): nobody's edit, so merge into it.
                fresh = replace(item, action="create")
                merged, _ = self._plan_file(agent, fresh, source.load(item.entry).decode("utf-8"), "merge")
                return self._apply(agent, merged, batch, source, "merge") if merged.action in WRITES else merged
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


def _is_seed(rel: str, text: str) -> bool:
    if rel not in ALWAYS_ON:
        return False
    seed = resources.files("mateclaw_mem.workspace") / "seeds" / rel
    try:
        return seed.read_text(encoding="utf-8") == text
    except OSError:
        return False
