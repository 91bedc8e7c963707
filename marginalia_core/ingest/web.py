"""Fetching a web page a person explicitly asked to add: the one network use besides the model
service. Bounded in time and size, HTTP(S) only, and the final address (after redirects) and
the fetch time are kept with the document so it can be cited by URL and refreshed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import httpx

from marginalia_core.errors import FetchError, TooLargeError
from marginalia_core.ingest.extraction import human_size

# Seconds to connect and between received bytes; the whole fetch must end within the deadline
# (a server trickling one byte a second never holds ingestion for long).
FETCH_TIMEOUT_S = 15.0
FETCH_DEADLINE_S = 45.0
# Real article pages are well under a few MB of HTML; a 30 MB "page" is not an article.
MAX_PAGE_BYTES = 10 * 1024 * 1024
MAX_REDIRECTS = 5
USER_AGENT = "Marginalia (document indexer; fetched on a user's request)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Fetched:
    url: str  # the final address, after redirects (no user name or password)
    data: bytes
    mime: str
    fetched_at: str  # ISO 8601, UTC


def display_url(url: str) -> str:
    """``url`` without a user name or password (never shown or stored)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def is_web_address(text: str) -> bool:
    return text.strip().lower().startswith(("http://", "https://"))


def check_url(url: str) -> str:
    """The address, trimmed, or a FetchError saying why it cannot be fetched."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise FetchError(
            f"{url[:200] or 'That'} is not a web address; give one starting with http:// or "
            "https://."
        )
    return url


def fetch(
    url: str,
    *,
    timeout: float | None = None,
    deadline: float | None = None,
    max_bytes: int = MAX_PAGE_BYTES,
) -> Fetched:
    """GET ``url`` (following up to MAX_REDIRECTS redirects) or raise FetchError/TooLargeError
    with a reason a person can act on. Only HTML is accepted. ``timeout``/``deadline``
    default to FETCH_TIMEOUT_S/FETCH_DEADLINE_S."""
    timeout = FETCH_TIMEOUT_S if timeout is None else timeout
    deadline = FETCH_DEADLINE_S if deadline is None else deadline
    url = check_url(url)
    shown = display_url(url)
    started = time.monotonic()
    try:
        with httpx.Client(follow_redirects=True, max_redirects=MAX_REDIRECTS,
                          timeout=httpx.Timeout(timeout),
                          headers={"User-Agent": USER_AGENT,
                                   "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1"}
                          ) as client, client.stream("GET", url) as response:
            final = display_url(str(response.url))
            if response.status_code >= 400:
                raise FetchError(
                    f"{final} answered {response.status_code} "
                    f"{response.reason_phrase or ''}".rstrip()
                    + "; nothing was added. Check the address."
                )
            mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if mime not in HTML_TYPES:
                raise FetchError(
                    f"{final} is not a web page (the server sent {mime or 'no content type'}). "
                    "Download the file and upload it instead."
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise _too_big(final, int(declared), max_bytes)
            body = bytearray()
            for piece in response.iter_bytes(CHUNK_BYTES):
                body.extend(piece)
                if len(body) > max_bytes:
                    raise _too_big(final, len(body), max_bytes, at_least=True)
                if time.monotonic() - started > deadline:
                    raise FetchError(f"{final} took more than {deadline:g} s to send; nothing "
                                     "was added. Try again later.")
    except httpx.TooManyRedirects:
        raise FetchError(f"{shown} redirects more than {MAX_REDIRECTS} times; nothing was "
                         "added.") from None
    except httpx.TimeoutException:
        raise FetchError(f"{shown} did not answer within {timeout:g} s; nothing was added. "
                         "Try again later.") from None
    except httpx.HTTPError as err:
        raise FetchError(f"{shown} could not be reached ({type(err).__name__}); nothing was "
                         "added. Check the address and your connection.") from None
    return Fetched(final, bytes(body), mime, datetime.now(UTC).isoformat(timespec="seconds"))


def _too_big(url: str, size: int, limit: int, *, at_least: bool = False) -> TooLargeError:
    more = "more than " if at_least else ""
    return TooLargeError(f"{url} is {more}{human_size(size)}; web pages up to "
                         f"{human_size(limit)} are added. Nothing was added.")
