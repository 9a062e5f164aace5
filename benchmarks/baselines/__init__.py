"""The baselines the stores are timed against, each computing exactly the stores' answers:
the NumPy floor (:mod:`.csr_floor`), RoG's networkx retrieval (:mod:`.rog_networkx`) and the
ToG-style per-call loop (:mod:`.tog_loop`); and the fine-tuning loss over every position's logits
that :mod:`benchmarks.training` times the engine's against (:mod:`.full_vocab_loss`)."""
