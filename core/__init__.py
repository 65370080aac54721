"""What every part may use and nothing of the project: absl's app.run with --help exiting 0 (cli.py) and a reader of
PyTorch state-dict files (torch_file.py)."""
