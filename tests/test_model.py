"""Encoder parity with HF BertModel both ways, checkpoint layouts, and the pre-training heads."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from spanbert import Encoder
from spanbert.config import BertConfig, model_config
from spanbert.errors import SpanBertError
from spanbert.model import SBO_FILE, SpanBertForPreTraining, load_checkpoint, save_checkpoint

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
    from spanbert.tasks.common import load_tokenizer_for

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
    from spanbert.model import check_checkpoint

    Encoder(tiny()).save_pretrained(tmp_path)
    assert check_checkpoint(tmp_path) == tiny()
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(SpanBertError, match=r"model.safetensors: found .*expected a safetensors weights file"):
        check_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    with pytest.raises(SpanBertError, match=r"config.json: found no vocab_size, num_hidden_layers"):
        check_checkpoint(tmp_path)
