"""The rule-based sentence splitter: abbreviations, decimals, initials, quotes, ellipses."""

from __future__ import annotations

import pytest

from bertctl.data.sentences import split_sentences


@pytest.mark.parametrize(("text", "expected"), [
    ("The cat sat. The dog ran! Did it? Yes.", ["The cat sat.", "The dog ran!", "Did it?", "Yes."]),
    ("Mr. Darcy bowed to Mrs. Bennet. She smiled.", ["Mr. Darcy bowed to Mrs. Bennet.", "She smiled."]),
    ("It cost 3.50 dollars. Prices rose by 2.5 per cent.",
     ["It cost 3.50 dollars.", "Prices rose by 2.5 per cent."]),
    ("J. R. R. Tolkien wrote it. The U.S. Army came. Then peace.",
     ["J. R. R. Tolkien wrote it.", "The U.S. Army came.", "Then peace."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ('"Is it?" asked Tom. "Yes!" said Ann.', ['"Is it?" asked Tom.', '"Yes!" said Ann.']),
    ("It ended. \u201cWhy?\u201d he asked.", ["It ended.", "\u201cWhy?\u201d he asked."]),
    ("Wait... what? No... I mean yes.", ["Wait... what?", "No...", "I mean yes."]),
    ("Well\u2026 Maybe.", ["Well\u2026", "Maybe."]),
    ("See Fig. 3 and e.g. Paris, i.e. France. Done.", ["See Fig. 3 and e.g. Paris, i.e. France.", "Done."]),
    ("It was (mostly) fine.) Next one.", ["It was (mostly) fine.)", "Next one."]),
    ("no capital after. the period", ["no capital after. the period"]),
    ("Version 2. 3 more items.", ["Version 2.", "3 more items."]),
    ("我来了。你好！好的", ["我来了。", "你好！", "好的"]),
    ("  One sentence without a stop  ", ["One sentence without a stop"]),
    ("", []),
    ("   ", []),
])
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_google_format_lines_stay_whole() -> None:
    """A line that already holds one sentence comes back unchanged (minus surrounding blanks)."""
    line = "The quick brown fox, who was 3.5 years old, jumped over Dr. Smith's fence."
    assert split_sentences(line) == [line]
