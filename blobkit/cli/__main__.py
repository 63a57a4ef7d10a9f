"""``python -m blobkit.cli``: the command line."""

from blobkit.cli.app import main

if __name__ == "__main__":  # not when a spawned child process re-imports the parent's main module
    main()
