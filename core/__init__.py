"""Config fields and part registries shared by every part of the project."""
