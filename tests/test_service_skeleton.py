"""The service skeleton: the store (WAL, full sync, named migrations), API keys, auth, the error shape, OpenAPI."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_support import Server, create_key, running_server
from typer.testing import CliRunner

from blobkit.cli.app import app as cli
from blobkit.errors import AuthError, JobError, UploadChecksumError
from blobkit.service import ServiceStore, create_app
from blobkit.service.migrations import MIGRATIONS, Migration, register
from blobkit.service.openapi import openapi_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[ServiceStore]:
    with ServiceStore(tmp_path / "service") as opened:
        yield opened


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("serve")
    with running_server(root / "store", root / "serve.log") as running:
        yield running


def test_the_store_is_wal_with_full_sync_and_records_its_migrations(store: ServiceStore) -> None:
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store.migrations() == [m.name for m in MIGRATIONS]
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_a_store_with_a_migration_this_blobkit_does_not_know_is_refused(tmp_path: Path) -> None:
    ServiceStore(tmp_path).close()
    with sqlite3.connect(tmp_path / "service.sqlite") as conn:
        conn.execute("INSERT INTO schema_migrations VALUES ('from-the-future', 0)")
    with pytest.raises(JobError, match="newer blobkit"):
        ServiceStore(tmp_path)


def test_an_appended_migration_is_applied_once_to_an_existing_store(tmp_path: Path) -> None:
    ServiceStore(tmp_path).close()
    extra = Migration("test-extra-1", ("CREATE TABLE extra_things (id TEXT PRIMARY KEY)",))
    register(extra)
    try:
        with ServiceStore(tmp_path) as store:
            assert store.migrations()[-1] == "test-extra-1"
        with ServiceStore(tmp_path) as store:  # not applied twice
            assert store.migrations().count("test-extra-1") == 1
        with pytest.raises(ValueError, match="already registered"):
            register(Migration("test-extra-1", ("SELECT 1",)))
    finally:
        MIGRATIONS.remove(extra)


def test_a_key_is_tml_prefixed_and_the_store_holds_only_a_salted_hash(store: ServiceStore) -> None:
    key = store.create_key("acme")
    assert key.startswith("tml-") and len(key) == 68
    store.close()
    raw = b"".join(path.read_bytes() for path in store.root.glob("service.sqlite*"))
    assert key.encode() not in raw and key[20:].encode() not in raw
    with ServiceStore(store.root) as reopened:
        caller = reopened.resolve_key(key)
    assert caller.workspace == "acme" and caller.role == "user" and caller.key_id == key[4:20]


@pytest.mark.parametrize("key", [None, "", "tml-0123", "sk-" + "0" * 64, "tml-" + "0" * 64])
def test_a_missing_malformed_or_unknown_key_is_an_auth_error(store: ServiceStore, key: str | None) -> None:
    store.create_key("acme")
    with pytest.raises(AuthError):
        store.resolve_key(key)


def test_a_right_id_with_a_wrong_secret_is_refused(store: ServiceStore) -> None:
    key = store.create_key("acme")
    with pytest.raises(AuthError, match="not valid"):
        store.resolve_key(key[:20] + "0" * 48)


def test_a_blob_whose_sha256_differs_from_the_declared_one_is_not_stored(store: ServiceStore) -> None:
    with pytest.raises(UploadChecksumError, match="nothing stored"):
        store.blobs.put_bytes(b"hello", expected_sha256="0" * 64)
    assert [p for p in store.blobs.root.rglob("*") if p.is_file()] == []
    ref = store.blobs.put_bytes(b"hello")
    assert store.blobs.existing(ref.sha256).read_bytes() == b"hello" and ref.bytes == 5


def test_every_error_has_one_json_shape(store: ServiceStore) -> None:
    client = TestClient(create_app(store))
    for response, status, code in ((client.get("/api/v1/models"), 401, "unauthorized"),
                                   (client.get("/api/v1/models", headers={"X-API-Key": "nope"}), 401, "unauthorized"),
                                   (client.get("/api/v1/nowhere"), 404, "not_found")):
        assert response.status_code == status
        assert set(response.json()) == {"error"} and response.json()["error"]["code"] == code


def test_the_committed_openapi_document_matches_the_app() -> None:
    committed = (ROOT / "spec" / "service.openapi.json").read_text(encoding="utf-8")
    assert committed == openapi_text(), "run: make openapi"


def test_every_route_but_the_documents_requires_an_api_key() -> None:
    document = json.loads(openapi_text())
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation.get("security") == [{"APIKeyHeader": []}], f"{method.upper()} {path}"


def test_serve_keys_env_and_worker_commands_have_an_example() -> None:
    runner = CliRunner()
    for command in (["serve"], ["serve", "keys", "create"], ["serve", "env", "add"], ["worker"]):
        result = runner.invoke(cli, [*command, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "Example:" in result.output, command


def test_a_real_server_answers_a_key_from_keys_create_and_refuses_others(server: Server) -> None:
    key = create_key(server.store, "acme")
    with server.client(key) as client:
        models = client.get("/api/v1/models")
    assert models.status_code == 200
    ids = [entry["id"] for entry in models.json()["open_weight"]]
    assert "Qwen/Qwen3-8B" in ids and "HuggingFaceTB/SmolLM2-135M-Instruct" in ids
    with server.client("tml-" + "a" * 64) as client:
        refused = client.get("/api/v1/models")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
