"""The registry of wrong agents is the one definition: the gate, ``blobkit adversary``, ``blobkit info``, the spec
and the README read it by the same names."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT
from typer.testing import CliRunner

from blobkit.adversaries import AGENT_NAMES
from blobkit.builder.agents import AGENTS, NAMES, REFERENCE, spec_table, with_spec_table
from blobkit.builder.gate import verdicts
from blobkit.cli import app


def test_every_agent_is_one_module_with_one_name() -> None:
    modules = {agent.plan.__module__ for agent in AGENTS}
    assert len(modules) == len(AGENTS)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", name) for name in NAMES)
    assert (REFERENCE, *NAMES) == AGENT_NAMES


def test_the_spec_table_is_the_registry() -> None:
    spec = (ROOT / "spec" / "world-format.md").read_text(encoding="utf-8")
    assert with_spec_table(spec) == spec, "spec/world-format.md's wrong-agent table differs: run make schema"
    assert spec_table() in spec


def test_the_readme_table_lists_every_agent_in_the_registry_order() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| adversary (`blobkit adversary --agent`)"):]
    table = table[:table.index("\n\n")]
    listed = re.findall(r"^\| `([a-z-]+)`", table, re.M)
    assert listed == [*NAMES, REFERENCE]


def test_a_kit_records_each_agent_under_its_name_and_info_and_adversary_use_it(kit_path: Path) -> None:
    from world_format.kit import open_kit

    with open_kit(kit_path) as kit:
        case = kit.cases("eval")[0]
    assert set(case.probes) == {*NAMES, "write_removal"}
    info = CliRunner().invoke(app, ["info", str(kit_path)])
    assert info.exit_code == 0, info.output
    assert [line.split(":")[0].strip() for line in info.output.splitlines()
            if re.match(r"^    [a-z-]+: \d+/\d+$", line)] == list(NAMES)
    unknown = CliRunner().invoke(app, ["adversary", "--kit", str(kit_path), "--agent", "hedged"])
    assert unknown.exit_code != 0 and "hedger" in str(unknown.exception)


def test_verdicts_name_every_agent() -> None:
    assert set(verdicts({})) == {*NAMES, "write_removal"}
