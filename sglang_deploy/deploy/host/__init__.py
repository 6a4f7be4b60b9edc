"""Files run on the GPU host itself, standard library only (each is shipped as a script, not imported there)."""
