pytest_plugins = ["plugrad.testing.pytest_plugin"]
