"""Patchwise unpaired image translation: CUT, FastCUT and single-image CUT (Park et al., ECCV 2020)."""
