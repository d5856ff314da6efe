from __future__ import annotations

import pytest

from mateclaw_mem.redaction import RULE_NAMES, contains_secret, find_secrets, redact

# Every rule: (text with a secret, the secret, its kind, a near miss the rule must leave alone).
RULES = {
    "private_key": ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIQ7zk\n-----END EC PRIVATE KEY-----", "MHcCAQEEIQ7zk",
                    "private_key", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0\n-----END PUBLIC KEY-----"),
    "jwt": ("t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "jwt", "the header eyJhbGciOiJIUzI1NiJ9 alone is no token"),
    "api_key": ("use sk-proj-abcdefghijklmnopqrstuvwxyz0123", "sk-proj-abcdefghijklmnopqrstuvwxyz0123", "api_key",
                "the flag sk-short and a task-abcdefghijklmnopqrstuvwxyz"),
    "aws_access_key": ("id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "aws_access_key", "AKIA1234 is too short"),
    "aws_secret_key": ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_key",
                       "set aws_secret_access_key in the environment"),
    "github_token": ("ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
                     "github_token", "the ghp_short prefix"),
    "gitlab_token": ("glpat-abcdefghij0123456789", "glpat-abcdefghij0123456789", "gitlab_token", "glpat-short"),
    "slack_token": ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij", "slack_token", "xoxb-12 is cut"),
    "google_api_key": ("key AIzaSyD" + "x" * 32, "AIzaSyD" + "x" * 32, "google_api_key", "AIzaSyShortValue"),
    "stripe_key": ("sk_live_abcdefghijklmnop1234", "sk_live_abcdefghijklmnop1234", "stripe_key", "sk_live_short"),
    "bearer_token": ("Authorization: Bearer abcdefghijklmnop.qrstuvwxyz", "abcdefghijklmnop.qrstuvwxyz",
                     "bearer_token", "the bearer of bad news"),
    "url_password": ("db at postgres://bob:s3cretpw@db.local/app", "s3cretpw", "url_password",
                     "see https://bob@example.com/app or https://example.com:8080/x"),
    "password": ("my password is hunter2", "hunter2", "password", "I reset my password yesterday"),
    "password_zh": ("服务器密码：Passw0rd!", "Passw0rd!", "password", "你的密码是什么？"),
}


def test_every_rule_has_a_positive_and_a_negative_case() -> None:
    assert set(RULES) == set(RULE_NAMES)


@pytest.mark.parametrize("rule", list(RULES))
def test_each_rule_redacts_its_secret(rule: str) -> None:
    text, secret, kind, _ = RULES[rule]
    out = redact(text)
    assert secret not in out and f"[REDACTED:{kind}]" in out
    assert find_secrets(text) == [kind]


@pytest.mark.parametrize("rule", list(RULES))
def test_each_rule_leaves_its_near_miss_alone(rule: str) -> None:
    near_miss = RULES[rule][3]
    assert redact(near_miss) == near_miss
    assert find_secrets(near_miss) == []

SECRETS = [
    ("my key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "api_key"),
    ("sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "api_key"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_key"),
    ("token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "github_token"),
    ("Authorization: Bearer abcdefghijklmnop.qrstuvwxyz", "abcdefghijklmnop.qrstuvwxyz", "bearer_token"),
    ("my password is hunter2", "hunter2", "password"),
    ("password: c0rrect-h0rse", "c0rrect-h0rse", "password"),
    ("我的密码是abc12345，别告诉别人", "abc12345", "password"),
    ("服务器密码：Passw0rd!", "Passw0rd!", "password"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "jwt",
    ),
    ("db at postgres://bob:s3cretpw@db.local/app", "s3cretpw", "url_password"),
]


@pytest.mark.parametrize(("text", "secret", "kind"), SECRETS)
def test_secret_is_redacted_and_named(text: str, secret: str, kind: str) -> None:
    out = redact(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert kind in find_secrets(text)


def test_private_key_block_is_removed_whole() -> None:
    text = "before\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\nAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----\nafter"
    out = redact(text)
    assert "b3BlbnNzaC1rZXktdjEAAAA" not in out and "AAAABG5vbmU" not in out
    assert out.startswith("before\n[REDACTED:private_key]") and out.endswith("after")


def test_unterminated_private_key_is_redacted_to_the_end() -> None:
    out = redact("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA")
    assert "MIIEow" not in out


@pytest.mark.parametrize(
    "text",
    [
        "I reset my password yesterday",
        "the token budget is 4000",
        "We use a password manager",
        "My name is Alice and I like Python",
        "我喜欢喝咖啡",
        "sk-short",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text
    assert not contains_secret(text)


def test_redaction_is_idempotent() -> None:
    once = redact("password: hunter2 and sk-abcdefghijklmnopqrstuvwxyz123")
    assert redact(once) == once
    assert find_secrets(once) == []


def test_the_hint_search_finds_a_hint_exactly_where_some_hint_occurs() -> None:
    """`_ANY_HINT` is a tree of the hints' shared prefixes: on random text made of pieces of hints,
    it says "none" exactly when no hint is a substring (a hint it missed would leave its rule
    untried, and that rule's secret logged)."""
    import random

    from mateclaw_mem import redaction

    hints = sorted({h for rule in redaction._RULES for h in rule.hints})
    pieces = [h[a:b] for h in hints for a in range(len(h)) for b in range(a + 1, len(h) + 1)] + [" ", "x", "_"]
    rng = random.Random(5)
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        has = any(h in text for h in hints)
        assert (redaction._ANY_HINT.search(text) is not None) == has, text
        found += has
    assert 2_000 < found < 18_000  # (both answers, often)
