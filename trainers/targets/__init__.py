"""Training targets as plug-ins: the interface (:mod:`.base`), one module per target, the registry (:mod:`.registry`).

Import :func:`~trainers.targets.registry.target_for` from :mod:`trainers.targets.registry`; this package module
stays empty so ``trainers.config`` can import a target's settings model without importing every target.
"""
