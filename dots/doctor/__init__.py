"""`python -m dots.doctor`: is this node ready for dots? Versions against the tested ranges,
devices and free memory, the memory plan, and an end-to-end swap check on a generated model."""
