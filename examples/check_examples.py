"""Check the example worlds: they load, their authored tasks discriminate, their write tools refuse properly.

For every ``examples/*/world.json``:

* ``load_world`` succeeds (models, seed build, semantic validation);
* each authored task's reference chain runs (threading ``$from`` references) and its verifier passes,
  while a null episode (no calls, no answer) fails;
* each write tool is tried on every row of the anchor table its key parameter maps to: the precondition
  must hold for some rows and fail for others (with one of the tool's declared error messages), and
  the share of rows where it holds is printed.

Run with ``.venv/bin/python examples/check_examples.py``; exits non-zero on the first problem.
"""

from __future__ import annotations

import sys
from pathlib import Path

from world_format.chain import final_answer, run_chain
from world_format.family import fill, iter_family_rows
from world_format.loader import load_world
from world_format.models import Task, Tool
from world_format.runtime import WorldRuntime
from world_format.vcode import evaluate

EXAMPLES = Path(__file__).resolve().parent


def filled(runtime: WorldRuntime, task: Task) -> Task:
    """The task itself, or a family task filled in from the first row of its query that passes."""
    if task.family is None:
        return task
    for row in iter_family_rows(runtime, task):
        case = fill(task, row)
        with runtime.episode() as ep:
            if run_chain(ep, case.reference, case.turns).clean:
                return case
    raise AssertionError("no row of the family's query runs its reference chain cleanly")


def check_task(runtime: WorldRuntime, index: int, task: Task) -> None:
    task = filled(runtime, task)
    with runtime.episode() as ep:
        chain = run_chain(ep, task.reference, task.turns)
        if not chain.clean:
            raise AssertionError(f"task {index}: {chain.problem}")
        answer, _ = final_answer(task)
        verdict = evaluate(task.vcode, ep, answer, task.answer)
        if not verdict.passed:
            raise AssertionError(f"task {index}: reference chain does not pass: {verdict.reason}")
        changed = [(change.table, change.key) for change in ep.changes()]
    with runtime.episode() as ep:
        null = evaluate(task.vcode, ep, None, task.answer)
        if null.outcome != "fail":
            raise AssertionError(f"task {index}: a null episode gives {null.outcome!r}, expected 'fail'")
    print(f"  task {index} ({task.anchor.table} {task.anchor.key}): reference passes, null fails "
          f"({null.reason}); changes {changed}")


def check_write_tool(runtime: WorldRuntime, tool: Tool) -> None:
    errors = {precondition.error for precondition in tool.preconditions}
    if not errors:
        raise AssertionError(f"write tool {tool.name} has no precondition")
    if not tool.anchors:
        print(f"  {tool.name}: names no anchor row (its authored tasks exercise it)")
        return
    targets = [(param, *target.split(".")) for param, target in tool.anchors.items()]
    table = targets[0][1]
    targets = [target for target in targets if target[1] == table]
    properties = tool.parameters["properties"]
    unfilled = [name for name in tool.parameters.get("required", []) if name not in {t[0] for t in targets}
                and "enum" not in properties[name]]
    if unfilled or any(properties[param].get("type") == "array" for param, _, _ in targets):
        print(f"  {tool.name}: takes {unfilled or 'a list'} from other rows (a list of the row's children, one of "
              "the customer's own rows): the kit's gated cases exercise it")
        return
    columns = ", ".join(column for _, _, column in targets)
    keys = [dict(zip([param for param, _, _ in targets], row, strict=True))
            for row in runtime.pristine.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}")]
    extra = {name: spec["enum"][0] for name, spec in tool.parameters["properties"].items()
             if name not in tool.anchors and name in tool.parameters.get("required", []) and "enum" in spec}
    held, refused = [], []
    for key in keys:
        with runtime.episode() as ep:
            event = ep.call(tool.name, {**key, **extra})
            if event.error:
                if event.observation["error"] not in errors:
                    raise AssertionError(f"{tool.name}({key}): unexpected error {event.observation}")
                refused.append(key)
            else:
                if not ep.changes():
                    raise AssertionError(f"{tool.name}({key}) succeeded but changed nothing")
                held.append(key)
    if not held or not refused:
        raise AssertionError(f"{tool.name}: precondition holds for {len(held)} and fails for {len(refused)} rows")
    with runtime.episode() as ep:
        ok, bad = ep.call(tool.name, {**held[0], **extra}), ep.call(tool.name, {**refused[0], **extra})
    print(f"  {tool.name}: holds for {len(held)}/{len(keys)} {table} ({100 * len(held) / len(keys):.0f}%); "
          f"e.g. {held[0]} -> {ok.observation}; {refused[0]} -> {bad.observation}")


def main() -> int:
    worlds = sorted(EXAMPLES.glob("*/world.json"))
    for path in worlds:
        loaded = load_world(path)
        world = loaded.world
        size = path.stat().st_size
        assert size < 1024 * 1024, f"{path} is {size} bytes"
        print(f"{path.relative_to(EXAMPLES)}: {world.identity.id}, {size} bytes, sha256 {loaded.sha256}")
        runtime = loaded.runtime()
        try:
            for anchor in world.state.anchors:
                count = runtime.pristine.execute(f"SELECT count(*) FROM {anchor.table}").fetchone()[0]
                assert count >= 100, f"anchor table {anchor.table} has only {count} rows"
            assert len(world.tasks) >= 2, "fewer than two authored tasks"
            for index, task in enumerate(world.tasks):
                check_task(runtime, index, task)
            for tool in world.tools:
                if tool.effect == "write":
                    check_write_tool(runtime, tool)
        finally:
            runtime.close()
    print(f"{len(worlds)} example worlds OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
