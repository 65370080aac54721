"""Evaluation: sample-quality metrics, Frechet distance and KID (frechet.py) in a feature space (features.py): the
standard FID InceptionV3 (inception.py) from a weights file, or a small classifier trained on the embedded digits
(classifier.py); and above the run they evaluate, samples from a run's parameters (generate.py) and the evaluation
driver (evaluate.py: --mode=eval, the bound and its stratified estimate, the periodic evaluation)."""
