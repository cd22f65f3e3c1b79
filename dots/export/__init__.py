"""Exporting models: the synthesized model with its card, and the Hub upload
(`python -m dots.export push`)."""
