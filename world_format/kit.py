"""Reading kits: a packaged world plus tasks, cases and executed rows, checked before anything is used.

A kit is a directory (or a ``.tar.zst`` archive of one, extracted by the hostile-archive reader)::

    kit.json            format, world identity, build config and record, split, leakage, file table
    world/              the packaged world (world.json, seed.sqlite, manifest.json)
    tasks.jsonl         admitted tasks with their probe verdicts      (one :class:`TaskRecord` a line)
    rejected.jsonl      rejected candidates and why                  (one :class:`TaskRecord` a line)
    train_cases.jsonl   training cases                               (one :class:`KitCase` a line)
    eval_cases.jsonl    held-out cases, with the prompt the model gets (one :class:`KitCase` a line)
    sft.jsonl           executed SFT rows                            (one :class:`SftRow` a line)

:func:`open_kit` checks every file against kit.json (sha256, size, nothing unlisted), then the
*structure*: kit.json and every line of every JSONL file must parse and fit its model. Any
problem is a :class:`~world_format.errors.KitError` (or ``ChecksumError``) naming the file and,
for a JSONL file, the line (``eval_cases.jsonl:7: /task/anchor: Field required``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from world_format.canonical import sha256_hex
from world_format.errors import BlobkitError, KitError

from .archive import open_archive
from .jsontext import json_lines, loads_strict
from .loaded import LoadedWorld
from .loader import load_world
from .manifest import verify_manifested_dir
from .models import Task

KIT_FILE = "kit.json"
KIT_FORMAT = "blobkit-kit"
MAX_KIT_JSON_BYTES = 16 * 1024 * 1024
Side = Literal["train", "eval"]
Row = dict[str, Any]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class KitWorld(_Record):
    """Which world the kit was built from."""

    id: str
    """The world's identity slug."""
    name: str
    """The company's name."""
    sha256: str
    """The world's identity (equal for its single-file and packaged forms)."""
    seed_state_hash: str
    """State hash of the seed database."""


class KitMeta(_Record):
    """kit.json."""

    format: Literal["blobkit-kit"]
    """Always "blobkit-kit"."""
    format_version: Literal[1]
    """Version of the kit layout."""
    builder_version: str
    """blobkit version that built the kit."""
    world: KitWorld
    """The world the kit was built from."""
    build_config: dict[str, Any]
    """Everything that decided the kit's content."""
    record: dict[str, Any]
    """The build record (counts of tasks, cases and rows)."""
    templates: list[str]
    """Templates of the admitted tasks."""
    split: dict[str, Any]
    """How cases were split into training and held-out sides."""
    leakage: dict[str, Any]
    """What the two sides share (measured from the cases)."""
    files: dict[str, dict[str, Any]]
    """sha256 and size of every other file, by relative path."""


class Prompt(_Record):
    """What a model receives at the start of a held-out episode."""

    messages: list[Row]
    """System and user messages."""
    tools: list[Row]
    """Function specs of the world's tools."""


class KitCase(_Record):
    """One task instantiated on one anchor row, on one side of the split."""

    case_id: str
    """Content id of the case."""
    task_id: str
    """Id of the task (template or authored task) it instantiates."""
    template: str
    """How the task was made."""
    side: Side
    """train or eval."""
    anchor: dict[str, Any]
    """The anchor row: {"table": ..., "key": ...}."""
    entity: str | None = None
    """The connected entity the case concerns: its anchor row's root row, following owning foreign keys
    ("customers:1017"); cases of one entity are one independent held-out unit. Null in kits built before
    entity splits."""
    task: Task
    """The concrete task: instruction, reference chain, answer key, verifier."""
    prompt: Prompt | None = None
    """Held-out cases: the opening messages and tools the model gets."""
    probes: dict[str, str] = {}
    """The gate's verdict on each probe for this case ("fail", or "n/a" where a probe does not apply)."""
    distractor: Task | None = None
    """The other case of the same task the wrong-row probe ran (so ``verify`` can run it again)."""


class TaskRecord(_Record):
    """A candidate task and what the discrimination gate said about it."""

    task_id: str
    """Content id of the task."""
    source: Literal["minted", "authored"]
    """Where the task came from."""
    template: str
    """Minting template, or "authored"."""
    spec: dict[str, Any] | None
    """Minted tasks: the template binding (tools, fields)."""
    prototype: Task | None
    """The case the gate's stored probe matrix was computed on."""
    distractor: Task | None
    """The task moved to another row, used by the wrong-row probe."""
    probe_matrix: dict[str, Any] | None
    """Every probe's verdict and state hash."""
    rejected_because: list[str]
    """Why the gate rejected it (empty when admitted)."""
    cases_left_out: dict[str, int] = {}
    """Cases the gate left out, counted by the first probe (or check) each did not fail."""
    family: dict[str, Any] | None
    """Authored families: rows of the query, looked at and left out."""
    cases: dict[str, int]
    """Cases per side."""


class SftRow(_Record):
    """An executed training conversation."""

    messages: list[Row]
    """system, user, assistant tool calls, tool observations, final answer."""
    tools: list[Row]
    """Function specs the model saw."""
    metadata: dict[str, Any]
    """Where the row came from (task id, case id, observation hashes, verdict)."""


KIT_JSONL: dict[str, type[_Record]] = {"tasks.jsonl": TaskRecord, "rejected.jsonl": TaskRecord,
                                       "train_cases.jsonl": KitCase, "eval_cases.jsonl": KitCase,
                                       "sft.jsonl": SftRow}
"""The JSON Lines files every kit holds, and the model of each line."""

M = TypeVar("M", bound=_Record)


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = "/" + "/".join(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _parse(model: type[M], value: Any, where: str) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise KitError(f"{where}: {_problem(exc)}") from None


def read_jsonl(path: Path) -> list[Row]:
    """Every non-blank line of a JSON Lines file as an object; KitError naming ``file:line`` otherwise.

    Lines end at ``\\n`` only (U+2028, NEL and the other separators ``str.splitlines`` knows stay inside their
    strings), and each line is strict JSON (:func:`world_format.jsontext.loads_strict`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KitError(f"{path}: missing") from None
    except UnicodeDecodeError as exc:
        raise KitError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    rows = []
    for number, line in json_lines(text):
        try:
            value = loads_strict(line)
        except ValueError as exc:
            raise KitError(f"{path}:{number}: invalid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise KitError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        rows.append(value)
    return rows


class Kit:
    """A checked kit directory: every file verified against kit.json, every line against its model."""

    def __init__(self, root: Path, meta: dict[str, Any]) -> None:
        self.root = Path(root)
        self.meta = meta
        """kit.json as parsed (checked against :class:`KitMeta`)."""
        self.info = _parse(KitMeta, meta, str(self.root / KIT_FILE))
        self._lines: dict[str, list[Row]] = {}
        self._records: dict[str, list[Any]] = {}

    def path(self, name: str) -> Path:
        """Absolute path of a listed file."""
        return self.root / name

    def jsonl(self, name: str) -> list[Row]:
        """The lines of one of the kit's JSON Lines files, as plain objects (read once, then cached)."""
        if name not in self._lines:
            self._lines[name] = read_jsonl(self.path(name))
        return self._lines[name]

    def _typed(self, name: str) -> list[Any]:
        if name not in self._records:
            model = KIT_JSONL[name]
            self._records[name] = [_parse(model, row, f"{self.path(name)}:{number}")
                                   for number, row in enumerate(self.jsonl(name), start=1)]
        return self._records[name]

    def cases(self, side: Side) -> list[KitCase]:
        """Training or held-out cases, in kit order."""
        return list(self._typed(f"{side}_cases.jsonl"))

    def tasks(self, admitted: bool = True) -> list[TaskRecord]:
        """Admitted tasks (``tasks.jsonl``) or rejected candidates (``rejected.jsonl``)."""
        return list(self._typed("tasks.jsonl" if admitted else "rejected.jsonl"))

    def rows(self) -> list[Row]:
        """The SFT rows as plain objects (checked against :class:`SftRow`), ready for a trainer."""
        self._typed("sft.jsonl")
        return self.jsonl("sft.jsonl")

    def check_structure(self) -> None:
        """Parse every JSONL file and check every line against its model (KitError on the first problem)."""
        for name in KIT_JSONL:
            self._typed(name)
        for side in ("train", "eval"):
            wrong = next((case for case in self.cases(side) if case.side != side), None)
            if wrong is not None:
                raise KitError(f"{self.path(side + '_cases.jsonl')}: case {wrong.case_id} says side {wrong.side!r}")
        missing = next((case for case in self.cases("eval") if case.prompt is None), None)
        if missing is not None:
            raise KitError(f"{self.path('eval_cases.jsonl')}: held-out case {missing.case_id} has no prompt")

    @cached_property
    def loaded_world(self) -> LoadedWorld:
        """The packaged world inside the kit, loaded and validated (once per kit)."""
        return load_world(self.root / "world")

    def world(self) -> LoadedWorld:
        """The packaged world inside the kit, loaded and validated."""
        return self.loaded_world

    @property
    def sha256(self) -> str:
        """Identity of the kit: sha256 of its kit.json."""
        return sha256_hex((self.root / KIT_FILE).read_bytes())


def _read_meta(root: Path) -> dict[str, Any]:
    kit_path = root / KIT_FILE
    if not kit_path.is_file() or kit_path.is_symlink():
        raise KitError(f"{root}: no {KIT_FILE}: not a kit (or an unfinished one)")
    data = kit_path.read_bytes()
    if len(data) > MAX_KIT_JSON_BYTES:
        raise KitError(f"{kit_path}: larger than {MAX_KIT_JSON_BYTES} bytes")
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KitError(f"{kit_path}: not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != KIT_FORMAT or not isinstance(meta.get("files"), dict):
        raise KitError(f"{kit_path}: not a {KIT_FORMAT} file")
    return meta


def verify_kit_dir(root: Path) -> Kit:
    """Check every listed file's sha256 and size (nothing unlisted), then the kit's structure; all-or-nothing."""
    root = Path(root)
    meta = _read_meta(root)
    verify_manifested_dir(root, meta["files"], KIT_FILE, recursive=True)
    kit = Kit(root, meta)
    missing = sorted(name for name in KIT_JSONL if name not in meta["files"])
    if missing:
        raise KitError(f"{root}: {missing[0]} is missing (a kit holds {', '.join(sorted(KIT_JSONL))})")
    kit.check_structure()
    return kit


@contextmanager
def open_kit(path: Path) -> Iterator[Kit]:
    """A verified kit from a directory or a .tar.zst archive (extracted to a temp dir, removed after)."""
    path = Path(path)
    if path.is_dir():
        yield verify_kit_dir(path)
        return
    if not path.name.endswith(".tar.zst"):
        raise KitError(f"{path}: expected a kit directory or a .tar.zst kit archive")
    with open_archive(path) as root:
        try:
            kit = verify_kit_dir(root)
        except BlobkitError as exc:  # name the archive, not the private folder it was extracted to
            raise type(exc)(str(exc).replace(str(root.parent), str(path))) from None
        yield kit
