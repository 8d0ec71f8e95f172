"""The `register` component and its GPU variant (`register-gpu`)."""

from conductor_components.register.component import register, register_gpu

__all__ = ["register", "register_gpu"]
