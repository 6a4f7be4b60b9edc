"""The planner: from an inventory's settings, a host's probed GPUs and the model's checkpoint to
the launch flags, files and revision of one SGLang deployment. Pure: no pyinfra, no I/O of its own."""
