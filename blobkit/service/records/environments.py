"""Environments: a world to train on, or a cluster plane."""

from __future__ import annotations

from typing import Literal

from world_format.models import Procedures

from .base import Record


class ToolInfo(Record):
    """One tool the world declares."""

    name: str
    """The tool's name."""
    effect: str
    """``read`` or ``write``."""
    parameters: list[str]
    """Its parameter names."""
    preconditions: int
    """How many preconditions guard it."""


class Trainability(Record):
    """What ``company inspect`` says about the world."""

    trainable: bool
    """Whether a job can train on it."""
    verdict: str
    """One line: trainable, or not and why."""
    reasons: list[str]
    """Every reason it is not trainable (empty when it is)."""
    tasks_admitted: int | None = None
    """Tasks minting and the gate admitted."""
    train_cases: int | None = None
    """Training cases of the company build."""
    eval_cases: int | None = None
    """Held-out cases of the company build."""
    held_out_entities: int | None = None
    """Independent entities the held-out cases concern."""
    held_out_minimum: int
    """Fewest independent held-out entities a trainable world needs."""


class WorldInfo(Record):
    """The world an environment holds."""

    id: str
    """The world's identity id."""
    name: str
    """Its display name."""
    sha256: str
    """The world's content sha256 (as the loader computes it)."""
    form: str
    """``single-file`` (world.json) or ``packaged`` (a directory with manifest)."""
    domain: str | None = None
    """Its business domain ("retail support"); None for environments registered before it was recorded."""
    description: str | None = None
    """What the service does and who the agent serves; None for environments registered before it was recorded."""


class AnchorInfo(Record):
    """One anchor table of the world's state: the rows independent cases are built around (customers, tickets)."""

    table: str
    """The anchor table."""
    rows: int
    """Rows it holds in the seed."""


class Environment(Record):
    """A registered environment: a world to train on, or a cluster-plane environment (``tenv_``) that is not."""

    env_id: str
    """``env_…`` (a world) or ``tenv_…`` (cluster plane: fronts providers' MCP servers, holds no world)."""
    kind: Literal["world", "cluster_plane"]
    """What it is."""
    name: str
    """Display name."""
    created_at: float
    """Unix time it was registered."""
    lease_expires_at: float | None
    """Unix time its serving lease ends (None: no lease); after it, training requests answer 410."""
    source_sha256: str | None
    """sha256 of the uploaded source (world.json bytes or the .tar.zst); None for a cluster plane."""
    source_form: Literal["world.json", "package"] | None
    """How the source was uploaded."""
    world: WorldInfo | None
    """The world (None for a cluster plane)."""
    policies: int | None
    """Policies the world states."""
    tools: list[ToolInfo]
    """Tools it declares."""
    procedures: Procedures | None
    """The procedures its policies declare as data (identify first, check before a write…)."""
    anchors: list[AnchorInfo] = []
    """The state's anchor tables and their rows (empty for a cluster plane)."""
    trainability: Trainability | None
    """``company inspect``'s verdict (None for a cluster plane)."""


class EnvironmentList(Record):
    """``GET /api/v1/twin/environments``."""

    environments: list[Environment]
    """The caller's environments, oldest first."""
