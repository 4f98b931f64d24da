"""Reproducible seeds: ``SEED=N`` replays a run; otherwise a seed is drawn and printed."""

import os
import random
import sys

__all__ = ["get_seed"]

_announced = set()


def get_seed(name="SEED"):
    """Return the seed from the environment variable ``name``, or draw one.

    A drawn seed is exported to the environment (so a Verilator child process and
    the pytest process agree) and printed once with the way to replay it.
    """
    text = os.environ.get(name)
    if text is not None and text.strip():
        try:
            seed = int(text, 0)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not an integer seed") from None
    else:
        seed = random.SystemRandom().randrange(2 ** 31)
        os.environ[name] = str(seed)
    if seed not in _announced:
        _announced.add(seed)
        print(f"[tb] seed {seed} (replay with {name}={seed})", file=sys.stderr)
    return seed
