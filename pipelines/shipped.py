"""Where the files that ship beside the code are: the dbt project (`models/`), the notebooks and
the example configuration (`.dlt/`). In a checkout they sit at its top; an installed wheel
carries them inside this package (`pipelines/_shipped/`, placed there by the wheel's build in
`pyproject.toml`), so the same code finds them in both."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_IN_WHEEL = _PACKAGE / "_shipped"
_CHECKOUT = _PACKAGE.parent


def shipped(name: str) -> Path:
    """The shipped folder or file `name` (`models`, `notebooks`, `dlt/config.toml`): the wheel's
    copy when this is an installed package, else the checkout's (`dlt/...` is `.dlt/...`)."""
    if _IN_WHEEL.is_dir():
        return _IN_WHEEL / name
    in_checkout = f".{name}" if name.startswith("dlt/") else name
    return _CHECKOUT / in_checkout
