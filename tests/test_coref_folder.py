"""A fine-tuned coreference folder (`spanbert.tasks.coref.folder`): what is saved loads in eval mode (the model
and the predictor), and a folder saved before the newer settings existed still loads with their old values.
Scoring predicted clusters through the commands is tested in test_coref.py and test_coref_command.py."""

from __future__ import annotations

import json

from test_coref import tiny_model, tiny_run  # noqa: F401 - tiny_run is a fixture


def test_loaders_return_eval_mode(tiny_run, tmp_path):  # noqa: F811
    from spanbert.tasks.coref import CorefPredictor, load_coref_model, save_coref_model
    from spanbert.tokenization import Tokenizer

    model = tiny_model(coref_depth=1)
    model.train()
    save_coref_model(model, tmp_path / "m", Tokenizer.from_dir(tiny_run / "enc"))
    loaded, _ = load_coref_model(tmp_path / "m")
    assert not loaded.training and not any(m.training for m in loaded.modules())
    assert loaded.refine_gate is None
    assert not CorefPredictor.from_pretrained(tmp_path / "m", device="cpu").model.training


def test_models_saved_without_the_newer_settings_still_load(tiny_run, tmp_path):  # noqa: F811
    from spanbert.tasks.coref import load_coref_model, save_coref_model
    from spanbert.tokenization import Tokenizer

    model = tiny_model(use_segment_distance=False)
    save_coref_model(model, tmp_path / "m", Tokenizer.from_dir(tiny_run / "enc"))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for key in ("use_segment_distance", "token_dropout", "max_top_spans", "task_weight_decay", "separate_clipping"):
        del config["spanbert"]["coref"][key]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    loaded, _ = load_coref_model(tmp_path / "m")
    assert loaded.segment_distance_embeddings is None and loaded.config.token_dropout == loaded.config.dropout
