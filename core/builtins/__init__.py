"""Features plugrad ships as plugins of its own: the PYTHON reference device and DEBUG output."""
