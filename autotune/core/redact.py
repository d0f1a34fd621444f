"""The one rule that takes secrets out of a storage URL before it is printed or written.

A study's storage URL may carry a password in three places: the user information
(``postgresql://user:pw@host/db``, the user name possibly empty, the password possibly
holding an unencoded ``@``), and a query parameter (``?password=pw``, which libpq and
SQLAlchemy accept; likewise ``sslpassword``, ``token``, ``secret``...). :func:`redact`
hides all three: SQLAlchemy's own URL parser renders the user information with the
password as ``***``, and every password-like query value becomes ``***``. A string the
parser cannot read, or reads ambiguously (more than one ``@`` before the path), loses
everything between ``://`` and its last ``@``. A user name without a password that reads
like a token (``postgresql://ghp_x7Q...@host/db``: 16 characters or more, letters and
digits) is hidden too: some services take the token as the user, and hiding a long user
name by mistake costs less than printing a token. A libpq keyword string
(``host=db password = 'a b'``) has each password-like value hidden, quoted or not. A URL
with nothing to hide comes back unchanged.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = ["MASK", "is_secret_key", "redact", "scrub"]

MASK = "***"

# Query keys whose value is a secret: compared lower-case, '-' read as '_', by substring
# (``password``, ``sslpassword``, ``PGPASSWORD``, ``api_key``, ``access_token``...).
_SECRET_PARTS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "signature")
# ``key=value`` in a URL's query, or in a libpq string, where blanks may surround ``=``
# and a value with blanks is quoted (``password = 'a b'``, a quote inside escaped ``\'``).
_QUERY_ITEM = re.compile(
    r"(?P<sep>^|[&;\s])(?P<key>[^&;=\s]+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|[^&;\s]*)"
)
# The shortest user name taken for a token where it has letters and digits: user names of
# people and services are shorter or wordy ("postgres", "svc_autotune"); tokens are 20-40
# characters of mixed letters and digits (GitHub's 40, GitLab's 26, a JWT's hundreds).
_TOKEN_MIN_CHARS = 16


def is_secret_key(key: str) -> bool:
    """Whether a query parameter named ``key`` holds a secret (case-insensitive)."""
    name = unquote_plus(key).strip().lower().replace("-", "_")
    return any(part in name for part in _SECRET_PARTS)


def redact(url: str) -> str:
    """``url`` with every password it holds replaced by ``***``.

    >>> redact("postgresql://user:pw@host/db?password=pw&sslmode=require")
    'postgresql://user:***@host/db?password=***&sslmode=require'
    """
    if "://" not in url:  # not a URL (a libpq "key=value" string?): hide secret values
        return _redact_items(url) if "?" not in url else _redact_query(url)
    head, rest = url.split("://", 1)
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    user = _token_user(authority)
    if user:  # the token is the user (so there is no password): hide it and the query's
        return _redact_query(f"{head}://{MASK}{rest[len(user) :]}")
    rendered = None if authority.count("@") > 1 else _rendered(url)
    if rendered is None:  # unparsable or ambiguous: hide all the user information
        if "@" in rest:
            rest = MASK + rest[rest.rindex("@") :]
        return _redact_query(f"{head}://{rest}")
    return _redact_query(rendered)


def _token_user(authority: str) -> str:
    """The user name of ``authority`` (``user@host:port``) where it has no password and
    reads like a token; ``""`` otherwise."""
    user, at, _ = authority.rpartition("@")
    if not at or ":" in user or "@" in user:
        return ""
    name = unquote_plus(user)
    mixed = any(c.isdigit() for c in name) and any(c.isalpha() for c in name)
    return user if len(name) >= _TOKEN_MIN_CHARS and mixed else ""


def _rendered(url: str) -> str | None:
    """``url`` with its password hidden by SQLAlchemy's renderer (``url`` itself where it
    has none), or None where SQLAlchemy cannot parse it."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # any parse failure: the caller falls back to the blunt rule
        return None
    if parsed.password is None:
        return url
    if "@" in (parsed.host or "") or "@" in (parsed.username or ""):
        return None
    return parsed.render_as_string(hide_password=True)


def _redact_query(url: str) -> str:
    """Every password-like query value of ``url`` as ``***``."""
    if "?" not in url:
        return url
    base, _, query = url.partition("?")
    return f"{base}?{_redact_items(query)}"


def _redact_items(text: str) -> str:
    """Every ``key=value`` of ``text`` (separated by ``&``, ``;`` or blanks) whose key is
    password-like, with its value as ``***``."""

    def hide(match: re.Match[str]) -> str:
        if not is_secret_key(match["key"]):
            return match[0]
        return f"{match['sep']}{match['key']}={MASK}"

    return _QUERY_ITEM.sub(hide, text)


def _secrets(url: str) -> set[str]:
    """The secret fragments of ``url`` as a driver may quote them: the password (as written
    and decoded, and each part of it around an ``@``, where a driver splits the host) and
    every password-like query value."""
    found: set[str] = set()
    head, _, query = url.partition("?")
    rest = head.split("://", 1)[1] if "://" in head else ""
    if "@" in rest:
        userinfo = rest[: rest.rindex("@")]
        password = userinfo.partition(":")[2] or _token_user(userinfo + "@")
        for text in (password, unquote_plus(password)):
            found.add(text)
            found.update(text.split("@"))
    for match in _QUERY_ITEM.finditer(query if "://" in url else url):
        if is_secret_key(match["key"]):
            value = match["value"]
            found.update((value, unquote_plus(value), value.strip("'")))
    return {text for text in found if len(text) >= 3}  # shorter: no more than a letter


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message about ``url``) with every secret of ``url`` in it
    replaced by ``***``: such a message may quote the URL, or the part of a password that
    a driver took for the host (``could not translate host name "pw@host"``)."""
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
