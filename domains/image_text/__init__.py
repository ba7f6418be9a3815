"""Image-text contrastive fine-tuning with generated hard negatives (CLIP / SigLIP; Sahin et al., WACV 2024)."""
