"""A training service's jobs read over HTTP, as the CLI's ``jobs list|show|cancel --server URL --token T`` does.

Returns the same typed records the API serves; an error answer is raised as the library error of its status.
"""

from __future__ import annotations

import httpx

from blobkit.errors import AuthError, ConflictError, NotFoundError, ServiceError

from .records import TrainingJob, TrainingJobList

ERRORS: dict[int, type[ServiceError]] = {401: AuthError, 403: AuthError, 404: NotFoundError, 409: ConflictError}


class RemoteJobs:
    """The jobs of the workspace a key belongs to, on one server."""

    def __init__(self, server: str, token: str, timeout: float = 60.0) -> None:
        self.server = server.rstrip("/")
        self.http = httpx.Client(base_url=self.server, headers={"X-API-Key": token}, timeout=timeout)

    def __enter__(self) -> RemoteJobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _send(self, method: str, path: str) -> httpx.Response:
        try:
            response = self.http.request(method, path)
        except httpx.TransportError as exc:
            raise ServiceError(f"{self.server} cannot be reached: {exc}") from None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message = f"{error['code']}: {error['message']}"
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {response.status_code}"
            raise ERRORS.get(response.status_code, ServiceError)(f"{self.server}: {message}")
        return response

    def list(self) -> TrainingJobList:
        """Every job of the workspace."""
        return TrainingJobList.model_validate(self._send("GET", "/api/v1/training-jobs").json())

    def get(self, job_id: str) -> TrainingJob:
        """One job."""
        return TrainingJob.model_validate(self._send("GET", f"/api/v1/training-jobs/{job_id}").json())

    def cancel(self, job_id: str) -> TrainingJob:
        """Cancel one job."""
        return TrainingJob.model_validate(self._send("DELETE", f"/api/v1/training-jobs/{job_id}").json())
