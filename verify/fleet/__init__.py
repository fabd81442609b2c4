"""Fleet verification: run verify on every host of an inventory, then judge the hosts against each other."""
from __future__ import annotations
