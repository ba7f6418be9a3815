"""Benchmarks run by ``contrasuite bench NAME [args]``: each module here has ``main(argv) -> int``."""
