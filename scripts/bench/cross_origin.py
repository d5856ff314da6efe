"""Can a web page reach the daemon? A randomized campaign with a real headless Chromium.

    .venv/bin/python scripts/bench/cross_origin.py [--trials 600] [--seed 7]

A real `mateclaw-mem serve` (the documented default: loopback, no API key) and an attacker's site,
a second HTTP server on loopback. Each trial picks at random one of the daemon's routes that change
something (every POST/PUT/PATCH/DELETE of its OpenAPI document, plus the Memory Browser's forms, MCP
and the chat proxy), a technique any page may use without asking, and where the attacking page comes
from:

- techniques: `fetch` with `mode: 'no-cors'` and a `text/plain`, urlencoded or multipart body; a form
  that submits itself (urlencoded, multipart, `text/plain` with a JSON-looking body); and DNS
  rebinding: the attacker's own name re-pointed at 127.0.0.1, so the page's requests to the daemon
  are *same-origin* (any method, JSON bodies, and it can read the answers);
- origins: another site (`attacker.test`, resolved to 127.0.0.1 by Chromium's host rules), the same
  site on another port (`127.0.0.1:<port>`), `localhost:<port>`.

Every body carries a marker unique to its trial. Chromium reports the status of every answer, even
those a `no-cors` page cannot see. Reads are tried as well: a cross-origin `fetch` of a memory file,
and the same read after rebinding; the page reports what it could read.

Afterwards every byte of the workspace (memory files, databases, their WAL files, history) is
scanned for the markers. Positive control: the same requests sent by a program that is not a browser
(no Origin, the daemon's own Host) - their markers must be found, which shows the scan and the
payloads would have caught a write. Goal (issue 35): 0 answers 2xx/3xx to a page, 0 markers on disk,
0 reads.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import start_daemon  # noqa: E402

CLI = [sys.executable, "-m", "mateclaw_mem.cli.main"]
AGENT = "default"
READ = f"/api/v1/agents/{AGENT}/workspace/memory/file?path=PROFILE.md"
SECRET = "the-profile-secret-7f3a"  # in PROFILE.md: a page that reads it has read the memory
TECHNIQUES = ("nocors-text", "nocors-form", "nocors-urlencoded", "form-urlencoded", "form-multipart",
              "form-text", "rebind-json")
ORIGINS = ("other-site", "same-site-other-port", "localhost-other-port")
# Routes that keep what they are sent: the positive control writes through these.
WS = f"/api/v1/agents/{AGENT}/workspace/memory"
WRITERS = [
    lambda m: ("POST", f"/api/v1/memory/{AGENT}/conversations/c1/turns", {"user": m, "assistant": "ok"}),
    lambda m: ("POST", "/v1/aml/add", {"request_id": m, "user_id": "u1", "session_id": "u1:s1",
                                       "messages": [{"role": "user", "content": m, "timestamp": 1683554160000}]}),
    lambda m: ("PUT", f"{WS}/file", {"path": f"notes/x-{m}.md", "content": m}),
    lambda m: ("POST", f"{WS}/write-memory", {"path": "MEMORY.md", "content": m, "strategy": "append"}),
]
# Extra routes that are not in the OpenAPI document (the Memory Browser, MCP, the chat proxy).
EXTRA = [("POST", "/mcp"), ("POST", "/v1/chat/completions"), ("POST", "/ui/files/PROFILE.md"),
         ("POST", "/ui/snapshot/preview"), ("POST", "/ui/dream/run"), ("POST", "/ui/facts/rebuild")]

PAGE = """<!doctype html><title></title><script>
const P = %s;
function body(kind) {
  const m = P.marker;
  if (kind === 'text') return JSON.stringify({text: m, user: m, content: m, query: m, path: 'x-' + m + '.md',
      messages: [{role: 'user', content: m}], request_id: m, user_id: m, session_id: m});
  if (kind === 'urlencoded') return new URLSearchParams({text: m, user: m, path: 'x-' + m + '.md', content: m});
  const f = new FormData(); f.append('text', m); f.append('user', m); f.append('content', m);
  f.append('file', new Blob([m], {type: 'text/markdown'}), 'x-' + m + '.md'); return f;
}
async function run() {
  const t = P.technique, url = P.daemon + P.path;
  let read = '';
  try {
    if (t.startsWith('nocors-')) {
      const kind = t.slice(7) === 'form' ? 'form' : t.slice(7);
      await fetch(url, {method: P.method, mode: 'no-cors', body: P.method === 'GET' ? undefined : body(kind)});
      try { read = await (await fetch(P.daemon + P.read)).text(); } catch (e) { read = ''; }
    } else if (t === 'rebind-json') {
      const r = await fetch(P.page_origin_daemon + P.path, {method: P.method,
          headers: {'Content-Type': 'application/json'}, body: P.method === 'GET' ? undefined : body('text')});
      await r.text();
      try { const g = await fetch(P.page_origin_daemon + P.read); read = await g.text(); } catch (e) { read = ''; }
    } else {
      const f = document.createElement('form');
      f.method = 'POST'; f.action = url;
      f.enctype = t === 'form-multipart' ? 'multipart/form-data'
        : t === 'form-text' ? 'text/plain' : 'application/x-www-form-urlencoded';
      const add = (n, v) => {
        const i = document.createElement('input'); i.type = 'hidden'; i.name = n; i.value = v; f.appendChild(i);
      };
      if (t === 'form-text') add('{"text": "' + P.marker + '", "x": "', '"}');
      else { add('text', P.marker); add('user', P.marker); }
      document.body.appendChild(f);
      document.title = 'submitting';
      f.submit();
      return;
    }
  } catch (e) { /* a refused or blocked request: what we want */ }
  window.READ = read;
  document.title = 'done';
}
window.addEventListener('load', run);
</script>"""


def page_html(url: str) -> str:
    """The attacking page, its parameters taken from its URL's query string."""
    q = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    return PAGE % json.dumps(q)


class Attacker:
    """The attacker's site: one page, its parameters in the query string."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = page_html(self.path).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def routes(base: str) -> list[tuple[str, str]]:
    """Every route of the daemon's OpenAPI document that changes something, its path filled in."""
    doc = httpx.get(f"{base}/openapi.json", timeout=30).json()
    out = []
    for path, ops in doc["paths"].items():
        for method in ops:
            if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                filled = path
                for name in ("agent", "agentId", "agent_id", "name"):
                    filled = filled.replace("{" + name + "}", AGENT)
                filled = (filled.replace("{user_id}", "u1").replace("{conversation_id}", "c1")
                          .replace("{type}", "user").replace("{key}", "k1").replace("{fact_id}", "1")
                          .replace("{pair_id}", "p1").replace("{task_id}", "t1").replace("{path}", "PROFILE.md"))
                while "{" in filled:  # any other parameter: a plain value
                    a = filled.index("{")
                    filled = filled[:a] + "x1" + filled[filled.index("}", a) + 1:]
                out.append((method.upper(), filled))
    return sorted(set(out)) + EXTRA


def scan(root: Path, markers: list[str]) -> set[str]:
    """The markers found anywhere under `root`, in any file (databases and WAL files included)."""
    found: set[str] = set()
    wanted = [(m, m.encode()) for m in markers]
    for p in root.rglob("*"):
        if p.is_file():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            found.update(m for m, b in wanted if b in data)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--controls", type=int, default=40, help="requests sent without a browser (positive control)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("cross_origin.py needs a Chromium (Debian: apt-get install chromium)")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="cross-origin-") as tmp:
        ws = Path(tmp) / "w"
        proc, url = start_daemon([*CLI, "--workspace", str(ws), "serve", "--port", "0"], Path(tmp) / "serve.log",
                                 env={k: v for k, v in os.environ.items() if k != "MATECLAW_CONFIG"},
                                 cwd=Path(tmp), until_ready=True)
        if url is None:
            sys.exit(f"the daemon did not start:\n{(Path(tmp) / 'serve.log').read_text()}")
        base = url.rstrip("/")
        port = urlparse(base).port
        attacker = Attacker()
        stats: dict[str, Counter[str]] = defaultdict(Counter)
        reads_leaked = 0
        markers: list[str] = []
        try:
            with httpx.Client(base_url=base, timeout=30) as h:
                profile = h.get(READ).json()
                h.put(f"/api/v1/agents/{AGENT}/workspace/memory/file",
                      json={"path": "PROFILE.md", "content": f"# PROFILE.md\n\n- secret: {SECRET}\n",
                            "expected_sha": profile.get("sha")}).raise_for_status()
                targets = routes(base)
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=chromium, args=[
                        "--no-sandbox", "--disable-gpu",
                        "--host-resolver-rules=MAP attacker.test 127.0.0.1",
                        # Chromium's own Private Network Access blocks a public page's requests to
                        # loopback; Firefox and Safari do not. Off, so the daemon's own guard is tested.
                        "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
                        "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"])
                    context = browser.new_context()
                    # DNS rebinding's second half: the attacker's page is already loaded from
                    # attacker.test at the daemon's port number, and the name now points at 127.0.0.1,
                    # so every later request of that page goes to the daemon as same-origin.
                    context.route(lambda u: "/__attack__" in u, lambda route: route.fulfill(
                        status=200, content_type="text/html", body=page_html(route.request.url)))
                    page = context.new_page()
                    answers: list[int] = []
                    page.on("response", lambda r: f":{port}/" in r.url and "/__attack__" not in r.url
                            and answers.append(r.status))
                    for trial in range(args.trials):
                        method, path = rng.choice(targets)
                        technique = rng.choice(TECHNIQUES)
                        origin = rng.choice(ORIGINS)
                        if technique.startswith("form-"):
                            method = "POST"  # a form can only GET or POST
                        host = {"other-site": "attacker.test", "same-site-other-port": "127.0.0.1",
                                "localhost-other-port": "localhost"}[origin]
                        if technique == "rebind-json":
                            host = "attacker.test"  # rebinding needs a name the attacker controls
                        marker = f"xo{trial:05d}m{rng.randrange(10**8):08d}"
                        markers.append(marker)
                        params = {"daemon": base, "path": path, "method": method, "technique": technique,
                                  "marker": marker, "read": READ, "page_origin_daemon": f"http://attacker.test:{port}"}
                        answers.clear()
                        query = str(httpx.QueryParams(params))
                        page.goto(f"http://attacker.test:{port}/__attack__?{query}" if technique == "rebind-json"
                                  else f"http://{host}:{attacker.port}/?{query}")
                        try:
                            if technique.startswith("form-"):
                                page.wait_for_url(lambda u: f":{port}/" in u, timeout=10_000)
                                page.wait_for_load_state("load", timeout=10_000)
                            else:
                                page.wait_for_function("document.title === 'done'", timeout=10_000)
                                got = page.evaluate("window.READ || ''")
                                if SECRET in got:
                                    reads_leaked += 1
                        except Exception as exc:  # a page that never finished: counted, looked at below
                            stats[technique]["page errors"] += 1
                            if trial < 3:
                                print(f"trial {trial} ({technique}): {type(exc).__name__}", file=sys.stderr)
                        row = stats[technique]
                        row["trials"] += 1
                        row["reached"] += bool(answers)
                        for s in answers:
                            row["2xx/3xx" if s < 400 else str(s) if s in (403, 421) else "other 4xx/5xx"] += 1
                    browser.close()
                found = scan(ws, markers)
                # Positive control: the same kinds of requests from a program (no Origin, our Host).
                control_markers: list[str] = []
                control_status: Counter[int] = Counter()
                for i in range(args.controls):
                    m = f"ctl{i:04d}m{rng.randrange(10**8):08d}"
                    control_markers.append(m)
                    method, path, payload = WRITERS[i % len(WRITERS)](m)
                    r = h.request(method, path, json=payload)
                    control_status[r.status_code] += 1
                control_found = scan(ws, control_markers)
        finally:
            attacker.server.shutdown()
            proc.terminate()
            proc.wait(timeout=30)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.trials} trials over {len(targets)} routes, "
          f"seed {args.seed}")
    cols = ["trials", "reached", "2xx/3xx", "403", "421", "other 4xx/5xx", "page errors"]
    print(f"{'technique':<20}" + "".join(f"{c:>14}" for c in cols))
    total: Counter[str] = Counter()
    for t in TECHNIQUES:
        total.update(stats[t])
        print(f"{t:<20}" + "".join(f"{stats[t][c]:>14}" for c in cols))
    print(f"{'all':<20}" + "".join(f"{total[c]:>14}" for c in cols))
    print("(reached: requests the daemon answered; a trial not reached is one the browser itself refused to send,"
          " e.g. a no-cors PUT or DELETE)")
    print(f"markers of the pages' requests found on disk: {len(found)} of {len(markers)}")
    print(f"memory read by a page: {reads_leaked} of {args.trials}")
    print(f"positive control (same requests, not from a browser): {len(control_found)} of {len(control_markers)} "
          "markers found on disk (> 0: the scan would have seen a write); answers "
          f"{dict(sorted(control_status.items()))}")


if __name__ == "__main__":
    main()
