"""What a pre-training run is before any model exists (`spanbert.pretrain_config`): the parser of `spanbert
pretrain` (older option spellings still read, not listed) and Google BERT's sequence-length schedule. The presets
at work are tested in test_pretrain.py, test_cloze.py and test_ltr.py."""

from __future__ import annotations

import pytest

from spanbert.errors import SpanBertError
from spanbert.pretrain_config import PretrainConfig


def test_seq_length_schedule_parses_and_rejects():
    from spanbert.pretrain_config import seq_length_stages

    assert seq_length_stages("128:0.9,512", 512, 1000) == [(128, 900), (512, 1000)]
    assert seq_length_stages(None, 512, 10) == [(512, 10)]
    assert seq_length_stages("64:0.5, 128:0.25,512", 512, 8) == [(64, 4), (128, 6), (512, 8)]
    for bad in ("128,512", "128:0.9", "128:0.9,256", "128:1.5,512", "x:0.9,512", "4:0.9,512", "128:0.6,256:0.5,512"):
        with pytest.raises(SpanBertError, match="--seq_length_schedule"):
            seq_length_stages(bad, 512, 1000)
    with pytest.raises(SpanBertError, match="no steps"):
        seq_length_stages("128:0.1,512", 512, 3)
    with pytest.raises(SpanBertError, match="--seq_length_schedule"):
        PretrainConfig(seq_length_schedule="128:0.9")


def test_older_spellings_still_work_unlisted():
    from spanbert.pretrain_config import pretrain_parser

    p = pretrain_parser()
    args = vars(p.parse_args(["--dtype", "bf16", "--init-from", "x"]))
    assert args == {"precision": "bf16", "init_from": "x", "config": None, "overrides": []}
    shown = p.format_help()
    assert "--precision" in shown and "--init_from" in shown and "--dtype" not in shown and "--init-from" not in shown
