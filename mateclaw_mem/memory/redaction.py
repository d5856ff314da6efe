"""Secrets are redacted before anything reaches the model or a memory file.

`redact(text)` replaces each secret with `[REDACTED:<kind>]`, keeping the label around it
("password: [REDACTED:password]") so a note still says *that* a password was mentioned. Patterns
err on the side of redacting: a false positive costs a word, a false negative leaks a credential
into a file that is injected into every prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # which group is the secret (0 = the whole match)


_VALUE = r"[^\s,;，；。、\"'`<>)\]]+"

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    _Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    _Rule("api_key", re.compile(r"\bsk-(?:ant-|proj-|or-|live-|test-)?[A-Za-z0-9_-]{20,}")),
    _Rule("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b")),
    _Rule(
        "aws_secret_key",
        re.compile(r"(?i)\baws_?secret(?:_?access)?_?key\b\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{30,})"),
        1,
    ),
    _Rule("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    _Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b")),
    _Rule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    _Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    _Rule("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    _Rule("bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1),
    _Rule("url_password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:([^\s@/]+)@"), 1),
    # "password: x", "my password is x", "api_key=x", "token is x"
    _Rule(
        "password",
        re.compile(
            r"(?i)\b(?:password|passwd|passphrase|pwd|pin code|secret|api[_ -]?key|access[_ -]?token|"
            r"auth[_ -]?token|token|credentials?)\b(?:\s+(?:is|was)\s+|\s*[:=]\s*)[\"'`]?(" + _VALUE + ")",
        ),
        1,
    ),
    # 密码是 x / 密码：x / 口令为 x / 密钥是 x
    _Rule(
        "password",
        re.compile(r"(?:密码|口令|密钥|秘钥|令牌|验证码)\s*(?:是|为|:|：|=)\s*[\"'“`]?([^\s,;，；。、\"'”`]+)"),
        1,
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
    }
)


def _is_placeholder(value: str) -> bool:
    low = value.lower().strip("[]")
    return low in _NOT_SECRETS or low.startswith("redacted") or value.startswith("[REDACTED")


def redact(text: str) -> str:
    """Return `text` with every secret replaced by `[REDACTED:kind]`."""
    if not text:
        return text
    out = text
    for rule in _RULES:
        out = _apply(rule, out)
    return out


def find_secrets(text: str) -> list[str]:
    """Kinds of secret found in `text` (one entry per occurrence), without changing it."""
    kinds: list[str] = []
    remaining = text or ""
    for rule in _RULES:
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
