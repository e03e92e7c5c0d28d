"""``hoodie.properties`` parsing takes C-level shortcuts (a regex for a key's end and for escapes
without ``\\uXXXX``): on random lines they must give what ``java.util.Properties.load``'s character
loop gives, written out here as the reference."""

from __future__ import annotations

import random

import pytest

from hoodied.hoodie.properties import _split_entry, _unescape, parse_java_properties

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _reference_split(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WS:
            break
        i += 1
    key = line[:i]
    while i < n and line[i] in _WS:
        i += 1
    if i < n and line[i] in "=:":
        i += 1
    while i < n and line[i] in _WS:
        i += 1
    return key, line[i:]


def _reference_unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        c = s[i]
        if c == "u":
            digits = s[i + 1 : i + 5]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("malformed")
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    text = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


#: What a properties line is made of, the troublesome characters weighted up.
_ALPHABET = [*"ab.z09_-{}\"[],", "\\", "\\", "=", ":", " ", "\t", "\f", "\\u0041", "\\uD83D\\uDE00", "\\u12",
             "é", "\ud83d"]


@pytest.mark.parametrize("seed", range(20))
def test_the_shortcuts_split_and_unescape_as_the_character_loop(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        line = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 30)))
        assert _split_entry(line) == _reference_split(line), line
        try:
            expected: str | None = _reference_unescape(line)
        except ValueError:
            expected = None
        if expected is None:
            with pytest.raises(ValueError):
                _unescape(line)
        else:
            assert _unescape(line) == expected, line


def test_a_hudi_schema_value_keeps_its_escaped_separators() -> None:
    text = 'hoodie.table.create.schema={"type"\\:"record","name"\\:"t"}\nhoodie.table.name=t\\\n  rips\n'
    assert parse_java_properties(text) == {
        "hoodie.table.create.schema": '{"type":"record","name":"t"}', "hoodie.table.name": "trips"}
