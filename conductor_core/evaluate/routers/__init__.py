"""Router baselines: Smoothie (label-free), RouterDC (dual contrastive) and MASRouter (cascaded
multi-agent routing), with the sentence encoder they embed text with. ``torch`` and
``transformers`` are imported only when a router is trained or used."""

from conductor_core.evaluate.routers.encoder import DEFAULT_ENCODER, SentenceEncoder, get_encoder

__all__ = ["DEFAULT_ENCODER", "SentenceEncoder", "get_encoder"]
