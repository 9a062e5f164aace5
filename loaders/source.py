"""Input files for the readers: plain or gzip (told apart by the magic bytes), read line by
line with 1-based line numbers, and the pieces every line reader shares: :class:`Reject` for a
line that cannot become a triple, and the checks of ids and relation names.
"""
from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, NoReturn, Union

from engine.errors import InvalidInputError, KGQAError, clipped
from engine.graph import Triple
from engine.identifiers import MAX_ID_LENGTH, validate_id, validate_relation
from engine.limits import TermCheck


#: the most characters of a rejected line kept and written to the rejects file
REJECT_TEXT_WIDTH = 10_000


@dataclass(frozen=True)
class Reject:
    """A line that could not become a triple: where, what, and why. ``unstorable``: the line
    is well formed, but its triple is beyond what the store keeps exactly.

    ``text`` keeps at most :data:`REJECT_TEXT_WIDTH` characters of the line, then says how long
    it was: a line of megabytes (a file without line breaks) is neither held nor written whole."""

    line_no: int
    text: str
    reason: str
    unstorable: bool = False

    def __post_init__(self) -> None:
        if len(self.text) > REJECT_TEXT_WIDTH:
            object.__setattr__(self, "text", clipped(self.text, REJECT_TEXT_WIDTH))


Item = Union[Triple, Reject]


class BadLine(Exception):
    """A line that cannot become a triple; the message is the reason."""


# ---------------------------------------------------------------------------- files

class Source:
    """A file opened for streaming: its raw lines (gzip undone) and the bytes consumed so far.

    ``tell()`` counts bytes of the file on disk (compressed bytes for gzip), so that
    progress can be measured against ``size``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._raw: IO[bytes] = open(self.path, "rb")
        except FileNotFoundError as e:
            raise InvalidInputError(f"input file {str(self.path)!r} does not exist") from e
        except IsADirectoryError as e:
            raise InvalidInputError(f"input {str(self.path)!r} is a directory; name the files in it") from e
        except OSError as e:
            raise InvalidInputError(f"cannot open input file {str(self.path)!r}: {e.strerror}") from e
        self.size = os.fstat(self._raw.fileno()).st_size
        self.compressed = is_gzip(self._raw)
        if self.path.suffix == ".gz" and self.size and not self.compressed:
            self._raw.close()
            raise InvalidInputError(f"input file {str(self.path)!r} ends in .gz but is not gzip data")
        self._lines: IO[bytes] = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._lines)

    def binary(self) -> IO[bytes]:
        """The decompressed byte stream."""
        return self._lines

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._lines.close()
        self._raw.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


PathOrSource = Union[str, os.PathLike, Source]


# compressed bytes read, and at most this many bytes decompressed, per step of verify_gzip
_VERIFY_CHUNK = 1 << 20
# what zlib's messages mean to someone holding the file
_ZLIB_REASONS = {
    "incorrect data check": "its CRC-32 does not match its contents",
    "incorrect length check": "its length field does not match its contents",
    "incorrect header check": "a gzip header is damaged, or the file has trailing data that is not gzip",
}


def verify_gzip(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None) -> None:
    """Decompress a gzip file to its end, without keeping the text, and raise
    InvalidInputError unless every member is intact (header, deflate data, CRC-32, length).

    gzip checks a member's CRC only at its end, so a reader that loads as it decompresses
    has stored whatever a damaged stream decodes to before the check fails: the loader
    verifies first, so corrupt or truncated compressed input never reaches a store. A file
    that is not gzip passes. ``progress`` gets the number of compressed bytes read, step by step.
    """
    path = Path(path)
    with open(path, "rb") as raw:
        if not is_gzip(raw):
            return
        decoder: zlib._Decompress | None = zlib.decompressobj(wbits=31)  # 16 + 15: one gzip member
        members = 1
        while chunk := raw.read(_VERIFY_CHUNK):
            if progress is not None:
                progress(len(chunk))
            data = chunk
            while data:
                if decoder is None:  # between members: NUL padding, or the next member
                    data = data.lstrip(b"\x00")
                    if not data:
                        break
                    decoder, members = zlib.decompressobj(wbits=31), members + 1
                try:
                    decoder.decompress(data, _VERIFY_CHUNK)  # bounded output, discarded
                except zlib.error as e:
                    reason = str(e).partition(": ")[2] or str(e)
                    _corrupt(path, _ZLIB_REASONS.get(reason, f"its deflate data is damaged ({reason})"), members, raw.tell())
                if decoder.eof:
                    data, decoder = decoder.unused_data, None
                else:
                    data = decoder.unconsumed_tail
        if decoder is not None:
            _corrupt(path, "it ends before its compressed stream does (truncated)", members, raw.tell())


def _corrupt(path: Path, why: str, member: int, offset: int) -> NoReturn:
    raise InvalidInputError(
        f"input file {str(path)!r} is not intact gzip data: {why} (member {member}, near compressed byte "
        f"{offset:,}); nothing was loaded from it. Download or compress it again (`gzip -t` checks a file)"
    )


def is_gzip(stream: IO[bytes]) -> bool:
    """Whether a seekable binary stream starts with the gzip magic bytes (position kept)."""
    where = stream.tell()
    magic = stream.read(2)
    stream.seek(where)
    return magic == b"\x1f\x8b"


class Opened:
    """Use a Source handed in as is (its owner closes it), or open and close a path."""

    def __init__(self, source: PathOrSource) -> None:
        self._owned = not isinstance(source, Source)
        self.source = Source(source) if self._owned else source  # type: ignore[arg-type]

    def __enter__(self) -> Source:
        return self.source

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.source.close()


def numbered_lines(src: Source) -> Iterator[tuple[int, str] | Reject]:
    """(line number, text without its line ending) per line; a Reject for undecodable bytes
    and, as the last item, for a file that cannot be read to its end (truncated gzip)."""
    n = 0
    try:
        for n, raw in enumerate(src, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                yield Reject(n, text, f"not UTF-8 text ({e.reason} at byte {e.start})")
                continue
            line = line.rstrip("\r\n")
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield n, line
    except (OSError, EOFError, zlib.error) as e:
        # a truncated or corrupt gzip stream: keep what came before, say where it stopped
        yield Reject(n + 1, "", f"the file cannot be read past this point: {e}")


def parse_lines(
    source: PathOrSource, parse: Callable[[str], Triple | str | None], check: TermCheck | None = None
) -> Iterator[Item]:
    """Drive a one-line parser over a file: ``parse`` returns a Triple, None to skip the
    line, or raises BadLine / an identifier or literal error to reject it. ``check`` (a
    store's :meth:`~engine.store.Store.term_check`) rejects a triple the store cannot hold."""
    with Opened(source) as src:
        for item in numbered_lines(src):
            if item.__class__ is Reject:
                yield item  # type: ignore[misc]
                continue
            n, line = item  # type: ignore[misc]
            try:
                triple = parse(line)
            except (BadLine, KGQAError) as e:
                yield Reject(n, line, str(e))
                continue
            if triple is not None:
                if check is not None and triple.__class__ is Triple:
                    why = check(triple)  # type: ignore[arg-type]
                    if why is not None:
                        yield Reject(n, line, why, unstorable=True)
                        continue
                yield triple


class RelationNames:
    """validate_relation with memory: datasets use few relations over many lines."""

    def __init__(self) -> None:
        self._ok: set[str] = set()

    def __call__(self, name: str) -> str:
        if name not in self._ok:
            validate_relation(name)
            self._ok.add(name)
        return name


def check_id(node_id: str) -> str:
    # isprintable() is a fast test that passes almost every id; the exact rule is validate_id's
    if not node_id:
        raise BadLine("empty id")
    if not node_id.isprintable() or len(node_id) > MAX_ID_LENGTH:
        validate_id(node_id)  # control characters, lone surrogates (a JSON \ud800 escape), length
    return node_id
