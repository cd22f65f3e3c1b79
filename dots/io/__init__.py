"""Checkpoint I/O: lazy reader (checkpoint: local dir or Hub id), the safetensors format
(safetensors), atomic sharded writer (writer), alignment of a base with its fine-tunes
(align), the sources' tokenizers against the base's (vocab), model shapes (shapes), .bin
conversion (convert), file modes (modes), tensor names (modules) and the pools and benchmarks
(problems). Import from the modules: importing this package loads nothing, so
`dots.io.problems` (read by every command's config) stays light."""
