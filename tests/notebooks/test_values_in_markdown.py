"""A value from the data (a workspace's name, an id) that the funnel notebook writes into
Markdown shows as the text it is: no markup, no script, no link, and every character as typed,
on the report's page as Chromium shows it. The notebook's own `md` and `code` are taken from its
source, so what is checked is what it runs."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from nbformat.v4 import new_code_cell, new_notebook, new_output

from pipelines.report.page import notebook_html
from tests.support.browser import offline_page

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "signing_funnel.ipynb"

# Names an admin of a workspace could give it: an apostrophe and an ampersand (common in
# company names), Markdown and HTML syntax, and what an autolinker turns into links.
NAMES = (
    'O\'Brien & Sons "Ltd" <b>bold</b>',
    "**bold** `tick` [link](javascript:alert(1)) # not a heading | not a cell",
    "Pay at https://evil.example/pay or www.evil.example, mail bob@evil.example",
    "a_b-c.d!e~f+g{h}i\\j",
)


def notebook_functions() -> dict[str, Any]:
    """`md` and `code` as the notebook defines them, after its imports and its constants."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    wanted: list[ast.stmt] = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(
            line for line in cell["source"] if not line.lstrip().startswith(("%", "!"))
        )
        wanted += [node for node in ast.parse(source).body if _wanted(node)]
    assert {n.name for n in wanted if isinstance(n, ast.FunctionDef)} == {"md", "code"}
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(NOTEBOOK), "exec"), namespace)
    return namespace


def _wanted(node: ast.stmt) -> bool:
    """An import, `md` or `code`, or an assignment to a name in capitals (`MARTS = ...`,
    `_PATTERN = re.compile(...)`)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.FunctionDef):
        return node.name in ("md", "code")
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    return isinstance(target, ast.Name) and target.id.lstrip("_").isupper()


def test_a_value_in_the_reports_markdown_is_text_and_never_a_link(tmp_path: Path) -> None:
    functions = notebook_functions()
    md, code = functions["md"], functions["code"]
    outputs = []
    for index, name in enumerate(NAMES):
        # As the notebook writes them: a heading, a sentence, and a table's row.
        text = (
            f"### {md(name)} ({code(f'ws_{index}')})\n\n"
            f"Workspace **{md(name)}** ({code(name)})\n\n"
            f"| name | id |\n|---|---|\n| {md(name)} | {code(index)} |\n"
        )
        outputs.append(new_output("display_data", data={"text/markdown": text}))
    # The author's own link in the notebook's Markdown still is one: what the test could see.
    outputs.append(
        new_output("display_data", data={"text/markdown": "[docs](https://docs.example/)"})
    )
    page = tmp_path / "report.html"
    page.write_text(notebook_html(new_notebook(cells=[new_code_cell("", outputs=outputs)])))

    with offline_page(page, explorer=False) as (opened, refused):
        headings = opened.locator("h3").all()
        strong = opened.locator("strong").all()
        cells = opened.locator("td").all()
        for index, name in enumerate(NAMES):
            assert headings[index].evaluate("h => h.childNodes[0].textContent") == f"{name} ("
            assert headings[index].locator("code").text_content() == f"ws_{index}"
            assert strong[index].text_content() == name
            assert [c.text_content() for c in cells[2 * index : 2 * index + 2]] == [
                name,
                str(index),
            ]
        links = opened.locator("a[href]:not(.anchor-link)")
        assert [links.nth(i).get_attribute("href") for i in range(links.count())] == [
            "https://docs.example/"
        ]
        assert opened.locator("b, em, script, img, h1, h2").count() == 0
    assert refused == []


def test_control_and_invisible_characters_show_as_their_escapes() -> None:
    md = notebook_functions()["md"]
    shown = md("Acme\u202eevil\x1b[31m\u200b")
    assert "&#92;u202e" in shown  # the backslash and the code, not the character
    assert "\u202e" not in shown
    assert "\x1b" not in shown
    assert "\u200b" not in shown
