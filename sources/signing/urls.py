"""Where the client's requests go: the configured API root, checked so that none of its secret
parts is ever sent or shown, and paths whose segments (ids from the service) stay segments."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from .errors import SigningAPIError, one_line


def checked_base_url(base_url: str) -> httpx.URL:
    """`base_url` as a URL, or a one-line refusal that does not repeat its secret parts: a
    user name, password or query string there would be logged with the URL, and httpx would
    send the password as Basic auth instead of the key."""
    hint = "; the key belongs in SOURCES__SIGNING__API_KEY"
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise SigningAPIError(
            "base_url is not a valid URL; check SOURCES__SIGNING__BASE_URL"
        ) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise SigningAPIError(
            "base_url must be an http(s) URL with a host, like https://host/api/v1; "
            "check SOURCES__SIGNING__BASE_URL"
        )
    shown = one_line(f"{url.scheme}://{url.netloc.decode()}{url.path}")
    if url.userinfo:
        raise SigningAPIError(
            f"base_url must not hold a user name or password (given for {shown}){hint}"
        )
    if url.query or url.fragment:
        raise SigningAPIError(
            f"base_url must not have a query string or fragment (given for {shown}){hint}"
        )
    return url


def item_path(*parts: str) -> str:
    """A path from its segments, each id percent-encoded, so that an id from the service
    (`../me`, `..`, `x?limit=1`) stays one segment of the path it was meant for."""
    return "/" + "/".join(_segment(str(part)) for part in parts)


def _segment(part: str) -> str:
    """One path segment; `.` and `..` too, which URLs otherwise resolve away."""
    quoted = quote(part, safe="")
    return quoted.replace(".", "%2E") if part in (".", "..") else quoted
