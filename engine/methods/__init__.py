"""The method layer: the run protocol (:mod:`engine.methods.run`), metrics, batching of store
calls, the method registry and the five methods (rog, ldr, etd, fidelis, arg)."""
