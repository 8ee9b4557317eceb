"""One folder per system: its config dataclass, its model classes, its generation."""

from markovformer.models.markovian_transformer import *  # noqa: F401,F403
from markovformer.models.markovian_transformer import __all__  # noqa: F401
