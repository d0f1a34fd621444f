"""What text from a file may do once autotune shows or writes it: the rules for names,
comment lines and the terminal.

A preset is hostile input: its strings reach a terminal, the comment lines of an exported
file and error messages. Three rules, one owner each:

- :func:`control_problem`: a name (a model, a device, a knob, a study) is one line of
  printable text; a control character (C0, DEL, C1, a Unicode line or paragraph
  separator) or an invisible format character (bidi overrides and isolates, zero-width
  spaces and joiners: Unicode's Cf) is a validation problem. U+202E RIGHT-TO-LEFT
  OVERRIDE shows ``mu\u202elmay.exe`` as ``muexe.yaml``: a name must read as it is.
- :func:`one_line`: text safe inside a comment line: one line, printable characters only.
- :func:`terminal_safe`: text safe to print: every terminal control sequence (CSI, OSC,
  DCS, SOS, PM, APC, in their 7-bit ``ESC`` and 8-bit C1 forms) and every other control
  or format character but newline and tab removed.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["control_problem", "one_line", "terminal_safe"]

# Sequences a terminal acts on, 7-bit (ESC ...) and 8-bit (a C1 introducer):
_SEQUENCES = re.compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?         # CSI ... final byte
    | (?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])                   # OSC, DCS, SOS, PM, APC
      [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?                     # ... up to BEL or ST
    | \x1b[\x20-\x2f]*[\x30-\x7e]?                              # any other ESC sequence
    """,
    re.VERBOSE,
)
# C0, DEL and C1 (Cc); U+2028 LINE and U+2029 PARAGRAPH SEPARATOR (Zl, Zp); the invisible
# format characters (Cf: bidi overrides and isolates, zero-width space and joiners, BOM).
_CONTROL_CATEGORIES = ("Cc", "Zl", "Zp", "Cf")


def _is_control(char: str) -> bool:
    """C0, DEL, C1, the Unicode line/paragraph separators and the format characters."""
    return unicodedata.category(char) in _CONTROL_CATEGORIES


def control_problem(value: str) -> str | None:
    """Why ``value`` is not a name (the first control character in it, and where), or
    None where it is one line of printable text. A validation rule (``core.validator.Rule``)."""
    for index, char in enumerate(value):
        if _is_control(char):
            return (
                f"contains the control character U+{ord(char):04X} at position {index}; "
                "a name is one line of printable text"
            )
    return None


def one_line(text: str) -> str:
    """``text`` safe inside a comment line: one line, printable characters only (anything
    else becomes a space), runs of blanks collapsed."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def terminal_safe(text: str) -> str:
    """``text`` with every terminal control sequence and control character removed
    (newlines and tabs kept): what the CLI prints of a file's strings."""
    text = _SEQUENCES.sub("", text)
    return "".join(c for c in text if c in "\n\t" or not _is_control(c))
