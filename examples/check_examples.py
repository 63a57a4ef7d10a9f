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
from typing import Any

from world_format.loader import load_world
from world_format.models import ArgRef, Task, Tool
from world_format.runtime import Episode, WorldRuntime
from world_format.vcode import evaluate, json_pointer

EXAMPLES = Path(__file__).resolve().parent


def run_reference(ep: Episode, task: Task) -> None:
    observations: list[Any] = []
    for index, step in enumerate(task.reference):
        arguments = {name: json_pointer(observations[value.from_step], value.pointer) if isinstance(value, ArgRef)
                     else value for name, value in step.arguments.items()}
        event = ep.call(step.tool, arguments)
        if event.error != step.expect_error:
            raise AssertionError(f"step {index} {step.tool}({arguments}) -> {event.observation}")
        observations.append(event.observation)


def check_task(runtime: WorldRuntime, index: int, task: Task) -> None:
    with runtime.episode() as ep:
        run_reference(ep, task)
        verdict = evaluate(task.vcode, ep, task.answer, task.answer)
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
    param, target = next(iter(tool.anchors.items()))
    table, column = target.split(".")
    keys = [row[0] for row in runtime.pristine.execute(f"SELECT {column} FROM {table} ORDER BY {column}")]
    extra = {name: spec["enum"][0] for name, spec in tool.parameters["properties"].items()
             if name != param and name in tool.parameters.get("required", []) and "enum" in spec}
    held, refused = [], []
    for key in keys:
        with runtime.episode() as ep:
            event = ep.call(tool.name, {param: key, **extra})
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
        ok, bad = ep.call(tool.name, {param: held[0], **extra}), ep.call(tool.name, {param: refused[0], **extra})
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
