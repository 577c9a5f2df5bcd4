"""Kubernetes resource quantities ("500m", "1Gi", "2e3") as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["parse_quantity"]

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+)|([numkMGTPE]|[KMGTPE]i))?$"
)
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_quantity(text: str) -> Decimal:
    """The value of quantity ``text``; raises ``ValueError`` naming it when it is not one."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a resource quantity (e.g. 500m, 1Gi, 2)")
    number, exponent, suffix = match.groups()
    value = Decimal(number)
    if exponent is not None:
        value *= Decimal(10) ** int(exponent)
    if suffix is not None:
        value *= _SUFFIX[suffix]
    return value
