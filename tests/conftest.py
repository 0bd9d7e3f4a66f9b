"""Shared by every self-test: pytest's own `pytester` fixture, for tests of the plugin."""

pytest_plugins = ["pytester"]
