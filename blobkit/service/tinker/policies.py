"""An administrator's policy, checked at ``create_model`` and at every operation; refusals name the rule.

A key is bound by its own policy if it has one, else by its workspace's; with neither, nothing may
be trained (deny by default: an administrator approves what a workspace may do). The rules: the base
must be one of ``models`` (a script's model argument never widens them), the LoRA rank at most
``max_lora_rank``, the tokens the bound train jobs used (forward/backward plus sampled) within
``max_tokens``, and the clock before ``deadline``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from blobkit.errors import PolicyError

from ..records import Principal
from ..store import ServiceStore
from . import tables
from .records import Policy


def _refuse(policy: Policy, rule: str, detail: str) -> PolicyError:
    bound = f"key {policy.user}" if policy.user else "every key"
    return PolicyError(f"refused by the policy of workspace {policy.workspace!r} ({bound}), rule {rule}: {detail}")


def binding(store: ServiceStore, caller: Principal) -> Policy:
    """The policy that binds the caller; PolicyError when there is none."""
    policy = tables.policy_for(store, caller.workspace, caller.key_id)
    if policy is None:
        raise PolicyError(f"no policy permits Tinker training in workspace {caller.workspace!r}: an administrator "
                          f"sets one with blobkit serve policy set --store DIR --workspace {caller.workspace} "
                          "--models ID --max-lora-rank R")
    return policy


def check_model(policy: Policy, base_model: str, rank: int | None) -> None:
    """The base is permitted and the rank within the limit; PolicyError naming the rule otherwise."""
    if base_model not in policy.models:
        raise _refuse(policy, "models", f"base model {base_model!r} is not permitted (permitted: "
                                        f"{', '.join(policy.models)})")
    if rank is not None and rank > policy.max_lora_rank:
        raise _refuse(policy, "max-lora-rank", f"LoRA rank {rank} is over the limit of {policy.max_lora_rank}")


def check_operation(store: ServiceStore, policy: Policy, tokens: int = 0) -> None:
    """Before the deadline, and ``tokens`` more fit the budget; PolicyError naming the rule otherwise."""
    if policy.deadline is not None and time.time() >= policy.deadline:
        when = datetime.fromtimestamp(policy.deadline, UTC).isoformat(timespec="seconds")
        raise _refuse(policy, "deadline", f"the deadline {when} has passed")
    if policy.max_tokens is not None:
        used = tables.tokens_used(store, policy)
        if used + tokens > policy.max_tokens:
            raise _refuse(policy, "max-tokens", f"the token budget is exhausted ({used} of {policy.max_tokens} "
                                                f"used; this request needs {tokens})")


def parse_deadline(text: str) -> float:
    """An ISO 8601 time (a zone, or UTC when none) as Unix time; ValueError when unreadable."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
