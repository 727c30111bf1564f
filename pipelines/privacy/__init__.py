"""The privacy policy beside the rows, in layer order: `snapshots` (the policy in dbt's
snapshots), `held_back` (what a policy that holds back takes from rows loaded before it),
`change` (bringing loaded rows under a new policy before a load, or refusing in one line),
`person` (whom `forget` names), `erasure` (one person erased everywhere) and `cli`
(`signing-etl forget`). What is recorded in `raw` (the policy each workspace's rows are under,
the erasures) and the gate every writer of rows passes are below, in `pipelines.raw`
(`privacy_records`, `privacy_gate`)."""

from __future__ import annotations

from pipelines.raw.privacy_records import Erasure, PolicyRecord, read_erasures, read_policies

from .change import PolicyChangeRefused, PrivacyPlan, apply_privacy, prepare_privacy
from .cli import forget_command
from .erasure import ErasureResult, forget_person
from .person import ErasureRefused

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
