"""What the Kubeflow UI shows and caches: the Markdown report's plots inline (the UI shows a
Markdown artifact on its own), and an alias made a version before anything is cached on it
(resolving a real alias on an MLflow store: tests/integration/test_components.py)."""

from __future__ import annotations

import base64

import pytest


def test_image_links_to_the_reports_folder_become_data_uris(tmp_path):
    from conductor_core.pipeline_steps.eval_steps import inline_images

    png = b"\x89PNG\r\n\x1a\nnot-really-a-plot"
    (tmp_path / "accuracy_vs_cost.png").write_bytes(png)
    text = (
        "# Evaluation\n\n![accuracy_vs_cost](accuracy_vs_cost.png)\n\n"
        "![gone](missing.png) ![web](https://example.com/x.png) [a link](accuracy_vs_cost.png)\n"
    )
    out = inline_images(text, tmp_path)
    data = base64.b64encode(png).decode()
    assert f"![accuracy_vs_cost](data:image/png;base64,{data})" in out
    # a missing file, a remote image and a plain link stay as they are
    assert "![gone](missing.png)" in out and "![web](https://example.com/x.png)" in out
    assert "[a link](accuracy_vs_cost.png)" in out


def test_the_summary_artifact_has_the_comparison_and_no_relative_image_link(tmp_path):
    from conductor_core.pipeline_steps.eval_steps import summary_markdown

    (tmp_path / "plot.png").write_bytes(b"png")
    (tmp_path / "report.md").write_text("# Evaluation\n\n![plot](plot.png)\n")
    result = {
        "comparison": {"rows": [], "conductor_ahead": None},
        "paths": {"markdown": str(tmp_path / "report.md")},
    }
    md = summary_markdown(result)
    assert md.startswith("| method | accuracy |")
    assert "](plot.png)" not in md and "](data:image/png;base64," in md


@pytest.mark.parametrize(
    "uri", ["models:/conductor/3", "runs:/abc/model", "s3://b/m", "scripted", "", "/models/x"]
)
def test_only_an_alias_needs_the_registry(uri):
    from conductor_core.pipeline_steps.eval_steps import resolve_conductor_step
    from conductor_core.track.registry import resolve_model_uri

    assert resolve_model_uri(uri) == uri  # no MLflow store is opened (a unit test may not)
    assert resolve_conductor_step(uri, log=lambda _: None) == uri
