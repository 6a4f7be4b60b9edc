"""The SIMULATED SGLang server: ``build.py`` builds one wheel per SGLang version from
``src/sglang`` (SGLang's own flag parser from the version's catalog, its HTTP API, no model).
Installed on throwaway hosts and into local venvs only; it is not SGLang."""
