"""Makes `pytest --pyargs plugrad.testing --plugrad-device NAME` work from any directory: the
conformance suite brings its own pytest plugin when the project running it has not loaded it."""


def pytest_addoption(parser, pluginmanager):
  if not pluginmanager.has_plugin("plugrad.testing.pytest_plugin"):
    pluginmanager.import_plugin("plugrad.testing.pytest_plugin")
