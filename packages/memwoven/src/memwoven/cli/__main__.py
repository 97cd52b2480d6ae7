"""`python -m memwoven.cli`: the same as the `memwoven` console script."""

from memwoven.cli import main

main()
