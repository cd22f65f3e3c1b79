"""The vLLM engine: the engine (`engine`), its worker extension (`worker`), the τ̃ each worker holds
in its own parameters (`resident`, `compact`), and every vLLM internal dots touches (`compat`, `env`)."""
