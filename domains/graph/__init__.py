"""Heterogeneous graph contrastive learning: MEOW and AdaMEOW on HeCo/MEOW-layout datasets."""
