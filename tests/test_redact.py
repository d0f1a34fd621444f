"""The one redaction rule (autotune/core/redact.py): a storage password never reaches a
message, a preset or a report page, in whichever form the URL carries it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote_plus

import pytest

from autotune.core.redact import is_secret_key, redact
from autotune.study.storage import optuna_glue

SECRET = "S3cr3tPw"

# Every form a password takes in a storage URL, and what the rule must leave of it.
FORMS = [
    ("postgresql://user:S3cr3tPw@db.example/study", "postgresql://user:***@db.example/study"),
    ("postgresql://:S3cr3tPw@db.example/study", "postgresql://:***@db.example/study"),
    ("postgresql://user:S3cr@3tPw@db.example/study", "postgresql://***@db.example/study"),
    ("postgresql://user:S3c/r@3tPw@db.example/study", "postgresql://***@db.example/study"),
    ("mysql+pymysql://user:S3cr%403tPw@db:3306/study", "mysql+pymysql://user:***@db:3306/study"),
    (
        "postgresql://user@db.example/study?password=S3cr3tPw&sslmode=require",
        "postgresql://user@db.example/study?password=***&sslmode=require",
    ),
    (
        "postgresql://user@db/study?sslmode=require&PassWord=S3cr3tPw",
        "postgresql://user@db/study?sslmode=require&PassWord=***",
    ),
    ("postgresql://db/study?sslpassword=S3cr3tPw", "postgresql://db/study?sslpassword=***"),
    ("postgresql://db/study?api-key=S3cr3tPw;x=1", "postgresql://db/study?api-key=***;x=1"),
    ("redis://:S3cr3tPw@cache:6379/0", "redis://:***@cache:6379/0"),
    ("not a url://user:S3cr3tPw@@host", "not a url://***@host"),
    ("host=db password=S3cr3tPw dbname=study", "host=db password=*** dbname=study"),
    ("host=db password = S3cr3tPw dbname=study", "host=db password=*** dbname=study"),
    ("host=db password='S3cr 3tPw' dbname=study", "host=db password=*** dbname=study"),
    (r"password='S3cr\' 3tPw' host=db", "password=*** host=db"),
]


@pytest.mark.parametrize(("url", "expected"), FORMS)
def test_every_form_of_a_password_is_hidden(url: str, expected: str) -> None:
    redacted = redact(url)
    assert redacted == expected
    for piece in (SECRET, "S3cr", "3tPw"):
        assert piece not in redacted
    assert optuna_glue.redact(url) == expected  # the search's name for the same rule


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///autotune_runs/mu-cpu/study.db",
        "sqlite:///a b/study.db?timeout=30",
        "journal:study.log",
        "postgresql://user@db.example:5432/study?sslmode=require",
        "postgresql://svc_autotune_reader@db.example/study",  # long, but words
        "postgresql://db.example/study/ghp_x7Q9aB3kLmN0pQ2rS4tU@x",  # not the user
    ],
)
def test_a_url_with_nothing_to_hide_is_unchanged(url: str) -> None:
    assert redact(url) == url


def test_secret_query_keys() -> None:
    for key in ("password", "PASSWD", "pwd", "secret", "token", "sslpassword", "api_key"):
        assert is_secret_key(key), key
    for key in ("sslmode", "host", "dbname", "timeout", "application_name"):
        assert not is_secret_key(key), key


def test_the_report_page_uses_the_rule() -> None:
    from autotune.core.errors import UsageError
    from autotune.report import data

    with pytest.raises(UsageError) as caught:  # nothing listens on port 1
        data.study_data("s", f"postgresql://user:{SECRET}@127.0.0.1:1/x?password={SECRET}")
    assert "user:***@127.0.0.1:1/x?password=***" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(("url", "expected"), FORMS)
def test_a_saved_preset_holds_no_password(url: str, expected: str, tmp_path: Path) -> None:
    from fake_presets import make_preset

    from autotune.preset import SearchSummary, load_preset, preset_to_dict, save_preset
    from autotune.preset.export import EXPORT_FORMATS, export_preset

    search = SearchSummary(trials_run=1, wall_s=1.0, study_name="s", storage=url)
    preset = make_preset(search=search)  # built by hand, as any caller might
    assert preset_to_dict(preset)["search"]["storage"] == expected
    path = save_preset(preset, tmp_path / "best.yaml")
    text = path.read_text()
    for piece in (SECRET, "S3cr", "3tPw"):
        assert piece not in text
    assert load_preset(path).search.storage == expected  # type: ignore[union-attr]
    for fmt in EXPORT_FORMATS:
        assert SECRET not in export_preset(preset, fmt, preset_ref="best.yaml").text, fmt


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:p@S3CRETPW@127.0.0.1:1/db",  # a driver splits at the first @
        "postgresql://user:S3CRETPW@127.0.0.1:1/db?sslpassword=S3CRETPW",
    ],
)
def test_a_storage_that_does_not_open_names_no_password(url: str) -> None:
    from autotune.core.errors import UsageError
    from autotune.study.storage.optuna_glue import open_storage

    with pytest.raises(UsageError) as caught:
        open_storage(url, create=True)
    assert "S3CRETPW" not in str(caught.value)


def test_scrub_hides_each_part_of_a_password_and_secret_query_values() -> None:
    from autotune.core.redact import scrub

    url = "postgresql://user:pa%40ss@word@host/db?password=qsecret&sslmode=require"
    text = 'host name "word@host"; pa@ss@word; qsecret; sslmode require'
    assert scrub(text, url) == 'host name "***@host"; ***; ***; sslmode require'


def test_scrub_hides_a_quoted_libpq_password() -> None:
    from autotune.core.redact import scrub

    text = "FATAL: password authentication failed (password S3cr 3tPw)"
    assert scrub(text, "host=db password = 'S3cr 3tPw'") == (
        "FATAL: password authentication failed (password ***)"
    )


TOKEN = "ghp_x7Q9aB3kLmN0pQ2rS4tU"  # letters and digits, as services issue them


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgresql://{TOKEN}@db.example/study", "postgresql://***@db.example/study"),
        (f"redis://{TOKEN}@cache:6379/0?token=q1", "redis://***@cache:6379/0?token=***"),
        ("mysql://glpat%2DAbC123dEf456GhI7@db/s", "mysql://***@db/s"),  # percent-encoded
    ],
)
def test_a_token_given_as_the_user_is_hidden(url: str, expected: str, tmp_path: Path) -> None:
    from fake_presets import make_preset

    from autotune.core.redact import scrub
    from autotune.preset import SearchSummary, save_preset

    assert redact(url) == expected
    search = SearchSummary(trials_run=1, wall_s=1.0, study_name="s", storage=url)
    text = save_preset(make_preset(search=search), tmp_path / "best.yaml").read_text()
    assert TOKEN not in text and "AbC123" not in text
    user = unquote_plus(url.split("://")[1].split("@")[0])  # as a driver would quote it
    assert scrub(f'role "{user}" does not exist', url) == 'role "***" does not exist'
