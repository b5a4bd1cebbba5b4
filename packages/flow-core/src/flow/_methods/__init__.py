"""Tensor method mixins, one per op family; each method delegates to the functional API."""
