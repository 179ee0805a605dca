"""Shared test setup.

Tests use tiny models, where a second OpenMP thread buys nothing and, on a loaded machine, costs a lot
(threads spin-wait for a busy core): one thread keeps the suite fast and its run time predictable.
"""

from __future__ import annotations

import torch

torch.set_num_threads(1)
