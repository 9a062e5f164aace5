"""Models shared by the methods: device choice, sentence encoders, language models."""
