"""One folder per system: its config dataclass, its model classes, its generation. The public ones are re-exported
from the package top level (``from markovformer import ...``)."""
