"""scripts/_venv.sh: the serving environment is reused only when it holds exactly the pins of
requirements-serve.txt, and a symlinked one is read, never written through."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOCK = "# pins\nfoo==1.0\ntorch==2.13.0  # the CPU wheel\n"


def _env(root: Path, dists: dict[str, str]) -> Path:
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next(env.glob("lib/python*/site-packages"))
    for name, version in dists.items():
        meta = site / f"{name}-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return env


def _bash(cwd: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f". scripts/_venv.sh; {script}"], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def repo(tmp_path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "_venv.sh", tmp_path / "scripts" / "_venv.sh")
    (tmp_path / "requirements-serve.txt").write_text(LOCK)
    return tmp_path


def test_matches_only_the_exact_pins(repo, tmp_path):
    env = _env(tmp_path, {"foo": "1.0", "torch": "2.13.0+cpu"})
    assert _bash(repo, f"serve_env_matches {env} requirements-serve.txt").returncode == 0
    (repo / "other.txt").write_text("foo==1.1\ntorch==2.13.0\n")
    assert _bash(repo, f"serve_env_matches {env} other.txt").returncode == 1
    site = next(env.glob("lib/python*/site-packages"))
    extra = site / "torchvision-0.28.0.dist-info"
    extra.mkdir()
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    assert _bash(repo, f"serve_env_matches {env} requirements-serve.txt").returncode == 1
    assert _bash(repo, f"serve_env_matches {tmp_path / 'missing'} requirements-serve.txt").returncode == 1


def test_a_matching_env_is_stamped_and_reused(repo, tmp_path):
    env = _env(tmp_path, {"foo": "1.0", "torch": "2.13.0+cpu"})
    shutil.move(str(env), str(repo / ".venv-serve"))
    r = _bash(repo, "ensure_serve_env")
    assert r.returncode == 0, r.stderr
    stamp = repo / ".venv-serve" / ".specdeck-requirements"
    assert len(stamp.read_text().strip()) == 64
    r = _bash(repo, "ensure_serve_env")
    assert r.returncode == 0 and "building" not in r.stderr


def test_a_symlinked_matching_env_is_used_without_writing_into_it(repo, tmp_path):
    env = _env(tmp_path, {"foo": "1.0", "torch": "2.13.0+cpu"})
    (repo / ".venv-serve").symlink_to(env)
    r = _bash(repo, "ensure_serve_env")
    assert r.returncode == 0, r.stderr
    assert "holds exactly the pins" in r.stderr
    assert (repo / ".venv-serve").is_symlink()
    assert not (env / ".specdeck-requirements").exists()
