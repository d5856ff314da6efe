#!/usr/bin/env python3
"""Chat history import (issue 37.3): messages per second and peak RSS of `mateclaw-mem import-chats`.

    .venv/bin/python scripts/bench/import_chats.py [--messages 50000] [--per-conversation 20] [--format chatgpt]

Writes a JSONL history of `--messages` messages (user and assistant in turn, ~180 characters each,
conversations of `--per-conversation` messages spread over a year, one message in 200 holding a fake
API key for the redaction to find), then runs the CLI on it in a fresh process on a fresh workspace,
rules mode, as a person would: the whole file checked, written chunk by chunk, every conversation
handed to extraction through the gates (queued for the daemon). Measured from outside: the wall time
of the process (start-up included) and its own peak RSS (ru_maxrss of that child, os.wait4). A second
run of the same file (nothing new: the idempotence check) is timed too. The load average is printed
beside the figures: the machine may be shared.

Goals (issue 37.3): >= 2,000 messages/s in rules mode, peak RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import record

GOAL_RATE = 2000
GOAL_RSS_MB = 300
WORDS = ("garden", "tomatoes", "basil", "deadline", "project", "review", "meeting", "Lisbon", "flight", "invoice",
         "coffee", "tea", "python", "database", "migration", "budget", "family", "weekend", "hiking", "bicycle",
         "repair", "recipe", "lentils", "oven", "schedule")


def history(path: Path, messages: int, per_conversation: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    start = 1_700_000_000
    with path.open("w", encoding="utf-8") as f:
        for i in range(messages):
            conv, turn = divmod(i, per_conversation)
            text = " ".join(rng.choice(WORDS) for _ in range(28))
            if i % 200 == 0:
                text += " my key is sk-" + "".join(rng.choice("abcdef0123456789") for _ in range(40))
            when = start + conv * 12_600 + turn * 45  # a conversation every 3.5 h: a year for 50k messages
            row = {"role": "user" if turn % 2 == 0 else "assistant", "content": f"I think {text}.",
                   "timestamp": when, "conversation": f"conv-{conv:06d}"}
            f.write(json.dumps(row) + "\n")
    return path.stat().st_size


def chatgpt_export(jsonl: Path, path: Path) -> int:
    """The same history as ChatGPT's conversations.json: one linear `mapping` tree per conversation
    (ids, author, content parts, create_time, metadata as the export writes them): parsed whole."""
    convs: dict[str, list[dict]] = {}
    for line in jsonl.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        convs.setdefault(row["conversation"], []).append(row)
    out = []
    for cid, rows in convs.items():
        mapping = {"root": {"id": "root", "message": None, "parent": None, "children": ["m0"]}}
        for i, r in enumerate(rows):
            mid = f"m{i}"
            mapping[mid] = {"id": mid, "parent": "root" if i == 0 else f"m{i - 1}",
                            "children": [f"m{i + 1}"] if i + 1 < len(rows) else [],
                            "message": {"id": mid, "author": {"role": r["role"], "name": None, "metadata": {}},
                                        "create_time": r["timestamp"] + 0.25, "update_time": None,
                                        "content": {"content_type": "text", "parts": [r["content"]]},
                                        "status": "finished_successfully", "end_turn": True, "weight": 1.0,
                                        "metadata": {"model_slug": "gpt-4o", "request_id": "x" * 20},
                                        "recipient": "all", "channel": None}}
        out.append({"id": cid, "conversation_id": cid, "title": cid, "create_time": rows[0]["timestamp"],
                    "update_time": rows[-1]["timestamp"], "current_node": f"m{len(rows) - 1}", "mapping": mapping})
    path.write_text(json.dumps(out), encoding="utf-8")
    return path.stat().st_size


def run(env: dict[str, str], folder: Path, *args: str) -> tuple[float, float, dict]:
    """(seconds, peak RSS in MB, the --json summary) of one CLI process, measured from outside."""
    out_path, err_path = folder / "out.json", folder / "err.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "mateclaw_mem.cli.main", *args, "--json"], env=env,
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the max over all children
        seconds = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 10):
        raise SystemExit(f"import-chats failed ({code}): {err_path.read_text(encoding='utf-8')[-500:]}")
    return seconds, usage.ru_maxrss / 1024, json.loads(out_path.read_text(encoding="utf-8"))  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--per-conversation", type=int, default=20)
    parser.add_argument("--format", choices=("jsonl", "chatgpt"), default="jsonl",
                        help="chatgpt: the same history as a conversations.json, which is parsed whole")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-import-chats-") as tmp:
        root = Path(tmp)
        (root / "bench.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        env.update(MATECLAW_CONFIG=str(root / "bench.yaml"), MATECLAW_WORKSPACE=str(root / "ws"))
        subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "init"], env=env, check=True,
                       capture_output=True)
        export = root / "history.jsonl"
        size = history(export, args.messages, args.per_conversation)
        if args.format == "chatgpt":
            size = chatgpt_export(export, root / "conversations.json")
            export = root / "conversations.json"
        load = os.getloadavg()
        seconds, rss, summary = run(env, root, "import-chats", str(export))
        load_after = os.getloadavg()
        again, rss2, second = run(env, root, "import-chats", str(export))
    n = summary["new_messages"]
    if n != args.messages or second["new_messages"] != 0:
        raise SystemExit(f"imported {n} of {args.messages}, then {second['new_messages']} again: not idempotent")
    rate, rate2 = n / seconds, args.messages / again
    x = summary["extraction"]
    print(f"history: {args.messages:,} messages in {summary['conversations']:,} conversations, "
          f"{size / 2**20:.1f} MiB {args.format}, {len(summary['days'])} days")
    print(f"import:  {seconds:6.2f} s  {rate:8,.0f} messages/s  peak RSS {rss:6.1f} MB  "
          f"(load {load[0]:.2f} -> {load_after[0]:.2f}; {x['scheduled']:,} conversations queued for extraction, "
          f"{x['gated_out']:,} turned away by the gates)")
    print(f"again:   {again:6.2f} s  {rate2:8,.0f} messages/s  peak RSS {rss2:6.1f} MB  (nothing new: adds 0)")
    ok_rate, ok_rss = rate >= GOAL_RATE, rss <= GOAL_RSS_MB
    print(f"goals:   >= {GOAL_RATE:,} messages/s: {'ok' if ok_rate else 'MISSED'}; "
          f"<= {GOAL_RSS_MB} MB: {'ok' if ok_rss else 'OVER'}  (load average {os.getloadavg()[0]:.2f})")
    what = f"{args.messages // 1000}k {args.format}"
    record(f"import-chats, rules mode ({what})", round(rate), "msg/s", goal=f">= {GOAL_RATE}", met=ok_rate)
    record(f"import-chats peak RSS ({what})", round(rss, 1), "MB", goal=f"<= {GOAL_RSS_MB}", met=ok_rss)
    record(f"import-chats again, nothing new ({what})", round(rate2), "msg/s")
    sys.exit(0 if ok_rate and ok_rss else 1)


if __name__ == "__main__":
    main()
