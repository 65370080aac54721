"""Evaluation, metrics only: the test likelihood and its stratified estimate (bound.py), sample quality (quality.py:
FID/KID, by frechet.py, in a feature space of features.py: the standard FID InceptionV3 of inception.py from a weights
file, or a small classifier trained on the embedded digits, classifier.py) and the periodic evaluation (periodic.py).
The drivers (drivers/) hand them the run they evaluate (training.setup.Setup) and its parameters; no module here
imports training/ (tests/test_layers.py)."""
