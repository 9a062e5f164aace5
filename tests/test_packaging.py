"""The project as a user installs it: a real, non-editable wheel install used from outside the
checkout — every module imports without ``tests``, the console script runs, the package data is
there — and no installed module names the ``tests`` package."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the import packages the distribution ships (pyproject's packages.find)
PACKAGES = ("benchmarks", "cypher", "engine", "loaders", "sparql")


def test_no_installed_module_imports_tests():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tests."):
                    names = [node.value]  # a module named for importlib
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] == "tests"]
    assert offenders == []


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KGQA_DATA")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """A wheel built from a copy of the sources, installed (without dependencies) into a fresh
    virtual environment that borrows this one's dependencies; its bin folder and its wheel."""
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)], work)
    (wheel,) = (work / "dist").glob("kgqa_engine-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], work)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work).stdout.strip())
    # this environment's dependencies, as a path only: its .pth files (the editable install) stay inert
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin", wheel


def test_the_wheel_ships_the_packages_and_their_data(installed):
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.startswith("kgqa_engine-")} == set(PACKAGES)
    for needed in ("engine/data/sample_freebase.nt", "engine/servers/virtuoso.py", "engine/servers/falkordb.py",
                   "benchmarks/baselines/csr_floor.py", "engine/recipes/rog.toml",
                   *(f"engine/models/adapters/{a}/{f}" for a in ("rog-planner", "arg-generator", "ldr-model")
                     for f in ("adapter_config.json", "adapter_model.safetensors", "prompt_template.txt"))):
        assert needed in names


def test_every_installed_module_imports_outside_the_checkout(installed, tmp_path):
    bin_dir, _ = installed
    code = (
        "import importlib, pkgutil, sys\n"
        f"for package in {PACKAGES!r}:\n"
        "    module = importlib.import_module(package)\n"
        "    assert '/site-packages/' in module.__file__, module.__file__\n"
        "    for info in pkgutil.walk_packages(module.__path__, package + '.'):\n"
        "        if not info.name.endswith('.__main__'):  # a script: it runs on import\n"
        "            importlib.import_module(info.name)\n"
        "print(len(sys.modules), 'tests' in sys.modules)\n"
    )
    done = _run([str(bin_dir / "python"), "-c", code], tmp_path)
    assert done.stdout.split()[1] == "False"


def test_the_installed_console_script_runs_from_anywhere(installed, tmp_path):
    bin_dir, _ = installed
    kgqa = str(bin_dir / "kgqa")
    help_text = _run([kgqa, "--help"], tmp_path).stdout
    assert "server" in help_text and "bench" in help_text
    demo = _run([kgqa, "demo", "--store", str(tmp_path / "demo")], tmp_path).stdout  # the sample ships as package data
    assert "Blade Runner" in demo and "new 73" in demo
    done = subprocess.run([kgqa, "bench", "retrieval", "--quick", "--stores", "oxigraph"], cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KGQA_DATA")},
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    # outside a checkout, with no $KGQA_DATA, the datasets cannot be found: say what to set
    assert done.returncode == 2 and "set $KGQA_DATA" in done.stderr, done.stderr


def test_the_models_extra_takes_a_torch_range_and_make_setup_pins_the_tested_build():
    """A user's environment keeps its own torch build (CUDA, ROCm, CPU) within the range the code
    needs; `make setup` installs the exact CPU build this project tests with, before the extras."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]["models"]
    (torch,) = [Requirement(r) for r in extra if Requirement(r).name == "torch"]
    assert {spec.operator for spec in torch.specifier} == {">=", "<"}, torch  # a range, never one exact build
    setup = (ROOT / "Makefile").read_text(encoding="utf-8").split("\n$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    pinned = [line.split("torch==", 1)[1].split()[0] for line in setup.splitlines() if "install -q torch==" in line]
    assert len(pinned) == 1 and Version(pinned[0]) in torch.specifier
    assert setup.index("torch==") < setup.index("'.[models"), "the exact build goes in before the extras could pick another"
