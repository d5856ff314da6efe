"""The shared tokenizer: Latin words, CJK bigrams, and FTS5 queries that are safe and OR-ed."""

from __future__ import annotations

import random
import sqlite3

from mateclaw_mem.index.tokenizer import STOPWORDS, _tokenize_any, fts_query, term_spans, token_spans, tokenize


def test_latin_words_are_lowercased_and_stemmed_consistently() -> None:
    assert tokenize("Hello WORLD 2023") == ["hello", "world", "2023"]
    for group in (["bake", "baked", "bakes", "baking"], ["run", "running", "runs"], ["puppy", "puppies"]):
        stems = {tokenize(w)[0] for w in group}
        assert len(stems) == 1, (group, stems)
    assert tokenize("Caroline's") == tokenize("caroline")
    assert tokenize("don't") == ["don"]
    assert tokenize("yes, no; (maybe)!") == ["yes", "no", tokenize("maybe")[0]]


def test_cjk_runs_become_overlapping_bigrams_and_a_lone_char_itself() -> None:
    assert tokenize("周日早上") == ["周日", "日早", "早上"]
    assert tokenize("猫") == ["猫"]
    assert tokenize("カタカナ") == ["カタ", "タカ", "カナ"]
    assert tokenize("한국어") == ["한국", "국어"]
    assert tokenize("我在Tokyo跑步2次") == ["我在", "tokyo", "跑步", "2", "次"]


def test_mixed_text_splits_scripts_cleanly() -> None:
    assert tokenize("我在Tokyo跑步") == ["我在", "tokyo", "跑步"]
    assert tokenize("用户喜欢周日早上跑步") == ["用户", "户喜", "喜欢", "欢周", "周日", "日早", "早上", "上跑", "跑步"]
    # Every bigram of a CJK query appears in the indexed text's bigrams: "跑步" finds the sentence.
    assert set(tokenize("跑步")) <= set(tokenize("用户喜欢周日早上跑步"))
    assert set(tokenize("周日早上")) <= set(tokenize("用户喜欢周日早上跑步"))


def test_stopwords_are_kept_by_tokenize_and_listed_stemmed() -> None:
    assert tokenize("what is the plan") == ["what", "is", "the", "plan"]
    assert {"what", "is", "the"} <= STOPWORDS and "plan" not in STOPWORDS
    assert tokenize("having")[0] in STOPWORDS


def test_fts_query_is_or_of_quoted_tokens_and_safe_in_fts5() -> None:
    assert fts_query(["a", "b", "a"]) == '"a" OR "b"'
    assert fts_query([]) == ""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
    docs = ["周日 早上 跑步", "near or and not", "plan x"]
    for d in docs:
        conn.execute("INSERT INTO t (body) VALUES (?)", (" ".join(tokenize(d)),))
    hostile = 'NEAR( "quote" body: * OR AND NOT) ^x -y'
    q = fts_query(tokenize(hostile))
    rows = conn.execute("SELECT body FROM t WHERE t MATCH ?", (q,)).fetchall()  # must not raise
    assert {r[0] for r in rows} == {"near or and not", "plan x"}
    # OR, never AND-all-terms: one shared token is enough to match.
    rows = conn.execute("SELECT body FROM t WHERE t MATCH ?", (fts_query(tokenize("跑步 zebra")),)).fetchall()
    assert [r[0] for r in rows] == [" ".join(tokenize("周日 早上 跑步"))]


def test_term_spans_finds_exactly_what_token_spans_yields_for_those_terms() -> None:
    text = ("Caroline's cafe: she RAN, was running and runs daily; the children's children bought toys. "
            "用户喜欢周日早上跑步，日日日 周 日。東京タワーで running_club 12abc don't s's")
    spans = token_spans(text)
    for terms in ({"run", "children"}, {"child", "buy", "caroline"}, {"周日", "日日", "早上", "周", "日"},
                  {"タワ", "running", "club", "12abc", "t", "s"}, {"absent", "跑步"}):
        expected = sorted((s for s in spans if s[0] in terms), key=lambda s: (s[1], s[2]))
        assert term_spans(text, terms) == expected, terms
    assert [s[1] for s in term_spans(text, {"run"}, per_term=2)] == [text.index("RAN"), text.index("running")]


def test_derived_forms_meet_their_base_word() -> None:
    # Porter2's derivational rules: "adoption" answers a question about adopting.
    for group in (["adopt", "adoption", "adopted"], ["generous", "generously"], ["promote", "promotion", "promoted"]):
        stems = {tokenize(w)[0] for w in group}
        assert len(stems) == 1, (group, stems)
    assert tokenize("children") == tokenize("child") and tokenize("dying") == tokenize("die")


def test_highlighting_finds_irregular_and_y_to_i_forms() -> None:
    text = "He was dying to see the children, and she happily agreed."
    want = token_spans(text)
    for token, start, end in want:
        assert (token, start, end) in term_spans(text, {token}), (token, text[start:end])


def test_the_ascii_fast_path_gives_the_tokens_of_the_general_loop() -> None:
    # Random strings over the characters the clitic and word rules look at (apostrophes, clitic
    # letters, digits, underscores, punctuation): both paths must agree on every one.
    rng = random.Random(22)
    alphabet = "ab sStTmMdDrReEvVlL'_-09\n.,!?"
    seen = 0
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert tokenize(text) == _tokenize_any(text.lower()), text
        seen += "'" in text
    assert seen > 1000  # the clitic rule was exercised
    assert tokenize("She's here; don't go, 'twas Caroline's") == _tokenize_any("she's here; don't go, 'twas caroline's")


def test_a_large_vocabulary_keeps_a_bounded_cache_of_stems() -> None:
    """The stems cached are resident in the daemon and its index process, counted against
    aml.cache-bytes: a vocabulary of ids and names must not grow them without bound."""
    import tracemalloc

    rng = random.Random(9)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 12))) for _ in range(60_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(0, len(words), 50):
            tokenize(" ".join(words[k : k + 50]))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8_000_000  # 16,384 stems cached: 5.3 MB (65,536 of them: 13.7 MB for these words)
