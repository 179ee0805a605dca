"""No code: the old home of what every fine-tuning task shares, split by idea (issue 59). Each name is
in its home now, and ``spanbert.tasks.common.NAME`` resolves there with a DeprecationWarning
(`spanbert._aliases`):

- `spanbert.tasks.options`: a task's options as dataclasses, parsed from the command line or built from keywords
  (the parser helpers that were here, `add_switch`, `task_parser`, `parse_task_args`, ..., are gone with them);
- `spanbert.tasks.finetuning`: ``finetune`` from its options to the saved model (`finetune_options`);
- `spanbert.tasks.selection`: the model chosen on dev (`KeepBest`) and the Appendix B `sweep`;
- `spanbert.tasks.ranks`: several processes (`start_distributed`, `write_once`, `predict_sharded`, `seeded_model`);
- `spanbert.tasks.batching`: prediction batches by length;
- `spanbert.tasks.task_folders`: loading an encoder and tokenizer, saving and loading a task model;
- `spanbert.tasks.scores`: scores on one scale, predictions matched by id, unseen gold labels.
"""

from spanbert import _aliases

__getattr__ = _aliases.getter(__name__)
