"""Code search: mined docstring-to-code pairs, a bi-encoder, Soft-InfoNCE priors, CoSQA evaluation."""
