"""Every weights-file flavour a BERT folder on the hub comes in, each against transformers reading the same folder.

Folders are built with transformers (tiny random configs) and then edited the way older versions wrote them:
pytorch_model.bin (also Google's legacy names and the pre-1.6 torch format), shards with either index, fp16/bf16,
the tied decoder stored or not, buffers, both formats side by side.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

from test_parity import TOLERANCE, batch, outputs, reference_model  # noqa: E402

from bertctl.checkpoint import load_model, read_checkpoint, save_model  # noqa: E402
from bertctl.checkpoint_weights import read_weights  # noqa: E402
from bertctl.convert import convert  # noqa: E402
from bertctl.errors import BertctlError, UsageError  # noqa: E402
from bertctl.info import info  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# transformers 5 renamed from_pretrained's torch_dtype to dtype (and defaults to "auto": the file's dtype)
FP32 = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}


def saved(name, odd_config, folder, **extra):
    reference = reference_model(name, odd_config, **extra)
    reference.save_pretrained(folder)
    return reference


def max_diff(name, folder, odd_config, reference=None):
    """bertctl's outputs vs transformers' (reading `folder`, in fp32, unless a reference model is given)."""
    if reference is None:
        reference = getattr(transformers, name).from_pretrained(folder, **FP32).eval()
    ours = load_model(folder).eval()
    assert ours.fresh_heads == ()
    ids, types, mask = batch(odd_config)
    with torch.no_grad():
        expected = outputs(name, reference(input_ids=ids, token_type_ids=types, attention_mask=mask))
        got = outputs(name, ours(ids, types, mask))
    return max((g - e).abs().max().item() for e, g in zip(expected, got, strict=True))


def assert_transformers_loads_ours(name, folder, tmp_path):
    save_model(load_model(folder), tmp_path / "ours")
    _, info = getattr(transformers, name).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info


def rewrite_as_bin(folder, edit=lambda state: state, legacy_format=False):
    """model.safetensors -> pytorch_model.bin, as transformers < 4.30 saved it (optionally edited)."""
    state = edit(load_file(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy_format)


def write_bin_shards(folder, shards=3):
    """pytorch_model.bin.index.json + pytorch_model-0000i-of-0000n.bin, as sharded save_pretrained wrote them."""
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(state)
    weight_map = {}
    for i in range(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {k: state[k] for k in keys[i::shards]}
        torch.save(part, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("legacy_format", [False, True])
def test_pytorch_model_bin(odd_config, tmp_path, legacy_format):
    saved("BertForPreTraining", odd_config, tmp_path / "hf")
    rewrite_as_bin(tmp_path / "hf", legacy_format=legacy_format)
    assert max_diff("BertForPreTraining", tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours("BertForPreTraining", tmp_path / "hf", tmp_path)


def test_old_bin_with_legacy_names_buffers_and_both_decoder_entries(odd_config, tmp_path):
    """What bert-base-uncased's pytorch_model.bin holds: gamma/beta, position_ids, the decoder weight and bias."""
    saved("BertForPreTraining", odd_config, tmp_path / "hf")

    def legacy(state):
        out = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in state.items()}
        out["bert.embeddings.position_ids"] = torch.arange(odd_config.max_position_embeddings)[None]
        out["bert.embeddings.token_type_ids"] = torch.zeros(1, odd_config.max_position_embeddings, dtype=torch.long)
        out["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
        return out

    rewrite_as_bin(tmp_path / "hf", legacy)
    assert max_diff("BertForPreTraining", tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours("BertForPreTraining", tmp_path / "hf", tmp_path)


@pytest.mark.parametrize("name", ["BertModel", "BertForSequenceClassification"])
def test_sharded_safetensors(name, odd_config, tmp_path):
    reference = reference_model(name, odd_config)
    reference.save_pretrained(tmp_path / "hf", max_shard_size="20KB")
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "hf").glob("model-*.safetensors"))) > 2
    assert max_diff(name, tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours(name, tmp_path / "hf", tmp_path)


def test_sharded_pytorch_bin(odd_config, tmp_path):
    saved("BertForMaskedLM", odd_config, tmp_path / "hf")
    write_bin_shards(tmp_path / "hf")
    assert max_diff("BertForMaskedLM", tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours("BertForMaskedLM", tmp_path / "hf", tmp_path)


@pytest.mark.parametrize("weight_map", [{"bert.pooler.dense.bias": 5}, ["model-00001-of-00002.safetensors"],
                                        {"bert.pooler.dense.bias": None}])
def test_a_shard_index_whose_weight_map_is_not_names_of_files_is_one_line(weight_map, odd_config, tmp_path):
    reference_model("BertModel", odd_config).save_pretrained(tmp_path / "hf", max_shard_size="20KB")
    index = tmp_path / "hf" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    if isinstance(weight_map, dict):
        data["weight_map"].update(weight_map)
    else:
        data["weight_map"] = weight_map
    index.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=f"^cannot read the shard index {index}: weight_map must map"):
        read_checkpoint(tmp_path / "hf")


@pytest.mark.parametrize(("content", "said"), [("", "is empty (0 bytes"), ("{}", "cannot read the shard index"),
                                               ("[]", "cannot read the shard index")])
def test_an_empty_index_or_one_without_a_weight_map_is_one_line(content, said, tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(content)
    with pytest.raises(UsageError, match=re.escape(said)):
        read_weights(tmp_path)


def test_each_shard_is_read_once_and_a_single_file_beats_its_index(tmp_path, monkeypatch):
    """transformers' order: model.safetensors before its index; names under `module.` in it are not NVIDIA's."""
    import bertctl.checkpoint_weights as weights

    save_file({"a": torch.zeros(1), "c": torch.ones(1)}, tmp_path / "s1.safetensors")
    save_file({"b": torch.zeros(2)}, tmp_path / "s2.safetensors")
    index = {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    reads = []
    monkeypatch.setattr(weights, "_read_weights_file", lambda path: reads.append(path) or load_file(path))
    assert set(read_weights(tmp_path)[0]) == {"a", "b", "c"} and len(reads) == 2
    save_file({"module.z": torch.zeros(1)}, tmp_path / "model.safetensors")
    state, path, nvidia = read_weights(tmp_path)
    assert (list(state), path.name, nvidia) == (["module.z"], "model.safetensors", False)


@pytest.mark.parametrize("outside", ["../other.safetensors", "ABSOLUTE", "sub/../../other.safetensors", ".."])
def test_a_shard_index_naming_a_file_outside_its_folder_is_refused(outside, odd_config, tmp_path):
    """A weight_map entry is a shard beside the index: `../other.safetensors` or an absolute path read weights
    from wherever it pointed."""
    reference_model("BertModel", odd_config).save_pretrained(tmp_path / "hf", max_shard_size="20KB")
    shard = sorted((tmp_path / "hf").glob("model-*.safetensors"))[0]
    shutil.copy(shard, tmp_path / "other.safetensors")
    outside = str(tmp_path / "other.safetensors") if outside == "ABSOLUTE" else outside
    index = tmp_path / "hf" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {name: outside if file == shard.name else file for name, file in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    with pytest.raises(BertctlError, match=f"^cannot read the shard index {re.escape(str(index))}: weight_map names "
                                           f"{re.escape(repr(outside))}, not a file in its folder"):
        read_checkpoint(tmp_path / "hf")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_weights_are_loaded_as_fp32(dtype, odd_config, tmp_path):
    """transformers 5 would compute in the file's dtype by default (dtype="auto"); bertctl upcasts, which is
    transformers with dtype=torch.float32 (and transformers 4's default)."""
    reference_model("BertForPreTraining", odd_config).to(dtype).save_pretrained(tmp_path / "hf")
    ckpt = read_checkpoint(tmp_path / "hf")
    assert ckpt.stored_dtype == str(dtype).removeprefix("torch.")
    assert all(t.dtype == torch.float32 for t in ckpt.state.values() if t.is_floating_point())
    assert max_diff("BertForPreTraining", tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours("BertForPreTraining", tmp_path / "hf", tmp_path)


def test_a_file_of_mixed_precision_reports_each_dtype_it_holds(odd_config, tmp_path):
    """fp16 weights with fp32 LayerNorms (as mixed-precision recipes keep them): info names both, not the first."""
    saved("BertModel", odd_config, tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    save_file({k: v if "LayerNorm" in k else v.half() for k, v in state.items()}, tmp_path / "hf" / "model.safetensors")
    ckpt = read_checkpoint(tmp_path / "hf")
    assert ckpt.stored_dtype == "float16/float32"
    assert all(t.dtype == torch.float32 for t in ckpt.state.values())


def test_safetensors_is_preferred_over_pytorch_bin(odd_config, tmp_path):
    saved("BertForQuestionAnswering", odd_config, tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    torch.save({k: v + 1.0 for k, v in state.items()}, tmp_path / "hf" / "pytorch_model.bin")  # stale, different
    assert max_diff("BertForQuestionAnswering", tmp_path / "hf", odd_config) <= TOLERANCE


def test_bare_encoder_with_and_without_prefix(odd_config, tmp_path):
    reference = saved("BertModel", odd_config, tmp_path / "bare")
    assert not any(k.startswith("bert.") for k in load_file(tmp_path / "bare" / "model.safetensors"))
    assert max_diff("BertModel", tmp_path / "bare", odd_config) <= TOLERANCE
    # an encoder cut out of a task model keeps the prefix
    state = {f"bert.{k}": v for k, v in load_file(tmp_path / "bare" / "model.safetensors").items()}
    save_file(state, tmp_path / "bare" / "model.safetensors", metadata={"format": "pt"})
    assert max_diff("BertModel", tmp_path / "bare", odd_config, reference) <= TOLERANCE


@pytest.mark.parametrize("decoder", ["absent", "tied", "bias_only"])
def test_mlm_decoder_entries(decoder, odd_config, tmp_path):
    saved("BertForMaskedLM", odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    if decoder == "tied":
        state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"].clone()
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()
    elif decoder == "bias_only":  # transformers 2.x files: only the decoder's bias
        state["cls.predictions.decoder.bias"] = state.pop("cls.predictions.bias")
    save_file(state, path, metadata={"format": "pt"})
    assert max_diff("BertForMaskedLM", tmp_path / "hf", odd_config) <= TOLERANCE


DECODER = "cls.predictions.decoder.weight"


def with_decoder(folder, tie, decoder):
    """A transformers folder edited to config.json's tie_word_embeddings `tie` (None: unset) and a file decoder that
    is the embeddings ("equal"), another matrix ("different") or none ("absent")."""
    config = json.loads((folder / "config.json").read_text())
    config.pop("tie_word_embeddings", None)
    (folder / "config.json").write_text(json.dumps(config if tie is None else {**config, "tie_word_embeddings": tie}))
    state = load_file(folder / "model.safetensors")
    embeddings = state["bert.embeddings.word_embeddings.weight"]
    if decoder != "absent":
        state[DECODER] = embeddings.clone() if decoder == "equal" else embeddings + 0.3 * torch.randn_like(embeddings)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("name", ["BertForPreTraining", "BertForMaskedLM"])
@pytest.mark.parametrize(("tie", "decoder"), [(tie, decoder) for tie in (True, None, False)
                                               for decoder in ("equal", "different", "absent")
                                               if (tie, decoder) != (False, "absent")])  # refused: next test
def test_the_mlm_decoder_tied_or_untied_as_transformers_computes_it(name, tie, decoder, odd_config, tmp_path):
    """transformers unties the decoder when config.json says false, or when the file's decoder differs from the
    embeddings whatever config.json says; untied by config.json, the bias is the decoder's own (zero here: the file
    has none, and its trained cls.predictions.bias goes unused). bertctl computes the same logits, and the folder
    it saves is reloaded by transformers to the same logits, untied (tie_word_embeddings false, the decoder and its
    bias written) exactly when the model is."""
    saved(name, odd_config, tmp_path / "hf")
    with_decoder(tmp_path / "hf", tie, decoder)
    assert max_diff(name, tmp_path / "hf", odd_config) <= TOLERANCE
    untied = tie is False or decoder == "different"
    assert info(tmp_path / "hf")["config"]["tie_word_embeddings"] is not untied
    convert(tmp_path / "hf", tmp_path / "ours")
    assert (DECODER in load_file(tmp_path / "ours" / "model.safetensors")) is untied
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["tie_word_embeddings"] is not untied
    ids, types, mask = batch(odd_config)
    theirs, again = (getattr(transformers, name).from_pretrained(tmp_path / folder, **FP32).eval()
                     for folder in ("hf", "ours"))
    with torch.no_grad():
        theirs, again = (outputs(name, model(input_ids=ids, token_type_ids=types, attention_mask=mask))
                         for model in (theirs, again))
    assert max((a - t).abs().max().item() for t, a in zip(theirs, again, strict=True)) <= TOLERANCE


@pytest.mark.parametrize("tie", [True, False])
def test_a_decoder_transformers_would_draw_at_random_is_refused_in_one_line_for_the_mlm_head_only(tie, odd_config,
                                                                                                 tmp_path):
    """tie_word_embeddings false and no decoder in the file: transformers draws it at random, so no MLM output can be
    computed (fill, evaluate mlm, convert refuse); the encoder is still usable. With true the decoder is the
    embeddings."""
    saved("BertForMaskedLM", odd_config, tmp_path / "hf")
    with_decoder(tmp_path / "hf", tie, "absent")
    if tie:
        assert load_model(tmp_path / "hf").fresh_heads == ()
        return
    with pytest.raises(UsageError, match="sets tie_word_embeddings false but the weights hold no "
                                           "cls.predictions.decoder.weight") as error:
        load_model(tmp_path / "hf")
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="sets tie_word_embeddings false"):
        convert(tmp_path / "hf", tmp_path / "converted")  # it would write a random decoder as if trained
    assert not (tmp_path / "converted").exists()
    model = load_model(tmp_path / "hf", "BertForSequenceClassification", num_labels=3)
    assert model.fresh_heads == ("classifier", "pooler")  # a masked-LM file has no pooler


def test_google_tensorflow_release_cut_short_is_one_line(tmp_path):
    """Google's release layout is read without TensorFlow (tests/test_tf_checkpoint.py); empty files are refused
    in one line naming the file, and a checkpoint without bert_config.json says what to copy."""
    folder = tmp_path / "uncased_L-12_H-768_A-12"
    folder.mkdir()
    (folder / "bert_config.json").write_text(json.dumps({"hidden_size": 768, "vocab_size": 30522}))
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.meta",
                 "vocab.txt"):
        (folder / name).write_bytes(b"")
    with pytest.raises(UsageError, match=r"bert_model\.ckpt\.index: not a TensorFlow checkpoint index") as error:
        read_checkpoint(folder)  # a broken input file, as a broken config.json is: exit 2
    assert "\n" not in str(error.value)
    (folder / "bert_config.json").unlink()
    with pytest.raises(UsageError, match=r"TensorFlow checkpoint \(bert_model\.ckpt\) but no bert_config\.json"):
        read_checkpoint(folder)


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin", "config.json"])
def test_an_empty_file_in_a_model_folder_is_one_line_naming_it(name, odd_config, tmp_path):
    """0 bytes, a download or copy cut short, said `EOFError` (pytorch_model.bin), `header too small` or
    `Expecting value` (exit 1 for the weights); now what it is and what to do, exit 2 as for any broken input."""
    saved("BertModel", odd_config, tmp_path)
    if name == "pytorch_model.bin":
        rewrite_as_bin(tmp_path)
    (tmp_path / name).write_bytes(b"")
    with pytest.raises(UsageError) as error:
        read_checkpoint(tmp_path)
    assert str(error.value) == (f"{tmp_path / name} is empty (0 bytes: a download or copy cut short?); "
                                "re-download or re-save it")


def test_a_truncated_pytorch_model_bin_is_a_usage_error_saying_so(odd_config, tmp_path):
    saved("BertModel", odd_config, tmp_path)
    rewrite_as_bin(tmp_path, legacy_format=True)
    data = (tmp_path / "pytorch_model.bin").read_bytes()
    (tmp_path / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    complete = r"\(is the file complete\? re-download or re-save it\)$"
    with pytest.raises(UsageError, match=rf"pytorch_model\.bin: unexpected EOF, .* {complete}"):
        read_checkpoint(tmp_path)


def test_tf_h5_only_folder_says_how_to_convert(odd_config, tmp_path):
    saved("BertModel", odd_config, tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").rename(tmp_path / "hf" / "tf_model.h5")
    with pytest.raises(UsageError, match="from_tf=True"):
        read_checkpoint(tmp_path / "hf")
    (tmp_path / "hf" / "tf_model.h5").rename(tmp_path / "hf" / "flax_model.msgpack")
    with pytest.raises(UsageError, match=r"only Flax weights \(flax_model\.msgpack\).*from_flax=True"):
        read_checkpoint(tmp_path / "hf")


def test_real_minilm_as_legacy_sharded_fp16_bin(minilm, tmp_path):
    """The real encoder, re-saved the oldest way: fp16, legacy names, position_ids, in bin shards."""
    import shutil

    folder = tmp_path / "minilm"
    shutil.copytree(minilm, folder)
    state = load_file(folder / "model.safetensors")
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"):
             v.half() if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, folder / "model.safetensors")
    write_bin_shards(folder, shards=2)
    reference = transformers.BertModel.from_pretrained(folder, **FP32).eval()
    ours = load_model(folder).eval()
    ids = torch.tensor([[101, 7592, 1010, 2088, 999, 102, 0, 0], [101, 2023, 2003, 1037, 3231, 1012, 2182, 102]])
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask)
        got = ours(ids, None, mask)
    assert (got.hidden_states - expected.last_hidden_state).abs().max().item() <= TOLERANCE
    assert (got.pooled - expected.pooler_output).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize(("key", "value"), [("architectures", 5), ("bertctl", 5), ("problem_type", 5)])
def test_config_json_keys_of_the_wrong_type_are_one_line(key, value, odd_config, tmp_path):
    saved("BertModel", odd_config, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(UsageError, match=f"config.json: {key} must be .*; fix or remove it$"):
        read_checkpoint(tmp_path)
