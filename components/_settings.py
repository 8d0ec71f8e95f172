"""What every component shares: its base image and the decorator options (no KFP package install
at run time: the image holds it).

Image references come from the one module that names them, ``conductor_core.cluster.images``
(standard library only). Component modules import nothing but ``kfp`` at module level, so that
import happens in :func:`_image`, when a component is defined.
"""


def _image(kind: str) -> str:
    from conductor_core.cluster.images import image

    return image(kind)  # type: ignore[arg-type]


BASE_IMAGE = _image("base")
"""The CPU image every component runs in, except training."""
TRAIN_IMAGE = _image("train")
"""The CUDA training image (the `train` component)."""
COMPONENT_OPTIONS = {"base_image": BASE_IMAGE, "install_kfp_package": False}
"""Keyword arguments of every ``@dsl.component``."""
