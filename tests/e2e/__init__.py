"""End-to-end tests: deploys over real SSH to throwaway hosts (tests/testbed)."""
