"""Encoder parity with HF BertModel both ways, checkpoint layouts, and the pre-training heads."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from spanbert import Encoder
from spanbert.checkpoint_files import SBO_FILE
from spanbert.checkpoints import load_checkpoint, save_checkpoint
from spanbert.config import BertConfig, model_config
from spanbert.errors import SpanBertError
from spanbert.model import SpanBertForPreTraining

transformers = pytest.importorskip("transformers")

V = 120


def tiny(**kw) -> BertConfig:
    return model_config("tiny", vocab_size=V, **kw)


def hf_model(cfg: BertConfig, cls=None):
    torch.manual_seed(0)
    cls = cls or transformers.BertModel
    return cls(transformers.BertConfig(**cfg.to_hf_dict())).eval()


def batch(padding: bool):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (3, 17), generator=g)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    types[:, 9:] = 1
    if padding:
        mask[1, 11:] = 0
        mask[2, 4:] = 0
        ids[mask == 0] = 0
    return ids, mask, types


@pytest.mark.parametrize("padding", [False, True])
def test_hf_to_spanbert_parity(tmp_path, padding):
    cfg = tiny()
    hf = hf_model(cfg)
    hf.save_pretrained(tmp_path)
    ours = Encoder.from_pretrained(tmp_path).eval()
    ids, mask, types = batch(padding)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        out = ours(ids, attention_mask=mask if padding else None, token_type_ids=types)
    assert out.shape == ref.shape == (3, 17, cfg.hidden_size)
    real = mask.bool()
    assert (out - ref)[real].abs().max() <= 1e-5
    # the pooler is the HF one too
    with torch.no_grad():
        assert (ours.pool(out) - hf.pooler(ref)).abs().max() <= 1e-5


@pytest.mark.parametrize("padding", [False, True])
def test_spanbert_to_hf_parity(tmp_path, padding):
    torch.manual_seed(3)
    ours = Encoder(tiny()).eval()
    ours.save_pretrained(tmp_path)
    hf = transformers.BertModel.from_pretrained(tmp_path).eval()
    ids, mask, types = batch(padding)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        out = ours(ids, attention_mask=mask, token_type_ids=types)
    assert (out - ref)[mask.bool()].abs().max() <= 1e-5
    assert set(hf.state_dict()) >= set(ours.state_dict())


def test_all_ones_mask_equals_no_mask():
    torch.manual_seed(0)
    enc = Encoder(tiny()).eval()
    ids, mask, _ = batch(False)
    with torch.no_grad():
        assert torch.equal(enc(ids, attention_mask=mask), enc(ids))


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    enc = Encoder(tiny()).eval()
    ids = torch.randint(5, V, (1, 8))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 8), torch.zeros(1, 4)], 1).long()
    with torch.no_grad():
        assert torch.allclose(enc(ids), enc(padded, attention_mask=mask)[:, :8], atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("train", [False, True])
def test_ragged_attention_equals_the_masked_grid(monkeypatch, causal, train):
    """On CPU a padded batch attends a sequence at a time (`SelfAttention._ragged`): the same outputs
    and gradients as the masked (B, T, T) grid, for the bidirectional and the causal encoder, in eval
    and in training mode (`spanbert.attention`'s CPU dropout path, every element kept here so that the
    two can be compared)."""
    import spanbert.dropout as dropout
    import spanbert.model as sm

    torch.manual_seed(0)
    enc = Encoder(tiny(is_decoder=causal, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0))
    enc.train(train)
    for layer in enc.encoder.layer:  # the CPU dropout path, as attention dropout > 0 takes it
        layer.attention.self.dropout_p = 0.1 if train else 0.0
    monkeypatch.setattr(dropout, "_drop_threshold", lambda p: 0)  # every uniform keeps its element, on every path
    lengths = [9, 3, 0, 6]  # an empty row too
    ids = torch.randint(5, V, (4, 9))
    mask = (torch.arange(9)[None] < torch.tensor(lengths)[:, None]).long()
    outs, grads = [], []
    monkeypatch.setattr(sm, "RAGGED_MIN_WORK", 0)
    for saving in (0.0, 1.0):  # 0: never ragged (the grid); 1: always
        monkeypatch.setattr(sm, "RAGGED_SAVING", saving)
        enc.zero_grad()
        out = enc(ids * mask, attention_mask=mask)
        (out * torch.arange(out.numel()).view_as(out).sin()).sum().backward()
        outs.append(out.detach())
        grads.append({n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None})
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], atol=1e-5), n


def test_ragged_attention_is_chosen_only_where_it_saves():
    from spanbert.model import Unpad

    T = 200
    mostly_full = torch.ones(4, T, dtype=torch.long)
    mostly_full[0, T - 10 :] = 0  # sum(L^2) = 190^2 + 3 * 200^2: 99% of the grid
    assert not Unpad(mostly_full, 768).ragged
    uneven = (torch.arange(T)[None] < torch.tensor([T, 30, 40, 50])[:, None]).long()  # 28% of the grid
    assert Unpad(uneven, 768).ragged and Unpad(uneven, 768).lengths == [T, 30, 40, 50]
    # the same shape in a narrow model saves too little to pay for the loop: (4 T^2 - sum L^2) 8 < 4e6
    assert not Unpad(uneven, 8).ragged
    assert Unpad(uneven.float(), 768).lengths == [T, 30, 40, 50]  # a float mask, as HF users pass


def test_ragged_attention_of_a_batch_of_padding_only(monkeypatch):
    import spanbert.model as sm

    monkeypatch.setattr(sm, "RAGGED_MIN_WORK", 0)
    enc = Encoder(tiny()).eval()
    mask = torch.zeros(2, 5, dtype=torch.long)
    with torch.no_grad():
        out = enc(torch.zeros(2, 5, dtype=torch.long), attention_mask=mask)
    assert torch.equal(out, torch.zeros(2, 5, enc.config.hidden_size))


def test_official_spanbert_layout(tmp_path):
    """The SpanBERT release: pytorch_model.bin, keys under `bert.`, no pooler, no heads, no vocab."""
    cfg = tiny()
    hf = hf_model(cfg)
    state = {f"bert.{k}": v for k, v in hf.state_dict().items() if not k.startswith("pooler.")}
    # old pytorch-pretrained-bert naming of LayerNorm parameters
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in state.items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    release_cfg = {k: v for k, v in cfg.to_hf_dict().items() if k not in ("model_type", "pad_token_id", "layer_norm_eps")}
    (tmp_path / "config.json").write_text(json.dumps(release_cfg))
    enc = Encoder.from_pretrained(tmp_path).eval()
    ids, _, _ = batch(False)
    with torch.no_grad():
        assert (enc(ids) - hf(ids).last_hidden_state).abs().max() <= 1e-5
    # it has no vocabulary: the error says which tokenizer to use
    from spanbert.tasks.task_folders import load_tokenizer_for

    with pytest.raises(SpanBertError, match="bert-base-cased"):
        load_tokenizer_for(tmp_path)


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_pickle_with_objects_is_refused(tmp_path):
    state = {"bert.embeddings.word_embeddings.weight": torch.zeros(2, 2), "payload": _Evil()}
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump(state, f)
    (tmp_path / "config.json").write_text(json.dumps(tiny().to_hf_dict()))
    with pytest.raises(SpanBertError, match="refused to load"):
        load_checkpoint(tmp_path)


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(SpanBertError, match="not found"):
        Encoder.from_pretrained(tmp_path / "nope")
    with pytest.raises(SpanBertError, match="no config.json"):
        Encoder.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(tiny().to_hf_dict()))
    with pytest.raises(SpanBertError, match="no weights"):
        Encoder.from_pretrained(tmp_path)


def test_shape_mismatch_is_reported(tmp_path):
    Encoder(tiny()).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["vocab_size"] = V + 1
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpanBertError, match="word_embeddings"):
        Encoder.from_pretrained(tmp_path)


def test_save_checkpoint_leaves_other_files(tmp_path):
    (tmp_path / "checkpoint-5").mkdir()
    save_checkpoint(tmp_path, Encoder(tiny()).state_dict(), tiny().to_hf_dict())
    assert (tmp_path / "checkpoint-5").exists() and (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob(".*partial")) and not list(tmp_path.glob(".*.tmp"))


# ---------------------------------------------------------------------------------------------
# heads


def pretrain_batch(T: int = 16, B: int = 2, nsp: bool = False):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(5, V, (B, T), generator=g)
    # one masked span per sequence at positions 3..5 (flat indices into B*T)
    pos = torch.tensor([b * T + t for b in range(B) for t in (3, 4, 5)])
    labels = ids.view(-1)[pos].clone()
    ids.view(-1)[pos] = 4
    left = torch.tensor([b * T + 2 for b in range(B) for _ in range(3)])
    right = torch.tensor([b * T + 6 for b in range(B) for _ in range(3)])
    rel = torch.tensor([0, 1, 2] * B)
    out = dict(
        input_ids=ids,
        mlm_positions=pos,
        mlm_labels=labels,
        sbo_positions=pos,
        sbo_labels=labels,
        sbo_left=left,
        sbo_right=right,
        sbo_rel=rel,
    )
    if nsp:
        out["next_sentence_label"] = torch.tensor([0, 1][:B])
    return out


@pytest.mark.parametrize("sbo,nsp", [(True, False), (False, True), (False, False), (True, True)])
def test_every_parameter_gets_a_gradient(sbo, nsp):
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny(), sbo=sbo, nsp=nsp)
    out = model(**pretrain_batch(nsp=nsp))
    out["loss"].backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    # token_type row 1 is only touched by NSP pairs, padding row of the word embeddings never
    assert missing == [], missing
    expected = {"mlm_loss"} | ({"sbo_loss"} if sbo else set()) | ({"nsp_loss"} if nsp else set())
    assert expected <= set(out)
    total = sum(out[k] for k in expected)
    assert torch.allclose(out["loss"], total)


def test_sbo_depends_only_on_boundaries_and_position():
    """§3.2: y_i is a function of x_{s-1}, x_{e+1} and p_{i-s+1} only."""
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny()).eval()
    head, emb = model.cls.span_predictions, model.bert.embeddings.word_embeddings.weight
    hidden = torch.randn(2 * 16, 64)
    b = pretrain_batch()
    ref = head(hidden[b["sbo_left"]], hidden[b["sbo_right"]], b["sbo_rel"], emb)
    perturbed = hidden.clone()
    keep = torch.zeros(32, dtype=torch.bool)
    keep[b["sbo_left"]] = True
    keep[b["sbo_right"]] = True
    perturbed[~keep] += 10 * torch.randn(int((~keep).sum()), 64)
    out = head(perturbed[b["sbo_left"]], perturbed[b["sbo_right"]], b["sbo_rel"], emb)
    assert torch.equal(ref, out)
    # ...and it does change with a boundary state or the relative position
    moved = hidden.clone()
    moved[b["sbo_left"][0]] += 1.0
    assert not torch.allclose(head(moved[b["sbo_left"]], moved[b["sbo_right"]], b["sbo_rel"], emb)[0], ref[0])
    assert not torch.allclose(head(hidden[b["sbo_left"]], hidden[b["sbo_right"]], b["sbo_rel"].flip(0), emb)[0], ref[0])


def test_sbo_position_embedding_is_200d_and_decoder_tied():
    model = SpanBertForPreTraining(model_config("tiny", vocab_size=V))
    head = model.cls.span_predictions
    assert head.position_embeddings.embedding_dim == 200
    assert head.dense1.in_features == 2 * 64 + 200
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder.weight" in n for n in names)  # both heads use the input embeddings


def test_mlm_only_at_masked_positions():
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny()).eval()
    b = pretrain_batch()
    out = model(**b)
    assert out["mlm_logits"].shape == (len(b["mlm_positions"]), V)


def test_exported_model_loads_in_transformers(tmp_path):
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny(), sbo=True, nsp=False).eval()
    # give the MLM bias non-trivial values so the test can tell whether it was loaded
    with torch.no_grad():
        model.cls.predictions.bias.normal_()
    model.save_pretrained(tmp_path)
    assert (tmp_path / SBO_FILE).exists()
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    b = pretrain_batch()
    with torch.no_grad():
        ours = model(**b)["mlm_logits"]
        ref = hf(input_ids=b["input_ids"]).logits.view(-1, V)[b["mlm_positions"]]
    assert (ours - ref).abs().max() <= 1e-4
    # and our loader restores every head, the SBO one included (a passed width defers to the saved one)
    again = SpanBertForPreTraining.from_pretrained(tmp_path, sbo_position_dim=200).eval()
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k


def test_nsp_model_loads_in_bert_for_pretraining(tmp_path):
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny(), sbo=False, nsp=True).eval()
    model.save_pretrained(tmp_path)
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    b = pretrain_batch(nsp=True)
    with torch.no_grad():
        ours = model(**b)
        ref = hf(input_ids=b["input_ids"])
    assert (ours["nsp_logits"] - ref.seq_relationship_logits).abs().max() <= 1e-5


def test_init_from_hf_bert_gets_fresh_sbo(tmp_path):
    cfg = tiny()
    hf = hf_model(cfg, transformers.BertForMaskedLM)
    hf.save_pretrained(tmp_path)
    model = SpanBertForPreTraining.from_pretrained(tmp_path, sbo=True).eval()
    b = pretrain_batch()
    with torch.no_grad():
        ref = hf(input_ids=b["input_ids"]).logits.view(-1, V)[b["mlm_positions"]]
        assert (model(**b)["mlm_logits"] - ref).abs().max() <= 1e-4
    assert model.cls.span_predictions is not None


def test_gradient_checkpointing_same_gradients():
    torch.manual_seed(0)
    model = SpanBertForPreTraining(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    b = pretrain_batch()
    model(**b)["loss"].backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.bert.set_gradient_checkpointing(True)
    model(**b)["loss"].backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, ref[n], atol=1e-6), n


def test_loaders_return_eval_mode(tmp_path):
    """Contract 5, as transformers: a loaded model predicts deterministically (dropout off) until the
    trainer calls ``model.train()``."""
    torch.manual_seed(0)
    SpanBertForPreTraining(tiny(hidden_dropout_prob=0.5), sbo=True, nsp=False).save_pretrained(tmp_path)
    ids, mask, types = batch(padding=True)
    enc = Encoder.from_pretrained(tmp_path)
    model = SpanBertForPreTraining.from_pretrained(tmp_path)
    assert not enc.training and not any(m.training for m in model.modules())
    with torch.no_grad():
        assert torch.equal(enc(ids, mask, types), enc(ids, mask, types))
        assert torch.equal(model.bert(ids, mask, types), model.bert(ids, mask, types))
        model.train()  # what `trainer.train` does: dropout is back on
        assert not torch.equal(model.bert(ids, mask, types), model.bert(ids, mask, types))


def test_check_checkpoint_reads_no_tensors_and_names_files(tmp_path):
    from spanbert.checkpoints import check_checkpoint

    Encoder(tiny()).save_pretrained(tmp_path)
    assert check_checkpoint(tmp_path) == tiny()
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(SpanBertError, match=r"model.safetensors: found .*expected a safetensors weights file"):
        check_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    with pytest.raises(SpanBertError, match=r"config.json: found no vocab_size, num_hidden_layers"):
        check_checkpoint(tmp_path)


# ---------------------------------------------------------------------------------------------
# checkpoint layouts users actually have (docs/architecture.md, "Checkpoint layouts")


def _google_config(cfg: BertConfig) -> dict:
    """The keys of Google's bert_config.json (no model_type, pad_token_id, layer_norm_eps)."""
    keep = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size", "initializer_range",
            "intermediate_size", "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
            "type_vocab_size", "vocab_size")
    return {k: v for k, v in cfg.to_hf_dict().items() if k in keep}


def _gamma_beta(state: dict) -> dict:
    return {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
            for k, v in state.items()}


def test_google_bert_config_json_layout(tmp_path):
    """Google's release converted to PyTorch: bert_config.json + pytorch_model.bin of BertForPreTraining
    (gamma/beta names, pooler and NSP head), vocab.txt; no config.json."""
    from spanbert.checkpoints import check_checkpoint, config_path
    from spanbert.tasks.task_folders import load_encoder

    cfg = tiny()
    hf = hf_model(cfg, transformers.BertForPreTraining)
    torch.save(_gamma_beta(hf.state_dict()), tmp_path / "pytorch_model.bin")
    (tmp_path / "bert_config.json").write_text(json.dumps(_google_config(cfg)))
    assert config_path(tmp_path) == tmp_path / "bert_config.json"
    assert check_checkpoint(tmp_path) == cfg
    config_json, state = load_checkpoint(tmp_path)
    assert config_json["hidden_size"] == cfg.hidden_size and "bert.embeddings.LayerNorm.weight" in state
    ids, mask, types = batch(True)
    with torch.no_grad():
        ref = hf.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
        for enc in (Encoder.from_pretrained(tmp_path), load_encoder(tmp_path, add_pooling_layer=True)):
            out = enc(ids, mask, types)
            assert (out - ref.last_hidden_state)[mask.bool()].abs().max() <= 1e-5
            assert (enc.pool(out) - ref.pooler_output).abs().max() <= 1e-5
        # the pre-training model takes its NSP head too
        model = SpanBertForPreTraining.from_pretrained(tmp_path)
        assert model.cls.span_predictions is None and model.cls.seq_relationship is not None
        assert (model(ids, mask, types)["nsp_logits"] - hf(ids, mask, types).seq_relationship_logits).abs().max() <= 1e-5
    # a config.json beside it wins (HF's name first, as the released fine-tuning code)
    (tmp_path / "config.json").write_text(json.dumps([1]))
    with pytest.raises(SpanBertError, match=r"config.json: found a JSON array"):
        Encoder.from_pretrained(tmp_path)
    # a bad bert_config.json is named in the error
    (tmp_path / "config.json").unlink()
    (tmp_path / "bert_config.json").write_text('{"hidden_size": 64}')
    with pytest.raises(SpanBertError, match=r"bert_config.json: found no vocab_size"):
        Encoder.from_pretrained(tmp_path)


def test_tensorflow_checkpoint_is_refused_with_the_conversion_command(tmp_path):
    (tmp_path / "bert_config.json").write_text(json.dumps(_google_config(tiny())))
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.meta", "bert_model.ckpt.data-00000-of-00001"):
        (tmp_path / name).write_bytes(b"\x00")
    from spanbert.checkpoints import check_checkpoint

    for load in (Encoder.from_pretrained, load_checkpoint, check_checkpoint, SpanBertForPreTraining.from_pretrained):
        with pytest.raises(SpanBertError, match=r"TensorFlow checkpoint files .*transformers-cli convert --model_type bert") as e:
            load(tmp_path)
        assert str(tmp_path / "bert_model.ckpt") in str(e.value) and "bert_config.json" in str(e.value)


def test_tensorflow_checkpoint_cli_error(tmp_path, cli_error):
    m = tmp_path / "google"
    m.mkdir()
    (m / "bert_config.json").write_text(json.dumps(_google_config(tiny())))
    (m / "bert_model.ckpt.index").write_bytes(b"\x00")
    (m / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nAlice\n")
    cli_error(["fill", "--model", m, "--text", "Alice [MASK]"], names=m, contains="does not read TensorFlow", out=m)


# A fairseq-era SpanBERT checkpoint (facebookresearch/SpanBERT pretraining/fairseq/models/pair_bert.py,
# trained with --no-nsp --max-pair-targets 15 --pair-positional-embedding-size 200): every key under
# `decoder.`, LayerNorm gamma/beta, the span head `cls.pair_target_predictions`, tied decoders saved too.
FAIRSEQ_TARGETS = 15


def fairseq_state(cfg: BertConfig, seed: int = 3) -> tuple[dict, dict]:
    """(fairseq state dict, the span head's source tensors) with random weights, LayerNorms included."""
    hf = hf_model(cfg, transformers.BertForMaskedLM)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "LayerNorm" in n:  # not the identity: a swapped gamma/beta would show
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g) if n.endswith("weight") else 0.1 * torch.randn(p.shape, generator=g))
    H, P = cfg.hidden_size, 200
    head = {
        "position_embeddings.weight": torch.randn(FAIRSEQ_TARGETS, P, generator=g),
        "mlp_layer_norm.linear1.weight": 0.05 * torch.randn(H, 2 * H + P, generator=g),
        "mlp_layer_norm.linear1.bias": 0.1 * torch.randn(H, generator=g),
        "mlp_layer_norm.layer_norm1.gamma": 1 + 0.1 * torch.randn(H, generator=g),
        "mlp_layer_norm.layer_norm1.beta": 0.1 * torch.randn(H, generator=g),
        "mlp_layer_norm.linear2.weight": 0.05 * torch.randn(H, H, generator=g),
        "mlp_layer_norm.linear2.bias": 0.1 * torch.randn(H, generator=g),
        "mlp_layer_norm.layer_norm2.gamma": 1 + 0.1 * torch.randn(H, generator=g),
        "mlp_layer_norm.layer_norm2.beta": 0.1 * torch.randn(H, generator=g),
        "bias": 0.1 * torch.randn(cfg.vocab_size, generator=g),
    }
    state = {f"decoder.{k}": v for k, v in _gamma_beta(hf.state_dict()).items()}
    state["decoder.cls.predictions.decoder.weight"] = hf.bert.embeddings.word_embeddings.weight.detach()
    state.update({f"decoder.cls.pair_target_predictions.{k}": v for k, v in head.items()})
    state["decoder.cls.pair_target_predictions.decoder.weight"] = hf.bert.embeddings.word_embeddings.weight.detach()
    return state, {"hf": hf, **head}


def write_fairseq(path, cfg: BertConfig, seed: int = 3) -> dict:
    path.mkdir(parents=True, exist_ok=True)
    state, src = fairseq_state(cfg, seed)
    torch.save({"model": state}, path / "pytorch_model.bin")  # fairseq's {"model": ...} wrapper
    (path / "bert_config.json").write_text(json.dumps({**_google_config(cfg), "clamp_attention": True}))
    return src


def sbo_by_hand(src: dict, hidden: torch.Tensor, left: torch.Tensor, right: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """pair_bert.py's BertPairTargetPredictionHead on the source tensors: (M,) -> (M, V) logits."""
    import torch.nn.functional as F

    h0 = torch.cat([hidden[left], hidden[right], src["position_embeddings.weight"][rel]], -1)
    h1 = F.gelu(h0 @ src["mlp_layer_norm.linear1.weight"].T + src["mlp_layer_norm.linear1.bias"])
    h1 = F.layer_norm(h1, h1.shape[-1:], src["mlp_layer_norm.layer_norm1.gamma"], src["mlp_layer_norm.layer_norm1.beta"], 1e-12)
    h2 = F.gelu(h1 @ src["mlp_layer_norm.linear2.weight"].T + src["mlp_layer_norm.linear2.bias"])
    h2 = F.layer_norm(h2, h2.shape[-1:], src["mlp_layer_norm.layer_norm2.gamma"], src["mlp_layer_norm.layer_norm2.beta"], 1e-12)
    return h2 @ src["hf"].bert.embeddings.word_embeddings.weight.T + src["bias"]


def test_fairseq_spanbert_layout(tmp_path, capsys):
    cfg = tiny()
    src = write_fairseq(tmp_path, cfg)
    hf = src["hf"]
    config_json, state = load_checkpoint(tmp_path)
    assert not any(k.startswith("decoder.") or "pair_target" in k for k in state)
    assert state["cls.span_predictions.LayerNorm1.weight"] is not None
    ids, mask, types = batch(True)
    with torch.no_grad():
        ref = hf.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        enc = Encoder.from_pretrained(tmp_path)
        assert (enc(ids, mask, types) - ref)[mask.bool()].abs().max() <= 1e-5
    capsys.readouterr()
    torch.manual_seed(0)
    model = SpanBertForPreTraining.from_pretrained(tmp_path)
    err = capsys.readouterr().err
    assert model.cls.span_predictions is not None and model.cls.seq_relationship is None  # from the weights
    assert f"position table has {FAIRSEQ_TARGETS} rows, this model {cfg.max_position_embeddings}" in err
    assert f"rows 0-{FAIRSEQ_TARGETS - 1} loaded, rows {FAIRSEQ_TARGETS}-{cfg.max_position_embeddings - 1} keep" in err
    assert "ignored" not in err  # everything else has its place (tied decoders are the embeddings)
    table = model.cls.span_predictions.position_embeddings.weight
    assert torch.equal(table[:FAIRSEQ_TARGETS], src["position_embeddings.weight"])
    assert table[FAIRSEQ_TARGETS:].std() < 0.05  # initialised N(0, 0.02), not copied from anywhere
    # SBO logits equal pair_bert's head computed by hand, spans up to the 15th position
    b = pretrain_batch(T=17, B=3)
    b["input_ids"] = ids
    M = 6
    b["sbo_positions"] = torch.tensor([2, 3, 17 + 1, 17 + 16, 34 + 5, 34 + 6])
    b["sbo_left"] = torch.tensor([1, 1, 17 + 0, 17 + 0, 34 + 4, 34 + 4])
    b["sbo_right"] = torch.tensor([4, 4, 17 + 16, 17 + 16, 34 + 7, 34 + 7])
    b["sbo_rel"] = torch.tensor([0, 1, 0, FAIRSEQ_TARGETS - 1, 0, 1])
    b["sbo_labels"] = torch.zeros(M, dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, token_type_ids=types, mlm_positions=b["mlm_positions"], mlm_labels=b["mlm_labels"],
                    sbo_positions=b["sbo_positions"], sbo_labels=b["sbo_labels"], sbo_left=b["sbo_left"],
                    sbo_right=b["sbo_right"], sbo_rel=b["sbo_rel"])
        hidden = hf.bert(input_ids=ids, token_type_ids=types).last_hidden_state.reshape(-1, cfg.hidden_size)
        want = sbo_by_hand(src, hidden, b["sbo_left"], b["sbo_right"], b["sbo_rel"])
        assert (out["sbo_logits"] - want).abs().max() <= 1e-4
        mlm = hf(input_ids=ids, token_type_ids=types).logits.reshape(-1, V)[b["mlm_positions"]]
        assert (out["mlm_logits"] - mlm).abs().max() <= 1e-4


def test_fairseq_unmapped_weights_are_reported(tmp_path, capsys):
    src = write_fairseq(tmp_path, tiny())
    ck = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    ck["model"]["decoder.cls.pair_target_predictions.extra_gate.weight"] = torch.zeros(2)
    ck["model"]["decoder.version"] = torch.zeros(1)
    torch.save(ck, tmp_path / "pytorch_model.bin")
    capsys.readouterr()
    model = SpanBertForPreTraining.from_pretrained(tmp_path)
    err = capsys.readouterr().err
    assert "ignored 2 weight(s)" in err and "cls.span_predictions.extra_gate.weight" in err and "version" in err
    assert torch.equal(model.cls.span_predictions.dense1.weight, src["mlp_layer_norm.linear1.weight"])


def test_fairseq_training_checkpoint_says_how_to_extract(tmp_path):
    import argparse

    write_fairseq(tmp_path, tiny())
    ck = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    torch.save({"args": argparse.Namespace(arch="cased_bert_pair"), **ck}, tmp_path / "pytorch_model.bin")
    with pytest.raises(SpanBertError, match=r"pytorch_model.bin: refused to load.*fairseq training checkpoint.*\[.model.\]"):
        Encoder.from_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").rename(tmp_path / "checkpoint_best.pt")
    with pytest.raises(SpanBertError, match=r"no weights .*checkpoint_best.pt"):
        Encoder.from_pretrained(tmp_path)


def _word_vocab(path, size: int) -> list[str]:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    return words


def test_fill_sbo_from_fairseq_checkpoint(tmp_path, capsys):
    """`spanbert fill --head sbo` on the fairseq layout predicts what pair_bert's head says."""
    from spanbert.cli import main

    cfg = tiny()
    src = write_fairseq(tmp_path, cfg)
    words = _word_vocab(tmp_path, V)
    capsys.readouterr()
    assert main(["fill", "--model", str(tmp_path), "--text", "w1 w2 {MASK*3} w3 w4", "--head", "sbo", "--json"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert "rows 0-14 loaded" in out.err
    ids = torch.tensor([[2, words.index("w1"), words.index("w2"), 4, 4, 4, words.index("w3"), words.index("w4"), 3]])
    with torch.no_grad():
        hidden = src["hf"].bert(input_ids=ids).last_hidden_state[0]
        logits = sbo_by_hand(src, hidden, torch.tensor([2, 2, 2]), torch.tensor([6, 6, 6]), torch.tensor([0, 1, 2]))
    logits[:, :5] = -float("inf")  # fill never proposes special tokens
    assert [p["position"] for p in result["predictions"]] == [3, 4, 5]
    assert [p["candidates"][0][0] for p in result["predictions"]] == [words[i] for i in logits.argmax(-1).tolist()]


def test_pretrain_init_from_fairseq_checkpoint(tmp_path):
    """Continued pre-training starts from the fairseq span head (the 15 trained rows), not a fresh one."""
    from spanbert.preprocess import preprocess
    from spanbert.pretrain import pretrain
    from spanbert.pretrain_config import PretrainConfig
    from spanbert.tokenization import train_tokenizer
    from spanbert.training_args import TrainingArguments

    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join(" ".join(f"word{(7 * i + j) % 23}" for j in range(40)) + "." for i in range(12)) + "\n")
    tok = train_tokenizer([text], vocab_size=100, output_dir=tmp_path / "tok", show_progress=False)
    pre = preprocess([text], tok, tmp_path / "pre", progress=False)
    cfg = model_config("tiny", vocab_size=tok.vocab_size)
    src = write_fairseq(tmp_path / "fairseq", cfg)
    tok.save(tmp_path / "fairseq")
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2,
                             learning_rate=1e-6, disable_tqdm=True, report_to="none", save_steps=0)
    final = pretrain(PretrainConfig(corpus=str(pre), init_from=str(tmp_path / "fairseq"), max_seq_length=48), args).model_dir
    model = SpanBertForPreTraining.from_pretrained(final)
    table = model.cls.span_predictions.position_embeddings.weight
    assert torch.allclose(table[:FAIRSEQ_TARGETS], src["position_embeddings.weight"], atol=1e-3)
    assert torch.allclose(model.cls.span_predictions.dense2.weight, src["mlp_layer_norm.linear2.weight"], atol=1e-3)
    assert torch.allclose(model.bert.embeddings.word_embeddings.weight,
                          src["hf"].bert.embeddings.word_embeddings.weight, atol=1e-3)


def test_transformers_range_is_declared_and_holds_the_installed_version():
    """pyproject declares the transformers range the interop tests run on (issue 23 item 2): bounded above,
    the same in the hf and test extras, and holding the version these tests just used."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    specs = {str(r.specifier) for r in map(Requirement, extras["hf"] + extras["test"]) if r.name == "transformers"}
    assert len(specs) == 1, specs
    spec = Requirement(f"transformers{specs.pop()}").specifier
    assert any(s.operator == "<" for s in spec), f"transformers{spec}: expected an upper bound"
    assert spec.contains(transformers.__version__), f"installed transformers {transformers.__version__} is outside {spec}"
