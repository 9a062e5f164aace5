"""The load driver: stream files through their readers into a store, in batches.

Bad lines never stop a load: each goes to a rejects file (``file:line<TAB>reason<TAB>line``)
and the load goes on. The rejects file goes beside an embedded store, else into the current
directory, never beside the inputs: a data folder may be read only, and is not the load's to
write into (:func:`default_rejects_path`). Batches already handed to the store stay there
whatever happens later.
Compressed inputs are verified to their end before anything is loaded
(:func:`loaders.source.verify_gzip`): a damaged gzip stream decodes to text that was never in
the input, and gzip's own check comes only after it.
"""
from __future__ import annotations

import inspect
import itertools
import os
import queue
import re
import stat
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from engine.errors import InvalidInputError, KGQAWarning, clipped
from engine.graph import FREEBASE_NS, Triple
from engine.identifiers import check_list, positive_int, validate_path
from engine.open import beside_store
from engine.outputs import refuse_input_as_output
from engine.results import LoadReport
from engine.store import Store
from loaders.formats import (
    Format,
    detect_format,
    format_names,
    get_format,
    sniff_format,
)
from loaders.source import Reject, Source, is_gzip, verify_gzip

# how many items to read between two progress-bar updates
_PROGRESS_EVERY = 8192
# the first lines of a file (triples and rejects) that must show it is read in the right format
FORMAT_SAMPLE = 1000


def load_files(
    store: Store,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    format: str | None = None,
    *,
    namespace: str = FREEBASE_NS,
    rejects_path: str | os.PathLike[str] | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    reader_options: Mapping[str, Any] | None = None,
    max_reject_share: float | None = 0.5,
    summary: bool | None = None,
) -> LoadReport:
    """Load every triple of ``paths`` into ``store`` and report what happened.

    ``format`` applies to every file; None detects each file's own format
    (:func:`loaders.formats.detect_format`). ``namespace`` goes to the RDF readers
    (``ntriples``, ``freebase``); ``reader_options`` to every reader (e.g.
    ``{"drop_domains": ("base", "user")}`` for ``freebase``). ``batch_size`` triples go to
    the store per call (default: the store's ``load_batch_size``); reading the next batch
    overlaps the store's work on the last. N-Triples lines already in the store's own form
    (:meth:`engine.store.Store.canonical_ntriples`) go to it unparsed.

    A file read in the wrong format rejects nearly every line: when more than
    ``max_reject_share`` of a file's first 1000 lines (triples and rejects; all of them in a
    shorter file) are rejected, the load stops before anything of that file is stored and
    raises InvalidInputError naming the format its content looks like (None: never stop).

    Report: ``read`` valid triples read, ``loaded`` the triples that were new (as the store
    counts them, :meth:`engine.store.Store.add_triples`; else the growth of ``store.count_triples()``),
    ``duplicates`` = read - loaded (repeats within the input and triples already stored),
    ``rejected`` bad lines, ``rejects_file`` where they were written. Rejects go to
    ``rejects_path`` (always created when given; never one of the inputs, a symbolic link or
    anything but a regular file), by default to :func:`default_rejects_path`, created only when
    there are rejects. ``summary``: print the one-line summary (:func:`summary_line`) to stderr
    at the end; by default when ``progress`` is shown.
    """
    if not isinstance(store, Store):
        raise InvalidInputError(
            f"load_files loads into a store, got {clipped(repr(store), 200)}: open one first, "
            "store = engine.open_store(URI), and pass that"
        )
    files = check_paths(paths)
    if reader_options is not None and not isinstance(reader_options, Mapping):
        raise InvalidInputError(
            f"reader_options must be a mapping of option names to values, such as {{'drop_domains': ('base', 'user')}}, "
            f"got {clipped(repr(reader_options), 200)}"
        )
    if batch_size is None:
        batch_size = store.load_batch_size
    batch_size = positive_int(batch_size, "batch_size")
    plans = [(path, _plan(path, format, namespace, reader_options)) for path in files]
    verify_inputs(files, progress)
    check_reject_share(max_reject_share)
    rejects_file = (
        validate_path(rejects_path, "rejects file") if rejects_path is not None else default_rejects_path(store, files[0])
    )
    refuse_input_as_output(rejects_file, files, what="the rejects file", option="--rejects (rejects_path=)")
    _refuse_rejects_in_store(rejects_file, store)
    _refuse_unsafe_rejects(rejects_file)
    _refuse_overwriting(rejects_file)
    rejects = RejectsFile(rejects_file, always=rejects_path is not None)
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
    writer = _Writer(store)
    check = store.term_check()  # a triple the store cannot hold exactly is a reject, with its line
    interrupted = False
    try:
        done_bytes = 0
        for path, (fmt, options) in plans:
            bar.set_description(path.name)
            # The fast lane: N-Triples lines already in the store's own form skip the parse.
            lane = store.canonical_ntriples(options["namespace"]) if fmt.name == "ntriples" else None
            if lane is not None:
                options = {**options, "verbatim": lane.accepts}
            options = {**options, "check": check}
            with Source(path) as src:
                lines: list[str] = []
                triples: list[Triple] = []
                pending = seen = 0
                # Nothing of a file goes to the store before its first lines show it is in the
                # format it is read as (FormatCheck).
                judge = FormatCheck(path, fmt, max_reject_share, rejects)
                for seen, item in enumerate(fmt.read(src, **options), 1):
                    kind = item.__class__
                    if kind is str:
                        lines.append(item)  # type: ignore[arg-type]
                        pending += 1
                    elif kind is Reject:
                        report.rejected += 1
                        rejects.write(path, item)  # type: ignore[arg-type]
                        judge.rejected(item)  # type: ignore[arg-type]
                    else:
                        triples.append(item)  # type: ignore[arg-type]
                        pending += 1
                    if not judge.done:
                        if seen >= FORMAT_SAMPLE:
                            judge.judge(seen)
                            lines, triples = _put_full_batches(writer, lines, triples, batch_size)
                            pending = len(lines) + len(triples)
                    elif pending >= batch_size:
                        writer.put(lines, triples)
                        lines, triples, pending = [], [], 0
                    if seen % _PROGRESS_EVERY == 0:
                        bar.update(done_bytes + src.tell() - bar.n)
                        bar.set_postfix(triples=writer.handed + pending, rejected=report.rejected, refresh=False)
                judge.finish(seen)
                _put_full_batches(writer, lines, triples, batch_size, last=True)
            done_bytes += path.stat().st_size
            bar.set_postfix(triples=writer.handed, rejected=report.rejected, refresh=False)
            bar.update(done_bytes - bar.n)
        writer.close()
    except KeyboardInterrupt:  # Ctrl-C: say what was stored before stopping
        interrupted = True
    finally:
        writer.stop()
        report.read = writer.loaded
        bar.close()
        rejects.close()
    # the store's own count of what was new, where it has one: another load at the same time
    # grows the store too
    report.loaded = writer.new if writer.new is not None else store.count_triples() - before
    report.duplicates = report.read - report.loaded
    report.seconds = time.perf_counter() - started
    report.rejects_file = rejects.written
    if interrupted:
        print(f"interrupted: {summary_line(report, len(files))}; what was stored stays, and loading the same files "
              "again skips it as duplicates", file=sys.stderr)
        raise KeyboardInterrupt
    if progress if summary is None else summary:
        print(summary_line(report, len(files)), file=sys.stderr)
    return report


def default_rejects_path(store: Store, first_input: Path) -> Path:
    """Where a load's rejects go unless it is told: ``<store folder>.rejects.tsv`` beside an
    embedded store on disk (as its FiDeLiS index, never inside the store's own files), else
    ``<first input's name>.rejects.tsv`` in the current directory."""
    return beside_store(store, ".rejects.tsv") or Path.cwd() / (first_input.name + ".rejects.tsv")


class _Writer:
    """Hands batches to the store on a thread of its own, so that reading and parsing the next
    batch overlaps the store's bulk load (Oxigraph's runs in Rust without the GIL; Virtuoso's and
    Neo4j's in their servers). At most one batch waits: memory stays at about two batches.

    A batch is verbatim N-Triples lines (the fast lane) plus parsed triples; both have been
    checked by the reader, so lines go straight to ``store._add_ntriples``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.handed = 0  # triples handed over
        self.loaded = 0  # triples in batches the store has taken
        self.new: int | None = 0  # of those, the ones the store counted as new (None: it cannot tell)
        self._queue: queue.Queue[tuple[list[str], list[Triple]] | None] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kgqa-load-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is not None:
                continue  # a batch failed: later ones are dropped
            lines, triples = batch
            try:
                if lines:
                    text = "\n".join(lines) + "\n"
                    new = self.store._add_ntriples(itertools.chain((text,), self.store._ntriples(triples)) if triples else (text,))  # type: ignore[attr-defined]
                else:
                    new = self.store.add_triples(triples)
                self.loaded += len(lines) + len(triples)
                self.new = None if new is None or self.new is None else self.new + new
            except BaseException as e:  # noqa: BLE001 — raised again in the reading thread
                self._error = e

    def put(self, lines: list[str], triples: list[Triple]) -> None:
        self._raise()
        self._queue.put((lines, triples))
        self.handed += len(lines) + len(triples)

    def close(self) -> None:
        """Wait for every batch to be loaded; raise the first store error."""
        self.stop()
        self._raise()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


def _put_full_batches(
    writer: _Writer, lines: list[str], triples: list[Triple], size: int, last: bool = False
) -> tuple[list[str], list[Triple]]:
    """Hand over batches of ``size`` items (all of them when ``last``); return what is left."""
    while lines or triples:
        if not last and len(lines) + len(triples) < size:
            break
        batch_lines, batch_triples = lines[:size], triples[: max(0, size - len(lines))]
        writer.put(batch_lines, batch_triples)
        lines, triples = lines[len(batch_lines):], triples[len(batch_triples):]
    return lines, triples


class FormatCheck:
    """Judges a file by its first lines: when most are rejected, it is in another format than
    the one it is read as (a wrong ``--format``, or a misleading file name). ``verb`` says what
    was not done with the file (``loaded``, ``exported``)."""

    def __init__(self, path: Path, fmt: Format, share: float | None, rejects: RejectsFile, verb: str = "loaded") -> None:
        self.path, self.fmt, self.share, self.rejects, self.verb = path, fmt, share, rejects, verb
        self.done = share is None
        self.count = 0
        self.first: Reject | None = None

    def rejected(self, reject: Reject) -> None:
        if reject.unstorable:  # well formed, beyond the store's limits: no sign of a wrong format
            return
        self.count += 1
        if self.first is None:
            self.first = reject

    def finish(self, seen: int) -> None:
        """At the file's end, ``seen`` items read: judge it if its first lines were fewer than the
        sample, and warn (never silently load nothing) when it held no line to read at all."""
        if not self.done:
            self.judge(seen)
        if seen == 0:
            warnings.warn(f"{self.path} holds no {self.fmt.name} triple: it is empty, or only blank lines and comments; "
                          f"nothing of it was {self.verb}. Check that it is the file you meant", KGQAWarning, stacklevel=3)

    def judge(self, seen: int) -> None:
        """Raise if more than the allowed share of the ``seen`` first items were rejected."""
        self.done = True
        if self.first is None or self.count <= self.share * seen:  # type: ignore[operator]
            return
        try:
            guess = sniff_format(self.path)
        except InvalidInputError:
            guess = None
        if guess is not None and guess != self.fmt.name:
            hint = f"its content looks like {guess}: load it with --format {guess}"
        else:
            hint = f"check that it is in that format; formats read: {format_names()}"
        raise InvalidInputError(
            f"{self.path}: {self.count:,} of its first {seen:,} lines were rejected as {self.fmt.name} "
            f"(line {self.first.line_no}: {self.first.reason}); {hint}. Nothing of this file was {self.verb}; "
            f"its rejects are in {self.rejects.path}"
        )


def check_reject_share(share: float | None) -> None:
    """Refuse a ``max_reject_share`` that is not a fraction from 0 to 1 (None: never stop)."""
    if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1):
        raise InvalidInputError(f"invalid max_reject_share {share!r}: use a fraction from 0 to 1, or None")


def verify_inputs(files: list[Path], progress: bool) -> None:
    """Refuse every input that is damaged compressed data, before any file is loaded."""
    compressed = [path for path in files if _starts_gzip(path)]
    if not compressed:
        return
    with tqdm(
        total=sum(p.stat().st_size for p in compressed), unit="B", unit_scale=True, unit_divisor=1024,
        file=sys.stderr, disable=not progress, dynamic_ncols=True, desc="checking gzip",
    ) as bar:
        for path in compressed:
            verify_gzip(path, bar.update)


def _starts_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return is_gzip(f)


def check_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every input as a Path, checked to be a readable file before anything is loaded."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    check_list(paths, "paths", "input files")
    files = [validate_path(p, "input file") for p in paths]
    if not files:
        raise InvalidInputError(f"no input files given; name one or more files in one of the formats {format_names()}")
    for path in files:
        if not path.exists():
            raise InvalidInputError(f"input file {str(path)!r} does not exist (formats read: {format_names()})")
        if not path.is_file():
            raise InvalidInputError(f"input {str(path)!r} is not a file; name the files themselves")
    return files


def _refuse_unsafe_rejects(rejects: Path) -> None:
    """Before anything is loaded: the rejects file may only be a regular file or not exist yet
    (:meth:`RejectsFile._open` checks again as it opens it)."""
    try:
        mode = os.lstat(rejects).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise InvalidInputError(_unwritable_rejects(rejects, e.strerror)) from e
    if not stat.S_ISREG(mode):
        raise InvalidInputError(_unwritable_rejects(rejects, _file_kind(mode)))


def _file_kind(mode: int) -> str:
    """Why a file of this mode, not a regular one, cannot be the rejects file."""
    for is_kind, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory")):
        if is_kind(mode):
            return f"it is {name}, not a regular file"
    return "it is not a regular file"


def _unwritable_rejects(rejects: Path, why: str) -> str:
    return f"cannot write the rejects file {str(rejects)!r}: {why}; name another with --rejects (rejects_path=)"


def _refuse_rejects_in_store(rejects: Path, store: Store) -> None:
    """The rejects file may not be inside an embedded store's folder, among the files the
    store's database owns (one named CURRENT would break the store)."""
    folder = getattr(store, "path", None)
    if folder and rejects.resolve().is_relative_to(Path(folder).resolve()):
        raise InvalidInputError(
            f"the rejects file {str(rejects)!r} is inside the store's folder {folder}: writing there would damage "
            "the store; give --rejects (rejects_path=) a file outside it"
        )


#: a line of a rejects file, as :class:`RejectsFile` writes it: ``file:line<TAB>reason<TAB>``
_REJECTS_LINE = re.compile(rb"[^\t\n]*:\d+\t[^\t\n]*\t")


def is_rejects_file(path: Path) -> bool:
    """Whether ``path`` is empty or starts with a line as :class:`RejectsFile` writes them: a
    file that a load may overwrite with its own rejects."""
    with open(path, "rb") as f:
        head = f.read(64 * 1024)
    return not head or _REJECTS_LINE.match(head) is not None


def _refuse_overwriting(rejects: Path) -> None:
    """Writing the rejects file empties it: an existing file must be an earlier load's rejects
    (or empty), never a file of the user's."""
    if rejects.is_file() and not is_rejects_file(rejects):
        raise InvalidInputError(
            f"the rejects file {str(rejects)!r} exists and is not a rejects file of an earlier load (its first line is not "
            "FILE:LINE<TAB>REASON<TAB>TEXT): writing rejects there would destroy it; give --rejects (rejects_path=) a new "
            "file, or remove that one first"
        )


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


class RejectsFile:
    """Writes ``file:line<TAB>reason<TAB>line``; opened at the first reject unless ``always``."""

    def __init__(self, path: Path, always: bool) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self.written: str | None = None
        if always:
            self._open()

    def _open(self) -> IO[str]:
        # Never through a symbolic link (it could point at any file), and never into a FIFO
        # (opened without O_NONBLOCK, one without a reader would hang the load), a device or
        # anything else that is not a regular file.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o666)
        except OSError as e:  # ELOOP for a link, ENXIO for a FIFO without a reader, …: say which
            try:
                mode = os.lstat(self.path).st_mode
            except OSError:
                mode = stat.S_IFREG
            why = e.strerror if stat.S_ISREG(mode) else _file_kind(mode)
            raise InvalidInputError(_unwritable_rejects(self.path, why)) from e
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise InvalidInputError(_unwritable_rejects(self.path, _file_kind(mode)))
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)  # only now: truncating on open would empty whatever it was
            self._file = open(fd, "w", encoding="utf-8", newline="\n")
        except BaseException:
            os.close(fd)
            raise
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


def summary_line(report: LoadReport, files: int) -> str:
    """What a load did, in one line: counts, time and speed, and where its rejects are."""
    text = (
        f"loaded {report.loaded:,} triples from {files} file{'s' if files != 1 else ''} in {report.seconds:.1f} s "
        f"({report.read:,} read, {report.duplicates:,} duplicates, {report.rejected:,} rejected; "
        f"{report.triples_per_second:,.0f} triples/s)"
    )
    if report.rejected:
        text += f"; rejected lines written to {report.rejects_file}"
    return text
