"""Does the configured model answer, and how fast? One tiny chat call, at daemon start and on demand.

    probe = ModelProbe(settings, usage)
    probe.start()           # the daemon: in a background thread, never in the way of start-up or /health
    result = probe.run()    # `mateclaw-mem model check`: now, in this thread
    probe.status()          # {"state": "answering" | "not answering" | "probing" | "not probed yet", ...}

Before this, nothing checked the model until the first chat of the day failed in the background.
The probe has its own short-lived client: a short timeout and no retries (a model that needs longer
than `PROBE_TIMEOUT_SECONDS` to say one word is worth reporting, and waiting for three timeouts
would only delay the answer), and a few tokens at most, so it cannot occupy a local server. The
call is in the usage log like every other (step "probe"), and the result in `model_probes`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError, ModelError

if TYPE_CHECKING:
    from mateclaw_mem.llm.usage import UsageLog
    from mateclaw_mem.settings import Settings

log = logging.getLogger("mateclaw_mem.model_probe")

PROBE_TIMEOUT_SECONDS = 15.0  # never longer than the model's own model.timeout-seconds
PROBE_MAX_TOKENS = 4
PROBE_MESSAGES = [{"role": "user", "content": "Reply with the single word OK."}]


@dataclass(frozen=True)
class ProbeResult:
    answering: bool
    latency_ms: int
    model: str
    error_kind: str | None = None
    error: str | None = None

    def line(self) -> str:
        """`model: answering, 840 ms` / `model: not answering: <reason>`."""
        if self.answering:
            return f"model {self.model}: answering, {self.latency_ms} ms"
        return f"model {self.model}: not answering: {self.error}"


class ModelProbe:
    def __init__(self, settings: Settings, usage: UsageLog | None) -> None:
        self.settings = settings
        self.usage = usage
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._stopped = threading.Event()
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def timeout_seconds(self) -> float:
        return min(PROBE_TIMEOUT_SECONDS, float(self.settings.model.timeout_seconds))

    def run(self) -> ProbeResult:
        """Probe now (this thread) and record the result. Raises ConfigError in rules mode."""
        from mateclaw_mem.llm.client import ModelClient

        client = ModelClient.from_settings(self.settings, usage=self.usage, timeout_seconds=self.timeout_seconds,
                                           max_retries=0)
        with self._lock:
            self._client = client
        self._running.set()
        started = time.monotonic()
        try:
            client.chat(list(PROBE_MESSAGES), step="probe", max_tokens=PROBE_MAX_TOKENS, temperature=0.0)
            result = ProbeResult(True, _ms_since(started), client.model)
        except ModelError as exc:
            result = ProbeResult(False, _ms_since(started), client.model, exc.kind, exc.message)
        finally:
            self._running.clear()
            with self._lock:
                self._client = None
            client.close()
        if not self._stopped.is_set() and self.usage is not None:  # after close() the log is gone
            self.usage.record_probe(result.model, result.answering, result.latency_ms,
                                    error_kind=result.error_kind, error=result.error)
        return result

    def start(self) -> None:
        """Probe once in a daemon thread (the daemon calls this once its API listens)."""
        if self._thread is not None:
            return
        # "probing" from now on, not from whenever the thread gets going: a /health right after the
        # start must not say "not probed yet" about a probe already started.
        self._running.set()
        self._thread = threading.Thread(target=self._background, name="model-probe", daemon=True)
        self._thread.start()

    def _background(self) -> None:
        try:
            result = self.run()
        except MateclawError as exc:
            log.warning("model probe: %s", exc.message)
            return
        except Exception:  # the probe must never take anything down with it
            if not self._stopped.is_set():
                log.exception("model probe")
            return
        finally:
            self._running.clear()
        (log.info if result.answering else log.warning)("%s", result.line())

    def stop(self) -> None:
        """Shutdown: drop a probe still waiting for its answer (the server sees the connection close)."""
        self._stopped.set()
        with self._lock:
            client = self._client
        if client is not None:
            client.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def close(self) -> None:
        self.stop()

    def status(self) -> dict[str, Any]:
        """What `status` and `/health` show: the last probe recorded (by this process or another),
        or that one is under way."""
        last = self.usage.last_probe() if self.usage is not None else None
        if self._running.is_set():
            return {"state": "probing", "last": last}
        if last is None:
            return {"state": "not probed yet"}
        state = "answering" if last["answering"] else "not answering"
        return {"state": state, **last}


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
