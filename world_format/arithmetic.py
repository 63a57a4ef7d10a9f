"""The ``calculate`` built-in: arithmetic on decimal numbers, parsed here, never executed as code.

A world may declare a pure tool with ``"builtin": "calculate"`` (an agent's calculator, as real desks give one):
its ``expression`` argument is read by the small grammar below and evaluated with exact decimals, so
``"1193.51 - 25.5 * 2"`` is ``"1142.51"`` and ``0.1 + 0.2`` is ``0.3``. Anything else — a name, a call, an
attribute, a power, a string — is a tool error, not code: there is no ``eval``.

    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := ("+" | "-") factor | number | "(" expression ")"
    number     := digits ["." digits] | "." digits
"""

from __future__ import annotations

import re
from decimal import Decimal, DivisionByZero, InvalidOperation, localcontext

MAX_EXPRESSION_CHARS = 500
"""Longest expression evaluated."""
MAX_DEPTH = 32
"""Deepest nesting of parentheses and signs."""
PRECISION = 34
"""Significant digits of every intermediate result (decimal128)."""
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(.))")


class CalculationError(ValueError):
    """An expression the calculator cannot evaluate (its message says why)."""


def _tokens(expression: str) -> list[str]:
    tokens = []
    for number, other in _TOKEN.findall(expression):
        if other and other not in "+-*/()":
            raise CalculationError(f"unsupported character {other!r}: only numbers, + - * / and parentheses")
        tokens.append(number or other)
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.at = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise CalculationError("the expression ends too early")
        self.at += 1
        return token

    def expression(self, depth: int) -> Decimal:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            value = value + self.term(depth) if self.take() == "+" else value - self.term(depth)
        return value

    def term(self, depth: int) -> Decimal:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value = value * self.factor(depth)
            else:
                divisor = self.factor(depth)
                if divisor == 0:
                    raise CalculationError("division by zero")
                value = value / divisor
        return value

    def factor(self, depth: int) -> Decimal:
        if depth > MAX_DEPTH:
            raise CalculationError(f"the expression nests deeper than {MAX_DEPTH}")
        token = self.take()
        if token in ("+", "-"):
            value = self.factor(depth + 1)
            return value if token == "+" else -value
        if token == "(":
            value = self.expression(depth + 1)
            if self.take() != ")":
                raise CalculationError("a parenthesis is not closed")
            return value
        if token[0].isdigit() or token[0] == ".":
            return Decimal(token)
        raise CalculationError(f"unexpected {token!r}")


def calculate(expression: str) -> str:
    """The value of ``expression`` as plain decimal text ("1142.51", "3", "-0.5"); CalculationError (a ValueError)
    naming the problem for anything the grammar does not read."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = _tokens(expression)
    if not tokens:
        raise CalculationError("the expression is empty")
    with localcontext() as context:
        context.prec = PRECISION
        context.traps[DivisionByZero] = True
        try:
            parser = _Parser(tokens)
            value = parser.expression(0)
            if parser.peek() is not None:
                raise CalculationError(f"unexpected {parser.peek()!r}")
            value = +value  # rounded to the context's precision
        except (InvalidOperation, DivisionByZero, OverflowError):
            raise CalculationError("the result is out of range") from None
        if value == value.to_integral_value():
            return str(int(value))
        return format(value.normalize(), "f")
