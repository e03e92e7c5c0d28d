"""Java's number parsing and printing, where Hudi's column statistics go through them.

Hudi turns a statistic of one type into another (``org.apache.hudi.stats.ValueType``'s casts,
``HoodieTableMetadataUtil.coerceToComparable``) with the Java library: ``Long.parseLong`` /
``Integer.parseInt`` of the value's text, ``Double.parseDouble`` / ``Float.parseFloat``, and
``Long.toString`` / ``Double.toString`` / ``Float.toString`` into text. This module gives the
same results on Python values:

- ``parse_long`` / ``parse_int``: an optional ``+``/``-`` and ASCII digits only, in range
  (``NumberFormatException`` otherwise: ``None`` here);
- ``parse_double``: Java's decimal grammar (``FloatingDecimal.readJavaFormatString``): leading and
  trailing characters up to U+0020 ignored, ``NaN``, ``Infinity``, digits with an optional
  exponent and an optional ``f``/``F``/``d``/``D`` suffix; ``None`` otherwise. (Hexadecimal
  floats are not accepted here; a column value would not hold one.)
- ``java_double_text`` / ``java_float_text``: ``Double.toString`` / ``Float.toString``: the
  shortest digits that read back as the same value, plain notation for magnitudes in
  [10^-3, 10^7), otherwise ``d.dddE<n>``; ``NaN``, ``Infinity``, ``-Infinity``, ``0.0``, ``-0.0``;
- ``to_float32``: the nearest ``float`` (IEEE single) of a number, ties to even, as Java's
  ``(float)`` conversion of a ``long`` or ``double`` gives it.
"""

from __future__ import annotations

import math
import re
import struct

__all__ = [
    "INT_RANGE",
    "LONG_RANGE",
    "java_double_text",
    "java_float_text",
    "parse_double",
    "parse_int",
    "parse_long",
    "to_float32",
]

LONG_RANGE = (-(2**63), 2**63 - 1)
INT_RANGE = (-(2**31), 2**31 - 1)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")


def _parse_integer(text: str, bounds: tuple[int, int]) -> int | None:
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def parse_long(text: str) -> int | None:
    """``Long.parseLong``; None where Java throws ``NumberFormatException``."""
    return _parse_integer(text, LONG_RANGE)


def parse_int(text: str) -> int | None:
    """``Integer.parseInt``; None where Java throws ``NumberFormatException``."""
    return _parse_integer(text, INT_RANGE)


def parse_double(text: str) -> float | None:
    """``Double.parseDouble``; None where Java throws ``NumberFormatException``."""
    body = text.strip("".join(chr(c) for c in range(0x21)))
    match = _DECIMAL.fullmatch(body)
    if match is None:
        return None
    number = match.group(1)
    sign = -1.0 if body.startswith("-") else 1.0
    if number == "NaN":
        return math.nan
    if number == "Infinity":
        return sign * math.inf
    return sign * float(number.rstrip("fFdD"))


def to_float32(value: int | float) -> float:
    """The nearest single-precision value (ties to even), as a Python float."""
    if isinstance(value, int):
        # round the exact integer to 24 significant bits (going through a double first could
        # round twice for integers beyond 2**53)
        magnitude, bits = abs(value), abs(value).bit_length()
        if bits > 24:
            shift = bits - 24
            quotient, remainder = divmod(magnitude, 1 << shift)
            half = 1 << (shift - 1)
            if remainder > half or (remainder == half and quotient % 2):
                quotient += 1
            magnitude = quotient << shift
        value = float(magnitude if value >= 0 else -magnitude)
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:  # beyond the largest float: Java gives an infinity
        return math.copysign(math.inf, value)


def _shortest_digits(value: float, single: bool) -> tuple[str, int]:
    """(digits, exponent) with value == 0.digits * 10**exponent, the fewest digits that read back."""
    for precision in range(1, 18):
        text = f"{value:.{precision - 1}e}"
        back = float(text)
        if (to_float32(back) if single else back) == value:
            break
    mantissa, exp = text.split("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    return digits, int(exp) + 1


def _java_text(value: float, single: bool) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, exponent = _shortest_digits(abs(value), single)
    if 1e-3 <= abs(value) < 1e7:
        if exponent <= 0:
            return f"{sign}0.{'0' * -exponent}{digits}"
        whole, fraction = digits[:exponent].ljust(exponent, "0"), digits[exponent:]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent - 1}"


def java_double_text(value: float) -> str:
    """``Double.toString``."""
    return _java_text(value, single=False)


def java_float_text(value: float) -> str:
    """``Float.toString`` of a single-precision value (held in a Python float)."""
    return _java_text(value, single=True)
