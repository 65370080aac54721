"""Sample-quality metrics: Frechet distance and KID (frechet.py) in a feature space (features.py): the standard FID
InceptionV3 (inception.py) from a weights file, or a small classifier trained on the embedded digits (classifier.py)."""
