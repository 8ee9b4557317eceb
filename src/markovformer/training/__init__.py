"""Training on PyTorch Lightning: the task modules, optimiser and schedule, the jobs the CLI runs."""
