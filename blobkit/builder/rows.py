"""Executed rows: a training case's reference chain replayed on an isolated copy of the seed, as a conversation.

No observation in a row is invented: every tool message is what the world returned when the
chain ran, and a case whose verifier does not pass its own replay gives no row.
"""

from __future__ import annotations

from typing import Any

from world_format.chain import final_answer, interleaved, observation_hash, run_chain
from world_format.conversation import Conversation, prompt_messages
from world_format.judge import judge
from world_format.models import Task
from world_format.runtime import WorldRuntime

from .config import Progress
from .split import Case


def replay_row(runtime: WorldRuntime, task: Task, ids: tuple[str, str], system: str,
               tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Execute a training case's chain and record the conversation; None if its verifier does not pass.

    ``ids`` is (task id, case id).
    """
    answer, answer_source = final_answer(task)
    with runtime.episode() as episode:
        result = run_chain(episode, task.reference, task.turns)
        verdict = judge(task, episode, answer)
    if not result.clean or not verdict.passed:
        return None
    conversation = Conversation.opening(system, task.instruction)
    for kind, index in interleaved(len(result.events), [turn.after_step for turn in task.turns]):
        if kind == "turn":
            conversation.ask(task.turns[index])
            continue
        event = result.events[index]
        [ident] = conversation.tool_calls([(event.tool, event.arguments)], task.reference[index].say or "")
        conversation.observation(ident, event.tool, event.observation)
    conversation.answer(answer)
    metadata = {
        "task_id": ids[0], "case_id": ids[1], "template": task.template,
        "sft_source": "reference_chain_replay", "final_answer_source": answer_source,
        "arguments_source": "reference_chain_arg_builder",
        "observation_hashes": [observation_hash(event.observation) for event in result.events],
        "verdict": verdict.outcome,
    }
    return {"messages": conversation.messages, "tools": tools, "metadata": metadata}


def case_record(case: Case, system: str | None = None, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A case as stored in the kit (eval cases also carry the prompt the model receives)."""
    task = case.instance.task
    record: dict[str, Any] = {
        "case_id": case.case_id, "task_id": case.instance.spec_id, "template": task.template, "side": case.side,
        "anchor": {"table": task.anchor.table, "key": task.anchor.key}, "entity": case.instance.entity,
        "task": task.model_dump(mode="json", by_alias=True), "probes": case.instance.probes,
        "distractor": None if case.instance.distractor is None else case.instance.distractor.model_dump(
            mode="json", by_alias=True),
    }
    if system is not None:
        record["prompt"] = {"messages": prompt_messages(system, task.instruction), "tools": tools}
    return record




def replay_rows(runtime: WorldRuntime, train: list[Case], progress: Progress) -> list[dict[str, Any]]:
    """Replay every training case; keep the rows whose verifier passes."""
    system, tools = runtime.world.system_prompt(), runtime.world.function_specs()
    rows = []
    for index, case in enumerate(train):
        progress("replay", index, len(train))
        row = replay_row(runtime, case.instance.task, (case.instance.spec_id, case.case_id), system, tools)
        if row is not None:
            rows.append(row)
    progress("replay", len(train), len(train))
    return rows
