"""A real offline install: `pip install --no-build-isolation --no-index` into a fresh venv that
sees the system's setuptools (Debian's python3-setuptools), then the installed package, not this
source tree, generates text."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE, MODEL


def test_pip_install_offline(tmp_path):
    for module, package in (("venv", "python3-venv"), ("pip", "python3-pip"), ("setuptools", "python3-setuptools")):
        if importlib.util.find_spec(module) is None:  # not imported: setuptools must not load here
            pytest.skip(f"{package} is not installed")
    # pip builds in the source folder; build from a copy so the checkout stays clean
    src = tmp_path / "src"
    shutil.copytree(HERE.parent, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    env_dir = tmp_path / "venv"
    # the venv sees the system's pip and setuptools, so it needs no pip of its own
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=300)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-index", str(src)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import ember, sys\n"
            "assert ember.__file__.startswith(sys.prefix), ember.__file__\n"
            f"with ember.Model({str(MODEL)!r}) as m, ember.Context(m, n_ctx=64) as c:\n"
            "    print(ember.__file__)\n"
            "    print(c.generate('And God said', max_tokens=4, temperature=0).read())\n")
    r = subprocess.run([str(py), "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    where, text = r.stdout.splitlines()[:2]
    assert where.startswith(str(env_dir))
    assert len(text.strip()) > 0
