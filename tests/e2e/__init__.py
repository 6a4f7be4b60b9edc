"""End-to-end tests: deploys over real SSH to throwaway hosts (sglang_deploy/simulator/testbed)."""
