"""Tiny synthetic GLUE data in the exact official layout of every task, with a rule a tiny model can learn.

Every example holds exactly one keyword that decides its label: in the sentence for single-sentence tasks,
in the second text for pair tasks. Two-class tasks use cold/warm for class 0/1, three-class tasks
cold/mild/warm, STS-B scores cold ~0, mild ~2.5, warm ~5. The rest of each text is filler from a small
vocabulary, sometimes with the unbalanced `"` the real MRPC and SST-2 files have (quote processing must be off).

The layouts (folder and file names, headers, column order, CoLA's headerless train/dev, MRPC's byte-order
mark, MNLI's 12/16/10 columns) are written out here on their own, not derived from bertctl's registry, so a
wrong registry entry fails the tests instead of agreeing with itself.
"""

from __future__ import annotations

import random
from pathlib import Path

FILLER = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat", "big", "small", "red", "blue", "tree",
          "house", "river", "walked", "quickly", "over", "under", "near", "'s", '"')
KEYWORDS_2 = ("cold", "warm")
KEYWORDS_3 = ("cold", "mild", "warm")
SCORES = {"cold": 0.0, "mild": 2.5, "warm": 5.0}

LABELS = {
    "cola": ("0", "1"), "sst2": ("0", "1"), "mrpc": ("0", "1"), "stsb": (), "qqp": ("0", "1"),
    "mnli": ("entailment", "neutral", "contradiction"), "qnli": ("entailment", "not_entailment"),
    "rte": ("entailment", "not_entailment"), "wnli": ("0", "1"), "ax": ("entailment", "neutral", "contradiction"),
}
PAIR_TASKS = ("mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax")
ALL_TASKS = tuple(LABELS)

STSB_COLUMNS = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
MRPC_COLUMNS = ["#1 ID", "#2 ID", "#1 String", "#2 String"]


def keywords(task: str) -> tuple[str, ...]:
    return KEYWORDS_3 if task in ("mnli", "ax", "stsb") else KEYWORDS_2


def rule_label(task: str, text_a: str, text_b: str | None) -> str | float:
    """The label the rule gives: a label name, or STS-B's score level (without the jitter)."""
    words = (text_b if task in PAIR_TASKS else text_a).split()
    [keyword] = [w for w in words if w in keywords(task)]
    if task == "stsb":
        return SCORES[keyword]
    return LABELS[task][keywords(task).index(keyword)]


def _sentence(rng: random.Random, keyword: str | None) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(4, 8))]
    if keyword is not None:
        words.insert(rng.randint(0, len(words)), keyword)
    return " ".join(words)


def _example(task: str, rng: random.Random) -> tuple[str, str | None, str]:
    """(text_a, text_b, gold label as written in the files)."""
    keyword = rng.choice(keywords(task))
    if task not in PAIR_TASKS:
        return _sentence(rng, keyword), None, LABELS[task][keywords(task).index(keyword)]
    text_a, text_b = _sentence(rng, None), _sentence(rng, keyword)
    if task == "stsb":
        score = min(max(SCORES[keyword] + rng.uniform(-0.3, 0.3), 0.0), 5.0)
        return text_a, text_b, f"{score:.3f}"
    return text_a, text_b, LABELS[task][keywords(task).index(keyword)]


def _parse(text: str) -> str:
    return "( " + " ".join(text.split()) + " )"


def _row(task: str, split: str, i: int, a: str, b: str | None, label: str) -> list[str]:
    """One line's fields in the official column order (split: train, dev or test)."""
    test = split == "test"
    if task == "cola":
        return [str(i), a] if test else ["gj04", label, "" if label == "1" else "*", a]
    if task == "sst2":
        return [str(i), a] if test else [a + " ", label]  # the real file has a space before the tab
    if task == "mrpc":
        ids = [str(1000 + 2 * i), str(1001 + 2 * i)]
        return [str(i), *ids, a, b] if test else [label, *ids, a, b]
    if task == "stsb":
        fields = [str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", a, b]
        return fields if test else [*fields, label]
    if task == "qqp":
        return [str(i), a, b] if test else [str(i), str(2 * i), str(2 * i + 1), a, b, label]
    if task == "mnli":
        fields = [str(i), str(500 + i), f"{500 + i}n", "fiction", _parse(a), _parse(b),
                  f"(ROOT {_parse(a)})", f"(ROOT {_parse(b)})", a, b]
        if test:
            return fields
        return [*fields, label, label] if split == "train" else [*fields, *[label] * 5, label]
    return [str(i), a, b] if test else [str(i), a, b, label]  # qnli, rte, wnli, ax


def _header(task: str, split: str) -> list[str] | None:
    test = split == "test"
    headers = {
        "cola": ["index", "sentence"] if test else None,
        "sst2": ["index", "sentence"] if test else ["sentence", "label"],
        "mrpc": ["index", *MRPC_COLUMNS] if test else ["\ufeffQuality", *MRPC_COLUMNS],
        "stsb": STSB_COLUMNS if test else [*STSB_COLUMNS, "score"],
        "qqp": ["id", "question1", "question2"] if test else
               ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        "mnli": MNLI_COLUMNS if test else [*MNLI_COLUMNS, "label1", "gold_label"] if split == "train" else
                [*MNLI_COLUMNS, "label1", "label2", "label3", "label4", "label5", "gold_label"],
        "qnli": ["index", "question", "sentence"] + ([] if test else ["label"]),
        "ax": ["index", "sentence1", "sentence2"],
    }
    return headers.get(task, ["index", "sentence1", "sentence2"] + ([] if test else ["label"]))


FILES = {  # task: (folder, [(file name, split kind)])
    "cola": ("CoLA", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "sst2": ("SST-2", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "mrpc": ("MRPC", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "stsb": ("STS-B", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "qqp": ("QQP", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "mnli": ("MNLI", [("train.tsv", "train"), ("dev_matched.tsv", "dev"), ("dev_mismatched.tsv", "dev"),
                      ("test_matched.tsv", "test"), ("test_mismatched.tsv", "test")]),
    "qnli": ("QNLI", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "rte": ("RTE", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "wnli": ("WNLI", [("train.tsv", "train"), ("dev.tsv", "dev"), ("test.tsv", "test")]),
    "ax": ("diagnostic", [("diagnostic.tsv", "test")]),
}


def write_glue_data(root: str | Path, tasks: tuple[str, ...] = ALL_TASKS, n_train: int = 64, n_dev: int = 32,
                    n_test: int = 16, seed: int = 0) -> Path:
    """Write `root/<Folder>/<file>.tsv` for the given tasks; same arguments, same bytes. Returns root."""
    root = Path(root)
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    for task in tasks:
        folder, files = FILES[task]
        (root / folder).mkdir(parents=True, exist_ok=True)
        for number, (name, split) in enumerate(files):
            rng = random.Random(f"{seed}-{task}-{number}")
            header = _header(task, split)
            lines = [] if header is None else ["\t".join(header)]
            for i in range(sizes[split]):
                a, b, label = _example(task, rng)
                lines.append("\t".join(_row(task, split, i, a, b, label)))
            (root / folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
