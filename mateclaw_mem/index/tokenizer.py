"""One tokenizer for mixed Latin/CJK text, used the same way at index time and at query time.

Public API (kept small on purpose; file search and message search both import it):

- `tokenize(text) -> list[str]`: Latin/digit words lowercased and lightly stemmed; CJK runs (Han,
  Hiragana, Katakana, Hangul) as overlapping character bigrams, a lone CJK character as itself.
- `fts_query(tokens) -> str`: a safe FTS5 MATCH expression that ORs the quoted tokens.
- `STOPWORDS`: English function words a *ranker* may ignore in queries. `tokenize` never drops
  them, so an index built from its output can still answer a query made only of stopwords.

Why our own tokenization: SQLite's `unicode61` treats a whole CJK run as one token, so "跑步" would
never match "用户喜欢周日早上跑步". We store space-joined tokens from `tokenize` in FTS5 columns
declared with `tokenize='unicode61'`; since every token is already lowercase word characters,
unicode61 splits on our spaces and nothing else, and the tokenization stays ours.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

# Queries are questions and keywords, not documents: longer ones are refused (413/422 over HTTP)
# before any work, so that no query can keep a worker or the event loop busy for long.
MAX_QUERY_CHARS = 2000
# Distinct terms a ranker scores per query (the rarest kept): each walks its postings list.
MAX_QUERY_TERMS = 64

# Han (incl. extension A and compatibility), Hiragana, Katakana (+ phonetic ext.), Hangul
# syllables and jamo. Kept as one class: any run of these is bigrammed.
_CJK = (
    "\u1100-\u11ff\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3130-\u318f"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
)
# A CJK run, or a run of word characters that are not CJK (letters of any other script, digits).
# Apostrophes inside words ("don't", "Caroline's") are dropped by splitting on them and then
# discarding the clitic, so "caroline's" and "caroline" match.
# (`[^\W_<CJK>]` is "a word character, not _, not CJK" as one class: a per-character lookahead
# made this regex most of the time spent tokenizing.)
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CLITICS = frozenset({"s", "t", "m", "re", "ve", "ll", "d"})

_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves also ever get got go going
    really yeah oh hey hi thanks thank wow much many"""


_STEMMER = Stemmer.Stemmer("english")
# Bump when tokens change for the same text (stemmer, irregular forms, token rules): an index built
# with other tokens would silently miss, so both indexes rebuild themselves when this differs.
TOKENIZER_VERSION = f"snowball-english-{Stemmer.version()}-1"


# Chat vocabulary is small and repetitive, and stemming was most of indexing time. An entry is ~320 bytes
# resident (the word, its stem, the cache's node), counted against aml.cache-bytes in the daemon and its index
# process: 16,384 of them ~5 MB at most; 65,536 (as before) ~21 MB for a vocabulary of ids and names
# (tests/test_tokenizer.py: 60,000 distinct words, 5.3 MB against 13.7). LoCoMo's whole vocabulary is ~3,800.
@lru_cache(maxsize=16384)
def _stem(word: str) -> str:
    """Snowball English (Porter2), after the irregular forms a suffix stemmer cannot reach.

    Measured against a hand-written light stemmer on LoCoMo: Porter2's derivational rules
    ("adoption" ~ "adopt", "generously" ~ "generous") find answers that share no inflection with
    the question, at the cost of a few conflations ("university" ~ "universe"). Both sides go
    through this function, so a stem only has to be consistent, not a real word.
    """
    word = _IRREGULAR.get(word, word)
    if not word.isascii() or not word.isalpha():
        return word
    return _STEMMER.stemWord(word)


# Irregular English forms a suffix stemmer cannot reach: "children" must meet "child", "bought"
# must meet "buy". General grammar, not a thesaurus: only inflections of the same word.
_IRREGULAR_TEXT = """children:child men:man women:woman mice:mouse feet:foot teeth:tooth
    bought:buy brought:bring taught:teach thought:think caught:catch made:make took:take taken:take
    gave:give given:give saw:see seen:see ran:run began:begin begun:begin wrote:write written:write
    won:win met:meet felt:feel found:find lost:lose sold:sell told:tell kept:keep sang:sing sung:sing
    swam:swim drove:drive driven:drive rode:ride ridden:ride ate:eat eaten:eat drew:draw drawn:draw
    grew:grow grown:grow knew:know known:know flew:fly flown:fly chose:choose chosen:choose
    spoke:speak spoken:speak broke:break broken:break fell:fall fallen:fall built:build spent:spend
    sent:send held:hold heard:hear paid:pay came:come became:become slept:sleep
    wore:wear worn:wear threw:throw thrown:throw forgot:forget forgotten:forget understood:understand
    dying:die lying:lie tying:tie"""
_IRREGULAR: dict[str, str] = dict(pair.split(":") for pair in _IRREGULAR_TEXT.split())


# Stemmed like the tokens they are compared with ("having" -> "hav").
STOPWORDS: frozenset[str] = frozenset(_stem(w) for w in _STOPWORD_TEXT.split())


_CJK_CHAR_RE = re.compile(f"[{_CJK}]")


def _is_cjk_char(ch: str) -> bool:
    # Every CJK range starts above U+10FF: Latin text never reaches the regex.
    return ch >= "\u1100" and _CJK_CHAR_RE.match(ch) is not None


# ASCII text (most of what is indexed) in two regex passes: clitics out, words in. The same tokens
# as the general loop below (tests/test_tokenizer.py compares the two on random text).
_ASCII_CLITIC_RE = re.compile(r"'(?:s|t|m|re|ve|ll|d)(?![a-z0-9])")
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Tokens of `text` in order (duplicates kept, so callers can count term frequency)."""
    lowered = text.lower()
    if lowered.isascii():
        return list(map(_stem, _ASCII_WORD_RE.findall(_ASCII_CLITIC_RE.sub(" ", lowered))))
    return _tokenize_any(lowered)


def _tokenize_any(lowered: str) -> list[str]:
    out: list[str] = []
    for m in _TOKEN_RE.finditer(lowered):
        run = m.group(0)
        if _is_cjk_char(run[0]):
            if len(run) == 1:
                out.append(run)
            else:
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
            continue
        if run in _CLITICS and m.start() > 0 and lowered[m.start() - 1] in "'\u2019":
            continue  # the tail of "don't", "she's": no meaning alone
        out.append(_stem(run))
    return out


def fts_query(tokens: list[str]) -> str:
    """An FTS5 MATCH string: every distinct token double-quoted, joined by OR.

    OR, never an implicit AND: a conversational question rarely shares every word with its answer,
    so ranking (not matching) must decide. Quoting makes FTS5 operators and column filters in user
    text inert. Returns "" for no tokens; callers must not run MATCH with an empty string.
    """
    seen: dict[str, None] = {}
    for t in tokens:
        if t:
            seen.setdefault(t, None)
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in seen)


def token_spans(text: str) -> list[tuple[str, int, int]]:
    """(token, start, end) for every token `tokenize(text)` yields, with its character span in `text`.

    For snippets and highlighting: the same regex and rules as `tokenize`, so a highlighted span is
    exactly what matched. A CJK bigram spans two characters (neighbouring bigrams overlap).
    """
    out: list[tuple[str, int, int]] = []
    lowered = text.lower()
    # lower() can change length for a few characters (e.g. "İ"); spans then only approximate.
    for m in _TOKEN_RE.finditer(lowered):
        run, start = m.group(0), m.start()
        if _is_cjk_char(run[0]):
            if len(run) == 1:
                out.append((run, start, start + 1))
            else:
                out.extend((run[i : i + 2], start + i, start + i + 2) for i in range(len(run) - 1))
            continue
        if run in _CLITICS and start > 0 and lowered[start - 1] in "'\u2019":
            continue
        out.append((_stem(run), start, m.end()))
    return out


_WORD_CHAR_RE = re.compile(rf"[^\W_{_CJK}]")
_IRREGULAR_FORMS: dict[str, list[str]] = {}
for _form in _IRREGULAR:
    _IRREGULAR_FORMS.setdefault(_stem(_form), []).append(_form)


def term_spans(text: str, terms: set[str], *, per_term: int = 0) -> list[tuple[str, int, int]]:
    """The spans `token_spans(text)` would yield for the tokens in `terms`, without tokenizing `text`.

    For highlighting a few query terms in a long chunk: each term is looked for by substring, and
    only the word around a hit is checked with the same rules as `tokenize` (run boundaries, clitics,
    stemming, irregular forms). `per_term` > 0 keeps the first that many spans of each term.
    Sorted by position.
    """
    lowered = text.lower()
    cap = per_term if per_term > 0 else len(text) + 1
    out: list[tuple[str, int, int]] = []
    for term in terms:
        if term:
            found = _cjk_term_spans(lowered, term, cap) if _CJK_CHAR_RE.match(term) else _word_spans(lowered, term, cap)
            out.extend(found[:cap])
    out.sort(key=lambda x: (x[1], x[2]))
    return out


def _cjk_term_spans(lowered: str, term: str, cap: int) -> list[tuple[str, int, int]]:
    """A bigram is a token wherever it occurs; a lone character only as a CJK run of one."""
    found: list[tuple[str, int, int]] = []
    at = lowered.find(term)
    while at != -1 and len(found) < cap:
        lone_ok = len(term) > 1 or not (
            (at > 0 and _CJK_CHAR_RE.match(lowered, at - 1)) or _CJK_CHAR_RE.match(lowered, at + 1)
        )
        if lone_ok:
            found.append((term, at, at + len(term)))
        at = lowered.find(term, at + 1)
    return found


def _word_spans(lowered: str, term: str, cap: int) -> list[tuple[str, int, int]]:
    """Words that tokenize to `term`. The stemmer only cuts endings, so such a word starts with the
    stem's first characters; irregular forms ("ran" for "run") are looked for whole."""
    keys = [term if len(term) <= 2 else term[: min(4, len(term) - 1)], *_IRREGULAR_FORMS.get(term, ())]
    found: dict[int, tuple[str, int, int]] = {}
    for key in keys:
        n, at = 0, lowered.find(key)
        while at != -1 and n < cap:
            if not (at > 0 and _WORD_CHAR_RE.match(lowered, at - 1)):  # the start of a word
                m = _TOKEN_RE.match(lowered, at)
                if m is not None:
                    run = m.group(0)
                    clitic = run in _CLITICS and at > 0 and lowered[at - 1] in "'\u2019"
                    if not clitic and _stem(run) == term:
                        found[at] = (term, at, m.end())
                        n += 1
                    at = m.end() - 1  # the rest of this word cannot start another one
            at = lowered.find(key, at + 1)
    return [found[at] for at in sorted(found)]
