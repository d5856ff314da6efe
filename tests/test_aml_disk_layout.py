"""The on-disk view's large-owner paths rank exactly like the in-memory view: at the real layout a
`DocBlock` is 32,768 documents, `want_lengths` reads ahead only past 4,096 and a term is scored field
by field only past 32,768 postings - sizes test_aml_disk_index.py's random histories (a few hundred
turns an owner) never reach, while every owner of the scale bench (issue 36: 100k messages) lives
there. Here the layout is shrunk to a few documents a segment and a few segments a block, so the same
random histories cross many blocks, read ahead and score common words field by field; each path is
counted, so the test fails if it stops reaching one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import rank
from tests.support import disk_reference as ref_support
from tests.support.disk_reference import RANKINGS, shrunk_layout
from tests.test_aml_disk_index import _Facts, _grow

# (documents a `pdocs` segment, segments a block, postings past which a term is scored field by field)
_LAYOUTS = [(4, 2, 8), (8, 3, 30), (16, 4, 1 << 15)]


@pytest.mark.parametrize("seed", range(6))
def test_a_shrunk_layout_ranks_exactly_like_the_in_memory_view(tmp_path: Path, seed: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seg_docs, block_segs, fields_from = _LAYOUTS[seed % 3]
    seen = shrunk_layout(monkeypatch, seg_docs, block_segs, fields_from)
    if seed % 2:  # small segments and merges every few Adds: a block's segments rewritten under the cache
        monkeypatch.setattr(postings, "SEG_POSTINGS", 5)
        monkeypatch.setattr(postings, "DELTA_MAX", 80)
    rng = random.Random(1000 + seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    owners = ("u1", "u2")
    _grow(rng, log, index, _Facts(), owners, adds=120, convs=4, searches=True)
    for owner in owners:
        ref = ref_support.reference_view(index, "aml", owner)
        assert len(ref.ids) > 20 * seg_docs * block_segs // 8  # (many blocks)
        assert ref_support.disk_state(index, "aml", owner) == ref_support.reference_state(ref)
        for _ in range(10):
            query, options = ref_support.random_query(rng)
            for name, r in RANKINGS.items():
                with index.lock:  # (a fresh view per search, the cache carried between them)
                    got = rank(ref_support.disk_view(index, "aml", owner), query, options, r, limit=100)
                assert got == rank(ref, query, options, r, limit=100), (seed, owner, query, options, name)
    assert seen["a block past the first"] > 100 and seen["read ahead"] > 100
    assert (seen["field by field"] > 100) == (fields_from < 1 << 15)
    for x in (index, log):
        x.close()
