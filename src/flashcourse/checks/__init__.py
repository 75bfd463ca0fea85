"""One module per lesson; importing this package registers every exercise."""

from . import gpu_flash  # noqa: F401
from . import roofline  # noqa: F401
from . import tiling  # noqa: F401
from . import softmax  # noqa: F401
from . import flash_triton  # noqa: F401
