"""Secrets are redacted on the way in: before the conversation log, the model, any memory file.

The one place the patterns live. A leaf module (pure functions, imports nothing of ours) because
every layer needs it: `conversations/` redacts turns before they are logged, `index/` the rows an
older version stored raw, `memory/` every machine writer's text, keys, headings and reasons.

`redact(text)` replaces each secret with `[REDACTED:<kind>]`, keeping the label around it
("password: [REDACTED:password]") so a note still says *that* a password was mentioned. Patterns
err on the side of redacting: a false positive costs a word, a false negative leaks a credential
into a file that is injected into every prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # which group is the secret (0 = the whole match)
    name: str = ""  # when several rules share a kind: tells them apart (tests cover each rule)
    # Lowercase substrings at least one of which every match contains. Every turn is redacted before
    # it is logged, and a regex with a leading \b is tried at every position: skipping rules whose
    # hint is absent took a 250-character chat line from ~210 to ~35 us. A hint must be necessary.
    hints: tuple[str, ...] = ()

    def may_match(self, lowered: str) -> bool:
        return any(h in lowered for h in self.hints)


_VALUE = r"[^\s,;，；。、\"'`<>)\]]+"

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        hints=("private key",),
    ),
    _Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0, hints=("eyj",)),
    _Rule("api_key", re.compile(r"\bsk-(?:ant-|proj-|or-|live-|test-)?[A-Za-z0-9_-]{20,}"), 0, hints=("sk-",)),
    _Rule("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"), 0,
          hints=("akia", "asia", "agpa", "aida", "aroa", "anpa")),
    _Rule(
        "aws_secret_key",
        re.compile(r"(?i)\baws_?secret(?:_?access)?_?key\b\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{30,})"),
        1,
        hints=("secret",),
    ),
    _Rule("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"), 0,
          hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), 0, hints=("glpat-",)),
    _Rule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), 0, hints=("xox",)),
    _Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0, hints=("aiza",)),
    _Rule("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b"), 0, hints=("k_live_", "k_test_")),
    _Rule("bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1, hints=("bearer",)),
    _Rule("url_password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:([^\s@/]+)@"), 1, hints=("://",)),
    # "password: x", "my password is x", "api_key=x", "token is x"
    _Rule(
        "password",
        re.compile(
            r"(?i)\b(?:password|passwd|passphrase|pwd|pin code|secret|api[_ -]?key|access[_ -]?token|"
            r"auth[_ -]?token|token|credentials?)\b(?:\s+(?:is|was)\s+|\s*[:=]\s*)[\"'`]?(" + _VALUE + ")",
        ),
        1,
        hints=("passw", "passphrase", "pwd", "pin code", "secret", "api", "token", "credential"),
    ),
    # 密码是 x / 密码：x / 口令为 x / 密钥是 x
    _Rule(
        "password",
        # Fullwidth ？/！ end the value: "密码是什么？" asks for a password, it does not give one.
        re.compile(r"(?:密码|口令|密钥|秘钥|令牌|验证码)\s*(?:是|为|:|：|=)\s*[\"'“`]?([^\s,;，；。、？！\"'”`]+)"),
        1,
        "password_zh",
        ("密码", "口令", "密钥", "秘钥", "令牌", "验证码"),
    ),
)

# Words that follow "password"/"token" in ordinary prose and are not secrets.
_NOT_SECRETS = frozenset(
    {
        "is", "was", "the", "a", "an", "and", "or", "for", "to", "of", "in", "on", "with", "that", "this",
        "manager", "managers", "reset", "field", "fields", "policy", "required", "expired", "limit",
        "limits", "count", "counts", "usage", "here", "there", "it", "my", "your", "our", "their",
        "[redacted", "redacted", "none", "null", "empty", "rotation", "rotated", "based", "bucket",
        "budget", "budgets", "window", "length", "store", "storage", "vault", "file", "env",
        "什么", "多少", "啥",
    }
)

# Every rule by name, for tests that prove each one (a new rule without a test fails them).
RULE_NAMES: tuple[str, ...] = tuple(r.name or r.kind for r in _RULES)


def _is_placeholder(value: str) -> bool:
    low = value.lower().strip("[]")
    return low in _NOT_SECRETS or low.startswith("redacted") or value.startswith("[REDACTED")


def _prefix_tree(words: list[str]) -> str:
    """A regex matching where any of `words` starts, as a tree of their shared prefixes ("pass(?:phrase|w)"):
    the engine tests a position's first character once against one set, where a flat alternation tried
    each word in turn at every position (a LoCoMo turn: ~4.4 us against ~2.5; an Add logs 20 of them). A
    word with a shorter word as its prefix adds nothing (whatever it finds, the shorter one finds)."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        alts = [re.escape(ch) + pattern(node[ch]) for ch in sorted(node)]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return pattern(tree)


# Every hint of every rule in one regex: most text holds none, and one search says so at once
# (asking each rule in turn was most of an AML Add's redaction time).
_ANY_HINT = re.compile(_prefix_tree([h for r in _RULES for h in r.hints]))


def redact(text: str) -> str:
    """Return `text` with every secret replaced by `[REDACTED:kind]`."""
    if not text:
        return text
    out = text
    lowered = out.lower()
    if _ANY_HINT.search(lowered) is None:
        return out
    for rule in _RULES:
        if rule.may_match(lowered):
            new = _apply(rule, out)
            if new != out:
                out, lowered = new, new.lower()
    return out


def find_secrets(text: str) -> list[str]:
    """Kinds of secret found in `text` (one entry per occurrence), without changing it."""
    kinds: list[str] = []
    remaining = text or ""
    for rule in _RULES:
        if not rule.may_match(remaining.lower()):
            continue
        for m in rule.pattern.finditer(remaining):
            value = m.group(rule.group)
            if rule.group and _is_placeholder(value):
                continue
            kinds.append(rule.kind)
        remaining = _apply(rule, remaining)
    return kinds


def contains_secret(text: str) -> bool:
    return bool(find_secrets(text))


def _apply(rule: _Rule, text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        if rule.group == 0:
            return f"[REDACTED:{rule.kind}]"
        value = m.group(rule.group)
        if _is_placeholder(value):
            return m.group(0)
        start, end = m.span(rule.group)
        base = m.start()
        whole = m.group(0)
        return whole[: start - base] + f"[REDACTED:{rule.kind}]" + whole[end - base :]

    return rule.pattern.sub(repl, text)
