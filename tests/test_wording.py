"""Minted wording: numbers agree with their nouns, and a lint finds the defects minting used to teach."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, write_world
from kit_cache import cached_kit
from worlds import small_world

from blobkit.builder import BuildConfig, build_kit
from blobkit.errors import KitError
from blobkit.wording import counted, defects, kit_lint, lint
from world_format.kit import open_kit


@pytest.mark.parametrize(("text", "found"), [
    ("Order 50759 has 1 items.", ["plural_after_one"]),
    ("Order 50759 has 1 item.", []),
    ("Order 50759 has 3 items.", []),
    ("I can't upgrade order 5: this order has already left the warehouse..", ["doubled_punctuation"]),
    ("Wait... really?!", []),
    ("What is the total total across the bookings of customer 3030?", ["doubled_word"]),
    ("I need the opened on on ticket 4300, please.", ["doubled_word"]),
    ("What is the account_status of employee 156?", ["raw_column_name"]),
    ("The customer zainab_grant@yahoo.com has 1 order.", []),
    ("Customer 1 has 3 orders.", []),
])
def test_the_lint_names_each_kind_of_defect_and_passes_clean_text(text: str, found: list[str]) -> None:
    assert defects(text, ["account_status", "id"], ["items", "orders"]) == found


def test_counts_agree_with_their_nouns() -> None:
    assert [counted(n, "items") for n in (0, 1, 2)] == ["0 items", "1 item", "2 items"]
    assert counted(1, "access grants") == "1 access grant" and counted(1, "status") == "1 status"
    assert lint(["1 orders", "1 orders", "fine."], nouns=["orders"]) == {"plural_after_one": 2}


@pytest.mark.parametrize("world", ["retail_desk", "it_helpdesk", "airline_desk"])
def test_the_minted_text_of_every_example_kit_has_no_wording_defect(world: str,
                                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    with open_kit(cached_kit(ROOT / "examples" / world / "world.json", tmp_path_factory,
                             BuildConfig(train_cases_per_task=6, eval_cases_per_task=2))) as kit:
        report = kit_lint(kit)
    assert report["minted_texts"] > 50 and report["defects"] == {}


def test_a_world_whose_own_words_make_a_minted_defect_fails_the_build_and_writes_nothing(tmp_path: Path) -> None:
    world = small_world()
    world["state"]["anchors"][1]["label"] = "order order"
    with pytest.raises(KitError, match=r"minted \w+ text has a wording defect \(doubled_word\)"):
        build_kit(write_world(tmp_path / "w", world), tmp_path / "out", BuildConfig())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_value_that_ends_a_sentence_is_not_given_a_second_full_stop() -> None:
    from blobkit.wording import sentence
    quoted = "The note of order 115 is Leave at the back door."
    assert sentence(quoted) == quoted
    assert sentence("The status of order 5 is shipped") == "The status of order 5 is shipped."
    assert sentence("Is it?") == "Is it?"
