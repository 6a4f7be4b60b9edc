"""The weight stager's parts: sglang_deploy/deploy/host/stage_weights.py is the script, these are
what it imports (standard library only, nothing else of the project). They travel with it: the
deploy runs it as a zipapp that holds them (sglang_deploy/deploy/hostscript.py), the continuous
check's copy has them beside it as ``stager.zip`` (sglang_deploy/deploy/watching.py).

- messages: every line printed (scrubbed of secrets), a refusal's one line and exit status
- inputs: what comes from outside (a listing, the arguments, the env file, a marker), checked as data
- hub: HTTP with an overall deadline: the Hub's file list and one file's download, resumed
- store: the model store, reached only through folders opened without following links; a
  file verified and linked into its snapshot
- rehash: a complete snapshot re-hashed against its marker's manifest (``--verify``, ``--verify-served``)
- prune: old snapshots and unlinked blobs removed (``--prune``)
"""
