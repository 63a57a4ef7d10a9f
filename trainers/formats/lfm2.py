"""LFM2's tool format: Python-style calls between ``<|tool_call_start|>`` and ``<|tool_call_end|>``.

From LiquidAI's LFM2 model cards (LiquidAI/LFM2-350M, "Tool use") and chat template: tools are a
JSON list between ``<|tool_list_start|>``/``<|tool_list_end|>`` in the system prompt, the assistant
writes ``<|tool_call_start|>[get_order(order_id=1042), ...]<|tool_call_end|>``, and results come back
in the ``tool`` role between ``<|tool_response_start|>``/``<|tool_response_end|>``. The template
writes string arguments in single quotes, lists and objects as JSON, other values with Python's
``str`` (``True``, ``None``); the parser reads the call list with :mod:`ast` (never evaluating it)
and accepts JSON's ``true``/``false``/``null`` inside nested values.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from world_format.jsontext import lone_surrogate

from .format import ToolFormat
from .parsed import ParsedTurn, strip_tokens

CALL_OPEN = "<|tool_call_start|>"
CALL_CLOSE = "<|tool_call_end|>"
END_TOKENS: tuple[str, ...] = ("<|im_end|>",)
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def literal(node: ast.AST) -> Any:
    """The JSON value a literal expression node stands for; ValueError for anything else."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd) and isinstance(
            node.operand, ast.Constant) and isinstance(node.operand.value, int | float) and not isinstance(
            node.operand.value, bool):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, ast.List | ast.Tuple):
        return [literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        keys = [literal(key) if key is not None else None for key in node.keys]
        if not all(isinstance(key, str) for key in keys):
            raise ValueError("object keys must be strings")
        return {key: literal(value) for key, value in zip(keys, node.values, strict=True)}
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    raise ValueError(f"{type(node).__name__} is not a literal value")


def _call(node: ast.AST) -> dict[str, Any]:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("expected name(key=value, ...)")
    if node.args or any(keyword.arg is None for keyword in node.keywords):
        raise ValueError(f"{node.func.id}: arguments must be passed by name")
    arguments = {k.arg: literal(k.value) for k in node.keywords if k.arg}
    broken = lone_surrogate(arguments)
    if broken is not None:
        raise ValueError(f"{node.func.id}: argument {broken} holds a lone UTF-16 surrogate (no character)")
    return {"name": node.func.id, "arguments": arguments}


def _parse_block(body: str, first: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The calls in one ``[call, ...]`` block, or one error for the whole block."""
    where = f"tool call {first}"
    try:
        tree = ast.parse(body.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [], [f"{where}: not a Python-style call list ({type(exc).__name__})"]
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    try:
        return [_call(node) for node in nodes], []
    except (ValueError, RecursionError) as exc:
        return [], [f"{where}: {exc}"]


def parse_lfm2(text: str) -> ParsedTurn:
    """Split generated text into Python-style calls, content and per-block parse errors."""
    text = strip_tokens(text, END_TOKENS)
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        outside.append(text[pos:match.start()])
        pos = match.end()
        found, failed = _parse_block(match.group(1), len(calls) + len(errors))
        calls += found
        errors += failed
    rest = text[pos:]
    if CALL_OPEN in rest:
        outside.append(rest[:rest.find(CALL_OPEN)])
        errors.append(f"tool call {len(calls) + len(errors)}: unterminated {CALL_OPEN} block")
    else:
        outside.append(rest)
    return ParsedTurn(tool_calls=calls, content="".join(outside).replace(CALL_CLOSE, "").strip(), parse_errors=errors)


LFM2 = ToolFormat(
    name="lfm2", template_file="lfm2.jinja", end_tokens=END_TOKENS,
    control_tokens=("<|startoftext|>", "<|im_start|>", "<|im_end|>", CALL_OPEN, CALL_CLOSE, "<|tool_list_start|>",
                    "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>"),
    parser=parse_lfm2, mask_trail="\n", bos_token="<|startoftext|>",
    source="LiquidAI's LFM2 chat template (LiquidAI/LFM2-1.2B since 40f3da0) as TRL 1.16 ships it for training "
           "(trl/chat_templates/lfm2_v2_training.jinja); LFM2 model cards, Python-style tool calls")
