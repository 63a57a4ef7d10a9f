"""``python -m blobkit.cli``: the command line."""

from blobkit.cli.app import main

main()
