"""Tools for testing a task or a training loop without the hardware it targets (not used by any command).

- :mod:`~contrasuite.pipelines.testing.fake_cuda`: ``with fake_cuda(): ...`` makes the device ``cuda`` exist
  on a CPU-only machine, so device placement, autocast and checkpoint mapping are exercised without a GPU.
"""
