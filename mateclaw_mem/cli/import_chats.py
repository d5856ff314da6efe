"""`mateclaw-mem import-chats FILE`: chat history from ChatGPT, Claude, Open WebUI or JSONL into the log.

Exit codes: 0 imported (or a dry run) · 10 nothing new (a second run of the same file) · 2 a malformed
export, an unknown format, or an estimate over --max-tokens (nothing written) · 3 no such file ·
7 the model failed during --extract (what was imported stays; the rest is queued).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

_PHASES = {"write": ("writing", "messages"), "extract": ("extracting", "conversations"), "dream": ("dreaming", "days")}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import-chats", parents=[common], help=HELP["import-chats"],
        description="Import chat history into the conversation log, each message with its own time, then hand "
        "each conversation to extraction through the usual gates. See docs/importing-chats.md.",
    )
    p.add_argument("file", help="ChatGPT's or Claude's conversations.json (or their export zip), Open WebUI's "
                                "chat export, or JSON lines of {role, content, timestamp, conversation}")
    p.add_argument("--agent", help="agent (default: default)")
    p.add_argument("--owner", help="import into this owner's conversations (owner isolation)")
    p.add_argument("--format", choices=("chatgpt", "claude", "openwebui", "jsonl"),
                   help="the export's format (default: told from the file)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the whole file and print what it would import (and, in model mode, the extraction "
                        "it would cost); write nothing")
    p.add_argument("--max-tokens", type=_count, metavar="N",
                   help="model mode: refuse the import if its extraction is estimated above N tokens")
    p.add_argument("--extract", action="store_true",
                   help="run the extraction now, conversation by conversation in date order (default: queue it "
                        "for the daemon's workers)")
    p.add_argument("--dream", action="store_true",
                   help="after extracting (implies --extract), dream each imported day in date order")
    p.set_defaults(func=cmd_import_chats)


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of tokens")
    return int(value)


class _ProgressLine:
    """Progress on stderr: one line redrawn in place on a terminal (at most 10 times a second),
    otherwise a plain line every few seconds and at the end of each phase, so a log stays short."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every = 0.1 if self.tty else 5.0
        self.last = time.monotonic()
        self.phase: str | None = None
        self.done = -1

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if phase == self.phase and (done == self.done or (not finished and now - self.last < self.every)):
            return
        self.phase, self.done, self.last = phase, done, now
        verb, unit = _PHASES[phase]
        pct = f" ({100 * done // total}%)" if total else ""
        line = f"{verb}: {done:,}/{total:,} {unit}{pct}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if finished else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def cmd_import_chats(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_MODEL, EXIT_NOTHING, EXIT_OK
    a = ctx.args
    agent = ctx.agent()
    importer = ctx.services.chat_import
    parsed = importer.read(Path(a.file), name=a.file, fmt=a.format)
    if a.dry_run:
        summary = importer.preview(parsed, agent, a.owner, max_tokens=a.max_tokens, dream=a.dream)
    else:
        summary = importer.run(parsed, agent, a.owner, max_tokens=a.max_tokens, extract=a.extract or a.dream,
                               dream=a.dream, progress=_ProgressLine(sys.stderr))
    ctx.emit(summary.to_dict(), "\n".join(_lines(summary)))
    if summary.extraction.get("errors"):
        return EXIT_MODEL
    if not a.dry_run and not summary.new_messages and not summary.extraction.get("conversations"):
        return EXIT_NOTHING
    return EXIT_OK


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _lines(s: Any) -> list[str]:
    head = f"{s.file} ({s.format}): {_n(s.conversations, 'conversation')}, {_n(s.messages, 'message')}"
    if s.first:
        head += f", {s.first[:10]} .. {s.last[:10]}"
    lines = [head + (" — dry run, nothing written" if s.dry_run else "")]
    verb = "would add" if s.dry_run else "added"
    lines.append(f"{verb} {_n(s.new_messages, 'message')} in {_n(s.new_conversations, 'conversation')} to {s.agent}"
                 + (f" (owner {s.owner})" if s.owner else "")
                 + f"; {s.present_messages:,} already in the log")
    if s.skipped:
        lines.append("skipped messages (only user and assistant messages are imported): "
                     + ", ".join(f"{n:,} {why}" for why, n in s.skipped.items()))
    if s.skipped_conversations:
        lines.append("skipped conversations: "
                     + ", ".join(f"{n:,} {why}" for why, n in s.skipped_conversations.items()))
    if s.cut:
        lines.append(f"cut: {s.cut:,} messages longer than 200,000 characters")
    lines.append(_cost(s))
    lines += _extraction(s)
    lines += _dreams(s)
    return lines


def _cost(s: Any) -> str:
    if s.estimate is None:
        return "rules mode: the extraction makes no model calls"
    e = s.estimate
    line = (f"model mode: extraction estimated at {e['calls']:,} calls, at most {e['total_tokens']:,} tokens "
            f"({e['prompt_tokens']:,} prompt + {e['answer_tokens']:,} answer) for "
            f"{_n(e['conversations'], 'conversation')} ({e['gated_out']:,} turned away by the gates)")
    if e["dream_calls"]:
        line += f", and {e['dream_calls']:,} dreams"
    if s.max_tokens is not None:
        line += f"; budget --max-tokens {s.max_tokens:,}: " + ("over, the import would be refused"
                                                               if s.over_budget else "within")
    return line


def _extraction(s: Any) -> list[str]:
    x = s.extraction
    if not x:
        return []
    if not x["conversations"]:
        return ["extraction: nothing to hand over (each conversation was handed over by an earlier import)"]
    turned = f", {x['gated_out']:,} turned away by the gates" if x["gated_out"] else ""
    if x["reasons"]:
        turned += " (" + "; ".join(f"{n:,}: {why}" for why, n in x["reasons"].items()) + ")"
    if x["how"] == "queued":
        lines = [f"extraction: {x['scheduled']:,} of {x['conversations']:,} conversations queued{turned}; the "
                 "daemon's workers run them (a running daemon with its next extraction for this agent, otherwise "
                 "when it starts; --extract runs them now)"]
    else:
        lines = [f"extraction: {x['scheduled']:,} of {x['conversations']:,} conversations extracted in "
                 f"{x['runs']:,} runs{turned}; changed: {', '.join(x['files_changed']) or 'nothing'}"]
    lines += [f"  error ({e['kind']}) in {e['conversation']}: {e['error']} — it and the rest are queued"
              for e in x["errors"]]
    return lines


def _dreams(s: Any) -> list[str]:
    if s.dreams:
        return [f"dream {d['day']}: {d['status'].replace('_', ' ')} — {d['reason']}" for d in s.dreams]
    if not s.days:
        return []
    span = s.days[0] if len(s.days) == 1 else f"{s.days[0]} .. {s.days[-1]}"
    return [f"to consolidate the imported {_n(len(s.days), 'day')} ({span}) into MEMORY.md: "
            f"`mateclaw-mem dream {s.agent} --as-of DAY` for each, oldest first (or import with --dream)"]
