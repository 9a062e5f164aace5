"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, anchor,
include or API reference fails), the generated pages match their sources, no page or README
carries dated measurements, and every ``kgqa`` command and flag says what it does."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from docs import gen
from tests.conftest import missing

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.docs
def test_the_site_builds_strictly(tmp_path):
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        missing("mkdocs is not installed: install the docs extra (make setup)")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "stores/virtuoso/index.html", "methods/rog/index.html", "reference/store/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    # the generated tables are in the pages that include them
    assert "Declared gaps" in (tmp_path / "site" / "operations" / "index.html").read_text(encoding="utf-8")


def test_generated_pages_match_their_sources():
    assert gen.stale() == [], "run `python -m docs.gen` and commit docs/generated/"


#: a date, a commit hash (7 to 40 hex digits with a digit and a letter), a load average
DATED = re.compile(r"\b20[2-9]\d-\d{2}-\d{2}\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|load average|load ≈", re.I)


def _user_texts() -> list[Path]:
    readmes = [p for p in ROOT.rglob("README.md") if not {".venv", ".git", "node_modules", "kgqa-data"} & set(p.parts)]
    return sorted(ROOT.joinpath("docs").rglob("*.md")) + readmes + [ROOT / "CHANGELOG.md"]


def test_no_page_or_readme_carries_dates_hashes_or_load_averages():
    found = [f"{path.relative_to(ROOT)}:{n}: {match.group(0)!r}"
             for path in _user_texts()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for match in DATED.finditer(line)]
    assert found == []


def test_dated_text_is_caught():
    assert DATED.search("measured at 556f9e4") and DATED.search("on 2026-11-25") and DATED.search("load ≈ 1")
    assert not DATED.search("m.0kq01 and m.02xtj, 1,000,000 triples, `--seed 0`, deadbeef-free text")


def test_the_readme_fits_two_minutes():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert [line.split("#")[0].strip() for line in lines if line.startswith("make ")][:2] == ["make demo", "make test"]
    assert len((ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_every_command_and_flag_has_help():
    undocumented = []
    for path, help_text, parser in gen.walk(gen.command_tree()):
        if not help_text:
            undocumented.append(" ".join(path))
        undocumented += [f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}"
                         for a in gen.arguments(parser) if not a.help or a.help == argparse.SUPPRESS]
    assert undocumented == []


def test_the_command_line_page_shows_each_help_as_help_prints_it():
    """``%%`` in a help text is one ``%`` on the page, as ``kgqa eval --help`` prints it."""
    page = gen.cli_page()
    assert "%%" not in page and "bootstrap resamples for the 95% intervals" in page


def test_the_support_matrix_shows_a_declared_gap(tmp_path):
    (tmp_path / "test_x.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.notimpl(["bolt"], reason="no such thing on Bolt", raises=AssertionError)
        def test_a(store):
            store([]).names(["a"])

        def test_b(store_kind, make_store):
            make_store(store_kind).search("x")

        def test_not_every_kind(tmp_path):
            pass
    '''))
    page = gen.support_matrix_page(tmp_path)
    assert "| `names` | yes | yes | yes (gap 1) | yes |" in page
    assert "| `search` | yes | yes | yes | yes |" in page
    assert "| `expand` | – | – | – | – |" in page
    assert "1. Bolt (FalkorDB): no such thing on Bolt (`test_x.py::test_a`)" in page


def test_the_webqsp_slice_counts_are_those_of_the_build_summaries(tmp_path, monkeypatch):
    for name in ("webqsp-fb15k237", "webqsp-fb15k237-strict"):
        summary = json.loads((gen.DATASETS / f"{name}.json").read_text(encoding="utf-8"))
        summary.update(kept=summary["kept"] + 1000)
        summary["shapes"]["2-hop"] = 7
        (tmp_path / f"{name}.json").write_text(json.dumps(summary), encoding="utf-8")
    page = gen.webqsp_slice_page(tmp_path)
    assert "1,855 are kept (1,682 with `--strict-constraints`), each one or two graph edges" in page
    assert "(561 one-hop, 7 two-hop, 294 through a CVT pair); of those left out, 688 go to `chains.jsonl`" in page
    # a summary that differs from the committed page: `python -m docs.gen --check` names the page
    monkeypatch.setattr(gen, "DATASETS", tmp_path)
    assert gen.stale() == ["dataset-webqsp-fb15k237.md"]
    assert gen.main(["--check"]) == 1
    # the two files of another build each: refused, not rendered side by side
    (tmp_path / "webqsp-fb15k237.json").write_text((tmp_path / "webqsp-fb15k237-strict.json").read_text())
    with pytest.raises(ValueError, match="not one WebQSP file built without and with --strict-constraints"):
        gen.webqsp_slice_page(tmp_path)
