"""What every component shares: its base image and the decorator options (no KFP package install
at run time: the image holds it).

Image references come from the one module that names them, ``conductor_core.cluster.images``
(standard library only). Component modules import nothing but ``kfp`` at module level, so that
import happens in :func:`_image`, when a component is defined.
"""

from typing import Any


def _image(kind: str) -> str:
    from conductor_core.cluster.images import image

    return image(kind)  # type: ignore[arg-type]


BASE_IMAGE = _image("base")
"""The CPU image: every component, and the CPU variants of training, evaluation and registration."""
TRAIN_IMAGE = _image("train")
"""The CUDA image: the GPU variants (``train-gpu``, ``eval-shard-gpu``, ``register-gpu``)."""
COMPONENT_OPTIONS = {"base_image": BASE_IMAGE, "install_kfp_package": False}
"""Keyword arguments of every ``@dsl.component``."""


def variant(component: Any, base_image: str, name: str) -> Any:
    """The function of ``component`` as a second component on ``base_image``, named ``name``
    (the task names the pipeline gives it, and the UI shows), with the same inputs, outputs and
    description: e.g. training on the CUDA train image for GPU profiles and on the base image
    for CPU ones."""
    from kfp import dsl

    copy = dsl.component(base_image=base_image, install_kfp_package=False)(component.python_func)
    copy.component_spec.name = copy.name = name
    return copy
