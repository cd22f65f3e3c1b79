"""dots: test-time synthesis of post-trained LLMs from sparsified task vectors."""

__all__ = ["__version__"]

__version__ = "0.1.0"
