"""The DoTS search (`python -m dots.search`): task vectors → selection → study → pick → export,
a list of stages in `dots.search.pipeline`."""
