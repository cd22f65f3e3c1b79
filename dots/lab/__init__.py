"""The lab: a small base/SFT/RLVR trio trained on CPU (the embedded default backbone)."""
