"""Files run on the GPU host itself, standard library only (each is shipped as a script, not imported there;
a script's parts, a package here, travel with it as a zip: sglang_deploy/deploy/hostscript.py PARTS)."""
