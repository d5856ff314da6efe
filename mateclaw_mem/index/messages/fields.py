"""The fields of a message document and the plain text functions that make them (the speaker
prefix, whether a turn asks), shared by the storage that writes documents and the parse that reads
them (messages/storage.py, turns.py, postings.py)."""

from __future__ import annotations

import re

FIELDS = ("body", "ctx", "nb", "dt")
# "Caroline: text" - a short name before a colon. Up to four words and no sentence punctuation,
# so "Note: buy milk" is a false positive we accept (it only changes how the line is displayed).
_SPEAKER_RE = re.compile(r"^([^\s:?!.,][^:?!\n]{0,39}?):\s+(?=\S)")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

# Facts (model mode) live in the same documents table with ids from here on, so one view, one
# set of statistics and one ranking cover both; log message ids never get near 2**40.
FACT_BASE = 1 << 40


# A word that is a number or a date ("Day 5:", "Step 3:", "2023-05-01:") makes the opening a label,
# not a name: read as a speaker, "Day 5" took "day" and "5" out of every question that named it
# (a speaker's name is no search term) and made each numbered line a speaker of its own.
_NUMBER_WORD = re.compile(r"^[\d.,/-]+$")


def split_speaker(content: str) -> tuple[str | None, str]:
    """("Caroline", "hi") for "Caroline: hi"; (None, content) when there is no speaker prefix."""
    m = _SPEAKER_RE.match(content)
    if m:
        words = m.group(1).split()
        if len(words) <= 4 and not any(_NUMBER_WORD.match(w) for w in words):
            return m.group(1).strip(), content[m.end() :]
    return None, content


def _is_question(text: str) -> bool:
    # Image captions are appended as "[shares image: ...]"; the turn is a question when its
    # spoken part ends with a question mark.
    spoken = re.sub(r"\[shares image:[^\]]*\]\s*$", "", text).rstrip()
    return spoken.endswith("?")
