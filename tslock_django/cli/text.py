"""What a store holds, made safe to print on a terminal."""

from __future__ import annotations

import unicodedata

# Characters that would act on a terminal instead of being shown (ESC, BEL, CR, LF,
# ...), or change how the rest of the line is read (bidi overrides, line separators).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with control and formatting characters written as escapes (``\\x1b``,
    ``\\u202e``) and backslashes doubled, so what a store holds cannot move the cursor,
    forge a row or hide itself, and the escape is never ambiguous."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif unicodedata.category(char) in _UNSAFE_CATEGORIES:
            code = ord(char)
            out.append(
                f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            )
        else:
            out.append(char)
    return "".join(out)
