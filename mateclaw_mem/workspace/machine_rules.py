"""What a machine writer may not do to a memory file, as pure rules the store applies to every
write whose actor is not a person:

- write a secret (every machine's text is redacted; a person's own lines are restored as written);
- drop the frontmatter (it is kept);
- pin (only a person pins: pin markers in a machine's text are removed, and counted);
- touch a pinned section (restored verbatim);
- drop a person's section, or — in a model's whole-file rewrite of PROFILE.md / MEMORY.md — change a
  line a person wrote (restored, with the machine's additions kept);
- erode a file by small steps (shrinkage is measured against the largest version since a person last
  saw it, not per answer);
- cut a person's text at a ceiling (only machine sections are archived; when the person's text alone
  is over the ceiling, new machine facts still land in the file and `status` flags it over budget).
"""

from __future__ import annotations

from dataclasses import dataclass

from mateclaw_mem.errors import RejectedError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.ceilings import apply_ceiling
from mateclaw_mem.markdown.sections import keep_person_lines, preserve_pinned, split_sections, strip_pins
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.provenance import Record, count_entries, line_id

# Writers whose text may carry pins: the shipped seed files and a person's own files brought in by
# `import`. Every other machine writer (extraction, dreaming, consolidation, tools) has them stripped.
PIN_KEEPING = frozenset({"seed", "import"})
# An import with `--strategy overwrite` is the person's own decision to replace their sections.
PERSON_DIRECTED = frozenset({"import"})
# Writers whose text is not redacted again: the shipped seeds, a person's imported files, and the
# archive (which only receives text that was already in the file).
UNREDACTED = frozenset({"seed", "import", "archive"})
# Model-driven rewrites whose shrinkage is measured cumulatively against what a person last saw.
EROSION_GUARDED = frozenset({"extraction", "dreaming"})
EROSION_MIN_CHARS = 400  # below this a file may be rewritten freely
EROSION_CHARS = 0.5  # a machine may not take a file below half of its size since a person saw it ...
EROSION_ENTRIES = 0.25  # ... nor drop more than a quarter of its entries (`##` sections, list items)


@dataclass(frozen=True)
class MachinePlan:
    text: str  # what may be written
    cut: str  # machine sections a ceiling moved out (to archive before writing); "" when none
    pins: int  # pin markers removed from the machine's text


def plan_machine_write(rel: str, old: str, new: str, record: Record, *, actor: str, cap: int,
                       archive_rel: str, erosion: bool = True) -> MachinePlan:
    old_block, old_body = frontmatter.split(old)
    new_block, new_body = frontmatter.split(new)
    if old_block and not new_block:
        new_block = old_block
    person = {} if actor in PERSON_DIRECTED else {k: set(v) for k, v in record.person.items()}
    if actor not in UNREDACTED:
        new_body = _redact_machine_lines(new_body, set().union(*person.values()) if person else set())
    pins = 0
    if actor not in PIN_KEEPING:
        new_body, pins = strip_pins(old_body, new_body)
    new_body = preserve_pinned(old_body, new_body)
    if cap and actor in EROSION_GUARDED:
        new_body = keep_person_lines(old_body, new_body, person, line_id)
    else:
        # Targeted writers (remember, tools, consolidation) may update a value, never drop a
        # person's section.
        new_body = keep_person_lines(old_body, new_body, _dropped_only(old_body, new_body, person), line_id)
    if erosion and cap and actor in EROSION_GUARDED:
        _check_erosion(rel, record, new_body)
    if not cap:
        return MachinePlan(new_block + new_body, "", pins)
    _, new_sections = split_sections(new_body)
    protected = {s.key for s in new_sections
                 if person.get(s.key) and any(line_id(ln) in person[s.key] for ln in s.text.splitlines())}
    result = apply_ceiling(new_body, cap, archive_rel, protected=protected, fresh=changed_keys(old_body, new_body))
    if result.truncated and new_block + result.body == old:
        # The same over-ceiling text again (a re-import, a retried write): the file would not change
        # and its tail went to the archive the first time; archiving it twice duplicates it.
        return MachinePlan(old, "", pins)
    return MachinePlan(new_block + result.body, result.cut, pins)


def _redact_machine_lines(body: str, person_ids: set[str]) -> str:
    """Redact every line a machine wrote; a line a person typed themselves stays as written."""
    if not person_ids:
        return redact(body)
    out: list[str] = []
    run: list[str] = []  # consecutive machine lines, redacted together (a private key spans lines)
    for ln in body.splitlines(keepends=True):
        if line_id(ln) in person_ids:
            out.append(redact("".join(run)))
            run = []
            out.append(ln)
        else:
            run.append(ln)
    out.append(redact("".join(run)))
    return "".join(out)


def changed_keys(old_body: str, new_body: str) -> set[str]:
    """Section keys whose text differs between two bodies (new or changed in `new_body`)."""
    _, old_sections = split_sections(old_body)
    before = {sec.key: sec.text.rstrip() for sec in old_sections}
    _, new_sections = split_sections(new_body)
    return {sec.key for sec in new_sections if before.get(sec.key) != sec.text.rstrip()}


def _dropped_only(old_body: str, new_body: str, person: dict[str, set[str]]) -> dict[str, set[str]]:
    """The person's sections that `new_body` no longer has at all."""
    _, new_sections = split_sections(new_body)
    present = {sec.key for sec in new_sections}
    _, old_sections = split_sections(old_body)
    return {sec.key: person[sec.key] for sec in old_sections if sec.key in person and sec.key not in present}


def _check_erosion(rel: str, record: Record, new_body: str) -> None:
    """Shrinkage is cumulative: measured against the largest version since a person last saw the
    file, so six answers that each take a little are refused like one that takes it all."""
    chars, entries = len(new_body.strip()), count_entries(new_body)
    if record.peak_chars > EROSION_MIN_CHARS and chars < record.peak_chars * EROSION_CHARS:
        raise RejectedError(
            f"{rel}: this rewrite would take it to {chars} characters from {record.peak_chars} since a person "
            f"last saw it (more than {1 - EROSION_CHARS:.0%} gone, counted over every machine write); refused"
        )
    if record.peak_entries >= 4 and entries < record.peak_entries * (1 - EROSION_ENTRIES):
        raise RejectedError(
            f"{rel}: this rewrite would leave {entries} of the {record.peak_entries} entries it had since a person "
            f"last saw it (more than {EROSION_ENTRIES:.0%} gone, counted over every machine write); refused"
        )
