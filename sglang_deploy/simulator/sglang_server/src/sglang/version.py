# Rewritten by build.py with the version of each wheel.
__version__ = "0.0.0+sim.source"
