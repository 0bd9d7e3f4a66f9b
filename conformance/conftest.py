"""Registers the conformance plugin when the package is used from a checkout (not installed)."""


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("conformance"):
        import conformance.plugin

        pluginmanager.register(conformance.plugin, "conformance")
