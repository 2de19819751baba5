"""A page cursor names where a page ended, for one listing only, and says what is wrong with any other."""

from __future__ import annotations

import base64
import json

import pytest

from api.server import cursor

LISTING = ["project", None, ["pending", "running"], False]
SHAPE = (str, float, int)


def test_a_cursor_gives_back_the_key_it_was_made_from() -> None:
    key = ("team-a", 1_790_000_000.123456, 42)
    made = cursor.encode(LISTING, key)
    assert made.isascii() and "=" not in made and "/" not in made and "+" not in made  # URL-safe
    assert cursor.decode(made, LISTING, SHAPE) == key


@pytest.mark.parametrize(
    ("made", "words"),
    [
        ("not-a-cursor", "not a cursor this service gave out"),
        ("", "not a cursor this service gave out"),
        (cursor.encode(["project", "b", [], False], ("a", 1.0, 1)), "other filters"),
        (
            base64.urlsafe_b64encode(json.dumps([0, LISTING, ["a", 1.0, 1]]).encode()).decode(),
            "another release",
        ),
        (cursor.encode(LISTING, ("a", 1.0)), "not a cursor"),  # a key of the wrong length
        (cursor.encode(LISTING, (1, 1.0, 1)), "not a cursor"),  # of the wrong types
        (cursor.encode(LISTING, ("a", 1.0, True)), "not a cursor"),
        ("x" * 3000, "not a cursor"),
    ],
)
def test_any_other_cursor_is_refused_with_what_to_do(made: str, words: str) -> None:
    with pytest.raises(cursor.BadCursor, match=words):
        cursor.decode(made, LISTING, SHAPE)
