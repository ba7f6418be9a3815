"""contrasuite.core: contrastive objectives, negative sources, similarities and metrics.

Depends only on torch, numpy and the standard library.
"""
