"""One way to change how ``model.generate`` samples for the length of a block: a logits
processor appended to every call. TRL's transformers backend calls ``model.generate`` on the
unwrapped model, so the hook is an instance attribute over the class's method, and the attribute
that was there before (another hook's, or none) comes back on exit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["generate_hook"]


@contextmanager
def generate_hook(
    model: Any,
    make: Callable[[Any, Any], Any | None],
    seen: Callable[[Any, Any], None] | None = None,
) -> Iterator[Any]:
    """Within the block, each ``model.generate`` call appends ``make(input_ids, attention_mask)``
    (a transformers logits processor; None: the call runs as it is) to its logits processors,
    and ``seen(processor, output)`` gets what the call returned."""
    from transformers import LogitsProcessorList

    before = model.__dict__.get("generate")
    generate = model.generate

    def hooked(*args: Any, **kwargs: Any) -> Any:
        processor = make(
            kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        )
        if processor is None:
            return generate(*args, **kwargs)
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(processor)
        out = generate(*args, logits_processor=processors, **kwargs)
        if seen is not None:
            seen(processor, out)
        return out

    model.generate = hooked
    try:
        yield model
    finally:
        if before is None:
            del model.generate
        else:
            model.generate = before
