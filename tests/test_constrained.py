"""Constrained decoding of tool calls (issue 29 lever 4): a turn can only name a declared tool, with arguments
valid for it and row-naming arguments the conversation holds; the verifier sees and accepts what it always did."""

from __future__ import annotations

import json
import os
import random

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llguidance")

from trainers.constrained import NUMBER, ToolCallConstraint, call_schema, conversation_numbers  # noqa: E402
from trainers.errors import ConfigError  # noqa: E402
from trainers.evaluation import model_policy, replay_trajectory, run_episodes  # noqa: E402
from trainers.formats import format_of, get_format  # noqa: E402
from world_format.evidence import KeySpace, conversation_evidence, key_space  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tinker_tiny: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tinker_tiny).eval(), AutoTokenizer.from_pretrained(tinker_tiny)


def _conversation(retail_kit: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    case = retail_kit.cases("eval")[0]
    observation = json.dumps({"id": 7, "orders": [{"id": 50123, "status": "shipped"}], "email": "ada@example.com"})
    messages = [*case.prompt.messages, {"role": "user", "content": "It is order 50124, my email is bo@example.com."},
                {"role": "tool", "name": "find_customer_by_email", "content": observation}]
    return messages, case.prompt.tools


def _accepts(constraint: ToolCallConstraint, tokenizer: Any, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]], text: str) -> bool:
    matcher = constraint.matcher(messages, tools).matcher
    return all(matcher.consume_token(t) for t in tokenizer.encode(text, add_special_tokens=False)) and \
        matcher.is_accepting()


def test_the_values_a_row_naming_argument_may_take_come_from_the_conversation(retail_kit: Any) -> None:
    messages, _ = _conversation(retail_kit)
    evidence = conversation_evidence(messages, key_space(retail_kit.world().world))
    assert {"bo@example.com", "ada@example.com"} <= set(evidence.values("string", "customers.email"))
    assert {50124, 50123} <= set(evidence.values("integer", "orders.id"))
    assert 7 in evidence.values("integer", "customers.id") and 7 not in evidence.values("integer", "orders.id")
    assert not conversation_evidence([{"role": "assistant", "content": "order 999"}],
                                     KeySpace(parameters={}, sources={})).values("integer", "orders.id")


def _arguments(schema: dict[str, Any] | None, tool: str) -> dict[str, Any] | None:
    """The arguments schema ``call_schema`` gives ``tool`` (None: the tool cannot be called)."""
    for option in (schema or {}).get("anyOf", []):
        if option["properties"]["name"]["const"] == tool:
            return option["properties"]["arguments"]
    return None


def test_an_observed_value_names_only_what_its_result_column_holds(retail_kit: Any) -> None:
    """The customer's id ``find_customer_by_email`` answered is no order id: before ``list_orders`` shows one, no
    tool that needs an order id can be called; after it, exactly the listed ids can be given."""
    world = retail_kit.world().world
    keys, tools = key_space(world), [tool.function_spec() for tool in world.tools]
    found = {"role": "tool", "name": "find_customer_by_email",
             "content": json.dumps({"id": 1045, "email": "ada@example.com", "name": "Ada Lee"})}
    messages = [{"role": "user", "content": "I'm ada@example.com: please cancel my latest order."}, found]
    schema = call_schema(tools, keys, messages)
    assert _arguments(schema, "get_order") is None and _arguments(schema, "cancel_order") is None
    assert _arguments(schema, "list_orders")["properties"]["customer_id"]["enum"] == [1045]
    listed = {"role": "tool", "name": "list_orders", "content": json.dumps([{"id": 50989, "total": 310.97},
                                                                             {"id": 50634, "total": 134.99}])}
    cancel = _arguments(call_schema(tools, keys, [*messages, listed]), "cancel_order")
    assert cancel is not None and cancel["properties"]["order_id"]["enum"] == [50989, 50634]
    # the customer's own words always count: an order number they state may be wrong, and the tool says so
    said = call_schema(tools, keys, [{"role": "user", "content": "Cancel order 12345, I'm ada@example.com."}])
    assert 12345 in _arguments(said, "cancel_order")["properties"]["order_id"]["enum"]
    hashed = conversation_evidence([{"role": "user", "content": "It is order #W8704143."}], keys)
    assert {"#W8704143", "W8704143"} <= set(hashed.values("string", "orders.id"))
    # an observation that is not JSON (an error) is text of unknown source
    error = call_schema(tools, keys, [*messages, {"role": "tool", "name": "list_orders",
                                                  "content": "error: order 777 is locked"}])
    assert 777 in _arguments(error, "get_order")["properties"]["order_id"]["enum"]


def test_names_runs_of_words_and_lists_of_keys_come_from_the_conversation(example_kits: dict[str, Path]) -> None:
    from world_format.kit import open_kit

    with open_kit(example_kits["library_desk"]) as kit:
        world = kit.world().world
    keys, tools = key_space(world), [tool.function_spec() for tool in world.tools]
    messages = [{"role": "user", "content": "I'm Ana Maria Lee, zip 97201. Renew my loans please."}]
    finder = _arguments(call_schema(tools, keys, messages), "find_patron_by_name_zip")
    assert finder is not None and "Ana Maria Lee" in finder["properties"]["name"]["enum"]
    assert "97201" in finder["properties"]["zip"]["enum"]
    unnumbered = [{"role": "user", "content": "I'm ana@example.com. Renew my loans please."}]
    assert _arguments(call_schema(tools, keys, unnumbered), "renew_loans") is None  # no patron or loan shown yet
    loans = {"role": "tool", "name": "list_loans", "content": json.dumps([{"loan_id": 11, "fine_cents": 250},
                                                                          {"loan_id": 12, "fine_cents": 0}])}
    patron = {"role": "tool", "name": "find_patron_by_name_zip", "content": json.dumps({"patron_id": 4})}
    renew = _arguments(call_schema(tools, keys, [*unnumbered, patron, loans]), "renew_loans")
    assert renew is not None and renew["properties"]["loan_ids"]["items"]["enum"] == [11, 12]
    assert renew["properties"]["patron_id"]["enum"] == [4]


def test_every_reference_call_of_every_example_kit_is_one_the_grammar_admits(example_kits: dict[str, Path]) -> None:
    """Constrained decoding can always write the kit's own executed chains: each tool call of every SFT row,
    against the schema built from the conversation before it (a call naming a row nobody showed would be refused;
    airline's compensation hand-off once named a booking the customer never gave)."""
    import jsonschema

    from world_format.kit import open_kit

    for name, path in sorted(example_kits.items()):
        with open_kit(path) as kit:
            keys = key_space(kit.world().world)
            rows = kit.rows()
        refused = []
        for row in rows:
            messages = row["messages"]
            for index, message in enumerate(messages):
                for call in message.get("tool_calls") or []:
                    instance = {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                    schema = call_schema(row["tools"], keys, messages[:index])
                    if schema is None or not jsonschema.Draft202012Validator(schema).is_valid(instance):
                        refused.append(instance)
        assert rows and not refused, (name, refused[:3])


def test_the_grammar_admits_declared_calls_with_valid_arguments_and_conversation_keys_only(
        retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    constraint = ToolCallConstraint(tokenizer, format_of(tokenizer), key_space(retail_kit.world().world))
    messages, tools = _conversation(retail_kit)

    def call(name: str, arguments: dict[str, Any]) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    accepts = lambda text: _accepts(constraint, tokenizer, messages, tools, text)  # noqa: E731
    assert accepts(call("get_order", {"order_id": 50124}))
    assert accepts(call("find_customer_by_email", {"email": "bo@example.com"}))
    assert accepts(call("get_order", {"order_id": 50123}) + "\n" + call("get_order", {"order_id": 50124}))
    assert accepts("Your order 50124 has shipped.")
    assert not accepts(call("get_order", {"order_id": 50125}))  # a number nobody said
    assert not accepts(call("find_customer_by_email", {"email": "bo@exampel.com"}))  # copied a character wrong
    assert not accepts(call("teleport", {"order_id": 50124}))  # not a declared tool
    assert not accepts(call("get_order", {"order_id": "50124"}))  # the schema's type
    assert not accepts(call("get_order", {}))  # a required field
    assert not accepts(call("issue_refund", {"order_id": 50124, "reason": "bored"}))  # the schema's enum
    assert not accepts("Sure, let me look. <tool_call>")  # an answer never writes a call tag
    assert accepts("Order 50124 has status shipped.\n" + call("get_order", {"order_id": 50124}))  # a step's say
    assert not accepts("Order 50124 has status shipped.\n" + call("get_order", {"order_id": 50125}))
    assert not accepts("Two lines\nof text\n" + call("get_order", {"order_id": 50124}))  # one line only
    assert not accepts("A <b> tag\n" + call("get_order", {"order_id": 50124}))


def test_the_numbers_a_text_turn_may_write_are_the_conversations_with_two_decimals_where_it_had_fewer() -> None:
    messages = [{"role": "system", "content": "Today is 2026-11-29."},
                {"role": "user", "content": "Refund order 50124?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_order", "arguments": {"order_id": 50124, "note": "x7"}}}]},
                {"role": "tool", "content": '{"total": 62.9, "paid": 10, "tax": 3.125}'}]
    assert conversation_numbers(messages) == sorted({
        "2026", "2026.00", "11", "11.00", "29", "29.00", "50124", "50124.00", "7", "7.00", "62.9", "62.90", "10",
        "10.00", "3.125"})


def test_grounded_text_turns_write_only_numbers_the_conversation_wrote(retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    keys = key_space(retail_kit.world().world)
    messages, tools = _conversation(retail_kit)
    observation = '{"id": 50124, "total": 346.98, "tax": 62.9}'
    messages = [*messages, {"role": "tool", "name": "get_order", "content": observation}]
    grounded = ToolCallConstraint(tokenizer, format_of(tokenizer), keys, grounded=True)
    constrained = ToolCallConstraint(tokenizer, format_of(tokenizer), keys)
    accepts = lambda text: _accepts(grounded, tokenizer, messages, tools, text)  # noqa: E731
    for text in ("Your order 50124 has shipped.", "You will get back $346.98.", "Tax was $62.90 and $62.9.",
                 "Refund 346.98, then order 50123 (ID 7).", "No numbers at all."):
        assert accepts(text), text
    for text in ("You will get back $346.97.", "Your order 50125 has shipped.", "Order 5012 is late.",
                 "It is 346.985.", "Order 50124.5", "Sure. <tool_call>"):
        assert not accepts(text), text
        # constrained decoding alone writes any number (the call tag stays refused by both)
        assert _accepts(constrained, tokenizer, messages, tools, text) is ("<tool_call>" not in text), text
    call = "<tool_call>\n" + json.dumps({"name": "get_order", "arguments": {"order_id": 50124}}) + "\n</tool_call>"
    assert accepts(call)  # tool calls are constrained as before, not grounded
    assert accepts("Looking up order 50124.\n" + call) and not accepts("Looking up order 50125.\n" + call)


def test_the_grounded_mask_leaves_only_digits_that_continue_a_conversation_number(
        retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    """The mask, not only the end of the turn, refuses a miscopied digit: while a text turn could still become the
    line before a call, its numbers are grounded too."""
    import torch

    _, tokenizer = tiny
    messages, tools = _conversation(retail_kit)
    messages = [*messages, {"role": "tool", "name": "get_order", "content": '{"id": 50124, "total": 346.98}'}]
    turn = ToolCallConstraint(tokenizer, format_of(tokenizer), key_space(retail_kit.world().world),
                              grounded=True).matcher(messages, tools)
    for token in tokenizer.encode("You will get back $346.9", add_special_tokens=False):
        turn.advance(token)
    logits = torch.zeros(len(tokenizer))
    turn.mask(logits)
    allowed = [tokenizer.decode([i]) for i in torch.isfinite(logits).nonzero()[:, 0].tolist()]
    assert allowed and all(text.startswith("8") for text in allowed), allowed[:10]


def test_every_text_turn_of_every_example_kit_writes_only_numbers_its_conversation_wrote(
        example_kits: dict[str, Path]) -> None:
    """Grounded decoding can write the kit's own answers and questions, but for one: retail's authored task that sums
    the customer's delivered orders without the calculator states a number no message wrote (a sum the agent
    computes in its head), which grounded decoding cannot write."""
    from world_format.kit import open_kit

    ungrounded = []
    for name, path in sorted(example_kits.items()):
        with open_kit(path) as kit:
            rows = kit.rows()
        texts = 0
        for row in rows:
            for index, message in enumerate(row["messages"]):
                if message["role"] == "assistant" and message.get("content"):  # answers, questions, say lines
                    texts += 1
                    allowed = set(conversation_numbers(row["messages"][:index]))
                    ungrounded += [(name, n, message["content"]) for n in NUMBER.findall(message["content"])
                                   if n not in allowed]
        assert texts, name
    assert ungrounded == [("retail_desk", "791.95", "Your delivered orders add up to $791.95.")]


def test_formats_that_do_not_write_tool_call_json_blocks_are_refused(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    with pytest.raises(ConfigError, match="--decoding free"):
        ToolCallConstraint(tokenizer, get_format("llama3"), KeySpace(parameters={}, sources={}))


def test_random_walks_through_the_grammar_are_calls_the_world_accepts(retail_kit: Any, tiny: tuple[Any, Any]) -> None:
    """Whatever tokens a sampler picks among those the mask allows, the call parses, names a declared tool and its
    arguments pass the world's own validator."""
    import torch

    _, tokenizer = tiny
    constraint = ToolCallConstraint(tokenizer, format_of(tokenizer), key_space(retail_kit.world().world))
    messages, tools = _conversation(retail_kit)
    runtime, rng, finished = retail_kit.world().runtime(), random.Random(0), 0
    fmt = format_of(tokenizer)
    try:
        for _ in range(12):
            turn = constraint.matcher(messages, tools)
            ids = tokenizer.encode("<tool_call>\n", add_special_tokens=False)
            for token in ids:
                turn.advance(token)
            for _ in range(200):
                logits = torch.zeros(len(tokenizer) + 3)
                turn.mask(logits)
                allowed = torch.isfinite(logits).nonzero()[:, 0].tolist()
                token = tokenizer.eos_token_id if tokenizer.eos_token_id in allowed else rng.choice(allowed)
                if token == tokenizer.eos_token_id:
                    break
                turn.advance(token)
                ids.append(token)
            else:
                continue
            finished += 1
            parsed = fmt.parse(tokenizer.decode(ids, skip_special_tokens=False))
            assert not parsed.parse_errors and parsed.tool_calls
            for found in parsed.tool_calls:
                tool = runtime.tools[found["name"]]
                assert not list(tool.validator.iter_errors(found["arguments"]))
    finally:
        runtime.close()
    assert finished >= 6


@pytest.mark.parametrize("decoding", ["constrained", "grounded"])
def test_constrained_episodes_are_judged_as_the_free_scoring_path_judges_their_messages(
        retail_kit: Any, tiny: tuple[Any, Any], decoding: str) -> None:
    model, tokenizer = tiny
    loaded = retail_kit.world()
    cases = retail_kit.cases("eval")[:3]
    runtime = loaded.runtime()
    try:
        policy = model_policy(model, tokenizer, 24, 3, decoding=decoding, world=loaded.world)
        episodes = run_episodes(policy, runtime, cases, 2)
        for case, episode in zip(cases, episodes, strict=True):
            replayed = replay_trajectory(runtime, case, episode.messages, max_turns=2)
            assert replayed.verdict == episode.verdict and replayed.trace == episode.trace
    finally:
        runtime.close()


def test_llguidance_compiles_every_example_tool_and_accepts_its_reference_call(
        example_kits: dict[str, Path], tiny: tuple[Any, Any]) -> None:
    """Each example tool's first reference call, written as the format writes it (arguments in the schema's
    order), is accepted by the compiled grammar of the turn it was made in; a keyword llguidance does not
    compile (airline's ``uniqueItems``) is left out of the grammar instead of failing the turn."""
    from world_format.kit import open_kit

    _, tokenizer = tiny
    for name, path in sorted(example_kits.items()):
        with open_kit(path) as kit:
            keys, rows = key_space(kit.world().world), kit.rows()
        constraint, seen = ToolCallConstraint(tokenizer, format_of(tokenizer), keys), set()
        for row in rows:
            order = {t["function"]["name"]: list(t["function"]["parameters"].get("properties", {}))
                     for t in row["tools"]}
            for index, message in enumerate(row["messages"]):
                calls = message.get("tool_calls") or []
                if len(calls) != 1 or calls[0]["function"]["name"] in seen:
                    continue
                function = calls[0]["function"]
                seen.add(function["name"])
                arguments = {key: function["arguments"][key] for key in order[function["name"]]
                             if key in function["arguments"]}
                lead = f"{message['content']}\n" if message.get("content") else ""
                text = (lead + "<tool_call>\n" + json.dumps({"name": function["name"], "arguments": arguments},
                                                     ensure_ascii=False) + "\n</tool_call>")
                assert _accepts(constraint, tokenizer, row["messages"][:index], row["tools"], text), (name, text)
        assert seen, name


def test_a_rendered_turn_that_restates_then_calls_parses_back_and_is_admitted_by_the_grammar(
        example_kits: dict[str, Path], tiny: tuple[Any, Any]) -> None:
    """Airline's first set_meal row in the tokenizer's own format: the deciding turn (the leg's status restated,
    then the call), as the template writes it, parses back to the same line and call, and the grammar compiled for
    that turn admits it."""
    from tool_format_support import assistant_turns, expected_calls

    from world_format.kit import open_kit

    _, tokenizer = tiny
    fmt = format_of(tokenizer)
    with open_kit(example_kits["airline_desk"]) as kit:
        keys, rows = key_space(kit.world().world), kit.rows()
    row = next(row for row in rows if row["metadata"]["template"] == "write_ok")
    turn = next(turn for turn in assistant_turns(fmt, row)[1]
                if turn.message.get("content") and turn.message.get("tool_calls"))
    parsed = fmt.parse(turn.written)
    assert parsed.content == turn.message["content"] and parsed.tool_calls == expected_calls(turn.message)
    assert parsed.content.endswith("has status confirmed.")
    position = row["messages"].index(turn.message)
    written = turn.written.removesuffix(fmt.end_tokens[0])
    constraint = ToolCallConstraint(tokenizer, fmt, keys)
    assert _accepts(constraint, tokenizer, row["messages"][:position], row["tools"], written), written
