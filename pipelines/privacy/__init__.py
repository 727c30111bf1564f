"""The privacy policy beside the rows, in layer order: `state` (the policy each workspace's rows
are under and the erasures, recorded in `raw`), `snapshots` (the same in dbt's snapshots),
`change` (bringing loaded rows under a new policy before a load, or refusing in one line),
`erasure` (one person erased everywhere) and `cli` (`signing-etl forget`)."""

from __future__ import annotations

from .change import PolicyChangeRefused, PrivacyPlan, apply_privacy, prepare_privacy
from .cli import forget_command
from .erasure import ErasureRefused, ErasureResult, forget_person
from .state import Erasure, PolicyRecord, read_erasures, read_policies

__all__ = [
    "Erasure",
    "ErasureRefused",
    "ErasureResult",
    "PolicyChangeRefused",
    "PolicyRecord",
    "PrivacyPlan",
    "apply_privacy",
    "forget_command",
    "forget_person",
    "prepare_privacy",
    "read_erasures",
    "read_policies",
]
