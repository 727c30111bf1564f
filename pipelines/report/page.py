"""The report's HTML page: an executed funnel notebook as one self-contained file, its explorer
(markup and script in `assets/`, Plotly inlined from the plotly wheel, the data as JSON)
under a Content-Security-Policy that runs only those scripts."""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import json
import re
import uuid
from pathlib import Path
from typing import Any

from jinja2 import DictLoader
from nbconvert import HTMLExporter
from nbformat import NotebookNode

from pipelines.errors import ReportError

# The explorer: the notebook's data for it (an output of this type), the page's own markup and
# script (`assets/`), and the charting library inlined from the plotly wheel.
EXPLORER_MIME = "application/vnd.signing-etl.explorer+json"
ASSETS_DIR = Path(__file__).resolve().parent / "assets"
STATIC_TAG = "static"  # cells of the notebook's static charts, left out of the report

# JupyterLab's look, without the scripts it loads from CDNs (require.js, MathJax, Mermaid): the
# report must open offline. Values from the data are escaped by the notebook and set as text by
# the explorer; as a second guard the page loads nothing from anywhere and runs only its own two
# scripts, by their hashes (its Content-Security-Policy, completed in `notebook_html`), and
# nbconvert sanitizes the outputs' HTML.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<meta http-equiv="Content-Security-Policy" content="{{ resources.content_security_policy }}">
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block data_png scoped -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
 alt="{{ ((output | get_metadata('alt', 'image/png')) or 'Chart') | escape_html }}">
</div>
{%- endblock data_png -%}
"""


def notebook_html(notebook: NotebookNode) -> str:
    """An executed notebook as one HTML page: markdown and outputs, no code, images inline.

    The notebook's explorer data (an output of type `EXPLORER_MIME`) becomes the interactive
    explorer: the page's markup and script with Plotly, all inlined, the data embedded as JSON
    that no browser parses as markup, and a Content-Security-Policy that runs those two
    scripts (by their hashes) and nothing else. Cells tagged `static` are left out then, and
    nothing the kernel wrote to stderr (a library's warning names files of this machine).

    Args:
        notebook: an executed notebook.

    Returns:
        The page's HTML, with no external scripts, styles or images.
    """
    explorer = _take_explorer(notebook)
    remove = {STATIC_TAG} if explorer else set()
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"signing_report.html.j2": _TEMPLATE})],
        template_file="signing_report.html.j2",
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        sanitize_html=True,
        filters={"clean_html": _clean_html},
    )
    exporter.register_preprocessor(_tag_remover(remove), enabled=True)
    scripts = [_plotly_js(), (ASSETS_DIR / "explorer.js").read_text(encoding="utf-8")]
    policy = CONTENT_SECURITY_POLICY
    if explorer:
        hashes = " ".join(f"'sha256-{_sha256(script)}'" for script in scripts)
        policy = f"{policy}; script-src {hashes}"
    body, _ = exporter.from_notebook_node(notebook, resources={"content_security_policy": policy})
    if explorer:
        token, data = explorer
        body = _put_explorer(body, token, _explorer_html(data, scripts))
    return body


def _take_explorer(notebook: NotebookNode) -> tuple[str, Any] | None:
    """Take the explorer's data out of the notebook, leaving a random token where it was (the
    sanitizer drops unknown outputs), and every stderr output out; None without explorer."""
    found: tuple[str, Any] | None = None
    for cell in notebook.cells:
        kept = []
        for output in cell.get("outputs", []):
            if output.get("name") == "stderr":
                continue
            data = output.get("data", {})
            if EXPLORER_MIME in data and found is None:
                token = f"signing-explorer-{uuid.uuid4().hex}"
                found = (token, data[EXPLORER_MIME])
                output["data"] = {"text/plain": token}
            kept.append(output)
        if cell.cell_type == "code":
            cell.outputs = kept
    return found


def _put_explorer(body: str, token: str, explorer: str) -> str:
    """The page with the output that holds `token` replaced by the explorer."""
    output = re.compile(r"<div[^>]*>\s*<pre>" + re.escape(token) + r"\s*</pre>\s*</div>")
    replaced, count = output.subn(lambda _: explorer, body, count=1)
    return replaced if count else body.replace(token, explorer)


def _explorer_html(data: Any, scripts: list[str]) -> str:
    """The explorer: its markup, its data as JSON in a non-executed script element (`<`, `>`,
    `&` escaped, so no value can end the element), then the scripts."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    for character, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(character, escaped)
    markup = (ASSETS_DIR / "explorer.html").read_text(encoding="utf-8")
    parts = [markup, f'<script type="application/json" id="explorer-data">{text}</script>']
    parts += [f"<script>{script}</script>" for script in scripts]
    return "\n".join(parts)


def _plotly_js() -> str:
    """Plotly's own bundle, from the installed `plotly` package (nothing is downloaded)."""
    bundle = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    script = bundle.read_text(encoding="utf-8")
    if "</script" in script.lower():  # would end the inline element early
        raise ReportError("the installed plotly.min.js cannot be inlined (it holds </script)")
    return script


def _sha256(script: str) -> str:
    return base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


# What markdown makes, kept by the sanitizer: nbconvert's own list lacks headings, paragraphs and
# table heads, and escaped them into visible tags. No script, style, form or event attribute.
_ALLOWED_TAGS = {
    *("a", "abbr", "b", "blockquote", "br", "code", "div", "em", "hr", "i", "li", "ol", "p"),
    *("pre", "span", "strong", "sub", "sup", "ul", "h1", "h2", "h3", "h4", "h5", "h6"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
_ALLOWED_ATTRIBUTES = {
    "*": ["class", "id"],
    "a": ["href", "title"],
    "th": ["style"],
    "td": ["style"],
}


def _clean_html(element: Any) -> str:
    """nbconvert's `clean_html` (bleach, only http(s) and mailto links), with markdown's tags."""
    import bleach  # type: ignore[import-untyped]
    from bleach.css_sanitizer import CSSSanitizer  # type: ignore[import-untyped]

    text = element.decode() if isinstance(element, bytes) else str(element)
    return str(
        bleach.clean(
            text,
            tags=_ALLOWED_TAGS,
            attributes=_ALLOWED_ATTRIBUTES,
            css_sanitizer=CSSSanitizer(allowed_css_properties=["text-align"]),
        )
    )


def _tag_remover(tags: set[str]) -> Any:
    from nbconvert.preprocessors import TagRemovePreprocessor

    return TagRemovePreprocessor(remove_cell_tags=tags, enabled=True)
