"""Checkpoint folders: the layouts every family's weights are read from and written to.

`spanbert.model` is the BERT family's model code; this module is how any model's folder looks on disk:
- reading the BERT layouts (HF `config.json` + `model.safetensors` / shards / `pytorch_model.bin`,
  Google's and SpanBERT's `bert_config.json` releases, the fairseq-era SpanBERT state dict with its key
  renames; docs/architecture.md "Checkpoint layouts"), and the two-tower family's safetensors folder;
- writing: `save_checkpoint` (the files, each atomically, config.json last, into a run folder that
  holds other outputs too) and `save_folder` (a whole model folder, swapped in at once: what every
  ``save_pretrained`` and every export uses);
- what a folder save may replace: a folder of `spanbert.checkpoint_files.MODEL_FILES` only, the one list
  of the names a model folder holds.

It sits below every family file (`spanbert.model`, `spanbert.cloze`) and `spanbert.families`, which
say per family which of these readers and writers it uses (`families.FamilySpec`).
"""

from __future__ import annotations

import json
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from spanbert.checkpoint_files import _SHARD, CONFIG_FILES, SBO_FILE, WEIGHT_FILES, is_model_file
from spanbert.config import BertConfig
from spanbert.errors import SpanBertError
from spanbert.folders import is_debris, make_folders, remove
from spanbert.hub import resolve_model
from spanbert.utils import atomic_dir, check_output, no_space_as_error, parsed_once, publish_file, temporary_file

# ---------------------------------------------------------------------------------------------
# What a model folder holds

# the names (CONFIG_FILES, WEIGHT_FILES, TOKENIZER_FILES, MODEL_FILES, SBO_FILE) live in `spanbert.checkpoint_files`,
# below `utils`, whose output check keeps a command from writing over a model's file


def is_model_folder(path: str | Path) -> bool:
    """True when every entry of the folder ``path`` is a model's file (`is_model_file`): an earlier
    save that a new one may replace whole."""
    return all(is_model_file(p.name) and not p.is_dir() or is_debris(p.name) for p in Path(path).iterdir())


def describe_checkpoint(config_json: dict[str, Any], state: dict[str, Tensor]) -> str:
    """What a checkpoint holds, for messages: ``BertForSequenceClassification (glue SST-2): the encoder
    + classifier.*``. The weights decide (a config's ``architectures`` may be missing or wrong)."""
    arch = config_json.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else "weights"
    meta = config_json.get("spanbert")
    task = [meta.get(k) for k in ("task", "glue_task") if isinstance(meta, dict) and isinstance(meta.get(k), str)]
    if task:
        name += f" (fine-tuned: {' '.join(task)})"
    parts = []
    for key in state:
        k = key[len("bert.") :] if key.startswith("bert.") else key
        if k.startswith(_ENCODER_PREFIXES):
            part = "the encoder"
        else:
            pieces = k.split(".")
            part = ".".join(pieces[:2] if pieces[0] == "cls" and len(pieces) > 2 else pieces[:1]) + ".*"
        if part not in parts:
            parts.append(part)
    return f"{name}: {' + '.join(parts) if parts else 'no weights'}"


# ---------------------------------------------------------------------------------------------
# Reading the BERT layouts

_ENCODER_PREFIXES = ("embeddings.", "encoder.", "pooler.")


def encoder_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The encoder's weights out of any BERT state dict: `bert.` prefix stripped, heads dropped."""
    out = {}
    for k, v in state.items():
        if k.startswith("bert."):
            k = k[len("bert.") :]
        if k.startswith(_ENCODER_PREFIXES) and not k.endswith(("position_ids", "token_type_ids")):
            out[k] = v
    return out


def _legacy_name(key: str) -> str:
    # TF-converted and early pytorch-pretrained-bert checkpoints name LayerNorm parameters gamma/beta.
    if key.endswith(".gamma"):
        key = key[: -len(".gamma")] + ".weight"
    elif key.endswith(".beta"):
        key = key[: -len(".beta")] + ".bias"
    return _fairseq_name(key)


# The fairseq-era SpanBERT model (facebookresearch/SpanBERT pretraining/fairseq/models/pair_bert.py):
# the whole BertForPreTraining sits under `decoder.` (fairseq's FairseqLanguageModel) and the span
# boundary head is `cls.pair_target_predictions` = position_embeddings (max_pair_targets x 200) ->
# mlp_layer_norm (linear1, GELU, layer_norm1, linear2, GELU, layer_norm2) -> tied decoder + bias,
# the same computation as our `SpanBoundaryHead` on cat(left, right, position) in the same order.
_FAIRSEQ_SPAN_HEAD = "cls.pair_target_predictions."
_FAIRSEQ_SPAN_NAMES = {
    "mlp_layer_norm.linear1.": "dense1.",
    "mlp_layer_norm.layer_norm1.": "LayerNorm1.",
    "mlp_layer_norm.linear2.": "dense2.",
    "mlp_layer_norm.layer_norm2.": "LayerNorm2.",
}


def _fairseq_name(key: str) -> str:
    """A fairseq-era SpanBERT key in our names: `decoder.` dropped (the released fine-tuning code's
    `from_pretrained` does the same), the span head renamed onto `cls.span_predictions.*`."""
    if key.startswith("decoder."):
        key = key[len("decoder.") :]
    if key.startswith(_FAIRSEQ_SPAN_HEAD):
        rest = key[len(_FAIRSEQ_SPAN_HEAD) :]
        for old, new in _FAIRSEQ_SPAN_NAMES.items():
            if rest.startswith(old):
                rest = new + rest[len(old) :]
                break
        key = "cls.span_predictions." + rest
    return key


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:  # truncated, corrupt, not safetensors
        raise SpanBertError(f"{path}: found {_first_line(e)}, expected a safetensors weights file") from None


def read_safetensors(path: Path) -> dict[str, Tensor]:
    """The tensors of a safetensors file; a broken file is an error naming it."""
    return _read_safetensors(Path(path))


def _check_safetensors_header(path: Path) -> None:
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise SpanBertError(f"{path}: found {_first_line(e)}, expected a safetensors weights file") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def read_json(path: Path, expected: str) -> Any:
    """A JSON file, or a SpanBertError naming it (and the line of a syntax error). Read once per version of
    the file (`spanbert.utils.parsed_once`): a command asks for a model's config.json from its family's
    habits, the loader and the tokenizer."""
    return parsed_once(path, lambda p: _parse_json(p, expected))


def _parse_json(path: Path, expected: str) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SpanBertError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpanBertError(f"{path}:{line}: found byte 0x{raw[e.start]:02x} that is not UTF-8, expected {expected}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SpanBertError(f"{path}:{e.lineno}: found invalid JSON ({e.msg}), expected {expected}") from None


def _read_torch_bin(path: Path) -> dict[str, Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" not in str(e).lower():  # not a pickle at all (random bytes, a text file)
            raise SpanBertError(f"{path}: found {_first_line(e)}, expected a PyTorch checkpoint") from None
        raise SpanBertError(
            f"{path}: refused to load: the pickle holds objects other than tensors "
            f"(spanbert never runs an unrestricted unpickle, which can execute code). "
            f"Convert the checkpoint to safetensors in a trusted environment. Detail: {str(e).splitlines()[0]}"
            + _fairseq_hint(path, str(e))
        ) from None
    except Exception as e:  # noqa: BLE001 -- torch.load raises KeyError, RuntimeError, EOFError... on a bad file
        raise SpanBertError(f"{path}: found {type(e).__name__}: {_first_line(e)}, expected a PyTorch checkpoint") from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]  # fairseq-style {"model": state_dict, ...}
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        found = type(state).__name__
        if isinstance(state, dict):
            k, v = next((k, v) for k, v in state.items() if not isinstance(v, Tensor))
            found = f"{k!r}: {type(v).__name__}"
        raise SpanBertError(f"{path}: found {found}, expected a state dict of tensors")
    return state


def _fairseq_hint(path: Path, error: str) -> str:
    # fairseq training checkpoints pickle the run's argparse.Namespace beside {"model": state_dict}
    if "argparse" not in error and "fairseq" not in error:
        return ""
    return (
        f". If it is a fairseq training checkpoint (the run's arguments beside the weights), extract the "
        f"weights once, in a trusted environment: python -c \"import torch; torch.save(torch.load("
        f"'{path.name}', weights_only=False)['model'], 'pytorch_model.bin')\" and put bert_config.json beside it"
    )


def check_checkpoint(path: str | Path) -> BertConfig:
    """The checkpoint's `BertConfig`; fails now, with the file named, on what `load_checkpoint` would
    fail on later: no folder, a bad config.json, no weights, an unreadable safetensors header. Reads no
    tensors (commands call it before they write anything; a `pytorch_model.bin` is only checked to exist)."""
    path = resolve_model(path)
    config = BertConfig.from_hf_dict(_checked_config(path))
    st = path / "model.safetensors"
    if st.exists():
        _check_safetensors_header(st)
    elif not any((path / name).exists() for name in ("model.safetensors.index.json", "pytorch_model.bin")):
        raise _no_weights(path)
    return config



def config_path(path: str | Path) -> Path:
    """The config file a checkpoint folder is read with: `config.json`, else `bert_config.json`."""
    path = resolve_model(path)
    for name in CONFIG_FILES:
        if (path / name).is_file():
            return path / name
    return path / CONFIG_FILES[0]


def run_folder_hint(path: str | Path) -> str:
    """What to pass instead when ``path`` is a training run's folder rather than a model folder: its
    exported model (``final/``, `spanbert pretrain`'s), or, before there is one, its checkpoints; "" when it
    is no run folder."""
    path = Path(path)
    final = path / "final"
    if any((final / name).is_file() for name in CONFIG_FILES):
        return f"; {path} is a pre-training run's folder: its model is {final} (--model {final})"
    steps = sorted((int(p.name.rsplit("-", 1)[1]), p) for p in path.glob("checkpoint-*") if p.name.rsplit("-", 1)[1].isdigit())
    if steps:
        return (f"; {path} is a training run's folder with no exported model yet (its last checkpoint: {steps[-1][1].name}): "
                "finish the run with --resume, which exports its model")  # fmt: skip
    return ""


def _tf_checkpoint_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.ckpt*") if p.is_file())


def _no_weights(path: Path) -> SpanBertError:
    """The error for a folder without weights we read, naming what it holds instead."""
    tf = _tf_checkpoint_files(path)
    if tf:
        stem = tf[0].split(".ckpt")[0] + ".ckpt"
        return SpanBertError(
            f"{path}: found TensorFlow checkpoint files ({', '.join(tf[:3])}), expected PyTorch weights "
            f"(model.safetensors or pytorch_model.bin): spanbert does not read TensorFlow checkpoints. "
            f"Convert once with transformers 4.x and TensorFlow installed: transformers-cli convert "
            f"--model_type bert --tf_checkpoint {path / stem} --config {config_path(path)} "
            f"--pytorch_dump_output {path / 'pytorch_model.bin'} (transformers 5 removed the command), "
            f"or download the PyTorch weights of the same model (e.g. bert-base-cased on the HF hub)"
        )
    fairseq = sorted(p.name for p in path.glob("checkpoint*.pt"))
    hint = (
        f"; found fairseq training checkpoint(s) {fairseq[:3]}: extract the weights once, in a trusted "
        f"environment: python -c \"import torch; torch.save(torch.load('{fairseq[0]}', weights_only=False)"
        f"['model'], 'pytorch_model.bin')\""
        if fairseq
        else ""
    )
    return SpanBertError(f"{path}: no weights (expected model.safetensors or pytorch_model.bin){hint}")


def _checked_config(path: Path) -> dict[str, Any]:
    """config.json (or bert_config.json) of a checkpoint folder, read and checked as a BERT config."""
    if path.is_file():  # the weights file itself, say: the folder holding it is what loads
        raise SpanBertError(f"{path}: found a file, expected the model's folder (config.json and weights beside "
                            f"each other): pass {path.parent}")  # fmt: skip
    if not path.is_dir():
        raise SpanBertError(f"{path}: checkpoint folder not found (expected a folder with config.json and weights)")
    cfg_path = config_path(path)
    if not cfg_path.exists():
        raise SpanBertError(
            f"{path}: no config.json or bert_config.json (a BERT checkpoint folder has one of them + model weights)"
            + run_folder_hint(path)
        )
    config_json = read_json(cfg_path, "a JSON object of BERT settings")
    BertConfig.from_hf_dict(config_json, source=str(cfg_path))
    return config_json


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Read the config and the weights of a checkpoint folder -> (config dict, state dict).

    Config: `config.json`, else `bert_config.json` (Google's and SpanBERT's original releases).
    Weights: `model.safetensors`, sharded `model.safetensors.index.json`, or `pytorch_model.bin`
    (read with `torch.load(weights_only=True)`; a fairseq `{"model": state_dict}` is unwrapped).
    Keys come back in our (HF) names: LayerNorm `gamma`/`beta` -> `weight`/`bias`, a fairseq
    `decoder.` prefix dropped and its span head `cls.pair_target_predictions.*` renamed to
    `cls.span_predictions.*` (docs/architecture.md, "Checkpoint layouts"). TensorFlow checkpoints
(`bert_model.ckpt.*`) are not read: the error says how to convert them.
    """
    path = resolve_model(path)
    config_json = _checked_config(path)  # checked before reading gigabytes of weights
    if (path / "model.safetensors").exists():
        state = _read_safetensors(path / "model.safetensors")
    elif (path / "model.safetensors.index.json").exists():
        index_path = path / "model.safetensors.index.json"
        index = read_json(index_path, 'a JSON object {"weight_map": {name: shard file}}')
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise SpanBertError(f'{index_path}: found no "weight_map" of shard file names, expected {{"weight_map": {{name: file}}}}')
        state = {}
        for shard in sorted(set(weight_map.values())):
            if not (path / shard).is_file():
                raise SpanBertError(f"{index_path}: found shard {shard!r}, expected it in {path} (it is missing)")
            state.update(_read_safetensors(path / shard))
    elif (path / "pytorch_model.bin").exists():
        state = _read_torch_bin(path / "pytorch_model.bin")
    else:
        raise _no_weights(path)
    return config_json, {_legacy_name(k): v for k, v in state.items()}


def save_checkpoint(path: str | Path, state_dict: dict[str, Tensor], config_json: dict[str, Any], tokenizer: Any = None,
                    extra_files: dict[str, dict[str, Tensor]] | None = None) -> None:
    """Write a model's files into ``path`` in place, `config.json` last, for a folder that holds other outputs
    too (a fine-tuning run's folder: predictions, logs, checkpoints), which are left alone.

    Every file is first written beside its destination under a temporary name; only when all of them are
    complete is the earlier save's config.json removed and each moved in (a rename), then config.json. A
    save that fails while writing (a full disk: one `NoSpaceError` naming ``path``) leaves the folder as it
    was; a save killed while moving leaves a folder that refuses to load (no config.json), never new weights
    read with an old config or an old head. The earlier save's weight files that this save does not write
    (`WEIGHT_FILES`: an SBO head, a `pytorch_model.bin`, shards) go, those the folder's manifest lists only
    (`spanbert.folders`). A whole model folder is written with `save_folder` instead (the old folder or the
    new one, at every instant). Tensors that share storage (tied weights) are written once.
    """
    path = Path(path)
    make_folders(path)
    files = {"model.safetensors": state_dict, **(extra_files or {})}
    staged: dict[str, Path] = {}  # destination name -> complete temporary file
    tok_tmp: Path | None = None
    try:
        with no_space_as_error(path):
            for name, state in files.items():
                tensors, seen = {}, set()
                for k, v in state.items():
                    key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape))
                    if key in seen:
                        continue
                    seen.add(key)
                    tensors[k] = v.detach().to("cpu").contiguous().clone()
                # safetensors writes through a path: a temporary beside the target (a name `is_debris` knows)
                staged[name] = temporary_file(path / name)
                save_file(tensors, str(staged[name]), metadata={"format": "pt"})
            if tokenizer is not None:
                tok_tmp = Path(tempfile.mkdtemp(prefix=".tokenizer.tmp-", dir=path))
                # transformers' tokenizer then knows the model's longest input (8,192 for ModernBERT)
                tokenizer.save(tok_tmp, model_max_length=config_json.get("max_position_embeddings"))
                for f in sorted(tok_tmp.iterdir()):
                    if f.is_file() and not is_debris(f.name):
                        staged[f.name] = f
            staged["config.json"] = temporary_file(path / "config.json")
            with open(staged["config.json"], "w") as f:
                json.dump(config_json, f, indent=2, sort_keys=True)
                f.write("\n")
            # every file is complete: from here on only renames and removals (no room needed)
            (path / "config.json").unlink(missing_ok=True)  # from here on the folder is no model until the end
            for name, tmp in staged.items():
                if name != "config.json":
                    publish_file(tmp, path / name)
            for stale in (*WEIGHT_FILES, "bert_config.json"):  # an earlier save's, which a reader would mix in
                if stale not in files:
                    remove(path / stale)
            for shard in path.iterdir():
                if _SHARD.fullmatch(shard.name):
                    remove(shard)
            publish_file(staged["config.json"], path / "config.json")
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    finally:
        if tok_tmp is not None:
            shutil.rmtree(tok_tmp, ignore_errors=True)


def save_folder(path: str | Path, state_dict: dict[str, Tensor], config_json: dict[str, Any], tokenizer: Any = None,
                extra_files: dict[str, dict[str, Tensor]] | None = None) -> Path:
    """Write a whole model folder atomically: every file into a temporary folder beside ``path``, then
    swapped in (`spanbert.utils.atomic_dir`). At every instant ``path`` is the complete earlier folder or
    the complete new one; a save that fails or is killed leaves the earlier folder as it was (and at most a
    hidden ``.NAME.tmp-*`` folder, removed by the next run's `remove_debris`).

    What it replaces: an earlier save of a model (a folder of `MODEL_FILES` only), all of it: no file of
    the earlier model (an SBO head, a shard, its train_metrics.json) survives beside the new one. What it
    refuses, before writing anything (`spanbert.utils.check_output`): a file at ``path``, a folder
    holding any other file (a user's notes, a run's logs: choose another folder), an unwritable place.
    """
    path = check_output(path, folder=True, ours=is_model_folder)
    with atomic_dir(path) as tmp:
        save_checkpoint(tmp, state_dict, config_json, tokenizer=tokenizer, extra_files=extra_files)
    return path


# ---------------------------------------------------------------------------------------------
# The BERT pre-training model's heads (`spanbert.model.SpanBertForPreTraining`)

SBO_PREFIX = "cls.span_predictions."


def load_encoder_weights(
    module: torch.nn.Module, state: dict[str, Tensor], source: str, family: str, optional: str | None = None
) -> None:
    """Load ``state`` (an encoder's own key names) into ``module``: every weight must be there with the
    module's shape, no other key may be, else one error naming ``source`` and the ``family``. Keys under
    ``optional`` (BERT's ``pooler.``, ModernBERT's sentence ``head.``) may be absent (they stay freshly
    initialised) or, when the module has none, present and ignored."""
    own = module.state_dict()
    prefix = optional or "\0"  # no key starts with NUL: nothing is optional
    missing = sorted(k for k in own if k not in state and not k.startswith(prefix))
    unknown = sorted(k for k in state if k not in own and not k.startswith(prefix))
    if missing or unknown:
        raise SpanBertError(
            f"{source}: weights do not match a {family} encoder; missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {unknown[:5]}{' ...' if len(unknown) > 5 else ''}"
        )
    for k, v in own.items():
        if k in state and tuple(state[k].shape) != tuple(v.shape):
            raise SpanBertError(f"{source}: {k} has shape {tuple(state[k].shape)}, config says {tuple(v.shape)}")
    module.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)


def split_pretraining_state(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, dict[str, Tensor]]]:
    """(model.safetensors's tensors, {other file: tensors}) of a pre-training model's state dict: the
    SBO head (`cls.span_predictions.*`) goes to `SBO_FILE`, so HF's classes load the main file as theirs."""
    main = {k: v for k, v in state.items() if not k.startswith(SBO_PREFIX)}
    sbo = {k: v for k, v in state.items() if k.startswith(SBO_PREFIX)}
    return main, ({SBO_FILE: sbo} if sbo else {})


def load_pretraining_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """`load_checkpoint`, with the SBO head of `SBO_FILE` merged in when the folder has one."""
    path = resolve_model(path)
    config_json, state = load_checkpoint(path)
    if (Path(path) / SBO_FILE).exists():
        state.update(_read_safetensors(Path(path) / SBO_FILE))
    return config_json, state


def head_weights(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The pre-training heads' weights of a checkpoint in `PreTrainingHeads`'s names (``cls.`` dropped).
    Decoders are tied to the word embeddings (§2), in ours and in the fairseq span head, so their
    weights are dropped; an old checkpoint's ``predictions.decoder.bias`` is ``predictions.bias``."""
    heads = {k[len("cls.") :]: v for k, v in state.items() if k.startswith("cls.")}
    heads.pop("predictions.decoder.weight", None)
    heads.pop("span_predictions.decoder.weight", None)
    bias = heads.pop("predictions.decoder.bias", None)
    if bias is not None and "predictions.bias" not in heads:
        heads["predictions.bias"] = bias
    return heads


def unplaced_weights(state: dict[str, Tensor], has_pooler: bool) -> list[str]:
    """Keys of a checkpoint that are neither the encoder's nor a head's (and the pooler's when the model
    has none): what loading it into a pre-training model ignores."""
    ignored = sorted(k for k in state if not k.startswith(("cls.", "bert.", *_ENCODER_PREFIXES)) and not k.endswith("position_ids"))
    if not has_pooler:
        ignored += sorted(k for k in state if k.startswith(("pooler.", "bert.pooler.")))
    return ignored


# ---------------------------------------------------------------------------------------------
# Another family's folder: config.json + model.safetensors (the two-tower model)


def load_safetensors_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json dict, state dict) of a folder whose weights are one `model.safetensors`."""
    path = resolve_model(path)
    weights = Path(path) / "model.safetensors"
    if not weights.is_file():
        raise SpanBertError(f"{path}: no weights (expected model.safetensors)")
    cfg_path = Path(path) / "config.json"
    raw = read_json(cfg_path, "a JSON object of model settings")
    if not isinstance(raw, dict):
        raise SpanBertError(f"{cfg_path}: found a JSON {type(raw).__name__}, expected a JSON object of model settings")
    return raw, _read_safetensors(weights)


def check_safetensors_checkpoint(path: str | Path) -> None:
    """Fails now, naming the file, when `load_safetensors_checkpoint` would: no weights, a broken header."""
    path = resolve_model(path)
    weights = Path(path) / "model.safetensors"
    if not weights.is_file():
        raise SpanBertError(f"{path}: no weights (expected model.safetensors)")
    _check_safetensors_header(weights)


__all__ = [
    "check_checkpoint",
    "config_path",
    "describe_checkpoint",
    "encoder_state_dict",
    "is_model_folder",
    "load_checkpoint",
    "read_json",
    "read_safetensors",
    "save_checkpoint",
    "save_folder",
]
