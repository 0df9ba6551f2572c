# every test directory (core, plugins, examples) gets the `device` fixture, --plugrad-device,
# --plugrad-shadow-device and spec checking from plugrad's own pytest plugin
pytest_plugins = ["plugrad.testing.pytest_plugin"]
