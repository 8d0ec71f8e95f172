"""The conductor-training-rbac Helm chart's default service account is the one the cluster
settings use (the chart rendered by helm: tests/integration/test_rbac_chart.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "conductor-training-rbac"


def test_default_service_account_matches_cluster_settings() -> None:
    from conductor_core.cluster.settings import ClusterSettings

    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    default = ClusterSettings.model_fields["service_account"].default
    assert values["serviceAccount"]["name"] == default
