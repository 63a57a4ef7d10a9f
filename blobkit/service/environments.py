"""Environments: register a world (checked, inspected, stored content-addressed) or a cluster plane; list, read.

A world is loaded with the hostile-input loader and inspected exactly as ``blobkit company inspect`` does
(:func:`blobkit.company.inspect_source`: minting, the gate, the split, the held-out minimum); its bytes are
kept as a blob. Nothing is written when the world is invalid. A cluster-plane environment (``tenv_…``) fronts
providers' MCP servers through a gateway and holds no world: it is listed, never trained on.
"""

from __future__ import annotations

import secrets
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from blobkit.company import CompanyConfig, inspect_source
from blobkit.company.held_out import MIN_HELD_OUT_ENTITIES
from blobkit.errors import LeaseExpiredError, NotFoundError, PlaneNotTrainableError, WorldFormatError
from world_format.canonical import canonical_json

from .records import AnchorInfo, Environment, EnvironmentList, ToolInfo, Trainability, WorldInfo
from .sources import materialize, pack_source, source_form
from .store import ServiceStore

MAX_UPLOAD_BYTES = 1 << 20
"""Largest world accepted over HTTP (1 MiB); larger worlds are registered from the server's disk."""
TOO_LARGE_HINT = ("train a world this large on the company machine instead: blobkit company train --source "
                  "./world.json --base-model BASE --job-store DIR --run (or register it from the server's disk with "
                  "blobkit serve env add --store DIR --workspace W --source PATH)")
COLUMNS = "id, kind, name, created_at, lease_expires_at, source_sha256, source_form, info"


def _trainability(report: dict[str, Any]) -> Trainability:
    admission = report.get("admission") or {}
    entities = admission.get("independent_entities") or {}
    return Trainability(trainable=bool(report["trainable"]), verdict=str(report["verdict"]),
                        reasons=list(report["reasons"]), tasks_admitted=admission.get("tasks_admitted"),
                        train_cases=admission.get("train_cases"), eval_cases=admission.get("eval_cases"),
                        held_out_entities=entities.get("eval"), held_out_minimum=MIN_HELD_OUT_ENTITIES)


def _world_info(path: Path) -> dict[str, Any]:
    """Identity, tools, procedures and ``company inspect``'s verdict; WorldFormatError when it is no valid world."""
    from world_format.loader import load_world

    report = inspect_source(path, CompanyConfig())
    if not report["valid"]:
        raise WorldFormatError(f"not a valid world: {'; '.join(report['reasons'])}")
    loaded = load_world(path)
    world = loaded.world
    tools = [ToolInfo(name=t["name"], effect=t["effect"], parameters=t["parameters"], preconditions=t["preconditions"])
             for t in report["tools"]]
    return {"name": world.identity.name,
            "world": WorldInfo(id=world.identity.id, name=world.identity.name, sha256=loaded.sha256,
                               form=loaded.form, domain=world.identity.domain,
                               description=world.identity.description).model_dump(mode="json"),
            "policies": len(world.policies), "tools": [t.model_dump(mode="json") for t in tools],
            "procedures": world.procedures.model_dump(mode="json", by_alias=True),
            "anchors": [AnchorInfo(table=table, rows=rows).model_dump(mode="json")
                        for table, rows in report["state"]["anchor_rows"].items()],
            "trainability": _trainability(report).model_dump(mode="json")}


def _insert(store: ServiceStore, workspace: str, env_id: str, kind: str, name: str, info: dict[str, Any],
            lease_hours: float | None, source: tuple[str, str] | None) -> Environment:
    now = time.time()
    lease = None if lease_hours is None else now + lease_hours * 3600

    with store.write() as conn:
        store.ensure_workspace(conn, workspace)
        if source is not None:
            conn.execute("INSERT OR IGNORE INTO blobs (sha256, bytes, created_at) VALUES (?, ?, ?)",
                         (source[0], store.blobs.existing(source[0]).stat().st_size, now))
        conn.execute(f"INSERT INTO environments ({COLUMNS}, workspace) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (env_id, kind, name, now, lease, None if source is None else source[0],
                      None if source is None else source[1], canonical_json(info), workspace))
    return get_environment(store, workspace, env_id)


def add_world(store: ServiceStore, workspace: str, data: bytes, lease_hours: float | None = None) -> Environment:
    """Register a world from its bytes (world.json or a packaged world as .tar.zst); nothing is kept if invalid."""
    form = source_form(data)
    with tempfile.TemporaryDirectory(prefix="blobkit-env-") as tmp:
        info = _world_info(materialize(data, form, Path(tmp) / "source"))
    ref = store.blobs.put_bytes(data)
    return _insert(store, workspace, "env_" + secrets.token_hex(6), "world", info["name"], info, lease_hours,
                   (ref.sha256, form))


def add_world_file(store: ServiceStore, workspace: str, path: Path, lease_hours: float | None = None) -> Environment:
    """Register a world from the server's disk (any size): a world.json or a packaged world directory."""
    with tempfile.TemporaryDirectory(prefix="blobkit-env-") as tmp:
        data, _ = pack_source(path, Path(tmp))
    return add_world(store, workspace, data, lease_hours)


def add_cluster_plane(store: ServiceStore, workspace: str, name: str, lease_hours: float | None = None) -> Environment:
    """Register a cluster-plane environment (``tenv_…``): listed, never trained on."""
    return _insert(store, workspace, "tenv_" + secrets.token_hex(6), "cluster_plane", name, {}, lease_hours, None)


def _environment(store: ServiceStore, row: sqlite3.Row | tuple[Any, ...]) -> Environment:
    env_id, kind, name, created, lease, sha, form, info_text = row
    info = store.cell(info_text, f"environment {env_id}", "info") or {}
    return Environment(env_id=env_id, kind=kind, name=name, created_at=created, lease_expires_at=lease,
                       source_sha256=sha, source_form=form, world=info.get("world"), policies=info.get("policies"),
                       tools=info.get("tools", []), procedures=info.get("procedures"), anchors=info.get("anchors", []),
                       trainability=info.get("trainability"))


def get_environment(store: ServiceStore, workspace: str, env_id: str) -> Environment:
    """One environment of ``workspace``; NotFoundError otherwise (another workspace's id included)."""
    row = store.conn.execute(f"SELECT {COLUMNS} FROM environments WHERE id = ? AND workspace = ?",
                             (env_id, workspace)).fetchone()
    if row is None:
        raise NotFoundError(f"no environment {env_id!r} in workspace {workspace} (GET /api/v1/twin/environments "
                            "lists them)")
    return _environment(store, row)


def list_environments(store: ServiceStore, workspace: str) -> EnvironmentList:
    """Every environment of ``workspace``, oldest first."""
    rows = store.conn.execute(f"SELECT {COLUMNS} FROM environments WHERE workspace = ? ORDER BY created_at, id",
                              (workspace,)).fetchall()
    return EnvironmentList(environments=[_environment(store, row) for row in rows])


def trainable_environment(store: ServiceStore, workspace: str, env_id: str) -> Environment:
    """The environment a training request names: it must hold a world, and its lease must not have expired."""
    env = get_environment(store, workspace, env_id)
    if env.kind == "cluster_plane":
        raise PlaneNotTrainableError(f"{env_id} is a cluster-plane environment: it fronts providers' MCP servers "
                                     "through a gateway and holds no exportable world, so nothing can be trained on "
                                     "it; export the company's world and register it (POST "
                                     "/api/v1/twin/environments)")
    if env.lease_expires_at is not None and env.lease_expires_at <= time.time():
        ended = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(env.lease_expires_at))
        raise LeaseExpiredError(f"{env_id}'s serving lease expired at {ended}; its jobs, kits and evidence stay "
                                "readable; register the world again to train on it")
    return env
