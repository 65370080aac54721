"""The drivers, above the parts they drive: the training loop (train.py: `train(config, workdir)`), --mode=eval
(evaluate.py: `evaluate(config, workdir)` and the lines main.py prints of it) and `run` (run.py), what main.py does
once its flags are parsed. They build the run (training/setup.py) and hand it, with its parameters, to the
evaluators (evaluation/) and to generation (diffusion/generate.py), which import nothing of training/."""
