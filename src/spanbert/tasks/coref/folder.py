"""A fine-tuned coreference folder: its architecture name, saving, checking and loading it, and scoring
predicted clusters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spanbert import families
from spanbert.errors import SpanBertError
from spanbert.metrics.coref import evaluate_documents
from spanbert.tasks.coref.data import CorefDocument, Span
from spanbert.tasks.coref.model import CorefConfig, CorefModel
from spanbert.tasks.task_folders import load_finetuned, save_finetuned

# =============================================================================================
# Saving, loading, fine-tuning

ARCHITECTURE = "SpanBertForCoreference"
"""The BERT family's coreference model; another family's is its prefix + ``ForCoreference``."""
NEEDS = "a coreference model (spanbert finetune coref)"


_BERT_ARCHITECTURE = "BertForCoreference"
"""What `families.architecture` calls a BERT encoder's coreference model: such folders are written, as they
always were, under the released model's name `ARCHITECTURE`."""


def _architectures() -> tuple[str, ...]:
    return (ARCHITECTURE, *(a for a in families.architectures("ForCoreference") if a != _BERT_ARCHITECTURE))


def save_coref_model(model: CorefModel, output_dir: str | Path, tokenizer: Any) -> None:
    name = families.architecture(model.bert, "ForCoreference")
    name = ARCHITECTURE if name == _BERT_ARCHITECTURE else name
    save_finetuned(
        model, output_dir, tokenizer, name, {"spanbert": {"task": "coref", "coref": asdict(model.config)}}
    )


def check_model(model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no coreference model."""
    families.check_task_folder(model_dir, _architectures(), NEEDS)


def load_coref_model(model_dir: str | Path) -> tuple[CorefModel, Any]:
    """A model saved by `save_coref_model` (``spanbert finetune coref``, any family), in eval mode, and its
    tokenizer framed for its family."""
    check_model(model_dir)
    config_json, state, tokenizer = load_finetuned(model_dir)
    settings = config_json.get("spanbert", {}).get("coref")
    if settings is None:
        raise SpanBertError(
            f"{model_dir}: not a coreference model (config.json has no spanbert.coref settings); "
            f"fine-tune one with `spanbert finetune coref`"
        )
    # models saved before these settings existed were built without them: keep what they were
    settings = {
        "use_segment_distance": False,
        "token_dropout": settings.get("dropout", 0.0),
        "max_top_spans": 2**31 - 1,
        **settings,
    }
    config = CorefConfig(**{k: v for k, v in settings.items() if k in CorefConfig.__dataclass_fields__})
    encoder = families.encoder_from_config(config_json, add_pooling_layer=False, source=str(Path(model_dir) / "config.json"))
    model = CorefModel(None, config, encoder=encoder)
    if model.refine_gate is None:  # saved before depth 1 stopped building the unused gate
        state = {k: v for k, v in state.items() if not k.startswith("refine_gate.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{model_dir}: weights do not match the coreference model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.eval(), tokenizer  # eval mode, as transformers' from_pretrained


def evaluate_clusters(
    docs: Sequence[CorefDocument], predictions: Sequence[Sequence[Sequence[Span]]]
) -> dict[str, float]:
    return evaluate_documents([d.clusters for d in docs], predictions)


