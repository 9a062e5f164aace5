"""The load driver: stream files through their readers into a store, in batches.

Bad lines never stop a load: each goes to a rejects file (``file:line<TAB>reason<TAB>line``)
and the load goes on. Batches already handed to the store stay there whatever happens later.
"""
from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from engine.errors import InvalidInputError
from engine.model import LoadReport, Triple
from engine.open import FREEBASE_NS
from engine.store import Store
from loaders.readers import Format, Reject, Source, detect_format, format_names, get_format

# how many items to read between two progress-bar updates
_PROGRESS_EVERY = 8192


def load_files(
    store: Store,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    format: str | None = None,
    *,
    namespace: str = FREEBASE_NS,
    rejects_path: str | os.PathLike[str] | None = None,
    batch_size: int = 50_000,
    progress: bool = True,
    reader_options: Mapping[str, Any] | None = None,
) -> LoadReport:
    """Load every triple of ``paths`` into ``store`` and report what happened.

    ``format`` applies to every file; None detects each file's own format
    (:func:`loaders.readers.detect_format`). ``namespace`` goes to the RDF readers
    (``ntriples``, ``freebase``); ``reader_options`` to every reader (e.g.
    ``{"drop_domains": ("base", "user")}`` for ``freebase``).

    Report: ``read`` valid triples read, ``loaded`` the growth of ``store.count_triples()``,
    ``duplicates`` = read - loaded (repeats within the input and triples already stored),
    ``rejected`` bad lines. Rejects are written to ``rejects_path`` (always created when
    given), by default to ``<first input name>.rejects.tsv`` in the current directory,
    created only when there are rejects.
    """
    files = _check_paths(paths)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"invalid batch_size {batch_size!r}: use a positive integer")
    plans = [(path, _plan(path, format, namespace, reader_options)) for path in files]
    rejects = _RejectsFile(
        Path(rejects_path) if rejects_path is not None else Path.cwd() / (files[0].name + ".rejects.tsv"),
        always=rejects_path is not None,
    )
    report = LoadReport()
    started = time.perf_counter()
    before = store.count_triples()
    bar = tqdm(
        total=sum(p.stat().st_size for p in files),
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        done_bytes = 0
        for path, (fmt, options) in plans:
            bar.set_description(path.name)
            with Source(path) as src:
                batch: list[Triple] = []
                seen = 0
                for item in fmt.read(src, **options):
                    if item.__class__ is Reject:
                        report.rejected += 1
                        rejects.write(path, item)  # type: ignore[arg-type]
                    else:
                        batch.append(item)  # type: ignore[arg-type]
                        if len(batch) >= batch_size:
                            store.add_triples(batch)
                            report.read += len(batch)
                            batch = []
                    seen += 1
                    if seen % _PROGRESS_EVERY == 0:
                        bar.update(done_bytes + src.tell() - bar.n)
                        bar.set_postfix(triples=report.read + len(batch), rejected=report.rejected, refresh=False)
                if batch:
                    store.add_triples(batch)
                    report.read += len(batch)
            done_bytes += path.stat().st_size
            bar.set_postfix(triples=report.read, rejected=report.rejected, refresh=False)
            bar.update(done_bytes - bar.n)
    finally:
        bar.close()
        rejects.close()
    report.loaded = store.count_triples() - before
    report.duplicates = report.read - report.loaded
    report.seconds = time.perf_counter() - started
    report.rejects_file = rejects.written
    if progress:
        print(_summary(report, len(files)), file=sys.stderr)
    return report


def _check_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every input as a Path, checked to be a readable file before anything is loaded."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = [Path(p) for p in paths]
    if not files:
        raise InvalidInputError(f"no input files given; name one or more files in one of the formats {format_names()}")
    for path in files:
        if not path.exists():
            raise InvalidInputError(f"input file {str(path)!r} does not exist (formats read: {format_names()})")
        if not path.is_file():
            raise InvalidInputError(f"input {str(path)!r} is not a file; name the files themselves")
    return files


def _plan(
    path: Path, format: str | None, namespace: str, reader_options: Mapping[str, Any] | None
) -> tuple[Format, dict[str, Any]]:
    """The reader for one file and the options it takes, refusing options it does not know."""
    try:
        fmt = get_format(format if format is not None else detect_format(path))
    except InvalidInputError as e:
        raise InvalidInputError(f"{path}: {e}") from e
    options = dict(reader_options or {})
    if fmt.namespaced:
        options.setdefault("namespace", namespace)
    accepted = [p.name for p in inspect.signature(fmt.read).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidInputError(
            f"reader option(s) {', '.join(unknown)} do not apply to {path} (format {fmt.name}); "
            f"it takes {', '.join(accepted) or 'no options'}"
        )
    return fmt, options


class _RejectsFile:
    """Writes ``file:line<TAB>reason<TAB>line``; opened at the first reject unless ``always``."""

    def __init__(self, path: Path, always: bool) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self.written: str | None = None
        if always:
            self._open()

    def _open(self) -> IO[str]:
        try:
            self._file = open(self.path, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            raise InvalidInputError(f"cannot write the rejects file {str(self.path)!r}: {e.strerror}") from e
        self.written = str(self.path)
        return self._file

    def write(self, source: Path, reject: Reject) -> None:
        out = self._file or self._open()
        reason = " ".join(reject.reason.split())  # one line, no tabs
        text = reject.text.replace("\r", "\\r").replace("\n", "\\n")
        out.write(f"{source}:{reject.line_no}\t{reason}\t{text}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _summary(report: LoadReport, files: int) -> str:
    text = (
        f"loaded {report.loaded:,} triples from {files} file{'s' if files != 1 else ''} in {report.seconds:.1f} s "
        f"({report.read:,} read, {report.duplicates:,} duplicates, {report.rejected:,} rejected"
    )
    if report.rejected:
        text += f", see {report.rejects_file}"
    return text + ")"
