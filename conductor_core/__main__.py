"""``python -m conductor_core`` runs the ``conductor`` command."""

from conductor_core.cli import main

if __name__ == "__main__":
    main()
