"""What the command line prints of a value: every character that could change how a line reads
(Unicode's control, format, line and paragraph separator characters) is shown as its escape,
checked against Unicode's own categories (`unicodedata`), not against the list the code keeps."""

from __future__ import annotations

import sys
import unicodedata

from pipelines.console.output import printable

HIDING = ("Cc", "Cf", "Zl", "Zp")


def test_every_control_or_format_character_is_printed_as_its_escape() -> None:
    hiding = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in HIDING and chr(code) != "\t"
    ]
    assert len(hiding) > 200  # C0, C1, the bidi and zero-width marks, the tags, ...
    shown = {char: printable(f"a{char}b") for char in hiding}
    assert not [char for char, text in shown.items() if char in text], [
        f"U+{ord(char):04X}" for char, text in shown.items() if char in text
    ]
    assert printable("tab\tstays") == "tab\tstays"
