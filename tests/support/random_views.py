"""Random owner views for the exactness tests of the message ranking (test_aml_candidates.py,
test_aml_scoring.py): turns of a few speakers over a small vocabulary, some asking, some naming,
some with times and numbers, across a few conversations - built up by Adds with searches between
them and turns parsed again, as the index does, so that cached arrays are patched, not made afresh."""

from __future__ import annotations

import random
from collections.abc import Callable

from mateclaw_mem.index.messages.turns import Doc
from tests.support.owner_view import OwnerView

WORDS = [f"w{i}" for i in range(60)]
SPEAKERS = ("Ann", "Bo", "Cy", None)
NAMES = ("ann", "bo", "matt", "paris", "tokyo")


def random_doc(rng: random.Random, doc_id: int, conv: str) -> Doc:
    tf: dict[str, tuple[int, int, int, int]] = {}
    for w in rng.sample(WORDS, rng.randint(1, 12)):
        tf[w] = tuple(rng.choice((0, 0, 1, 2, 3)) for _ in range(4))  # type: ignore[assignment]
        if not any(tf[w]):
            tf[w] = (1, 0, 0, 0)
    lens = tuple(sum(c[f] for c in tf.values()) + rng.randint(0, 20) for f in range(4))
    share = rng.choice((0.0, 0.0, 0.25, 0.5, 1.0))
    counts = {t: c[0] | c[1] << 16 | c[2] << 32 | c[3] << 48 for t, c in tf.items()}
    return Doc(doc_id, rng.choice(SPEAKERS), share == 1.0, rng.random() < 0.3, share, rng.random() < 0.3,
               frozenset(rng.sample(NAMES, rng.randint(0, 2))), counts, tuple(t for t, c in tf.items() if c[0]),
               lens, conv, "user", "text", 0)  # type: ignore[arg-type]


def random_view(seed: int, n: int, between: Callable[[OwnerView, random.Random], object] | None = None,
                convs: int = 7) -> OwnerView:
    """A view of about `n` turns; `between(view, rng)` runs between the later Adds (a search)."""
    rng = random.Random(seed)
    view = OwnerView()
    ids = iter(range(1, 10 * n + 100))
    view.apply([random_doc(rng, next(ids), f"c{k % convs}") for k in range(n)])
    for _ in range(5):
        if between is not None:
            between(view, rng)
        view.apply([random_doc(rng, next(ids), f"c{rng.randint(0, convs - 1)}") for _ in range(rng.randint(1, 9))])
        again = rng.choice(list(view.by_id))
        view.apply([random_doc(rng, again, view.by_id[again].conversation_id)])
    return view
