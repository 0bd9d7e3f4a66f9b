"""End-to-end scenarios: chains of ops from real user reports, device vs CPU (docs/SCENARIOS.md)."""
