"""Paths typed in the dashboard: under the workspace and the listed roots only, symlinks resolved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.auth import AccessPolicy, Authority, Caller, NotAuthorised, UserStore
from backend.auth.paths import PathRefused, resolve_typed
from backend.workspace import ConfigError
from backend.flows.workspace import parse_config


def test_a_path_under_a_root_is_resolved(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text("step 1\n")
    got = resolve_typed(str(tmp_path / "logs" / ".." / "logs" / "train.log"), [tmp_path.resolve()])
    assert got == (tmp_path / "logs" / "train.log").resolve()
    assert resolve_typed("logs/train.log", [tmp_path.resolve()], base=tmp_path) == got  # relative: from the workspace


@pytest.mark.parametrize("typed", ["/etc/shadow", "/etc/passwd", "~/.ssh/id_rsa", "/root/.cache/huggingface/token"])
def test_paths_outside_the_roots_are_refused_naming_the_roots(tmp_path, typed):
    with pytest.raises(PathRefused) as exc:
        resolve_typed(typed, [tmp_path.resolve()])
    assert str(tmp_path.resolve()) in str(exc.value) and "[access]" in str(exc.value)


def test_a_symlink_out_of_the_roots_is_refused(tmp_path):
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "innocent.log").symlink_to("/etc/passwd")
    (root / "dir").symlink_to("/etc")
    for typed in (root / "innocent.log", root / "dir" / "passwd", root / "dir" / ".." / "etc" / "passwd"):
        with pytest.raises(PathRefused, match="resolves to /etc"):
            resolve_typed(str(typed), [root])


def test_dotdot_escapes_and_prefix_tricks_are_refused(tmp_path):
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (tmp_path / "ws-evil").mkdir()
    for typed in (f"{root}/../ws-evil/x", f"{root}-evil/x", "../../etc/passwd"):
        with pytest.raises(PathRefused):
            resolve_typed(typed, [root], base=root)


def test_the_users_file_is_never_readable_even_under_a_root(tmp_path):
    (tmp_path / "users.toml").write_text("")
    with pytest.raises(PathRefused, match="users file"):
        resolve_typed(str(tmp_path / "users.toml"), [tmp_path.resolve()])


@pytest.mark.parametrize("typed", ["", "   ", "a\x00b"])
def test_empty_or_nul_paths_are_refused(tmp_path, typed):
    with pytest.raises(PathRefused):
        resolve_typed(typed, [tmp_path.resolve()], base=tmp_path)


def test_a_symlink_loop_is_refused_not_raised(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(PathRefused):
        resolve_typed(str(tmp_path / "a" / "x"), [tmp_path.resolve()])


def _authority(tmp_path, log):
    users = UserStore(tmp_path / "users.toml")
    users.add("alice", "alice-password-1")
    users.add("bob", "bob-password-1", role="viewer")
    auth = Authority(users, audit=lambda *a: log.append(a), policy=lambda: AccessPolicy())
    return auth


def test_typed_paths_are_an_operator_action_audited_once_per_path(tmp_path):
    log: list = []
    auth = _authority(tmp_path, log)
    root = tmp_path.resolve()
    (tmp_path / "train.log").write_text("x")
    viewer = Caller("0.0.0.0", "10.0.0.7", token=auth.login(Caller("0.0.0.0", "10.0.0.7"), "bob", "bob-password-1").token)
    with pytest.raises(NotAuthorised, match="viewer"):
        auth.authorise_path(viewer, str(tmp_path / "train.log"), [root])
    with pytest.raises(NotAuthorised):
        auth.authorise_path(Caller("0.0.0.0", "10.0.0.8"), "/etc/shadow", [root])
    operator = Caller("0.0.0.0", "10.0.0.9",
                      token=auth.login(Caller("0.0.0.0", "10.0.0.9"), "alice", "alice-password-1").token)
    for _ in range(5):  # a followed log is read again and again: one audit row
        assert auth.authorise_path(operator, str(tmp_path / "train.log"), [root]) == root / "train.log"
    with pytest.raises(PathRefused):
        auth.authorise_path(operator, "/etc/shadow", [root])
    rows = [(a[0], a[2], a[5], a[6]) for a in log if a[2] == "read"]
    assert rows == [("bob", "read", "refused", "10.0.0.7"), ("anonymous", "read", "refused", "10.0.0.8"),
                    ("alice", "read", "ok", "10.0.0.9"), ("alice", "read", "refused", "10.0.0.9")]


def test_access_roots_in_the_workspace_file_are_checked_with_their_line(tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_config('[workspace]\nname = "x"\n\n[access]\nroots = ["data/models"]\n', tmp_path / "specdeck.toml")
    assert "specdeck.toml:5" in str(exc.value) and "access.roots" in str(exc.value) and "absolute" in str(exc.value)
    with pytest.raises(ConfigError, match="sessions_per_address"):
        parse_config("[access]\nsessions_per_address = -1\n")
    cfg = parse_config('[access]\nroots = ["/data/models", "~/ckpt"]\nanonymous_view = true\n')
    assert cfg.access.roots == ["/data/models", "~/ckpt"] and cfg.access.anonymous_view
    assert cfg.access.loopback_token is True  # on unless turned off


def test_workspace_read_roots_include_outputs_and_listed_roots(tmp_path):
    from backend.workspace import Workspace

    other = tmp_path / "models"
    other.mkdir()
    link = tmp_path / "link-to-models"
    link.symlink_to(other)
    cfg = parse_config(f'[workspace]\noutputs_dir = "{tmp_path / "out"}"\n[access]\nroots = ["{link}"]\n')
    ws = Workspace(root=tmp_path / "ws", config_path=tmp_path / "ws" / "specdeck.toml", config=cfg)
    assert ws.read_roots == [(tmp_path / "ws").resolve(), (tmp_path / "out").resolve(), other.resolve()]
    assert os.path.realpath(link) == str(other.resolve())
