"""Tuning: the search over launch settings that `sglang-deploy tune` runs on a canary (space, search,
trials, objectives). What it found is remembered in the planner's tuning record
(sglang_deploy/plan/tuning_record.py), which plans read back."""
