"""What the Kubeflow UI shows of a pipeline: its whole description, not a cut first line."""

import inspect


def ui_description(doc: str | None) -> str:
    """A module docstring as the pipeline's description: every paragraph, each joined into one
    line (the UI wraps text itself; the source's line breaks would show as ragged lines)."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
