"""A URL as the kit shows it (rollout_sdk/hosts.py's redact_url): user info of any form, query
values and the fragment as ***; and the same secrets cut from free text that embeds the URL."""

from __future__ import annotations

import pytest

from rollout_sdk.hosts import redact_text, redact_url, split_credentials, url_secrets

SHOWN = [
    # User info, in every form a URL may carry it.
    ("https://user:SECRET@host/v1", "https://***@host/v1"),
    ("http://SECRET@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
    ("http://:SECRET@host/v1", "http://***@host/v1"),
    ("http://us%40er:SE%2FCRET@host/v1", "http://***@host/v1"),
    # A raw '@' or '/' in the password (a parser would read part of it as the host or the path).
    ("http://user:SEC@RET@host/v1", "http://***@host/v1"),
    ("http://user:SEC/RET@host/v1", "http://***@host/v1"),
    # No scheme (not a URL the kit takes, but shown in the error that says so).
    ("user:SECRET@host/v1", "***@host/v1"),
    ("ftp://user:SECRET@host", "ftp://***@host"),
    # Query values, but api-version's; a bare piece whole; the fragment.
    ("http://h/v1?api-key=SECRET", "http://h/v1?api-key=***"),
    ("http://h/v1?key=SECRET&api-version=2024-06-01", "http://h/v1?key=***&api-version=2024-06-01"),
    ("http://h/v1?SECRET", "http://h/v1?***"),
    ("http://h/v1?token=SE%20CRET&empty=", "http://h/v1?token=***&empty="),
    ("http://h/v1#SECRET", "http://h/v1#***"),
    ("http://u:SECRET@h/v1?key=SECRET#SECRET", "http://***@h/v1?key=***#***"),
    # Nothing to hide: as given.
    ("https://api.openai.com/v1", "https://api.openai.com/v1"),
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ("http://[::1", "http://[::1"),
    ("", ""),
]


@pytest.mark.parametrize(("url", "shown"), SHOWN)
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "SECRET" not in shown and "CRET" not in shown and "RET" not in shown


def test_the_user_info_comes_out_whole() -> None:
    assert split_credentials("https://user:pw@host:8/v1?q=1") == (
        "https://host:8/v1?q=1",
        "user:pw",
    )
    assert split_credentials("http://a:b/c@host/v1") == ("http://host/v1", "a:b/c")
    assert split_credentials("http://host/v1?email=a@b") == ("http://host/v1?email=a@b", None)
    assert split_credentials("http://host/v1") == ("http://host/v1", None)


def test_the_secrets_of_a_url_as_written_and_decoded() -> None:
    secrets = url_secrets("http://user:p%40ss@h/v1?key=a%2Bb+c&api-version=1&bare#frag")
    assert set(secrets) == {
        "user:p%40ss",
        "user:p@ss",
        "p%40ss",
        "p@ss",
        "a%2Bb+c",
        "a+b+c",
        "a+b c",
        "bare",
        "frag",
    }
    assert [len(s) for s in secrets] == sorted((len(s) for s in secrets), reverse=True)
    # A user without a password is the secret itself (a token as the user name).
    assert url_secrets("http://tok3n@h/v1") == ["tok3n"]
    assert url_secrets("https://api.openai.com/v1?api-version=2024") == []


def test_free_text_loses_the_url_s_secrets_and_every_url_is_shown_redacted() -> None:
    url = "http://user:SECRET@127.0.0.1:9/v1/chat/completions?api-key=QSECRET"
    text = f"Cannot connect to {url!r}: it said 'SECRET' and QSECRET"
    redacted = redact_text(text, url_secrets(url))
    assert "SECRET" not in redacted
    assert "'http://***@127.0.0.1:9/v1/chat/completions?api-key=***'" in redacted
    # An embedded URL is redacted even when its secrets are spelled another way there.
    assert redact_text("see https://u:p%2Fq@h/v1", []) == "see https://***@h/v1"
    assert redact_text("nothing here", ["", "x" * 3]) == "nothing here"
