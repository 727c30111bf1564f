"""The dbt models on a warehouse, in layer order: `record` (each build's outcome, kept where
`status` reads it), `build` (`dbt build` run in-process, its outcome), `refresh` (the marts
brought up to date after a webhook drain) and `cli` (`signing-etl models`, and the build every
command that changes rows ends with). `build` and `refresh` are imported on first use: dbt
costs seconds that `status` and `load --no-models` don't need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

from .cli import build_models_or_fail, models_command

if TYPE_CHECKING:
    from .build import PROJECT_DIR, ModelsResult, build_models
    from .refresh import refresh_marts

__all__ = [
    "PROJECT_DIR",
    "ModelsResult",
    "build_models",
    "build_models_or_fail",
    "models_command",
    "refresh_marts",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "PROJECT_DIR": "build",
        "ModelsResult": "build",
        "build_models": "build",
        "refresh_marts": "refresh",
    },
)
