"""Verification codes as people read and type them: grouped for reading, and a typed code
brought back to its digits.

A code is derived and hashed in notifier.tokens, judged in the database (schema
confirm_code_v1) and answered in notifier.storage.codes; here is only its face.
"""

from __future__ import annotations

import unicodedata

# What a person (or their phone's autofill) may put between digits: spaces of every kind
# and dashes of every kind. NFKC first makes full-width digits plain ones.
_SEPARATORS = dict.fromkeys(map(ord, " \t\r\n-\u2010\u2011\u2012\u2013\u2014\u2212"))
# Longer input is not a code of ours: judged wrong without reading it all.
MAX_INPUT_CHARS = 64


def normalize(typed: str) -> str:
    """`typed` as the code it stands for: spaces and dashes dropped, full-width digits made
    plain. Anything else is kept, so a wrong code stays wrong (and is answered like any
    other wrong code)."""
    folded = unicodedata.normalize("NFKC", typed[:MAX_INPUT_CHARS])
    return "".join(folded.split()).translate(_SEPARATORS)


def grouped(code: str) -> str:
    """The code as an email shows it: two groups up to eight digits ("123 456",
    "1234 5678"), three beyond ("123 456 789", "123 456 7890"); a reader keeps a group in
    mind at a time, and the space is dropped again when it is typed or pasted."""
    if len(code) <= 8:
        half = len(code) // 2
        return f"{code[:half]} {code[half:]}"
    return f"{code[:3]} {code[3:6]} {code[6:]}"
