"""The results: packed on the pod, verified and installed on the host.

On the pod, :func:`pack_results` archives ``out/`` reproducibly into ``results.tar.zst`` and
records its sha256 and size. On the host, :func:`collect_results` checks that the pod verified
*this* bundle, downloads the results, refuses them unless the sha256 matches done.json, and
unpacks them with blobkit's hardened extractor into ``--out`` (the pod's plan.json is kept as
``runpod/pod_plan.json``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.errors import TrainerError
from trainers.eval_record import GRPOReport, read_report
from world_format.canonical import atomic_write_json, file_sha256, fsync_dir
from world_format.errors import ChecksumError

from .bundle import Bundle
from .pod import Job
from .store import HttpStore

MAX_RESULTS_BYTES = 64 << 30
"""The largest results archive the host downloads."""


def pack_results(out_dir: Path, archive: Path, record: Path) -> dict[str, Any]:
    """On the pod: archive ``out_dir`` reproducibly and write its sha256 and size to ``record``."""
    from world_format.archive import write_tar_zst

    digest, size = write_tar_zst(Path(out_dir), Path(archive), "out")
    result = {"name": Path(archive).name, "sha256": digest, "bytes": size}
    atomic_write_json(Path(record), result)
    return result


def _fetch_train_log(store: HttpStore, job: Job) -> str:
    try:
        store.get_file(f"{job.id}/train.log", job.work / "train.log", 256 << 20)
    except TrainerError:
        return ""
    lines = (job.work / "train.log").read_text(encoding="utf-8", errors="replace").splitlines()
    return f"; last log lines: {' | '.join(lines[-5:])} (full log in {job.work / 'train.log'})" if lines else ""


def install_results(archive: Path, out: Path, work: Path) -> None:
    """Unpack the pod's ``out/`` into ``out`` with the hardened extractor (pod plan.json → runpod/pod_plan.json)."""
    from world_format.archive import extract_tar_zst, extracted_root_cleanup

    root = extract_tar_zst(archive, dest_parent=work)
    try:
        if not (root / "eval.json").is_file():
            raise TrainerError(f"{archive}: the pod's results have no eval.json; nothing was installed")
        for entry in sorted(root.iterdir()):
            if entry.name == work.name:
                continue
            target = work / "pod_plan.json" if entry.name == "plan.json" else out / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            os.replace(entry, target)
    finally:
        extracted_root_cleanup(root)
    fsync_dir(out)


def collect_results(store: HttpStore, job: Job, done: Mapping[str, Any], bundle: Bundle,
                    out: Path) -> tuple[GRPOReport, str]:
    """Verify done.json against the bundle, download and verify the results, unpack them; return eval.json."""
    if done.get("bundle_sha256") != bundle.sha256:
        raise ChecksumError(f"the pod checked a bundle with sha256 {done.get('bundle_sha256')}, but this job uploaded "
                            f"{bundle.sha256}; results refused")
    log_hint = _fetch_train_log(store, job)
    if done.get("status") != "ok":
        raise TrainerError(f"training on the pod failed: {done.get('error', 'no reason given')}{log_hint}")
    results = done.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("sha256"), str):
        raise TrainerError("the pod's done.json lists no results checksum")
    archive = job.work / "results.tar.zst"
    store.get_file(f"{job.id}/results.tar.zst", archive, MAX_RESULTS_BYTES)
    digest = file_sha256(archive)
    if digest != results["sha256"]:
        raise ChecksumError(f"{archive}: sha256 {digest} does not match {results['sha256']} reported by the pod")
    install_results(archive, out, job.work)
    try:
        report = read_report(out / "eval.json")
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise TrainerError(f"the pod's results have no readable eval.json: {exc}") from None
    if not isinstance(report, GRPOReport):
        raise TrainerError("the pod's eval.json is an SFT report; the pod runs GRPO")
    return report, digest
