"""Iris: a job orchestrator for ML research clusters."""

__version__ = "0.1.0"
# The date this client/controller revision was cut. Controllers refuse root submissions from
# clients more than 14 days older than themselves (see core.freshness).
REVISION_DATE = "2026-11-29"
