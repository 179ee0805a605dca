"""The biLSTM-CRF tagger (`spanbert.tasks.crf_tagger`) on a two-tower model: word labels from first sub-tokens,
the frozen stacking (only the scalar mix and the head train) and the fine-tuned one (the LM at its own rate),
Viterbi tags and a loss per sequence at evaluation, early stopping on the dev loss. NER end to end with it is
tested in test_cloze_finetune.py."""

from __future__ import annotations

import torch
from test_cloze_finetune import _ner_batch, tiny_lm
from torch import nn

from spanbert.cloze import TwoTowerEncoder
from spanbert.tasks import crf_tagger as CT
from spanbert.tasks.layers import ScalarMix


def test_ner_collator_takes_word_labels_from_first_sub_tokens():
    cfg = tiny_lm().config
    batch = _ner_batch(cfg)
    assert batch["labels"].tolist() == [[1, 2], [0, -100]]
    assert batch["word_mask"].tolist() == [[1, 1], [1, 0]] and batch["first_token"].tolist() == [[1, 3], [1, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0]]


def test_ner_frozen_mode_trains_only_the_mix_and_head():
    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, stacking="frozen", projection_dim=8, lstm_hidden_size=6).train()
    assert not lm.training and all(not p.requires_grad for p in lm.parameters())
    assert model.scalar_mix.weights.numel() == lm.config.num_layers + 2  # embeddings, blocks, output
    out = model(**_ner_batch(lm.config))
    out["loss"].backward()
    assert all(p.grad is None for p in lm.parameters())
    assert model.scalar_mix.weights.grad.abs().sum() > 0 and model.scalar_mix.gamma.grad is not None
    # the mix is softmax(w)-weighted times gamma: equal weights at the start
    layers = [torch.full((1, 2, 3), float(i)) for i in range(4)]
    assert torch.allclose(ScalarMix(4)(layers), torch.full((1, 2, 3), 1.5))


def test_ner_finetune_mode_trains_the_lm_at_its_own_rate():
    from spanbert.optim import param_groups

    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, stacking="finetune", projection_dim=8, lstm_hidden_size=6).train()
    assert not hasattr(model, "scalar_mix") and lm.training
    assert {m.p for m in lm.modules() if hasattr(m, "p")} == {0.3}  # §4: 0.3 within the LM too
    model(**_ner_batch(lm.config))["loss"].backward()
    assert sum(float(p.grad.abs().sum()) for p in lm.parameters() if p.grad is not None) > 0
    groups = param_groups(model, 1e-3, 0.0, {"bert.": 1e-5})
    lm_ids = {id(p) for p in lm.parameters()}
    for g in groups:
        assert all((id(p) in lm_ids) == (g["lr"] == 1e-5) for p in g["params"])


def test_ner_eval_outputs_viterbi_tags_and_per_sequence_loss():
    lm = tiny_lm()
    model = CT.CrfTagger(TwoTowerEncoder(lm), 3, projection_dim=8, lstm_hidden_size=6).eval()
    batch = _ner_batch(lm.config)
    out = model(**batch)
    assert out["tags"][1, 1] == -1 and (out["tags"][0] >= 0).all()  # -1 at the padded word
    assert out["nll"].shape == (2,) and torch.isclose(out["nll"].mean(), out["loss"])
    assert torch.equal(out["tags"], model.crf.decode(out["logits"], batch["word_mask"].bool()))


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x, labels):
        return {"loss": ((self.w * x - labels) ** 2).mean()}


def test_early_stopping_keeps_the_epoch_before_the_dev_loss_rose(tmp_path):
    from spanbert.training_args import TrainingArguments

    data = [{"x": torch.tensor(1.0), "labels": torch.tensor(1.0)} for _ in range(4)]
    dev_losses = iter([3.0, 2.0, 2.5, 1.0])  # epoch 3 is worse than 2: stop there, keep epoch 2
    weights = {}

    def eval_fn(m, step):
        weights[step] = float(m.w)
        return {"loss": next(dev_losses)}

    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, num_train_epochs=4, learning_rate=0.1,
        device="cpu", report_to="none", disable_tqdm=True, save_steps=0,
    )  # fmt: skip
    model = _Toy()
    result = CT.train_with_early_stopping(model, data, args, lambda b: {k: torch.stack([x[k] for x in b]) for k in b[0]},
                                         eval_fn)  # fmt: skip
    assert sorted(weights) == [2, 4, 6] and result.global_step == 6 and result.best_step == 4
    assert float(model.w) == weights[4] != weights[6]
