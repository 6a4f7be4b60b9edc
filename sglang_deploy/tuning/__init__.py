"""Tuning: search a canary for the best launch settings and remember them per hardware class."""
