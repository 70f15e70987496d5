"""backend.filemodes: what Specdeck creates is 0600/0700 whatever the umask lets through; what is
already there keeps its mode unless Specdeck owns it and tightens it."""

from __future__ import annotations

import os
import stat

import pytest

from backend.filemodes import create_private, make_private_dirs, open_private, tighten_dir, tighten_file, write_private


def mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)  # the usual one, under which a plain mkdir or open makes 0755 / 0644
    yield
    os.umask(old)


def test_folders_and_their_missing_parents_are_made_0700(tmp_path):
    d = make_private_dirs(tmp_path / "a" / "b" / "c")
    assert d.is_dir()
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3


def test_a_folder_already_there_keeps_its_mode(tmp_path):
    (tmp_path / "mine").mkdir(mode=0o755)
    make_private_dirs(tmp_path / "mine" / "new")
    assert mode(tmp_path / "mine") == 0o755 and mode(tmp_path / "mine" / "new") == 0o700


def test_a_file_in_the_way_is_an_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError):
        make_private_dirs(tmp_path / "f")


def test_tighten_takes_bits_away_and_never_adds(tmp_path):
    d = tmp_path / "logs"
    d.mkdir(mode=0o755)
    assert tighten_dir(d) and mode(d) == 0o700
    assert not tighten_dir(d)  # already private
    f = tmp_path / "state.db"
    f.touch(mode=0o400)
    assert not tighten_file(f) and mode(f) == 0o400  # nothing to take away; 0600 is not forced on it


def test_tighten_leaves_a_symlink_and_what_it_points_at(tmp_path):
    target = tmp_path / "shared-logs"
    target.mkdir(mode=0o755)
    (tmp_path / "logs").symlink_to(target)
    assert not tighten_dir(tmp_path / "logs")
    assert mode(target) == 0o755


def test_open_private_creates_0600_and_keeps_an_existing_files_mode(tmp_path):
    p = tmp_path / "x.log"
    with open_private(p, "ab") as f:
        f.write(b"one\n")
    assert mode(p) == 0o600
    q = tmp_path / "y.log"
    q.write_text("")
    q.chmod(0o644)
    with open_private(q, "a", encoding="utf-8") as f:
        f.write("two\n")
    assert mode(q) == 0o644 and q.read_text() == "two\n"
    with pytest.raises(ValueError, match="does not write"):
        open_private(p, "rb")


def test_write_private_replaces_whole_and_0600(tmp_path):
    p = tmp_path / "specdeck.toml"
    p.write_text("old\n")
    p.chmod(0o644)
    write_private(p, "new\n")
    assert p.read_text() == "new\n" and mode(p) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["specdeck.toml"]  # no temporary left


def test_create_private(tmp_path):
    p = tmp_path / "state.db"
    assert create_private(p) and mode(p) == 0o600
    assert not create_private(p)
