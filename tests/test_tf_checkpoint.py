"""Google's TensorFlow BERT checkpoints (bert_model.ckpt.index + .data-*) read without TensorFlow.

TensorFlow is not installed, so the checkpoints are written here from the format's specification
(tensorflow/core/lib/io table_builder.cc, block_builder.cc, format.cc; tensor_bundle.cc/.proto), independently
of bertctl's reader: a bitwise CRC32C, data blocks of a small size with TensorFlow's restart interval 16 and
prefix-compressed keys, an index block with restart interval 1, an empty metaindex block, the footer, proto3
messages that omit zero fields, and two data shards with aligned tensors.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from test_parity import batch, outputs, reference_model  # noqa: E402

from bertctl.checkpoint import load_model, read_checkpoint  # noqa: E402
from bertctl.cli import app  # noqa: E402
from bertctl.errors import BertctlError, UsageError  # noqa: E402
from bertctl.tf_checkpoint import checkpoint_prefix  # noqa: E402
from bertctl.tf_format import crc32c  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]  # odd_config's 97 rows

# ------------------------------------------------------------------------------------------------ the writer


def crc(data: bytes) -> int:
    """CRC32C one bit at a time (RFC 3720), independent of bertctl's table-driven one."""
    register = 0xFFFFFFFF
    for byte in data:
        register ^= byte
        for _ in range(8):
            register = (register >> 1) ^ (0x82F63B78 if register & 1 else 0)
    return register ^ 0xFFFFFFFF


CRC_TABLE = [crc(bytes([b])) ^ crc(b"\0") for b in range(256)]  # linear part of one byte; fast enough for tensors


def fast_crc(data: bytes) -> int:
    register = 0xFFFFFFFF
    for byte in data:
        register = CRC_TABLE[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register ^ 0xFFFFFFFF


def mask(value: int) -> int:
    return (((value >> 15) | (value << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes, fixed32: bool = False) -> bytes:
    """One proto3 field; a zero scalar is omitted, as protobuf serialises it."""
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    if value == 0:
        return b""
    if fixed32:
        return varint(number << 3 | 5) + struct.pack("<I", value)
    return varint(number << 3) + varint(value)


def block(entries: list[tuple[bytes, bytes]], restart_interval: int) -> bytes:
    out, restarts, last = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        shared = 0
        if i % restart_interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        last = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def table(entries: list[tuple[bytes, bytes]], block_size: int = 1500, block_type: int = 0) -> bytes:
    """A TensorFlow table: data blocks cut at `block_size`, an empty metaindex block, the index block, the footer."""
    out = bytearray()

    def write(contents: bytes, kind: int = 0) -> bytes:
        handle = varint(len(out)) + varint(len(contents))
        out.extend(contents + bytes([kind]) + struct.pack("<I", mask(crc(contents + bytes([kind])))))
        return handle

    index, pending = [], []
    for key, value in entries:
        pending.append((key, value))
        if sum(len(k) + len(v) + 3 for k, v in pending) >= block_size:
            index.append((key, write(block(pending, 16), block_type)))
            pending = []
    if pending:
        index.append((pending[-1][0] + b"\xff", write(block(pending, 16), block_type)))
    meta = write(block([], 16))
    footer = meta + write(block(index, 1))
    return bytes(out) + footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57)


DTYPES = {"float32": 1, "float64": 2, "float16": 19, "int64": 9, "bfloat16": 14}


def write_checkpoint(prefix, tensors: dict[str, np.ndarray | torch.Tensor], shards: int = 2, align: int = 8,
                     block_type: int = 0) -> dict[str, tuple[int, int]]:
    """A bundle: tensors dealt over `shards` data files (each padded to `align`), the .index naming them; returns
    where each tensor's bytes are (shard, offset)."""
    datas = [bytearray() for _ in range(shards)]
    entries, where = [], {}
    for i, name in enumerate(sorted(tensors)):
        value = tensors[name]
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            kind, raw = "bfloat16", value.view(torch.int16).numpy().tobytes()
        else:
            value = np.asarray(value)
            kind, raw = str(value.dtype), np.ascontiguousarray(value).tobytes()
        shard = i % shards
        data = datas[shard]
        shape = b"".join(field(2, field(1, d) or b"") for d in value.shape)
        entry = (field(1, DTYPES[kind]) + field(2, shape) + field(3, shard) + field(4, len(data))
                 + field(5, len(raw)) + field(6, mask(fast_crc(raw)), fixed32=True))
        entries.append((name.encode(), entry))
        where[name] = (shard, len(data))
        data += raw + b"\0" * (-len(raw) % align)
    header = field(1, shards) + field(3, field(1, 1))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}.index", "wb") as f:
        f.write(table([(b"", header), *entries], block_type=block_type))
    for shard, data in enumerate(datas):
        with open(f"{prefix}.data-{shard:05d}-of-{shards:05d}", "wb") as f:
            f.write(bytes(data))
    return where


# ---------------------------------------------------------------------------------- Google's names, from theirs


def google_names(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """transformers' BertForPreTraining / ForSequenceClassification / ForQuestionAnswering weights under the names
    google-research/bert's scripts give them (kernels [in, out])."""
    out = {}
    for key, tensor in state.items():
        if key == "cls.predictions.decoder.weight" or key.endswith(("position_ids", "token_type_ids")):
            continue
        value = tensor.detach().numpy()
        name = (key.replace("cls.predictions.decoder.bias", "cls.predictions.bias")
                .replace("classifier.", "output_").replace("qa_outputs.", "cls/squad/output_")
                .replace("cls.seq_relationship.", "cls/seq_relationship/output_"))
        name = name.replace("encoder.layer.", "encoder/layer_").replace(".", "/")
        if name.endswith("_embeddings/weight"):
            name = name.removesuffix("/weight")
        elif "LayerNorm" in name:
            name = name.replace("/weight", "/gamma").replace("/bias", "/beta")
        elif name.endswith("output_weight"):
            name += "s"  # already [out, in]
        elif name.endswith("/weight"):
            name, value = name.removesuffix("/weight") + "/kernel", value.T
        name = name.replace("cls/predictions/bias", "cls/predictions/output_bias")
        out[name] = np.ascontiguousarray(value)
    return out


def google_folder(folder, reference, prefix="bert_model.ckpt", extra=None, config=True, **kwargs):
    folder.mkdir(parents=True, exist_ok=True)
    write_checkpoint(folder / prefix, {**google_names(reference.state_dict()), **(extra or {})}, **kwargs)
    if config:  # bert_config.json: transformers' BertConfig names, no model_type, no architectures
        keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
                "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
                "num_hidden_layers", "type_vocab_size", "vocab_size")
        (folder / "bert_config.json").write_text(json.dumps({k: getattr(reference.config, k) for k in keys}))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


def slots(names) -> dict[str, np.ndarray]:
    """What run_pretraining / run_classifier save beside the model: Adam moments, global_step."""
    out = {f"{n}/{slot}": np.full((3,), 7, np.float32) for n in names for slot in ("adam_m", "adam_v")}
    return {**out, "global_step": np.array(1000, np.int64)}


def compare(name, folder, reference, odd_config):
    ours = load_model(folder).eval()
    ids, types, mask_ = batch(odd_config)
    with torch.no_grad():
        expected = outputs(name, reference(input_ids=ids, token_type_ids=types, attention_mask=mask_))
        got = outputs(name, ours(ids, types, mask_))
    return max((g - e).abs().max().item() for e, g in zip(expected, got, strict=True))


def info(folder):
    return CliRunner().invoke(app, ["info", "--json", str(folder)])


# ------------------------------------------------------------------------------------------------------ tests


def test_crc32c_known_answers():
    """RFC 3720's test vectors and the classic check value, also across bertctl's block and chunk boundaries."""
    assert crc32c(np.frombuffer(b"123456789", np.uint8)) == 0xE3069283
    assert crc32c(np.zeros(32, np.uint8)) == 0x8A9136AA
    assert crc32c(np.full(32, 0xFF, np.uint8)) == 0x62A8AB43
    assert crc32c(np.arange(32, dtype=np.uint8)) == 0x46DD794E
    assert crc32c(np.arange(31, -1, -1).astype(np.uint8)) == 0x113FDB5C
    data = np.random.default_rng(0).integers(0, 256, (1 << 18) + 1000, dtype=np.uint8)
    for size in (0, 1, 63, 64, 65, 1000, 1 << 18, len(data)):
        assert crc32c(data[:size]) == fast_crc(data[:size].tobytes()), size


def test_protobuf_fields_of_every_wire_type_are_read():
    """The encoding guide's bytes for each wire type (a fixed64 is 8 bytes, a tag past field 15 two bytes): a field
    misread shifts every field after it."""
    from bertctl.tf_format import message_fields

    message = bytes.fromhex("089601" "110100000000000080" "1a026162" "2578563412" "a00101" "0800")
    assert message_fields(message) == {1: [150, 0], 2: [0x8000000000000001], 3: [b"ab"], 4: [0x12345678], 20: [1]}


def test_google_release_gives_transformers_outputs_exactly(odd_config, tmp_path):
    """Google's release layout (bert_config.json, vocab.txt, bert_model.ckpt.*): MLM and NSP logits identical to
    transformers' model with the same weights; convert writes a folder transformers reads to the same numbers."""
    reference = reference_model("BertForPreTraining", odd_config)
    folder = google_folder(tmp_path / "uncased_L-3_H-48_A-4", reference)
    assert read_checkpoint(folder).architecture == "BertForPreTraining"
    assert compare("BertForPreTraining", folder, reference, odd_config) == 0
    result = CliRunner().invoke(app, ["convert", str(folder), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    again = CliRunner().invoke(app, ["convert", str(tmp_path / "out"), "-o", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    for name in ("tokenizer_config.json", "config.json", "model.safetensors"):  # converting again changes nothing
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
    converted = transformers.BertForPreTraining.from_pretrained(tmp_path / "out").eval()
    ids, types, mask_ = batch(odd_config)
    with torch.no_grad():
        for got, expected in zip(outputs("BertForPreTraining", converted(input_ids=ids, token_type_ids=types)),
                                 outputs("BertForPreTraining", reference(input_ids=ids, token_type_ids=types)),
                                 strict=True):
            assert torch.equal(got, expected)
    summary = json.loads(info(folder).stdout)
    assert summary["heads"] == ["mlm", "nsp"] and summary["tokenizer"]["vocab_size"] == len(VOCAB)
    assert summary["format"] == "tensorflow (google-research/bert)"
    result = CliRunner().invoke(app, ["fill", "-m", str(folder), "--json", "w3 [MASK] w5"])
    assert result.exit_code == 0, result.output


def test_run_classifier_checkpoint_loads_as_a_classifier_and_skips_training_state(odd_config, tmp_path):
    """run_classifier's output: top-level output_weights [labels, H] / output_bias, Adam slots, global_step; the
    `checkpoint` file names the last of several."""
    reference = reference_model("BertForSequenceClassification", odd_config, num_labels=3)
    names = google_names(reference.state_dict())
    folder = google_folder(tmp_path / "out", reference, prefix="model.ckpt-300", extra=slots(names))
    write_checkpoint(folder / "model.ckpt-0", {"global_step": np.array(0, np.int64)})  # an older one, unread
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-300"\n'
                                       'all_model_checkpoint_paths: "model.ckpt-0"\n'
                                       'all_model_checkpoint_paths: "model.ckpt-300"\n')
    ckpt = read_checkpoint(folder)
    assert ckpt.architecture == "BertForSequenceClassification" and ckpt.num_labels == 3
    assert not any("adam" in k or "global_step" in k for k in ckpt.state)
    assert compare("BertForSequenceClassification", folder, reference, odd_config) == 0


def test_run_squad_checkpoint_loads_as_question_answering(odd_config, tmp_path):
    reference = reference_model("BertForQuestionAnswering", odd_config)
    folder = google_folder(tmp_path / "squad", reference, shards=1)
    assert read_checkpoint(folder).architecture == "BertForQuestionAnswering"
    assert compare("BertForQuestionAnswering", folder, reference, odd_config) == 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoints_are_upcast(odd_config, tmp_path, dtype):
    reference = reference_model("BertForPreTraining", odd_config)
    with torch.no_grad():
        for param in reference.parameters():
            param.copy_(param.to(getattr(torch, dtype)).float())
    names = google_names(reference.state_dict())
    tensors = {k: torch.from_numpy(v).to(torch.bfloat16) if dtype == "bfloat16" else v.astype(np.float16)
               for k, v in names.items()}
    google_folder(tmp_path / "half", reference)
    write_checkpoint(tmp_path / "half" / "bert_model.ckpt", tensors)
    assert read_checkpoint(tmp_path / "half").stored_dtype == dtype
    assert compare("BertForPreTraining", tmp_path / "half", reference, odd_config) == 0


def test_checkpoint_file_picks_one_of_several(odd_config, tmp_path):
    """The `checkpoint` file decides (an absolute path from another machine means the file of that name here);
    several checkpoints and no such file are refused, naming them."""
    first = reference_model("BertForPreTraining", odd_config)
    second = reference_model("BertForPreTraining", odd_config)
    with torch.no_grad():
        second.bert.embeddings.word_embeddings.weight.add_(1.0)
    folder = google_folder(tmp_path / "run", first, prefix="model.ckpt-1")
    google_folder(folder, second, prefix="model.ckpt-2")
    result = info(folder)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "model.ckpt-1, model.ckpt-2" in result.stderr
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
    assert compare("BertForPreTraining", folder, first, odd_config) == 0
    (folder / "checkpoint").write_text('model_checkpoint_path: "gs://bucket/bert/run/model.ckpt-2"\n')
    assert compare("BertForPreTraining", folder, second, odd_config) == 0
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
    with pytest.raises(UsageError, match=r"names the checkpoint model\.ckpt-3, but model\.ckpt-3\.index is not"):
        read_checkpoint(folder)


@pytest.mark.parametrize(("line", "name"), [
    # a run saved on Windows, its folder since copied: TensorFlow writes the absolute path, backslashes escaped
    (r'model_checkpoint_path: "C:\\Users\\me\\run\\model.ckpt-2"', "model.ckpt-2"),
    (r'model_checkpoint_path: "D:/runs/bert/model.ckpt-2"', "model.ckpt-2"),
    (r'model_checkpoint_path: "\\\\server\\share\\run\\model.ckpt-2"', "model.ckpt-2"),
    # protobuf's text format writes the UTF-8 bytes of a non-ASCII name as octal escapes (CEscape, as_utf8=False)
    (r'model_checkpoint_path: "mod\303\250le.ckpt-2"', "modèle.ckpt-2"),
    (r'model_checkpoint_path: "/home/jos\303\251/run/mod\303\250le.ckpt-2"', "modèle.ckpt-2"),
    (r'model_checkpoint_path: "it\'s \"the\" one.ckpt-2"', "it's \"the\" one.ckpt-2"),
])
def test_checkpoint_file_names_are_read_as_tensorflow_writes_them(tmp_path, line, name):
    for prefix in ("model.ckpt-1", name):
        (tmp_path / f"{prefix}.index").write_bytes(b"")
    (tmp_path / "checkpoint").write_text(f"{line}\nall_model_checkpoint_paths: \"model.ckpt-1\"\n", encoding="utf-8")
    assert checkpoint_prefix(tmp_path) == tmp_path / name


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("damage", "named"), [
    (lambda f: flip(f / "bert_model.ckpt.data-00000-of-00002", 100), "data-00000-of-00002: the bytes of "),
    (lambda f: flip(f / "bert_model.ckpt.data-00001-of-00002", 7), "data-00001-of-00002: the bytes of "),
    (lambda f: flip(f / "bert_model.ckpt.index", 30), "bert_model.ckpt.index: the block at byte 0 does not match"),
    (lambda f: flip(f / "bert_model.ckpt.index", -3), "bert_model.ckpt.index: not a TensorFlow checkpoint index"),
    (lambda f: (f / "bert_model.ckpt.data-00001-of-00002").write_bytes(
        (f / "bert_model.ckpt.data-00001-of-00002").read_bytes()[:-5000]), "data-00001-of-00002: it ends inside "),
    (lambda f: (f / "bert_model.ckpt.data-00001-of-00002").unlink(), "No such file"),
])
def test_damaged_files_are_one_line_naming_the_file(odd_config, tmp_path, damage, named):
    folder = google_folder(tmp_path / "g", reference_model("BertForPreTraining", odd_config))
    damage(folder)
    result = info(folder)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("bertctl: error: cannot read weights ") and result.stderr.count("\n") == 1
    assert named in result.stderr, result.stderr


@pytest.mark.parametrize("dims", [[2**62, 4], [2**40, 2**40, 2**40]])
def test_a_shape_whose_size_overflows_int64_is_a_damaged_entry(odd_config, tmp_path, dims):
    """A damaged .index whose dimensions multiply past 2**64 (numpy's product wraps to 0, matching a size of 0)."""
    folder = google_folder(tmp_path / "g", reference_model("BertForPreTraining", odd_config))
    shape = b"".join(field(2, field(1, d)) for d in dims)
    entry = field(1, 1) + field(2, shape) + field(3, 0) + field(4, 0) + field(5, 0) + field(6, mask(0), fixed32=True)
    header = field(1, 2) + field(3, field(1, 1))
    (folder / "bert_model.ckpt.index").write_bytes(table([(b"", header), (b"bert/pooler/dense/bias", entry)]))
    result = info(folder)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "bert_model.ckpt.index: the entry of bert/pooler/dense/bias is inconsistent" in result.stderr


@pytest.mark.parametrize(("big_endian", "slices", "message"), [
    (1, b"", "the checkpoint was written big-endian"),
    (0, field(7, field(1, field(2, 2))), "bert/pooler/dense/bias is a partitioned variable"),
], ids=["big-endian", "sliced"])
def test_a_big_endian_or_partitioned_checkpoint_is_refused(tmp_path, big_endian, slices, message):
    """A big-endian machine's bytes (header field 2) or a variable saved in slices (entry field 7, the first slice's
    bytes at the entry's place) would read as wrong weights without a word."""
    from bertctl.tf_checkpoint import read_weights

    raw = np.arange(4, dtype=np.float32).tobytes()
    entry = (field(1, 1) + field(2, field(2, field(1, 4))) + field(5, len(raw))
             + field(6, mask(fast_crc(raw)), fixed32=True) + slices)
    header = field(1, 1) + field(2, big_endian) + field(3, field(1, 1))
    (tmp_path / "bert_model.ckpt.index").write_bytes(table([(b"", header), (b"bert/pooler/dense/bias", entry)]))
    (tmp_path / "bert_model.ckpt.data-00000-of-00001").write_bytes(raw)
    with pytest.raises(UsageError, match=message):
        read_weights(tmp_path / "bert_model.ckpt")
    if not big_endian:  # the same entry without its slices is read
        entry = entry.removesuffix(slices)
        (tmp_path / "bert_model.ckpt.index").write_bytes(table([(b"", header), (b"bert/pooler/dense/bias", entry)]))
        assert read_weights(tmp_path / "bert_model.ckpt")["bert.pooler.dense.bias"].tolist() == [0, 1, 2, 3]


def test_what_bertctl_cannot_read_is_refused_by_name(odd_config, tmp_path):
    """Snappy blocks, partitioned variables, odd dtypes and unknown model variables: one line each, by name;
    optimizer slots of any optimizer and a broken slot are never read."""
    reference = reference_model("BertForPreTraining", odd_config)
    extra = {"bert/pooler/dense/kernel/Momentum": np.zeros(3, np.float32), "loss_scale": np.zeros(1, np.float16)}
    where = write_checkpoint(tmp_path / "g" / "bert_model.ckpt", {**google_names(reference.state_dict()), **extra})
    folder = google_folder(tmp_path / "g", reference, extra=extra)
    shard, offset = where["bert/pooler/dense/kernel/Momentum"]
    flip(folder / f"bert_model.ckpt.data-{shard:05d}-of-00002", offset + 1)  # an unread slot's bytes
    assert compare("BertForPreTraining", folder, reference, odd_config) == 0
    google_folder(folder, reference, block_type=1)
    with pytest.raises(BertctlError, match="snappy-compressed"):
        read_checkpoint(folder)
    google_folder(folder, reference, extra={"bert/encoder/layer_0/attention/self/query/scale": np.ones(1, np.float32)})
    with pytest.raises(BertctlError, match=r"unexpected variables bert/encoder/layer_0/attention/self/query/scale "):
        read_checkpoint(folder)
    google_folder(folder, reference, extra={"bert/pooler/dense/bias": np.zeros(48, np.float64)})
    with pytest.raises(BertctlError, match=r"bert/pooler/dense/bias holds float64 values"):
        read_checkpoint(folder)


def test_a_tf_checkpoint_without_its_config_says_what_to_copy(odd_config, tmp_path):
    folder = google_folder(tmp_path / "out", reference_model("BertForPreTraining", odd_config), config=False)
    result = info(folder)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "holds a TensorFlow checkpoint (bert_model.ckpt) but no bert_config.json or config.json" in result.stderr


def test_a_wrong_bert_config_is_blamed_by_its_name(odd_config, tmp_path):
    folder = google_folder(tmp_path / "g", reference_model("BertForPreTraining", odd_config))
    config = json.loads((folder / "bert_config.json").read_text())
    (folder / "bert_config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    with pytest.raises(UsageError, match=r"bert_config\.json says num_hidden_layers 2, .* fix bert_config\.json"):
        read_checkpoint(folder)


def test_a_run_classifier_mnli_checkpoint_is_scored_in_its_processors_label_order(odd_config, tmp_path, caplog):
    """run_classifier.py's MnliProcessor outputs contradiction, entailment, neutral, and its checkpoints carry no
    id2label: scored in GLUE's order (entailment, neutral, contradiction) its accuracy would be silently wrong."""
    from bertctl.data.glue import get_task
    from bertctl.evaluate import label_order

    reference = reference_model("BertForSequenceClassification", odd_config, num_labels=3)
    folder = google_folder(tmp_path / "mnli", reference)
    ckpt = read_checkpoint(folder)
    assert ckpt.labels is None and ckpt.from_tensorflow
    assert label_order(ckpt, 3, get_task("mnli"), folder) == [1, 2, 0]  # the output of each GLUE class
    assert label_order(ckpt, 3, get_task("ax"), folder) == [1, 2, 0]
    assert "run_classifier.py's order for mnli (contradiction, entailment, neutral)" in caplog.text
    two = google_folder(tmp_path / "mrpc", reference_model("BertForSequenceClassification", odd_config, num_labels=2))
    assert label_order(read_checkpoint(two), 2, get_task("mrpc"), two) is None  # "0", "1": GLUE's order already


def test_an_integer_weight_is_cast_where_the_model_takes_the_checkpoints_tensors(odd_config, tmp_path):
    """fill, evaluate and pretrain --init-from assign the checkpoint's tensors to the model (share_weights): an
    integer weight, which the reader takes as convert and finetune do (cast on copy), must not become an integer
    parameter (torch: 'Only Tensors of floating point ... can require gradients', exit 1)."""
    from bertctl.checkpoint import build_model

    reference = reference_model("BertForMaskedLM", odd_config)
    types = reference.bert.embeddings.token_type_embeddings.weight
    with torch.no_grad():
        types.copy_(torch.round(types * 100))
    names = google_names(reference.state_dict())
    names["bert/embeddings/token_type_embeddings"] = names["bert/embeddings/token_type_embeddings"].astype(np.int64)
    folder = google_folder(tmp_path / "g", reference)
    write_checkpoint(folder / "bert_model.ckpt", names)
    shared = build_model(read_checkpoint(folder), "BertForMaskedLM", share_weights=True).eval()
    assert all(p.dtype == torch.float32 for p in shared.parameters())
    ids, types_, mask_ = batch(odd_config)
    with torch.no_grad():
        got = outputs("BertForMaskedLM", shared(ids, types_, mask_))
        expected = outputs("BertForMaskedLM", reference(input_ids=ids, token_type_ids=types_, attention_mask=mask_))
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    result = CliRunner().invoke(app, ["fill", "-m", str(folder), "w3 [MASK] w5"])
    assert result.exit_code == 0, result.output


def test_an_id2label_added_to_bert_config_is_blamed_by_that_files_name(odd_config, tmp_path):
    """docs/checkpoints.md says to add an id2label to bert_config.json for a processor of one's own; one that does
    not fit the head must name that file, not a config.json the folder does not have."""
    folder = google_folder(tmp_path / "g", reference_model("BertForSequenceClassification", odd_config,
                                                           num_labels=3))
    config = json.loads((folder / "bert_config.json").read_text())
    for id2label, wrong in (({"0": "a", "1": "b"}, "names 2 classes"), (["a", "b", "c"], "id2label must map")):
        (folder / "bert_config.json").write_text(json.dumps({**config, "id2label": id2label}))
        with pytest.raises(UsageError, match=wrong) as error:
            assert read_checkpoint(folder).labels
        assert str(folder / "bert_config.json") in str(error.value)
        assert str(folder / "config.json") not in str(error.value) and "in config.json" not in str(error.value)
    (folder / "bert_config.json").write_text(json.dumps({**config, "architectures": "BertModel"}))
    with pytest.raises(UsageError, match=r"bert_config\.json: architectures must be a list"):
        read_checkpoint(folder)


def test_finetuning_a_run_classifier_mnli_checkpoint_keeps_what_each_row_predicts(odd_config, tmp_path):
    """The CHANGELOG's "fine-tuned in its processor's class order": the kept head's rows are permuted into GLUE's
    order (entailment, neutral, contradiction), so output k is GLUE's class k from the first step."""
    from bertctl.checkpoint import build_model
    from bertctl.data.glue import get_task
    from bertctl.finetune_classifier import _align_classifier

    reference = reference_model("BertForSequenceClassification", odd_config, num_labels=3)
    ckpt = read_checkpoint(google_folder(tmp_path / "mnli", reference))
    model = build_model(ckpt, "BertForSequenceClassification", num_labels=3)
    assert _align_classifier(model, ckpt, get_task("mnli"), "mnli", announce=False)
    assert torch.equal(model.classifier.weight, reference.classifier.weight[[1, 2, 0]])
    assert torch.equal(model.classifier.bias, reference.classifier.bias[[1, 2, 0]])


def test_a_google_folder_serves_as_a_model_config_and_convert_warns_about_unnamed_classes(odd_config, tmp_path,
                                                                                        caplog):
    """`--model-config DIR` and corpus build's length check read a TensorFlow folder's bert_config.json; convert
    says a run_classifier head's classes go unnamed (LABEL_i), which would lose run_classifier's MNLI order."""
    from bertctl.config import model_config
    from bertctl.corpus import check_length
    from bertctl.errors import UsageError

    folder = google_folder(tmp_path / "mnli", reference_model("BertForSequenceClassification", odd_config,
                                                              num_labels=3))
    assert model_config(str(folder)).hidden_size == odd_config.hidden_size
    with pytest.raises(UsageError, match="bert_config.json"):
        check_length(odd_config.max_position_embeddings + 1, folder)
    result = CliRunner().invoke(app, ["convert", str(folder), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "classifier without id2label: its outputs are saved as LABEL_0" in caplog.text + result.stderr
