"""A command's options: the packaged Hydra configs composed (`compose`), the command line checked
before Hydra reads it (`cli`), and the typed options each command's stages take."""
