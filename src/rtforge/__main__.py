"""python -m rtforge"""

from .cli import run

run()
