"""SQuAD v1.1/v2.0: features, postprocessing and scores against ports of google-research/bert's run_squad.py and
the official evaluation scripts written here, parity with transformers' QA head, and a tiny model fine-tuned
end to end on a synthetic set whose answer is learnable (the one colour word in the context)."""

from __future__ import annotations

import collections
import gzip
import json
import math
import random
import re
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import never_called
from processes import ranks_said
from typer.testing import CliRunner

from bertctl.checkpoint import build_model, load_model, read_checkpoint, save_model
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.squad import SquadData, SquadExample, doc_spans, make_features, max_context, read_squad, split_words
from bertctl.errors import UsageError
from bertctl.finetune_qa import finetune_squad
from bertctl.model import BertForMaskedLM, BertForQuestionAnswering
from bertctl.squad import check_lengths, evaluate_squad, predict_squad, squad_task
from bertctl.squad_answers import AnswerSettings, answers_from_logits, basic_tokens, best_indexes, softmax
from bertctl.squad_metrics import squad_v1_scores, squad_v2_scores
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

FILLER = ["the", "man", "went", "to", "store", "and", "bought", "a", "of", "milk", "in", "city", "day", "river"]
COLOURS = ["red", "blue", "green", "black", "white", "pink"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *FILLER, *COLOURS, "what", "colour", "is", "it", "?", ".",
         ",", "(", ")", "-", "'", "s", "19", "##95", "##43", "john", "smith", "cafe", "##s", "un", "##like", "##ly"]
FAST = {"lr": 3e-3, "batch_size": 8, "max_seq_length": 24, "doc_stride": 6, "max_query_length": 6,
        "eval_batch_size": 16, "log_every": 5, "epochs": 4, "warmup_fraction": 0.1}


def _tokenizer() -> BertTokenizer:
    return BertTokenizer.from_vocab(VOCAB)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    return save_model(BertForMaskedLM(config), tmp_path_factory.mktemp("model") / "encoder", _tokenizer())


def _squad(articles: list[list[tuple[str, list[dict]]]], version: str | None = "1.1") -> dict:
    data = [{"title": f"t{i}", "paragraphs": [{"context": c, "qas": qas} for c, qas in paragraphs]}
            for i, paragraphs in enumerate(articles)]
    return {"data": data, **({"version": version} if version else {})}


def _write(path: Path, content: dict) -> Path:
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def _synthetic(n: int, seed: int, impossible_share: float = 0.0) -> dict:
    """Contexts of filler words holding one colour; "what colour is it ?" is answered by that colour. With
    impossible_share, some contexts hold no colour and their question has no answer (v2.0)."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(8, 22))]
        qa: dict = {"id": f"q{seed}-{i}", "question": "what colour is it ?"}
        if rng.random() < impossible_share:
            qa.update(answers=[], is_impossible=True)
        else:
            at = rng.randrange(len(words))
            words.insert(at, rng.choice(COLOURS))
            start = len(" ".join(words[:at])) + (1 if at else 0)
            qa["answers"] = [{"text": words[at], "answer_start": start}]
            if impossible_share:
                qa["is_impossible"] = False
        paragraphs.append((" ".join(words), [qa]))
    return _squad([paragraphs], "v2.0" if impossible_share else "1.1")


# --- a port of google-research/bert run_squad.py, the reference ------------------------------------------

def _run_squad_words(context: str) -> tuple[list[str], list[int]]:
    """run_squad.py's loop as it is written (`doc_tokens[-1] += c`), quadratic in a word's length."""
    words: list[str] = []
    word_of_char = []
    after_space = True
    for char in context:
        if char in " \t\r\n\u202f":
            after_space = True
        else:
            if after_space:
                words.append(char)
            else:
                words[-1] += char
            after_space = False
        word_of_char.append(len(words) - 1)
    return words, word_of_char


def _google_examples(raw: dict, is_training: bool, v2: bool) -> list[dict]:
    examples = []
    for entry in raw["data"]:
        for paragraph in entry["paragraphs"]:
            doc_tokens, char_to_word = _run_squad_words(paragraph["context"])
            for qa in paragraph["qas"]:
                ex = {"qid": qa["id"], "question": qa["question"], "doc_tokens": doc_tokens, "start": None,
                      "end": None, "answer": None, "impossible": v2 and qa.get("is_impossible", False)}
                if is_training and not ex["impossible"]:
                    answer = qa["answers"][0]
                    s = char_to_word[answer["answer_start"]]
                    e = char_to_word[answer["answer_start"] + len(answer["text"]) - 1]
                    if " ".join(doc_tokens[s:e + 1]).find(" ".join(answer["text"].split())) == -1:
                        continue
                    ex.update(start=s, end=e, answer=answer["text"])
                elif is_training:
                    ex.update(start=-1, end=-1, answer="")
                examples.append(ex)
    return examples


def _google_features(examples, tokenize, max_seq_length, doc_stride, max_query_length, is_training):
    features = []
    for example_index, ex in enumerate(examples):
        query = tokenize(ex["question"])[:max_query_length]
        tok_to_orig, orig_to_tok, all_doc = [], [], []
        for i, token in enumerate(ex["doc_tokens"]):
            orig_to_tok.append(len(all_doc))
            for sub in tokenize(token):
                tok_to_orig.append(i)
                all_doc.append(sub)
        tok_start = tok_end = None
        if is_training and ex["impossible"]:
            tok_start = tok_end = -1
        if is_training and not ex["impossible"]:
            tok_start = orig_to_tok[ex["start"]]
            tok_end = orig_to_tok[ex["end"] + 1] - 1 if ex["end"] < len(ex["doc_tokens"]) - 1 else len(all_doc) - 1
            wanted = " ".join(tokenize(ex["answer"]))
            found = False
            for ns in range(tok_start, tok_end + 1):
                for ne in range(tok_end, ns - 1, -1):
                    if not found and " ".join(all_doc[ns:ne + 1]) == wanted:
                        tok_start, tok_end, found = ns, ne, True
        max_doc = max_seq_length - len(query) - 3
        spans, offset = [], 0
        while offset < len(all_doc):
            length = min(len(all_doc) - offset, max_doc)
            spans.append((offset, length))
            if offset + length == len(all_doc):
                break
            offset += min(length, doc_stride)
        for span_index, (start, length) in enumerate(spans):
            tokens = ["[CLS]", *query, "[SEP]"]
            segments = [0] * len(tokens)
            to_orig, max_ctx = {}, {}
            for i in range(length):
                pos = start + i
                to_orig[len(tokens)] = tok_to_orig[pos]
                best, best_index = None, None
                for si, (s, n) in enumerate(spans):
                    end = s + n - 1
                    if s <= pos <= end:
                        score = min(pos - s, end - pos) + 0.01 * n
                        if best is None or score > best:
                            best, best_index = score, si
                max_ctx[len(tokens)] = best_index == span_index
                tokens.append(all_doc[pos])
                segments.append(1)
            tokens.append("[SEP]")
            segments.append(1)
            sp = ep = None
            if is_training and not ex["impossible"]:
                if not (tok_start >= start and tok_end <= start + length - 1):
                    sp = ep = 0
                else:
                    sp, ep = tok_start - start + len(query) + 2, tok_end - start + len(query) + 2
            if is_training and ex["impossible"]:
                sp = ep = 0
            features.append({"example_index": example_index, "tokens": tokens, "segments": segments,
                             "to_orig": to_orig, "max_ctx": max_ctx, "start": sp, "end": ep})
    return features


def _google_final_text(pred_text, orig_text, basic):
    def strip(text):
        chars, mapping = [], {}
        for i, c in enumerate(text):
            if c != " ":
                mapping[len(chars)] = i
                chars.append(c)
        return "".join(chars), mapping

    tok_text = " ".join(basic(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_map = strip(orig_text)
    tok_ns, tok_map = strip(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    inverse = {v: k for k, v in tok_map.items()}
    if start not in inverse or inverse[start] not in orig_map or end not in inverse or inverse[end] not in orig_map:
        return orig_text
    return orig_text[orig_map[inverse[start]]:orig_map[inverse[end]] + 1]


def _google_softmax(scores):
    """run_squad.py's _compute_softmax: the exponentials' total added up one by one."""
    top = None
    for score in scores:
        if top is None or score > top:
            top = score
    exps, total = [], 0.0
    for score in scores:
        exps.append(math.exp(score - top))
        total += exps[-1]
    return [x / total for x in exps]


def _run_squad_answers(raw, tokenizer, starts, ends, n_best, max_len, v2):
    """run_squad.py's predictions, n-best and null odds for `raw` in windows of 16 (stride 3, question 4)."""
    examples = _google_examples(raw, False, v2)
    reference = _google_features(examples, lambda t: tokenizer.encode(t, add_special_tokens=False).tokens, 16, 3, 4,
                                 False)
    return _google_predictions(examples, reference, starts, ends, n_best, max_len, v2, 0.0,
                               lambda text: basic_tokens(text, tokenizer))


def _google_predictions(examples, features, starts, ends, n_best, max_len, v2, threshold, basic):
    def best(logits):
        return [i for i, _ in sorted(enumerate(logits), key=lambda x: x[1], reverse=True)[:n_best]]

    predictions, nbests, odds = {}, {}, {}
    for example_index, ex in enumerate(examples):
        prelim, score_null, null = [], 1e6, None
        for fi, f in enumerate(features):
            if f["example_index"] != example_index:
                continue
            s_log, e_log = [float(x) for x in starts[fi]], [float(x) for x in ends[fi]]
            if v2 and s_log[0] + e_log[0] < score_null:
                score_null, null = s_log[0] + e_log[0], (fi, 0, 0, s_log[0], e_log[0])
            for s in best(s_log):
                for e in best(e_log):
                    if s >= len(f["tokens"]) or e >= len(f["tokens"]) or s not in f["to_orig"] or e not in f["to_orig"]:
                        continue
                    if not f["max_ctx"].get(s, False) or e < s or e - s + 1 > max_len:
                        continue
                    prelim.append((fi, s, e, s_log[s], e_log[e]))
        if v2:
            prelim.append(null)
        prelim = sorted(prelim, key=lambda p: p[3] + p[4], reverse=True)
        seen, nbest = {}, []
        for fi, s, e, sl, el in prelim:
            if len(nbest) >= n_best:
                break
            f = features[fi]
            if s > 0:
                tok = " ".join(f["tokens"][s:e + 1]).replace(" ##", "").replace("##", "")
                orig = " ".join(ex["doc_tokens"][f["to_orig"][s]:f["to_orig"][e] + 1])
                text = _google_final_text(" ".join(tok.strip().split()), orig, basic)
                if text in seen:
                    continue
            else:
                text = ""
            seen[text] = True
            nbest.append({"text": text, "start_logit": sl, "end_logit": el})
        if v2 and "" not in seen:
            nbest.append({"text": "", "start_logit": null[3], "end_logit": null[4]})
        if not nbest:
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
        for n, p in zip(nbest, _google_softmax([n["start_logit"] + n["end_logit"] for n in nbest]), strict=True):
            n["probability"] = p
        nbests[ex["qid"]] = nbest
        if not v2:
            predictions[ex["qid"]] = nbest[0]["text"]
            continue
        non_null = next(n for n in nbest if n["text"])
        odds[ex["qid"]] = score_null - non_null["start_logit"] - non_null["end_logit"]
        predictions[ex["qid"]] = "" if odds[ex["qid"]] > threshold else non_null["text"]
    return predictions, nbests, odds


# --- features ----------------------------------------------------------------------------------------------

EDGE_CASES = [
    ("The leader was John Smith (1995-1943). John Smith's cafes were unlikely in the city .",
     [{"id": "born", "question": "what is it ?", "answers": [{"text": "1995", "answer_start": 27}]},
      {"id": "who", "question": "what colour is it is it is it ?", "answers": [{"text": "John Smith",
                                                                                "answer_start": 15}]},
      {"id": "last", "question": "what ?", "answers": [{"text": "city .", "answer_start": 79}]},
      {"id": "first", "question": "it ?", "answers": [{"text": "The", "answer_start": 0}]},
      {"id": "cafes", "question": "what ?", "answers": [{"text": "cafes", "answer_start": 52}]}]),
    ("red\tblue \u202f green  river\nmilk", [{"id": "ws", "question": "colour ?",
                                                "answers": [{"text": "green", "answer_start": 11}]}]),
]


def test_context_words_are_run_squads_and_a_long_word_is_cut_once():
    """A context holding a long run without whitespace (3 MB of a damaged or minified file, a blob) took minutes
    in `finetune|evaluate|predict squad`: the word grew by one character at a time, a copy per character."""
    rng = random.Random(0)
    for _ in range(300):
        context = "".join(rng.choice("ab \t\n\u202f\u00a0\u3000") for _ in range(rng.randrange(0, 30)))
        assert split_words(context) == _run_squad_words(context), repr(context)
    words, word_of_char = split_words(" x" + "y" * 1_000_000 + " z ")  # ~0.2 s; a copy per character took ~25 s
    assert [len(w) for w in words] == [1_000_001, 1] and word_of_char[:3] == [-1, 0, 0] and word_of_char[-1] == 1


@pytest.mark.parametrize(("max_seq_length", "doc_stride", "max_query_length"), [(16, 3, 4), (20, 5, 8), (64, 128, 64)])
def test_features_and_labels_equal_run_squad_answers(tmp_path, max_seq_length, doc_stride, max_query_length):
    synthetic = [(p["context"], p["qas"]) for p in _synthetic(6, 3)["data"][0]["paragraphs"]]
    raw = _squad([EDGE_CASES, synthetic])
    path = _write(tmp_path / "train.json", raw)
    tokenizer = _tokenizer()
    data = read_squad(path, "train")
    ours = make_features(tokenizer, data, max_seq_length, doc_stride, max_query_length, training=True)

    def tokenize(text):
        return tokenizer.encode(text, add_special_tokens=False).tokens

    theirs = _google_features(_google_examples(raw, True, False), tokenize, max_seq_length, doc_stride,
                              max_query_length, True)
    assert len(ours) == len(theirs)
    assert (len(theirs) > len(data.examples)) is (max_seq_length < 64)  # long contexts are windowed
    for i, ref in enumerate(theirs):
        assert [tokenizer.id_to_token(t) for t in ours.input_ids[i]] == ref["tokens"]
        assert ours.token_type_ids[i].tolist() == ref["segments"]
        assert (ours.start_positions[i], ours.end_positions[i]) == (ref["start"], ref["end"])
        assert ours.example_index[i] == ref["example_index"]
        offset = ours.doc_offset[i]
        assert {offset + k: bool(v) for k, v in enumerate(ours.max_context[i])} == ref["max_ctx"]
        words = ours.piece_word[data.examples[ours.example_index[i]].paragraph]
        assert {offset + k: int(words[ours.doc_start[i] + k]) for k in range(len(ours.max_context[i]))} == \
            ref["to_orig"]
    assert sum(ref["start"] > 0 for ref in theirs) > 5  # answers inside windows, not only [CLS]
    if max_seq_length == 64:
        born = theirs[0]
        assert born["tokens"][born["start"]:born["end"] + 1] == ["19", "##95"]  # narrowed out of "(1995-1943)."


def test_windows_never_skip_pieces_when_the_stride_is_longer_than_a_window():
    """run_squad.py moves on by min(length, doc_stride): a stride past the window's end would leave pieces unseen."""
    assert doc_spans(10, 4, 6) == [(0, 4), (4, 4), (8, 2)]
    assert doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_spans(3, 4, 2) == [(0, 3)] and doc_spans(0, 4, 2) == []


def test_a_longer_window_wins_a_piece_by_its_hundredth_of_a_point_a_token():
    """_check_is_max_context adds 0.01 x the window's length: past 100 pieces that outweighs one token of context
    (windows of 300 pieces: piece 250 is 49 from window 0's end, 50 from window 1's start, and window 0 wins)."""
    spans = doc_spans(310, 300, 200)
    assert spans == [(0, 300), (200, 110)]
    assert [max_context(spans, i, 250) for i in (0, 1)] == [True, False]
    assert [max_context(spans, i, 260) for i in (0, 1)] == [False, True]


def test_an_answer_with_other_white_space_inside_is_found_as_run_squad_finds_it(tmp_path):
    """run_squad.py compares the answer's whitespace words joined by one space with the context's words."""
    context = "The leader was John  Smith\nof the city ."
    qas = [{"id": "two", "question": "what ?", "answers": [{"text": "John  Smith\nof", "answer_start": 15}]}]
    raw = _squad([[(context, qas)]])
    data = read_squad(_write(tmp_path / "train.json", raw), "train")
    (google,) = _google_examples(raw, True, False)
    assert data.skipped == 0 and (data.examples[0].start_word, data.examples[0].end_word) == (3, 5)
    assert (google["start"], google["end"]) == (3, 5)


def test_only_a_question_longer_than_max_query_length_is_counted_as_cut(tmp_path):
    qas = [{"id": "q", "question": "what colour is it ?", "answers": [{"text": "red", "answer_start": 0}]}]
    data = read_squad(_write(tmp_path / "train.json", _squad([[("red milk", qas)]])), "train")
    assert [make_features(_tokenizer(), data, 16, 4, n, training=True).truncated for n in (6, 5, 4)] == [0, 0, 1]


def test_max_seq_length_must_leave_a_context_piece_after_the_longest_question():
    """At max_query_length + 3 a question of max_query_length pieces leaves no room: windows of 0 pieces never end."""
    check_lengths(22, 18, 64, "m")
    check_lengths(64, 18, 64, "m")  # every position the model has
    with pytest.raises(UsageError, match="must be more than --max-query-length 18"):
        check_lengths(21, 18, 64, "m")
    with pytest.raises(UsageError, match="^--max-seq-length 65: m takes at most 64 tokens; give --max-seq-length "
                                         "64 or less$"):
        check_lengths(65, 18, 64, "m")
    with pytest.raises(UsageError, match=r"^--max-seq-length 384 \(the SQuAD default\): m takes at most 256"):
        check_lengths(384, 18, 256, "m")


def test_v2_metrics_name_only_the_kinds_of_question_the_dev_set_has():
    """evaluate-v2.0.py prints HasAns_/NoAns_ figures only for the kinds of question the file holds."""
    def dev(*answers):
        return SquadData([SquadExample(f"q{i}", "?", 0, a) for i, a in enumerate(answers)], [[]], "2.0", Path("d"))

    assert squad_task("2.0", dev(("a",))).metrics == ("exact", "f1", "HasAns_exact", "HasAns_f1", "best_exact",
                                                      "best_f1")
    assert squad_task("2.0", dev((), ("a",))).metrics[2:6] == ("HasAns_exact", "HasAns_f1", "NoAns_exact",
                                                               "NoAns_f1")
    assert squad_task("2.0", dev(())).metrics[2:4] == ("NoAns_exact", "NoAns_f1")


def test_v2_impossible_questions_are_labelled_cls(tmp_path):
    raw = _synthetic(12, 5, impossible_share=0.5)
    path = _write(tmp_path / "v2.json", raw)
    data = read_squad(path, "train")
    assert data.version == "2.0" and any(e.impossible for e in data.examples)
    with pytest.raises(UsageError, match="has 0 answers; a training question needs exactly one$"):
        read_squad(path, "train", version="1.1")  # run_squad.py without version_2_with_negative: no is_impossible
    ours = make_features(_tokenizer(), data, 24, 6, 6, training=True)
    theirs = _google_features(_google_examples(raw, True, True),
                              lambda t: _tokenizer().encode(t, add_special_tokens=False).tokens, 24, 6, 6, True)
    assert [(f["start"], f["end"]) for f in theirs] == list(zip(ours.start_positions, ours.end_positions,
                                                                strict=True))


def test_answers_not_at_answer_start_are_skipped_with_googles_warning(tmp_path, caplog):
    raw = _squad([[("red blue green", [{"id": "ok", "question": "colour ?", "answers": [{"text": "blue",
                                                                                          "answer_start": 4}]},
                                       {"id": "bad", "question": "colour ?", "answers": [{"text": "pink",
                                                                                           "answer_start": 4}]},
                                       {"id": "past", "question": "colour ?", "answers": [{"text": "green",
                                                                                            "answer_start": 90}]}])]])
    data = read_squad(_write(tmp_path / "t.json", raw), "train")
    assert [e.qid for e in data.examples] == ["ok"] and data.skipped == 2
    assert "could not find answer 'pink' of bad" in caplog.text


def test_empty_negative_and_overlong_answers_are_skipped_where_run_squad_keeps_or_fails(tmp_path, caplog):
    """run_squad.py keeps an empty answer text (found anywhere) and a negative answer_start (Python counts it from
    the end), and fails on an answer running past the context's end (by one character too); bertctl skips them all
    with the warning, as docs/finetuning.md says."""
    raw = _squad([[("red blue green", [
        {"id": "ok", "question": "colour ?", "answers": [{"text": "blue", "answer_start": 4}]},
        {"id": "empty", "question": "colour ?", "answers": [{"text": "", "answer_start": 4}]},
        {"id": "negative", "question": "colour ?", "answers": [{"text": "green", "answer_start": -5}]},
        {"id": "overlong", "question": "colour ?", "answers": [{"text": "green day", "answer_start": 9}]},
        {"id": "one over", "question": "colour ?", "answers": [{"text": "greens", "answer_start": 9}]}])]])
    googles = _google_examples({**raw, "data": [{**raw["data"][0], "paragraphs": [
        {**raw["data"][0]["paragraphs"][0], "qas": raw["data"][0]["paragraphs"][0]["qas"][:3]}]}]}, True, False)
    assert [e["qid"] for e in googles] == ["ok", "empty", "negative"]
    with pytest.raises(IndexError):
        _google_examples(raw, True, False)
    data = read_squad(_write(tmp_path / "t.json", raw), "train")
    assert [e.qid for e in data.examples] == ["ok"] and data.skipped == 4
    assert "could not find answer '' of empty" in caplog.text and "answer 'greens' of one over" in caplog.text


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "is not a SQuAD JSON file"),
    ('{"articles": []}', 'top-level "data" list'),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}', "data[0].paragraphs[0].context is missing"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a", "question": "q"}]}]}]}',
     "data[0].paragraphs[0].qas[0].answers is missing"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a", "question": "q", '
     '"answers": [{"text": "x"}]}]}]}]}', "answers[0].answer_start is missing"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a", "question": "q", '
     '"answers": [{"text": "x", "answer_start": "0"}]}]}]}]}', "answers[0].answer_start is not a whole number;"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": [1], "question": "q"}]}]}]}',
     "qas[0].id is not a string or a whole number;"),
])
def test_bad_files_are_refused_in_one_line(tmp_path, content, message):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(UsageError, match=re.escape(message)):
        read_squad(tmp_path / "bad.json", "train")


@pytest.mark.parametrize("name", ["dev.json", "dev.json.gz"])
def test_a_file_that_is_not_utf8_text_is_called_so_not_a_bad_squad_file(tmp_path, name):
    """A Latin-1 file was `not a SQuAD JSON file ('utf-8' codec can't decode ...)`, and so was a .gz: it is a SQuAD
    file in another encoding (or compressed), named by line and byte as the other readers name it."""
    data = json.dumps({"version": "v2.0", "data": [{"paragraphs": [{"context": "caf\xe9 au lait", "qas": []}]}]},
                      ensure_ascii=False, indent=1).encode("latin-1")
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    byte = data.find(b"\xe9")
    said = (" is compressed; decompress it first" if name.endswith(".gz") else
            f":7: not UTF-8 text \\(byte {byte}\\); convert it to UTF-8 first$")  # the context is on line 7
    with pytest.raises(UsageError, match=f"^--data {re.escape(str(path))}{said}"):
        read_squad(path, "score")


_ONE = {"context": "red blue", "qas": [{"id": "a", "question": "colour ?", "answers": [{"text": "red",
                                                                                      "answer_start": 0}]}]}
_NONE = {"context": "red blue", "qas": [{"id": "b", "question": "colour ?", "answers": []}]}
_LOST = {"context": "red blue", "qas": [{"id": "c", "question": "colour ?", "answers": [{"text": "pink",
                                                                                       "answer_start": 0}]}]}


@pytest.mark.parametrize(("paragraphs", "mode", "message"), [
    ([], "score", "--data {path} has no questions"),
    ([], "predict", "--data {path} has no questions"),
    ([_LOST], "train", "--data {path} has no training questions (1 skipped: answer not at its answer_start)"),
    ([_ONE, _NONE], "score", "data[0].paragraphs[1].qas[0] (id b) has no answers"),
    ([_ONE, _ONE], "score", "data[0].paragraphs[1].qas[0] repeats the id 'a' of data[0].paragraphs[0].qas[0]"),
    ([_ONE, _ONE], "predict", "repeats the id 'a'"),
])
def test_files_that_cannot_be_scored_are_refused_in_one_line(tmp_path, paragraphs, mode, message):
    """Official scripts divide by zero on an empty file and fail on a v1.1 question without answers; a repeated
    id gets one answer in predictions.json, which evaluate-v1.1.py then scores once per repetition."""
    path = _write(tmp_path / "d.json", {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]})
    with pytest.raises(UsageError, match=re.escape(message.format(path=path))):
        read_squad(path, mode)


def test_what_the_refusals_leave_alone(tmp_path):
    path = _write(tmp_path / "d.json", {"version": "1.1", "data": [{"title": "t", "paragraphs": [_ONE, _ONE]}]})
    assert len(read_squad(path, "train").examples) == 2  # training does not key anything by id
    path = _write(tmp_path / "v2.json", {"data": [{"title": "t", "paragraphs": [_ONE, _NONE]}]})
    assert read_squad(path, "score", version="2.0").examples[1].answers == ()  # v2.0: no answer is an answer


# --- metrics -----------------------------------------------------------------------------------------------

def _official_normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _official_v1(gold, preds):
    def f1(prediction, truth):
        p, t = _official_normalize(prediction).split(), _official_normalize(truth).split()
        same = sum((collections.Counter(p) & collections.Counter(t)).values())
        if same == 0:
            return 0
        precision, recall = same / len(p), same / len(t)
        return 2 * precision * recall / (precision + recall)

    em = f = 0
    for qid, truths in gold.items():
        if qid in preds:
            em += max(_official_normalize(preds[qid]) == _official_normalize(t) for t in truths)
            f += max(f1(preds[qid], t) for t in truths)
    return {"exact_match": 100.0 * em / len(gold), "f1": 100.0 * f / len(gold)}


def _official_v2(gold, preds, na_probs):
    def toks(s):
        return _official_normalize(s).split() if s else []

    def f1(g, p):
        gt, pt = toks(g), toks(p)
        same = sum((collections.Counter(gt) & collections.Counter(pt)).values())
        if not gt or not pt:
            return int(gt == pt)
        if same == 0:
            return 0
        precision, recall = same / len(pt), same / len(gt)
        return 2 * precision * recall / (precision + recall)

    has = {q: bool(a) for q, a in gold.items()}
    exact_raw, f1_raw = {}, {}
    for q, answers in gold.items():
        golds = [a for a in answers if _official_normalize(a)] or [""]
        exact_raw[q] = max(int(_official_normalize(a) == _official_normalize(preds[q])) for a in golds)
        f1_raw[q] = max(f1(a, preds[q]) for a in golds)

    def thresh(scores):
        return {q: float(not has[q]) if na_probs[q] > 1.0 else s for q, s in scores.items()}

    def block(e, f, qids):
        return {"exact": 100.0 * sum(e[q] for q in qids) / len(qids), "f1": 100.0 * sum(f[q] for q in qids) / len(qids),
                "total": len(qids)}

    e, f = thresh(exact_raw), thresh(f1_raw)
    out = block(e, f, list(e))
    for prefix, want in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in has if has[q] == want]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in block(e, f, qids).items()})

    def best(scores):
        cur = best_score = sum(1 for q in has if not has[q])
        best_t = 0.0
        for q in sorted(na_probs, key=lambda k: na_probs[k]):
            if q not in scores:
                continue
            cur += scores[q] if has[q] else (-1 if preds[q] else 0)
            if cur > best_score:
                best_score, best_t = cur, na_probs[q]
        return 100.0 * best_score / len(scores), best_t

    out["best_exact"], out["best_exact_thresh"] = best(exact_raw)
    out["best_f1"], out["best_f1_thresh"] = best(f1_raw)
    return out


GOLD = {"p": ["The Eiffel Tower!"], "a": ["an apple", "apples"], "u": ["Zürich, Schweiz"], "w": ["  New   York "],
        "n": [], "m": ["a b c d", "b c"], "z": ["the"], "t": ["5 a.m."], "s": ["Tower of the  Eiffel"],
        "k": ["The", "Paris"]}
PREDS = {"p": "eiffel tower", "a": "apple", "u": "zürich", "w": "new york city", "n": "", "m": "c d e", "z": "",
         "t": "5 am", "s": "tower of eiffel", "k": ""}


def test_v1_metrics_equal_the_official_script():
    gold = {q: a for q, a in GOLD.items() if a}
    preds = {**{q: PREDS[q] for q in gold}, "z": "the the"}
    assert squad_v1_scores(gold, preds) == pytest.approx(_official_v1(gold, preds))
    assert squad_v1_scores({"x": ["a"]}, {}) == {"exact_match": 0.0, "f1": 0.0}  # missing prediction scores 0
    assert squad_v1_scores({"x": ["a"], "y": ["b"]}, {"y": "b"}) == {"exact_match": 50.0, "f1": 50.0}
    # articles only as whole (Unicode) words, each leaving a space; repeated tokens count as often as they are shared
    gold = {"b": ["banana"], "e": ["España"], "d": ["peace—the—war"], "r": ["la la land"]}
    preds = {"b": "banan", "e": "Españ", "d": "peace——war", "r": "la la"}
    assert squad_v1_scores(gold, preds) == pytest.approx(_official_v1(gold, preds)) == {"exact_match": 0.0, "f1": 20.0}


V2_CASES = [  # gold, predictions, null odds
    (GOLD, PREDS, {"p": -2.0, "a": 0.5, "u": 3.0, "w": -1.0, "n": 1.5, "m": 1.0, "z": 2.5, "t": 0.2, "s": -0.5,
                   "k": 0.7}),  # m at --na-prob-thresh itself: answered
    ({"n": []}, {"n": ""}, {"n": 0.0}),  # no HasAns_ figures; no better threshold than 0.0
    ({"x": ["a"], "y": []}, {"x": "a", "y": ""}, {"x": 0.0, "y": 2.0}),  # a tie later keeps the first threshold
    ({"x": ["a"]}, {"x": "a", "other": "b"}, {"x": 0.0, "other": -1.0}),  # a prediction for no question of gold
]


@pytest.mark.parametrize(("gold", "preds", "odds"), V2_CASES)
def test_v2_metrics_equal_the_official_script(gold, preds, odds):
    ours = squad_v2_scores(gold, preds, odds)
    assert ours == pytest.approx(_official_v2(gold, preds, odds))
    without_odds = _official_v2(gold, preds, dict.fromkeys(preds, 0.0))  # no --na-prob-file: odds 0, no best_*
    assert squad_v2_scores(gold, preds) == pytest.approx({k: v for k, v in without_odds.items()
                                                          if not k.startswith("best")})


def test_v2_metrics_refuse_a_missing_prediction_in_one_line():
    """The official script skips such a question, then stops with a KeyError; a bare KeyError here too."""
    from bertctl.errors import BertctlError

    with pytest.raises(BertctlError, match=r"^squad_v2_scores: no prediction for 1 of 2 questions \(the first: 'y'"):
        squad_v2_scores({"x": ["a"], "y": []}, {"x": "a"})
    with pytest.raises(KeyError):
        _official_v2({"x": ["a"], "y": []}, {"x": "a"}, {"x": 0.0})


# --- postprocessing -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("v2", [False, True])
def test_answers_from_fixed_logits_equal_write_predictions(tmp_path, v2):
    raw = _squad([EDGE_CASES], "v2.0" if v2 else "1.1")
    data = read_squad(_write(tmp_path / "d.json", raw), "score")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=n).astype(np.float32) for n in features.lengths]
    ends = [rng.normal(size=n).astype(np.float32) for n in features.lengths]
    starts[0][3] = starts[0][4] = starts[0][5]  # ties keep the earlier position first
    settings = AnswerSettings(n_best_size=5, max_answer_length=4, null_score_diff_threshold=0.0, with_null=v2)
    ours = answers_from_logits(features, starts, ends, tokenizer, settings)
    preds, nbest, odds = _run_squad_answers(raw, tokenizer, starts, ends, 5, 4, v2)
    assert ours.predictions == preds
    assert ours.nbest == pytest.approx(nbest)
    assert (ours.null_odds == pytest.approx(odds)) if v2 else ours.null_odds is None
    assert any(p[:1].isupper() for p in preds.values())  # final text keeps the context's case


def test_tied_null_scores_keep_the_first_windows_logits_as_run_squad(tmp_path):
    """The no-answer score is the lowest [CLS] start + end over a question's windows: on a tie run_squad.py keeps
    the first window's start and end logits, which the n-best's "" entry shows."""
    raw = _squad([EDGE_CASES], "v2.0")
    data = read_squad(_write(tmp_path / "d.json", raw), "score")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    assert len(set(map(int, features.example_index))) < len(features.example_index)  # a question of many windows
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=n).astype(np.float32) for n in features.lengths]
    ends = [rng.normal(size=n).astype(np.float32) for n in features.lengths]
    for feature, (start, end) in enumerate(zip(starts, ends, strict=True)):
        start[0], end[0] = -5 + feature / 2, -5 - feature / 2  # every window's null score is -10
    ours = answers_from_logits(features, starts, ends, tokenizer, AnswerSettings(5, 4, with_null=True))
    _, nbest, _ = _run_squad_answers(raw, tokenizer, starts, ends, 5, 4, True)
    assert ours.nbest == pytest.approx(nbest)


def _one_question_at_zero(context: str, tmp_path: Path):
    """A question on `context` in windows of 16, and start and end logits of 0 for each window."""
    raw = _squad([[(context, [{"id": "q", "question": "what colour is it ?", "answers": []}])]])
    data = read_squad(_write(tmp_path / "d.json", raw), "predict")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    return raw, tokenizer, features, *([np.zeros(n, dtype=np.float32) for n in features.lengths] for _ in range(2))


def test_a_text_two_spans_give_is_one_n_best_entry_as_in_run_squad(tmp_path):
    """run_squad.py keeps the n-best texts distinct: a word the context holds twice is one entry, its best span's."""
    raw, tokenizer, features, starts, ends = _one_question_at_zero("red milk red milk", tmp_path)
    for word, score in ((0, 4.0), (2, 3.0)):  # both "red"
        position = int(features.doc_offset[0]) + word - int(features.doc_start[0])
        starts[0][position] = ends[0][position] = score
    answers = answers_from_logits(features, starts, ends, tokenizer, AnswerSettings(n_best_size=4))
    _, nbest, _ = _run_squad_answers(raw, tokenizer, starts, ends, 4, 30, False)
    assert answers.nbest == pytest.approx(nbest)
    assert [e["text"] for e in answers.nbest["q"]].count("red") == 1


def test_nbest_probabilities_are_run_squads_to_the_last_bit():
    """On Python 3.12+ sum() compensates its rounding, and the probabilities of 4 in 10 random n-best lists
    moved by an ulp from run_squad.py's, which adds the exponentials one by one (here p0 was 0.9999999999999998)."""
    scores = [0.0, -36.8, -36.8]  # each small exponential is under half an ulp of 1.0: added one by one, both vanish
    assert softmax(scores) == _google_softmax(scores)
    assert softmax(scores)[0] == 1.0
    rng = random.Random(0)
    for _ in range(200):
        scores = [rng.gauss(0, 3) for _ in range(rng.randint(1, 20))]
        assert softmax(scores) == _google_softmax(scores)


def test_best_indexes_order_ties_as_run_squad_in_a_window_of_384():
    """Logits rounded alike (a bf16 or fp16 model's) tie often: numpy's default sort keeps ties in order only up
    to 16 elements; run_squad.py's sorted() keeps the earlier position first at any length."""
    logits = np.round(np.random.default_rng(0).normal(size=384), 1).astype(np.float32)
    assert best_indexes(logits, 20) == [i for i, _ in sorted(enumerate(logits), key=lambda x: x[1], reverse=True)[:20]]


def test_every_batch_is_padded_to_max_seq_length_as_run_squads_features(tmp_path):
    """Windows shorter than max_seq_length are padded to it, not to the batch's longest, so the start/end
    softmax spans the same positions however the windows are batched."""
    from bertctl.squad import collate_spans

    qas = [{"id": "q", "question": "what colour is it ?", "answers": [{"text": "red", "answer_start": 0}]}]
    data = read_squad(_write(tmp_path / "train.json", _squad([[("red milk", qas)]])), "train")
    features = make_features(_tokenizer(), data, 24, 6, 6, training=True)
    assert features.lengths.tolist() == [10]
    batch = collate_spans(features, np.arange(1), 0)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (1, 24)
    assert batch["attention_mask"].sum().item() == 10 and batch["input_ids"][0, 10:].eq(0).all()


def test_start_logits_are_the_first_output_of_qa_outputs_as_in_transformers(tmp_path):
    """Start logits are qa_outputs' first column, end logits its second, kept apart end to end (answers of one
    word, the synthetic sets', score alike either way round)."""
    from bertctl.squad import span_logits

    qas = [{"id": "q", "question": "what colour is it ?", "answers": []}]
    data = read_squad(_write(tmp_path / "d.json", _squad([[("red milk", qas)]])), "predict")
    features = make_features(_tokenizer(), data, 16, 3, 4, training=False)
    model = BertForQuestionAnswering(BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=16)).eval()
    with torch.no_grad():
        model.qa_outputs.weight.zero_()
        model.qa_outputs.bias.copy_(torch.tensor([1.0, -1.0]))
    starts, ends = span_logits(model, features, 0, 4, torch.device("cpu"), "fp32")
    assert starts[0].tolist() == [1.0] * 16 and ends[0].tolist() == [-1.0] * 16


def test_padding_positions_take_part_in_the_n_best_as_in_run_squad(tmp_path, squad_run, squad_files):
    """run_squad.py pads every window to max_seq_length and takes the n-best start/end positions over all of
    them before dropping what is not context: high logits at padding thin a question's candidates. bertctl's
    logits cover the same positions, so the answers agree even then."""
    from bertctl.squad import span_logits

    raw = _squad([EDGE_CASES], "1.1")
    data = read_squad(_write(tmp_path / "d.json", raw), "score")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    model = load_model(squad_run, "BertForQuestionAnswering").eval()
    starts, ends = span_logits(model, features, tokenizer.pad_id, 4, torch.device("cpu"), "fp32")
    assert {len(s) for s in starts} == {16}
    for logits, n in zip(starts + ends, list(features.lengths) * 2, strict=True):
        logits[n:] += 50.0  # padding outranks every real position
    settings = AnswerSettings(n_best_size=6, max_answer_length=4)
    ours = answers_from_logits(features, starts, ends, tokenizer, settings)
    preds, nbest, _ = _run_squad_answers(raw, tokenizer, starts, ends, 6, 4, False)
    assert ours.predictions == preds and ours.nbest == pytest.approx(nbest)


def test_a_v2_question_without_windows_predicts_no_answer(tmp_path):
    """A context with no pieces gives its question no window: v2.0 has the answer "" for it, not v1.1's nonce
    "empty" (Google's script fails on it)."""
    raw = _squad([[("", [{"id": "blank", "question": "colour ?", "answers": [], "is_impossible": True}]),
                   ("red blue", [{"id": "ok", "question": "colour ?", "answers": []}])]], "v2.0")
    data = read_squad(_write(tmp_path / "d.json", raw), "predict")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    assert list(features.example_index) == [1]
    logits = [np.zeros(n, dtype=np.float32) for n in features.lengths]
    answers = answers_from_logits(features, logits, logits, tokenizer, AnswerSettings(with_null=True))
    assert answers.predictions["blank"] == "" and answers.null_odds["blank"] == 0.0
    assert [e["text"] for e in answers.nbest["blank"]] == [""]


def test_a_v1_question_without_a_valid_span_gets_run_squads_nonce_answer(tmp_path):
    """No pair of the n-best starts and ends is a span of the context: run_squad.py (and run_qa.py's utils_qa.py)
    answer the literal text "empty", logits 0, probability 1, in both files; docs/predict.md says so."""
    raw, tokenizer, features, starts, ends = _one_question_at_zero("the man bought red milk", tmp_path)
    starts[0][1] = ends[0][1] = 10.0  # a question piece ranks first: with --n-best-size 1 no span is valid
    answers = answers_from_logits(features, starts, ends, tokenizer, AnswerSettings(n_best_size=1))
    preds, nbest, _ = _run_squad_answers(raw, tokenizer, starts, ends, 1, 30, False)
    assert answers.predictions == preds == {"q": "empty"}
    assert answers.nbest == nbest == {"q": [{"text": "empty", "probability": 1.0, "start_logit": 0.0,
                                             "end_logit": 0.0}]}


def _one_unanswerable_question(tmp_path: Path) -> tuple:
    """A v2.0 question's features, with all-zero start and end logits for a test to set."""
    raw = _squad([[("the man bought red milk", [{"id": "q", "question": "what colour is it ?", "answers": []}])]],
                  "v2.0")
    data = read_squad(_write(tmp_path / "d.json", raw), "predict")
    tokenizer = _tokenizer()
    features = make_features(tokenizer, data, 16, 3, 4, training=False)
    starts = [np.zeros(n, dtype=np.float32) for n in features.lengths]
    ends = [np.zeros(n, dtype=np.float32) for n in features.lengths]
    return tokenizer, features, starts, ends


@pytest.mark.parametrize("threshold", [0.0, 5.0])
def test_a_v2_n_best_without_an_answer_text_predicts_no_answer_with_the_null_score_as_odds(tmp_path, threshold):
    """[CLS] scored best with --n-best-size 1 leaves no answer text in the n-best, though valid spans exist:
    run_squad.py fails on its missing best non-null entry; bertctl predicts "" whatever the threshold, its null
    odds the null score itself (the best answer's scores taken as 0), as docs/finetuning.md says."""
    tokenizer, features, starts, ends = _one_unanswerable_question(tmp_path)
    starts[0][0], ends[0][0] = 2.0, 1.0
    settings = AnswerSettings(n_best_size=1, null_score_diff_threshold=threshold, with_null=True)
    answers = answers_from_logits(features, starts, ends, tokenizer, settings)
    assert answers.predictions == {"q": ""} and answers.null_odds == {"q": 3.0}
    assert [e["text"] for e in answers.nbest["q"]] == [""]


def test_null_odds_equal_to_the_threshold_keep_the_answer(tmp_path):
    """run_squad.py predicts no answer only when the null odds exceed --null-score-diff-threshold: at exactly the
    threshold the best span stands."""
    tokenizer, features, starts, ends = _one_unanswerable_question(tmp_path)
    red = int(features.doc_offset[0]) + list(features.pieces[0]).index("red") - int(features.doc_start[0])
    starts[0][0], ends[0][0] = 2.0, 1.0  # the null score, 3
    starts[0][red], ends[0][red] = 1.0, 2.0  # "red" scores 3 too: odds 0.0
    for threshold, expected in ((0.0, "red"), (-0.5, "")):
        settings = AnswerSettings(null_score_diff_threshold=threshold, with_null=True)
        answers = answers_from_logits(features, starts, ends, tokenizer, settings)
        assert answers.predictions == {"q": expected} and answers.null_odds == {"q": 0.0}
        assert [e["text"] for e in answers.nbest["q"][:2]] == ["red", ""]  # "" ranks by its score, as in run_squad.py


def test_final_text_maps_back_to_the_original_characters():
    from bertctl.squad_answers import final_text

    tokenizer = _tokenizer()
    assert final_text("john smith", "John Smith's", tokenizer) == "John Smith"
    assert final_text("1995", "(1995-1943).", tokenizer) == "1995"
    assert final_text("zzz", "John", tokenizer) == "John"  # not found: the original words


UNICODE_CONTEXT = ("Zürich's café\u00a0naïve (1895\u20131943). 東京タワー\u202fis 333m; 😀👍🏽 e\u0301té "
                   "a\u200bb ctl\x07x \u3000Ｆｕｌｌ [MASK] \x0bsplit\u2028line \u200b "
                   "İstanbul ΟΔΟΣ straße " + "a" * 105 + " end.")
UNICODE_ANSWERS = ["Zürich", "1895", "東京", "naïve (1895", "😀", "e\u0301té", "ΟΔΟΣ straße", "end.", "Ｆｕｌｌ",
                   "split", "İstanbul", "Zürich's café"]
UNICODE_QUESTIONS = ["Which city?", "", " \u3000 ", "what is it " * 12, "東京タワー?", "Café NAÏVE ?"]


def _unicode_squad(v2: bool) -> dict:
    """One context of accents, CJK, emoji, zero-width, control and odd whitespace characters, asked about answers
    that start or end inside its words; v2.0 adds impossible questions, and one answer not at its start."""
    qas = []
    for i, text in enumerate(UNICODE_ANSWERS):
        qa = {"id": f"u{i}", "question": UNICODE_QUESTIONS[i % len(UNICODE_QUESTIONS)],
              "answers": [{"text": text, "answer_start": UNICODE_CONTEXT.index(text)}]}
        if v2:
            qa["is_impossible"] = i % 4 == 3
            qa["answers"] = [] if qa["is_impossible"] else qa["answers"]
        qas.append(qa)
    qas.append({"id": "lost", "question": "where?", "answers": [{"text": "Bern", "answer_start": 3}],
                **({"is_impossible": False} if v2 else {})})
    return _squad([[(UNICODE_CONTEXT, qas)]], "v2.0" if v2 else "1.1")


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("v2", [False, True])
def test_unicode_features_and_answers_equal_run_squads_with_a_real_vocab(minilm, tmp_path, lowercase, v2):
    """MiniLM's vocab (and a cased copy), with transformers' pure-Python tokenizers in the reference: the
    pieces, windows, labels, n-best texts (get_final_text's alignment and its fallback) and null odds match."""
    from test_tokenizer import reference
    try:
        from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer
    except ImportError:  # transformers 4
        from transformers.models.bert.tokenization_bert import BasicTokenizer

    tokens = (minilm / "vocab.txt").read_text(encoding="utf-8").splitlines()
    if not lowercase:
        tokens += sorted({"Zürich", "Café", "Which", "ΟΔΟΣ", "İstanbul", "Ｆｕｌｌ"} - set(tokens))
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tokenizer, theirs = BertTokenizer.from_vocab(tokens, lowercase=lowercase), reference(tmp_path / "vocab.txt",
                                                                                         lowercase)
    raw = _unicode_squad(v2)
    path = _write(tmp_path / "u.json", raw)
    train = read_squad(path, "train")
    assert [e.qid for e in train.examples] == [e["qid"] for e in _google_examples(raw, True, v2)]
    assert train.skipped == 1
    for max_seq_length, doc_stride, max_query_length, training in ((24, 5, 6, True), (40, 12, 10, False)):
        data = train if training else read_squad(path, "predict")
        ours = make_features(tokenizer, data, max_seq_length, doc_stride, max_query_length, training=training)
        examples = _google_examples(raw, training, v2)
        ref = _google_features(examples, theirs.tokenize, max_seq_length, doc_stride, max_query_length, training)
        assert [[tokenizer.id_to_token(t) for t in ids] for ids in ours.input_ids] == [f["tokens"] for f in ref]
        assert [ids.tolist() for ids in ours.input_ids] == [theirs.convert_tokens_to_ids(f["tokens"]) for f in ref]
        assert [t.tolist() for t in ours.token_type_ids] == [f["segments"] for f in ref]
        if training:
            assert list(zip(ours.start_positions.tolist(), ours.end_positions.tolist(), strict=True)) == \
                [(f["start"], f["end"]) for f in ref]
            assert sum(f["start"] > 0 for f in ref) > 5
    rng = np.random.default_rng(7)
    starts = [rng.normal(size=max_seq_length).astype(np.float32) for _ in ours.lengths]
    ends = [rng.normal(size=max_seq_length).astype(np.float32) for _ in ours.lengths]
    got = answers_from_logits(ours, starts, ends, tokenizer, AnswerSettings(8, 6, 0.5, with_null=v2))
    preds, nbest, odds = _google_predictions(examples, ref, starts, ends, 8, 6, v2, 0.5,
                                             BasicTokenizer(do_lower_case=lowercase).tokenize)
    assert (got.predictions, got.nbest, got.null_odds) == (preds, nbest, odds if v2 else None)
    assert sum(e["text"] not in ("", "empty") for entries in nbest.values() for e in entries) > 20

# --- the model -----------------------------------------------------------------------------------------------

def test_logits_and_loss_equal_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    ours = BertForQuestionAnswering(config).eval()
    folder = save_model(ours, tmp_path / "qa", _tokenizer())
    theirs = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
    ids = torch.tensor([[2, 30, 31, 3, 10, 11, 25, 3], [2, 31, 3, 12, 13, 3, 0, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0]])
    mask = (ids != 0).long()
    starts, ends = torch.tensor([6, 0]), torch.tensor([6, 4])
    with torch.no_grad():
        a = ours(ids, types, mask, start_positions=starts, end_positions=ends)
        b = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask, start_positions=starts,
                   end_positions=ends)
    torch.testing.assert_close(a.start_logits, b.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.end_logits, b.end_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-5, rtol=0)
    expected = (torch.nn.functional.cross_entropy(a.start_logits, starts)
                + torch.nn.functional.cross_entropy(a.end_logits, ends)) / 2  # Google's mean of the two
    torch.testing.assert_close(a.loss, expected)


# --- end to end ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def squad_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("squad")
    return {"train": _write(root / "train.json", _synthetic(96, 1)),
            "dev": _write(root / "dev.json", _synthetic(24, 2)),
            "train2": _write(root / "train2.json", _synthetic(64, 3, 0.3)),
            "dev2": _write(root / "dev2.json", _synthetic(16, 4, 0.3))}


@pytest.fixture(scope="module")
def squad_run(encoder, squad_files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "squad"
    result = CliRunner().invoke(app, ["finetune", "squad", "--model", str(encoder), "--train",
                                      str(squad_files["train"]), "--validation", str(squad_files["dev"]), "--out",
                                      str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert "SQuAD v1.1" in result.stderr and "a new question-answering head" in result.stderr
    assert "24 validation questions" in result.stderr
    return out


def test_finetune_learns_the_answer_and_writes_a_run_folder(squad_run, encoder, squad_files, tmp_path):
    results = json.loads((squad_run / "eval_results.json").read_text())
    assert results["task"] == "squad" and results["main_metric"] == "f1"
    rows = [json.loads(line) for line in (squad_run / "metrics.jsonl").read_text().splitlines()]
    dev = [row["validation_f1"] for row in rows if "validation_f1" in row]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(dev) == FAST["epochs"] and results["validation"]["f1"] == max(dev) >= 90.0, dev
    assert losses[-1] < losses[0] / 10, losses
    untrained = save_model(build_model(read_checkpoint(encoder), "BertForQuestionAnswering"), tmp_path / "fresh",
                           _tokenizer())  # the starting point: the same encoder with a fresh head
    settings = {k: FAST[k] for k in ("max_seq_length", "doc_stride", "max_query_length")}
    assert evaluate_squad(untrained, squad_files["dev"], **settings)["f1"] < 40.0
    config = json.loads((squad_run / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"] and config["finetuning_task"] == "squad"
    run = json.loads((squad_run / "run.json").read_text())
    assert run["config"]["doc_stride"] == 6 and run["config"]["lr"] == 3e-3 and run["fresh_heads"] == [
        "question_answering"]
    assert run["config"]["validation"] == str(squad_files["dev"]) and "dev" not in run["config"]


def test_the_scored_file_is_validation_as_in_the_other_finetune_commands(tmp_path):
    """`finetune squad` names its scored file --validation, as classify, ner and choice do; --dev is gone."""
    shown = CliRunner().invoke(app, ["finetune", "squad", "--dev", str(tmp_path / "dev.json")])
    assert shown.exit_code == 2 and "No such option: --dev" in shown.stderr, shown.output
    shown = CliRunner().invoke(app, ["finetune", "squad", "--validation", str(tmp_path / "dev.json")])
    assert shown.exit_code == 2 and "give --train and --model and --out" in shown.stderr, shown.output
    with pytest.raises(TypeError, match="'dev'"):
        FinetuneConfig.squad(dev=tmp_path / "dev.json")


def test_evaluate_reproduces_eval_results_and_predict_writes_googles_files(squad_run, squad_files, tmp_path):
    results = json.loads((squad_run / "eval_results.json").read_text())
    assert evaluate_squad(squad_run, squad_files["dev"]) == {"version": "1.1", **results["validation"]}
    shown = CliRunner().invoke(app, ["evaluate", "squad", "--model", str(squad_run), "--data",
                                     str(squad_files["dev"]), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["f1"] == results["validation"]["f1"]
    written = predict_squad(squad_run, squad_files["dev"], tmp_path / "pred")
    assert [p.name for p in written] == ["predictions.json", "nbest_predictions.json"]
    predictions = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert len(predictions) == 24 and all(isinstance(v, str) for v in predictions.values())
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for p in json.loads(squad_files["dev"].read_text())[
        "data"][0]["paragraphs"] for qa in p["qas"]}
    assert squad_v1_scores(gold, predictions)["f1"] == pytest.approx(results["validation"]["f1"])
    nbest = json.loads((tmp_path / "pred" / "nbest_predictions.json").read_text())
    assert set(nbest["q2-0"][0]) == {"text", "probability", "start_logit", "end_logit"}
    again = CliRunner().invoke(app, ["predict", "squad", "--model", str(squad_run), "--data",
                                     str(squad_files["dev"]), "--out", str(tmp_path / "pred")])
    assert again.exit_code != 0 and "--overwrite" in again.output


def test_v2_run_writes_null_odds_and_v2_scores(encoder, squad_files, tmp_path):
    quiet = json.loads(squad_files["dev2"].read_text())  # says nothing of its version: read as the run's
    del quiet["version"]
    for qa in (qa for p in quiet["data"][0]["paragraphs"] for qa in p["qas"]):
        del qa["is_impossible"]
    dev = _write(tmp_path / "dev2.json", quiet)
    out = finetune_squad(FinetuneConfig.squad(model=encoder, train=squad_files["train2"], validation=dev,
                                              out=tmp_path / "v2", **{**FAST, "epochs": 1}))
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "squad_v2"
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(results["validation"])
    written = predict_squad(out, dev, tmp_path / "pred")
    assert [p.name for p in written] == ["predictions.json", "nbest_predictions.json", "null_odds.json"]
    assert evaluate_squad(out, dev) == {"version": "2.0", **results["validation"]}


def _one_layer(**changes) -> BertConfig:
    return BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64, **changes)


def _qa_folder(folder: Path, config: dict) -> Path:
    """A QA model that was never trained, with a hand-written run.json holding `config`."""
    torch.manual_seed(0)
    save_model(BertForQuestionAnswering(_one_layer()), folder, _tokenizer())
    _write(folder / "run.json", {"task": "squad_v2", "config": config})
    return folder


def test_evaluate_and_predict_take_the_runs_answer_settings_and_the_flags_over_them(tmp_path):
    """run.json's n_best_size, max_answer_length and null_score_diff_threshold are what a v2.0 file is answered with
    unless a flag says otherwise, as for the window settings."""
    from bertctl.squad import answer_settings, open_reader, reader_flags

    folder = _qa_folder(tmp_path / "qa", {"max_seq_length": 24, "doc_stride": 6, "max_query_length": 6,
                                          "n_best_size": 3, "max_answer_length": 5, "null_score_diff_threshold": 1.5})
    reader = open_reader(folder, reader_flags(None, None, None, None, None, None, None))
    assert answer_settings(reader.settings, "2.0") == AnswerSettings(3, 5, 1.5, with_null=True)
    reader = open_reader(folder, reader_flags(None, None, None, None, 7, 9, -2.0))
    assert answer_settings(reader.settings, "1.1") == AnswerSettings(7, 9, -2.0, with_null=False)


def test_predict_refuses_to_replace_a_v2_runs_null_odds(squad_files, tmp_path):
    """null_odds.json is one of a v2.0 prediction's files: an old one alone is not overwritten without --overwrite."""
    folder = _qa_folder(tmp_path / "qa", {"max_seq_length": 24, "doc_stride": 6, "max_query_length": 6})
    (tmp_path / "pred").mkdir()
    (tmp_path / "pred" / "null_odds.json").write_text("old\n")
    with pytest.raises(UsageError, match="already holds null_odds.json; pass --overwrite"):
        predict_squad(folder, squad_files["dev2"], tmp_path / "pred")


@pytest.mark.parametrize(("version", "task"), [("1.1", "squad"), ("2.0", "squad_v2")])
def test_evaluate_json_names_the_task_as_the_fine_tuning_run(version, task, capsys):
    from bertctl.squad import print_squad_results

    print_squad_results("dev.json", {"version": version, "f1": 50.0}, as_json=True)
    assert json.loads(capsys.readouterr().out) == {"task": task, "data": "dev.json", "version": version, "f1": 50.0}


def test_a_v1_train_file_with_a_v2_validation_file_is_a_v2_run(encoder, squad_files, tmp_path, monkeypatch, caplog):
    """The run is v2.0 if either file is: its task and dev metrics say so. The train file is read once (it was
    read again as v2.0, ~1 s per 20k questions), so an answer it skips is warned about once."""
    import bertctl.data.squad as squad_data
    import bertctl.finetune_qa as finetune_qa

    raw = _synthetic(6, 1)
    raw["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "zzz"
    seen, loads, load = {}, [], squad_data._load
    monkeypatch.setattr(finetune_qa, "train_and_publish",
                        lambda cfg, base, task, train, dev, *rest, **kw: seen.update(task=task, train=train))
    monkeypatch.setattr(squad_data, "_load", lambda path, *rest: loads.append(path.name) or load(path, *rest))
    finetune_squad(FinetuneConfig.squad(model=encoder, train=_write(tmp_path / "train.json", raw),
                                        validation=squad_files["dev2"], out=tmp_path / "o", **FAST))
    assert loads == ["train.json", "dev2.json"]
    assert seen["task"].name == "squad_v2" and seen["train"].skipped == 1 and seen["train"].version == "2.0"
    assert seen["task"].metrics == ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
                                    "best_exact", "best_f1")
    assert sum("could not find answer 'zzz'" in r.getMessage() for r in caplog.records) == 1
    assert seen["train"].examples == read_squad(tmp_path / "train.json", "train", version="2.0").examples


def test_a_window_hit_counts_real_rows_only():
    """A hit is a real row whose start and end both match: a padding row (real False, as a rank with no share of a
    batch gets) is none even where its labels match, nor is a row whose end alone misses."""
    from bertctl.finetune_qa import _loss_terms

    torch.manual_seed(0)
    model = BertForQuestionAnswering(_one_layer()).eval()
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 3]] * 3)
    batch = {"input_ids": ids, "token_type_ids": torch.tensor([[0] * 4 + [1] * 3] * 3)}
    with torch.no_grad():
        out = model(batch["input_ids"], batch["token_type_ids"])
        starts, ends = out.start_logits.argmax(-1), out.end_logits.argmax(-1)
        ends[2] = (ends[2] + 1) % 7
        terms = _loss_terms(model, {**batch, "start_positions": starts, "end_positions": ends,
                                    "real": torch.tensor([True, False, True])})
    assert terms["task"][1].item() == 1


def test_squad_defaults_and_config_file(tmp_path):
    cfg = FinetuneConfig.squad()
    assert (cfg.lr, cfg.epochs, cfg.max_seq_length, cfg.batch_size, cfg.doc_stride, cfg.max_query_length) == \
        (3e-5, 2, 384, 32, 128, 64)
    from bertctl.cli_tasks import _finetune_config

    config = _write(tmp_path / "c.json", {"epochs": 5, "doc_stride": 64})
    flags = {name: None for name in ("model", "out", "train", "validation", "lr")}
    cfg = _finetune_config({**flags, "config": config, "lr": 1e-4}, "squad")
    assert (cfg.epochs, cfg.doc_stride, cfg.lr, cfg.max_seq_length) == (5, 64, 1e-4, 384)


def test_refusals(encoder, squad_files, tmp_path):
    with pytest.raises(UsageError, match="no question-answering head"):
        evaluate_squad(encoder, squad_files["dev"])
    with pytest.raises(UsageError, match="must be more than --max-query-length"):
        finetune_squad(FinetuneConfig.squad(model=encoder, train=squad_files["train"], out=tmp_path / "o",
                                            max_seq_length=20, max_query_length=18))
    with pytest.raises(UsageError, match=r"doc_stride: for `bertctl finetune squad` only"):
        from bertctl.finetune import finetune_classify

        finetune_classify(FinetuneConfig(model=encoder, train=squad_files["train"], out=tmp_path / "o",
                                         text_columns=("a",), doc_stride=7))
    shown = CliRunner().invoke(app, ["evaluate", "squad", "--model", str(encoder), "--data", str(squad_files["dev"])])
    assert shown.exit_code != 0 and "no question-answering head" in shown.output and "Traceback" not in shown.output


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_precision_the_device_cannot_run_is_refused_before_a_question_is_tokenized(encoder, squad_files,
                                                                                     tmp_path, monkeypatch, command):
    """--precision fp16 on the CPU (or a --device the machine lacks) was refused once every question's windows
    were made: ~20 s on a file of 20,000 questions before a one-line refusal. The model is placed once the file is
    read."""
    from bertctl import squad

    qa = save_model(build_model(read_checkpoint(encoder), "BertForQuestionAnswering"), tmp_path / "qa", _tokenizer())
    monkeypatch.setattr(squad, "make_features", never_called("make_features"))
    settings = {k: FAST[k] for k in ("max_seq_length", "doc_stride", "max_query_length")}
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        if command == "evaluate":
            evaluate_squad(qa, squad_files["dev"], device="cpu", precision="fp16", **settings)
        else:
            predict_squad(qa, squad_files["dev"], tmp_path / "out", device="cpu", precision="fp16", **settings)
    assert not (tmp_path / "out" / "predictions.json").exists()


def test_two_gloo_processes_give_the_losses_and_dev_scores_of_one(encoder, squad_files, tmp_path):
    """torchrun: each rank trains on its share of every batch and scores its share of the dev windows; the
    span logits summed over the ranks give the one-process answers."""
    from test_finetune_resume import _dev, _losses, _torchrun

    flags = [a for k, v in {**FAST, "epochs": 2, "log_every": 1, "dropout": 0.0}.items()
             for a in (f"--{k.replace('_', '-')}", str(v))]
    args = ["finetune", "squad", "--model", str(encoder), "--train", str(squad_files["train"]),
            "--validation", str(squad_files["dev"]), "--device", "cpu", *flags]
    one = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    two = _torchrun([*args, "--out", str(tmp_path / "two")], 2, 29760, tmp_path)
    assert two.returncode == 0, ranks_said(two.stderr)
    a, b = _losses(tmp_path / "one" / "metrics.jsonl"), _losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(a) == sorted(b) and len(a) > 10 and max(abs(a[s] - b[s]) for s in a) < 1e-4
    dev_one, dev_two = _dev(tmp_path / "one" / "metrics.jsonl"), _dev(tmp_path / "two" / "metrics.jsonl")
    assert [r["validation_f1"] for r in dev_one] == [r["validation_f1"] for r in dev_two]


def test_a_bad_scoring_flag_is_named_as_the_command_spells_it(squad_run, squad_files):
    """evaluate/predict squad take --batch-size (the run's eval_batch_size), so that is the flag a refusal names."""
    from bertctl.squad import evaluate_squad

    with pytest.raises(UsageError, match="^--batch-size must be at least 1"):
        evaluate_squad(squad_run, squad_files["dev"], batch_size=0)


@pytest.mark.parametrize(("threshold", "said"), [
    ("nan", "must be a finite number, got nan"), ("inf", "must be a finite number, got inf"),
    ("-inf", "must be a finite number, got -inf"), (1e400, "must be a finite number, got inf"),
    ("abc", "must be a number, got 'abc'")])
def test_a_threshold_that_is_not_a_finite_number_is_refused(squad_run, squad_files, tmp_path, threshold, said):
    """A nan threshold never answers "" and an infinite one always or never does: every v2.0 answer would be decided
    by the typo, so evaluate and predict refuse it as finetune does, before writing anything."""
    from bertctl.squad import evaluate_squad

    given = float(threshold) if threshold in ("nan", "inf", "-inf") else threshold
    with pytest.raises(UsageError, match=f"^--null-score-diff-threshold {said}"):
        evaluate_squad(squad_run, squad_files["dev"], null_score_diff_threshold=given)
    if isinstance(threshold, str) and threshold != "abc":
        out = tmp_path / "pred"
        shown = CliRunner().invoke(app, ["predict", "squad", "--model", str(squad_run), "--data",
                                         str(squad_files["dev"]), "--out", str(out),
                                         "--null-score-diff-threshold", threshold])
        assert shown.exit_code == 2 and shown.stderr == f"bertctl: error: --null-score-diff-threshold {said}\n"
        assert not out.exists()
    if threshold != "abc":  # finetune squad refuses the same values in the same words
        with pytest.raises(UsageError, match=f"^--null-score-diff-threshold {said}"):
            FinetuneConfig.squad(null_score_diff_threshold=given)


def test_a_qa_model_with_one_segment_embedding_is_refused_in_one_line(squad_files, tmp_path):
    """The context is segment 1: past a one-row token_type embedding it would fail deep in the forward pass."""
    from bertctl.squad import evaluate_squad

    folder = save_model(BertForQuestionAnswering(_one_layer(type_vocab_size=1)), tmp_path / "one-segment",
                        _tokenizer())
    with pytest.raises(UsageError, match="two segments but .* has type_vocab_size 1"):
        evaluate_squad(folder, squad_files["dev"], max_seq_length=24, doc_stride=6, max_query_length=6)


def test_predict_writes_its_files_as_one_set(squad_run, squad_files, tmp_path, monkeypatch):
    """A disk that fails on the second file leaves the first as it was: never a new predictions.json beside an
    old nbest_predictions.json."""
    import errno
    import tempfile

    from bertctl.errors import BertctlError
    from bertctl.squad import predict_squad

    out = tmp_path / "pred"
    out.mkdir()
    for name in ("predictions.json", "nbest_predictions.json"):
        (out / name).write_text("old\n")
    made = []
    real = tempfile.mkstemp

    def full_disk(*args, **kwargs):
        made.append(1)
        if len(made) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", full_disk)
    with pytest.raises(BertctlError, match="No space left on device"):
        predict_squad(squad_run, squad_files["dev"], out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["nbest_predictions.json", "predictions.json"]
    assert all((out / name).read_text() == "old\n" for name in ("predictions.json", "nbest_predictions.json"))


# --- copies of the hub's rajpurkar/squad and squad_v2 --------------------------------------------------------

def _hub_rows(raw: dict) -> dict[str, list]:
    """The hub's flat rows of a SQuAD file, built as its loading script builds them: one row per question."""
    columns: dict[str, list] = {"id": [], "title": [], "context": [], "question": [], "answers": []}
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                columns["id"].append(qa["id"])
                columns["title"].append(article["title"])
                columns["context"].append(paragraph["context"])
                columns["question"].append(qa["question"])
                columns["answers"].append({"text": [a["text"] for a in qa["answers"]],
                                           "answer_start": [a["answer_start"] for a in qa["answers"]]})
    return columns


def _squad_copies(root: Path, raw: dict) -> dict[str, Path]:
    from hub_copy_fixtures import squad_features, write_copies

    copies = write_copies(root, _hub_rows(raw), squad_features())
    rows = [json.loads(line) for line in copies["json"].read_text().splitlines()]
    return {**copies, "run_qa": _write(root / "run_qa.json", {"data": rows})}  # run_qa.py's field="data"


def _two_questions_a_paragraph(dev: bool) -> dict:
    """Two articles, a paragraph asked three questions, one of them with three answers on a dev file, one whose
    answer is not at its answer_start (skipped for training)."""
    text = "the man went to store and bought a red milk"
    qas = [{"id": "p0", "question": "what colour is it ?",
            "answers": [{"text": "red", "answer_start": 34}] * (3 if dev else 1)},
           {"id": "p1", "question": "what is it ?", "answers": [{"text": "milk", "answer_start": 38}]},
           {"id": "p2", "question": "what is it ?", "answers": [{"text": "blue", "answer_start": 0}]}]
    synthetic = _synthetic(12, 9)["data"][0]["paragraphs"]
    return _squad([[(text, qas), *[(p["context"], p["qas"]) for p in synthetic[:5]]],
                   [(p["context"], p["qas"]) for p in synthetic[5:]]])


@pytest.mark.parametrize("version", ["1.1", "2.0"])
@pytest.mark.parametrize("mode", ["train", "score", "predict"])
def test_hub_copies_give_the_examples_of_the_official_file(tmp_path, version, mode):
    raw = _two_questions_a_paragraph(mode != "train") if version == "1.1" else _synthetic(24, 5, 0.4)
    official = _write(tmp_path / "official.json", raw)
    copies = _squad_copies(tmp_path / "copies", raw)
    want = read_squad(official, mode)
    assert want.version == version and len(want.examples) > 10
    for form in ("parquet", "saved", "json", "split", "run_qa"):
        got = read_squad(copies[form], mode)
        assert (got.examples, got.paragraphs, got.version, got.skipped) == \
            (want.examples, want.paragraphs, want.version, want.skipped), form
    ours, theirs = (make_features(_tokenizer(), read_squad(p, mode), 24, 6, 6, training=mode == "train")
                    for p in (copies["parquet"], official))
    assert [x.tolist() for x in ours.input_ids] == [x.tolist() for x in theirs.input_ids]
    if mode == "train":
        assert ours.start_positions.tolist() == theirs.start_positions.tolist()


def test_a_copy_without_unanswerable_questions_is_read_as_a_v2_runs(tmp_path):
    copies = _squad_copies(tmp_path, _synthetic(4, 1))
    assert read_squad(copies["parquet"], "score").version == "1.1"
    assert read_squad(copies["parquet"], "score", fallback="2.0").version == "2.0"
    official = _write(tmp_path / "d.json", _synthetic(4, 1))  # it says "version": "1.1"
    assert read_squad(official, "score", fallback="2.0").version == "1.1"


def test_squad_copies_predict_without_answers_and_bad_ones_are_refused_in_one_line(squad_run, tmp_path):
    import datasets

    raw = _synthetic(3, 1)
    copies = _squad_copies(tmp_path / "c", raw)
    questions = datasets.load_from_disk(str(copies["saved"])).remove_columns("answers")
    questions.to_parquet(str(tmp_path / "questions.parquet"))
    assert [e.qid for e in read_squad(tmp_path / "questions.parquet", "predict").examples] == ["q1-0", "q1-1", "q1-2"]
    with pytest.raises(UsageError, match=r"questions.parquet has no column answers \(found: id, title, context, "
                                         r"question\); give the hub's columns"):
        read_squad(tmp_path / "questions.parquet", "score", "--dev")
    with pytest.raises(UsageError, match=re.escape(f"--train {copies['dict']} is a DatasetDict folder of the splits "
                                                   f"train, validation; give one split's folder, such as "
                                                   f"{copies['dict'] / 'train'}")):
        read_squad(copies["dict"], "train", "--train")
    with pytest.raises(UsageError, match="is a folder but not a Dataset.save_to_disk folder"):
        read_squad(tmp_path, "score")
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "a", "context": "red", "question": "q", "answers": {"text": ["red"]}}\n'
                   '{"id": "b", "context": "red", "question": "q", "answers": {"text": [], "answer_start": []}}\n')
    with pytest.raises(UsageError, match=r"bad.json: line 1: answers must be \{text: \[strings\], answer_start"):
        read_squad(bad, "score")
    for answers in ({"text": ["red"], "answer_start": [0, 4]}, {"text": ["red"], "answer_start": [True]}):
        bad.write_text(json.dumps({"id": "a", "context": "red", "question": "q", "answers": answers}))
        with pytest.raises(UsageError, match=r"bad.json: line 1: answers must be .* of one length"):
            read_squad(bad, "score")
    bad.write_text('{"id": true, "context": "red", "question": "q", "answers": {"text": [], "answer_start": []}}')
    with pytest.raises(UsageError, match=r"bad.json: line 1: id is bool; give text or a number"):
        read_squad(bad, "score")
    bad.write_text('{"data": [{"id": "a", "context": 3, "question": "q", "answers": {"text": [], '
                   '"answer_start": []}}]}')
    with pytest.raises(UsageError, match=r"bad.json: data\[0\]: context is int, not text"):
        read_squad(bad, "score")
    rows = {"id": ["a", "b"], "title": ["t", "t"], "context": ["red", None], "question": ["q", "q"],
            "answers": [{"text": ["red"], "answer_start": [0]}] * 2}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "bad.parquet"))
    with pytest.raises(UsageError, match=r"bad.parquet: row 2 has no context"):  # rows count from 1
        read_squad(tmp_path / "bad.parquet", "score")
    shown = CliRunner().invoke(app, ["evaluate", "squad", "--model", str(squad_run), "--data", str(copies["dict"])])
    assert shown.exit_code == 2 and f"such as {copies['dict'] / 'validation'}" in shown.output, shown.output
    assert "Traceback" not in shown.output


def test_finetune_and_evaluate_on_hub_copies_equal_the_official_files(squad_run, squad_files, encoder, tmp_path):
    train = _squad_copies(tmp_path / "train", json.loads(squad_files["train"].read_text()))
    dev = _squad_copies(tmp_path / "dev", json.loads(squad_files["dev"].read_text()))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "squad", "--model", str(encoder), "--train", str(train["parquet"]),
                                      "--validation", str(dev["split"]), "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    want = json.loads((squad_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    shown = CliRunner().invoke(app, ["evaluate", "squad", "--model", str(squad_run), "--data", str(dev["json"]),
                                     "--json"])
    assert shown.exit_code == 0, shown.output
    assert {k: v for k, v in json.loads(shown.stdout).items() if k not in ("data", "task")} == \
        {"version": "1.1", **want["validation"]}


# --- hub ids (datasets.load_dataset stubbed with a copy's rows: no network) ------------------------------------

def test_a_hub_id_gives_the_examples_of_a_copy_from_the_flags_split_or_the_one_named(tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    copies = _squad_copies(tmp_path / "c", _synthetic(24, 5, 0.4))
    calls = stub_hub(monkeypatch, {"rajpurkar/squad_v2": copies["saved"]})
    for mode, flag, split in (("train", "--train", "train"), ("score", "--validation", "validation"),
                              ("predict", "--data", "validation")):
        want, got = read_squad(copies["parquet"], mode, flag), read_squad("rajpurkar/squad_v2", mode, flag)
        assert want.version == "2.0" and len(want.examples) > 10
        assert (got.examples, got.paragraphs, got.version, got.skipped) == \
            (want.examples, want.paragraphs, want.version, want.skipped), flag
        assert calls[-1] == ("rajpurkar/squad_v2", None, split)
    read_squad("rajpurkar/squad_v2:train", "score", "--data")
    read_squad("rajpurkar/squad_v2:plain_text:validation[:10]", "score", "--train")
    assert calls[-2:] == [("rajpurkar/squad_v2", None, "train"),
                          ("rajpurkar/squad_v2", "plain_text", "validation[:10]")]


def test_a_missing_file_is_no_hub_id_and_an_uncached_hub_id_offline_is_one_line(squad_run, tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    calls = stub_hub(monkeypatch, {})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("data/train.json", "squad/train-v1.1.json", "data/train", "squad/train.jsonl"):
        with pytest.raises(UsageError, match=f"^--train {re.escape(name)}: no such file; give a SQuAD v1.1/v2.0"):
            read_squad(name, "train", "--train")
    assert calls == []
    shown = CliRunner().invoke(app, ["evaluate", "squad", "--model", str(squad_run), "--data", "rajpurkar/squad"])
    assert shown.exit_code == 2 and calls == [("rajpurkar/squad", None, "validation")], shown.output
    assert shown.output.strip() == (
        "bertctl: error: --data rajpurkar/squad: not a local file or folder, and loading rajpurkar/squad "
        "(validation) from the hub failed (Couldn't reach 'rajpurkar/squad' on the Hub (OfflineModeIsEnabled)); "
        "go online once to download it to the cache, or give a local copy")


def test_finetune_on_hub_ids_equals_the_official_files_and_records_the_ids(squad_run, squad_files, encoder, tmp_path,
                                                                             monkeypatch):
    from hub_copy_fixtures import stub_hub

    saved = {name: _squad_copies(tmp_path / name, json.loads(squad_files[part].read_text()))["saved"]
             for name, part in (("rajpurkar/squad", "train"), ("someone/squad-dev", "dev"))}
    calls = stub_hub(monkeypatch, saved)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "squad", "--model", str(encoder), "--train", "rajpurkar/squad",
                                      "--validation", "someone/squad-dev:test", "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert calls == [("rajpurkar/squad", None, "train"), ("someone/squad-dev", None, "test")]
    want = json.loads((squad_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["train"], config["validation"]) == ("rajpurkar/squad", "someone/squad-dev:test")
