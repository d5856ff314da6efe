"""Real services for the benchmarks: a temp workspace, Berlin time, the default agent seeded."""

from __future__ import annotations

from pathlib import Path

from mateclaw_mem.clock import Clock, SystemClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def bench_services(root: Path, clock: Clock | None = None, *, config: str = "") -> Services:
    """Rules-mode services on `root/ws`; `config` is more YAML for the bench's settings file."""
    cfg = root / "bench.yaml"
    cfg.write_text("timezone: Europe/Berlin\n" + config, encoding="utf-8")
    services = Services(load_settings(cfg, root / "ws"), clock or SystemClock())
    services.store.ensure_agent("default")
    return services
