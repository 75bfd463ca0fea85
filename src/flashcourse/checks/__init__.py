"""One module per lesson; importing this package registers every exercise."""

from . import gpu_flash  # noqa: F401
