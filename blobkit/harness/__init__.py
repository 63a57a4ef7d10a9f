"""Replaying an export inside agent harnesses no one here wrote (Codex), judged by the case's VCode."""
