"""Which Chromium the browser tests drive: Debian's headless shell where it is installed, else the full one."""

from __future__ import annotations

from tests.e2e import chromium


def _installed(monkeypatch, tmp_path, *names: str) -> None:
    for name in ("shell", "full"):
        path = tmp_path / name
        if name in names:
            path.write_text("")
        monkeypatch.setattr(chromium, "HEADLESS_SHELL" if name == "shell" else "FULL", path)


def test_the_headless_shell_is_taken_where_it_is_installed(monkeypatch, tmp_path):
    _installed(monkeypatch, tmp_path, "shell", "full")
    assert chromium.executable() == tmp_path / "shell" and chromium.missing() is None


def test_the_full_chromium_is_taken_without_the_shell(monkeypatch, tmp_path):
    _installed(monkeypatch, tmp_path, "full")
    assert chromium.executable() == tmp_path / "full" and chromium.missing() is None


def test_neither_installed_names_both_and_the_packages(monkeypatch, tmp_path):
    _installed(monkeypatch, tmp_path)
    why = chromium.missing()
    assert why is not None
    assert str(tmp_path / "shell") in why and str(tmp_path / "full") in why and "chromium-headless-shell" in why
