"""`mateclaw-mem doctor`: every database checked page by page, a damaged one set aside and rebuilt or
started anew (runtime/heal.py), and `--salvage FILE`: a set-aside log's readable rows copied back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.runtime import heal, recovery

if TYPE_CHECKING:
    from mateclaw_mem.runtime.services import Services


def check(services: Services) -> dict[str, Any]:
    """Check every database (quick_check); set the damaged ones aside unless a daemon has them open
    (`daemon` then says which), rebuild what is derived, and list every set-aside file on disk."""
    settings = services.settings
    services.heal_checked = True  # this is the check: building services below must not check again
    problems = heal.check_all(settings)
    databases = []
    for spec in heal.DATABASES:
        path = settings.state_dir / spec.name
        size = path.stat().st_size if path.exists() else None
        state = "damaged" if spec.name in problems else "ok" if size is not None else "not created yet"
        databases.append({"database": spec.name, "kind": "derived" if spec.derived else "log", "state": state,
                          "problem": problems.get(spec.name), "size_bytes": size or 0})
    out: dict[str, Any] = {"state_dir": str(settings.state_dir), "databases": databases, "set_aside_now": [],
                           "daemon": None}
    if problems:
        with heal.workspace_lock(settings) as daemon:
            if daemon is not None:
                out["daemon"] = daemon
            else:
                services.set_aside_now = heal.set_aside(settings, services.clock, problems)
        if services.set_aside_now:
            out["set_aside_now"] = [{"database": s.database, "file": str(s.moved_to), "problem": s.problem}
                                    for s in services.set_aside_now]
            out["rebuilt"] = _rebuild(services)
    out["set_aside"] = heal.report(settings)
    # Operations a crash interrupted: finished now (runtime/recovery.py), as the daemon's start would.
    out["finished_now"] = recovery.at_start(services)
    return out


def _rebuild(services: Services) -> dict[str, Any]:
    """Derived data refilled now (a CLI has no watcher to catch up later): the file index, the
    message index (the Add/Search service syncs it with the log when built), the fact projection."""
    from mateclaw_mem.runtime.index_ops import reindex

    settings = services.settings
    done: dict[str, Any] = {}
    if not settings.index_db.exists():
        report = reindex(services)
        done["index.db"] = {"files": report["files"], "chunks": report["chunks"], "messages": report["messages"]}
    if not settings.messages_db.exists():
        services.aml  # noqa: B018  (built for its sync with the log)
        done["messages.db"] = {"messages": services.message_index.watermark()}
    heal.after_build(services)
    return done


def salvage(services: Services, file: str) -> dict[str, Any]:
    """Copy the readable rows of a set-aside database back into the live one of the same name."""
    from mateclaw_mem.runtime import salvage as rows

    services.heal_checked = True  # the live file may be checked by opening it: nothing to set aside here
    path = Path(file).expanduser()
    if not path.is_absolute() and not path.exists():  # /health names it relative to the workspace
        path = services.settings.workspace / path
    path = path.resolve()
    if not path.is_file():
        raise NotFoundError(f"{file}: no such file (`mateclaw-mem doctor` lists the set-aside databases)")
    m = heal.SET_ASIDE.fullmatch(path.name)
    if m is None or m["db"] not in heal.BY_NAME:
        raise InvalidInputError(f"{file}: not a set-aside database (named like log.db.damaged-20261206T012233; "
                                "`mateclaw-mem doctor` lists them)")
    spec = heal.BY_NAME[m["db"]]
    into = services.settings.state_dir / spec.name
    if spec.derived:
        return {"source": str(path), "into": str(into), "derived": True, "copied": 0,
                "reason": f"{spec.name} is derived and was rebuilt ({spec.holds}): nothing to salvage; "
                          "delete the file when you like"}
    report = rows.salvage(path, into, skip=spec.derived_tables).to_dict()
    heal.record_salvage(path, report, services.clock.now().isoformat(timespec="seconds"))
    if spec.name == "log.db" and report["copied"]:
        # Turns that come back with their own ids may sit below what the indexes read up to.
        report["next"] = "`mateclaw-mem reindex` makes the recovered turns searchable"
    return report
