"""pyinfra glue: reading inventories, facts, operations and @deploy roles.

Thin by design: everything that decides lives in the pure core
(`sglang_deploy`), which never imports from here.
"""
