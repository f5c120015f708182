"""The sdist and the wheel as users and distributors get them, not an editable checkout: the sdist holds the whole
test suite (its helper modules too) and what the tests read (docs, bench, README, CHANGELOG), and builds the wheel
again; the wheel holds every module of the package and its bundled novels, and no tests or caches. Both carry the
text of the license pyproject.toml names (Apache-2.0 asks that every copy comes with it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["bertctl", "tests", "docs", "bench", "pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in",
           "LICENSE"]
_BUILD = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def _files(folder: Path) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _build(kind: str, source: Path, out: Path) -> Path:
    """Built as pip does without build isolation (there is no index to fetch setuptools from offline)."""
    done = subprocess.run([sys.executable, "-c", _BUILD, kind, str(out)], cwd=source, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("setuptools", minversion="77")  # pyproject's build-system requirement
    source, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    return _build("build_sdist", source, out)


def test_the_sdist_holds_the_tests_with_their_helpers_and_what_they_read(sdist: Path):
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = {*_files(ROOT / "tests"), *_files(ROOT / "docs"), *_files(ROOT / "bench"), "README.md", "CHANGELOG.md",
              "LICENSE"}
    assert not wanted - names, f"missing from the sdist: {sorted(wanted - names)}"
    assert {"tests/conftest.py", "tests/glue_fixtures.py", "tests/processes.py"} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_sdist_builds_a_wheel_of_the_package_and_its_data_alone(sdist: Path, tmp_path: Path):
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))  # 3.10.12+
    (unpacked,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    wheel = _build("build_wheel", unpacked, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as zf:
        names = {name for name in zf.namelist() if ".dist-info/" not in name}
        assert [name for name in zf.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
    package = {name for name in _files(ROOT / "bertctl") if name.endswith(".py")}
    assert not package - names, f"missing from the wheel: {sorted(package - names)}"
    assert {"bertctl/resources/austen.txt.gz", "bertctl/resources/README.md",
            "bertctl/resources/unicode_tables.json"} <= names
    assert not [name for name in names if not name.startswith("bertctl/") or name.endswith(".pyc")]
