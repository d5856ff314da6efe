"""`serve` keeps the cyclic GC off while the daemon starts (cli/admin.py says why); the daemon turns
it back on once started, with the start-up's objects frozen out of later collections."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from mateclaw_mem.runtime.daemon import Daemon
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def test_the_gc_is_back_on_once_the_daemon_has_started_with_the_start_frozen(tmp_path: Path) -> None:
    from mateclaw_mem.api.app import create_app

    d = Daemon(Services(load_settings(None, tmp_path / "ws")), host="127.0.0.1", port=0,
               app_factory=lambda s, host: create_app(s, host=host))
    seen: dict[str, object] = {}

    def stop_when_ready() -> None:
        deadline = time.monotonic() + 60
        while not d.url and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # past `start()`: run_forever has handled the GC by now
        seen["enabled"], seen["frozen"] = gc.isenabled(), gc.get_freeze_count()
        d.request_stop()

    gc.disable()
    watcher = threading.Thread(target=stop_when_ready, daemon=True)
    watcher.start()
    try:
        d.run_forever()  # the main thread, as `serve` runs it (it installs signal handlers)
    finally:
        watcher.join(10)
        gc.unfreeze()
        gc.enable()
    assert seen["enabled"] is True
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000
