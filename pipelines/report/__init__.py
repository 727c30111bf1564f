"""The funnel report, in layer order: `page` (the executed notebook as one self-contained HTML
page, its explorer in `assets/`), `notebook` (running `notebooks/signing_funnel.ipynb` on a
warehouse's marts) and `cli` (`signing-etl report`). `notebook` and `page` are imported on first
use: the notebook machinery costs time that other commands don't need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

from .cli import report_command, write_report_or_fail

if TYPE_CHECKING:
    from .notebook import snapshot_marts, write_report

__all__ = ["report_command", "snapshot_marts", "write_report", "write_report_or_fail"]
__getattr__ = lazy_exports(__name__, {"snapshot_marts": "notebook", "write_report": "notebook"})
