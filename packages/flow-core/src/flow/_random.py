"""Random number generation: ``flow.Generator`` and the default generator.

Sampling happens on the host with NumPy's Philox bit generator (counter-based,
so the state is small and exactly restorable), then moves to the device.
"""

from __future__ import annotations

import numpy as np


class Generator:
    """A source of random numbers with a seed and a saveable state, as ``torch.Generator``."""

    def __init__(self, device="cpu") -> None:
        self.device = device
        self._seed = 67280421310721
        self._rng = np.random.Generator(np.random.Philox(self._seed))

    def manual_seed(self, seed: int) -> "Generator":
        seed = int(seed)
        if seed < 0:
            seed &= (1 << 64) - 1
        self._seed = seed
        self._rng = np.random.Generator(np.random.Philox(seed))
        return self

    def seed(self) -> int:
        s = int(np.random.SeedSequence().entropy) & ((1 << 63) - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The generator state as a uint8 tensor (restorable with :meth:`set_state`)."""
        import json

        from flow._creation import tensor

        st = self._rng.bit_generator.state
        blob = json.dumps({"seed": self._seed, "state": _jsonable(st)}).encode()
        return tensor(np.frombuffer(blob, dtype=np.uint8).copy())

    def set_state(self, state) -> None:
        import json

        raw = bytes(np.asarray(state.numpy() if hasattr(state, "numpy") else state, dtype=np.uint8))
        try:
            d = json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError):
            raise ValueError("Generator.set_state: not a state produced by get_state()") from None
        self._seed = d["seed"]
        bg = np.random.Philox()
        bg.state = _from_jsonable(d["state"])
        self._rng = np.random.Generator(bg)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return {"__nd__": x.tolist(), "dtype": str(x.dtype)}
    if isinstance(x, np.integer):
        return int(x)
    return x


def _from_jsonable(x):
    if isinstance(x, dict):
        if "__nd__" in x:
            return np.array(x["__nd__"], dtype=x["dtype"])
        return {k: _from_jsonable(v) for k, v in x.items()}
    return x


default_generator = Generator()


def host_rng(generator: Generator | None) -> np.random.Generator:
    if generator is None:
        return default_generator._rng
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a flow.Generator, got {type(generator).__name__}")
    return generator._rng


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (all of flow's random sampling on every device)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)
