"""Device backends that ship with the core."""
