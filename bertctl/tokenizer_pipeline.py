"""BERT's clean-up and word split as `tokenizers` normalizers and pre-tokenizers, giving the ids of transformers'
pure-Python BasicTokenizer (never_split included).

Kept apart from tokenizer.py, which builds BertTokenizer's pipeline around a vocabulary from these pieces: matching
Python's unicodedata with Unicode tables and regexes is a job of its own, and tokenizer_train.py trains a
vocabulary on the same clean-up and on the pieces encoding can cut.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tokenizers import Regex, normalizers, pre_tokenizers

from bertctl.errors import UsageError
from bertctl.unicode_tables import casing_classes, category_class

if TYPE_CHECKING:
    from bertctl.tokenizer import TokenizerOptions

MAX_WORD_CHARS = 100  # longer words become [UNK], as in transformers' BertTokenizer (Google's allows 200)
UNKNOWN_WORD = "\U000F0000"  # private use (no text keeps it past the clean-up): never_split words the vocab lacks

# The reference (transformers' pure-Python BasicTokenizer) decides with Python's unicodedata. The Rust
# BertNormalizer/BertPreTokenizer use older tables (they keep unassigned code points, miss newer marks and
# punctuation, and stop CJK at U+2B81F), so every such step is an Oniguruma regex here. Oniguruma knows a
# newer Unicode than Python 3.11's 14.0, so the unassigned (Cn) and nonspacing mark (Mn) classes are
# spelled out from the running Python's unicodedata.
_CONTROL = r"[\x{{FFFD}}\p{{C}}{unassigned}&&[^\t\n\r]]"  # removed, like _is_control (C*) plus U+FFFD
_SPACE = r"[\t\n\r\p{Zs}&&[^ ]]"  # become " ", like _is_whitespace (" " itself is left alone: faster)
_SPLIT = r" \x{2028}\x{2029}"  # what str.split() still splits on after the clean-up
_CHINESE = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2CEAF}"
            r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")  # _is_chinese_char: each one its own word
_PUNCT = r"\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}"  # _is_punctuation: likewise
# A piece is a run of other characters, or one CJK/punctuation character (one regex: 2x faster than 3).
_PIECE = f"[^{_SPLIT}{_CHINESE}{_PUNCT}]+|[{_CHINESE}{_PUNCT}]"
# Canonical decompositions tokenizers' NFD and NFC lack (its Unicode tables predate them; a sweep of every code
# point finds only this one): both characters are combining class 0, so a plain replacement is Python's NFD/NFC.
_LATE_DECOMPOSITIONS = {c: parts for c, parts in {"\U00011938": "\U00011935\U00011930"}.items()  # DIVES AKURU O
                        if unicodedata.normalize("NFD", c) == parts}  # as the running Python decomposes it
# Python's str.lower() writes a capital sigma as "ς" when, skipping case-ignorable characters, a cased one
# comes before it and none after; Rust lowercases char by char ("σ"). \K keeps the letters before it out of
# the replaced match: Oniguruma has no lookbehind of unbounded length.
_FINAL_SIGMA = "[{cased}][{ignorable}]*\\KΣ(?![{ignorable}]*[{cased}])"


def normalizer(lowercase: bool, strip_accents: bool | None) -> normalizers.Normalizer:
    """BasicTokenizer's clean-up in its order: drop controls, NFC, lowercase, strip accents (CJK: pre_tokenizer)."""
    return normalizers.Sequence([*_clean_up(), *_casing(lowercase, strip_accents)])


def _casing(lowercase: bool, strip_accents: bool | None) -> list[normalizers.Normalizer]:
    steps = []
    if lowercase:
        steps += [normalizers.Replace(Regex(_final_sigma()), "ς"), normalizers.Lowercase()]
    if strip_accents or (strip_accents is None and lowercase):
        steps += [normalizers.NFD(), *(normalizers.Replace(c, parts) for c, parts in _LATE_DECOMPOSITIONS.items()),
                  normalizers.Replace(Regex(f"[{category_class('Mn')}]"), "")]
    return steps


def never_split_normalizer(vocab: dict[str, int], options: TokenizerOptions,
                            specials_as_text: bool = False) -> tuple[normalizers.Normalizer, list[str]]:
    """normalizer() with transformers' never_split rule, and the words the pre-tokenizer must then keep whole.

    transformers looks a never_split word up whole, skipping WordPiece, where it stands alone (compared before
    casing, and after: then it is not split at punctuation) and where it is one piece after the split at
    punctuation. One the vocabulary lacks is one [UNK] there: its first character becomes UNKNOWN_WORD (or, as a
    piece, the character after it), which no vocabulary entry holds, so WordPiece gives the whole piece [UNK].
    One that casing would change and the vocabulary holds is set aside as private-use markers, one per
    character, before casing and put back after; while lacking words are replaced where they are pieces, the
    words kept whole that have pieces (`c++`, "<mask>" uncased) are set aside too. Only single characters are
    replaced, so offsets keep pointing at each word's own characters (tokenizers maps a longer replacement onto
    its last character)."""
    casing = _casing(options.lowercase, options.strip_accents)
    cased = normalizers.Sequence(casing).normalize_str
    # A lone character casing leaves alone gets WordPiece's id anyway (itself or [UNK]); a marker in its place would
    # glue a punctuation mark or CJK ideograph to its neighbours ("^^" one [UNK], where transformers gives two).
    words = [word for word in _never_split_words(options) if len(word) > 1 or cased(word) != word]
    changed = [word for word in words if cased(word) != word]
    lacking_before = [word for word in changed if word not in vocab]
    lacking_after = [word for word in words if word not in vocab and word not in changed]
    pieces = [word for word in lacking_after if _pieces(word, options.chinese_chars) == 1]
    whole = [word for word in whole_words(cased, options, specials_as_text) if word not in lacking_after
             and _pieces(word, options.chinese_chars) > 1] if pieces else []
    kept = [word for word in changed if word in vocab]
    piece = chr(ord(UNKNOWN_WORD) + 1)  # a piece's own marker: never the start of a lacking word kept whole
    markers = {at: chr(ord(UNKNOWN_WORD) + 2 + i) for i, at in enumerate(
        (word, k) for word in [*kept, *whole] for k in range(len(word)))}
    if words and any({UNKNOWN_WORD, piece, *markers.values()} & set(token) for token in vocab):
        raise UsageError(f"the vocabulary holds one of the private-use characters from U+{ord(UNKNOWN_WORD):X} that "
                         "bertctl marks never_split words with; drop never_split from tokenizer_config.json")
    first = functools.partial(_first_chars, chinese_chars=options.chinese_chars)

    def set_aside(names: list[str]) -> list[normalizers.Normalizer]:  # each character after the previous ones
        return [normalizers.Replace(Regex(first([word]) if k == 0 else
                                          _spelt("".join(markers[word, j] for j in range(k))) + "\\K" + _spelt(char)),
                                    markers[word, k]) for word in names for k, char in enumerate(word)]

    def to_unknown(names: list[str], as_pieces: bool = False) -> list[normalizers.Normalizer]:
        return [normalizers.Replace(Regex(first(names, pieces=as_pieces)), piece if as_pieces else UNKNOWN_WORD)
                ] if names else []

    steps = [*_clean_up(), *set_aside(kept), *to_unknown(lacking_before), *casing, *set_aside(whole),
             *to_unknown([word for word in lacking_after if word not in pieces]), *to_unknown(pieces, True),
             *(normalizers.Replace(marker, word[k]) for (word, k), marker in markers.items())]
    unknown_whole = [*(cased(UNKNOWN_WORD + word[1:]) for word in lacking_before
                       if _pieces(word, options.chinese_chars) > 1),
                     *(UNKNOWN_WORD + word[1:] for word in lacking_after if word not in pieces)]
    return normalizers.Sequence(steps), unknown_whole


def _pieces(word: str, chinese_chars: bool) -> int:
    """How many pieces the split at punctuation (and CJK ideographs) makes of `word`."""
    return len(pre_tokenizer(chinese_chars).pre_tokenize_str(word))


@functools.cache
def _final_sigma() -> str:
    """_FINAL_SIGMA with the running Python's Cased and Case_Ignorable sets (see unicode_tables)."""
    cased, ignorable = casing_classes()
    return _FINAL_SIGMA.format(cased=cased, ignorable=ignorable)


def _clean_up() -> list[normalizers.Normalizer]:
    return [normalizers.Replace(Regex(_CONTROL.format(unassigned=category_class("Cn"))), ""),
            normalizers.Replace(Regex(_SPACE), " "),
            normalizers.NFC(), *(normalizers.Replace(parts, c) for c, parts in _LATE_DECOMPOSITIONS.items())]


def pre_tokenizer(chinese_chars: bool = True, whole: Sequence[str] = ()) -> pre_tokenizers.PreTokenizer:
    """Split on whitespace and around every punctuation character (and CJK ideograph: tokenize_chinese_chars).

    A `whole` word standing alone stays one piece: transformers' never_split check after lowercasing,
    which covers the special tokens too (so "<MASK>" stays "<mask>" where the mask token is "<mask>").
    """
    piece = _PIECE if chinese_chars else f"[^{_SPLIT}{_PUNCT}]+|[{_PUNCT}]"
    if whole:
        piece = f"{_standing_alone(whole, chinese_chars)}|{piece}"
    return pre_tokenizers.Split(Regex(piece), behavior="removed", invert=True)


def _standing_alone(words: Iterable[str], chinese_chars: bool) -> str:
    """A regex for any of `words` as one item of BasicTokenizer's whitespace split, which comes after the
    clean-up and after every CJK ideograph was spaced apart (tokenize_chinese_chars)."""
    apart = _SPLIT + (_CHINESE if chinese_chars else "")
    spelt = (_spelt(w) for w in sorted(words, key=lambda w: (-len(w), w)))
    return f"(?<![^{apart}])(?:{'|'.join(spelt)})(?![^{apart}])"


def _first_chars(words: Iterable[str], chinese_chars: bool, pieces: bool = False) -> str:
    """A regex for the first character of any of `words` standing alone, or, with `pieces`, as one piece of the
    split at punctuation. Each alternative begins with its own character, so the regex engine skips ahead to
    the places worth trying (a long never_split list costs little)."""
    apart = _SPLIT + (_CHINESE if chinese_chars else "") + (_PUNCT if pieces else "")
    rests: dict[str, list[str]] = {}
    for word in sorted(words):
        rests.setdefault(word[0], []).append(_spelt(word[1:]))
    return "|".join(f"{_spelt(char)}(?<![^{apart}][\\s\\S])(?=(?:{'|'.join(after)})(?![^{apart}]))"
                    for char, after in rests.items())


def _spelt(text: str) -> str:
    return "".join(f"\\x{{{ord(c):X}}}" for c in text)


def encodable_pre_tokenizer(alphabet: Sequence[str]) -> pre_tokenizers.PreTokenizer:
    """`pre_tokenizer()` for training, keeping only the pieces encoding can cut: a word with a character
    outside `alphabet`, or longer than 100 characters, is one [UNK] when encoded (transformers' rule; Google's
    tokenization.py allows 200), and the trainer would otherwise drop the odd character and learn pieces of
    text that never occurs ("aqb" teaching "ab"). One regex, as fast as the plain one."""
    chars = "".join(f"\\x{{{ord(c):X}}}" for c in alphabet)
    inner = f"[^{_SPLIT}{_CHINESE}{_PUNCT}]"
    word = f"(?<!{inner})[[{chars}]&&{inner}]{{1,{MAX_WORD_CHARS}}}(?!{inner})"
    return pre_tokenizers.Split(Regex(f"{word}|[[{chars}]&&[{_CHINESE}{_PUNCT}]]"), behavior="removed", invert=True)


@functools.cache
def python_whitespace() -> str:
    """str.split()'s separators as a regex class body: all the splitting do_basic_tokenize=False does."""
    return "".join(f"\\x{{{code:X}}}" for code in range(0x10000) if chr(code).isspace())


def _never_split_words(options: TokenizerOptions) -> list[str]:
    """The never_split words some text can hold standing alone, other than special and added tokens (matched
    before the normalizer anyway)."""
    cleaned = normalizers.Sequence(_clean_up())  # never_split is compared after it, before casing
    added = {*options.specials, *options.extras, *(token.content for token in options.added)}
    return sorted(word for word in set(options.never_split) if word not in added and cleaned.normalize_str(word) == word
                  and _one_word(word, options.chinese_chars))


def _one_word(word: str, chinese_chars: bool) -> bool:
    """Whether BasicTokenizer's whitespace split (after CJK ideographs are spaced apart) leaves `word` whole."""
    cut = Regex(f"[{_SPLIT}{_CHINESE if chinese_chars else ''}]")
    return len(pre_tokenizers.Split(cut, "isolated").pre_tokenize_str(word)) == 1


def whole_words(norm: Callable[[str], str], options: TokenizerOptions, specials_as_text: bool = False) -> list[str]:
    """never_split words and special tokens the normalizer leaves as they are: whole after lowercasing.

    Without lowercasing a special token reaching the pre-tokenizer unmatched is only possible with control
    characters inside it, so only lowercasing tokenizers need `specials_as_text` to read them as Google does."""
    specials = (*options.specials, *options.extras) if options.lowercase and not specials_as_text else ()
    words = {*options.never_split, *specials}
    return [word for word in sorted(words) if norm(word) == word and _one_word(word, options.chinese_chars)]
