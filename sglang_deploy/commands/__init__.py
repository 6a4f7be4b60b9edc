"""The top floor: the commands people run (the CLI, the demo, rollout and tune), which drive pyinfra."""
