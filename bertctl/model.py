"""The one BERT encoder (Devlin et al., 2018) and every task head, all in one place.

Shapes: B batch, T tokens, H hidden size, A heads, D = H / A, V vocabulary, C choices, N masked tokens.
Parameter names are our own; bertctl.checkpoint_names maps them to and from transformers' names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from bertctl.config import BertConfig
from bertctl.data.masking import IGNORE_INDEX  # label value the losses skip (unmasked tokens, padding)

_ACTIVATIONS = {  # transformers' ACT2FN names, each computed with the same formula (same rounding) as there
    "gelu": F.gelu,
    "gelu_python": lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_new": lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0)))),
    "gelu_accurate": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3)))),
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "gelu_python_tanh": lambda x: x * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0)))),
    "gelu_fast": lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "gelu_10": lambda x: torch.clip(F.gelu(x), -10, 10),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
    "relu6": F.relu6,
    "leaky_relu": F.leaky_relu,
    "silu": F.silu,
    "swish": F.silu,
    "mish": F.mish,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
    "hardswish": F.hardswish,
    "laplace": lambda x: 0.5 * (1.0 + torch.erf((x - 0.707107).div(0.282095 * math.sqrt(2.0)))),  # mu, sigma: theirs
    "relu2": lambda x: torch.square(F.relu(x)),
    "sqrtsoftplus": lambda x: F.softplus(x).sqrt(),
}


class Embeddings(nn.Module):
    """Token + segment + position embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, positions: Tensor | None = None) -> Tensor:
        """(B, T) ids give (B, T, H); packed (N,) ids with their `positions` in their rows give (N, H)."""
        x = self.word(input_ids) + self.token_type(token_type_ids)  # (B, T, H) or (N, H)
        x = x + (self.position.weight[: input_ids.shape[1]] if positions is None else self.position(positions))
        return self.dropout(self.norm(x))


PACK_MULTIPLE = 16  # packed rows per batch: a multiple of this (see Packing.of)


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded (B, T) batch sit, so the layers can skip its padding: every per-token
    step runs on the packed (N, H) real tokens (and the few rounding rows), attention alone on the (B, T) layout."""

    index: Tensor  # (N,) flat positions b * T + t of the real tokens, in order, then of the padding that rounds N
    real: int  # how many of them are real tokens
    batch: int
    tokens: int

    @classmethod
    def of(cls, attention_mask: Tensor) -> Packing:
        """N rounded up to a multiple of PACK_MULTIPLE with padding positions (while the batch has them): a new
        (N, H) size at every step fragments glibc's heap, and a long CPU run's RSS would keep climbing."""
        flat = attention_mask.flatten().bool()
        real = flat.nonzero().squeeze(1)
        extra = -len(real) % PACK_MULTIPLE  # as many as the padding has
        index = torch.cat([real, (~flat).nonzero().squeeze(1)[:extra]]) if extra else real
        return cls(index, len(real), *attention_mask.shape)

    def scatter(self, x: Tensor) -> Tensor:
        """(N, C) packed rows into a (B, T, C) batch, zeros where no row goes. A rounding row sits at a padding
        position: attention masks it as a key, and only that row reads its output back."""
        padded = x.new_zeros(self.batch * self.tokens, x.shape[-1]).index_copy(0, self.index, x)
        return padded.view(self.batch, self.tokens, -1)

    def unpack(self, x: Tensor) -> Tensor:
        """The layers' (N, H) output as (B, T, H), zeros at all the padding (so no gradient reaches the rounding
        rows); every tensor keeps a rounded shape."""
        padded = self.scatter(x)
        return padded.view(self.batch * self.tokens, -1).index_fill(0, self.index[self.real:], 0).view_as(padded)

    def gather(self, x: Tensor) -> Tensor:
        """The packed rows of a (B, T, C) batch: (N, C)."""
        return x.reshape(self.batch * self.tokens, -1).index_select(0, self.index)


class EncoderLayer(nn.Module):
    """Post-LN Transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x)). Q, K, V share one matmul."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        hidden = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.attention_dropout = cfg.attention_probs_dropout_prob
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(hidden, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.act = _ACTIVATIONS[cfg.hidden_act]
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: Tensor, mask: Tensor | None, packing: Packing | None = None) -> Tensor:
        """x is (B, T, H), or with `packing` the batch's (N, H) packed rows."""
        H = x.shape[-1]
        qkv = self.qkv(x) if packing is None else packing.scatter(self.qkv(x))  # (B, T, 3H)
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, self.num_heads, H // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(  # (B, A, T, D)
            q, k, v, attn_mask=mask, dropout_p=self.attention_dropout if self.training else 0.0
        )
        attn = attn.transpose(1, 2).reshape(B, T, H)
        if packing is not None:
            attn = packing.gather(attn)  # (N, H)
        x = self.attn_norm(x + self.dropout(self.attn_out(attn)))
        return self.ffn_norm(x + self.dropout(self.ffn_out(self.act(self.ffn_in(x)))))


class Bert(nn.Module):
    """The encoder: embeddings, L layers and (optionally) the pooler, a dense + tanh on [CLS]."""

    def __init__(self, cfg: BertConfig, add_pooler: bool = True) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if add_pooler else None
        # A run setting, not the model's (config.json never holds it): keep only each layer's input while
        # training and recompute the layer in the backward pass, ~1/3 more compute for far less activation memory.
        self.gradient_checkpointing = False

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
        skip_padding: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Returns the hidden states (B, T, H) and the pooled [CLS] vector (B, H), or None without a pooler.

        `skip_padding` computes the real tokens of a padded batch alone (what fine-tuning and scoring of the heads
        that read no padded position want), on the CPU: their outputs are the same up to rounding, the padded
        positions' hidden states are zeros, and dropout draws its masks for the packed rows only (another random
        stream). Elsewhere, and under torch.compile, every position is computed as without it.
        """
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None  # none lets SDPA take its fastest kernel; to_device drops an unpadded one while on the host
        if attention_mask is not None and (torch.compiler.is_compiling() or attention_mask.device.type != "cpu"
                                           or not bool(attention_mask.all())):
            mask = attention_mask[:, None, None, :].bool()  # (B, 1, 1, T): True where a key may be attended
        # on the host alone: finding the real tokens on a device would make the host wait for it every forward
        packed = skip_padding and mask is not None and mask.device.type == "cpu" and not torch.compiler.is_compiling()
        if packed:
            x = self._packed(input_ids, token_type_ids, mask, Packing.of(attention_mask))
        else:
            x = self._layers(self.embeddings(input_ids, token_type_ids), mask)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None
        return x, pooled

    def _packed(self, input_ids: Tensor, token_type_ids: Tensor, mask: Tensor, packing: Packing) -> Tensor:
        """The layers on the real tokens alone; (B, T, H) hidden states, zeros at the padding."""
        positions = packing.index % packing.tokens  # (N,) each packed row's position in its row
        x = self.embeddings(input_ids.flatten()[packing.index], token_type_ids.flatten()[packing.index], positions)
        return packing.unpack(self._layers(x, mask, packing))  # (N, H) -> (B, T, H)

    def _layers(self, x: Tensor, mask: Tensor | None, packing: Packing | None = None) -> Tensor:
        """Every encoder layer in turn; with `gradient_checkpointing` while training with gradients, each layer
        keeps only its input and runs again in the backward pass, its RNG state restored so dropout draws the
        masks of the first run (the same losses and gradients)."""
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            if recompute:
                x = checkpoint(layer, x, mask, packing, use_reentrant=False, preserve_rng_state=True)
            else:
                x = layer(x, mask, packing)
        return x


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm, then the decoder plus its own bias. The decoder is the word embeddings
    (tied, the paper's and transformers' default), or with tie_word_embeddings false a (V, H) matrix of its own,
    trained apart from them as transformers trains it."""

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = _ACTIVATIONS[cfg.hidden_act]
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word_embeddings = [word_embeddings]  # a list keeps it out of this module's parameters
        self.decoder = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, hidden: Tensor) -> Tensor:
        decoder = self.word_embeddings[0].weight if self.decoder is None else self.decoder.weight  # (V, H)
        return F.linear(self.norm(self.act(self.dense(hidden))), decoder, self.bias)


def masked_lm_logits(head: MaskedLMHead, hidden: Tensor, labels: Tensor | None,
                     predictions: int | None = None) -> tuple[Tensor, Tensor | None]:
    """Vocabulary logits: (B, T, V) without labels; with labels only at labelled positions, (N, V) and their
    targets (N,). The sparse path gives the same loss as the dense one at ~15% of the decoder's work.

    With `predictions` (P, at least the most labels any row has, e.g. max_predictions_per_seq) the shapes are
    fixed instead: (B*P, V) and (B*P,), unused slots targeting IGNORE_INDEX, so torch.compile sees no
    data-dependent shape.
    """
    if labels is None:
        return head(hidden), None
    selected = labels != IGNORE_INDEX  # (B, T)
    if predictions is None:
        return head(hidden[selected]), labels[selected]
    slots = torch.argsort((~selected).to(torch.int8), dim=1, stable=True)[:, :predictions]  # (B, P)
    gathered = hidden.gather(1, slots[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, P, H)
    return head(gathered).flatten(0, 1), labels.gather(1, slots).flatten()


def masked_lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over masked tokens; zero (not NaN) when a batch has none."""
    counted = (targets != IGNORE_INDEX).sum()
    total = F.cross_entropy(logits.float(), targets, reduction="sum")  # IGNORE_INDEX slots add nothing
    return total / counted.clamp(min=1)


def classification_loss(logits: Tensor, labels: Tensor, regression: bool = False) -> Tensor:
    """Cross-entropy for classes; mean squared error for a regression output, whatever the labels' dtype (as
    transformers: whole-number scores are scores too)."""
    if regression:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


@dataclass
class ModelOutput:
    """What every head returns; fields a head does not produce stay None."""

    loss: Tensor | None = None
    logits: Tensor | None = None  # task logits (classification, tokens, choices) or MLM logits
    mlm_loss: Tensor | None = None
    mlm_targets: Tensor | None = None  # (N,) original ids at the positions of sparse `logits`
    nsp_loss: Tensor | None = None
    nsp_logits: Tensor | None = None
    start_logits: Tensor | None = None
    end_logits: Tensor | None = None
    hidden_states: Tensor | None = None
    pooled: Tensor | None = None


def _classifier(cfg: BertConfig, outputs: int, dropout: float | None) -> tuple[nn.Dropout, nn.Linear]:
    """Dropout (classifier_dropout, else the hidden dropout) and the linear layer of a classification head."""
    return nn.Dropout(cfg.hidden_dropout_prob if dropout is None else dropout), nn.Linear(cfg.hidden_size, outputs)


class BertTaskModel(nn.Module):
    """Base for the heads: owns the encoder, applies BERT's initialisation to everything it holds."""

    head_names: tuple[str, ...] = ()
    uses_pooler = True

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.bert = Bert(cfg, add_pooler=self.uses_pooler)

    def init_weights(self, modules: Iterable[nn.Module] | None = None) -> None:
        """Normal(0, initializer_range) weights, zero biases, LayerNorm 1/0, zero padding embedding; of every module,
        or of `modules` only (the heads a checkpoint lacks)."""
        std = self.config.initializer_range
        for module in self.modules() if modules is None else modules:
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, MaskedLMHead):
                nn.init.zeros_(module.bias)

    def set_gradient_checkpointing(self, on: bool) -> None:
        """Recompute each encoder layer's activations in the backward pass while training: less memory for
        ~1/3 more compute, the same losses and gradients (see `Bert._layers`)."""
        self.bert.gradient_checkpointing = on

    def encode(self, input_ids: Tensor, token_type_ids: Tensor | None, attention_mask: Tensor | None,
               skip_padding: bool = False) -> tuple[Tensor, Tensor | None]:
        return self.bert(input_ids, token_type_ids, attention_mask, skip_padding)


class BertEncoderModel(BertTaskModel):
    """No head: hidden states and pooled output (transformers' BertModel)."""

    def __init__(self, cfg: BertConfig, add_pooler: bool = True) -> None:
        self.uses_pooler = add_pooler
        super().__init__(cfg)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> ModelOutput:
        hidden, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        return ModelOutput(hidden_states=hidden, pooled=pooled)


class BertForPreTraining(BertTaskModel):
    """MLM + next-sentence (or sentence-order) prediction, the paper's pre-training objective."""

    head_names = ("mlm", "nsp")

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__(cfg)
        self.mlm = MaskedLMHead(cfg, self.bert.embeddings.word)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                mlm_labels: Tensor | None = None, next_sentence_label: Tensor | None = None,
                mlm_predictions: int | None = None) -> ModelOutput:
        hidden, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        logits, targets = masked_lm_logits(self.mlm, hidden, mlm_labels, mlm_predictions)
        nsp_logits = self.nsp(pooled)  # (B, 2)
        out = ModelOutput(logits=logits, mlm_targets=targets, nsp_logits=nsp_logits, hidden_states=hidden)
        if targets is not None:
            out.mlm_loss = out.loss = masked_lm_loss(logits, targets)
        if next_sentence_label is not None:
            out.nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label)
            out.loss = out.nsp_loss if out.loss is None else out.loss + out.nsp_loss
        return out


class BertForMaskedLM(BertTaskModel):
    """MLM only (no pooler, as transformers' BertForMaskedLM)."""

    head_names = ("mlm",)
    uses_pooler = False

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__(cfg)
        self.mlm = MaskedLMHead(cfg, self.bert.embeddings.word)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                mlm_labels: Tensor | None = None, mlm_predictions: int | None = None) -> ModelOutput:
        hidden, _ = self.encode(input_ids, token_type_ids, attention_mask)
        logits, targets = masked_lm_logits(self.mlm, hidden, mlm_labels, mlm_predictions)
        out = ModelOutput(logits=logits, mlm_targets=targets, hidden_states=hidden)
        if targets is not None:
            out.mlm_loss = out.loss = masked_lm_loss(logits, targets)
        return out


class BertForSequenceClassification(BertTaskModel):
    """Dropout + linear on the pooled [CLS]; num_labels == 1 means regression (MSE)."""

    head_names = ("sequence_classification",)

    def __init__(self, cfg: BertConfig, num_labels: int = 2, classifier_dropout: float | None = None) -> None:
        super().__init__(cfg)
        self.num_labels = num_labels
        self.dropout, self.classifier = _classifier(cfg, num_labels, classifier_dropout)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, skip_padding: bool = False) -> ModelOutput:
        """`skip_padding`: see `Bert.forward`; the outputs are the same, up to rounding."""
        _, pooled = self.encode(input_ids, token_type_ids, attention_mask, skip_padding)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = classification_loss(logits, labels, regression=self.num_labels == 1) if labels is not None else None
        return ModelOutput(loss=loss, logits=logits, pooled=pooled)


class BertForTokenClassification(BertTaskModel):
    """Dropout + linear on every token (no pooler); labels of -100 are skipped."""

    head_names = ("token_classification",)
    uses_pooler = False

    def __init__(self, cfg: BertConfig, num_labels: int = 2, classifier_dropout: float | None = None) -> None:
        super().__init__(cfg)
        self.num_labels = num_labels
        self.dropout, self.classifier = _classifier(cfg, num_labels, classifier_dropout)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, skip_padding: bool = False) -> ModelOutput:
        """`skip_padding`: see `Bert.forward`; the outputs at real tokens are the same, up to rounding, the loss
        too (labels at padding are -100), and the logits at padding are the classifier's bias."""
        hidden, _ = self.encode(input_ids, token_type_ids, attention_mask, skip_padding)
        logits = self.classifier(self.dropout(hidden))  # (B, T, num_labels)
        loss = classification_loss(logits, labels) if labels is not None else None
        return ModelOutput(loss=loss, logits=logits, hidden_states=hidden)


class BertForQuestionAnswering(BertTaskModel):
    """Start/end span logits from one linear layer over the tokens (no pooler)."""

    head_names = ("question_answering",)
    uses_pooler = False

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__(cfg)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)  # a classifier folder's num_labels must not reach it
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                start_positions: Tensor | None = None, end_positions: Tensor | None = None) -> ModelOutput:
        hidden, _ = self.encode(input_ids, token_type_ids, attention_mask)
        start, end = self.qa_outputs(hidden).split(1, dim=-1)  # (B, T, 1) each
        start, end = start.squeeze(-1), end.squeeze(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            outside = start.shape[1]  # positions past the sequence are ignored, as in the original code
            start_loss = F.cross_entropy(start.float(), start_positions.clamp(0, outside), ignore_index=outside)
            end_loss = F.cross_entropy(end.float(), end_positions.clamp(0, outside), ignore_index=outside)
            loss = (start_loss + end_loss) / 2
        return ModelOutput(loss=loss, start_logits=start, end_logits=end, hidden_states=hidden)


class BertForMultipleChoice(BertTaskModel):
    """One score per (context, choice) pair from the pooled [CLS]; softmax across the C choices."""

    head_names = ("multiple_choice",)

    def __init__(self, cfg: BertConfig, classifier_dropout: float | None = None) -> None:
        super().__init__(cfg)
        self.dropout, self.classifier = _classifier(cfg, 1, classifier_dropout)
        self.init_weights()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, skip_padding: bool = False) -> ModelOutput:
        """`skip_padding`: see `Bert.forward`; the outputs are the same, up to rounding."""
        B, C, T = input_ids.shape

        def flat(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.reshape(B * C, T)

        _, pooled = self.encode(flat(input_ids), flat(token_type_ids), flat(attention_mask), skip_padding)
        logits = self.classifier(self.dropout(pooled)).view(B, C)
        loss = F.cross_entropy(logits.float(), labels) if labels is not None else None
        return ModelOutput(loss=loss, logits=logits, pooled=pooled)


ARCHITECTURES: dict[str, type[BertTaskModel]] = {
    "BertModel": BertEncoderModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForMaskedLM": BertForMaskedLM,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForTokenClassification": BertForTokenClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForMultipleChoice": BertForMultipleChoice,
}


def architecture_name(model: nn.Module) -> str:
    """transformers' class name for one of our models (what config.json's `architectures` holds)."""
    for name, cls in ARCHITECTURES.items():
        if type(model) is cls:
            return name
    raise TypeError(f"{type(model).__name__} is not a bertctl BERT model")
