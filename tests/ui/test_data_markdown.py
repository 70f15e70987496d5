"""Markdown of data loads nothing: every image syntax is shown as text, code stays as it is."""

from __future__ import annotations

import pytest

from ui.components import code_span
from ui.fmt import data_markdown

EVIL = "http://evil.example/t.png"


def test_an_inline_image_shows_as_its_text():
    assert data_markdown(f"see ![x]({EVIL}) here") == f"see !\\[x]({EVIL}) here"


@pytest.mark.parametrize("text", [
    f"![x][ref]\n\n[ref]: {EVIL}",          # full reference
    f"![x][]\n\n[x]: {EVIL}",               # collapsed reference
    f"![ref]\n\n[ref]: {EVIL}",             # shortcut reference
])
def test_reference_images_show_as_their_text(text):
    got = data_markdown(text)
    assert "![" not in got
    assert got.replace("!\\[", "![") == text  # only the image's opening changed


def test_an_image_inside_a_link_shows_as_text_and_the_link_stays():
    assert data_markdown(f"[![a]({EVIL})](http://example.org/)") == f"[!\\[a]({EVIL})](http://example.org/)"


@pytest.mark.parametrize("text", [
    "use `![a](b.png)` to embed an image",
    "two ``![a](b)`` spans `![c](d)`, one line",
    "```\n![a](b.png)\n```",
    "~~~markdown\n![a](b.png)\n\n[r]: x\n~~~",
    "````\n```\n![a](b.png)\n````",
])
def test_code_is_left_as_it_is(text):
    assert data_markdown(text) == text


def test_text_after_a_fence_is_escaped_and_the_fence_is_not():
    text = f"```py\nx = '![a](b)'\n```\nthen ![y]({EVIL})"
    assert data_markdown(text) == f"```py\nx = '![a](b)'\n```\nthen !\\[y]({EVIL})"


@pytest.mark.parametrize("text", [
    f"`a\nb` ![x]({EVIL}) `c`",               # a code span over two lines: the middle is not code
    f"`a | ![x]({EVIL})`",                    # in a table row the cell ends at the pipe
    f"$`$ ![x]({EVIL}) `",                    # math takes the first backtick
    f"<x:`> ![x]({EVIL}) `c` `",              # so does an autolink
    f"[a](b`c) ![x]({EVIL}) `d` `",           # and a link's destination
    f":red[`a] ![x]({EVIL}) `b` `c` `",       # and a directive's label
    f"   ```\n![x]({EVIL})\n```\n![y]({EVIL})",  # an indented fence: its end is not followed
    f"- ```\n  ![x]({EVIL})\n```\n![y]({EVIL})",  # a fence in a list item, closed with the item
    f"<div>\n```\n\n![x]({EVIL})\n```",       # an HTML block: the fence in it is none
    f"$$\n```\n$$\n![x]({EVIL})\n```",        # a math block likewise
    f"\\\\![x]({EVIL})",                      # an escaped backslash, then an image
])
def test_where_code_is_not_certain_every_image_is_escaped(text):
    got = data_markdown(text)
    assert "![" not in got.replace("\\\\![", ""), got  # no unescaped opening left
    assert got.replace("!\\[", "![") == text


def test_a_lone_carriage_return_ends_a_line_as_for_the_renderer():
    text = f"line\r![x]({EVIL})\r```\r![y]({EVIL})\r```\r![z]({EVIL})"
    assert data_markdown(text) == f"line\r!\\[x]({EVIL})\r```\r![y]({EVIL})\r```\r!\\[z]({EVIL})"


def test_nothing_to_escape_is_returned_as_it_is():
    for text in ("", "plain **bold** [link](http://example.org) `code`", "a ! [b]", None):
        assert data_markdown(text) == ("" if text is None else text)


@pytest.mark.parametrize("value", ["/data/run`s/x.log", "``", " lead", "trail ", "`edge`", "/a/b"])
def test_a_code_span_holds_any_text(value):
    span = code_span(value)
    ticks = len(span) - len(span.lstrip("`"))
    inner = span[ticks:-ticks]
    if inner.startswith(" ") and inner.endswith(" ") and inner.strip():
        inner = inner[1:-1]  # CommonMark strips one space each side
    assert inner == value
    assert "`" * ticks not in value
