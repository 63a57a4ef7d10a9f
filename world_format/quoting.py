"""How the world quotes a value to a customer: money in its major unit with its symbol, at its declared places.

A column with ``currency`` is money: ``quoted(1234.5, total)`` is ``"$1234.50"``; with ``minor_units`` the stored
integer is cents (``123450`` is quoted the same). Minted answers, minted confirmation requests and the confirmation
judgement (:mod:`world_format.confirmation`) all quote through here, so a check and the text it reads agree.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from .models import Column
from .values import rounded, to_decimal


def plain(value: Any) -> Any:
    """An integer stays an integer; a real or decimal becomes the exact decimal text it stands for."""
    if isinstance(value, int):
        return value
    number = to_decimal(value)
    assert number is not None
    return int(number) if number == number.to_integral_value() else format(number, "f")


def amount(value: Any, column: Column | None) -> Any:
    """A stored value as the world quotes it: money in the major unit (cents / 10**decimals), rounded to the
    column's declared places; anything else unchanged."""
    if column is None or column.decimals is None or not isinstance(value, int | float | Decimal) \
            or isinstance(value, bool):
        return value
    number = to_decimal(value)
    assert number is not None
    if column.minor_units:
        number = number.scaleb(-column.decimals)
    return rounded(number, column.decimals, column.rounding)


def quoted(value: Any, column: Column | None) -> str:
    """How an answer states a value: money with its currency symbol at the declared places ("$310.97")."""
    shown = amount(value, column)
    if column is not None and column.currency and isinstance(shown, Decimal):
        return f"{column.currency}{shown:.{column.decimals}f}" if column.decimals is not None \
            else f"{column.currency}{plain(shown)}"
    return str(plain(shown) if isinstance(shown, Decimal) else shown)
