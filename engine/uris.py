"""Server stores' URIs: split and checked, and shown in messages without their password."""
from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from engine.errors import InvalidInputError


def redacted(uri: str) -> str:
    """``uri`` without the password of its ``user:password@`` part, for messages."""
    return re.sub(r"(//[^/@:?#]*):[^/?#]*@", r"\1@", uri)


def checked_split(url: str) -> SplitResult:
    """``urlsplit(url)``, raising its ValueError for a malformed host or port here: urlsplit
    raises some of it only when the port is read."""
    parts = urlsplit(url)
    parts.port  # noqa: B018 -- reading it checks it
    return parts


def split_uri(uri: str) -> SplitResult:
    """A server store's URI split into its parts; a malformed host or port (``http://[::1``,
    ``http://h:abc``, a port past 65535) is refused naming the URI (urlsplit raises it as a
    bare ValueError, some of it only when the port is read)."""
    try:
        parts = checked_split(uri)
    except ValueError as e:
        raise InvalidInputError(
            f"invalid store URI {redacted(uri)!r}: {e}: give http(s)://host:port/sparql or bolt://host:port, "
            "an IPv6 host in brackets ([::1]) and a port from 0 to 65535"
        ) from e
    return parts
