"""A model family written in a test and registered from it, with no other file edited.

The toy family is one file's worth of code, as `spanbert.modernbert` is: a config of its own (`ToyConfig`,
its sizes under transformers' names), a one-layer encoder of its own (`ToyEncoder`, the members of
`spanbert.families.Family`) and its pre-training model (`ToyForMaskedLM`, the shared masked-LM loss of
`spanbert.model.masked_heads`). Its row states only what is its own: how to build the encoder, its
architecture prefix, and how to plan and build its pre-training model; everything else (WordPiece, the
masked heads' targets and metrics, the plan's cost, the safetensors folder, the strict weight loader) is
the row's default. `register_family` adds it; `spanbert pretrain --family` pre-trains it on a tiny corpus
and `spanbert finetune glue` fine-tunes the export, through the command line in this process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import families
from spanbert.checkpoints import save_folder
from spanbert.cli import main
from spanbert.config import FinetuneHabits
from spanbert.errors import SpanBertError
from spanbert.model import config_size, grow_embedding, masked_heads
from spanbert.tasks.spec import RESULTS_FILE

# ----------------------------------------------------------------------------- the toy family's file

TOY = "toy-one-layer"


@dataclass
class ToyConfig:
    """The toy family's sizes, under transformers' names: the row's defaults (the plan's cost and sizes, the
    positions check) and `config_size` read them."""

    vocab_size: int
    hidden_size: int = 16
    intermediate_size: int = 32
    num_hidden_layers: int = 1  # the encoder has one layer; the field is there for what reads HF names
    max_position_embeddings: int = 64
    pad_token_id: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"model_type": TOY, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ToyConfig:
        return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls)})


class ToyEncoder(nn.Module):
    """Token and position embeddings, then one layer: single-head attention and a feed-forward block,
    each with a residual and a LayerNorm."""

    model_type = TOY
    hidden_size = config_size("hidden_size")
    sentence_size = config_size("hidden_size")
    num_layers = config_size("num_hidden_layers")
    max_positions = config_size("max_position_embeddings")
    vocab_size = config_size("vocab_size")
    ffn_size = config_size("intermediate_size")
    habits = FinetuneHabits()  # the shared heads' defaults

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.tokens = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.positions = nn.Embedding(config.max_position_embeddings, H)
        self.qkv, self.out = nn.Linear(H, 3 * H), nn.Linear(H, H)
        I = config.intermediate_size
        self.ffn = nn.Sequential(nn.Linear(H, I), nn.GELU(), nn.Linear(I, H))
        self.norm1, self.norm2 = nn.LayerNorm(H), nn.LayerNorm(H)
        for table in (self.tokens, self.positions):  # BERT's N(0, 0.02): small logits from the tied decoder
            nn.init.normal_(table.weight, std=0.02)
        self.checkpointing = False

    def layer(self, x: Tensor, real: Tensor) -> Tensor:
        q, k, v = self.qkv(x)[:, None].chunk(3, dim=-1)  # (B, 1, T, H) each: one head
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=real[:, None, None, :])[:, 0]  # (B, T, H)
        h = self.norm1(x + self.out(a))
        return self.norm2(h + self.ffn(h))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> Tensor | tuple[Tensor, ...]:
        T = input_ids.shape[1]
        if T > self.config.max_position_embeddings:
            raise SpanBertError(f"sequence of {T} tokens is longer than {self.config.max_position_embeddings}")
        # (B, T): True at a real token
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        x = self.tokens(input_ids) + self.positions(torch.arange(T, device=input_ids.device))  # (B, T, H)
        if self.checkpointing and self.training:
            h = torch.utils.checkpoint.checkpoint(self.layer, x, real, use_reentrant=False)
        else:
            h = self.layer(x, real)
        keep = real[..., None].to(h.dtype)  # the protocol's padding: zeros
        return (x * keep, h * keep) if output_hidden_states else h * keep

    def sentence(self, hidden: Tensor, attention_mask: Tensor | None = None, input_ids: Tensor | None = None) -> Tensor:
        return hidden[:, 0]  # (B, H): the first token's state

    def frame(self, tokenizer: Any) -> Any:
        return tokenizer  # [CLS] a [SEP] (b [SEP]), the WordPiece vocabulary's own markers

    def config_json(self) -> dict[str, Any]:
        return self.config.to_json()

    def resize_token_embeddings(self, vocab_size: int) -> None:
        if vocab_size > self.tokens.num_embeddings:
            self.tokens = grow_embedding(self.tokens, vocab_size, lambda w: w.normal_(0.0, 0.02))
            self.config.vocab_size = vocab_size

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.checkpointing = enabled


class ToyForMaskedLM(nn.Module):
    """The encoder (``bert``: where the row's default `encoder_keys` finds it) and a decoder tied to its
    token embeddings with a bias of its own; the loss is the shared MLM term (`masked_heads`)."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.bert = ToyEncoder(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                **targets: Tensor | None) -> dict[str, Tensor]:  # fmt: skip
        hidden = self.bert(input_ids, attention_mask)  # (B, T, H)
        emb = self.bert.tokens.weight  # (V, H)
        out: dict[str, Tensor] = {"hidden_states": hidden}
        loss, terms = masked_heads(out, hidden, lambda h: F.linear(h, emb, self.bias), None, emb, **targets)
        if targets.get("mlm_labels") is not None:
            out["loss"], out["loss_terms"] = loss, terms
        return out

    def save_pretrained(self, path: str | Path, tokenizer: Any = None, extra: dict | None = None) -> None:
        config_json = {**self.config.to_json(), "architectures": ["ToyForMaskedLM"], "spanbert": extra or {}}
        save_folder(path, self.state_dict(), config_json, tokenizer=tokenizer)


def toy_config(name: str, *, vocab_size: int, max_seq_length: int, **_: Any) -> ToyConfig:
    if name != "tiny":
        raise SpanBertError(f"--model: found {name!r}, expected tiny (the toy family's one size)")
    return ToyConfig(vocab_size=vocab_size, max_position_embeddings=max(64, max_seq_length))


TOY_FAMILY = families.FamilySpec(
    from_config=lambda raw, pooled, source: ToyEncoder(ToyConfig.from_json(raw)),
    prefix="Toy",
    pretraining=families.Pretraining(
        config=toy_config,
        build=lambda config, tok, **_: ToyForMaskedLM(
            dataclasses.replace(config, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id)
        ),
    ),
)


# ----------------------------------------------------------------------------- the tests

WORDS = "the a movie film plot was very good bad great awful Mary John Paris Berlin saw met in at said".split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 8))) + " ."


@pytest.fixture
def toy():
    families.register_family(TOY, TOY_FAMILY)
    yield TOY
    families.unregister_family(TOY)


def test_a_family_registered_from_a_test_pretrains_and_fine_tunes_through_the_cli(toy, tmp_path, capsys):
    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"  # 24 documents of 4 sentences, a blank line between documents
    corpus.write_text("\n\n".join("\n".join(sentence(rng) for _ in range(4)) for _ in range(24)) + "\n")
    run = tmp_path / "pre"
    assert main(["pretrain", "--family", toy, "--system", "bert-1seq", "--model", "tiny", "--corpus", str(corpus),
                 "--vocab_size", "120", "--max_seq_length", "32", "--per_device_train_batch_size", "4",
                 "--max_steps", "3", "--tokens_per_update", "0", "--gradient_accumulation_steps", "1",
                 "--warmup_steps", "0", "--save_steps", "0", "--num_proc", "0", "--device", "cpu", "--disable_tqdm",
                 "--report_to", "none", "--output_dir", str(run), "--threads", "1"]) == 0  # fmt: skip
    final = run / "final"
    saved = json.loads((final / "config.json").read_text())
    assert saved["model_type"] == toy and saved["architectures"] == ["ToyForMaskedLM"]
    # the row's default export keys, and the inputs pre-training trained (trained_inputs.py)
    assert saved["spanbert"] == {"system": "bert-1seq", "masking": "subword", "pretraining_max_seq_length": 32,
                                 "pretraining_token_types": 1}  # fmt: skip
    trained = json.loads((final / "train_metrics.json").read_text())
    assert trained and all(math.isfinite(v) for v in trained.values() if isinstance(v, float))
    encoder = families.load_encoder(final)  # the row's defaults: safetensors folder, `bert.` keys, strict load
    assert isinstance(encoder, ToyEncoder) and not encoder.training

    glue = tmp_path / "sst2"
    glue.mkdir()
    rows = "".join(f"{sentence(rng)}\t{i % 2}\n" for i in range(24))
    for split in ("train", "dev"):
        (glue / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    ft = tmp_path / "ft"
    task = ["glue", "--task", "SST-2", "--data_dir", str(glue)]
    assert main(["finetune", *task, "--model", str(final), "--output_dir", str(ft), "--max_steps", "2",
                 "--per_device_train_batch_size", "4", "--device", "cpu", "--disable_tqdm", "--report_to", "none",
                 "--save_steps", "0", "--logging_steps", "1000", "--warmup_steps", "0"]) == 0  # fmt: skip
    saved = json.loads((ft / "config.json").read_text())
    assert saved["model_type"] == toy and saved["architectures"] == ["ToyForSequenceClassification"]
    scores = json.loads((ft / RESULTS_FILE).read_text())
    numbers = [v for v in scores.values() if isinstance(v, (int, float))]
    assert numbers and all(math.isfinite(v) for v in numbers)
    capsys.readouterr()
    assert main(["evaluate", *task, "--model", str(ft), "--disable_tqdm"]) == 0  # the task folder, loaded back
    out = capsys.readouterr().out
    evaluated = json.loads(out[out.rfind("\n{") + 1 :] if "\n{" in out else out)
    assert evaluated and all(math.isfinite(v) for v in evaluated.values() if isinstance(v, float))


def test_registering_is_undone_and_refuses_a_name_twice(toy, cli_error):
    with pytest.raises(SpanBertError, match="a family already"):
        families.register_family(toy, TOY_FAMILY)
    with pytest.raises(SpanBertError, match="expected a family that register_family added"):
        families.unregister_family("bert")
    families.unregister_family(toy)
    try:
        assert toy not in families.FAMILIES
        cli_error(["pretrain", "--family", toy, "--output_dir", "never-written"], contains="--family")
    finally:
        families.register_family(toy, TOY_FAMILY)  # for the fixture to remove
