"""A rule-based sentence splitter for paragraphs and whole documents on one line.

Google's pre-training format wants one sentence a line, because next-sentence prediction pairs spans of
whole sentences. Real text comes as paragraphs, so corpus building splits each line here. The rules aim at
English prose and stay cheap (one regular expression and a look at the words around each candidate):

- a candidate boundary is `.`, `!`, `?`, an ellipsis (or the CJK full stops), then optional closing quotes
  or brackets, then whitespace;
- it is a boundary only when the next text starts like a sentence: a capital (or a letter without case),
  a digit, or an opening quote/bracket;
- after a single `.`, known abbreviations (`Mr.`, `e.g.`, `Fig. 3`) and initials (`J. R. R. Tolkien`,
  `U.S.`) do not end a sentence; decimals (`3.14`) never match because no space follows the point;
- a lone `I.` is the pronoun or the Roman numeral ("said I.", "World War I.") and ends a sentence, unless
  another initial comes just before or after it (`I. M. Pei`, `J. I. Packer`).
"""

from __future__ import annotations

import re

__all__ = ["split_sentences"]

# Never a sentence end after these (lowercase, without the final period).
_ABBREVIATIONS = frozenset((
    "mr", "mrs", "ms", "messrs", "dr", "prof", "rev", "hon", "st", "sr", "jr", "gen", "col", "capt", "lt",
    "sgt", "maj", "adm", "gov", "sen", "rep", "pres", "supt", "mt", "ft", "ave", "blvd", "rd", "e.g", "i.e",
    "cf", "viz", "vs", "al", "approx", "dept", "est", "misc", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec",
))
# Not a sentence end when a number follows ("No. 5", "Fig. 3", "pp. 10").
_NUMERIC_ABBREVIATIONS = frozenset((
    "no", "nos", "fig", "figs", "vol", "vols", "p", "pp", "ch", "chap", "sec", "art", "eq", "eqs", "ex", "op",
))
_OPENERS = "\"'“‘«([{¿¡"
# A run of `.!?` is tried from its first character only (the lookbehinds): where the whole run is no candidate,
# no later start in it is one either (the run ends at the same place), and trying every start made a run of n
# stops cost n^2 steps (a line of 16,000 dots took 70 s; runs of `?` are common where text lost its encoding).
_CANDIDATE = re.compile(r"((?<![.!?])\.{2,}|…|(?<![.!?])[.!?]+|[。！？]+)([\"'”’»)\]}]*)(\s+|(?<=[。！？])(?=\S))")
_INITIALS = re.compile(r"(?:[^\W\d_]\.)*[^\W\d_]")
_INITIAL = re.compile(r"[^\W\d_]\.")


def split_sentences(text: str) -> list[str]:
    """The sentences of one paragraph (or document), stripped, empty ones dropped."""
    sentences = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        end = match.end()
        if end >= len(text) or not _is_boundary(text, match):
            continue
        sentence = text[start:match.start(3)].strip()
        if sentence:
            sentences.append(sentence)
        start = end
    last = text[start:].strip()
    if last:
        sentences.append(last)
    return sentences


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    """Does the next text start a sentence, and is the period not an abbreviation's or an initial's?"""
    nxt = text[match.end()]
    if nxt in _OPENERS:
        following = text[match.end() + 1:match.end() + 2]
        starts = not following or not following.islower()
    else:
        starts = nxt.isdigit() or (nxt.isalpha() and not nxt.islower())
    if not starts:
        return False
    if match.group(1) != "." or match.group(2):
        return True
    before = text[max(0, match.start() - 40):match.start()].split()
    word = before[-1].lstrip(_OPENERS) if before else ""
    lowered = word.lower()
    if lowered in _ABBREVIATIONS:
        return False
    if _INITIALS.fullmatch(word) and (word != "I" or _among_initials(before, text[match.end():match.end() + 40])):
        return False
    return not (nxt.isdigit() and lowered in _NUMERIC_ABBREVIATIONS)


def _among_initials(before: list[str], after: str) -> bool:
    """Is the `I.` ending `before` one of a name's initials: is the word before it, or the one after, an initial?"""
    previous = before[-2].lstrip(_OPENERS) if len(before) > 1 else ""
    following = after.split(maxsplit=1)[0] if after.strip() else ""
    return any(_INITIAL.fullmatch(word) for word in (previous, following))
