"""Claims read from the memory files: PROFILE.md `key: value` lines and bullets, MEMORY.md bullets
(a section without bullets is one claim), and structured entries (`## key` + text).

Pure over file texts: `claims(rel, body)` is what a file says, with the `##` section and line of
each claim, so a fact always links back to where it came from.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.markdown.ceilings import strip_marker
from mateclaw_mem.markdown.edits import line_key
from mateclaw_mem.markdown.merge import parse_kv

SOURCE_FILES = ("PROFILE.md", "MEMORY.md")
STRUCTURED_PREFIX = "structured/"
TEXT_MAX = 500
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(?P<text>\S.*)$")
_H2 = re.compile(r"^##(?!#)\s*(?P<title>.*?)\s*#*\s*$")
_COMMENT = re.compile(r"<!--.*?-->")


@dataclass(frozen=True)
class Claim:
    file: str
    section: str
    line: int  # 1-based, in the body
    key: str  # "timezone" for `timezone: Europe/Berlin`; "" for a plain bullet
    value: str
    text: str  # the line as a claim, without its list mark

    @property
    def identity(self) -> str:
        """What stays the same while the claim is corrected: the key, else the normalised text."""
        return self.key.casefold() if self.key else line_key(self.text)


def fact_id(agent: str, owner: str | None, claim: Claim) -> str:
    raw = f"{agent}\0{owner or ''}\0{claim.file}\0{claim.section.casefold()}\0{claim.identity}"
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]


def is_source(rel: str) -> bool:
    return rel in SOURCE_FILES or (rel.startswith(STRUCTURED_PREFIX) and rel.endswith(".md")
                                   and "/" not in rel[len(STRUCTURED_PREFIX):])


def claims(rel: str, body: str) -> list[Claim]:
    if rel.startswith(STRUCTURED_PREFIX):
        return _structured(rel, body)
    return _bullets(rel, strip_marker(body))


def _bullets(rel: str, body: str) -> list[Claim]:
    out: list[Claim] = []
    section, section_line, loose, in_fence = "", 0, [], False
    for n, raw in enumerate(body.splitlines(), 1):
        if raw.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        h = _H2.match(raw)
        if h:
            out.extend(_loose(rel, section, section_line, loose))
            section, section_line, loose = _COMMENT.sub("", h.group("title")).strip(), n, []
            continue
        line = _COMMENT.sub("", raw).strip()
        if not line or line.startswith("#") or line.startswith(">"):
            continue
        m = _BULLET.match(line)
        if m is None:
            loose.append(line)
            continue
        text = m.group("text").strip()[:TEXT_MAX]
        kv = parse_kv(text)
        out.append(Claim(rel, section, n, kv[0] if kv else "", kv[1] if kv else text, text))
        loose = []  # a paragraph above bullets is their introduction, not a claim
    out.extend(_loose(rel, section, section_line, loose))
    return out


def _loose(rel: str, section: str, line: int, lines: list[str]) -> list[Claim]:
    """A section of prose without bullets is one claim; prose beside bullets is not."""
    if not lines or not section:
        return []
    text = " ".join(lines)[:TEXT_MAX]
    return [Claim(rel, section, line, "", text, text)]


def _structured(rel: str, body: str) -> list[Claim]:
    out = []
    for entry in fmt.parse(body).entries:
        text = " ".join(entry.value.split())[:TEXT_MAX]
        if text:
            out.append(Claim(rel, entry.key, _line_of(body, entry.key), entry.key, text, f"{entry.key}: {text}"))
    return out


def _line_of(body: str, key: str) -> int:
    for n, raw in enumerate(body.splitlines(), 1):
        h = _H2.match(raw)
        if h and h.group("title").casefold() == key.casefold():
            return n
    return 0
