"""Internals of the SIMULATED SGLang (not part of the real package's API)."""
