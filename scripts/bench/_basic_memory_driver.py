"""basic-memory's half of vs_basic_memory.py, run with the python of basic-memory's own venv.

Not importable from our venv (basic-memory needs Python >= 3.12 and its own dependencies); the
bench starts it as a subprocess and reads one JSON object from its stdout. It drives basic-memory
through its own Python API, the calls its `bm reindex --search` command makes (checked against
basic-memory 0.24.1):

    index   reconcile_projects_with_config, then run_local_project_index_for_project(force_full,
            embeddings=False): the full-text index of the project folder, no vectors
    search  SearchService(create_search_repository(...), ...).search(SearchQuery(text=q,
            retrieval_mode=FTS), limit=k), timed per query in this process

State lives in --config-dir (BASIC_MEMORY_CONFIG_DIR: config.json and memory.db), so the bench
never touches the user's ~/.basic-memory. basic-memory rewrites front matter of the files it
syncs, so the bench hands it its own copy of the corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _configure(config_dir: Path, project: Path) -> object:
    """Point basic-memory at an isolated config dir with one project: the bench corpus."""
    config_dir.mkdir(parents=True, exist_ok=True)
    os.environ["BASIC_MEMORY_CONFIG_DIR"] = str(config_dir)
    os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")
    from loguru import logger

    # loguru's default handler logs DEBUG to stderr; basic-memory's own CLI sets INFO to a file.
    # Warnings only, so neither side pays for logging it would not do in use.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    config_file = config_dir / "config.json"
    if not config_file.exists():
        config_file.write_text(json.dumps({
            "projects": {"bench": {"path": str(project)}},
            "default_project": "bench",
            "index_changes": False,  # no watcher: the bench indexes once, explicitly
        }), encoding="utf-8")
    from basic_memory.config import ConfigManager

    return ConfigManager().config


async def _project(app_config: object):  # -> (session_maker, Project)
    from basic_memory import db
    from basic_memory.repository import ProjectRepository
    from basic_memory.services.initialization import reconcile_projects_with_config

    await reconcile_projects_with_config(app_config)
    _, session_maker = await db.get_or_create_db(db_path=app_config.database_path,
                                                 db_type=db.DatabaseType.FILESYSTEM)
    async with db.scoped_session(session_maker) as session:
        projects = await ProjectRepository().get_active_projects(session)
    found = [p for p in projects if p.name == "bench"]
    if not found:
        raise SystemExit(f"basic-memory has no project 'bench' in {os.environ['BASIC_MEMORY_CONFIG_DIR']}")
    return session_maker, found[0]


async def _index(app_config: object) -> dict:
    from basic_memory import db
    from basic_memory.index.local_project import (
        LocalProjectIndexRuntimeFactory,
        run_local_project_index_for_project,
    )
    from basic_memory.indexing.models import IndexFileJobStatus

    try:
        t0 = time.perf_counter()
        _, project = await _project(app_config)
        result = await run_local_project_index_for_project(
            project, runtime_factory=LocalProjectIndexRuntimeFactory(), force_full=True, embeddings=False)
        seconds = time.perf_counter() - t0
        failed = [r.reason for b in result.batch_results for r in b.file_results
                  if r.status is IndexFileJobStatus.failed]
    finally:
        await db.shutdown_db()
    return {"index_s": seconds, "files": result.total_files, "failed": len(failed),
            "failed_sample": failed[:3]}


async def _search(app_config: object, queries: list[str], limit: int, warm: int) -> dict:
    from basic_memory import db
    from basic_memory.markdown.entity_parser import EntityParser
    from basic_memory.markdown.markdown_processor import MarkdownProcessor
    from basic_memory.repository import EntityRepository
    from basic_memory.repository.search_repository import create_search_repository
    from basic_memory.schemas.search import SearchQuery, SearchRetrievalMode
    from basic_memory.services.file_service import FileService
    from basic_memory.services.search_service import SearchService

    try:
        session_maker, project = await _project(app_config)
        path = Path(project.path)
        processor = MarkdownProcessor(EntityParser(path), app_config=app_config)
        service = SearchService(
            create_search_repository(session_maker, project_id=project.id, app_config=app_config),
            EntityRepository(project_id=project.id), FileService(path, processor, app_config=app_config),
            session_maker=session_maker)

        async def one(q: str) -> list[str]:
            rows = await service.search(SearchQuery(text=q, retrieval_mode=SearchRetrievalMode.FTS), limit=limit)
            return [r.file_path for r in rows]

        for q in queries[:warm]:
            await one(q)
        latencies, results, errors = [], [], 0
        for q in queries:
            t = time.perf_counter()
            try:
                files = await one(q)
            except Exception as exc:  # a query basic-memory refuses counts as a miss, not a crash
                files, errors = [], errors + 1
                print(f"basic-memory refused {q!r}: {exc}", file=sys.stderr)
            latencies.append((time.perf_counter() - t) * 1000)
            results.append(files)
    finally:
        await db.shutdown_db()
    return {"latencies_ms": latencies, "results": results, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("index", "search", "version"))
    parser.add_argument("--config-dir", type=Path)
    parser.add_argument("--project", type=Path, help="the corpus folder basic-memory indexes")
    parser.add_argument("--queries", type=Path, help="JSON list of query strings (search)")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--warm", type=int, default=5)
    args = parser.parse_args()
    from importlib.metadata import version

    out: dict = {"version": version("basic-memory")}
    if args.command != "version":
        if args.config_dir is None or args.project is None:
            raise SystemExit("index and search need --config-dir and --project")
        app_config = _configure(args.config_dir, args.project.resolve())
        if args.command == "index":
            out |= asyncio.run(_index(app_config))
        else:
            queries = json.loads(args.queries.read_text(encoding="utf-8"))
            out |= asyncio.run(_search(app_config, queries, args.limit, args.warm))
    out["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
