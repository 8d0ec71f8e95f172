"""The `train` component and its variants (`train-gpu`, `train-launcher`)."""

from conductor_components.train.component import train, train_gpu, train_launcher

__all__ = ["train", "train_gpu", "train_launcher"]
