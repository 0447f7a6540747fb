"""sgl-shapeprof, the command line: the only place that parses arguments,
prints the command's messages and decides exit codes."""
from .main import main

__all__ = ["main"]
