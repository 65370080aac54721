"""First-stage autoencoders for latent diffusion, read from diffusers-format weights (nothing is downloaded):
Stable Diffusion's KL VAE (autoencoder_kl.py) and the LDM's VQ model (vq.py), loaded by weights.py, wrapped with
their scaling factor by base.py's `make_autoencoder(path)`."""

from latent.base import Autoencoder, make_autoencoder
from latent.weights import load_diffusers

__all__ = ["Autoencoder", "make_autoencoder", "load_diffusers"]
