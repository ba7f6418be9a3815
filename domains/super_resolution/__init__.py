"""Contrastive single-image super-resolution: EDSR with L1 and the PCL-SR positive/negative term."""
