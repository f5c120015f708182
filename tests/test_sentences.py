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
    ("It was I. Then World War I. The end.", ["It was I.", "Then World War I.", "The end."]),
    ("I. M. Pei and J. I. Packer met. I. I. Rabi came.", ["I. M. Pei and J. I. Packer met.", "I. I. Rabi came."]),
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


@pytest.mark.parametrize("run", ["." * 20_000, "!" * 20_000, "?!." * 7_000, "\u3002" * 20_000],
                         ids=["dots", "bangs", "mixed", "cjk"])
def test_long_runs_of_stops_take_linear_time(run: str) -> None:
    """A run of sentence stops (a line of dots, `???` where text lost its encoding) is tried once, not from every
    character of it: 20,000 of them took about a minute and a half."""
    import time

    start = time.perf_counter()
    assert split_sentences(f"It ends{run}and goes on. Then {run} Next one.") == [
        f"It ends{run}and goes on.", f"Then {run}", "Next one."]
    assert time.perf_counter() - start < 2.0


def test_runs_of_stops_split_as_before() -> None:
    """Only where the search starts changed: the first character of a run, where the old pattern matched too."""
    cases = {"Wait..! Now.": ["Wait..!", "Now."], "Huh?!?! Yes.": ["Huh?!?!", "Yes."],
             "So....\u2026 Then.": ["So....\u2026", "Then."], "Oh!!!\" Yes.": ["Oh!!!\"", "Yes."],
             "Hm.....x. Ok.": ["Hm.....x.", "Ok."]}
    for text, expected in cases.items():
        assert split_sentences(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("The end. ", ["The end."]),  # a stop and white space ending the text
    ('He paused. "why not?" she asked.', ['He paused. "why not?" she asked.']),  # a quote opening lowercase text
    ('He wrote "Dr." Then he left.', ['He wrote "Dr."', "Then he left."]),  # a closing quote ends an abbreviation
    ('He said "Mr. Darcy came." She left.', ['He said "Mr. Darcy came."', "She left."]),  # an opening quote before it
    ("J. I. Packer wrote it. Then.", ["J. I. Packer wrote it.", "Then."]),  # I. after the text's first initial
])
def test_boundaries_at_the_edges_of_quotes_and_texts(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected
