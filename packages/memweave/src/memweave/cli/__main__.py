"""`python -m memweave.cli`: the same as the `memweave` console script."""

from memweave.cli import main

main()
