from __future__ import annotations

import pytest

from mateclaw_mem.memory.redaction import contains_secret, find_secrets, redact

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
